-- ddp.tensor.factory: making tensors -- from Lua values (ddp.tensor), filled
-- (zeros, ones, full, arange, eye, ...), random (rand, randn, randint,
-- randperm, and the generator's seed and state), *_like, from_blob, and
-- joined (cat, stack).  The top module ddp gives all of these out as its
-- own (ddp.zeros); modules below it (nn, optim, data, checkpoint) use them
-- from here.
local core = require "ddp.core"
local tensor = require "ddp.tensor"  -- the tensors made here have their methods
local C, ffi = core.C, core.ffi
local new, raise = core.new, core.raise
local shape_args, shape_buf, is_integer = core.shape_args, core.shape_buf, core.is_integer
local dtype_opt, placed = core.dtype_opt, core.placed
local T = tensor.methods
local type = type

core.add_lib_file(debug.getinfo(1, "S").source)

local M = {}

-- The device index opts.device names (-1: the CPU), for the creation
-- functions that make the tensor there directly (dl_*_on).
local function device_opt(opts, op)
  return core.device_arg(opts and opts.device, op)
end

-- -- From Lua values ---------------------------------------------------------

-- ddp.tensor(data[, {dtype=, device=}]): see core.tensor_from.
function M.tensor(data, opts) return core.tensor_from(data, opts, "tensor") end
M.as_tensor = function(data, opts)
  if core.is_tensor(data) and (opts == nil or type(opts) == "table" and not (opts.dtype or opts.device)) then
    return data
  end
  return M.tensor(data, opts)
end

-- -- Creation ---------------------------------------------------------------

function M.empty(...)
  local n, opts = shape_args("empty", false, ...)
  return new(C.dl_empty_on, shape_buf, n, dtype_opt(opts, "empty"), device_opt(opts, "empty"))
end
function M.zeros(...)
  local n, opts = shape_args("zeros", false, ...)
  return new(C.dl_zeros_on, shape_buf, n, dtype_opt(opts, "zeros"), device_opt(opts, "zeros"))
end
function M.ones(...)
  local n, opts = shape_args("ones", false, ...)
  return new(C.dl_full_on, shape_buf, n, dtype_opt(opts, "ones"), 1, device_opt(opts, "ones"))
end
-- full(shape, value[, opts]); the dtype follows the value when not given
function M.full(shape, value, opts)
  if type(shape) ~= "table" then raise("full: shape must be a table, e.g. ddp.full({2, 3}, 7)") end
  if type(value) == "boolean" then
    value = value and 1 or 0
    opts = opts or {}
    dtype_opt(opts, "full")
    opts = { dtype = opts.dtype or "bool", device = opts.device }
  end
  if type(value) ~= "number" then raise("full: fill value must be a number, got " .. type(value)) end
  opts = opts or {}
  local n = shape_args("full", false, shape)
  local dflt = is_integer(value) and C.DL_INT64 or core.default_dtype()
  return new(C.dl_full_on, shape_buf, n, dtype_opt(opts, "full", dflt), value, device_opt(opts, "full"))
end

-- arange(end), arange(start, end[, step])[, opts]
function M.arange(a, b, c, opts)
  if type(b) == "table" then b, c, opts = nil, nil, b end
  if type(c) == "table" then c, opts = nil, c end
  opts = opts or {}
  local start, stop, step = 0, a, 1
  if b ~= nil then start, stop, step = a, b, c or 1 end
  for _, v in ipairs { { "start", start }, { "end", stop }, { "step", step } } do
    if type(v[2]) ~= "number" then
      raise(("arange: %s must be a number, got %s"):format(v[1], core.show(v[2])))
    end
  end
  local dflt = (is_integer(start) and is_integer(stop) and is_integer(step)) and C.DL_INT64 or core.default_dtype()
  return new(C.dl_arange_on, start, stop, step, dtype_opt(opts, "arange", dflt), device_opt(opts, "arange"))
end
function M.linspace(start, stop, steps, opts)
  opts = opts or {}
  if type(start) ~= "number" or type(stop) ~= "number" then raise("linspace: start and end must be numbers") end
  if not is_integer(steps) then raise("linspace: steps must be an integer, got " .. tostring(steps)) end
  return new(C.dl_linspace_on, start, stop, steps, dtype_opt(opts, "linspace"), device_opt(opts, "linspace"))
end
function M.eye(n, m, opts)
  if type(m) == "table" then m, opts = nil, m end
  opts = opts or {}
  -- n >= 0 C checks; m < 0 would mean n to C
  if not is_integer(n) then raise("eye: n must be an integer, got " .. core.show(n)) end
  if m ~= nil and (not is_integer(m) or m < 0) then raise("eye: m must be a non-negative integer, got " .. core.show(m)) end
  return new(C.dl_eye_on, n, m or -1, dtype_opt(opts, "eye"), device_opt(opts, "eye"))
end

function M.rand(...)
  local n, opts = shape_args("rand", false, ...)
  return placed(opts, "rand", new(C.dl_rand, shape_buf, n, dtype_opt(opts, "rand")))
end
function M.randn(...)
  local n, opts = shape_args("randn", false, ...)
  return placed(opts, "randn", new(C.dl_randn, shape_buf, n, dtype_opt(opts, "randn")))
end
-- randint(high, shape) or randint(low, high, shape)[, opts]
function M.randint(a, b, c, opts)
  local low, high, shape
  if type(b) == "table" then low, high, shape, opts = 0, a, b, c else low, high, shape = a, b, c end
  opts = opts or {}
  if not is_integer(low) or not is_integer(high) then raise("randint: low and high must be integers") end
  if type(shape) ~= "table" then raise("randint: shape must be a table, e.g. ddp.randint(0, 10, {3})") end
  local n = shape_args("randint", false, shape)
  return placed(opts, "randint", new(C.dl_randint, low, high, shape_buf, n, dtype_opt(opts, "randint", C.DL_INT64)))
end
function M.randperm(n, opts)
  opts = opts or {}
  if not is_integer(n) then raise("randperm: n must be an integer, got " .. core.show(n)) end  -- n >= 0: C checks
  return placed(opts, "randperm", new(C.dl_randperm, n, dtype_opt(opts, "randperm", C.DL_INT64)))
end

-- *_like(t[, opts]): same shape, same dtype unless opts.dtype says otherwise
local function like(name, make)
  M[name .. "_like"] = function(t, a, b)
    t = core.tensor_arg(t, name .. "_like", "input")
    local opts = type(a) == "table" and a or b or {}
    dtype_opt(opts, name .. "_like")
    local o = { dtype = opts.dtype or T.dtype(t), device = opts.device or T.device(t) }
    return make(core.shape_of(t), o, a)
  end
end
like("empty", function(s, o) return M.empty(s, o) end)
like("zeros", function(s, o) return M.zeros(s, o) end)
like("ones", function(s, o) return M.ones(s, o) end)
like("rand", function(s, o) return M.rand(s, o) end)
like("randn", function(s, o) return M.randn(s, o) end)
like("full", function(s, o, v) return M.full(s, v, o) end)

-- from_blob(ptr, shape[, {dtype=, strides=, owner=}]): wraps memory without
-- copying.  owner (any Lua value, e.g. the ffi buffer behind ptr) stays
-- alive until the last view of the storage is gone.
function M.from_blob(ptr, shape, opts)
  opts = opts or {}
  if core.is_tensor(ptr) then
    raise("from_blob: ptr is a tensor, not raw memory; use t:view() or t:clone()")
  end
  -- only pointers and arrays: ffi.cast would turn a number into an address.
  -- (The type comes from tostring: ffi.typeof(ptr) kept ptr's owner alive
  -- past the last view in tests/tensor_spec.lua.)
  local shown = type(ptr) == "cdata" and tostring(ptr) or type(ptr)
  local ct = shown:match("^cdata<(.*)>: ")
  if ct and not (ct:match("%*$") or ct:match("%]$")) or not ct and shown:match("^%-?[%d.]+U?LL$")
     or not ct and shown:match("i$") or type(ptr) ~= "cdata" then
    raise("from_blob: ptr must be a cdata pointer or array, got "
          .. (ct or type(ptr) ~= "cdata" and shown or shown .. " (a cdata number, not an address)"))
  end
  ct = ct or "*"  -- a metatype with its own __tostring: trust it is a pointer
  local n = shape_args("from_blob", false, shape)
  local dims = {}
  for i = 1, n do dims[i] = tonumber(shape_buf[i - 1]) end
  local dtype = dtype_opt(opts, "from_blob", nil, { dtype = true, device = true, strides = true, owner = true })
  local strides
  if opts.strides ~= nil then
    if type(opts.strides) ~= "table" or #opts.strides ~= n then
      raise(("from_blob: strides must be a table of %d integers, one per dim of shape %s")
            :format(n, core.fmt_shape(dims)))
    end
    strides = ffi.new("int64_t[8]")
    for i = 1, n do strides[i - 1] = core.dim_arg(opts.strides[i], "from_blob", "stride") end
  end
  -- an array knows its size: refuse a layout that reads outside it
  if ct:match("%]$") then
    local extent, numel, st = 1, 1, 1
    for i = n, 1, -1 do
      local stride = strides and opts.strides[i] or st
      if stride < 0 and dims[i] > 1 then
        raise("from_blob: negative strides would read before the start of the array")
      end
      extent = extent + (dims[i] - 1) * stride
      numel, st = numel * dims[i], st * dims[i]
    end
    local need, have = extent * C.dl_dtype_size(dtype), ffi.sizeof(ptr)
    if numel > 0 and need > have then
      raise(("from_blob: shape %s of %s needs %d bytes but the array holds %d")
            :format(core.fmt_shape(dims), core.dtype_name(dtype), need, have))
    end
  end
  local anchor = core.anchor(opts.owner == nil and ptr or opts.owner)
  return new(C.dl_from_blob_anchored, ffi.cast("void *", ptr), dtype,
             shape_buf, strides, n, anchor)
end

-- -- Joining ----------------------------------------------------------------

local function tensor_list(list, op)
  if type(list) ~= "table" or core.is_tensor(list) then
    raise(op .. ": expected a table of tensors, got " .. core.describe(list))
  end
  if #list == 0 then raise(op .. ": expected a non-empty table of tensors") end
  local arr = ffi.new("dl_tensor *[?]", #list)
  local keep = {}
  for i = 1, #list do
    local t = list[i]
    if not core.is_tensor(t) then
      raise(("%s: element %d is a %s, expected a tensor"):format(op, i, core.describe(t)))
    end
    keep[i] = t
    arr[i - 1] = t
  end
  return arr, #list, keep
end

function M.cat(list, dim)
  local arr, n, keep = tensor_list(list, "cat")
  local r = new(C.dl_cat, arr, n, core.dim_arg(dim or 0, "cat"))
  local _ = keep
  return r
end
M.concat, M.concatenate = M.cat, M.cat
function M.stack(list, dim)
  local arr, n, keep = tensor_list(list, "stack")
  local r = new(C.dl_stack, arr, n, core.dim_arg(dim or 0, "stack"))
  local _ = keep
  return r
end

-- -- The random generator ---------------------------------------------------

function M.manual_seed(seed)
  if not is_integer(seed) or seed < 0 then raise("manual_seed: seed must be a non-negative integer, got " .. tostring(seed)) end
  C.dl_manual_seed(seed)
end
function M.initial_seed() return tonumber(C.dl_rng_seed()) end
function M.get_rng_state()
  return { seed = tonumber(C.dl_rng_seed()), offset = tonumber(C.dl_rng_offset()) }
end
function M.set_rng_state(s)
  if type(s) ~= "table" then
    raise("set_rng_state: expected a table {seed=, offset=} from get_rng_state, got " .. core.show(s))
  end
  -- exact integers for C's uint64s: -5 would become 2^64 - 5, 2^64 wrap
  for _, k in ipairs { "seed", "offset" } do
    local v = s[k]
    if not is_integer(v) or v < 0 or v >= 2^53 then
      raise(("set_rng_state: %s must be an integer from 0 to 2^53 - 1 (as get_rng_state gives it), got %s")
            :format(k, core.show(v)))
    end
  end
  C.dl_rng_set_state(s.seed, s.offset)
end

return M
