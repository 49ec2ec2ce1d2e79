-- SGD, Adam and AdamW on bfloat16 and float16 parameters against PyTorch
-- 2.15's (tests/golden/make_optim_half.py writes optim_half_cases.lua):
-- state in the parameter's dtype, as PyTorch keeps it, the arithmetic in
-- float32 rounded after each op as PyTorch's CPU step rounds, so a step
-- from PyTorch's state (after two steps) gives PyTorch's very bits (on
-- parameters whose every element its vector loops take: a tail of fewer
-- than 64 elements goes through its scalar loop, which rounds an add's
-- product once more, and may differ there by a rounding); the
-- group-at-once and per-parameter steps give the same bits.
local ddp = require "ddp"
local optim = ddp.optim
local golden = require "helpers.golden"
local build = golden.build

local G = dofile("tests/golden/optim_half_cases.lua")

-- PyTorch's state before the case's last step, loaded; that step taken.
local function run(c, opts_extra)
  local ps = {}
  for i, t in ipairs(c.params) do ps[i] = build(t):requires_grad_() end
  local opts = assert(loadstring("return " .. c.opts))()
  for k, v in pairs(opts_extra or {}) do opts[k] = v end
  local opt = optim[c.cls](ps, opts)
  local sd = opt:state_dict()
  for i, st in ipairs(c.state) do
    local s = {}
    for k, v in pairs(st) do s[k] = type(v) == "table" and build(v) or v end
    sd.state[i - 1] = s
  end
  opt:load_state_dict(sd)
  for i, p in ipairs(ps) do p.grad = build(c.grads[i]) end
  opt:step()
  return ps, opt
end

describe("optimizers on half-precision parameters", function()
  for _, c in ipairs(G.cases) do
    it(c.name .. " takes PyTorch's step to the bit", function()
      local ps, opt = run(c)
      for i, p in ipairs(ps) do
        assert.equal(c.dtype, p:dtype())
        assert(p:equal(build(c.after[i])), ("%s: parameter %d differs from PyTorch's"):format(c.name, i))
        for field, t in pairs(c.state_after[i]) do
          local st = opt.state[i - 1][field]
          if field == "step" then
            assert.equal(t, st)
          else
            assert.equal(c.dtype, st:dtype(), field .. " keeps the parameter's dtype")
            assert(st:equal(build(t)), ("%s: %s of parameter %d differs from PyTorch's"):format(c.name, field, i))
          end
        end
      end
      -- the per-parameter step gives the same bits
      local qs = run(c, { foreach = false })
      for i = 1, #ps do assert.is_true(qs[i]:equal(ps[i]), c.name .. ": foreach = false differs") end
    end)
  end

end)
