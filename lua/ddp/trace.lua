-- ddp.trace: one timeline of every rank.  While a trace is on, each rank
-- records spans (each module's forward and backward by its path, the
-- step's phases, DDP's bucket all-reduces and the waits for them, every
-- collective, checkpoint saves; with {ops = true} each C op and autograd
-- node too) and at the end writes DIR/rank<N>.json, Chrome trace events
-- with one process row per rank on rank 0's clock.  The launcher merges
-- them into DIR/trace.json (`ddplua trace DIR` does it for files copied
-- from a cluster), which opens in ui.perfetto.dev and chrome://tracing.
--
--   ddp.trace.start("traces", {ops = false})   -- every rank: it aligns their clocks
--   ... steps 100 to 110 ...
--   ddp.trace.stop()                           -- the rank's file; returns its path
--
-- `ddplua --trace DIR` starts it at ddp.init and stops it when the script
-- ends (DDP_TRACE, DDP_TRACE_OPS=1).
local core = require "ddp.core"
local rec = require "ddp.core.trace"
local dist = require "ddp.dist"
local group = require "ddp.dist.group"
local factory = require "ddp.tensor.factory"
local files = require "ddp.data.files"

local ffi, C = core.ffi, core.C
local raise, show = core.raise, core.show

core.add_lib_file(debug.getinfo(1, "S").source)
-- Declared under names of our own (bound to libc's symbols): a script's
-- own declarations of these, with their own types, must still work.
pcall(ffi.cdef, [[
int dl_trace_gethostname(char *name, size_t len) __asm__("gethostname");
char *dl_trace_realpath(const char *path, char *resolved) __asm__("realpath");
int dl_trace_getpid(void) __asm__("getpid");
]])

local M = {}
local state = nil  -- {dir =, path =, offset =}

local function hostname()
  local buf = ffi.new("char[256]")
  if ffi.C.dl_trace_gethostname(buf, 255) ~= 0 then return "?" end
  return ffi.string(buf)
end

local function absolute(dir)
  local buf = ffi.new("char[4096]")
  local p = ffi.C.dl_trace_realpath(dir, buf)
  return p ~= nil and ffi.string(p) or dir
end

-- Seconds to add to this rank's clock to read rank 0's: 0 on rank 0's
-- host (one clock); elsewhere the median over 5 rounds of rank 0's clock
-- at the end of a barrier less this rank's (good to the barrier's skew,
-- tens of microseconds across nodes).  A collective: every rank calls it.
local function clock_offset()
  if dist.world_size() == 1 or not dist.is_initialized() then return 0 end
  local hosts = dist.all_gather_object(hostname())
  local one_host = true  -- every rank sees the same list, so all skip the rounds or none does
  for _, h in ipairs(hosts) do one_host = one_host and h == hosts[1] end
  if one_host then return 0 end
  local t = factory.zeros({ 1 }, { dtype = "float64" })
  local offs = {}
  for i = 1, 5 do
    dist.barrier()
    local mine = core.time()
    t:fill_(mine)
    dist.broadcast(t, 0)
    offs[i] = t:item() - mine
  end
  if hosts[dist.rank() + 1] == hosts[1] then return 0 end
  table.sort(offs)
  return offs[3]
end

local start_opts = { ops = "true or false", max_events = "a whole number > 0" }

-- ddp.trace.start(dir[, {ops = false, max_events = 1000000}])
function M.start(dir, opts)
  if type(dir) ~= "string" or dir == "" then
    raise("ddp.trace.start: dir must be the name of a folder for the trace files, got " .. show(dir))
  end
  if opts ~= nil and type(opts) ~= "table" then
    raise("ddp.trace.start: options must be a table such as {ops = true}, got " .. show(opts))
  end
  opts = opts or {}
  for k, v in pairs(opts) do
    if not start_opts[k] then raise("ddp.trace.start: unknown option " .. show(k) .. " (expected ops or max_events)") end
    local ok = k == "ops" and type(v) == "boolean" or k == "max_events" and type(v) == "number" and v >= 1 and v % 1 == 0
    if not ok then raise(("ddp.trace.start: %s must be %s, got %s"):format(k, start_opts[k], show(v))) end
  end
  if state then raise("ddp.trace.start: a trace is on already (into " .. state.dir .. "); call ddp.trace.stop() first") end
  local ok, err = files.make_dirs(dir)
  if not ok then raise("ddp.trace.start: cannot make the trace folder " .. err) end
  local offset = clock_offset()
  local abs = absolute(dir)
  state = { dir = abs, path = ("%s/rank%d.json"):format(abs, dist.rank()), offset = offset }
  -- the launcher merges every folder a rank traced into (cli/trace.c)
  local store = group._store()
  if store then pcall(store.set, store, "ddp/trace/" .. dist.rank(), abs) end
  rec.start({ ops = opts.ops, max_events = opts.max_events })
end

-- Whether a trace is on.
function M.is_on() return state ~= nil end

-- ddp.trace.stop() -> the path of this rank's file.  Not a collective.
function M.stop()
  if not state then raise("ddp.trace.stop: no trace is on (ddp.trace.start(dir) starts one)") end
  local st = state
  state = nil
  local events, dropped = rec.stop({ rank = dist.rank(), host = hostname(), pid = ffi.C.dl_trace_getpid(),
                                     offset = st.offset })
  local body = table.concat(events, ",\n")
  local text = "[\n" .. body .. "\n]\n"
  files.write_atomic(st.path, { { text, #text } }, "ddp.trace.stop")
  -- a world of one (a plain `ddplua train.lua`, --nproc 1): no launcher
  -- merges a folder that only ddp.trace.start named, so the rank writes
  -- the merged file too, as cli/trace.c would
  if dist.world_size() == 1 then
    local merged = '{"displayTimeUnit": "ms", "traceEvents": [\n' .. body .. "\n]}\n"
    files.write_atomic(st.dir .. "/trace.json", { { merged, #merged } }, "ddp.trace.stop")
  end
  if dropped > 0 then
    io.stderr:write(("ddplua: warning: rank %d's trace dropped %d events past max_events (ddp.trace.start's "
      .. "option; DDP_TRACE_MAX_EVENTS under --trace)\n"):format(dist.rank(), dropped))
  end
  return st.path
end

-- `ddplua --trace DIR`: from ddp.init to the end of the script.
local sentinel = nil
group._after_init[#group._after_init + 1] = function()
  local dir = os.getenv("DDP_TRACE")
  if not dir or dir == "" or state then return end
  local max = tonumber(os.getenv("DDP_TRACE_MAX_EVENTS") or "")
  M.start(dir, { ops = os.getenv("DDP_TRACE_OPS") == "1", max_events = max and max >= 1 and math.floor(max) or nil })
  if not sentinel then
    sentinel = newproxy(true)
    getmetatable(sentinel).__gc = function()
      if state then
        local ok, e = pcall(M.stop)
        if not ok then io.stderr:write("ddplua: the trace could not be written: " .. tostring(e) .. "\n") end
      end
    end
  end
end

return M
