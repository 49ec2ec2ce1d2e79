-- ddp.nn.parallel: ddp.DDP (also nn.parallel.DDP), data-parallel training
-- of an nn.Module, as PyTorch's torch.nn.parallel.DistributedDataParallel
-- but without its traps.  The reducer (runtime/dist/reducer.c) owns the
-- gradients: each parameter's .grad is a view into a flat bucket that is
-- all-reduced (averaged) while backward still runs.
--
--   local dmodel = ddp.DDP(model[, opts])
--   local loss = loss_fn(dmodel(x), y); loss:backward(); opt:step()
--
-- The wrapper forwards every method and field of the model (its own
-- methods too: dmodel:generate(...)), dmodel.module is the model, and
-- dmodel:state_dict() is the model's, without a prefix.
local core = require "ddp.core"
local dist = require "ddp.dist"
local group = require "ddp.dist.group"  -- the C group the reducers use
local autograd = require "ddp.autograd"
local memory = require "ddp.core.memory"
local module = require "ddp.nn.module"
local C, ffi = core.C, core.ffi
local raise, show = core.raise, core.show
local type, pairs, ipairs, tostring, setmetatable, getmetatable, rawget, rawset, pcall, unpack =
  type, pairs, ipairs, tostring, setmetatable, getmetatable, rawget, rawset, pcall, unpack
local concat, floor = table.concat, math.floor

core.add_lib_file(debug.getinfo(1, "S").source)

local M = {}

-- The wrapper is a transparent stand-in for the model, not a core.class:
-- every key that is not one of its own methods (DDP) goes to the model,
-- metamethod names and init included, so its methods and its metatable
-- are kept apart.
local DDP = {}                      -- the wrapper's own methods
local mt = {}                       -- the wrapper's metatable
local wrapped = setmetatable({}, { __mode = "k" })  -- model -> true
local live = setmetatable({}, { __mode = "k" })     -- wrappers with Lua comm hooks
local all = setmetatable({}, { __mode = "k" })      -- every wrapper, for shutdown
local reducing = setmetatable({}, { __mode = "v" }) -- parameter address -> its wrapper

local options = { bucket_cap_mb = true, first_bucket_mb = true, broadcast_buffers = true,
                  grad_accum = true, comm_hook = true, find_unused_parameters = true,
                  device_ids = true, output_device = true }

local is_module = module.is_module

local function shape_str(t)
  return "[" .. concat(t:shape(), ", ") .. "]"
end

-- -- Construction ----------------------------------------------------------

