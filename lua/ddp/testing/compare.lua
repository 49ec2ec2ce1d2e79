-- ddp.testing.compare: comparing tensors -- tensor_equal and tensor_close
-- (torch.testing.assert_close's tolerances and metadata checks, over
-- tables of tensors key by key) with a message naming the worst element,
-- and the deep comparison assert.are.same uses on tensors.
local core = require "ddp.core"
local tensor = require "ddp.tensor"
local factory = require "ddp.tensor.factory"
local serialize = require "ddp.serialize"
local is_tensor, raise = core.is_tensor, core.raise
local fmt_shape, shape_of = core.fmt_shape, core.shape_of
local T = tensor.methods
local type, pairs, next, tostring = type, pairs, next, tostring
local floor, huge, abs = math.floor, math.huge, math.abs
local concat = table.concat

core.add_lib_file(debug.getinfo(1, "S").source)

local M = {}

-- -- Tolerances ----------------------------------------------------------------

-- torch.testing.assert_close's defaults: {rtol, atol} per dtype; exact for
-- integers and bool.  Lua numbers compare as float64.
local TOLERANCES = {
  float16 = { 1e-3, 1e-5 }, bfloat16 = { 1.6e-2, 1e-5 },
  float32 = { 1.3e-6, 1e-5 }, float64 = { 1e-7, 1e-7 },
}

-- default_tolerances(dtype[, other]) -> rtol, atol: the larger of the two
-- dtypes' defaults, as assert_close does for mixed dtypes.
function M.default_tolerances(d1, d2)
  local a, b = TOLERANCES[d1] or { 0, 0 }, TOLERANCES[d2 or d1] or { 0, 0 }
  return math.max(a[1], b[1]), math.max(a[2], b[2])
end

-- -- Comparing two tensors -------------------------------------------------------

local function fmt_value(x, dtype)
  if type(x) ~= "number" then return tostring(x) end
  if x ~= x then return "nan" end
  if x == huge then return "inf" elseif x == -huge then return "-inf" end
  if dtype == "float64" then return ("%.17g"):format(x) end
  if dtype == "int64" or dtype == "int32" or dtype == "uint8" then return ("%.0f"):format(x) end
  return ("%.9g"):format(x)
end

local function fmt_diff(x)
  if x ~= x then return "nan" end
  if x == huge then return "inf" end
  return ("%.3g"):format(x)
end

-- The 0-based multi-index of element `linear` of a tensor of shape s.
local function unravel(linear, s)
  local ix = {}
  for d = #s, 1, -1 do
    ix[d] = linear % s[d]
    linear = floor(linear / s[d])
  end
  return fmt_shape(ix)
end

local function meta(t)
  return T.dtype(t) .. " " .. fmt_shape(shape_of(t))
end

-- The values of both tensors at element `linear` (row-major), and that
-- element's absolute and relative difference.
local function element(e, a, linear)
  local ev, av = T.get(T.reshape(e, -1), linear), T.get(T.reshape(a, -1), linear)
  local en = type(ev) == "boolean" and (ev and 1 or 0) or ev
  local an = type(av) == "boolean" and (av and 1 or 0) or av
  local d = abs(an - en)
  local rel = d == 0 and 0 or d / abs(en)
  return ev, av, d, rel
end

