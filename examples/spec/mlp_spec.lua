-- examples/spec/mlp_spec.lua: unit specs of examples/mlp.lua, written with
-- the tensor assertions of ddp.testing.
local ddp = require "ddp"
require "ddp.testing"  -- assert.tensor_equal, assert.tensor_close; same() on tensors
local mlp = require "mlp"

-- A copy of a state dict (its tensors are the live parameters).
local function snapshot(model)
  local copy = {}
  for k, v in pairs(model:state_dict()) do copy[k] = v:clone() end
  return copy
end

describe("the MLP", function()
  it("computes fc2(relu(fc1(x)))", function()
    local model, x = mlp.new(), ddp.randn(5, 4)
    local h = x:matmul(model.fc1.weight:t()):add(model.fc1.bias):relu()
    local expected = h:matmul(model.fc2.weight:t()):add(model.fc2.bias)
    assert.tensor_close(expected, model(x))  -- float32: rtol 1.3e-6, atol 1e-5
    assert.same({ 5, 2 }, model(x):shape())
  end)

  it("starts from the same weights for the same seed", function()
    assert.are.same(snapshot(mlp.new(7)), snapshot(mlp.new(7)))
    assert.are_not.same(snapshot(mlp.new(7)), snapshot(mlp.new(8)))
  end)

  it("learns: training lowers the loss and moves every weight", function()
    local model = mlp.new()
    local before = snapshot(model)
    local x, y = mlp.data()
    local _, losses = mlp.train(model, x, y, { steps = 40 })
    assert.is_true(losses[#losses] < losses[1] / 5, ("loss %g -> %g"):format(losses[1], losses[#losses]))
    for name, t in pairs(model:state_dict()) do
      assert.is_not.tensor_close(before[name], t, name)
    end
  end)

  it("gives the same data wherever it is made", function()
    local x1, y1 = mlp.data()
    ddp.manual_seed(99)
    local x2, y2 = mlp.data()
    assert.tensor_equal(x1, x2)
    assert.tensor_equal(y1, y2)
  end)
end)