-- Every rank must hold the same parameters: names, shapes and dtypes are
-- compared with rank 0's, and the differences listed by rank.
local function check_same(named)
  local sig = {}
  for i, p in ipairs(named) do sig[i] = { p[1], shape_str(p[2]), p[2]:dtype() } end
  local all = dist.all_gather_object(sig)
  local ref, lines = all[1], {}
  local ref_by = {}
  for _, s in ipairs(ref) do ref_by[s[1]] = s end
  for r = 2, #all do
    local mine, diffs, seen = all[r], {}, {}
    for _, s in ipairs(mine) do
      seen[s[1]] = true
      local o = ref_by[s[1]]
      if not o then diffs[#diffs + 1] = s[1] .. " is only on this rank"
      elseif o[2] ~= s[2] then diffs[#diffs + 1] = ("%s has shape %s (rank 0: %s)"):format(s[1], s[2], o[2])
      elseif o[3] ~= s[3] then diffs[#diffs + 1] = ("%s is %s (rank 0: %s)"):format(s[1], s[3], o[3]) end
    end
    for _, s in ipairs(ref) do
      if not seen[s[1]] then diffs[#diffs + 1] = s[1] .. " is missing" end
    end
    if #diffs > 0 then
      if #diffs > 5 then diffs = { diffs[1], diffs[2], diffs[3], diffs[4], diffs[5], ("and %d more"):format(#diffs - 5) } end
      lines[#lines + 1] = ("rank %d: %s"):format(r - 1, concat(diffs, "; "))
    end
  end
  if #lines > 0 then
    raise("ddp.DDP: the ranks' models differ from rank 0's: " .. concat(lines, " | ")
          .. " (every rank must build the same model)")
  end
end

-- (module, name) of every buffer, in named_buffers order.
local function buffer_slots(model)
  local slots = {}
  for _, pm in ipairs(model:named_modules()) do
    local m = pm[2]
    for _, name in ipairs(m._buffers) do
      if m._fields[name] ~= nil then slots[#slots + 1] = { m, name } end
    end
  end
  return slots
end

local comm_modes = { bf16 = C.DL_COMM_BF16, fp16 = C.DL_COMM_FP16 }

local function new_reducer(self, hook)
  local pg = group._group("ddp.DDP")
  local ps = self._params
  local arr = ffi.new("dl_tensor *[?]", #ps)
  for i, p in ipairs(ps) do arr[i - 1] = p end
  local mode = C.DL_COMM_NONE
  if type(hook) == "string" then mode = comm_modes[hook]
  elseif hook ~= nil then mode = C.DL_COMM_CUSTOM end
  if self._r ~= nil then
    C.dl_reducer_free(ffi.gc(self._r, nil))
    rawset(self, "_r", nil)
  end
  local r = C.dl_reducer_new(pg, arr, #ps, self._cap, self._first_cap, mode)
  if r == nil then raise(core.last_error()) end
  rawset(self, "_r", ffi.gc(r, C.dl_reducer_free))
  -- the flight recorder names each bucket by its parameters
  local names = ffi.new("const char *[?]", #ps)
  for i, p in ipairs(self._names) do names[i - 1] = p[1] end
  core.check(C.dl_reducer_set_names(r, names, #ps))
  rawset(self, "_hook", type(hook) == "function" and hook or nil)
  live[self] = self._hook and true or nil
end

-- ddp.DDP(model[, {bucket_cap_mb = 25, first_bucket_mb = 1,
-- broadcast_buffers = true, grad_accum = 1, comm_hook = nil}]).
function M.DDP(model, opts)
  if getmetatable(model) == mt then
    raise("ddp.DDP: this model is already wrapped by ddp.DDP; wrap the plain model once")
  end
  if not is_module(model) then raise("ddp.DDP: expected an nn.Module, got " .. core.describe(model)) end
  if wrapped[model] then
    raise("ddp.DDP: this model was already wrapped by ddp.DDP; use that wrapper (wrapping twice would reduce twice)")
  end
  if opts ~= nil and type(opts) ~= "table" then raise("ddp.DDP: options must be a table, got " .. show(opts)) end
  group._fence_check("ddp.DDP")  -- its first collective, named as the user's call
  opts = opts or {}
  for k in pairs(opts) do
    if not options[k] then
      raise("ddp.DDP: unknown option " .. show(k) .. " (expected bucket_cap_mb, first_bucket_mb, "
            .. "broadcast_buffers, grad_accum or comm_hook)")
    end
  end
  local function mb(k, d)
    local v = opts[k]
    if v == nil then return d end
    if type(v) ~= "number" or not (v > 0) then raise(("ddp.DDP: %s must be a positive number, got %s"):format(k, show(v))) end
    return v
  end
  local cap, first = mb("bucket_cap_mb", 25), mb("first_bucket_mb", 1)
  local accum = opts.grad_accum or 1
  if not core.is_integer(accum) or accum < 1 then
    raise("ddp.DDP: grad_accum must be a positive integer, got " .. show(opts.grad_accum))
  end
  local hook = opts.comm_hook
  if hook ~= nil and type(hook) ~= "function" and not comm_modes[hook] then
    raise("ddp.DDP: comm_hook must be \"bf16\", \"fp16\" or a function(bucket), got " .. show(hook))
  end
  if not dist.is_initialized() then dist.init() end

  local named = {}
  for _, p in ipairs(model:named_parameters()) do
    if p[2].requires_grad then named[#named + 1] = p end
  end
  -- none at all: dl_reducer_new says so (on every rank, after the checks
  -- below find nothing to compare)
  local want = dist.device()
  for _, p in ipairs(named) do
    local dev = p[2]:device()
    if dev ~= named[1][2]:device() then
      raise(("ddp.DDP: parameters %s (%s) and %s (%s) are on different devices; DDP needs the whole model on one device (model:to(ddp.device()))")
            :format(named[1][1], named[1][2]:device(), p[1], dev))
    end
    if dev ~= "cpu" and dev ~= want then
      raise(("ddp.DDP: parameter %s is on %s but this rank's device is %s; move the model with model:to(ddp.device())")
            :format(p[1], dev, want))
    end
  end
  if dist.world_size() > 1 then
    check_same(named)
    autograd.no_grad(function()
      for _, p in ipairs(named) do dist.broadcast(p[2], 0) end
      for _, b in ipairs(model:buffers()) do dist.broadcast(b, 0) end
    end)
  end
  local params = {}
  for i, p in ipairs(named) do params[i] = p[2] end
  local self = setmetatable({ module = model, _params = params, _names = named,
                              _cap = floor(cap * 2^20), _first_cap = floor(first * 2^20),
                              _sync_buffers = opts.broadcast_buffers ~= false,
                              _buffers = buffer_slots(model) }, mt)
  new_reducer(self, hook)
  if accum > 1 then core.check(C.dl_reducer_set_accum(self._r, accum)) end
  wrapped[model] = true
  all[self] = true
  memory.track_model(self)  -- ddp.memory_summary counts its parameters and gradients
  for _, p in ipairs(params) do reducing[tostring(core.address(p))] = self end
  return self
end

-- Whether a live ddp.DDP averages p's gradient over the ranks (what a
-- sharded optimizer needs: each rank steps its shard with the same grads).
function M.reduces(p)
  local w = reducing[tostring(core.address(p))]
  return w ~= nil and rawget(w, "_r") ~= nil
end

-- -- Forward ------------------------------------------------------------------

-- Buffers (BatchNorm's running statistics) come from rank 0 before each
-- training forward: broadcast into new tensors that replace the old ones,
-- so a tensor an earlier graph saved is never changed in place.  Not in
-- eval mode or under no_grad, so a forward on rank 0 alone never waits.
local function sync_buffers(self)
  if not self._sync_buffers or #self._buffers == 0 or dist.world_size() == 1 then return end
  if not self.module.training or not autograd.is_grad_enabled() then return end
  for _, slot in ipairs(self._buffers) do
    local m, name = slot[1], slot[2]
    local b = m._fields[name]:clone()
    dist.broadcast(b, 0)
    m._fields[name] = b
  end
end

-- The reducer, or an error once ddp.shutdown() took the group away.
local function reducer(self)
  local r = rawget(self, "_r")
  if r == nil then raise("ddp.DDP: the process group was shut down (ddp.shutdown()); wrap the model again after ddp.init()") end
  return r
end

local function prepare(self)
  if autograd.is_grad_enabled() then core.check(C.dl_reducer_prepare(reducer(self))) end
end

-- ddp.shutdown() frees the group the reducers use: they go first (their
-- hooks leave the parameters, which keep their last gradients).
group._on_shutdown[#group._on_shutdown + 1] = function()
  for self in pairs(all) do
    local r = rawget(self, "_r")
    if r ~= nil then
      C.dl_reducer_free(ffi.gc(r, nil))
      rawset(self, "_r", nil)
      live[self] = nil
    end
  end
end

function DDP:forward(...)
  sync_buffers(self)
  prepare(self)
  return self.module(...)
end

mt.__call = function(self, ...) return self:forward(...) end

-- dmodel:no_sync(fn, ...): runs fn with the all-reduce off; gradients add
-- up locally and the next backward outside it reduces the sum.
function DDP:no_sync(fn, ...)
  if type(fn) ~= "function" then raise("no_sync: expected a function, got " .. show(fn)) end
  local r = reducer(self)
  local was = C.dl_reducer_set_no_sync(r, 1)
  local res = { pcall(fn, ...) }
  if rawget(self, "_r") == r then C.dl_reducer_set_no_sync(r, was) end
  if not res[1] then error(res[2], 0) end
  return unpack(res, 2)
end

-- dmodel:register_comm_hook("bf16" | "fp16" | fn): fn(bucket, info) runs
-- after backward for each bucket (a flat tensor of gradients) and returns
-- the averaged tensor, or a handle with :wait() (ddp.all_reduce_async).
function DDP:register_comm_hook(hook)
  if type(hook) ~= "function" and not comm_modes[hook] then
    raise("register_comm_hook: expected \"bf16\", \"fp16\" or a function(bucket, info), got " .. show(hook))
  end
  new_reducer(self, hook)
end

local stat_buf = ffi.new("int64_t[?]", C.DL_REDUCER_NSTATS)

-- dmodel:stats(): what the reducer did in the last synced backward.
function DDP:stats()
  C.dl_reducer_stats(reducer(self), stat_buf, C.DL_REDUCER_NSTATS)
  local s = stat_buf
  return { syncs = tonumber(s[C.DL_RS_SYNCS]), buckets = tonumber(s[C.DL_RS_BUCKETS]),
           launched_during_backward = tonumber(s[C.DL_RS_EARLY]),
           unused_parameters = tonumber(s[C.DL_RS_UNUSED]), rebuilt = s[C.DL_RS_REBUILT] ~= 0,
           overlap_ms = tonumber(s[C.DL_RS_OVERLAP_NS]) / 1e6 }
end

-- The flat bucket tensors (views of the gradients), for inspection.
function DDP:buckets()
  local r = {}
  local red = reducer(self)
  for b = 0, C.dl_reducer_num_buckets(red) - 1 do r[#r + 1] = core.new(C.dl_reducer_bucket, red, b) end
  return r
end

-- The model's state, with no prefix: saving dmodel or dmodel.module gives
-- the same file.
function DDP:state_dict() return self.module:state_dict() end
function DDP:load_state_dict(sd, opts) return self.module:load_state_dict(sd, opts) end

-- Lua comm hooks run once a synced backward has finished.
autograd._post_backward[#autograd._post_backward + 1] = function()
  for self in pairs(live) do
    local syncs = self:stats().syncs
    if syncs ~= (rawget(self, "_hook_syncs") or 0) then
      rawset(self, "_hook_syncs", syncs)
      local bs = self:buckets()
      for i, b in ipairs(bs) do
        local res = self._hook(b, { index = i - 1, world_size = dist.world_size() })
        if type(res) == "table" and type(res.wait) == "function" then res = res:wait() end
        if not core.is_tensor(res) then
          raise("comm hook: must return a tensor or a handle with :wait(), got " .. core.describe(res))
        end
        if not core.same(res, b) then autograd.no_grad(function() b:copy_(res) end) end
      end
    end
  end
end

-- -- Forwarding ----------------------------------------------------------------

local Module = module.Module

mt.__index = function(self, k)
  local own = DDP[k]
  if own ~= nil then return own end
  local model = rawget(self, "module")
  local v = model[k]
  if type(v) ~= "function" then return v end
  -- a method of the user's class may run the model: ready the gradients
  local generic = Module[k] == v
  return function(s, ...)
    if s ~= self then return v(s, ...) end
    if not generic then prepare(self) end
    return v(model, ...)
  end
end

mt.__newindex = function(self, k, v) self.module[k] = v end
mt.__tostring = function(self) return "DDP(" .. tostring(self.module) .. ")" end

M.is_ddp = function(x) return getmetatable(x) == mt end

return M
