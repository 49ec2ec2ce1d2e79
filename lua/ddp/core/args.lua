-- ddp.core: what every tensor function shares: raising errors at the
-- user's line, owning C handles, turning Lua values into tensors, and
-- reading shapes, dims and dtypes from arguments.
local B = require "ddp.ffi"
local ffi, C = B.ffi, B.C

local M = { C = C, ffi = ffi }

-- A tensor handle is a reference to the C tensor (dl_tensor &), not a
-- pointer: LuaJIT compares two pointers itself, as addresses, and never
-- asks the metatable, so `a < b` on two tensors would silently compare
-- handles; for references it calls __lt/__le/__eq (ddp.ops).  C functions
-- taking dl_tensor * accept a reference (its address is passed).
local tensor_ct = ffi.typeof("dl_tensor &")
M.tensor_ct = tensor_ct
local voidp = ffi.typeof("void *")

-- The C tensor's address (a void * cdata): identity of a tensor, whatever
-- handle holds it (tensors of equal values are different tensors).
function M.address(t) return ffi.cast(voidp, t) end
-- Whether a and b are handles of the same C tensor.
function M.same(a, b) return ffi.cast(voidp, a) == ffi.cast(voidp, b) end
local floor, huge = math.floor, math.huge
local type, select, tostring = type, select, tostring

