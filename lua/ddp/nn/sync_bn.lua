-- ddp.nn.sync_bn: nn.SyncBatchNorm, batch normalisation whose training
-- statistics span every rank of the process group, and
-- nn.convert_sync_batchnorm(model), as PyTorch's.  Composed from tensor
-- ops and ddp.dist.differentiable_all_reduce (one per layer and pass), so
-- the backward all-reduces the gradient sums as torch's SyncBatchNorm does.
-- It needs ddp.dist, so ddp.nn sits above ddp.dist (which needs nothing
-- of nn) and takes these in as it takes every layer.
local core = require "ddp.core"
local factory = require "ddp.tensor.factory"
local autograd = require "ddp.autograd"
local dist = require "ddp.dist"
local F = require "ddp.nn.functional"
local module = require "ddp.nn.module"
local layers = require "ddp.nn.layers"
local raise = core.raise

core.add_lib_file(debug.getinfo(1, "S").source)

local M = {}

local SyncBatchNorm = module.Module:extend("SyncBatchNorm")

-- SyncBatchNorm(num_features, {eps = 1e-5, momentum = 0.1, affine = true,
-- track_running_stats = true, dtype =}): the parameters, buffers and
-- state_dict names of BatchNorm1d/2d.
function SyncBatchNorm:init(num_features, opts)
  opts = opts or {}
  if not core.is_integer(num_features) or num_features < 1 then
    raise("SyncBatchNorm: num_features must be a positive integer, got " .. core.show(num_features))
  end
  for k in pairs(opts) do
    if not ({ eps = true, momentum = true, affine = true, track_running_stats = true, dtype = true })[k] then
      raise(("SyncBatchNorm: unknown option %q (options: eps, momentum, affine, track_running_stats, dtype)"):format(tostring(k)))
    end
  end
  layers.batch_norm_state(self, num_features, opts)
end

-- The statistics of x over every rank: mean and biased variance [C], and
-- the element count per channel, from one all-reduce of (sum, sum of
-- squares, count).
local function global_stats(x, c)
  local dims = { 0 }
  for d = 2, x:dim() - 1 do dims[#dims + 1] = d end
  local count = x:numel() / c
  local local_stats = factory.cat({ x:sum(dims), (x * x):sum(dims),
                                    factory.full({ 1 }, count, { dtype = x:dtype(), device = x:device() }) }, 0)
  local g = dist.differentiable_all_reduce(local_stats, "sum")
  local n = g:narrow(0, 2 * c, 1):item()
  local mean = g:narrow(0, 0, c) / n
  local var = g:narrow(0, c, c) / n - mean * mean
  return mean, var, n
end

function SyncBatchNorm:forward(x)
  if not core.is_tensor(x) then raise("SyncBatchNorm: expected a tensor, got " .. core.describe(x)) end
  if x:dim() < 2 then
    raise(("SyncBatchNorm: expected at least 2D input (got %dD input)"):format(x:dim()))
  end
  if x:size(1) ~= self.num_features then
    raise(("SyncBatchNorm: input has %d channels (dim 1 of shape %s), the layer %d")
          :format(x:size(1), core.fmt_shape(x:shape()), self.num_features))
  end
  local use_batch = self.training or not self.track_running_stats
  if self.training and self.track_running_stats then
    autograd.no_grad(function() self.num_batches_tracked:add_(1) end)
  end
  -- as PyTorch: synchronised only when training on a group of more than one rank
  if not (use_batch and self.training and dist.is_initialized() and dist.world_size() > 1) then
    return F.batch_norm(x, self.track_running_stats and self.running_mean or nil,
                        self.track_running_stats and self.running_var or nil,
                        { weight = self.weight, bias = self.bias, training = use_batch,
                          momentum = self.momentum, eps = self.eps })
  end
  local c = self.num_features
  local mean, var, n = global_stats(x, c)
  if n <= 1 then
    raise(("SyncBatchNorm: expected more than 1 value per channel when training, got %d over all ranks (input shape %s here)")
          :format(n, core.fmt_shape(x:shape())))
  end
  if self.track_running_stats then
    autograd.no_grad(function()
      local m = self.momentum
      self.running_mean:mul_(1 - m):add_(mean:detach():to(self.running_mean:dtype()) * m)
      self.running_var:mul_(1 - m):add_(var:detach():to(self.running_var:dtype()) * (m * n / (n - 1)))
    end)
  end
  local shape = { 1, c }
  for _ = 3, x:dim() do shape[#shape + 1] = 1 end
  local y = (x - mean:view(shape)) * (var + self.eps):rsqrt():view(shape)
  if self.weight then y = y * self.weight:view(shape) + self.bias:view(shape) end
  return y
end

function SyncBatchNorm:extra_repr()
  return ("%d, eps=%g, momentum=%g"):format(self.num_features, self.eps, self.momentum)
end

-- convert_sync_batchnorm(module): module with every BatchNorm1d/2d in its
-- tree replaced by a SyncBatchNorm holding the same parameters and buffers
-- (the same tensors, so an optimizer made before still holds them) and
-- training flag; a BatchNorm given itself comes back converted.  State
-- dict names are unchanged.
local bn_classes = { BatchNorm1d = true, BatchNorm2d = true, BatchNorm3d = true }
local function convert(m)
  if not module.is_module(m) then
    raise("convert_sync_batchnorm: expected a module, got " .. core.describe(m))
  end
  if bn_classes[m.__name] then
    local s = SyncBatchNorm(m.num_features, { eps = m.eps, momentum = m.momentum,
                                              affine = m.weight ~= nil,
                                              track_running_stats = m.track_running_stats })
    for _, k in ipairs { "weight", "bias" } do
      if m[k] ~= nil then s[k] = m[k] end
    end
    if m.track_running_stats then
      for _, k in ipairs { "running_mean", "running_var", "num_batches_tracked" } do s[k] = m[k] end
    end
    s.training = m.training
    return s
  end
  for _, name in ipairs(m._modules) do
    local child = m[name]
    local new = convert(child)
    if new ~= child then rawget(m, "_fields")[name] = new end  -- in place: the order of children stays
  end
  return m
end

SyncBatchNorm.convert_sync_batchnorm = convert
M.SyncBatchNorm = SyncBatchNorm
M.convert_sync_batchnorm = convert
return M
