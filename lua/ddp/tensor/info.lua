-- ddp.tensor.info: the tensor methods that describe, convert, copy and
-- read a tensor (metadata, to/cpu/cuda, clone, copy_, fill_, item, get,
-- set, totable), following PyTorch's names and semantics with 0-based
-- dims.  ddp.tensor composes them into the tensor type.
local core = require "ddp.core"
local C, ffi = core.C, core.ffi
local new, check, raise = core.new, core.check, core.raise
local operand, tensor_arg, is_integer = core.operand, core.tensor_arg, core.is_integer
local live = core.live
local dim_arg = core.dim_arg
local type, select, tonumber = type, select, tonumber

core.add_lib_file(debug.getinfo(1, "S").source)

local M = {}
local m = {}  -- the methods of this file
-- The whole method table (ddp.tensor's), for calls between methods: they
-- go through it, so they meet the same wrappers a user's call does.
local T

-- -- Metadata -------------------------------------------------------------

function m.dim(t) return C.dl_tensor_dim(t) end
m.ndimension = m.dim
function m.numel(t) return tonumber(C.dl_tensor_numel(t)) end
m.nelement = m.numel
function m.shape(t) return core.shape_of(t) end

local function norm_dim(t, d, op)
  local n = C.dl_tensor_dim(t)
  d = dim_arg(d, op)
  local m = n > 0 and n or 1
  if d < -m or d >= m then
    raise(("%s: dim %d out of range for a %d-dim tensor (expected %d to %d)"):format(op, d, n, -m, m - 1))
  end
  return d < 0 and d + m or d
end

function m.size(t, d)
  if d == nil then return core.shape_of(t) end
  d = norm_dim(t, d, "size")
  return tonumber(C.dl_tensor_size(t, d))
end

function m.stride(t, d)
  if d == nil then
    local s = {}
    for i = 0, C.dl_tensor_dim(t) - 1 do s[i + 1] = tonumber(C.dl_tensor_stride(t, i)) end
    return s
  end
  return tonumber(C.dl_tensor_stride(t, norm_dim(t, d, "stride")))
end

function m.dtype(t) return core.dtype_name(C.dl_tensor_dtype(t)) end
function m.device(t)
  local d = C.dl_tensor_device(t)
  return d < 0 and "cpu" or ("cuda:" .. d)
end
function m.is_contiguous(t) return C.dl_tensor_is_contiguous(t) ~= 0 end
function m.is_floating_point(t) return C.dl_dtype_is_float(C.dl_tensor_dtype(t)) ~= 0 end
function m.element_size(t) return C.dl_dtype_size(C.dl_tensor_dtype(t)) end
function m.storage_offset(t) return tonumber(C.dl_tensor_offset(t)) end
function m.data_ptr(t) return C.dl_tensor_data(live(t, "data_ptr")) end
function m.is_shared(t, u) return C.dl_tensor_same_storage(t, tensor_arg(u, "is_shared", "other")) ~= 0 end

-- Drops this handle's reference now instead of at the next collection.
-- The handle stays valid: using it afterwards is an error, not a crash.
function m.free(t)
  C.dl_tensor_free_data(t)
end

-- -- Conversion and copies -----------------------------------------------

function m.to(t, what, opts)
  if type(what) == "table" then what, opts = nil, what end
  opts = opts or {}
  if type(opts) ~= "table" then raise("to: options must be a table, got " .. core.show(opts)) end
  local dtype, device = opts.dtype, opts.device
  if type(what) == "string" then
    if what == "cpu" or what:match("^cuda") then device = what else dtype = what end
  elseif what ~= nil then
    raise("to: expected a dtype or device name, got " .. core.describe(what))
  end
  local dev = device ~= nil and core.device_arg(device, "to") or nil
  if dev ~= nil and dev == C.dl_tensor_device(t) then dev = nil end
  -- dtypes convert on the CPU: before going to a device, after leaving one
  if dev ~= nil and dev >= 0 and C.dl_tensor_device(t) >= 0 then
    t = new(C.dl_to_device, t, -1)
  end
  if dev ~= nil and dev < 0 then t = new(C.dl_to_device, t, -1) dev = nil end
  if dtype ~= nil then
    local d = core.dtype_arg(dtype, "to")
    if d ~= C.dl_tensor_dtype(t) or opts.copy then t = new(C.dl_to_dtype, t, d) end
  end
  if dev ~= nil then
    if opts.non_blocking then
      t = new(C.dl_to_device_async, t, dev)
    else
      t = new(C.dl_to_device, t, dev)
    end
  end
  return t
end
m.type = function(t, dtype)
  if dtype == nil then return "ddp." .. T.dtype(t) end
  return T.to(t, dtype)
end
for _, name in ipairs { "float", "double", "half", "bfloat16", "long", "int", "bool" } do
  local d = C.dl_dtype_from_name(name)
  m[name] = function(t) return T.to(t, core.dtype_name(d)) end
end
m.byte = function(t) return T.to(t, "uint8") end
m.cpu = function(t) return T.to(t, "cpu") end
-- t:cuda([n][, {non_blocking = true}]): on this worker's GPU, or on cuda:n
m.cuda = function(t, n, opts)
  if type(n) == "table" then n, opts = nil, n end
  if n ~= nil and not core.is_integer(n) then raise("cuda: device must be an index, got " .. core.show(n)) end
  return T.to(t, n and ("cuda:" .. n) or "cuda", opts)
end
-- A copy in page-locked host memory, from which t:cuda({non_blocking =
-- true}) copies while the host goes on (t itself if already pinned).
function m.pin_memory(t) return new(C.dl_pin_memory, t) end
function m.is_pinned(t) return C.dl_tensor_is_pinned(t) ~= 0 end

function m.clone(t) return new(C.dl_clone, t) end
function m.contiguous(t) return new(C.dl_contiguous, t) end

function m.copy_(t, src)
  check(C.dl_copy_(t, operand(src, "copy_")))
  return t
end
function m.fill_(t, v)
  if core.is_tensor(v) then v = T.item(v) end
  if type(v) == "boolean" then v = v and 1 or 0 end
  if type(v) ~= "number" then raise("fill_: value must be a number, got " .. type(v)) end
  check(C.dl_fill_(t, v))
  return t
end
-- zero_ is fill_(0) in C; its errors name zero_, the op the user called.
function m.zero_(t)
  if C.dl_fill_(t, 0) ~= 0 then core.raise((core.last_error():gsub("^fill_:", "zero_:"))) end
  return t
end

-- -- Element access -------------------------------------------------------

local read = core.read
m.item = core.item

-- The truth of a one-element tensor as a Lua boolean, as PyTorch's
-- is_nonzero (a tensor itself is always true in an `if`).
function m.is_nonzero(t)
  local n = C.dl_tensor_numel(t)
  if n ~= 1 then
    live(t, "is_nonzero")
    raise(("is_nonzero: a tensor with %d elements has no single truth value; use t:any() or t:all()"):format(tonumber(n)))
  end
  local v = read(t, 0)
  return v == true or (type(v) == "number" and v ~= 0)
end

-- Linear (row-major) element number of 0-based, possibly negative indices.
local function linear_index(t, op, ...)
  local n = C.dl_tensor_dim(t)
  local lin = 0
  for i = 0, n - 1 do
    local idx = select(i + 1, ...)
    local size = tonumber(C.dl_tensor_size(t, i))
    if not is_integer(idx) then
      raise(("%s: index for dim %d must be an integer, got %s"):format(op, i, core.show(idx)))
    end
    if idx < -size or idx >= size then
      live(t, op)
      raise(("%s: index %d out of range for dim %d of size %d"):format(op, idx, i, size))
    end
    if idx < 0 then idx = idx + size end
    lin = lin * size + idx
  end
  return lin
end

-- t:get(i, j) reads one element (0-based); fewer indices than dims give
-- the sub-tensor, as t[i] does in PyTorch.
function m.get(t, ...)
  local n, k = C.dl_tensor_dim(t), select("#", ...)
  if k > n then
    live(t, "get")
    raise(("get: %d indices given for a %d-dim tensor of shape %s"):format(k, n, core.fmt_shape(core.shape_of(t))))
  end
  if k < n then
    local r = t
    for i = 1, k do
      local idx, size = select(i, ...), tonumber(C.dl_tensor_size(t, i - 1))
      if not is_integer(idx) then
        raise(("get: index for dim %d must be an integer, got %s"):format(i - 1, core.show(idx)))
      end
      if idx < -size or idx >= size then
        live(t, "get")
        raise(("get: index %d out of range for dim %d of size %d"):format(idx, i - 1, size))
      end
      r = T.select(r, 0, idx)
    end
    return r
  end
  return read(t, linear_index(t, "get", ...))
end

function m.set(t, ...)
  local k = select("#", ...)
  local n = C.dl_tensor_dim(t)
  if k == 0 then raise(("set: expected %d indices and a value, got nothing"):format(n)) end
  local v = select(k, ...)
  if k - 1 ~= n then
    live(t, "set")
    raise(("set: expected %d indices and a value for a %d-dim tensor, got %d arguments"):format(n, n, k))
  end
  if type(v) == "boolean" then v = v and 1 or 0 end
  if type(v) ~= "number" then raise("set: value must be a number or boolean, got " .. core.show(v)) end
  check(C.dl_set_double(t, linear_index(t, "set", ...), v))
  return t
end

function m.totable(t)
  local n = tonumber(C.dl_tensor_numel(t))
  local buf = ffi.new("double[?]", n > 0 and n or 1)
  check(C.dl_to_doubles(t, buf))
  local isbool = C.dl_tensor_dtype(t) == C.DL_BOOL
  local shape = core.shape_of(t)
  if #shape == 0 then
    if isbool then return buf[0] ~= 0 end
    return buf[0]
  end
  local pos = 0
  local function build(d)
    local r = {}
    if d == #shape then
      for i = 1, shape[d] do
        local v = buf[pos]
        if isbool then v = v ~= 0 end
        r[i] = v
        pos = pos + 1
      end
    else
      for i = 1, shape[d] do r[i] = build(d + 1) end
    end
    return r
  end
  return build(1)
end
m.tolist = m.totable

-- d as a dim of t in 0..n-1 (negative from the end), for the methods that
-- index dims themselves (ddp.tensor.views' split, chunk, ...).
M.norm_dim = norm_dim

-- methods(all) -> this file's methods; all is the table they end up in.
function M.methods(all)
  T = all
  return m
end

return M
