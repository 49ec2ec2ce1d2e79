-- ddp.core.memory: where a rank's memory goes (ddp.memory_summary(),
-- ddp.memory_breakdown()): parameters, gradients, optimizer state, the
-- activations and temporaries of a step at its peak, the other tensors,
-- the allocator's cache, per device, and the process's resident memory;
-- and the line each rank leaves for the launcher's end-of-job peaks.
--
-- Parameters, gradients and state are counted from the models and
-- optimizers this rank made (ddp.DDP and every ddp.optim optimizer report
-- here, held weakly) and those given; a tensor counted twice (tied
-- weights, an optimizer over a DDP model's parameters) counts once.  The
-- activations come from the allocator: at each optimizer step's end the
-- step's high-water mark is read and a new window begins
-- (dl_mem_window_peak, apart from the user's ddp.max_memory_allocated), and
-- a step's activations are what it held at its peak above what was live
-- when it began, less the gradients it made (set_to_none leaves the old
-- ones to Lua's collector): the saved activations, backward's temporaries
-- and the garbage Lua had not collected yet, which a step's peak holds as
-- much.  The median of the last 64 steps is reported, and the largest.
-- The first step is left out: it also makes the optimizer state and the
-- gradients, which stay.
local B = require "ddp.ffi"
local core = require "ddp.core"

local C, ffi = B.C, B.ffi
local raise = core.raise

core.add_lib_file(debug.getinfo(1, "S").source)

local M = {}

local models = setmetatable({}, { __mode = "k" })
local optimizers = setmetatable({}, { __mode = "k" })

function M.track_model(m) models[m] = true end
function M.track_optimizer(opt) optimizers[opt] = true end
-- ZeroRedundancyOptimizer's inner optimizer holds no state of its own.
function M.untrack_optimizer(opt) optimizers[opt] = nil end

-- -- Step windows -----------------------------------------------------------------

local CPU = "cpu"
local WINDOW = 64  -- steps kept (ddp.core.steps keeps as many)
-- per device name: {start = bytes live when the window began, act = the
-- steps' excesses (a ring of WINDOW), n = steps measured, max = the
-- largest}
local windows = {}
local cuda_n = nil  -- devices to look at (dl_cuda_device_count, once)

local function window_of(dev)
  local w = windows[dev]
  if not w then
    w = { start = nil, act = {}, n = 0, max = 0 }
    windows[dev] = w
  end
  return w
end

local stat_buf = ffi.new("int64_t[4]")
local function cuda_stats(index)
  if C.dl_cuda_memory_stats(index, stat_buf, 4) ~= 0 then return nil end
  return { allocated = tonumber(stat_buf[0]), reserved = tonumber(stat_buf[1]),
           peak = tonumber(stat_buf[2]), peak_reserved = tonumber(stat_buf[3]) }
end

-- The gradients of the tracked optimizers' parameters that a step made
-- (set_to_none leaves the old ones to Lua's collector and backward makes
-- new ones): bytes per device index (-1: the CPU).  They are gradients,
-- not activations, though the step's peak holds them.  Read through the
-- C handles, so a step makes no Lua tensor.
local grad_seen, grad_now = {}, {}
local function new_gradients()
  local per = {}
  for opt in pairs(optimizers) do
    for _, g in ipairs(opt.param_groups or {}) do
      for _, p in ipairs(g.params or {}) do
        local gr = C.dl_grad(p)
        if gr ~= nil then
          local key = tonumber(ffi.cast("uintptr_t", C.dl_tensor_data(gr)))
          if not grad_now[key] then
            grad_now[key] = true
            if not grad_seen[key] then
              local dev = C.dl_tensor_device(gr)
              per[dev] = (per[dev] or 0) + tonumber(C.dl_tensor_numel(gr)) * C.dl_dtype_size(C.dl_tensor_dtype(gr))
            end
          end
          C.dl_tensor_release(gr)
        end
      end
    end
  end
  grad_seen, grad_now = grad_now, grad_seen
  for k in pairs(grad_now) do grad_now[k] = nil end
  return per
end

local function end_window(dev, index, made)
  local peak
  if index == nil then
    peak = tonumber(C.dl_mem_window_peak(1))
  else
    peak = tonumber(C.dl_cuda_memory_window_peak(index, 1))
    if peak < 0 then return end  -- nothing was ever allocated there
  end
  local live
  if index == nil then
    live = tonumber(C.dl_mem_allocated())
  else
    local s = cuda_stats(index)
    if not s then return end
    live = s.allocated
  end
  local w = window_of(dev)
  -- the first step (no start yet) also makes the state and the gradients
  -- that stay
  if w.start ~= nil then
    local act = peak - w.start - (made[index or -1] or 0)
    if act < 0 then act = 0 end
    w.act[(w.n % WINDOW) + 1] = act
    w.n = w.n + 1
    if act > w.max then w.max = act end
  end
  w.start = live
end

-- Called at the end of each optimizer step (ddp.core.steps).  Which
-- gradients a step made is looked at in the first 8 steps and every 16th
-- after (a look costs ~0.2 us a parameter): whether a loop makes new
-- ones (zero_grad's set_to_none) or keeps them (DDP's buckets, no
-- set_to_none) does not change from step to step.
local n_ends, made_last = 0, {}
function M.step_end()
  n_ends = n_ends + 1
  if n_ends <= 8 or n_ends % 16 == 0 then made_last = new_gradients() end
  local made = made_last
  end_window(CPU, nil, made)
  if cuda_n == nil then cuda_n = C.dl_cuda_device_count() end
  for i = 0, cuda_n - 1 do end_window("cuda:" .. i, i, made) end
end

-- A window's typical step: the median of its last excesses.  Not the
-- largest: a step in which Lua's collector ran frees the garbage of the
-- steps before (less), and one where it did not ran a little over.
local function typical(w)
  local n = math.min(w.n, WINDOW)
  if n == 0 then return 0 end
  local v = {}
  for i = 1, n do v[i] = w.act[i] end
  table.sort(v)
  return n % 2 == 1 and v[(n + 1) / 2] or (v[n / 2] + v[n / 2 + 1]) / 2
end

-- -- Counting tensors -------------------------------------------------------------

local function nbytes(t) return t:numel() * t:element_size() end

-- adds t's bytes to per[device][field] once per tensor (seen: by handle)
local function count(per, seen, field, t)
  if not core.is_tensor(t) then return end
  local key = tostring(core.address(t))
  if seen[key] then return end
  seen[key] = true
  local dev = t:device()
  local row = per[dev]
  if not row then
    row = { parameters = 0, buffers = 0, gradients = 0, optimizer_state = 0 }
    per[dev] = row
  end
  row[field] = row[field] + nbytes(t)
end

local function each_param_of_optimizer(opt, fn)
  for _, g in ipairs(opt.param_groups or {}) do
    for _, p in ipairs(g.params or {}) do fn(p) end
  end
end

-- Optimizer state tensors per device: an optimizer's own state_nbytes
-- gives its total on this rank (a ZeroRedundancyOptimizer: its shard);
-- the tensors themselves give the device.
local function count_state(per, seen, opt)
  for _, st in pairs(opt.state or {}) do
    if type(st) == "table" then
      for _, v in pairs(st) do
        if core.is_tensor(v) then count(per, seen, "optimizer_state", v) end
      end
    end
  end
end

local function read_status()
  local f = io.open("/proc/self/status", "r")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  local rss, hwm = s:match("VmRSS:%s*(%d+) kB"), s:match("VmHWM:%s*(%d+) kB")
  return rss and tonumber(rss) * 1024, hwm and tonumber(hwm) * 1024
end

local function check_opts(op, opts)
  if opts == nil then return { models = {}, optimizers = {} } end
  if type(opts) ~= "table" then
    raise(op .. ": expected a table of options {model =, optimizer =}, got " .. core.describe(opts))
  end
  for k in pairs(opts) do
    if k ~= "model" and k ~= "optimizer" then
      raise(("%s: unknown option %s (expected model or optimizer)"):format(op, core.show(k)))
    end
  end
  local function list(v, what, ok)
    if v == nil then return {} end
    if ok(v) then return { v } end
    if type(v) == "table" and getmetatable(v) == nil then
      for i, x in ipairs(v) do
        if not ok(x) then raise(("%s: %s %d is a %s"):format(op, what, i, core.describe(x))) end
      end
      return v
    end
    raise(("%s: %s must be a %s or a list of them, got %s"):format(op, what, what, core.describe(v)))
  end
  local function is_model(v) return type(v) == "table" and type(v.parameters) == "function" end
  local function is_opt(v) return type(v) == "table" and type(v.param_groups) == "table" end
  return { models = list(opts.model, "model", is_model), optimizers = list(opts.optimizer, "optimizer", is_opt) }
end

-- ddp.memory_breakdown([{model =, optimizer =}]): a table per device in
-- use ("cpu", "cuda:0", ...) of bytes: parameters, buffers, gradients,
-- optimizer_state, activations (a typical step's, 0 before a second step)
-- and activations_max (the largest step's), other (the rest of what is allocated now), allocated, peak
-- (since the start, or ddp.cuda.reset_peak_memory_stats), cache (kept for
-- reuse: the CPU cache; on CUDA reserved less allocated), and reserved on
-- CUDA; plus devices (their names in order), resident and resident_peak
-- (the process's RSS and its high-water mark), steps (the steps measured
-- for the activations), rank and world_size (as given: ddp.dist's).
function M.breakdown(opts, rank, world_size, op)
  opts = check_opts(op or "memory_breakdown", opts)
  local per, seen = {}, {}
  local ms, os_ = {}, {}
  for m in pairs(models) do ms[#ms + 1] = m end
  for _, m in ipairs(opts.models) do ms[#ms + 1] = m end
  for o in pairs(optimizers) do os_[#os_ + 1] = o end
  for _, o in ipairs(opts.optimizers) do os_[#os_ + 1] = o end
  for _, m in ipairs(ms) do
    local inner = rawget(m, "module") or m
    for _, p in ipairs(inner:parameters()) do count(per, seen, "parameters", p) end
    if type(inner.buffers) == "function" then
      for _, b in ipairs(inner:buffers()) do count(per, seen, "buffers", b) end
    end
  end
  for _, o in ipairs(os_) do each_param_of_optimizer(o, function(p) count(per, seen, "parameters", p) end) end
  -- gradients after every parameter: a gradient is never a parameter
  for _, m in ipairs(ms) do
    for _, p in ipairs((rawget(m, "module") or m):parameters()) do count(per, seen, "gradients", p.grad) end
  end
  for _, o in ipairs(os_) do each_param_of_optimizer(o, function(p) count(per, seen, "gradients", p.grad) end) end
  for _, o in ipairs(os_) do count_state(per, seen, o) end

  local out = { devices = {} }
  local function row(dev)
    local r = per[dev] or { parameters = 0, buffers = 0, gradients = 0, optimizer_state = 0 }
    local w = windows[dev]
    r.activations = w and typical(w) or 0
    r.activations_max = w and w.max or 0
    out[dev] = r
    out.devices[#out.devices + 1] = dev
    return r
  end
  local cpu = row(CPU)
  cpu.allocated = tonumber(C.dl_mem_allocated())
  cpu.peak = tonumber(C.dl_mem_peak())
  cpu.cache = tonumber(C.dl_mem_cached())
  out.steps = windows[CPU] and windows[CPU].n or 0
  local n = C.dl_cuda_device_count()
  for i = 0, n - 1 do
    local dev = "cuda:" .. i
    if per[dev] or tonumber(C.dl_cuda_memory_window_peak(i, 0)) >= 0 then
      local s = cuda_stats(i)
      if s then
        local r = row(dev)
        r.allocated, r.peak, r.reserved = s.allocated, s.peak, s.reserved
        r.cache = s.reserved - s.allocated
      end
    end
  end
  for _, dev in ipairs(out.devices) do
    local r = out[dev]
    r.other = math.max(0, r.allocated - r.parameters - r.buffers - r.gradients - r.optimizer_state)
  end
  out.resident, out.resident_peak = read_status()
  out.rank, out.world_size = rank or 0, world_size or 1
  return out
end

-- 1536 -> "1.5 KiB"
local function human(n)
  if n == nil then return "?" end
  if n < 1024 then return ("%d B"):format(n) end
  local units, u = { "KiB", "MiB", "GiB", "TiB" }, 0
  repeat
    n, u = n / 1024, u + 1
  until n < 1024 or u == #units
  return (n < 10 and "%.2f %s" or n < 100 and "%.1f %s" or "%.0f %s"):format(n, units[u])
end

local ROWS = {
  { "parameters", "parameters" }, { "buffers", "buffers" }, { "gradients", "gradients" },
  { "optimizer_state", "optimizer state" }, { "activations", "activations at peak" },
  { "other", "other tensors" }, { "allocated", "allocated now" }, { "peak", "peak allocated" },
  { "reserved", "reserved" }, { "cache", "allocator cache" },
}

-- ddp.memory_summary([{model =, optimizer =}]): the breakdown as a table
-- to print, as torch.cuda.memory_summary() (a string, this rank's).
function M.summary(opts, rank, world_size)
  local b = M.breakdown(opts, rank, world_size, "memory_summary")
  local lines = { ("memory of rank %d of %d"):format(b.rank, b.world_size) }
  local head = ("  %-22s"):format("")
  for _, dev in ipairs(b.devices) do head = head .. ("%12s"):format(dev) end
  lines[#lines + 1] = head
  for _, r in ipairs(ROWS) do
    local field, label = r[1], r[2]
    local any = false
    for _, dev in ipairs(b.devices) do any = any or (b[dev][field] or 0) > 0 end
    if any or (field ~= "buffers" and field ~= "reserved") then
      local line = ("  %-22s"):format(label)
      for _, dev in ipairs(b.devices) do
        local v = b[dev][field]
        line = line .. ("%12s"):format(v and human(v) or "-")
      end
      lines[#lines + 1] = line
    end
  end
  if b.steps == 0 then
    lines[#lines + 1] = "  (activations: measured from the second optimizer step on; none yet)"
  else
    local most = {}
    for _, dev in ipairs(b.devices) do most[#most + 1] = human(b[dev].activations_max) end
    lines[#lines + 1] = ("  (activations: what a step held at its peak above what was live when it began, less the "
      .. "gradients it made; the median of %d step%s, the largest %s)")
      :format(math.min(b.steps, WINDOW), b.steps == 1 and "" or "s", table.concat(most, " / "))
  end
  lines[#lines + 1] = "  (other tensors: the batch, your own tensors, and garbage Lua has not collected yet)"
  if b.resident then
    lines[#lines + 1] = ("  resident (RSS): %s now, %s at peak"):format(human(b.resident), human(b.resident_peak))
  end
  return table.concat(lines, "\n")
end

-- The line a rank leaves for the launcher's end-of-job peaks (cli/memory.c
-- reads it): version, CPU tensors' peak, resident peak, then the CUDA
-- device's index (-1: none), its peak allocated and reserved.
function M.line()
  local _, hwm = read_status()
  local dev, peak, reserved = -1, 0, 0
  if cuda_n == nil then cuda_n = C.dl_cuda_device_count() end
  for i = 0, cuda_n - 1 do
    if tonumber(C.dl_cuda_memory_window_peak(i, 0)) >= 0 then
      local s = cuda_stats(i)
      if s and s.peak >= peak then dev, peak, reserved = i, s.peak, s.peak_reserved end
    end
  end
  return ("1 %d %d %d %d %d"):format(tonumber(C.dl_mem_peak()), hwm or 0, dev, peak, reserved)
end

return M
