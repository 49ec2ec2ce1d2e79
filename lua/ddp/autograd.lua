-- ddp.autograd: the Lua face of the C autograd engine: grad-mode
-- switches (no_grad, enable_grad, ...) and gradcheck.  The tensor's side
-- (requires_grad_, backward, t.grad, ...) is ddp.tensor.grad's.
local core = require "ddp.core"
local tensor = require "ddp.tensor"
local tensor_grad = require "ddp.tensor.grad"
local C, ffi = core.C, core.ffi
local new, check, raise = core.new, core.check, core.raise
local T = tensor.methods
local type, select, unpack = type, select, unpack

core.add_lib_file(debug.getinfo(1, "S").source)

local M = {}

-- Functions run after every successful backward() (ddp.DDP's Lua comm
-- hooks), in order.
M._post_backward = tensor_grad.post_backward

-- -- Grad mode ---------------------------------------------------------------------

local function pack(...) return { n = select("#", ...), ... } end

-- Runs fn(...) with grad mode set to `enabled`, restoring it even on error.
local function with_mode(enabled, fn, ...)
  if type(fn) ~= "function" then
    raise("expected a function, e.g. ddp.no_grad(function() ... end), got " .. type(fn))
  end
  local prev = C.dl_set_grad_enabled(enabled and 1 or 0)
  local r = pack(pcall(fn, ...))
  C.dl_set_grad_enabled(prev)
  if not r[1] then error(r[2], 0) end
  return unpack(r, 2, r.n)
end

function M.no_grad(fn, ...) return with_mode(false, fn, ...) end
function M.enable_grad(fn, ...) return with_mode(true, fn, ...) end
function M.set_grad_enabled(enabled) return C.dl_set_grad_enabled(enabled and 1 or 0) ~= 0 end
function M.is_grad_enabled() return C.dl_is_grad_enabled() ~= 0 end

-- -- Gradient check --------------------------------------------------------------

local dbuf = ffi.new("double[1]")
local function get(t, i)
  check(C.dl_get_double(t, i, dbuf))
  return dbuf[0]
end

-- gradcheck(fn, inputs[, {eps=, atol=, rtol=}]): compares backward with
-- central finite differences, for sum(fn(inputs...) * v) with a fixed
-- random v (so the whole Jacobian is exercised in one backward).  Inputs
-- should be float64 leaves that require grad.  Returns true, or raises an
-- error naming the input, the element and both values.
function M.gradcheck(fn, inputs, opts)
  opts = opts or {}
  local eps, atol, rtol = opts.eps or 1e-6, opts.atol or 1e-5, opts.rtol or 1e-3
  if type(inputs) ~= "table" or core.is_tensor(inputs) then inputs = { inputs } end
  for i, x in ipairs(inputs) do
    if not core.is_tensor(x) then raise(("gradcheck: input %d is not a tensor"):format(i)) end
    if C.dl_tensor_dtype(x) ~= C.DL_FLOAT64 then
      raise(("gradcheck: input %d is %s; use float64 inputs so finite differences are accurate")
            :format(i, T.dtype(x)))
    end
  end
  local out = fn(unpack(inputs))
  if not core.is_tensor(out) then raise("gradcheck: fn must return a tensor, got " .. core.describe(out)) end
  -- a fixed weighting of the outputs, drawn without disturbing the global RNG
  local state = { seed = tonumber(C.dl_rng_seed()), offset = tonumber(C.dl_rng_offset()) }
  C.dl_manual_seed(1234)
  local shape = core.shape_of(out)
  local n = core.shape_args("gradcheck", false, shape)
  local v = new(C.dl_rand, core.shape_buf, n, C.DL_FLOAT64)
  C.dl_rng_set_state(state.seed, state.offset)
  v = T.add(v, 0.5)
  local function objective(...)
    return T.item(T.sum(T.mul(T.to(fn(...), "float64"), v)))
  end
  for _, x in ipairs(inputs) do check(C.dl_set_grad(x, nil)) end
  T.backward(T.sum(T.mul(T.to(out, "float64"), v)))
  for i, x in ipairs(inputs) do
    if C.dl_requires_grad(x) ~= 0 then
      local g = tensor_grad.fields.grad(x)
      M.no_grad(function()
        for j = 0, T.numel(x) - 1 do
          local orig = get(x, j)
          check(C.dl_set_double(x, j, orig + eps))
          local fp = objective(unpack(inputs))
          check(C.dl_set_double(x, j, orig - eps))
          local fm = objective(unpack(inputs))
          check(C.dl_set_double(x, j, orig))
          local num = (fp - fm) / (2 * eps)
          local ana = g and get(g, j) or 0
          if math.abs(num - ana) > atol + rtol * math.abs(num) then
            raise(("gradcheck: input %d, element %d: numerical gradient %.10g, analytical %.10g")
                  :format(i, j, num, ana))
          end
        end
      end)
    end
  end
  return true
end

return M
