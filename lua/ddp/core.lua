-- ddp.core: what every tensor function shares: raising errors at the
-- user's line, owning C handles, turning Lua values into tensors, and
-- reading shapes, dims and dtypes from arguments.
local B = require "ddp.ffi"
local ffi, C = B.ffi, B.C

local M = { C = C, ffi = ffi }

local tensor_ct = ffi.typeof("dl_tensor *")
M.tensor_ct = tensor_ct
local floor, huge = math.floor, math.huge
local type, select, tostring = type, select, tostring

-- -- Errors ---------------------------------------------------------------

-- Our own files: an error is reported at the first frame outside them, so
-- the message points at the user's line however deep the library went.
local lib_prefixes = {}

-- Every ddp module file registers its directory (lua/ddp/, bindings/ddp/).
function M.add_lib_file(source)
  local dir = source:match("^(@.*/)[^/]*$")
  if not dir then return end
  for _, p in ipairs(lib_prefixes) do
    if p == dir then return end
  end
  lib_prefixes[#lib_prefixes + 1] = dir
end
M.add_lib_file(debug.getinfo(1, "S").source)
M.add_lib_file(B.source)

local function is_lib(source)
  for i = 1, #lib_prefixes do
    local p = lib_prefixes[i]
    if source:sub(1, #p) == p then return true end
  end
  return false
end

local function user_level()
  local level = 3
  while true do
    local info = debug.getinfo(level, "S")
    if not info then return 1 end
    if info.what ~= "C" and not is_lib(info.source) then return level - 1 end
    level = level + 1
  end
end

-- Raises msg at the user's line.
function M.raise(msg)
  error(msg, user_level())
end
local raise = M.raise

function M.last_error()
  return ffi.string(C.dl_last_error())
end

function M.raise_c()
  raise(ffi.string(C.dl_last_error()))
end
local raise_c = M.raise_c

-- -- Owning handles -------------------------------------------------------

local anchors, anchor_next = {}, 0
local anchor_ids = ffi.new("int64_t[64]")

-- Owners of memory wrapped with from_blob stay referenced here until C
-- reports that the last view of their storage died.
function M.anchor(obj)
  anchor_next = anchor_next + 1
  anchors[anchor_next] = obj
  return anchor_next
end

local function drain_anchors()
  repeat
    local n = C.dl_released_anchors(anchor_ids, 64)
    for i = 0, n - 1 do anchors[tonumber(anchor_ids[i])] = nil end
  until n < 64
end

local release = C.dl_tensor_release

-- Takes ownership of a new reference returned by C.
local function own(p)
  if C.dl_gc_hint() ~= 0 then
    collectgarbage()
    C.dl_gc_done()
  end
  if C.dl_anchors_pending() ~= 0 then drain_anchors() end
  return ffi.gc(p, release)
end
M.own = own

-- Calls a C function returning a new tensor; on out-of-memory collects
-- garbage (Lua cannot see the bytes behind its handles) and retries once.
function M.new(f, ...)
  local p = f(...)
  if p == nil then
    if C.dl_last_error_code() == C.DL_ENOMEM then
      collectgarbage()
      collectgarbage()
      C.dl_gc_done()
      p = f(...)
    end
    if p == nil then raise_c() end
  end
  return own(p)
end

function M.check(rc)
  if rc ~= 0 then raise_c() end
end

-- Two tensors out of one call (max with dim, sort, topk).  (f(..., x)
-- would pass only the first vararg: Lua truncates ... before a comma.)
local out2 = ffi.new("dl_tensor *[2]")
function M.new2(f, ...)
  local n = select("#", ...)
  local args = { ... }
  args[n + 1], args[n + 2] = out2, out2 + 1
  out2[0], out2[1] = nil, nil
  if f(unpack(args, 1, n + 2)) ~= 0 then raise_c() end
  local a, b = out2[0], out2[1]
  out2[0], out2[1] = nil, nil
  return own(a), own(b)
end

-- -- Arguments ------------------------------------------------------------

local function is_tensor(x)
  return ffi.istype(tensor_ct, x)
end
M.is_tensor = is_tensor

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

-- A tensor for an op's operand: tensors as they are, Lua numbers and
-- booleans as scalars that promote like Python scalars do.
local tensor_from_value  -- set by ddp.tensor
function M.set_tensor_from_value(f) tensor_from_value = f end

function M.operand(x, op, pos)
  if is_tensor(x) then return x end
  local tx = type(x)
  if tx == "number" then
    return M.new(C.dl_scalar, x, is_integer(x) and 0 or 1)
  elseif tx == "boolean" then
    return M.new(C.dl_full, nil, 0, C.DL_BOOL, x and 1 or 0)
  elseif tx == "table" then
    return tensor_from_value(x, op)
  end
  raise(("%s: argument %s must be a tensor or a number, got %s"):format(op, pos or "", tx))
end

-- A tensor argument that must be a tensor already (no scalars).
function M.tensor_arg(x, op, what)
  if is_tensor(x) then return x end
  if type(x) == "table" then return tensor_from_value(x, op) end
  raise(("%s: %s must be a tensor, got %s"):format(op, what or "argument", M.describe(x)))
end

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
M.current_cuda = nil
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
  if k == "" then return M.current_cuda or (tonumber(os.getenv("LOCAL_RANK") or "0") or 0) % n end
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
-- default) and returns ndim, opts.
function M.shape_args(op, allow_neg, ...)
  local n = select("#", ...)
  local opts
  if n > 0 then
    local last = select(n, ...)
    if last == nil then
      n = n - 1
    elseif type(last) == "table" and (is_opts(last) or (n > 1 and next(last) == nil)) then
      opts, n = last, n - 1
    end
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

return M
