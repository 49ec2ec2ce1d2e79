-- sdpa.lua: fused scaled_dot_product_attention against ddplua's explicit
-- formula (matmul, masked_fill, softmax, matmul) at a GPT's attention
-- shape: batch 8, 4 heads, T = 256, E = 64, causal, forward + backward
-- (the issue's goal: the fused op at least 2x the explicit one).
--   ddplua bench/sdpa.lua [THREADS] [T] [dtype]
-- Prints "name<TAB>milliseconds (median)" per variant, then the ratio.
local ddp = require "ddp"
local F = require("ddp.nn").functional
ddp.set_num_threads(tonumber(arg[1]) or 1)
local T, dtype = tonumber(arg[2]) or 256, arg[3] or "float32"
local B, H, E = 8, 4, 64
ddp.manual_seed(0)
local now = dofile((arg[0]:match("^(.*)/") or ".") .. "/clock.lua")


local q = ddp.randn(B, H, T, E, { dtype = dtype }):requires_grad_()
local k = ddp.randn(B, H, T, E, { dtype = dtype }):requires_grad_()
local v = ddp.randn(B, H, T, E, { dtype = dtype }):requires_grad_()
local g = ddp.randn(B, H, T, E, { dtype = dtype })
local causal = ddp.ones(T, T):triu(1):bool()  -- true above the diagonal: masked

local function explicit()
  local s = q:matmul(k:transpose(-2, -1)) * (1 / math.sqrt(E))
  return s:masked_fill(causal, -math.huge):softmax(-1):matmul(v)
end
local function fused() return F.scaled_dot_product_attention(q, k, v, { is_causal = true }) end
local function step(f)
  return function()
    q.grad, k.grad, v.grad = nil, nil, nil
    f():backward(g)
  end
end

local rows = {
  { "explicit fwd", function() ddp.no_grad(explicit) end },
  { "fused fwd", function() ddp.no_grad(fused) end },
  { "explicit fwd+bwd", step(explicit) },
  { "fused fwd+bwd", step(fused) },
}
local t = {}
for _, r in ipairs(rows) do
  t[r[1]] = now.median(15, r[2])
  print(("%s B=%d H=%d T=%d E=%d %s causal\t%.3f"):format(r[1], B, H, T, E, dtype, t[r[1]] * 1e3))
end
print(("speedup fwd %.2fx, fwd+bwd %.2fx (threads %d)"):format(t["explicit fwd"] / t["fused fwd"],
  t["explicit fwd+bwd"] / t["fused fwd+bwd"], ddp.get_num_threads()))