-- Why tensor `a` (actual) does not match `e` (expected) under opts
-- (rtol, atol, equal_nan, check_dtype, check_device), or nil when it does.
-- `what` is "equal" or "close", for the message.
local function mismatch(e, a, opts, what)
  local se, sa = shape_of(e), shape_of(a)
  local same_shape = #se == #sa
  for i = 1, #se do same_shape = same_shape and se[i] == sa[i] end
  if not same_shape then
    return ("Tensors differ in shape: expected %s, actual %s"):format(meta(e), meta(a))
  end
  local de, da = T.dtype(e), T.dtype(a)
  if de ~= da and opts.check_dtype ~= false then
    return ("Tensors differ in dtype: expected %s, actual %s ({check_dtype = false} compares the values)")
           :format(meta(e), meta(a))
  end
  local ve, va = T.device(e), T.device(a)
  if ve ~= va and opts.check_device ~= false then
    return ("Tensors differ in device: expected %s, actual %s ({check_device = false} compares the values)")
           :format(ve, va)
  end
  local n = T.numel(a)
  if n == 0 then return nil end
  -- on the CPU, out of any autograd graph
  e, a = T.detach(e), T.detach(a)
  if ve ~= "cpu" then e = T.cpu(e) end
  if va ~= "cpu" then a = T.cpu(a) end
  local rtol, atol = opts.rtol, opts.atol
  -- `ne` compares in the promoted dtype, so int64 stays exact; NaN differs
  -- from everything, equal infinities match
  local bad = T.ne(a, e)
  local e64, a64 = T.to(e, "float64"), T.to(a, "float64")
  local diff = T.abs(T.sub(a64, e64))
  if rtol ~= 0 or atol ~= 0 then
    -- not "diff > tol": a NaN difference is never within it, nor an
    -- infinite one (inf against -inf; an infinite expected value would
    -- allow it), as torch.isclose
    local within = T.logical_and(T.le(diff, T.add(T.mul(T.abs(e64), rtol), atol)), T.isfinite(diff))
    bad = T.logical_and(bad, T.logical_not(within))
  end
  if opts.equal_nan then
    bad = T.logical_and(bad, T.logical_not(T.logical_and(T.isnan(a64), T.isnan(e64))))
  end
  local count = T.item(T.sum(bad))
  if count == 0 then return nil end

  -- the worst element: the greatest absolute difference among those that
  -- differ (a NaN counts as infinite)
  local nan_inf = function(t) return T.masked_fill(t, T.isnan(t), huge) end
  local not_bad = T.logical_not(bad)
  local worst = T.item(T.argmax(T.reshape(T.masked_fill(nan_inf(diff), not_bad, -1), -1)))
  local rel = nan_inf(T.div(diff, T.abs(e64)))
  rel = T.masked_fill(T.masked_fill(rel, T.eq(diff, 0), 0), not_bad, -1)
  local worst_rel = T.item(T.argmax(T.reshape(rel, -1)))

  local lines = {}
  if what == "equal" then
    lines[1] = ("Tensors are not equal: %d of %d elements differ (%.3g%%)"):format(count, n, 100 * count / n)
  else
    lines[1] = ("Tensors are not close: %d of %d elements differ (%.3g%%); rtol %g, atol %g")
               :format(count, n, 100 * count / n, rtol, atol)
  end
  lines[2] = de == da and ("  %s, expected and actual"):format(meta(a))
             or ("  expected %s, actual %s"):format(meta(e), meta(a))
  local ev, av, d, r = element(e, a, worst)
  lines[3] = ("  worst at index %s: expected %s, actual %s (abs diff %s, rel diff %s)")
             :format(unravel(worst, sa), fmt_value(ev, de), fmt_value(av, da), fmt_diff(d), fmt_diff(r))
  if worst_rel ~= worst then
    ev, av, d, r = element(e, a, worst_rel)
    lines[4] = ("  greatest rel diff %s at index %s: expected %s, actual %s (abs diff %s)")
               :format(fmt_diff(r), unravel(worst_rel, sa), fmt_value(ev, de), fmt_value(av, da), fmt_diff(d))
  end
  return concat(lines, "\n")
end

-- Options of tensor_equal / tensor_close, checked: the opts table to use,
-- or nil and what is wrong.
local KNOWN = { rtol = true, atol = true, equal_nan = true, check_dtype = true, check_device = true }

