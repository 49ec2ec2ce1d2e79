-- tests/helpers/cuda.lua: what the CUDA op specs (tests/cuda/) share:
-- whether a device is there (real, or the CPU emulation that
-- scripts/run-tests.sh turns on with DDPLUA_CUDA_EMU where no GPU is),
-- moving arguments to it, comparing a CUDA result (or error) with the
-- CPU's of the same call, and sample inputs.
local ddp = require "ddp"

local M = {}
M.available = ddp.cuda.is_available()
M.emulated = (os.getenv("DDPLUA_CUDA_EMU") or "0") ~= "0"
M.status = ddp.cuda.status and ddp.cuda.status() or ""

local core = require "ddp.core"
local function is_tensor(x) return core.is_tensor(x) end

-- Tensors (also inside tables) to the device; everything else as is.
function M.todev(x)
  if is_tensor(x) then
    local d = x:detach():cuda()
    if x.requires_grad then d:requires_grad_(true) end
    return d
  end
  if type(x) == "table" then
    local r = {}
    for k, v in pairs(x) do r[k] = M.todev(v) end
    return r
  end
  return x
end

local TOL = {
  float32 = {1e-5, 1e-5}, float64 = {1e-12, 1e-12},
  bfloat16 = {1e-2, 1e-2}, float16 = {2e-3, 2e-3},
}

-- Asserts dev (a CUDA tensor) equals cpu (a CPU tensor): dtype, shape,
-- NaNs at the same places, values within rtol/atol (exact for integers).
function M.same(cpu, dev, what, tol)
  what = what or "result"
  assert(is_tensor(dev), what .. ": expected a tensor from CUDA, got " .. type(dev))
  assert(dev:device():match("^cuda"), what .. ": result is on " .. dev:device() .. ", not cuda")
  assert(cpu:dtype() == dev:dtype(), what .. ": dtype " .. dev:dtype() .. " on cuda, " .. cpu:dtype() .. " on cpu")
  local sc, sd = table.concat(cpu:shape(), "x"), table.concat(dev:shape(), "x")
  assert(sc == sd, what .. ": shape " .. sd .. " on cuda, " .. sc .. " on cpu")
  local h = dev:cpu()
  if cpu:numel() == 0 then return end
  if not cpu:is_floating_point() then
    local bad = cpu:ne(h):sum():item()
    assert(bad == 0, what .. ": " .. bad .. " integer elements differ")
    return
  end
  local a, b = cpu:double(), h:double()
  local na, nb = a:isnan(), b:isnan()
  assert(na:ne(nb):sum():item() == 0, what .. ": NaNs at different places")
  local t = tol or TOL[cpu:dtype()]
  local eq = a:eq(b):logical_or(na)
  local diff = ddp.where(eq, 0, (a - b):abs())
  local lim = ddp.where(eq, 1, a:abs() * t[1] + t[2])
  local worst = (diff - lim):max():item()
  if worst > 0 then
    local rel = (diff / (a:abs() + 1e-30)):max():item()
    error(string.format("%s: cuda differs from cpu by up to %.3g (relative %.3g; rtol %g, atol %g)",
      what, diff:max():item(), rel, t[1], t[2]), 2)
  end
end

-- f(args) on the CPU and f(args moved to CUDA) on the device; every
-- tensor result compared (f may return several, or a table of them).
function M.check(what, f, args, tol)
  local rc = table.pack(f(table.unpack(args, 1, args.n or #args)))
  local dargs = M.todev(args)
  local rd = table.pack(f(table.unpack(dargs, 1, args.n or #args)))
  for i = 1, rc.n do
    local c, d = rc[i], rd[i]
    if is_tensor(c) then
      M.same(c, d, what .. (rc.n > 1 and (" #" .. i) or ""), tol)
    elseif type(c) == "table" then
      for k, v in pairs(c) do
        if is_tensor(v) then M.same(v, d[k], what .. "." .. tostring(k), tol) end
      end
    else
      assert(c == d or (c ~= c and d ~= d), what .. ": " .. tostring(d) .. " on cuda, " .. tostring(c) .. " on cpu")
    end
  end
  return rc, rd
end

-- The CPU decides what is an error; CUDA must then fail too.  Else
-- check's comparison of the two results.
function M.both(what, f, args, tol)
  local ok = pcall(f, unpack(args))
  if not ok then
    local dok, err = pcall(f, unpack(M.todev(args)))
    assert(not dok, what .. ": fails on cpu but not on cuda")
    assert(tostring(err):match("%S"), what .. ": empty error")
    return
  end
  M.check(what, f, args, tol)
end

-- Seeded values in dtype with signs, zeros and fractions: randn * 3,
-- rounded for the integers, |x| * 10 for uint8, x > 0 for bool.
function M.sample(dtype, shape, seed)
  ddp.manual_seed(seed or 1)
  local x = ddp.randn(shape) * 3
  if dtype == "bool" then return x:gt(0) end
  if dtype == "uint8" then return (x:abs() * 10):to("uint8") end
  if dtype == "int32" or dtype == "int64" then return x:round():to(dtype) end
  return x:to(dtype)
end

-- x with a NaN, an inf and a zero at flat positions i, j and k, where x
-- is a float tensor of more than n elements; x itself.
function M.specials(x, n, i, j, k)
  if x:is_floating_point() and x:numel() > n then
    local v = x:view(-1)
    v:set(i, 0 / 0) v:set(j, 1 / 0) v:set(k, 0)
  end
  return x
end

-- f(args) on both devices; the output, then (with an upstream gradient of
-- the output's shape, seeded, or none for a scalar) every .grad of the
-- args that require grad, compared.
function M.fwd_bwd(what, f, args, tol)
  local function run(a, dev)
    local out = f(table.unpack(a))
    if out.requires_grad then
      if out:numel() == 1 and out:dim() == 0 then out:backward()
      else
        ddp.manual_seed(7)
        local up = ddp.randn(out:shape()):to(out:dtype())
        out:backward(dev and up:cuda() or up)
      end
    end
    local grads = {}
    for i, x in ipairs(a) do
      if is_tensor(x) and x.requires_grad then grads[i] = x.grad end
    end
    return out, grads
  end
  local dargs = M.todev(args)
  local oc, gc = run(args, false)
  local od, gd = run(dargs, true)
  M.same(oc:detach(), od:detach(), what, tol)
  for i, g in pairs(gc) do
    assert(gd[i], what .. ": no gradient on cuda for argument " .. i)
    M.same(g, gd[i], what .. " grad " .. i, tol)
  end
end

-- describe() that runs only where a device is, else one pending line
-- naming why (busted reports it as a SKIP).
function M.describe(name, body)
  local env = getfenv(2)  -- busted's describe and pending live in the spec's environment
  local describe, pending = env.describe, env.pending
  if M.available then
    describe(name .. (M.emulated and " (CUDA emulated on the CPU)" or " (CUDA)"), body)
  else
    describe(name, function()
      pending("no CUDA device: " .. M.status)
    end)
  end
end

return M
