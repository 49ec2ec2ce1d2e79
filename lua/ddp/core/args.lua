-- ddp.core.args: reading an op's arguments -- integers and dims, dtype
-- and device names, shapes given as sizes or a table, options tables --
-- with errors that name the op and show the bad value.  Only what C never
-- sees is checked here (Lua types, tables, the names Lua maps to enums);
-- what reaches C, C checks.
local B = require "ddp.ffi"
local errors = require "ddp.core.errors"
local handles = require "ddp.core.handles"
local ffi, C = B.ffi, B.C
local raise = errors.raise
local is_tensor = handles.is_tensor
local floor, huge = math.floor, math.huge
local type, select, tostring, pairs = type, select, tostring, pairs

errors.add_lib_file(debug.getinfo(1, "S").source)

local M = {}

local function is_integer(x)
  return type(x) == "number" and x == floor(x) and x > -huge and x < huge
end
M.is_integer = is_integer

function M.describe(x)
  if is_tensor(x) then return "tensor" end
  return type(x)
end

-- A bad argument as a message shows it: strings quoted, so "3" is not 3.
local function show(x)
  if type(x) == "string" then return ('"%s"'):format(x) end
  if type(x) == "number" or x == nil or type(x) == "boolean" then return tostring(x) end
  return "a " .. M.describe(x)
end
M.show = show

-- -- Dtypes, dims, shapes ------------------------------------------------

local default_dtype = C.DL_FLOAT32

function M.default_dtype() return default_dtype end
function M.set_default_dtype(name)
  local d = M.dtype_arg(name, "set_default_dtype")
  if d ~= C.DL_FLOAT32 and d ~= C.DL_FLOAT64 then
    raise("set_default_dtype: only float32 and float64 can be the default, got " .. tostring(name))
  end
  default_dtype = d
end

-- dtype names as PyTorch spells them ("float32", "torch.float32", "float",
-- "long", ...) to the C enum; nil gives dflt.
function M.dtype_arg(name, op, dflt)
  if name == nil then return dflt end
  if type(name) == "string" then
    local d = C.dl_dtype_from_name(name)
    if d >= 0 then return d end
  end
  raise(("%s: unknown dtype %s (expected one of float32, float64, int32, int64, uint8, bool, bfloat16, float16)")
        :format(op, type(name) == "string" and ('"' .. name .. '"') or tostring(name)))
end

function M.dtype_name(d)
  return ffi.string(C.dl_dtype_name(d))
end

-- A device name as an index: -1 for "cpu", N for "cuda:N"; "cuda" is this
-- worker's GPU (LOCAL_RANK among the devices, as ddp.device() names it).
-- A CUDA device that is not there is an error saying why.
-- "cuda" is the current device: ddp.cuda.set_device's (ddp.init sets this
-- rank's), else LOCAL_RANK among the devices.
local current_cuda = nil
function M.current_cuda() return current_cuda end
function M.set_current_cuda(k) current_cuda = k end
function M.device_arg(dev, op)
  if dev == nil or dev == "cpu" then return -1 end
  local k = type(dev) == "string" and (dev:match("^cuda:(%d+)$") or (dev == "cuda" and ""))
  if not k then
    raise(("%s: unknown device %s (expected \"cpu\" or \"cuda:N\")"):format(op, show(dev)))
  end
  local n = C.dl_cuda_device_count()
  if n <= 0 then
    raise(("%s: device %s: CUDA is not available: %s"):format(op, dev, ffi.string(C.dl_cuda_status())))
  end
  if k == "" then return current_cuda or (tonumber(os.getenv("LOCAL_RANK") or "0") or 0) % n end
  k = tonumber(k)
  if k >= n then raise(("%s: no CUDA device %d (%d device(s) found)"):format(op, k, n)) end
  return k
end

-- An integer argument: a dim (C int) unless what names something else.
function M.dim_arg(d, op, what)
  if is_integer(d) then
    if (what == nil or what:match("dim")) and (d < -2^31 or d >= 2^31) then
      raise(("%s: %s %.0f out of range"):format(op, what or "dim", d))
    end
    return d
  end
  raise(("%s: %s must be an integer, got %s"):format(op, what or "dim", show(d)))
end

local function is_opts(t)
  if type(t) ~= "table" or is_tensor(t) then return false end
  for k in pairs(t) do
    if type(k) ~= "number" then return true end
  end
  return false
end
M.is_opts = is_opts

local shape_buf = ffi.new("int64_t[8]")
M.shape_buf = shape_buf

