-- ddp.core: what every module of the library shares, in one table:
-- raising errors at the user's line (ddp.core.errors), owning C tensor
-- handles (ddp.core.handles), checking arguments (ddp.core.args), Lua
-- values to tensors and back (ddp.core.values), the class idiom
-- (ddp.core.class), and the monotonic clock.
local B = require "ddp.ffi"
local ffi = B.ffi

local M = { C = B.C, ffi = ffi }

-- Each part hands over a table of its own; a name given twice is an
-- error, so the order they are taken in cannot change the result.
for _, part in ipairs { "ddp.core.errors", "ddp.core.handles", "ddp.core.args", "ddp.core.values",
                        "ddp.core.class" } do
  for name, v in pairs(require(part)) do
    if M[name] ~= nil then error(("ddp.core: %s is given twice (again by %s)"):format(name, part)) end
    M[name] = v
  end
end
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

return M
