-- ddp.nn.layers: the layers of torch.nn that hold no other module --
-- Linear, Conv2d, pooling, Flatten, the activations, Dropout, LayerNorm,
-- RMSNorm, BatchNorm1d/2d and Embedding -- over ddp.nn.functional.
local core = require "ddp.core"
local factory = require "ddp.tensor.factory"
local autograd = require "ddp.autograd"
local F = require "ddp.nn.functional"
local init = require "ddp.nn.weight_init"
local Module = require("ddp.nn.module").Module
local raise = core.raise

core.add_lib_file(debug.getinfo(1, "S").source)

local nn = {}

local function param(...) return factory.empty(...):requires_grad_() end

nn.Linear = Module:extend("Linear")
function nn.Linear:init(in_features, out_features, opts)
  opts = opts or {}
  if not core.is_integer(in_features) or not core.is_integer(out_features) then
    raise("Linear: in_features and out_features must be integers")
  end
  self.in_features, self.out_features = in_features, out_features
  self.weight = param(out_features, in_features, { dtype = opts.dtype })
  init.kaiming_uniform_(self.weight, math.sqrt(5))
  if opts.bias ~= false then
    self.bias = param(out_features, { dtype = opts.dtype })
    local bound = in_features > 0 and 1 / math.sqrt(in_features) or 0
    init.uniform_(self.bias, -bound, bound)
  end
end
function nn.Linear:forward(x) return F.linear(x, self.weight, self.bias) end
function nn.Linear:extra_repr()
  return ("in_features=%d, out_features=%d, bias=%s"):format(self.in_features, self.out_features,
                                                             self.bias ~= nil and "True" or "False")
end

local function as_pair(v) return type(v) == "table" and v or { v, v } end

nn.Conv2d = Module:extend("Conv2d")
function nn.Conv2d:init(in_ch, out_ch, kernel, opts)
  opts = opts or {}
  local k = as_pair(kernel)
  local groups = opts.groups or 1
  if in_ch % groups ~= 0 or out_ch % groups ~= 0 then
    raise(("Conv2d: in_channels %d and out_channels %d must be divisible by groups %d"):format(in_ch, out_ch, groups))
  end
  self.in_channels, self.out_channels, self.kernel_size = in_ch, out_ch, k
  self.stride, self.padding, self.dilation, self.groups = opts.stride or 1, opts.padding or 0, opts.dilation or 1, groups
  self.weight = param(out_ch, in_ch / groups, k[1], k[2], { dtype = opts.dtype })
  init.kaiming_uniform_(self.weight, math.sqrt(5))
  if opts.bias ~= false then
    self.bias = param(out_ch, { dtype = opts.dtype })
    local bound = 1 / math.sqrt(in_ch / groups * k[1] * k[2])
    init.uniform_(self.bias, -bound, bound)
  end
end
function nn.Conv2d:forward(x)
  return F.conv2d(x, self.weight, self.bias, { stride = self.stride, padding = self.padding,
                                               dilation = self.dilation, groups = self.groups })
end
function nn.Conv2d:extra_repr()
  return ("%d, %d, kernel_size=(%d, %d), stride=%s, padding=%s"):format(self.in_channels, self.out_channels,
    self.kernel_size[1], self.kernel_size[2], tostring(self.stride), tostring(self.padding))
end

nn.MaxPool2d = Module:extend("MaxPool2d")
function nn.MaxPool2d:init(kernel, opts)
  self.kernel_size, self.opts = kernel, opts or {}
end
function nn.MaxPool2d:forward(x) return F.max_pool2d(x, self.kernel_size, self.opts) end
function nn.MaxPool2d:extra_repr() return "kernel_size=" .. tostring(self.kernel_size) end

nn.AvgPool2d = Module:extend("AvgPool2d")
function nn.AvgPool2d:init(kernel, opts)
  self.kernel_size, self.opts = kernel, opts or {}
end
function nn.AvgPool2d:forward(x) return F.avg_pool2d(x, self.kernel_size, self.opts) end

nn.Flatten = Module:extend("Flatten")
function nn.Flatten:init(start_dim, end_dim) self.start_dim, self.end_dim = start_dim or 1, end_dim or -1 end
function nn.Flatten:forward(x) return x:flatten(self.start_dim, self.end_dim) end

local function activation(name, fn)
  local cls = Module:extend(name)
  cls.forward = fn
  return cls
end
nn.ReLU = activation("ReLU", function(_, x) return x:relu() end)
nn.SiLU = activation("SiLU", function(_, x) return x:silu() end)
nn.Tanh = activation("Tanh", function(_, x) return x:tanh() end)
nn.Sigmoid = activation("Sigmoid", function(_, x) return x:sigmoid() end)
nn.Identity = activation("Identity", function(_, x) return x end)
nn.GELU = Module:extend("GELU")
function nn.GELU:init(opts) self.approximate = opts and opts.approximate or "none" end
function nn.GELU:forward(x) return x:gelu(self.approximate) end
function nn.GELU:extra_repr() return ("approximate='%s'"):format(self.approximate) end

nn.Dropout = Module:extend("Dropout")
function nn.Dropout:init(p)
  p = p or 0.5
  if type(p) ~= "number" or p < 0 or p > 1 then raise("Dropout: p must be in [0, 1], got " .. tostring(p)) end
  self.p = p
end
function nn.Dropout:forward(x) return F.dropout(x, self.p, self.training) end
function nn.Dropout:extra_repr() return "p=" .. self.p end

