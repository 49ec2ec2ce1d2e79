-- ddp.core.values: between Lua values and tensors -- a tensor from a
-- number, a boolean or a nested table (what every op takes for a tensor
-- operand, and ddp.tensor), and an element read back as a Lua value.
-- Here rather than with the creation functions (ddp.tensor.factory):
-- every op takes a nested table for a tensor operand, below the tensor
-- type.
local B = require "ddp.ffi"
local errors = require "ddp.core.errors"
local handles = require "ddp.core.handles"
local args = require "ddp.core.args"
local ffi, C = B.ffi, B.C
local raise, new, check = errors.raise, handles.new, handles.check
local is_tensor, is_integer, describe = handles.is_tensor, args.is_integer, args.describe
local dtype_opt, device_arg = args.dtype_opt, args.device_arg
local type, pairs = type, pairs

errors.add_lib_file(debug.getinfo(1, "S").source)

local M = {}

-- -- Elements -------------------------------------------------------------

local dval = ffi.new("double[1]")
local ival = ffi.new("int64_t[1]")

-- Element `linear` (row-major) of t as a Lua value: int64 exactly, bool as
-- a boolean, the rest as a double.
function M.read(t, linear)
  local d = C.dl_tensor_dtype(t)
  if d == C.DL_INT64 then
    check(C.dl_get_int64(t, linear, ival))
    return tonumber(ival[0])
  end
  check(C.dl_get_double(t, linear, dval))
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

-- A tensor for an op's operand: tensors as they are, Lua numbers and
-- booleans as scalars that promote like Python scalars do, nested tables
-- as ddp.tensor makes them.
function M.operand(x, op, pos)
  if is_tensor(x) then return x end
  local tx = type(x)
  if tx == "number" then
    return new(C.dl_scalar, x, is_integer(x) and 0 or 1)
  elseif tx == "boolean" then
    return new(C.dl_full, nil, 0, C.DL_BOOL, x and 1 or 0)
  elseif tx == "table" then
    return M.tensor_from(x, nil, op)
  end
  raise(("%s: argument %s must be a tensor or a number, got %s"):format(op, pos or "", tx))
end

-- A tensor argument that must be a tensor already (no scalars).
function M.tensor_arg(x, op, what)
  if is_tensor(x) then return x end
  if type(x) == "table" then return M.tensor_from(x, nil, op) end
  raise(("%s: %s must be a tensor, got %s"):format(op, what or "argument", describe(x)))
end

-- A copy of v for a state dict (an optimizer's, a scheduler's): tensors
-- cloned, tables copied all the way down, the rest as it is.
function M.copy_value(v)
  if is_tensor(v) then return v:clone() end
  if type(v) == "table" then
    local r = {}
    for k, x in pairs(v) do r[k] = M.copy_value(x) end
    return r
  end
  return v
end

-- A tensor made on the CPU, moved where opts.device says (dtype_opt has
-- checked the device is there before anything was made).
function M.placed(opts, op, t)
  local d = opts and opts.device
  if d == nil or d == "cpu" then return t end
  return new(C.dl_to_device, t, device_arg(d, op))
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
        raise(("%s: element %s is a %s, expected a number or boolean"):format(op, path, describe(v)))
      end
      values[pos] = v
      pos = pos + 1
      return
    end
    if type(t) ~= "table" or is_tensor(t) then
      raise(("%s: element %s is a %s, expected a table of %d elements"):format(op, path, describe(t), shape[d]))
    end
    if #t ~= shape[d] then
      raise(("%s: ragged nested table: %s has %d elements, expected %d"):format(op, path == "" and "the top level" or path, #t, shape[d]))
    end
    for i = 1, #t do walk(t[i], d + 1, path .. "[" .. i .. "]") end
  end
  walk(data, 1, "")
  local default_dtype = args.default_dtype()
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
    local d = dtype_opt(opts, op, C.dl_tensor_dtype(data))
    return M.placed(opts, op, new(C.dl_to_dtype, data, d))
  end
  local td = type(data)
  if td == "number" or td == "boolean" then
    local v = td == "boolean" and (data and 1 or 0) or data
    local dflt = td == "boolean" and C.DL_BOOL or is_integer(v) and C.DL_INT64 or args.default_dtype()
    return M.placed(opts, op, new(C.dl_full, nil, 0, dtype_opt(opts, op, dflt), v))
  end
  if td ~= "table" then
    raise(op .. ": expected a number, boolean, table or tensor, got " .. td)
  end
  local shape, values, inferred = scan(data, op)
  local d = dtype_opt(opts, op, inferred)
  local n = args.shape_args(op, false, shape)
  return M.placed(opts, op, new(C.dl_from_doubles, values, args.shape_buf, n, d))
end

return M
