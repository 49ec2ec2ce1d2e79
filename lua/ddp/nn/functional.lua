-- ddp.nn.functional (also ddp.functional): the functional forms of the
-- network layers, as torch.nn.functional: activations from tensor ops, the
-- rest from fused C kernels with their own backward.  Arguments C checks
-- (shapes, ranges) are left to C, whose message (runtime/core/errmsg.h)
-- is raised at the user's line; Lua checks what C never sees: Lua types,
-- options tables, and the values it turns into C arguments.
local core = require "ddp.core"
local _ = require "ddp.tensor"  -- x:relu() and friends: the tensor type
local factory = require "ddp.tensor.factory"
local C, ffi = core.C, core.ffi
local new, raise = core.new, core.raise
local tensor_arg = core.tensor_arg

core.add_lib_file(debug.getinfo(1, "S").source)

local F = {}

-- -- Activations and linear ----------------------------------------------------------

-- The input of an activation: a tensor, or an error at the user's line
-- naming the function (not Lua's "attempt to index a number value").
local function input(x, op)
  if not core.is_tensor(x) then raise(("%s: input must be a tensor, got %s"):format(op, core.describe(x))) end
  return x
end

function F.relu(x) return input(x, "relu"):relu() end
-- gelu(x, {approximate = "tanh"}), or gelu(x, "tanh")
function F.gelu(x, opts)
  input(x, "gelu")
  if opts ~= nil and type(opts) ~= "string" then opts = core.check_opts(opts, "gelu", { approximate = true }).approximate end
  return x:gelu(opts)
end
function F.silu(x) return input(x, "silu"):silu() end
function F.tanh(x) return input(x, "tanh"):tanh() end
function F.sigmoid(x) return input(x, "sigmoid"):sigmoid() end
function F.softmax(x, dim) return input(x, "softmax"):softmax(dim) end
function F.log_softmax(x, dim) return input(x, "log_softmax"):log_softmax(dim) end

-- y = x @ w^T + b, w [out, in], as torch.nn.functional.linear (the
-- shapes checked by C, dl_f_linear)
function F.linear(x, w, b)
  return new(C.dl_f_linear, tensor_arg(x, "linear", "input"), tensor_arg(w, "linear", "weight"),
             b ~= nil and tensor_arg(b, "linear", "bias") or nil)
end

-- -- Argument helpers -----------------------------------------------------------------

local pairs_buf = {}
for i = 1, 4 do pairs_buf[i] = ffi.new("int64_t[2]") end

-- An int or {h, w} into one of four scratch pairs.
local function pair(v, op, what, slot, dflt)
  if v == nil then v = dflt end
  if v == nil then return nil end
  local p = pairs_buf[slot]
  if type(v) == "number" then
    if not core.is_integer(v) then raise(("%s: %s must be an integer or {h, w}, got %s"):format(op, what, tostring(v))) end
    p[0], p[1] = v, v
  elseif type(v) == "table" and #v == 2 and core.is_integer(v[1]) and core.is_integer(v[2]) then
    p[0], p[1] = v[1], v[2]
  else
    raise(("%s: %s must be an integer or a table {h, w} of integers, got %s"):format(op, what, core.describe(v)))
  end
  return p
end

local reductions = { none = C.DL_LOSS_NONE, mean = C.DL_LOSS_MEAN, sum = C.DL_LOSS_SUM }
local function reduction(r, op)
  local v = reductions[r or "mean"]
  if not v then raise(('%s: reduction must be "mean", "sum" or "none", got %s'):format(op, tostring(r))) end
  return v
end

-- PyTorch's optional arguments: positional, in its order (names), then,
-- or instead, keywords in a table given last.  F.conv2d(x, w, b, 2, 1),
-- F.conv2d(x, w, b, {stride = 2, padding = 1}) and F.conv2d(x, w, b, 2,
-- {padding = 1}) read alike.  A table with only integer keys is a value
-- ({h, w}), not keywords.  Returns the options by name.
local function options(op, names, ...)
  local n = select("#", ...)
  local kw = n > 0 and select(n, ...) or nil
  if type(kw) == "table" and not core.is_tensor(kw) and (core.is_opts(kw) or next(kw) == nil) then
    n = n - 1
  else
    kw = nil
  end
  if n > #names then
    raise(("%s: takes at most %d optional arguments (%s), got %d"):format(op, #names, table.concat(names, ", "), n))
  end
  local o = {}
  for i = 1, n do o[names[i]] = (select(i, ...)) end
  for k, v in pairs(kw or {}) do
    local known = false
    for i = 1, #names do known = known or names[i] == k end
    if not known then
      raise(("%s: unknown option %s (options: %s)"):format(op, core.show(k), table.concat(names, ", ")))
    end
    if o[k] ~= nil then raise(("%s: %s given both by position and by name"):format(op, k)) end
    o[k] = v
  end
  return o
end

-- PyTorch's deprecated size_average and reduce (positional before
-- ignore_index and reduction) are refused rather than half-followed.
local function no_legacy(o, op)
  for _, k in ipairs { "size_average", "reduce" } do
    if o[k] ~= nil then raise(("%s: %s is deprecated in PyTorch and not supported; use reduction"):format(op, k)) end
  end
end

local function opt_tensor(v, op, what)
  if v == nil then return nil end
  return tensor_arg(v, op, what)
end

-- -- Convolution and pooling -------------------------------------------------------------

-- conv2d(x, weight, bias, stride, padding, dilation, groups), PyTorch's
-- order, or with the options as {stride=, padding=, dilation=, groups=}
local conv_names = { "stride", "padding", "dilation", "groups" }
function F.conv2d(x, w, b, ...)
  local o = options("conv2d", conv_names, ...)
  local groups = o.groups or 1
  if not core.is_integer(groups) then raise("conv2d: groups must be an integer, got " .. core.show(groups)) end
  return new(C.dl_f_conv2d, tensor_arg(x, "conv2d", "input"), tensor_arg(w, "conv2d", "weight"),
             opt_tensor(b, "conv2d", "bias"), pair(o.stride, "conv2d", "stride", 1, 1),
             pair(o.padding, "conv2d", "padding", 2, 0), pair(o.dilation, "conv2d", "dilation", 3, 1),
             groups)
end

-- max_pool2d(x, kernel, stride, padding, dilation, ceil_mode, return_indices),
-- or with a table of those options
local max_pool_names = { "stride", "padding", "dilation", "ceil_mode", "return_indices" }
function F.max_pool2d(x, kernel, ...)
  local o = options("max_pool2d", max_pool_names, ...)
  local out, idx = core.new2(C.dl_f_max_pool2d, tensor_arg(x, "max_pool2d", "input"),
                             pair(kernel, "max_pool2d", "kernel_size", 1),
                             pair(o.stride, "max_pool2d", "stride", 2),
                             pair(o.padding, "max_pool2d", "padding", 3, 0),
                             pair(o.dilation, "max_pool2d", "dilation", 4, 1),
                             o.ceil_mode and 1 or 0)
  if o.return_indices then return out, idx end
  return out
end

-- avg_pool2d(x, kernel, stride, padding, ceil_mode, count_include_pad,
-- divisor_override), or with a table of those options
local avg_pool_names = { "stride", "padding", "ceil_mode", "count_include_pad", "divisor_override" }
function F.avg_pool2d(x, kernel, ...)
  local o = options("avg_pool2d", avg_pool_names, ...)
  return new(C.dl_f_avg_pool2d, tensor_arg(x, "avg_pool2d", "input"),
             pair(kernel, "avg_pool2d", "kernel_size", 1), pair(o.stride, "avg_pool2d", "stride", 2),
             pair(o.padding, "avg_pool2d", "padding", 3, 0), o.ceil_mode and 1 or 0,
             o.count_include_pad == false and 0 or 1, o.divisor_override or 0)
end

-- -- Embedding, normalisation, dropout ---------------------------------------------------

-- embedding(idx, weight, padding_idx, max_norm, norm_type,
-- scale_grad_by_freq, sparse), or with a table of those options (max_norm
-- and sparse are not supported)
local embedding_names = { "padding_idx", "max_norm", "norm_type", "scale_grad_by_freq", "sparse" }
function F.embedding(idx, weight, ...)
  local opts = options("embedding", embedding_names, ...)
  if opts.max_norm ~= nil then raise("embedding: max_norm is not supported") end
  if opts.sparse then raise("embedding: sparse gradients are not supported") end
  weight = tensor_arg(weight, "embedding", "weight")
  local pad = opts.padding_idx
  if pad ~= nil and not core.is_integer(pad) then
    raise("embedding: padding_idx must be an integer, got " .. core.show(pad))
  end
  if pad == nil then pad = -1 elseif pad < 0 then pad = pad + weight:size(0) end
  return new(C.dl_f_embedding, weight, tensor_arg(idx, "embedding", "input"), pad,
             opts.scale_grad_by_freq and 1 or 0)
end

-- layer_norm(x, normalized_shape, weight, bias, eps): normalized_shape
-- is read as a shape (integers, at most 8: the buffer C reads), after the
-- tensors, whose tables would be read into the same buffer; how it fits x,
-- C checks.
function F.layer_norm(x, normalized_shape, w, b, eps)
  x = tensor_arg(x, "layer_norm", "input")
  w, b = opt_tensor(w, "layer_norm", "weight"), opt_tensor(b, "layer_norm", "bias")
  if type(normalized_shape) ~= "number" and (type(normalized_shape) ~= "table" or core.is_tensor(normalized_shape)) then
    raise("layer_norm: normalized_shape must be an integer or a table of integers, got " .. core.show(normalized_shape))
  end
  local n = core.shape_args("layer_norm", false, normalized_shape)
  return new(C.dl_f_layer_norm, x, core.shape_buf, n, w, b, eps or 1e-5)
end

-- rms_norm(x, normalized_shape, weight, eps), as torch.nn.functional.rms_norm:
-- x / sqrt(mean(x^2) + eps) over the trailing normalized_shape dims, times
-- weight.  eps nil: the dtype's machine epsilon, as PyTorch.  A bfloat16 or
-- float16 x is normalised and scaled in float32 and rounded once, as
-- PyTorch's kernel (Hugging Face's LlamaRMSNorm rounds before the weight:
-- ddp.hf.llama does that itself).  Composed of tensor ops, so autograd
-- follows.
local machine_eps = { float32 = 2 ^ -23, float64 = 2 ^ -52, bfloat16 = 2 ^ -7, float16 = 2 ^ -10 }
function F.rms_norm(x, normalized_shape, w, eps)
  x = tensor_arg(x, "rms_norm", "input")
  w = opt_tensor(w, "rms_norm", "weight")
  local shape = type(normalized_shape) == "number" and { normalized_shape } or normalized_shape
  if type(shape) ~= "table" or core.is_tensor(shape) then
    raise("rms_norm: normalized_shape must be an integer or a table of integers, got " .. core.show(normalized_shape))
  end
  local xs, k = x:shape(), #shape
  local fits = k <= #xs
  for i = 1, k do fits = fits and xs[#xs - k + i] == shape[i] end
  if not fits then
    raise(("rms_norm: normalized_shape %s does not match the last dims of the input %s")
          :format(core.fmt_shape(shape), core.fmt_shape(xs)))
  end
  if w and core.fmt_shape(w:shape()) ~= core.fmt_shape(shape) then
    raise(("rms_norm: weight has shape %s, expected normalized_shape %s")
          :format(core.fmt_shape(w:shape()), core.fmt_shape(shape)))
  end
  local dtype = x:dtype()
  if eps ~= nil and type(eps) ~= "number" then raise("rms_norm: eps must be a number or nil, got " .. core.show(eps)) end
  eps = eps or machine_eps[dtype]
  if not eps then raise(("rms_norm: input must be a floating tensor, got %s"):format(dtype)) end
  local half = dtype == "bfloat16" or dtype == "float16"
  local xf = half and x:float() or x
  local dims = {}
  for i = 1, k do dims[i] = #xs - k + i - 1 end
  local y = xf:mul(xf:square():mean(dims, true):add(eps):rsqrt())
  if w then y = y:mul(half and w:dtype() == dtype and w:float() or w) end
  if half and (not w or w:dtype() == dtype) then y = y:to(dtype) end  -- else the promoted dtype, as PyTorch
  return y
end

-- batch_norm(x, running_mean, running_var, weight, bias, training, momentum,
-- eps), or with a table {weight=, bias=, training=, momentum=, eps=}
local batch_norm_names = { "weight", "bias", "training", "momentum", "eps" }
function F.batch_norm(x, running_mean, running_var, ...)
  local opts = options("batch_norm", batch_norm_names, ...)
  return new(C.dl_f_batch_norm, tensor_arg(x, "batch_norm", "input"), opt_tensor(opts.weight, "batch_norm", "weight"),
             opt_tensor(opts.bias, "batch_norm", "bias"), opt_tensor(running_mean, "batch_norm", "running_mean"),
             opt_tensor(running_var, "batch_norm", "running_var"), opts.training and 1 or 0,
             opts.momentum or 0.1, opts.eps or 1e-5)
end

-- dropout(x, p, training): p in [0, 1], C checks
function F.dropout(x, p, training)
  p = p or 0.5
  if type(p) ~= "number" then raise("dropout: p must be a number, got " .. core.show(p)) end
  return new(C.dl_f_dropout, tensor_arg(x, "dropout", "input"), p, training == false and 0 or 1)
end

-- -- Attention ----------------------------------------------------------------------------

-- scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal,
-- scale) in PyTorch's order, or with a table {attn_mask=, dropout_p=,
-- is_causal=, scale=}: one fused kernel with its own backward (runtime/nn/
-- attention.c).  As PyTorch, dropout_p applies whenever it is above 0:
-- pass 0 outside training (nn.MultiheadAttention does).
local sdpa_names = { "attn_mask", "dropout_p", "is_causal", "scale" }
function F.scaled_dot_product_attention(q, k, v, ...)
  local o = options("scaled_dot_product_attention", sdpa_names, ...)
  local p = o.dropout_p or 0  -- in [0, 1], C checks
  if type(p) ~= "number" then
    raise("scaled_dot_product_attention: dropout_p must be a number, got " .. core.show(p))
  end
  if o.scale ~= nil and type(o.scale) ~= "number" then
    raise("scaled_dot_product_attention: scale must be a number or nil, got " .. core.show(o.scale))
  end
  return new(C.dl_f_scaled_dot_product_attention, tensor_arg(q, "scaled_dot_product_attention", "query"),
             tensor_arg(k, "scaled_dot_product_attention", "key"),
             tensor_arg(v, "scaled_dot_product_attention", "value"),
             opt_tensor(o.attn_mask, "scaled_dot_product_attention", "attn_mask"),
             o.is_causal and 1 or 0, p, o.scale or 0 / 0)
