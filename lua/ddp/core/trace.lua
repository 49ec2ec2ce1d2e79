-- ddp.core.trace: the trace's recording -- the spans the library's own hot
-- spots add while a trace is on (each module's forward by its path, the
-- step's phases, checkpoint saves, at the ops level each C op), the
-- runtime's (ddplua_trace.h: autograd nodes, collectives, waits, on CUDA
-- each op's work on the device's streams), and the rank's Chrome
-- trace-event file.  ddp.trace (lua/ddp/trace.lua) starts
-- and stops it and aligns the ranks' clocks; the launcher merges the ranks'
-- files (cli/trace.c).
--
-- Off, each hook is one field load and a branch (M.on).  Lua spans are
-- taken on the monotonic clock and written on the runtime's
-- (CLOCK_REALTIME), through the offset between them measured at start.
local B = require "ddp.ffi"
local core = require "ddp.core"

local C, ffi = B.C, B.ffi
local clock = core.clock
local format, concat, floor = string.format, table.concat, math.floor

local M = { on = false }

-- the rows of a rank's process in the trace, in order
local ROWS = { "step", "phases", "forward (modules)", "backward (modules)", "backward (autograd ops)",
               "communication" }
local T_STEP, T_PHASE, T_FWD, T_BWD, T_NODE, T_COMM = 0, 1, 2, 3, 4, 5
M.T_STEP, M.T_PHASE = T_STEP, T_PHASE
-- a device's streams: rows T_DEVICE + 4 * device + stream (dl_trace_stream)
local T_DEVICE = 16
local STREAMS = { [0] = "compute", "copy", "NCCL" }

local spans = {}     -- {name, cat, tid, t0, t1, args} on the monotonic clock
-- module forward calls, in flat arrays (no table per call): name, path,
-- start and end, the autograd nodes [s0, s1) they made
local c_name, c_path, c_t0, c_t1, c_s0, c_s1 = {}, {}, {}, {}, {}, {}
local n_calls = 0
local real_minus_mono = 0
local ops_level = false  -- this trace records C ops and autograd nodes
local dropped_lua = 0
local max_events = 1000000
local n_events = 0

