-- The network ops against PyTorch 1.13 (tests/golden/make_nn.py writes
-- tests/golden/nn_cases.lua): forward outputs, and the gradients of
-- sum(grad_out * output) through ddp.nn.functional and autograd.
local ddp = require "ddp"
local F = require("ddp.nn").functional

local cases = dofile("tests/golden/nn_cases.lua")

local golden = require "helpers.golden"
local build, compare = golden.build, golden.compare

describe("network ops match PyTorch", function()
  for _, c in ipairs(cases) do
    it(c.name, function()
      local env = setmetatable({ F = F, ddp = ddp }, { __index = _G })
      for k, v in pairs(c.inputs) do env[k] = build(v) end
      for k in pairs(c.grads or {}) do env[k]:requires_grad_(true) end
      local chunk = assert(loadstring("return " .. c.lua))
      setfenv(chunk, env)
      local r1, r2 = chunk()
      -- some cases return several results in a table (batch_norm's stats)
      local outs = (type(r1) == "table" and not ddp.is_tensor(r1)) and r1 or { r1, r2 }
      for i, w in ipairs(c.outputs) do
        local e = compare(outs[i], w, c.rtol, c.atol)
        assert(not e, ("%s: output %d: %s"):format(c.lua, i, e or ""))
      end
      if c.grads then
        outs[1]:backward(build(c.grad_out))
        for k, w in pairs(c.grads) do
          local e = compare(env[k].grad, w, c.grtol, c.gatol)
          assert(not e, ("%s: gradient of %s: %s"):format(c.lua, k, e or ""))
        end
      end
    end)
  end
end)