local function options(opts, what)
  if opts == nil then return {} end
  if type(opts) ~= "table" or is_tensor(opts) then
    return nil, ("tensor_%s: options must be a table such as {rtol = 1e-5, atol = 1e-8}, got %s")
                :format(what, core.show(opts))
  end
  for k in pairs(opts) do
    if not KNOWN[k] or (what == "equal" and (k == "rtol" or k == "atol")) then
      return nil, ("tensor_%s: unknown option %s (expected %s)"):format(what, core.show(k),
        what == "equal" and "equal_nan, check_dtype, check_device"
        or "rtol, atol, equal_nan, check_dtype, check_device")
    end
  end
  -- as assert_close: one tolerance without the other is a mistake
  if (opts.rtol == nil) ~= (opts.atol == nil) then
    return nil, ("tensor_close: give both rtol and atol, or neither (got %s)")
                :format(opts.rtol ~= nil and "rtol only" or "atol only")
  end
  for _, k in ipairs { "rtol", "atol" } do
    local v = opts[k]
    if v ~= nil and (type(v) ~= "number" or v < 0 or v ~= v) then
      return nil, ("tensor_close: %s must be a number >= 0, got %s"):format(k, core.show(v))
    end
  end
  return opts
end

-- A leaf pair: tensors (expected may be a number or nested table, made a
-- tensor like actual), or Lua numbers, or any other values compared with
-- ==.  Returns the reason they differ, or nil.
local function compare_leaf(e, a, opts, what)
  if is_tensor(a) then
    if not is_tensor(e) then
      if type(e) ~= "number" and type(e) ~= "boolean" and type(e) ~= "table" then
        return ("expected %s, got a tensor"):format(core.show(e))
      end
      -- floating actuals take the expected numbers in their own dtype (0.1
      -- in float64 is not 0.1 in float32); integer ones compare the values
      local dt = T.is_floating_point(a) and T.dtype(a) or nil
      local ok, t = pcall(factory.tensor, e, { dtype = dt })
      if not ok then return "expected values that make no tensor: " .. tostring(t):gsub("^[^\n]-:%d+: ", "") end
      e = t
      if not dt then opts = setmetatable({ check_dtype = false }, { __index = opts }) end
      if T.device(a) ~= "cpu" then e = T.to(e, T.device(a)) end
    end
    local o = opts
    if o.rtol == nil then
      local rtol, atol = 0, 0
      if what == "close" then rtol, atol = M.default_tolerances(T.dtype(e), T.dtype(a)) end
      o = setmetatable({ rtol = rtol, atol = atol }, { __index = opts })
    end
    return mismatch(e, a, o, what)
  end
  if is_tensor(e) then return ("expected a tensor, got %s"):format(core.show(a)) end
  if type(e) == "number" and type(a) == "number" then
    local rtol, atol = opts.rtol, opts.atol
    if rtol == nil then rtol, atol = what == "close" and 1e-7 or 0, what == "close" and 1e-7 or 0 end
    if a == e or (opts.equal_nan and a ~= a and e ~= e) then return nil end
    local d = abs(a - e)
    if d < huge and d <= atol + rtol * abs(e) then return nil end
    return ("expected %s, actual %s (abs diff %s)"):format(fmt_value(e, "float64"), fmt_value(a, "float64"),
                                                         fmt_diff(abs(a - e)))
  end
  if e == a then return nil end
  return ("expected %s, actual %s"):format(core.show(e), core.show(a))
end

-- Walks tables of tensors (state dicts, lists of results) key by key,
-- actual driving: a tensor in actual is a leaf; a table in actual is
-- matched key by key.  Returns nil, or the reason and the path (keys).
local function compare_tree(e, a, opts, what, keys, seen)
  if type(a) ~= "table" or is_tensor(a) then
    local why = compare_leaf(e, a, opts, what)
    return why
  end
  if type(e) ~= "table" or is_tensor(e) then
    return ("expected %s, got a table"):format(is_tensor(e) and "a tensor" or core.show(e))
  end
  if seen[a] == e then return nil end
  seen[a] = e
  local depth = #keys + 1
  for k, v in pairs(e) do
    keys[depth] = k
    if a[k] == nil then return "missing in actual" end
    local why = compare_tree(v, a[k], opts, what, keys, seen)
    if why then return why end
  end
  for k in pairs(a) do
    keys[depth] = k
    if e[k] == nil then return "not expected (actual has it)" end
  end
  keys[depth] = nil
  return nil
