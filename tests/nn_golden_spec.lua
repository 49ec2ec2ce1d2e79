-- The network ops against PyTorch 1.13 (tests/golden/make_nn.py writes
-- tests/golden/nn_cases.lua): forward outputs, and the gradients of
-- sum(grad_out * output) through ddp.nn.functional and autograd.
local ddp = require "ddp"
local F = require("ddp.nn").functional

local cases = dofile("tests/golden/nn_cases.lua")

local function build(spec)
  return ddp.tensor(spec.values, { dtype = spec.dtype }):view(spec.shape)
end

-- nil, or what differs between got and the expected spec
local function compare(got, want, rtol, atol)
  if not ddp.is_tensor(got) then return "not a tensor: " .. tostring(got) end
  if got:dtype() ~= want.dtype then return ("dtype %s, want %s"):format(got:dtype(), want.dtype) end
  local shape = got:shape()
  if #shape ~= #want.shape then return "ndim " .. #shape end
  for i = 1, #shape do
    if shape[i] ~= want.shape[i] then return "shape mismatch at dim " .. (i - 1) end
  end
  local flat = got:numel() > 0 and got:double():contiguous():view(-1):totable() or {}
  for i = 1, #flat do
    local g, w = flat[i], want.values[i]
    if not ((w ~= w and g ~= g) or g == w or math.abs(g - w) <= atol + rtol * math.abs(w)) then
      return ("element %d: got %.9g, PyTorch %.9g"):format(i - 1, g, w)
    end
  end
end

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
