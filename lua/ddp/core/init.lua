-- ddp.core: what every module of the library shares, in one table:
-- raising errors at the user's line (ddp.core.errors), owning C tensor
-- handles (ddp.core.handles), checking arguments (ddp.core.args), Lua
-- values to tensors and back (ddp.core.values), the class idiom
-- (ddp.core.class), the monotonic clock and the wall clock.
local B = require "ddp.ffi"
local ffi = B.ffi

local M = { C = B.C, ffi = ffi }

-- gather(into, modname, parts): how a folder's module (this one,
-- ddp.nn, ddp.dist, ...) is made of its parts -- each part module hands
-- over a table of its own, and its names go into `into`, but those that
-- start with _ (the parts' own, for each other).  A name given twice is an
-- error, so the order parts are taken in cannot change the result.
function M.gather(into, modname, parts)
  for _, part in ipairs(parts) do
    for name, v in pairs(require(part)) do
      if name:sub(1, 1) ~= "_" then
        if into[name] ~= nil then error(("%s: %s is given twice (again by %s)"):format(modname, name, part)) end
        into[name] = v
      end
    end
  end
  return into
end

M.gather(M, "ddp.core", { "ddp.core.errors", "ddp.core.handles", "ddp.core.args", "ddp.core.values",
                          "ddp.core.class" })
M.add_lib_file(debug.getinfo(1, "S").source)

-- Seconds on the monotonic clock, for deadlines and rates (ddp.dist's
-- rendezvous, ddp.progress).  Declared under a name of our own (bound to
-- libc's symbol): a script's own declaration of clock_gettime, with its
-- own types, must still work.
pcall(ffi.cdef, [[
typedef struct { long tv_sec; long tv_nsec; } dl_core_ts;
int dl_core_clock_gettime(int, dl_core_ts *) __asm__("clock_gettime");
]])
local clock_ts = ffi.new("dl_core_ts")
function M.clock()
  ffi.C.dl_core_clock_gettime(1, clock_ts)  -- CLOCK_MONOTONIC
  return tonumber(clock_ts.tv_sec) + tonumber(clock_ts.tv_nsec) * 1e-9
end

-- Unix time in seconds, as a float with the clock's resolution (Python's
-- time.time(); os.time() has whole seconds only): the wall time of
-- ddp.SummaryWriter's points, ddp.time() for scripts.
function M.time()
  ffi.C.dl_core_clock_gettime(0, clock_ts)  -- CLOCK_REALTIME
  return tonumber(clock_ts.tv_sec) + tonumber(clock_ts.tv_nsec) * 1e-9
end

return M