-- Reads a shape given as varargs (2, 3), a table ({2, 3}) or a tensor's
-- shape, optionally followed by an options table.  Fills buf (shape_buf by
-- default) and returns ndim, opts.  A 0-dim shape is {}: no size at all, or
-- nil for it, is an error, as torch.zeros() is (a nil after the sizes is an
-- absent options table, as in zeros(2, 3, opts) with opts nil).
function M.shape_args(op, allow_neg, ...)
  local n = select("#", ...)
  local opts
  if n > 0 then
    local last = select(n, ...)
    if last == nil and n > 1 then
      n = n - 1
    elseif type(last) == "table" and (is_opts(last) or (n > 1 and next(last) == nil)) then
      opts, n = last, n - 1
    end
  end
  if n == 0 then
    raise(("%s: no size given; give sizes (2, 3), a table {2, 3}, or {} for a 0-dim shape"):format(op))
  end
  if n == 1 and (...) == nil then
    raise(("%s: size is nil; give sizes (2, 3), a table {2, 3}, or {} for a 0-dim shape"):format(op))
  end
  -- Debian's `luajit` package (2.1.0-beta3, 2022) loads `...` one slot off
  -- here in traces that start in this function (ones(4, {dtype = ...}) gave
  -- a 0-dim tensor); luajit2, which scripts/install-deps.sh installs, has
  -- the fix.  tests/jit_spec.lua catches it, tests/luajit/varg_load.lua
  -- shows it without ddplua.
  local dims = ...
  if n == 1 and type(dims) == "table" and not is_tensor(dims) then
    n = #dims
  else
    dims = { ... }
  end
  if n > 8 then
    raise(("%s: %d dims given, at most 8 are supported"):format(op, n))
  end
  for i = 1, n do
    local s = dims[i]
    if not is_integer(s) or (s < 0 and not (allow_neg and s == -1)) then
      local shown = {}
      for j = 1, n do shown[j] = show(dims[j]) end
      raise(("%s: invalid size %s at dim %d of shape [%s] (sizes must be non-negative integers%s)")
            :format(op, show(s), i - 1, table.concat(shown, ", "),
                    allow_neg and ", or -1 for one inferred size" or ""))
    end
    shape_buf[i - 1] = s
  end
  return n, opts or {}
end

-- Dims for reductions: nil (all), an integer, or a table of integers.
local dims_buf = ffi.new("int[8]")
function M.dims_arg(dim, op)
  if dim == nil then return nil, 0 end
  if is_integer(dim) then
    dims_buf[0] = M.dim_arg(dim, op)
    return dims_buf, 1
  end
  if type(dim) == "table" and not is_tensor(dim) then
    if #dim > 8 then raise(op .. ": at most 8 dims") end
    for i = 1, #dim do
      dims_buf[i - 1] = M.dim_arg(dim[i], op)
    end
    return dims_buf, #dim
  end
  raise(("%s: dim must be an integer or a table of integers, got %s"):format(op, M.describe(dim)))
end

function M.shape_of(t)
  local n = C.dl_tensor_dim(t)
  local s = {}
  for i = 0, n - 1 do s[i + 1] = tonumber(C.dl_tensor_size(t, i)) end
  return s
end

function M.fmt_shape(s)
  return "[" .. table.concat(s, ", ") .. "]"
end

-- -- Options -----------------------------------------------------------------

-- opts (nil: {}) checked as an options table whose keys are all in known
-- (a set), else an error naming the unknown one and the expected ones.
function M.check_opts(opts, op, known)
  if opts == nil then return {} end
  if type(opts) ~= "table" or is_tensor(opts) then
    raise(("%s: options must be a table, got %s"):format(op, show(opts)))
  end
  for k in pairs(opts) do
    if not known[k] then
      local names = {}
      for name in pairs(known) do names[#names + 1] = name end
      table.sort(names)
      raise(("%s: unknown option %s (expected %s)"):format(op, show(k), table.concat(names, ", ")))
    end
  end
  return opts
end

-- The dtype that opts ({dtype=, device=}) asks for, dflt (or the default
-- dtype) without one; checks that the device named is there, and that opts
-- holds no other key than those (or than the set `known`).
local FACTORY_OPTS = { dtype = true, device = true }
function M.dtype_opt(opts, op, dflt, known)
  if type(opts) ~= "table" or is_tensor(opts) then
    raise(("%s: options must be a table such as {dtype = \"float64\"}, got %s"):format(op, show(opts)))
  end
  -- a misspelt option ({dtyp = "float64"}) must not pass unseen
  for k in pairs(opts) do
    if not (known or FACTORY_OPTS)[k] then
      if k == "requires_grad" then
        raise(("%s: unknown option requires_grad: make the tensor, then t:requires_grad_()"):format(op))
      end
      local names = {}
      for name in pairs(known or FACTORY_OPTS) do names[#names + 1] = name end
      table.sort(names)
      raise(("%s: unknown option %s (expected %s)"):format(op, show(k), table.concat(names, ", ")))
    end
  end
  M.device_arg(opts.device, op)
  return M.dtype_arg(opts.dtype, op, dflt or default_dtype)
end

return M
