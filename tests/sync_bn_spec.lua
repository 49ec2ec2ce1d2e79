-- nn.SyncBatchNorm: on 2 ranks with half the batch each, the outputs,
-- input and parameter gradients and running statistics of BatchNorm on
-- one process with the whole batch; on one process (no group) BatchNorm
-- itself; convert_sync_batchnorm keeps the tensors and the state_dict names.
local ddp = require "ddp"
local testing = require "ddp.testing"
local nn = ddp.nn

-- The whole batch and upstream gradient of each case, made alike on the
-- ranks and here from a fixed seed.
local CASES = {
  { name = "BatchNorm2d", shape = { 8, 3, 4, 5 }, dtype = "float64", tol = { rtol = 1e-10, atol = 1e-12 } },
  { name = "BatchNorm2d", shape = { 6, 4, 3, 3 }, dtype = "float32", tol = { rtol = 1e-4, atol = 1e-5 } },
  { name = "BatchNorm1d", shape = { 10, 5 }, dtype = "float64", tol = { rtol = 1e-10, atol = 1e-12 } },
  { name = "BatchNorm1d", shape = { 4, 3, 7 }, dtype = "float32", tol = { rtol = 1e-4, atol = 1e-5 } },
}

-- (Source, as the ranks load it too.)  Runs 2 training steps (forward, backward) of layer over x (the rows
-- [lo, lo + n) of the case's batch) and returns what they leave.
local STEPS = [[
local ddp = require "ddp"
return function(case, layer, lo, n)
  ddp.manual_seed(7)
  local full = ddp.randn(case.shape, { dtype = case.dtype }) * 3 + 1
  local gout = ddp.randn(case.shape, { dtype = case.dtype })
  ddp.no_grad(function()
    layer.weight:copy_(ddp.rand(case.shape[2], { dtype = case.dtype }) + 0.5)
    layer.bias:copy_(ddp.randn(case.shape[2], { dtype = case.dtype }))
  end)
  local r = { ys = {}, xgrads = {} }
  for s = 1, 2 do
    local x = (full:narrow(0, lo, n) * s):detach():requires_grad_()
    local y = layer(x)
    local loss = (y * gout:narrow(0, lo, n)):sum()
    loss:backward()
    r.ys[s], r.xgrads[s] = y:detach(), x.grad
  end
  r.wgrad, r.bgrad = layer.weight.grad, layer.bias.grad
  r.running_mean, r.running_var = layer.running_mean, layer.running_var
  r.num_batches_tracked = layer.num_batches_tracked:item()
  return r
end
]]
local steps = loadstring(STEPS)()

describe("nn.SyncBatchNorm", function()
  for ci, case in ipairs(CASES) do
    it(("on 2 ranks with half the batch each equals %s over the whole batch (%s %s)")
       :format(case.name, table.concat(case.shape, "x"), case.dtype), function()
      local res = testing.run(2, function(k, src)
        ddp.init()
        local steps = loadstring(src)()
        local c = CASES[k]
        local model = nn.convert_sync_batchnorm(nn.Sequential(nn[c.name](c.shape[2], { dtype = c.dtype })))
        local layer = model:get(0)
        assert(layer.__name == "SyncBatchNorm", layer.__name)
        local half = c.shape[1] / 2
        return steps(c, layer, ddp.rank() * half, half)
      end, { args = { ci, STEPS }, timeout = 120 })
      local want = steps(case, nn[case.name](case.shape[2], { dtype = case.dtype }), 0, case.shape[1])
      local tol = case.tol
      for s = 1, 2 do
        assert.tensor_close(want.ys[s], ddp.cat({ res[1].ys[s], res[2].ys[s] }, 0), tol)
        assert.tensor_close(want.xgrads[s], ddp.cat({ res[1].xgrads[s], res[2].xgrads[s] }, 0), tol)
      end
      -- parameter gradients are each rank's share (DDP averages them)
      assert.tensor_close(want.wgrad, res[1].wgrad + res[2].wgrad, tol)
      assert.tensor_close(want.bgrad, res[1].bgrad + res[2].bgrad, tol)
      for r = 1, 2 do
        assert.tensor_close(want.running_mean, res[r].running_mean, tol)
        assert.tensor_close(want.running_var, res[r].running_var, tol)
        assert.equal(2, res[r].num_batches_tracked)
      end
    end)
  end

  it("on one process (no group) is BatchNorm, in training and in eval", function()
    for ci, case in ipairs(CASES) do
      local want = steps(case, nn[case.name](case.shape[2], { dtype = case.dtype }), 0, case.shape[1])
      local sync = nn.SyncBatchNorm(case.shape[2], { dtype = case.dtype })
      local got = steps(case, sync, 0, case.shape[1])
      for _, k in ipairs { "wgrad", "bgrad", "running_mean", "running_var" } do
        assert.tensor_equal(want[k], got[k], ("case %d: %s"):format(ci, k))
      end
      assert.tensor_equal(want.ys[2], got.ys[2])
      assert.tensor_equal(want.xgrads[2], got.xgrads[2])
      sync:eval()
      local x = ddp.randn(case.shape, { dtype = case.dtype })
      local bn = nn[case.name](case.shape[2], { dtype = case.dtype })
      bn:load_state_dict(sync:state_dict())
      bn:eval()
      assert.tensor_equal(bn(x), sync(x))
    end
  end)

  it("convert_sync_batchnorm replaces every BatchNorm, keeping tensors, flags and state_dict names", function()
    local inner = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3, { momentum = 0.2, eps = 1e-3 }))
    local model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2, { affine = false }), inner)
    model:get(1):eval()
    local before = model:state_dict()
    local names_before = {}
    for name in pairs(before) do names_before[#names_before + 1] = name end
    table.sort(names_before)
    local w = inner:get(1).weight
    local converted = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    assert.equal(model, converted)
    assert.equal("SyncBatchNorm", model:get(1).__name)
    assert.equal("SyncBatchNorm", inner:get(1).__name)
    assert.equal("Linear", inner:get(0).__name)
    assert.is_false(model:get(1).training)
    assert.is_nil(model:get(1).weight)
    assert.equal(0.2, inner:get(1).momentum)
    assert.equal(1e-3, inner:get(1).eps)
    assert.is_true(rawequal(w, inner:get(1).weight) or ddp.is_same and ddp.is_same(w, inner:get(1).weight) or w:data_ptr() == inner:get(1).weight:data_ptr())
    local after = model:state_dict()
    local names_after = {}
    for name, t in pairs(after) do
      names_after[#names_after + 1] = name
      assert.tensor_equal(before[name], t)
    end
    table.sort(names_after)
    assert.same(names_before, names_after)
    -- a BatchNorm alone comes back converted; the same function is on ddp.nn
    assert.equal("SyncBatchNorm", nn.convert_sync_batchnorm(nn.BatchNorm2d(3)).__name)
  end)

  it("refuses inputs BatchNorm refuses", function()
    local s = nn.SyncBatchNorm(3)
    local ok, e = pcall(function() return s(ddp.ones(3)) end)
    assert.is_false(ok)
    assert.matches("sync_bn_spec.lua:%d+: SyncBatchNorm: expected at least 2D input %(got 1D input%)", e)
    ok, e = pcall(function() return s(ddp.ones(2, 4)) end)
    assert.matches("input has 4 channels", e)
  end)
end)
