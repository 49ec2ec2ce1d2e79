-- ddp.summary: ddp.SummaryWriter, TensorBoard logs and a JSON-lines metrics
-- file with PyTorch's interface (torch.utils.tensorboard.SummaryWriter).
--
--   local w = ddp.SummaryWriter("runs/exp1")         -- on every rank
--   w:add_scalar("loss", loss, step)                  -- rank 0's value
--   w:add_scalar("loss", loss, step, { reduce = "mean" })  -- over the ranks
--   w:close()
--
-- Every rank makes the writer and calls its methods; rank 0 alone writes
-- (logdir/events.out.tfevents.<time>.<host>.<pid>.<n>, logdir/metrics.jsonl),
-- so a job has one event file, not one per rank.  A call with `reduce` is a
-- collective (one all_reduce): every rank must make it, with the same tag
-- and step, which the same all_reduce checks.  The rest touch no other rank.
--
-- Records are kept in memory and appended to the files, whole, every
-- max_queue points, every flush_secs seconds (checked at each call), at
-- flush(), close(), and when the writer is collected or the program ends.
-- With purge_step = k (a run resumed from step k), TensorBoard drops the
-- points of step >= k that the earlier run wrote (PyTorch's convention: a
-- SessionLog START event at step k), and metrics.jsonl is rewritten
-- without them (docs/observability.md says why).
local core = require "ddp.core"
local dist = require "ddp.dist"
local factory = require "ddp.tensor.factory"
local json = require "ddp.data.json"
local files = require "ddp.data.files"
local tfevents = require "ddp.summary.tfevents"
local histogram = require "ddp.summary.histogram"
local C, ffi = core.C, core.ffi
local raise, show, is_integer, is_tensor = core.raise, core.show, core.is_integer, core.is_tensor
local clock, now = core.clock, core.time
local format, concat = string.format, table.concat
local type, pairs, ipairs, tonumber, tostring = type, pairs, ipairs, tonumber, tostring

core.add_lib_file(debug.getinfo(1, "S").source)

