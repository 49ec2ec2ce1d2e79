-- ddp.data.worker_main: what runs in a loader worker thread, in the Lua
-- state of its own that ddp.data.workers made for it.  It rebuilds the
-- dataset from the bytes the loader encoded (ddp.data.worker_codec: tensors
-- shared, not copied), then takes jobs -- a batch's sample indices -- from
-- the batch queue until the queue closes, and hands each batch back, or
-- the error that stopped it with its traceback and sample index.
local ffi = require "ffi"
local core = require "ddp.core"
local handles = require "ddp.core.handles"
local codec = require "ddp.data.worker_codec"
local collate = require "ddp.data.collate"
local C = core.C
local tonumber, xpcall = tonumber, xpcall

-- A traceback of the user's frames: what lies below the dataset's own
-- calls (this file, collate's loop) says nothing to its author.
local function traceback(msg)
  local tb = debug.traceback(tostring(msg), 2)
  local out = {}
  for line in tb:gmatch("[^\n]+") do
    if line:find("ddp/data/collate.lua", 1, true) or line:find("ddp/data/worker_main.lua", 1, true) then break end
    out[#out + 1] = line
  end
  return table.concat(out, "\n")
end

core.add_lib_file(debug.getinfo(1, "S").source)

local M = {}

local TAKE_MS = 200

local function wrap_tensors(addrs)
  local ts = {}
  for i, a in ipairs(addrs) do
    local p = ffi.cast("dl_tensor *", a)
    C.dl_tensor_retain(p)
    ts[i] = handles.own(p)
  end
  return ts
end

local function put_error(q, w, key, msg)
  C.dl_batchq_put(q, w, key, nil, 0, msg, #msg, 1)
end

-- The worker's life: setup, then jobs until the queue closes.
local function run(q, w, payload, addrs)
  local sample = -1
  local ok, setup = xpcall(function()
    return codec.decode(payload, wrap_tensors(addrs))
  end, traceback)
  if not ok then
    put_error(q, w, -1, "could not rebuild the dataset in the worker thread: " .. tostring(setup))
    return
  end
  handles.in_worker = true
  handles.worker_id = w  -- datasets keep per-worker counters by it (ImageFolder's bad files)
  handles.worker_info = { id = w, num_workers = setup.num_workers, dataset = setup.dataset }
  local ds, plan = setup.dataset, collate.plan(setup.dataset)
  M.refs = codec.ref_index()
  if setup.init_fn then
    local ok2, err = xpcall(setup.init_fn, traceback, w)
    if not ok2 then
      put_error(q, w, -1, "worker_init_fn failed: " .. tostring(err))
      return
    end
  end
  local keyp, idxp = ffi.new("int64_t[1]"), ffi.new("dl_tensor *[1]")
  local stopped = false
  local function mark(i)
    sample = i
    if C.dl_batchq_mark(q, w, i) == C.DL_BQ_CLOSED then
      stopped = true
      error("the loader stopped", 0)
    end
  end
  local fields = ffi.new("dl_tensor *[?]", C.DL_BQ_MAX_FIELDS)
  while true do
    local st = C.dl_batchq_take(q, w, TAKE_MS, keyp, idxp)
    if st == C.DL_BQ_CLOSED then return end
    if st == C.DL_BQ_READY then
      -- the job: [seed, epoch, sample indices...]
      local key = tonumber(keyp[0])
      local job = handles.own(idxp[0])
      local jp = ffi.cast("const int64_t *", C.dl_tensor_data(job))
      local seed, epoch = tonumber(jp[0]), tonumber(jp[1])
      local idx = job:narrow(0, 2, job:size(0) - 2)
      sample = -1
      local good, out, n = xpcall(collate.batch, traceback, ds, plan, idx, seed, epoch, mark)
      if stopped then return end
      if good and setup.pin then
        -- page-locked here, in the worker: the loop then copies nothing
        for k = 1, n do
          local t = out[k]
          if core.is_tensor(t) and C.dl_tensor_device(t) < 0 then out[k] = core.new(C.dl_pin_memory, t) end
        end
      end
      if good then
        local bytes, ts = codec.encode({ n = n, unpack(out, 1, n) }, "batch", M.refs)
        if not bytes then
          put_error(q, w, key, ("the batch cannot be handed back: %s"):format(ts))
        elseif #ts > C.DL_BQ_MAX_FIELDS then
          put_error(q, w, key, ("a batch holds %d tensors, more than %d"):format(#ts, C.DL_BQ_MAX_FIELDS))
        else
          for i = 1, #ts do fields[i - 1] = ts[i] end
          if C.dl_batchq_put(q, w, key, fields, #ts, bytes, #bytes, 0) ~= 0 then return end
        end
      else
        put_error(q, w, key, ("sample %d: %s"):format(sample, tostring(out)))
      end
      idx, job, out = nil, nil, nil
      -- a batch's garbage (decoded samples, the batch's own handles) goes
      -- now: the runtime's collection hint is one for the process, and the
      -- loop's state taking it would leave this state's heap to grow
      collectgarbage()
    end
  end
end

-- The callback the thread starts in: never lets an error out (it would
-- end the process from inside an FFI callback).
function M.entry(q_addr, w, payload, addrs)
  local q = ffi.cast("dl_batchq *", q_addr)
  return function()
    local ok, err = xpcall(run, traceback, q, w, payload, addrs)
    if not ok then pcall(put_error, q, w, -1, "the worker thread failed: " .. tostring(err)) end
    return nil
  end
end

return M
