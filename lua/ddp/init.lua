-- ddp: the module users require.  Tensor creation, random numbers, the
-- thread budget, and every tensor method also as a function (ddp.add(a, b),
-- ddp.cat({a, b}, 0)), as in PyTorch's torch namespace.
local core = require "ddp.core"
local tensor = require "ddp.tensor"
local ops = require "ddp.ops"
local printer = require "ddp.print"
local autograd = require "ddp.autograd"
local C, ffi = core.C, core.ffi
local new, check, raise = core.new, core.check, core.raise
local shape_args, shape_buf, is_integer = core.shape_args, core.shape_buf, core.is_integer
local T, mt = tensor.methods, tensor.mt
local type = type

core.add_lib_file(debug.getinfo(1, "S").source)

local ddp = { _VERSION = ffi.string(C.dl_version()) }

-- dtype names, so scripts can write ddp.float32 as torch.float32
for _, name in ipairs { "float32", "float64", "int32", "int64", "uint8", "bool", "bfloat16", "float16" } do
  ddp[name] = name
end
ddp.float, ddp.double, ddp.long, ddp.int, ddp.half = "float32", "float64", "int64", "int32", "float16"

local function dtype_opt(opts, op, dflt)
  if type(opts) ~= "table" or core.is_tensor(opts) then
    raise(("%s: options must be a table such as {dtype = \"float64\"}, got %s"):format(op, core.show(opts)))
  end
  core.device_arg(opts.device, op)
  return core.dtype_arg(opts.dtype, op, dflt or core.default_dtype())
end

-- The device index opts.device names (-1: the CPU), for the creation
-- functions that make the tensor there directly (dl_*_on).
local function device_opt(opts, op)
  return core.device_arg(opts and opts.device, op)
end

-- A tensor made on the CPU, moved where opts.device says (dtype_opt has
-- checked the device is there before anything was made).
local function placed(opts, op, t)
  local d = opts and opts.device
  if d == nil or d == "cpu" then return t end
  return new(C.dl_to_device, t, core.device_arg(d, op))
end

-- -- From Lua values ---------------------------------------------------------