-- Seconds on the monotonic clock, for deadlines and rates (ddp.dist's
-- rendezvous, ddp.progress).  Declared under a name of our own (bound to
-- libc's symbol): a script's own declaration of clock_gettime, with its
-- own types, must still work.
pcall(ffi.cdef, [[
typedef struct { long tv_sec; long tv_nsec; } dl_core_ts;
int dl_core_clock_gettime(int, dl_core_ts *) __asm__("clock_gettime");
]])
local clock_ts = ffi.new("dl_core_ts")
function M.clock()
  ffi.C.dl_core_clock_gettime(1, clock_ts)  -- CLOCK_MONOTONIC
  return tonumber(clock_ts.tv_sec) + tonumber(clock_ts.tv_nsec) * 1e-9
end

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

-- Whether a chunk's source (as debug.getinfo gives it) is ddp's own.
M.is_lib_source = is_lib

-- The level for error() that names the user's line, or 0 (no location)
-- when no frame of the user's is left: a chunk that tail-called the
-- library (`return t:view(5)` typed at the REPL, or run by ddplua -e) is
-- gone from the stack, and the first frame below ours would be a wrong
-- place to name -- before, this fell back to core.lua itself.
local function user_level()
  local level = 3
  while true do
    local info = debug.getinfo(level, "S")
    if not info then return 0 end
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
  return ffi.gc(ffi.cast(tensor_ct, p), release)
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
-- booleans as scalars that promote like Python scalars do, nested tables
-- as ddp.tensor makes them.
function M.operand(x, op, pos)
  if is_tensor(x) then return x end
  local tx = type(x)
  if tx == "number" then
    return M.new(C.dl_scalar, x, is_integer(x) and 0 or 1)
  elseif tx == "boolean" then
    return M.new(C.dl_full, nil, 0, C.DL_BOOL, x and 1 or 0)
  elseif tx == "table" then
    return M.tensor_from(x, nil, op)
  end
  raise(("%s: argument %s must be a tensor or a number, got %s"):format(op, pos or "", tx))
end

-- A tensor argument that must be a tensor already (no scalars).
function M.tensor_arg(x, op, what)
  if is_tensor(x) then return x end
  if type(x) == "table" then return M.tensor_from(x, nil, op) end
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

-- -- Elements -------------------------------------------------------------

local dval = ffi.new("double[1]")
local ival = ffi.new("int64_t[1]")

-- Element `linear` (row-major) of t as a Lua value: int64 exactly, bool as
-- a boolean, the rest as a double.
function M.read(t, linear)
  local d = C.dl_tensor_dtype(t)
  if d == C.DL_INT64 then
    M.check(C.dl_get_int64(t, linear, ival))
    return tonumber(ival[0])
  end
  M.check(C.dl_get_double(t, linear, dval))
  if d == C.DL_BOOL then return dval[0] ~= 0 end
  return dval[0]
end

-- Raises the runtime's own error for a tensor dropped with t:free(), whose
-- shape reads [0]: checks that find no element (item, get, ...) call it
-- before theirs, so they say "freed" and not "0 elements" or "out of range".
function M.live(t, op)
  if C.dl_tensor_is_freed(t) ~= 0 then
    raise(op .. ": tensor was freed with t:free() and cannot be used any more")
  end
  return t
end

function M.item(t)
  local n = C.dl_tensor_numel(t)
  if n ~= 1 then
    M.live(t, "item")
    raise(("item: a tensor with %d elements cannot be converted to a number (need exactly 1)"):format(tonumber(n)))
  end
  return M.read(t, 0)
end

-- -- Lua values to tensors --------------------------------------------------
-- Here rather than with the creation functions (ddp.factory): every op
-- takes a nested table for a tensor operand (core.operand), below the
-- tensor type.

-- The dtype that opts ({dtype=, device=}) asks for, dflt (or the default
-- dtype) without one; checks that the device named is there.
-- opts (nil: {}) checked as an options table whose keys are all in known
-- (a set), else an error naming the unknown one and the expected ones.
function M.check_opts(opts, op, known)
  if opts == nil then return {} end
  if type(opts) ~= "table" or is_tensor(opts) then
    M.raise(("%s: options must be a table, got %s"):format(op, show(opts)))
  end
  for k in pairs(opts) do
    if not known[k] then
      local names = {}
      for name in pairs(known) do names[#names + 1] = name end
      table.sort(names)
      M.raise(("%s: unknown option %s (expected %s)"):format(op, show(k), table.concat(names, ", ")))
    end
  end
  return opts
end

function M.dtype_opt(opts, op, dflt)
  if type(opts) ~= "table" or is_tensor(opts) then
    raise(("%s: options must be a table such as {dtype = \"float64\"}, got %s"):format(op, show(opts)))
  end
  M.device_arg(opts.device, op)
  return M.dtype_arg(opts.dtype, op, dflt or default_dtype)
end

-- A tensor made on the CPU, moved where opts.device says (dtype_opt has
-- checked the device is there before anything was made).
function M.placed(opts, op, t)
  local d = opts and opts.device
  if d == nil or d == "cpu" then return t end
  return M.new(C.dl_to_device, t, M.device_arg(d, op))
end

-- Walks a nested table: its shape, and whether it holds fractions or
-- booleans (which decide the dtype when none is given).
local function scan(data, op)
  local shape, n = {}, 1
  local node = data
  while type(node) == "table" and not is_tensor(node) do
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
      elseif is_tensor(v) and C.dl_tensor_numel(v) == 1 then
        v = M.item(v)
        has_num = true
        if type(v) == "boolean" then v = v and 1 or 0 end
        if not is_integer(v) or C.dl_dtype_is_float(C.dl_tensor_dtype(t)) ~= 0 then has_frac = true end
      else
        raise(("%s: element %s is a %s, expected a number or boolean"):format(op, path, M.describe(v)))
      end
      values[pos] = v
      pos = pos + 1
      return
    end
    if type(t) ~= "table" or is_tensor(t) then
      raise(("%s: element %s is a %s, expected a table of %d elements"):format(op, path, M.describe(t), shape[d]))
    end
    if #t ~= shape[d] then
      raise(("%s: ragged nested table: %s has %d elements, expected %d"):format(op, path == "" and "the top level" or path, #t, shape[d]))
    end
    for i = 1, #t do walk(t[i], d + 1, path .. "[" .. i .. "]") end
  end
  walk(data, 1, "")
  local dtype = has_frac and default_dtype
             or (has_bool and not has_num) and C.DL_BOOL
             or (n == 0 and default_dtype)
             or C.DL_INT64
  return shape, values, dtype
end

-- ddp.tensor(data[, {dtype=, device=}]): data is a number, a boolean, a
-- nested table or a tensor (copied).  Without dtype: int64 when every value
-- is an integer, bool for booleans, float32 otherwise -- Lua has no 1.0
-- distinct from 1, so pass {dtype = "float32"} for float data.
-- op: the name errors show (default "tensor"; an op given a Lua table for
-- a tensor passes its own).
function M.tensor_from(data, opts, op)
  op = op or "tensor"
  opts = opts or {}
  if is_tensor(data) then
    local d = M.dtype_opt(opts, op, C.dl_tensor_dtype(data))
    return M.placed(opts, op, M.new(C.dl_to_dtype, data, d))
  end
  local td = type(data)
  if td == "number" or td == "boolean" then
    local v = td == "boolean" and (data and 1 or 0) or data
    local dflt = td == "boolean" and C.DL_BOOL or is_integer(v) and C.DL_INT64 or default_dtype
    return M.placed(opts, op, M.new(C.dl_full, nil, 0, M.dtype_opt(opts, op, dflt), v))
  end
  if td ~= "table" then
    raise(op .. ": expected a number, boolean, table or tensor, got " .. td)
  end
  local shape, values, inferred = scan(data, op)
  local d = M.dtype_opt(opts, op, inferred)
  local n = M.shape_args(op, false, shape)
  return M.placed(opts, op, M.new(C.dl_from_doubles, values, shape_buf, n, d))
end

-- -- Classes ----------------------------------------------------------------
--
-- The one idiom for the library's Lua classes (nn.Module, optimizers and
-- schedulers, datasets, samplers and the DataLoader, Store, Work, the
-- progress bar):
--
--   local Store = core.class("Store")        -- core.class(name, Parent)
--   function Store:init(h, host) self.h, self.host = h, host end
--   function Store:close() ... end
--   local s = Store(h, host)                 -- a new instance, init run on it
--
-- The class is its instances' metatable: methods through __index (the
-- parent's through the class's own metatable), and metamethods defined on
-- the class (__tostring, __len, __call, ...) apply to instances.  A
-- subclass starts with copies of its parent's metamethods (Lua looks them
-- up raw, not through __index), so define a class's metamethods before
-- extending it.  tostring(Class) is its name; core.is_instance(x, Class)
-- also holds for subclasses.  Class.__new(Class), when defined, makes the
-- bare instance that init then fills (nn.Module's own layout).
--
-- opts.proxy: instances are userdata (newproxy) with their fields in a
-- table behind them, since LuaJIT, as Lua 5.1, ignores __len (and __gc) on
-- tables: the datasets and samplers, which `#` measures.  getmetatable of
-- such an instance gives the class name.

local parent_of = setmetatable({}, { __mode = "k" })    -- class -> parent or false
local proxy_class = setmetatable({}, { __mode = "k" })  -- proxy instance -> class

local function construct(cls, ...)
  local new = cls.__new
  local obj = new and new(cls) or setmetatable({}, cls)
  local init = cls.init
  if init then init(obj, ...) end
  return obj
end

-- The metamethods a proxy's own metatable takes from its class.
local proxy_meta = { "__len", "__tostring", "__gc", "__call", "__eq", "__concat", "__unm" }

local function new_proxy(cls)
  local u = newproxy(true)
  local mt = getmetatable(u)
  local fields = setmetatable({}, cls)
  mt.__index, mt.__newindex = fields, fields
  for _, k in ipairs(proxy_meta) do mt[k] = cls[k] end
  mt.__metatable = cls.__name
  proxy_class[u] = cls
  return u
end

function M.class(name, parent, opts)
  local cls = {}
  if parent then
    for k, v in pairs(parent) do
      if type(k) == "string" and k:sub(1, 2) == "__" then cls[k] = v end
    end
  end
  if cls.__index == nil or cls.__index == parent then cls.__index = cls end
  cls.__name = name
  if opts and opts.proxy then cls.__new = new_proxy end
  parent_of[cls] = parent or false
  return setmetatable(cls, {
    __index = parent,
    __call = construct,
    __tostring = function() return name end,
  })
end

-- The class of x (made by core.class), or nil.
function M.class_of(x)
  local tx = type(x)
  if tx == "table" then
    local mt = getmetatable(x)
    if parent_of[mt] ~= nil then return mt end
  elseif tx == "userdata" then
    return proxy_class[x]
  end
  return nil
end

function M.is_instance(x, cls)
  local c = M.class_of(x)
  while c do
    if c == cls then return true end
    c = parent_of[c]
  end
  return false
end

return M