end

-- The reason expected and actual differ, with the path ("at fc.weight: ...").
local function check(e, a, opts, what)
  local keys = {}
  local why = compare_tree(e, a, opts, what, keys, {})
  if why and #keys > 0 then why = "at " .. serialize.path("", keys) .. ": " .. why end
  return why
end

-- tensor_equal(expected, actual[, opts]) -> true, or false and why: the
-- same shape, dtype and device and every element equal (NaN equals
-- nothing unless equal_nan) -- torch.equal with the metadata checks of
-- torch.testing.assert_close at rtol = atol = 0.  Tables of tensors (state
-- dicts) compare key by key; an expected number or nested table is taken
-- as a tensor.  opts: equal_nan, check_dtype, check_device.
function M.tensor_equal(expected, actual, opts)
  local o, err = options(opts, "equal")
  if not o then raise(err) end
  local why = check(expected, actual, o, "equal")
  if why then return false, why end
  return true
end

-- tensor_close(expected, actual[, opts]) -> true, or false and why:
-- |actual - expected| <= atol + rtol * |expected| elementwise, as
-- torch.testing.assert_close (defaults per dtype: M.default_tolerances).
-- opts: rtol and atol (both or neither), equal_nan, check_dtype, check_device.
function M.tensor_close(expected, actual, opts)
  local o, err = options(opts, "close")
  if not o then raise(err) end
  local why = check(expected, actual, o, "close")
  if why then return false, why end
  return true
end


-- -- assert.are.same on tensors ---------------------------------------------------

-- Whether v is a tensor or a table holding one.
local function has_tensor(v, seen)
  if is_tensor(v) then return true end
  if type(v) ~= "table" then return false end
  seen = seen or {}
  if seen[v] then return false end
  seen[v] = true
  for k, x in next, v do
    if has_tensor(x, seen) or has_tensor(k, seen) then return true end
  end
  return false
end

-- luassert's deep comparison (util.deepcompare), with tensors compared by
-- value as tensor_equal does rather than by handle.  Returns true, or
-- false, the path (keys) and why.
local function deep_same(e, a, keys, seen, top)
  if is_tensor(e) or is_tensor(a) then
    if not (is_tensor(e) and is_tensor(a)) then
      return false, ("expected %s, got %s"):format(is_tensor(e) and "a tensor" or core.show(e),
                                                    is_tensor(a) and "a tensor" or core.show(a))
    end
    -- one tensor is the same as itself, as a table is in luassert (NaNs and
    -- freed tensors included); compared as addresses, whatever == means
    if core.same(e, a) then return true end
    local why = mismatch(e, a, { rtol = 0, atol = 0 }, "equal")
    return why == nil, why
  end
  if type(e) ~= "table" or type(a) ~= "table" then
    if e == a then return true end
    return false, ("expected %s, got %s"):format(core.show(e), core.show(a))
  end
  -- as luassert: below the top, tables whose shared metatable has __eq use it
  local mt = debug.getmetatable(e)
  if not top and mt and mt == debug.getmetatable(a) and mt.__eq then
    return e == a, "the tables' __eq says they differ"
  end
  if rawequal(e, a) or seen[e] == a then return true end
  seen[e] = a
  local depth = #keys + 1
  for k, v in next, e do
    keys[depth] = k
    local w = a[k]
    if w == nil then return false, "missing in the value passed in" end
    local ok, why = deep_same(v, w, keys, seen, false)
    if not ok then return false, why end
  end
  for k in next, a do
    keys[depth] = k
    if e[k] == nil then return false, "not expected (the value passed in has it)" end
  end
  keys[depth] = nil
  return true
end

-- For the luassert assertions (ddp.testing.assertions).
M._options, M._check, M._has_tensor, M._deep_same = options, check, has_tensor, deep_same

return M
