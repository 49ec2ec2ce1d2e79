-- tests/helpers/golden.lua: building inputs from, and comparing results
-- with, the cases PyTorch wrote (tests/golden/*cases.lua): golden_spec and
-- nn_golden_spec.
--
--   local golden = require "helpers.golden"
--   local x = golden.build(spec)                          -- {dtype=, shape=, values=}
--   local why = golden.compare(got, want, rtol, atol)     -- nil when they match
local ddp = require "ddp"
local ffi = require "ffi"
local core = require "ddp.core"
local C = core.C

local M = {}

-- -- Building inputs ---------------------------------------------------------

local function has_cdata(values)
  for i = 1, #values do
    if type(values[i]) == "cdata" then return true end
  end
  return false
end

-- int64 values beyond 2^53 come as int64 cdata: build those from int64s so
-- they stay exact.
local function from_int64s(spec)
  local n = #spec.values
  local buf = ffi.new("int64_t[?]", n > 0 and n or 1)
  for i = 1, n do buf[i - 1] = spec.values[i] end
  local shape = ffi.new("int64_t[8]")
  for i = 1, #spec.shape do shape[i - 1] = spec.shape[i] end
  return core.new(C.dl_from_int64s, buf, shape, #spec.shape, C.dl_dtype_from_name(spec.dtype))
end

function M.build(spec)
  if has_cdata(spec.values) then return from_int64s(spec) end
  return ddp.tensor(spec.values, { dtype = spec.dtype }):view(spec.shape)
end

-- -- Comparing outputs -------------------------------------------------------

local function fmt_shape(s)
  return "{" .. table.concat(s, ", ") .. "}"
end

local function fmt(v)
  if type(v) == "number" then
    if v ~= v then return "nan" end
    return ("%.17g"):format(v)
  end
  return tostring(v)
end

-- Exact comparisons (rtol = atol = 0) tell -0 from 0, as PyTorch prints them.
local function close(got, want, rtol, atol)
  if want ~= want then return got ~= got end
  if want == 0 and got == 0 and rtol == 0 and atol == 0 then return 1 / want == 1 / got end
  if want == got then return true end  -- equal infinities too
  if want == math.huge or want == -math.huge or got ~= got then return false end
  return math.abs(got - want) <= atol + rtol * math.abs(want)
end

-- Returns nil when `got` matches the expected tensor, else why not.
function M.compare(got, want, rtol, atol)
  if not ddp.is_tensor(got) then
    return ("expected a tensor, got a %s (%s)"):format(type(got), tostring(got))
  end
  local dtype = got:dtype()
  if dtype ~= want.dtype then
    return ("dtype %s, expected %s"):format(dtype, want.dtype)
  end
  local shape = got:size()
  local same = #shape == #want.shape
  for i = 1, #want.shape do same = same and shape[i] == want.shape[i] end
  if not same then
    return ("shape %s, expected %s"):format(fmt_shape(shape), fmt_shape(want.shape))
  end
  local n = got:numel()
  assert(n == #want.values, "case file: value count does not match its shape")
  local bad, first, worst = 0, {}, 0
  local i64 = ffi.new("int64_t[1]")
  local dbuf = ffi.new("double[?]", n > 0 and n or 1)
  if dtype ~= "int64" and C.dl_to_doubles(got, dbuf) ~= 0 then
    return "dl_to_doubles failed: " .. core.last_error()
  end
  for i = 1, n do
    local w, g, ok = want.values[i]
    if dtype == "int64" then
      assert(C.dl_get_int64(got, i - 1, i64) == 0, core.last_error())
      g = i64[0]
      ok = g == w  -- int64 compare, exact beyond 2^53
      if tonumber(g) == g then g = tonumber(g) end
    elseif dtype == "bool" then
      g = dbuf[i - 1] ~= 0
      ok = g == w
    elseif dtype == "int32" or dtype == "uint8" then
      g = dbuf[i - 1]
      ok = g == w
    else
      g = dbuf[i - 1]
      ok = close(g, w, rtol, atol)
      if not ok and g == g and w == w then
        local e = math.abs(g - w) / math.max(math.abs(w), 1e-300)
        if e > worst then worst = e end
      end
    end
    if not ok then
      bad = bad + 1
      if #first < 6 then
        first[#first + 1] = ("[%d] got %s, expected %s"):format(i - 1, fmt(g), fmt(w))
      end
    end
  end
  if bad > 0 then
    return ("%d of %d values differ (rtol %g, atol %g%s): %s"):format(
      bad, n, rtol, atol, worst > 0 and (", worst rel err %.3g"):format(worst) or "",
      table.concat(first, "; "))
  end
end

return M
