-- ddp.tensor.views: the tensor methods that view a tensor's data in
-- another shape (view, reshape, expand, transpose, permute, narrow,
-- select, squeeze, flatten, as_strided, split, chunk, unbind), following
-- PyTorch's names and semantics with 0-based dims.  ddp.tensor composes
-- them into the tensor type.
local core = require "ddp.core"
local info = require "ddp.tensor.info"
local C, ffi = core.C, core.ffi
local new, raise = core.new, core.raise
local tensor_arg, is_integer = core.tensor_arg, core.is_integer
local live = core.live
local dim_arg, shape_args = core.dim_arg, core.shape_args
local shape_buf = core.shape_buf
local norm_dim = info.norm_dim
local type, ipairs, rawequal = type, ipairs, rawequal

core.add_lib_file(debug.getinfo(1, "S").source)

local M = {}
local m = {}  -- the methods of this file
-- The whole method table (ddp.tensor's), for calls between methods: they
-- go through it, so they meet the same wrappers a user's call does.
local T

function m.view(t, ...)
  local n = shape_args("view", true, ...)
  return new(C.dl_view, t, shape_buf, n)
end
function m.reshape(t, ...)
  local n = shape_args("reshape", true, ...)
  return new(C.dl_reshape, t, shape_buf, n)
end
function m.view_as(t, o) return T.view(t, core.shape_of(tensor_arg(o, "view_as"))) end
function m.reshape_as(t, o) return T.reshape(t, core.shape_of(tensor_arg(o, "reshape_as"))) end
function m.expand(t, ...)
  local n = shape_args("expand", true, ...)
  return new(C.dl_expand, t, shape_buf, n)
end
function m.expand_as(t, o) return T.expand(t, core.shape_of(tensor_arg(o, "expand_as"))) end

function m.transpose(t, d0, d1)
  return new(C.dl_transpose, t, dim_arg(d0, "transpose", "dim0"), dim_arg(d1, "transpose", "dim1"))
end
m.swapaxes = m.transpose
function m.t(t)
  local n = C.dl_tensor_dim(t)
  if n > 2 then raise(("t: expects a tensor with <= 2 dims, got %d dims; use transpose"):format(n)) end
  if n < 2 then return t end
  return T.transpose(t, 0, 1)
end

local perm_buf = ffi.new("int[8]")
function m.permute(t, ...)
  local dims = ...
  if type(dims) ~= "table" then dims = { ... } end
  if #dims > 8 then raise("permute: at most 8 dims") end
  for i = 1, #dims do perm_buf[i - 1] = dim_arg(dims[i], "permute") end
  return new(C.dl_permute, t, perm_buf, #dims)
end

function m.narrow(t, dim, start, length)
  return new(C.dl_narrow, t, dim_arg(dim, "narrow"), dim_arg(start, "narrow", "start"),
             dim_arg(length, "narrow", "length"))
end
function m.select(t, dim, index)
  return new(C.dl_select, t, dim_arg(dim, "select"), dim_arg(index, "select", "index"))
end
function m.squeeze(t, dim)
  if dim == nil then return new(C.dl_squeeze_all, t) end
  return new(C.dl_squeeze, t, dim_arg(dim, "squeeze"))
end
function m.unsqueeze(t, dim) return new(C.dl_unsqueeze, t, dim_arg(dim, "unsqueeze")) end
function m.flatten(t, s, e)
  return new(C.dl_flatten, t, dim_arg(s or 0, "flatten", "start_dim"), dim_arg(e or -1, "flatten", "end_dim"))
end
function m.unflatten(t, dim, sizes)
  live(t, "unflatten")
  local shape = core.shape_of(t)
  dim = norm_dim(t, dim, "unflatten")
  if type(sizes) ~= "table" or core.is_tensor(sizes) then
    raise("unflatten: sizes must be a table of integers, got " .. core.show(sizes))
  end
  local prod, infer = 1, false
  for i = 1, #sizes do
    local v = sizes[i]
    if not is_integer(v) or v < -1 or (v == -1 and infer) then
      raise(("unflatten: invalid sizes %s (non-negative integers, and at most one -1)"):format(core.fmt_shape(sizes)))
    end
    if v == -1 then infer = true else prod = prod * v end
  end
  local size = shape[dim + 1] or 1
  if (infer and (prod == 0 or size % prod ~= 0)) or (not infer and prod ~= size) then
    raise(("unflatten: sizes %s do not multiply to the size %d of dim %d (shape %s)")
          :format(core.fmt_shape(sizes), size, dim, core.fmt_shape(shape)))
  end
  local new_shape = {}
  for i = 1, dim do new_shape[#new_shape + 1] = shape[i] end
  for i = 1, #sizes do new_shape[#new_shape + 1] = sizes[i] end
  for i = dim + 2, #shape do new_shape[#new_shape + 1] = shape[i] end
  return T.view(t, new_shape)
end

local stride_buf = ffi.new("int64_t[8]")
function m.as_strided(t, size, stride, offset)
  if type(size) ~= "table" or type(stride) ~= "table" or #size ~= #stride then
    raise("as_strided: size and stride must be tables of the same length")
  end
  local n = shape_args("as_strided", false, size)
  for i = 1, n do stride_buf[i - 1] = dim_arg(stride[i], "as_strided", "stride") end
  return new(C.dl_as_strided, t, shape_buf, stride_buf, n,
             offset == nil and C.dl_tensor_offset(t) or dim_arg(offset, "as_strided", "offset"))
end

-- split(size or {sizes}, dim) and chunk(n, dim) return Lua tables of views.
function m.split(t, size, dim)
  live(t, "split")
  if C.dl_tensor_dim(t) == 0 then raise("split: cannot split a 0-dim tensor") end
  dim = norm_dim(t, dim or 0, "split")
  local total = T.size(t, dim)
  local parts = {}
  if type(size) == "table" and not core.is_tensor(size) then
    local sum, start = 0, 0
    for i = 1, #size do
      if not is_integer(size[i]) or size[i] < 0 then
        raise(("split: sizes must be non-negative integers, got %s at position %d"):format(core.show(size[i]), i))
      end
      sum = sum + size[i]
    end
    if sum ~= total then
      raise(("split: sizes %s add up to %d, but dim %d has size %d"):format(core.fmt_shape(size), sum, dim, total))
    end
    for i = 1, #size do
      parts[i] = T.narrow(t, dim, start, size[i])
      start = start + size[i]
    end
    return parts
  end
  if not is_integer(size) or size <= 0 then
    raise("split: split_size must be a positive integer, got " .. tostring(size))
  end
  local start = 0
  repeat
    local len = math.min(size, total - start)
    parts[#parts + 1] = T.narrow(t, dim, start, len)
    start = start + len
  until start >= total
  return parts
end

function m.chunk(t, chunks, dim)
  live(t, "chunk")
  if not is_integer(chunks) or chunks <= 0 then
    raise("chunk: chunks must be a positive integer, got " .. tostring(chunks))
  end
  if C.dl_tensor_dim(t) == 0 then raise("chunk: cannot chunk a 0-dim tensor") end
  dim = norm_dim(t, dim or 0, "chunk")
  local total = T.size(t, dim)
  return T.split(t, math.max(1, math.ceil(total / chunks)), dim)
end

function m.unbind(t, dim)
  live(t, "unbind")
  if C.dl_tensor_dim(t) == 0 then raise("unbind: cannot unbind a 0-dim tensor") end
  dim = norm_dim(t, dim or 0, "unbind")
  local r = {}
  for i = 0, T.size(t, dim) - 1 do r[i + 1] = T.select(t, dim, i) end
  return r
end

-- -- Reversing and rotating (copies, as torch's) ----------------------------------

-- The dims of a flip or roll, each normalised, none twice.
local function dim_list(t, dims, op)
  if type(dims) == "number" then dims = { dims } end
  if type(dims) ~= "table" or #dims == 0 then
    raise(("%s: dims must be a dim or a list of dims, got %s"):format(op, core.show(dims)))
  end
  local out, seen = {}, {}
  for k, d in ipairs(dims) do
    d = norm_dim(t, d, op)
    if seen[d] then raise(("%s: dim %d appears more than once in dims"):format(op, d)) end
    seen[d], out[k] = true, d
  end
  return out
end

-- [n - 1, ..., 0] where t is, as int64
local function reversed(t, n)
  local idx = {}
  for i = 1, n do idx[i] = n - i end
  local r = core.tensor_from(idx, { dtype = "int64" })
  local dev = C.dl_tensor_device(t)
  if dev >= 0 then r = T.to(r, "cuda:" .. dev) end
  return r
end

-- t:flip(dims) (torch.flip): a copy with each dim of dims in reverse order;
-- dims a dim or a list of them.  Gradients flow back through it.
function m.flip(t, dims)
  live(t, "flip")
  local out = t
  for _, d in ipairs(dim_list(t, dims, "flip")) do
    local n = T.size(t, d)
    if n > 1 then out = T.index_select(out, d, reversed(t, n)) end
  end
  if rawequal(out, t) then out = T.clone(t) end
  return out
end

-- t:fliplr() / t:flipud(): flip(1) of a tensor of 2 or more dims / flip(0)
-- of one of 1 or more, as torch's.
function m.fliplr(t)
  if C.dl_tensor_dim(t) < 2 then raise("fliplr: the tensor must have at least 2 dims, got " .. C.dl_tensor_dim(t)) end
  return m.flip(t, 1)
end
function m.flipud(t)
  if C.dl_tensor_dim(t) < 1 then raise("flipud: the tensor must have at least 1 dim, got 0") end
  return m.flip(t, 0)
end

-- t:roll(shifts[, dims]) (torch.roll): elements shifted along dims (the
-- flattened tensor without dims), those past the end coming round at the
-- start; shifts and dims numbers or lists of one length.
function m.roll(t, shifts, dims)
  live(t, "roll")
  if dims == nil then
    if type(shifts) ~= "number" and not (type(shifts) == "table" and #shifts == 1) then
      raise("roll: without dims, shifts must be one number (the flattened tensor rolls)")
    end
    local shape = T.shape(t)
    return T.reshape(m.roll(T.reshape(t, -1), shifts, 0), shape)
  end
  local sh = type(shifts) == "number" and { shifts } or shifts
  local ds = dim_list(t, dims, "roll")
  if type(sh) ~= "table" or #sh ~= #ds then
    raise(("roll: shifts and dims must have the same length, got %s and %s"):format(core.show(shifts), core.show(dims)))
  end
  local out = t
  for k, d in ipairs(ds) do
    if not is_integer(sh[k]) then raise("roll: shifts must be integers, got " .. core.show(sh[k])) end
    local n = T.size(t, d)
    local s = n > 0 and sh[k] % n or 0
    if s ~= 0 then
      local tail, head = T.narrow(out, d, n - s, s), T.narrow(out, d, 0, n - s)
      out = new(C.dl_cat, ffi.new("dl_tensor *[2]", tail, head), 2, d)
      local _ = tail and head  -- the handles (and their views) live until the cat is made
    end
  end
  if rawequal(out, t) then out = T.clone(t) end
  return out
end

-- methods(all) -> this file's methods; all is the table they end up in.
function M.methods(all)
  T = all
  return m
end

return M