nn.LayerNorm = Module:extend("LayerNorm")
function nn.LayerNorm:init(shape, opts)
  opts = opts or {}
  self.normalized_shape = type(shape) == "table" and shape or { shape }
  self.eps = opts.eps or 1e-5
  if opts.elementwise_affine ~= false then
    self.weight = factory.ones(self.normalized_shape, { dtype = opts.dtype }):requires_grad_()
    self.bias = factory.zeros(self.normalized_shape, { dtype = opts.dtype }):requires_grad_()
  end
end
function nn.LayerNorm:forward(x) return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps) end
-- a normalized_shape as torch prints it: a Python tuple, "(5,)"
local function shape_tuple(shape)
  local dims = {}
  for i, d in ipairs(shape) do dims[i] = tostring(d) end
  return #dims == 1 and "(" .. dims[1] .. ",)" or "(" .. table.concat(dims, ", ") .. ")"
end
function nn.LayerNorm:extra_repr()
  local shape = shape_tuple(self.normalized_shape)
  return ("%s, eps=%g, elementwise_affine=%s, bias=%s"):format(shape, self.eps, self.weight and "True" or "False",
                                                              self.bias and "True" or "False")
end

-- nn.RMSNorm(normalized_shape[, {eps =, elementwise_affine =, dtype =}]), as
-- torch.nn.RMSNorm: F.rms_norm with a weight of ones (eps nil: the input
-- dtype's epsilon).
nn.RMSNorm = Module:extend("RMSNorm")
function nn.RMSNorm:init(shape, opts)
  opts = core.check_opts(opts or {}, "RMSNorm", { eps = true, elementwise_affine = true, dtype = true })
  self.normalized_shape = type(shape) == "table" and shape or { shape }
  self.eps = opts.eps
  if opts.elementwise_affine ~= false then
    self.weight = factory.ones(self.normalized_shape, { dtype = opts.dtype }):requires_grad_()
  end
end
function nn.RMSNorm:forward(x) return F.rms_norm(x, self.normalized_shape, self.weight, self.eps) end
function nn.RMSNorm:extra_repr()
  return ("%s, eps=%s, elementwise_affine=%s"):format(shape_tuple(self.normalized_shape), self.eps and ("%g"):format(self.eps) or "None",
                                                     self.weight and "True" or "False")
end

-- A batch norm's options, parameters and buffers on self (BatchNorm1d/2d
-- and SyncBatchNorm alike, so their state_dict names agree).
function nn.batch_norm_state(self, num_features, opts)
  opts = opts or {}
  self.num_features, self.eps = num_features, opts.eps or 1e-5
  self.momentum = opts.momentum == nil and 0.1 or opts.momentum
  if opts.affine ~= false then
    self.weight = factory.ones(num_features, { dtype = opts.dtype }):requires_grad_()
    self.bias = factory.zeros(num_features, { dtype = opts.dtype }):requires_grad_()
  end
  self.track_running_stats = opts.track_running_stats ~= false
  if self.track_running_stats then
    self:register_buffer("running_mean", factory.zeros(num_features, { dtype = opts.dtype }))
    self:register_buffer("running_var", factory.ones(num_features, { dtype = opts.dtype }))
    self:register_buffer("num_batches_tracked", factory.zeros({}, { dtype = "int64" }))
  end
end

local function batch_norm_class(name, dims)
  local cls = Module:extend(name)
  cls.init = nn.batch_norm_state
  function cls:forward(x)
    if not dims[x:dim()] then
      raise(("%s: expected %s input, got %d-D (shape %s)"):format(name, dims.text, x:dim(), core.fmt_shape(x:shape())))
    end
    local use_batch = self.training or not self.track_running_stats
    if self.training and self.track_running_stats then
      autograd.no_grad(function() self.num_batches_tracked:add_(1) end)
    end
    return F.batch_norm(x, self.track_running_stats and self.running_mean or nil,
                        self.track_running_stats and self.running_var or nil,
                        { weight = self.weight, bias = self.bias, training = use_batch,
                          momentum = self.momentum, eps = self.eps })
  end
  function cls:extra_repr() return ("%d, eps=%g, momentum=%g"):format(self.num_features, self.eps, self.momentum) end
  return cls
end
nn.BatchNorm1d = batch_norm_class("BatchNorm1d", { [2] = true, [3] = true, text = "2-D or 3-D" })
nn.BatchNorm2d = batch_norm_class("BatchNorm2d", { [4] = true, text = "4-D" })

nn.Embedding = Module:extend("Embedding")
function nn.Embedding:init(num, dim, opts)
  opts = opts or {}
  self.num_embeddings, self.embedding_dim, self.padding_idx = num, dim, opts.padding_idx
  self.weight = factory.randn(num, dim, { dtype = opts.dtype }):requires_grad_()
  if opts.padding_idx then
    local row = opts.padding_idx < 0 and opts.padding_idx + num or opts.padding_idx
    autograd.no_grad(function() self.weight:select(0, row):zero_() end)
  end
end
function nn.Embedding:forward(idx) return F.embedding(idx, self.weight, { padding_idx = self.padding_idx }) end
function nn.Embedding:extra_repr()
  local s = ("%d, %d"):format(self.num_embeddings, self.embedding_dim)
  if self.padding_idx then s = s .. ", padding_idx=" .. self.padding_idx end
  return s
end

return nn