-- Walks a nested table: its shape, and whether it holds fractions or
-- booleans (which decide the dtype when none is given).
local function scan(data, op)
  local shape, n = {}, 1
  local node = data
  while type(node) == "table" and not core.is_tensor(node) do
    shape[#shape + 1] = #node
    n = n * #node
    if #node == 0 then break end
    node = node[1]
  end
  if #shape > 8 then raise(op .. ": nested more than 8 levels deep") end
  local values = ffi.new("double[?]", n > 0 and n or 1)
  local pos, has_frac, has_bool, has_num = 0, false, false, false
  local function walk(t, d, path)
    if d > #shape then
      local v = t
      if type(v) == "boolean" then
        has_bool = true
        v = v and 1 or 0
      elseif type(v) == "number" then
        has_num = true
        if not is_integer(v) then has_frac = true end
      elseif core.is_tensor(v) and C.dl_tensor_numel(v) == 1 then
        v = T.item(v)
        has_num = true
        if type(v) == "boolean" then v = v and 1 or 0 end
        if not is_integer(v) or T.is_floating_point(t) then has_frac = true end
      else
        raise(("%s: element %s is a %s, expected a number or boolean"):format(op, path, core.describe(v)))
      end
      values[pos] = v
      pos = pos + 1
      return
    end
    if type(t) ~= "table" or core.is_tensor(t) then
      raise(("%s: element %s is a %s, expected a table of %d elements"):format(op, path, core.describe(t), shape[d]))
    end
    if #t ~= shape[d] then
      raise(("%s: ragged nested table: %s has %d elements, expected %d"):format(op, path == "" and "the top level" or path, #t, shape[d]))
    end
    for i = 1, #t do walk(t[i], d + 1, path .. "[" .. i .. "]") end
  end
  walk(data, 1, "")
  local dtype = has_frac and core.default_dtype()
             or (has_bool and not has_num) and C.DL_BOOL
             or (n == 0 and core.default_dtype())
             or C.DL_INT64
  return shape, values, dtype
end

-- ddp.tensor(data[, {dtype=, device=}]): data is a number, a boolean, a
-- nested table or a tensor (copied).  Without dtype: int64 when every value
-- is an integer, bool for booleans, float32 otherwise -- Lua has no 1.0
-- distinct from 1, so pass {dtype = "float32"} for float data.
-- op: the name errors show (an op given a Lua table for a tensor).
local function from_value(data, opts, op)
  opts = opts or {}
  if core.is_tensor(data) then
    local d = dtype_opt(opts, op, C.dl_tensor_dtype(data))
    return placed(opts, op, new(C.dl_to_dtype, data, d))
  end
  local td = type(data)
  if td == "number" or td == "boolean" then
    local v = td == "boolean" and (data and 1 or 0) or data
    local dflt = td == "boolean" and C.DL_BOOL or is_integer(v) and C.DL_INT64 or core.default_dtype()
    return placed(opts, op, new(C.dl_full, nil, 0, dtype_opt(opts, op, dflt), v))
  end
  if td ~= "table" then
    raise(op .. ": expected a number, boolean, table or tensor, got " .. td)
  end
  local shape, values, inferred = scan(data, op)
  local d = dtype_opt(opts, op, inferred)
  local n = shape_args(op, false, shape)
  return placed(opts, op, new(C.dl_from_doubles, values, shape_buf, n, d))
end
function ddp.tensor(data, opts) return from_value(data, opts, "tensor") end
core.tensor_from = function(data, opts, op) return from_value(data, opts, op or "tensor") end
core.set_tensor_from_value(function(x, op) return from_value(x, nil, op or "tensor") end)
ddp.as_tensor = function(data, opts)
  if core.is_tensor(data) and (opts == nil or type(opts) == "table" and not (opts.dtype or opts.device)) then
    return data
  end
  return ddp.tensor(data, opts)
end

-- -- Creation ---------------------------------------------------------------

function ddp.empty(...)
  local n, opts = shape_args("empty", false, ...)
  return new(C.dl_empty_on, shape_buf, n, dtype_opt(opts, "empty"), device_opt(opts, "empty"))
end
function ddp.zeros(...)
  local n, opts = shape_args("zeros", false, ...)
  return new(C.dl_zeros_on, shape_buf, n, dtype_opt(opts, "zeros"), device_opt(opts, "zeros"))
end
function ddp.ones(...)
  local n, opts = shape_args("ones", false, ...)
  return new(C.dl_full_on, shape_buf, n, dtype_opt(opts, "ones"), 1, device_opt(opts, "ones"))
end
-- full(shape, value[, opts]); the dtype follows the value when not given
function ddp.full(shape, value, opts)
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
function ddp.arange(a, b, c, opts)
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
function ddp.linspace(start, stop, steps, opts)
  opts = opts or {}
  if type(start) ~= "number" or type(stop) ~= "number" then raise("linspace: start and end must be numbers") end
  if not is_integer(steps) then raise("linspace: steps must be an integer, got " .. tostring(steps)) end
  return new(C.dl_linspace_on, start, stop, steps, dtype_opt(opts, "linspace"), device_opt(opts, "linspace"))
end
function ddp.eye(n, m, opts)
  if type(m) == "table" then m, opts = nil, m end
  opts = opts or {}
  if not is_integer(n) or n < 0 then raise("eye: n must be a non-negative integer, got " .. tostring(n)) end
  if m ~= nil and (not is_integer(m) or m < 0) then raise("eye: m must be a non-negative integer, got " .. tostring(m)) end
  return new(C.dl_eye_on, n, m or -1, dtype_opt(opts, "eye"), device_opt(opts, "eye"))
end

function ddp.rand(...)
  local n, opts = shape_args("rand", false, ...)
  return placed(opts, "rand", new(C.dl_rand, shape_buf, n, dtype_opt(opts, "rand")))
end
function ddp.randn(...)
  local n, opts = shape_args("randn", false, ...)
  return placed(opts, "randn", new(C.dl_randn, shape_buf, n, dtype_opt(opts, "randn")))
end
-- randint(high, shape) or randint(low, high, shape)[, opts]
function ddp.randint(a, b, c, opts)
  local low, high, shape
  if type(b) == "table" then low, high, shape, opts = 0, a, b, c else low, high, shape = a, b, c end
  opts = opts or {}
  if not is_integer(low) or not is_integer(high) then raise("randint: low and high must be integers") end
  if type(shape) ~= "table" then raise("randint: shape must be a table, e.g. ddp.randint(0, 10, {3})") end
  local n = shape_args("randint", false, shape)
  return placed(opts, "randint", new(C.dl_randint, low, high, shape_buf, n, dtype_opt(opts, "randint", C.DL_INT64)))
end
function ddp.randperm(n, opts)
  opts = opts or {}
  if not is_integer(n) or n < 0 then raise("randperm: n must be a non-negative integer, got " .. tostring(n)) end
  return placed(opts, "randperm", new(C.dl_randperm, n, dtype_opt(opts, "randperm", C.DL_INT64)))
end

-- *_like(t[, opts]): same shape, same dtype unless opts.dtype says otherwise
local function like(name, make)
  ddp[name .. "_like"] = function(t, a, b)
    t = core.tensor_arg(t, name .. "_like", "input")
    local opts = type(a) == "table" and a or b or {}
    dtype_opt(opts, name .. "_like")
    local o = { dtype = opts.dtype or T.dtype(t), device = opts.device or T.device(t) }
    return make(core.shape_of(t), o, a)
  end
end
like("empty", function(s, o) return ddp.empty(s, o) end)
like("zeros", function(s, o) return ddp.zeros(s, o) end)
like("ones", function(s, o) return ddp.ones(s, o) end)
like("rand", function(s, o) return ddp.rand(s, o) end)
like("randn", function(s, o) return ddp.randn(s, o) end)
like("full", function(s, o, v) return ddp.full(s, v, o) end)

-- from_blob(ptr, shape[, {dtype=, strides=, owner=}]): wraps memory without
-- copying.  owner (any Lua value, e.g. the ffi buffer behind ptr) stays
-- alive until the last view of the storage is gone.
function ddp.from_blob(ptr, shape, opts)
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
  local dtype = dtype_opt(opts, "from_blob")
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

function ddp.cat(list, dim)
  local arr, n, keep = tensor_list(list, "cat")
  local r = new(C.dl_cat, arr, n, core.dim_arg(dim or 0, "cat"))
  local _ = keep
  return r
end
ddp.concat, ddp.concatenate = ddp.cat, ddp.cat
function ddp.stack(list, dim)
  local arr, n, keep = tensor_list(list, "stack")
  local r = new(C.dl_stack, arr, n, core.dim_arg(dim or 0, "stack"))
  local _ = keep
  return r
end
function ddp.where(cond, a, b)
  if a == nil and b == nil then return T.nonzero(core.tensor_arg(cond, "where", "condition")) end
  return new(C.dl_where, core.tensor_arg(cond, "where", "condition"),
             core.operand(a, "where", 2), core.operand(b, "where", 3))
end
function ddp.addmm(c, a, b, opts) return T.addmm(core.operand(c, "addmm", 1), a, b, opts) end
function ddp.one_hot(t, n) return T.one_hot(core.tensor_arg(t, "one_hot", "input"), n) end

-- A method called with a dot (t.view(2, 3)) gets no tensor as self: say
-- so at the user's line rather than fail inside the FFI, or, with nil for
-- self, crash in C on a NULL pointer.  Binary ops take numbers first
-- (2 + t calls add(2, t)) and check their operands themselves.
local takes_operand = {}
for name in pairs(ops.binops) do takes_operand[T[name]] = true end
for name, f in pairs(T) do
  if not takes_operand[f] then
    T[name] = function(self, ...)
      if not core.is_tensor(self) then
        raise(("%s: expected a tensor as self, got %s; call it as t:%s(...), with a colon")
              :format(name, core.show(self), name))
      end
      return f(self, ...)
    end
  end
end

-- Every other method as a function of its first argument.
for name, f in pairs(T) do
  if ddp[name] == nil and not name:match("^_") then
    ddp[name] = function(x, ...)
      return f(core.operand(x, name, 1), ...)
    end
  end
end

-- -- Runtime ------------------------------------------------------------------

function ddp.is_tensor(x) return core.is_tensor(x) end
function ddp.is_floating_point(t) return T.is_floating_point(core.tensor_arg(t, "is_floating_point")) end
function ddp.promote_types(a, b)
  local da, db = core.dtype_arg(a, "promote_types", -1), core.dtype_arg(b, "promote_types", -1)
  if da < 0 or db < 0 then raise("promote_types: expected two dtype names, got " .. core.show(a) .. " and " .. core.show(b)) end
  return core.dtype_name(C.dl_promote_types(da, db))
end
function ddp.result_type(a, b)
  return core.dtype_name(C.dl_result_type(core.operand(a, "result_type", 1), core.operand(b, "result_type", 2)))
end
ddp.get_default_dtype = function() return core.dtype_name(core.default_dtype()) end
ddp.set_default_dtype = core.set_default_dtype

function ddp.manual_seed(seed)
  if not is_integer(seed) or seed < 0 then raise("manual_seed: seed must be a non-negative integer, got " .. tostring(seed)) end
  C.dl_manual_seed(seed)
end
function ddp.initial_seed() return tonumber(C.dl_rng_seed()) end
function ddp.get_rng_state()
  return { seed = tonumber(C.dl_rng_seed()), offset = tonumber(C.dl_rng_offset()) }
end
function ddp.set_rng_state(s)
  if type(s) ~= "table" or not is_integer(s.seed) or not is_integer(s.offset) then
    raise("set_rng_state: expected a table {seed=, offset=} from get_rng_state")
  end
  C.dl_rng_set_state(s.seed, s.offset)
end

function ddp.set_num_threads(n)
  if not is_integer(n) or n < 1 then raise("set_num_threads: expected a positive integer, got " .. tostring(n)) end
  check(C.dl_set_num_threads(n))
end
function ddp.get_num_threads() return C.dl_get_num_threads() end
function ddp.memory_allocated() return tonumber(C.dl_mem_allocated()) end
function ddp.max_memory_allocated() return tonumber(C.dl_mem_peak()) end
function ddp.memory_cached() return tonumber(C.dl_mem_cached()) end
function ddp.empty_cache() C.dl_empty_cache() end

-- ddp.cuda: the device probe and device memory.  A device argument is an
-- index or "cuda:N"; the default is this worker's GPU (LOCAL_RANK, as
-- ddp.device() names it).
local function cuda_index(op, d)
  if d == nil then return require("ddp.dist").current_device() end
  if type(d) == "string" then
    local k = d:match("^cuda:(%d+)$") or (d == "cuda" and "0")
    if k then return tonumber(k) end
  elseif is_integer(d) and d >= 0 then
    return d
  end
  raise(op .. ": device must be an index or \"cuda:N\", got " .. tostring(d))
end
local mem_stat_buf = ffi.new("int64_t[9]")
local mem_stat_names = { "allocated", "reserved", "peak_allocated", "peak_reserved", "allocs",
                         "cache_hits", "segments", "retries", "ooms" }
ddp.cuda = {
  is_available = function() return C.dl_cuda_device_count() > 0 end,
  device_count = function() return C.dl_cuda_device_count() end,
  -- The current device (ddp.init makes it this rank's, ddp.device()).
  current_device = function() return require("ddp.dist").current_device() end,
  -- "cuda" (no index) names it from then on.
  set_device = function(d) core.current_cuda = cuda_index("cuda.set_device", d) end,
  status = function() return ffi.string(C.dl_cuda_status()) end,
  synchronize = function(d) check(C.dl_cuda_synchronize(cuda_index("cuda.synchronize", d))) end,
  empty_cache = function(d) check(C.dl_cuda_empty_cache(cuda_index("cuda.empty_cache", d))) end,
  reset_peak_memory_stats = function(d)
    check(C.dl_cuda_reset_peak_memory_stats(cuda_index("cuda.reset_peak_memory_stats", d)))
  end,
  -- {allocated=, reserved=, peak_allocated=, peak_reserved=, allocs=,
  -- cache_hits=, segments=, retries=, ooms=} (bytes and counts)
  memory_stats = function(d)
    check(C.dl_cuda_memory_stats(cuda_index("cuda.memory_stats", d), mem_stat_buf, 9))
    local r = {}
    for i, k in ipairs(mem_stat_names) do r[k] = tonumber(mem_stat_buf[i - 1]) end
    return r
  end,
  -- TF32 for float32 matmul / conv2d (off by default, as PyTorch)
  set_allow_tf32 = function(on) C.dl_cuda_set_allow_tf32(on and 1 or 0) end,
  allow_tf32 = function() return C.dl_cuda_get_allow_tf32() ~= 0 end,
}

local checkpoint = require "ddp.checkpoint"
ddp.save, ddp.load = checkpoint.save, checkpoint.load
ddp.save_checkpoint, ddp.load_checkpoint = checkpoint.save_checkpoint, checkpoint.load_checkpoint

ddp.autograd = autograd
ddp.no_grad, ddp.enable_grad = autograd.no_grad, autograd.enable_grad
ddp.set_grad_enabled, ddp.is_grad_enabled = autograd.set_grad_enabled, autograd.is_grad_enabled

ddp.set_printoptions = printer.set_printoptions
mt.__tostring = printer.format
mt.__name = "ddp.Tensor"
ffi.metatype("dl_tensor", mt)
ddp.Tensor = T
local _ = ops

-- The process group (ddp.dist, which needs ddp.store, which needs ddp):
-- ddp.init, ddp.rank, ddp.barrier, ... load it on their first call.
for _, name in ipairs { "init", "shutdown", "is_initialized", "backend", "rank", "world_size",
                        "local_rank", "local_world_size", "node_rank", "is_main", "local_device",
                        "print", "barrier", "broadcast_object", "all_gather_object",
                        "all_reduce", "broadcast", "all_gather", "reduce_scatter",
                        "send", "recv", "all_reduce_async" } do
  ddp[name] = function(...)
    local f = require("ddp.dist")[name]
    ddp[name] = f
    return f(...)
  end
end
-- ddp.autocast(dtype, fn, ...): mixed precision (ddp.autocast).
do
  local autocast = require "ddp.autocast"
  ddp.autocast = autocast.autocast
  ddp.autocast_dtype = autocast.get_dtype
end

-- ddp.DDP(model[, opts]) (ddp.ddp): the data-parallel wrapper.
function ddp.DDP(...)
  local f = require("ddp.ddp").DDP
  ddp.DDP = f
  return f(...)
end

-- ddp.DataLoader, ddp.DistributedSampler, ddp.reduce_metrics: ddp.data's.
for _, name in ipairs { "DataLoader", "DistributedSampler", "reduce_metrics" } do
  ddp[name] = function(...)
    local f = require("ddp.data")[name]
    ddp[name] = f
    return f(...)
  end
end

-- ddp.progress(total[, opts]) (ddp.progress): a rank-0 progress line.
function ddp.progress(...)
  local f = require("ddp.progress")
  ddp.progress = f
  return f(...)
end

-- ddp.log and ddp.device are tensor functions too (torch.log, t:device()):
-- a tensor argument keeps that meaning; ddp.log("step", i) prints on every
-- rank and ddp.device() names this worker's device.
do
  local tensor_log, tensor_device = T.log, T.device
  function ddp.log(...)
    if select("#", ...) == 1 and core.is_tensor((...)) then return tensor_log((...)) end
    return require("ddp.dist").log(...)
  end
  function ddp.device(...)
    if select("#", ...) > 0 then return tensor_device(core.tensor_arg((...), "device", "input")) end
    return require("ddp.dist").device()
  end
end

-- Submodules that require ddp themselves load on first use (ddp.data);
-- require "ddp.data" gives the same table.
local submodules = { data = "ddp.data", nn = "ddp.nn", optim = "ddp.optim", argparse = "ddp.argparse",
                     store = "ddp.store", dist = "ddp.dist" }
setmetatable(ddp, {
  __index = function(t, k)
    local name = submodules[k]
    if not name then return nil end
    local m = require(name)
    rawset(t, k, m)
    return m
  end,
})

return ddp
