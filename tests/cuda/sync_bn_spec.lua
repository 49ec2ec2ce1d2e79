-- nn.SyncBatchNorm on CUDA tensors: a real 2-rank job, each rank's half of
-- the batch on its GPU (on the emulator: cuda:0 of each rank's process),
-- gives BatchNorm's outputs, input gradients, parameter gradients (summed
-- over the ranks) and running statistics for the whole batch on the CPU.
local ddp = require "ddp"
local H = require "helpers.cuda"
local testing = require "ddp.testing"
local nn = ddp.nn

-- (Source, as the ranks load it too.)  One training step of layer over the
-- rows [lo, lo + n) of a fixed batch, on device dev; what it leaves, on
-- the CPU.
local STEP = [[
local ddp = require "ddp"
return function(layer, lo, n, dev)
  ddp.manual_seed(7)
  local full = ddp.randn({ 8, 3, 4, 5 }, { dtype = "float64" }) * 3 + 1
  local gout = ddp.randn({ 8, 3, 4, 5 }, { dtype = "float64" })
  local x = full:narrow(0, lo, n):to(dev):detach():requires_grad_()
  local y = layer(x)
  ;(y * gout:narrow(0, lo, n):to(dev)):sum():backward()
  return { y = y:detach():cpu(), xgrad = x.grad:cpu(), wgrad = layer.weight.grad:cpu(),
           bgrad = layer.bias.grad:cpu(), running_mean = layer.running_mean:cpu(),
           running_var = layer.running_var:cpu() }
end
]]

H.describe("nn.SyncBatchNorm on CUDA", function()
  it("on 2 ranks with half the batch each equals BatchNorm2d over the whole batch", function()
    local res = testing.run(2, function(src)
      ddp.init()
      local step = loadstring(src)()
      local layer = nn.SyncBatchNorm(3, { dtype = "float64" }):to("cuda")
      assert(layer.weight:device():find("cuda"), layer.weight:device())
      return step(layer, ddp.rank() * 4, 4, "cuda")
    end, { args = { STEP }, timeout = 120 })
    local want = loadstring(STEP)()(nn.BatchNorm2d(3, { dtype = "float64" }), 0, 8, "cpu")
    local tol = { rtol = 1e-10, atol = 1e-12 }
    assert.tensor_close(want.y, ddp.cat({ res[1].y, res[2].y }, 0), tol)
    assert.tensor_close(want.xgrad, ddp.cat({ res[1].xgrad, res[2].xgrad }, 0), tol)
    assert.tensor_close(want.wgrad, res[1].wgrad + res[2].wgrad, tol)
    assert.tensor_close(want.bgrad, res[1].bgrad + res[2].bgrad, tol)
    for r = 1, 2 do
      assert.tensor_close(want.running_mean, res[r].running_mean, tol)
      assert.tensor_close(want.running_var, res[r].running_var, tol)
    end
  end)
end)