-- Under names of our own (bound to libc's symbols), as ddp.data.files:
-- a script's own declarations must still work.
pcall(ffi.cdef, [[
int dl_summary_gethostname(char *name, size_t len) __asm__("gethostname");
int dl_summary_getpid(void) __asm__("getpid");
]])

local M = {}

local function hostname()
  local buf = ffi.new("char[256]")
  if C.dl_summary_gethostname(buf, 255) ~= 0 then return "localhost" end
  return ffi.string(buf)
end

-- Numbers as JSON and Python's json module read them: the shortest of
-- %.15g / %.17g that gives the number back; NaN and the infinities as
-- Python writes them (NaN, Infinity), since a diverged loss is worth
-- keeping.
local function json_num(v)
  if v ~= v then return "NaN" end
  if v == math.huge then return "Infinity" end
  if v == -math.huge then return "-Infinity" end
  if is_integer(v) and v > -2^53 and v < 2^53 then return format("%d", v) end
  local s = format("%.15g", v)
  if tonumber(s) ~= v then s = format("%.17g", v) end
  return s
end

local uid = 0  -- the last part of the event file names, as tensorboard's _global_uid

-- -- Files -----------------------------------------------------------------

-- Appends s to path, one write (the stream unbuffered, so the whole string
-- goes in one write(2) call and a crash leaves whole records).
local function append(path, s)
  local f, err = io.open(path, "ab")
  if not f then raise("SummaryWriter: cannot append to " .. tostring(err)) end
  f:setvbuf("no")
  local ok, werr = f:write(s)
  f:close()
  if not ok then raise(("SummaryWriter: %s: write failed: %s"):format(path, tostring(werr))) end
end

-- A new event file in dir, its first record written at once (as
-- tensorboard's EventFileWriter): file_version "brain.Event:2"; then, for
-- a resumed run, PyTorch's two purge events at step purge_step.
local function new_run(st, dir)
  local ok, err = files.make_dirs(dir)
  if not ok then raise("SummaryWriter: cannot make the log directory " .. err) end
  uid = uid + 1
  local t = now()
  local path = format("%s/events.out.tfevents.%010d.%s.%d.%d%s", dir, math.floor(t), st.host,
                      C.dl_summary_getpid(), uid, st.suffix)
  local recs = { tfevents.record(tfevents.event { wall_time = t, file_version = "brain.Event:2", writer = "ddplua" }) }
  if st.purge_step then
    recs[2] = tfevents.record(tfevents.event { wall_time = t, step = st.purge_step, file_version = "brain.Event:2" })
    recs[3] = tfevents.record(tfevents.event { wall_time = t, step = st.purge_step, session_start = true })
  end
  local f, ferr = io.open(path, "wb")
  if not f then raise("SummaryWriter: cannot create " .. tostring(ferr)) end
  f:setvbuf("no")
  local wok, werr = f:write(concat(recs))
  f:close()
  if not wok then raise(("SummaryWriter: %s: write failed: %s"):format(path, tostring(werr))) end
  return { path = path, pending = {} }
end

-- The points of metrics.jsonl to keep on opening it: all but those of
-- step >= purge_step (a resumed run's superseded points) and a last line
-- cut short (a crash mid-write); nil when the file is fine as it is.
local function jsonl_kept(text, purge_step)
  local keep, changed = {}, false
  local pos = 1
  while pos <= #text do
    local e = text:find("\n", pos, true)
    if not e then changed = true break end  -- a torn last line
    local line = text:sub(pos, e)
    local step = tonumber(line:match('"step":(%-?%d+)'))
    if purge_step and step and step >= purge_step then
      changed = true
    else
      keep[#keep + 1] = line
    end
    pos = e + 1
  end
  return changed and concat(keep) or nil
end

-- Rewrites path atomically (files.write_atomic: the old file or the new
-- one, never a mix) when its points need dropping.
local function open_jsonl(path, purge_step)
  local f = io.open(path, "rb")
  if not f then return end
  local text = f:read("*a")
  f:close()
  local kept = jsonl_kept(text, purge_step)
  if not kept then return end
  files.write_atomic(path, { { kept, #kept } }, "SummaryWriter")
end

-- Writes every pending record (st: the writer's state, shared with its
-- finalizer).
local function flush_state(st)
  for _, run in pairs(st.runs) do
    if #run.pending > 0 then
      local s = concat(run.pending)
      run.pending = {}
      append(run.path, s)
    end
  end
  if #st.jsonl > 0 then
    local s = concat(st.jsonl)
    st.jsonl = {}
    append(st.jsonl_path, s)
  end
  st.queued, st.last_flush = 0, clock()
end

-- -- Arguments ---------------------------------------------------------------

local REDUCE = { mean = true, sum = true, max = true, min = true }

local function check_tag(op, tag, what)
  if type(tag) ~= "string" or tag == "" then
    raise(("%s: %s must be a non-empty string, got %s"):format(op, what or "tag", show(tag)))
  end
end

local function check_step(op, step)
  if step == nil then return 0 end
  if not is_integer(step) then raise(("%s: step must be an integer, got %s"):format(op, show(step))) end
  return step
end

local function scalar_arg(op, v, what)
  if is_tensor(v) then
    if v:numel() ~= 1 then
      raise(("%s: %s is a tensor of %d elements; expected a number or a one-element tensor"):format(op, what, v:numel()))
    end
    return v:item()
  end
  if type(v) ~= "number" then raise(("%s: %s must be a number or a one-element tensor, got %s"):format(op, what, show(v))) end
  return v
end

local function walltime_arg(op, opts)
  local w = opts.walltime
  if w == nil then return now() end
  if type(w) ~= "number" then raise(("%s: walltime must be a number (Unix seconds), got %s"):format(op, show(w))) end
  return w
end

-- -- Reductions ----------------------------------------------------------------

-- values (a list of numbers) reduced over the ranks by `how`, in one
-- all_reduce of float64 that also checks every rank logs the same key
-- (tag and step): with h a 20-bit hash of the key, "sum" and "mean" add
-- {h, h^2} (their sums are n*h and n*h^2 only when every h is the same),
-- "max" and "min" reduce {h, -h} (both come back only when every h is the
-- same); exact in float64 up to 2^12 ranks.  A mismatch raises on every
-- rank, so none is left waiting.
local function reduce_values(op, values, how, key)
  local ws = dist.world_size()
  if ws == 1 then return values end
  if not dist.is_initialized() then
    raise(("%s: reduce = %q needs ddp.init() first (a world of %d ranks reduces through the process group)")
          :format(op, how, ws))
  end
  local h = tfevents.crc32c(key) % 1048576
  local n = #values
  local list = {}
  for i = 1, n do list[i] = values[i] end
  local sq = how == "sum" or how == "mean"
  list[n + 1], list[n + 2] = h, sq and h * h or -h
  local t = factory.tensor(list, { dtype = "float64", device = "cpu" })
  dist.all_reduce(t, (how == "mean") and "sum" or how)
  local p = ffi.cast("double *", C.dl_tensor_data(t))
  local ok
  if sq then ok = p[n] == ws * h and p[n + 1] == ws * h * h
  else ok = p[n] == h and p[n + 1] == -h end
  if not ok then
    raise(("%s: the ranks logged different points in one reduction (rank %d: %s); every rank must call it "
           .. "with the same tag and step"):format(op, dist.rank(), key))
  end
  local out = {}
  for i = 1, n do out[i] = how == "mean" and p[i - 1] / ws or p[i - 1] end
  return out
end

-- -- SummaryWriter -------------------------------------------------------------

local Writer = core.class("ddp.SummaryWriter")

local WRITER_OPTS = { flush_secs = true, purge_step = true, filename_suffix = true, max_queue = true }

-- ddp.SummaryWriter([logdir][, {flush_secs = 120, purge_step =,
-- filename_suffix = "", max_queue = 10}]): logdir defaults to PyTorch's
-- runs/<Mon><DD>_<HH-MM-SS>_<host>.
function Writer:init(logdir, opts)
  local op = "SummaryWriter"
  if type(logdir) == "table" and opts == nil then logdir, opts = nil, logdir end
  opts = core.check_opts(opts, op, WRITER_OPTS)
  local host = hostname()
  if logdir == nil then logdir = "runs/" .. os.date("%b%d_%H-%M-%S") .. "_" .. host end
  if type(logdir) ~= "string" or logdir == "" then
    raise(op .. ": logdir must be a non-empty string, got " .. show(logdir))
  end
  local fs, ps, suffix, mq = opts.flush_secs, opts.purge_step, opts.filename_suffix, opts.max_queue
  if fs ~= nil and (type(fs) ~= "number" or not (fs > 0)) then
    raise(op .. ": flush_secs must be a number of seconds > 0, got " .. show(fs))
  end
  if ps ~= nil and not (is_integer(ps) and ps >= 0) then
    raise(op .. ": purge_step must be an integer >= 0 (the step the run resumes from), got " .. show(ps))
  end
  if suffix ~= nil and (type(suffix) ~= "string" or suffix:find("/", 1, true)) then
    raise(op .. ": filename_suffix must be a string without '/', got " .. show(suffix))
  end
  if mq ~= nil and not (is_integer(mq) and mq >= 1) then
    raise(op .. ": max_queue must be an integer >= 1, got " .. show(mq))
  end
  logdir = logdir:gsub("/+$", "")
  self.log_dir = logdir
  self.writes = dist.rank() == 0
  if not self.writes then return end
  local st = {
    runs = {}, jsonl = {}, queued = 0, last_flush = clock(), host = host, suffix = suffix or "",
    flush_secs = fs or 120, max_queue = mq or 10, purge_step = ps, dir = logdir,
    jsonl_path = logdir .. "/metrics.jsonl",
  }
  self._st = st
  st.runs[""] = new_run(st, logdir)
  open_jsonl(st.jsonl_path, ps)
  -- the points still in memory when the writer is collected, or when the
  -- program ends (lua_close runs the finalizers), are written then
  self._gc = ffi.gc(ffi.new("char[1]"), function() if not st.closed then pcall(flush_state, st) end end)
end

-- The event file of run name (add_scalars' logdir/<main_tag>_<name>),
-- made on first use.
local function run_of(st, name)
  local run = st.runs[name]
  if not run then
    run = new_run(st, st.dir .. "/" .. name)
    st.runs[name] = run
  end
  return run
end

local function queue(self, run, step, wall_time, value)
  local st = self._st
  run.pending[#run.pending + 1] = tfevents.record(tfevents.event {
    wall_time = wall_time, step = step, summary = tfevents.summary { value } })
  st.queued = st.queued + 1
end

local function queue_jsonl(st, tag, run, step, value, wall_time)
  st.jsonl[#st.jsonl + 1] = format('{"tag":%s,%s"step":%d,"value":%s,"wall_time":%s}\n', json.encode(tag),
    run and ('"run":' .. json.encode(run) .. ",") or "", step, json_num(value), json_num(wall_time))
end

local function maybe_flush(st)
  if st.queued >= st.max_queue or clock() - st.last_flush >= st.flush_secs then flush_state(st) end
end

local function live(self, op)
  if self._closed then raise(op .. ": the writer is closed") end
end

local SCALAR_OPTS = { reduce = true, walltime = true }

local function reduce_arg(op, opts)
  local r = opts.reduce
  if r ~= nil and not REDUCE[r] then
    raise(('%s: reduce must be "mean", "sum", "max" or "min", got %s'):format(op, show(r)))
  end
  return r
end

-- w:add_scalar(tag, value, step[, {reduce =, walltime =}]): one point.
-- value: a number or a one-element tensor.  Without reduce: rank 0's
-- value, no communication; with reduce ("mean", "sum", "max", "min"): the
-- value reduced over the ranks -- a collective every rank must call.
function Writer:add_scalar(tag, value, step, opts)
  local op = "add_scalar"
  live(self, op)
  check_tag(op, tag)
  value = scalar_arg(op, value, "value")
  step = check_step(op, step)
  opts = core.check_opts(opts, op, SCALAR_OPTS)
  local how = reduce_arg(op, opts)
  local wall_time = walltime_arg(op, opts)
  if how then value = reduce_values(op, { value }, how, format("%s at step %d", show(tag), step))[1] end
  if not self.writes then return end
  local st = self._st
  queue(self, st.runs[""], step, wall_time, tfevents.scalar_value(tag, value))
  queue_jsonl(st, tag, nil, step, value, wall_time)
  maybe_flush(st)
end

-- w:add_scalars(main_tag, {name = value, ...}, step[, opts]): several
-- curves in one chart, as PyTorch's: each name's points go to a run of
-- its own, logdir/<main_tag with / as _>_<name>/, all under the tag
-- main_tag; in metrics.jsonl with "tag" main_tag and "run" that folder's
-- name.  reduce as add_scalar (one all_reduce for all of them).
function Writer:add_scalars(main_tag, values, step, opts)
  local op = "add_scalars"
  live(self, op)
  check_tag(op, main_tag, "main_tag")
  if type(values) ~= "table" or is_tensor(values) then
    raise(("%s: expected a table of {name = value}, got %s"):format(op, show(values)))
  end
  local names = {}
  for k in pairs(values) do
    check_tag(op, k, "each name")
    names[#names + 1] = k
  end
  if #names == 0 then raise(op .. ": the table of values is empty") end
  table.sort(names)  -- every rank in the same order
  local list = {}
  for i, k in ipairs(names) do list[i] = scalar_arg(op, values[k], "value " .. show(k)) end
  step = check_step(op, step)
  opts = core.check_opts(opts, op, SCALAR_OPTS)
  local how = reduce_arg(op, opts)
  local wall_time = walltime_arg(op, opts)
  if how then
    list = reduce_values(op, list, how, format("%s {%s} at step %d", show(main_tag), concat(names, ", "), step))
  end
  if not self.writes then return end
  local st = self._st
  local prefix = main_tag:gsub("/", "_") .. "_"
  for i, k in ipairs(names) do
    local run = prefix .. k
    queue(self, run_of(st, run), step, wall_time, tfevents.scalar_value(main_tag, list[i]))
    queue_jsonl(st, main_tag, run, step, list[i], wall_time)
  end
  maybe_flush(st)
end

local HIST_OPTS = { bins = true, walltime = true }

-- w:add_histogram(tag, values, step[, {bins = "tensorflow" | n | {edges},
-- walltime =}]): the histogram of a tensor's (or a list's) values, rank
-- 0's; PyTorch's buckets (ddp.summary.histogram).
function Writer:add_histogram(tag, values, step, opts)
  local op = "add_histogram"
  live(self, op)
  check_tag(op, tag)
  if not is_tensor(values) and type(values) ~= "table" then
    raise(("%s: values must be a tensor or a list of numbers, got %s"):format(op, show(values)))
  end
  step = check_step(op, step)
  opts = core.check_opts(opts, op, HIST_OPTS)
  local wall_time = walltime_arg(op, opts)
  if not self.writes then return end
  local t = is_tensor(values) and values:detach() or factory.tensor(values, { dtype = "float64", device = "cpu" })
  t = t:to("cpu"):to("float64"):contiguous()
  local h = histogram.make(ffi.cast("double *", C.dl_tensor_data(t)), t:numel(), opts.bins, op)
  queue(self, self._st.runs[""], step, wall_time, tfevents.histogram_value(tag, h))
  maybe_flush(self._st)
end

-- w:add_text(tag, text, step[, {walltime =}]): a text (Markdown), rank
-- 0's, under the tag "<tag>/text_summary" as PyTorch writes it.
function Writer:add_text(tag, text, step, opts)
  local op = "add_text"
  live(self, op)
  check_tag(op, tag)
  if type(text) ~= "string" then raise(("%s: text must be a string, got %s"):format(op, show(text))) end
  step = check_step(op, step)
  opts = core.check_opts(opts, op, { walltime = true })
  local wall_time = walltime_arg(op, opts)
  if not self.writes then return end
  queue(self, self._st.runs[""], step, wall_time, tfevents.text_value(tag .. "/text_summary", text))
  maybe_flush(self._st)
end

-- w:flush(): every pending point written to the files now.
function Writer:flush()
  live(self, "flush")
  if self.writes then flush_state(self._st) end
end

-- w:close(): flushes; the writer then refuses more points (closing twice
-- is fine).
function Writer:close()
  if self._closed then return end
  self._closed = true
  if self.writes then
    flush_state(self._st)
    self._st.closed = true
  end
end

-- w:get_logdir(): the directory, as PyTorch's.
function Writer:get_logdir() return self.log_dir end

M.SummaryWriter = Writer
M._jsonl_kept, M._json_num = jsonl_kept, json_num  -- for the spec

return M