local function add(s)
  if n_events >= max_events then
    dropped_lua = dropped_lua + 1
    return
  end
  n_events = n_events + 1
  spans[#spans + 1] = s
end

-- A span of the step's phases (tid T_PHASE) or steps (T_STEP), seconds on
-- the monotonic clock.
function M.span(name, cat, tid, t0, t1, args)
  add({ name, cat, tid, t0, t1, args })
end

-- The module's forward call from t0 to now: s0..s1 are the autograd nodes
-- it made (their backward is the module's).
local next_seq = C.dl_autograd_next_seq
M.seq = next_seq
function M.module_call(name, path, t0, s0)
  if n_events >= max_events then
    dropped_lua = dropped_lua + 1
    return
  end
  n_events = n_events + 1
  local k = n_calls + 1
  n_calls = k
  c_name[k], c_path[k], c_t0[k], c_t1[k], c_s0[k], c_s1[k] = name, path, t0, clock(), s0, next_seq()
end

-- -- C ops by name (the ops level) -----------------------------------------------

local op_names = nil  -- the runtime's function address -> its name
local intptr = ffi.typeof("intptr_t")
local function load_op_names()
  op_names = {}
  for name in require("ddp.cdef"):gmatch("(dl_[%w_]+)%s*%(") do
    local ok, f = pcall(function() return C[name] end)
    if ok and type(f) == "cdata" then
      local a = tonumber(ffi.cast(intptr, f))
      if a then op_names[a] = name:sub(4) end
    end
  end
end

-- handles.new while C ops are traced: the call, a span named after the
-- runtime function
local handles = require "ddp.core.handles"
local new_untraced = handles._new_untraced
local function op_done(f, t0, ...)
  add({ op_names[tonumber(ffi.cast(intptr, f))] or "op", "op", T_FWD, t0, clock() })
  return ...
end
local function traced_new(f, ...)
  return op_done(f, clock(), new_untraced(f, ...))
end

-- -- Start, stop, the file -----------------------------------------------------

-- Starts recording; opts {ops = bool, max_events = n}.
function M.start(opts)
  ops_level = opts.ops and true or false
  max_events = opts.max_events or 1000000
  spans, dropped_lua, n_events = {}, 0, 0
  c_name, c_path, c_t0, c_t1, c_s0, c_s1, n_calls = {}, {}, {}, {}, {}, {}, 0
  real_minus_mono = core.time() - clock()
  if opts.ops and not op_names then load_op_names() end
  C.dl_trace_set(1, max_events)
  if ops_level then handles._set_op_hook(traced_new) end
  M.on = true
end

local function json_str(s)
  s = tostring(s)
  return '"' .. s:gsub('[%c"\\]', function(c)
    if c == '"' then return '\\"' elseif c == "\\" then return "\\\\" end
    return format("\\u%04x", c:byte())
  end) .. '"'
end

-- "k": v pairs of a table of strings and numbers, in key order
local function json_args(a)
  if not a then return "" end
  local keys = {}
  for k in pairs(a) do keys[#keys + 1] = k end
  table.sort(keys)
  local parts = {}
  for i, k in ipairs(keys) do
    local v = a[k]
    parts[i] = json_str(k) .. ":" .. (type(v) == "number" and format("%.10g", v) or json_str(v))
  end
  return ',"args":{' .. concat(parts, ",") .. "}"
end

-- the runtime's events, all of them
local function take_c()
  local out = {}
  local n = tonumber(C.dl_trace_pending())
  if n == 0 then return out end
  local buf = ffi.new("dl_trace_event[?]", n)
  n = tonumber(C.dl_trace_take(buf, n))
  for i = 0, n - 1 do
    local e = buf[i]
    out[#out + 1] = { kind = tonumber(e.kind), thread = tonumber(e.thread), t0 = e.t0, t1 = e.t1,
                      seq = tonumber(e.seq), bucket = tonumber(e.bucket), group = tonumber(e.group),
                      name = ffi.string(e.name), note = ffi.string(e.note) }
  end
  return out
end

-- Each module call's backward: from the first of its nodes to start to
-- the last to end (nodes is sorted by seq).
local function backward_of(nodes, s0, s1)
  local lo, hi = 1, #nodes + 1
  while lo < hi do
    local mid = floor((lo + hi) / 2)
    if nodes[mid].seq < s0 then lo = mid + 1 else hi = mid end
  end
  local t0, t1 = nil, nil
  for i = lo, #nodes do
    local e = nodes[i]
    if e.seq >= s1 then break end
    if t0 == nil or e.t0 < t0 then t0 = e.t0 end
    if t1 == nil or e.t1 > t1 then t1 = e.t1 end
  end
  return t0, t1
end

-- Stops recording and returns the rank's events as a JSON array's
-- elements (strings), and how many were dropped.  who = {rank =, host =,
-- pid =, offset = seconds to add to this rank's clock for rank 0's}.
function M.stop(who)
  M.on = false
  handles._set_op_hook(nil)
  C.dl_trace_set(0, 0)
  local pid, off = who.rank, who.offset or 0
  local out = {}
  local function ev(name, cat, tid, t0, t1, args)  -- t0, t1: seconds on the runtime's clock
    out[#out + 1] = format('{"name":%s,"cat":"%s","ph":"X","ts":%.3f,"dur":%.3f,"pid":%d,"tid":%d%s}',
                           json_str(name), cat, (t0 + off) * 1e6, (t1 - t0) * 1e6, pid, tid, json_args(args))
  end
  out[1] = format('{"name":"process_name","ph":"M","pid":%d,"args":{"name":%s}}', pid,
                  json_str(format("rank %d (%s, pid %d)", who.rank, who.host or "?", who.pid or 0)))
  out[2] = format('{"name":"process_sort_index","ph":"M","pid":%d,"args":{"sort_index":%d}}', pid, pid)
  for i, row in ipairs(ROWS) do
    out[#out + 1] = format('{"name":"thread_name","ph":"M","pid":%d,"tid":%d,"args":{"name":%s}}', pid, i - 1,
                           json_str(row))
    out[#out + 1] = format('{"name":"thread_sort_index","ph":"M","pid":%d,"tid":%d,"args":{"sort_index":%d}}',
                           pid, i - 1, i - 1)
  end
  for _, s in ipairs(spans) do ev(s[1], s[2], s[3], s[4] + real_minus_mono, s[5] + real_minus_mono, s[6]) end
  local cev = take_c()
  local nodes = {}
  local device_rows = {}
  for _, e in ipairs(cev) do
    if e.kind == C.DL_TK_DEVICE then
      local tid = T_DEVICE + 4 * e.group + e.thread
      local stream = STREAMS[e.thread] or tostring(e.thread)
      if not device_rows[tid] then
        device_rows[tid] = true
        out[#out + 1] = format('{"name":"thread_name","ph":"M","pid":%d,"tid":%d,"args":{"name":"cuda:%d %s stream"}}',
                               pid, tid, e.group, stream)
        out[#out + 1] = format('{"name":"thread_sort_index","ph":"M","pid":%d,"tid":%d,"args":{"sort_index":%d}}',
                               pid, tid, tid)
      end
      ev(e.name, "cuda", tid, e.t0, e.t1, { kernel = e.note, stream = stream, device = "cuda:" .. e.group })
    elseif e.kind == C.DL_TK_NODE then
      nodes[#nodes + 1] = e
      if ops_level then ev(e.name, "autograd", T_NODE, e.t0, e.t1, { seq = e.seq }) end
    elseif e.kind == C.DL_TK_COLLECTIVE then
      local args = { seq = e.seq, group = e.group, thread = e.thread == 1 and "communication" or "caller" }
      if e.bucket >= 0 then args.bucket = e.bucket end
      if e.note ~= "" then args.note = e.note end
      ev(e.name, "communication", T_COMM, e.t0, e.t1, args)
    else
      ev(e.name, "wait", T_PHASE, e.t0, e.t1, { seq = e.seq })
    end
  end
  table.sort(nodes, function(a, b) return a.seq < b.seq end)
  for k = 1, n_calls do
    local args = { module = c_path[k] }
    ev(c_name[k], "forward", T_FWD, c_t0[k] + real_minus_mono, c_t1[k] + real_minus_mono, args)
    if c_s1[k] > c_s0[k] then
      local t0, t1 = backward_of(nodes, c_s0[k], c_s1[k])
      if t0 then ev(c_name[k], "backward", T_BWD, t0, t1, args) end
    end
  end
  local dropped = dropped_lua + tonumber(C.dl_trace_dropped())
  spans = {}
  c_name, c_path, c_t0, c_t1, c_s0, c_s1, n_calls = {}, {}, {}, {}, {}, {}, 0
  return out, dropped
end

return M
