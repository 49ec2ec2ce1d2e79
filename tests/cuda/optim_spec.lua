-- The optimizers' group-at-once steps on CUDA (runtime/cuda/kernels/optim.cu:
-- one launch per 32 tensors, each block on one tensor): 40 parameters of
-- sizes 1 to 70,000 (two launches, tensors of one block and of many),
-- stepped 10 times by SGD with momentum and Nesterov and by AdamW with
-- amsgrad, the same bits as the step per parameter on the device and as
-- the CPU's within float32 rounding; a parameter with no gradient keeps
-- its values and state.
local ddp = require "ddp"
local H = require "helpers.cuda"
local optim = ddp.optim

local function params(device)
  ddp.manual_seed(21)
  local ps = {}
  for k = 1, 40 do
    local n = k == 40 and 70000 or (k * 37) % 900 + 1
    ps[k] = ddp.randn(n):to(device):requires_grad_(true)
  end
  return ps
end

local function run(cls, opts, device, foreach)
  local ps = params(device)
  local o = { foreach = foreach }
  for k, v in pairs(opts) do o[k] = v end
  local opt = cls(ps, o)
  for i = 1, 10 do
    ddp.manual_seed(100 + i)
    for k, p in ipairs(ps) do
      -- parameter 7 has no gradient on steps 3 to 10
      if k == 7 and i >= 3 then p.grad = nil else p.grad = ddp.randn(p:numel()):to(device) end
    end
    opt:step()
  end
  return ps, opt
end

H.describe("optimizer foreach steps on CUDA", function()
  for _, c in ipairs {
    { "SGD momentum nesterov", optim.SGD, { lr = 0.05, momentum = 0.9, nesterov = true, weight_decay = 0.01 } },
    { "AdamW amsgrad", optim.AdamW, { lr = 1e-2, amsgrad = true, weight_decay = 0.1 } },
  } do
    it(c[1] .. ": the same bits as per parameter, the CPU's within rounding", function()
      local a, oa = run(c[2], c[3], "cuda", true)
      local b = run(c[2], c[3], "cuda", false)
      local cpu = run(c[2], c[3], "cpu", true)
      for k = 1, #a do
        assert.equal("cuda:0", a[k]:device())
        local same = (a[k] - b[k]):abs():max():item()
        assert(same == 0, ("parameter %d: foreach and per-parameter differ by %g"):format(k, same))
        local d = (a[k]:cpu() - cpu[k]):abs():max():item()
        assert(d < 1e-5, ("parameter %d: CUDA and CPU differ by %g"):format(k, d))
      end
      if c[2] == optim.AdamW then assert.equal(2, oa.state[6].step, "parameter 7 stepped twice") end
    end)
  end

  -- bfloat16 / float16 parameters on CUDA step in float32 chunks of 2^20
  -- elements through the float32 kernels (nn/optim_half.c): the float32
  -- step of the same values, rounded once at the end, to the bit; state
  -- stays in the parameter's dtype.
  it("steps bfloat16 and float16 parameters in float32 chunks, rounding once", function()
    for _, dt in ipairs { "bfloat16", "float16" } do
      for _, c in ipairs { { optim.AdamW, { lr = 1e-2, weight_decay = 0.1 } },
                           { optim.SGD, { lr = 0.05, momentum = 0.9, nesterov = true } } } do
        ddp.manual_seed(9)
        local n = 2 ^ 20 + 4099  -- two chunks
        local p = ddp.randn(n):to(dt):cuda():requires_grad_(true)
        local q = p:detach():float():requires_grad_(true)
        local oh, of = c[1]({ p }, c[2]), c[1]({ q }, c[2])
        for step = 1, 2 do
          local g = ddp.randn(n):to(dt):cuda()
          p.grad, q.grad = g, g:float()
          oh:step()
          of:step()
          -- the float32 run keeps unrounded state; round it as the half run stores it
          ddp.no_grad(function() q:copy_(q:to(dt):float()) end)
          for k, v in pairs(of.state[0]) do
            if ddp.is_tensor(v) then of.state[0][k] = v:to(dt):float() end
          end
        end
        assert.equal(dt, p:dtype())
        assert.is_true(p:float():equal(q), dt .. ": parameter")
        for k, v in pairs(oh.state[0]) do
          if ddp.is_tensor(v) then
            assert.equal(dt, v:dtype(), k)
            assert.is_true(v:float():equal(of.state[0][k]), dt .. ": " .. k)
          end
        end
      end
    end
  end)
end)