end

-- -- Padding ---------------------------------------------------------------------------------

-- pad(x, pad, mode, value), or pad(x, pad, {mode =, value =}), as
-- torch.nn.functional.pad: pad = {left, right} of the last dim, then of
-- the one before, ... (negative entries crop); mode "constant" (value,
-- default 0), "reflect" (mirrored without the edge), "replicate" (the edge
-- repeated) or "circular" (wrapped around; negative entries crop first).
-- Composed from narrow, cat and index_select, so autograd follows.
local pad_names = { "mode", "value" }
local pad_modes = { constant = true, reflect = true, replicate = true, circular = true }

-- the source index of each output position j along a dim of size n
local pad_index = {
  replicate = function(i, n) return math.min(math.max(i, 0), n - 1) end,
  reflect = function(i, n)
    if i < 0 then return -i end
    if i >= n then return 2 * (n - 1) - i end
    return i
  end,
  circular = function(i, n) return i % n end,
}

local function pad_dim(x, d, l, r, mode, value)
  local n = x:size(d)
  if mode == "constant" or mode == "circular" then  -- crop first
    local lo, hi = math.max(0, -l), n - math.max(0, -r)
    if lo > 0 or hi < n then
      x = x:narrow(d, lo, math.max(0, hi - lo))
      n = x:size(d)
    end
    l, r = math.max(l, 0), math.max(r, 0)
  end
  if l == 0 and r == 0 then return x end
  if mode == "constant" then
    local parts = {}
    local function fill(k)
      local shape = x:shape()
      shape[d + 1] = k
      parts[#parts + 1] = factory.full(shape, value, { dtype = x:dtype(), device = x:device() })
    end
    if l > 0 then fill(l) end
    parts[#parts + 1] = x
    if r > 0 then fill(r) end
    return factory.cat(parts, d)
  end
  local idx, f = {}, pad_index[mode]
  for j = 0, n + l + r - 1 do idx[j + 1] = f(j - l, n) end
  return x:index_select(d, factory.tensor(idx, { dtype = "int64", device = x:device() }))
end

function F.pad(x, pad, ...)
  local o = options("pad", pad_names, ...)
  x = tensor_arg(x, "pad", "input")
  local mode = o.mode or "constant"
  if not pad_modes[mode] then
    raise(('pad: unrecognised padding mode %s (expected "constant", "reflect", "replicate" or "circular")')
          :format(core.show(mode)))
  end
  if type(pad) ~= "table" or core.is_tensor(pad) then
    raise("pad: pad must be a table {left, right, top, bottom, ...} of integers, got " .. core.describe(pad))
  end
  for i = 1, #pad do
    if not core.is_integer(pad[i]) then raise(("pad: pad[%d] must be an integer, got %s"):format(i, core.show(pad[i]))) end
  end
  if #pad % 2 ~= 0 then raise("pad: padding length must be divisible by 2, got " .. #pad) end
  local k, nd = #pad / 2, x:dim()
  if k > nd then raise(("pad: padding length too large: %d values pad %d dims, the input has %d"):format(#pad, k, nd)) end
  local value = o.value
  if mode == "constant" then
    value = value or 0
    if type(value) ~= "number" then raise("pad: value must be a number, got " .. core.show(value)) end
  else
    if value ~= nil and value ~= 0 then raise(('pad: padding mode "%s" doesn\'t take in value argument'):format(mode)) end
    if k > 3 or (nd ~= k + 1 and nd ~= k + 2) then
      raise(("pad: %s padding of %d dims needs a %d-D or %d-D input, got %d-D (PyTorch pads 1 to 3 dims so, after a channel dim and an optional batch dim)")
            :format(mode, k, k + 1, k + 2, nd))
    end
  end
  for i = 1, k do
    local d, l, r = nd - i, pad[2 * i - 1], pad[2 * i]
    local n = x:size(d)
    if mode == "constant" and n + l + r < 0 then
      raise(("pad: the input size %d, plus negative padding %d and %d resulted in a negative output size, which is invalid. Check dimension %d of your input.")
            :format(n, l, r, d))
    elseif mode == "reflect" and (l >= n or r >= n) then
      raise(("pad: padding size should be less than the corresponding input dimension, but got: padding (%d, %d) at dimension %d of input %s")
            :format(l, r, d, core.fmt_shape(x:shape())))
    elseif mode == "replicate" and n == 0 and (l > 0 or r > 0) then
      raise(("pad: replicate padding of dimension %d, which is empty"):format(d))
    elseif mode == "circular" then
      local kept = n - math.max(0, -l) - math.max(0, -r)
      if l > kept or r > kept then
        raise(("pad: padding value causes wrapping around more than once: padding (%d, %d) at dimension %d of size %d")
              :format(l, r, d, math.max(kept, 0)))
      end
    end
  end
  for i = 1, k do x = pad_dim(x, nd - i, pad[2 * i - 1], pad[2 * i], mode, value) end
  return x
end

-- -- Losses --------------------------------------------------------------------------------

-- cross_entropy(logits, target, weight, size_average, ignore_index, reduce,
-- reduction, label_smoothing) as PyTorch, or with a table {weight=,
-- ignore_index=-100, label_smoothing=0, reduction="mean"}
local cross_entropy_names = { "weight", "size_average", "ignore_index", "reduce", "reduction", "label_smoothing" }
function F.cross_entropy(x, target, ...)
  local opts = options("cross_entropy", cross_entropy_names, ...)
  no_legacy(opts, "cross_entropy")
  return new(C.dl_f_cross_entropy, tensor_arg(x, "cross_entropy", "input"),
             tensor_arg(target, "cross_entropy", "target"), opt_tensor(opts.weight, "cross_entropy", "weight"),
             opts.ignore_index or -100, opts.label_smoothing or 0, reduction(opts.reduction, "cross_entropy"))
end

local nll_names = { "weight", "size_average", "ignore_index", "reduce", "reduction" }
function F.nll_loss(logp, target, ...)
  local opts = options("nll_loss", nll_names, ...)
  no_legacy(opts, "nll_loss")
  return new(C.dl_f_nll_loss, tensor_arg(logp, "nll_loss", "input"), tensor_arg(target, "nll_loss", "target"),
             opt_tensor(opts.weight, "nll_loss", "weight"), opts.ignore_index or -100,
             reduction(opts.reduction, "nll_loss"))
end

local mse_names = { "size_average", "reduce", "reduction" }
function F.mse_loss(input, target, ...)
  local opts = options("mse_loss", mse_names, ...)
  no_legacy(opts, "mse_loss")
  return new(C.dl_f_mse_loss, tensor_arg(input, "mse_loss", "input"), tensor_arg(target, "mse_loss", "target"),
             reduction(opts.reduction, "mse_loss"))
end

-- Autocast's op lists (ddp.autocast).
do
  local autocast = require "ddp.autocast"
  autocast.install(F, autocast.functional_low, "low")
  autocast.install(F, autocast.functional_f32, "f32")
end

return F
