-- Moving data to the GPU: pinned host memory, copies that do not wait
-- (non_blocking) with their source kept alive until done, DataLoader
-- batches in pinned memory, and a dataset living on the GPU.
local ddp = require "ddp"
local H = require "helpers.cuda"

H.describe("CUDA transfers", function()
  it("pin_memory gives a pinned copy; pinning a pinned tensor is free", function()
    local x = ddp.randn(5, 7)
    assert.is_false(x:is_pinned())
    local p = x:pin_memory()
    assert.is_true(p:is_pinned())
    assert.equal(0, (p - x):abs():max():item())
    assert.equal(p:data_ptr(), p:pin_memory():data_ptr())
    local nc = x:t():pin_memory()  -- a non-contiguous view is copied contiguous
    assert.is_true(nc:is_contiguous() and nc:is_pinned())
    local ok, err = pcall(function() return x:cuda():pin_memory() end)
    assert.is_false(ok)
    assert.truthy(tostring(err):match("CPU tensors"), err)
  end)

  it("non_blocking copies give the same values, the source may go at once", function()
    local outs, refs = {}, {}
    for i = 1, 20 do
      local x = ddp.randn(64, 33) * i
      refs[i] = x
      outs[i] = x:pin_memory():cuda({non_blocking = true})  -- the pinned source is dropped here
      collectgarbage()
    end
    for i = 1, 20 do H.same(refs[i], outs[i], "copy " .. i) end
    -- not pinned: the same call falls back to a copy that waits
    H.same(refs[1], refs[1]:to("cuda", {non_blocking = true}), "pageable non_blocking")
    H.same(refs[1]:double(), refs[1]:pin_memory():to("cuda", {dtype = "float64", non_blocking = true}), "with dtype")
  end)

  it("DataLoader pin_memory = true yields pinned batches", function()
    local ds = ddp.data.TensorDataset(ddp.randn(10, 3), ddp.arange(10))
    local seen = 0
    for _, x, y in ddp.data.DataLoader(ds, {batch_size = 4, pin_memory = true}):iter() do
      assert.is_true(x:is_pinned() and y:is_pinned())
      seen = seen + x:size(0)
    end
    assert.equal(10, seen)
  end)

  it("a TensorDataset on the GPU gives batches on the GPU, in the sampler's order", function()
    local X, Y = ddp.randn(10, 3), ddp.arange(10)
    local cpu = ddp.data.DataLoader(ddp.data.TensorDataset(X, Y), {batch_size = 4, shuffle = true, seed = 3})
    local gpu = ddp.data.DataLoader(ddp.data.TensorDataset(X:cuda(), Y:cuda()), {batch_size = 4, shuffle = true, seed = 3})
    local a = {}
    for i, x, y in cpu:iter() do a[i] = {x, y} end
    local n = 0
    for i, x, y in gpu:iter() do
      H.same(a[i][1], x, "x batch " .. i)
      H.same(a[i][2], y, "y batch " .. i)
      n = n + 1
    end
    assert.equal(3, n)
  end)

  it("checkpoints of CUDA tensors save their values and load on either device", function()
    ddp.manual_seed(5)
    local m = ddp.nn.Sequential(ddp.nn.Linear(3, 4), ddp.nn.ReLU(), ddp.nn.Linear(4, 2)):to("cuda")
    local path = os.tmpname()
    ddp.save(m:state_dict(), path)
    local on_cpu, on_gpu = ddp.load(path), ddp.load(path, {device = "cuda"})
    for k, v in pairs(m:state_dict()) do
      assert.equal("cpu", on_cpu[k]:device())
      H.same(on_cpu[k], v, k .. " loaded on the cpu")
      H.same(on_cpu[k], on_gpu[k], k .. " loaded on cuda")
    end
    local m2 = ddp.nn.Sequential(ddp.nn.Linear(3, 4), ddp.nn.ReLU(), ddp.nn.Linear(4, 2)):to("cuda")
    m2:load_state_dict(on_cpu)  -- values copied into the CUDA parameters
    local x = ddp.randn(5, 3):cuda()
    H.same(m(x):cpu(), m2(x), "same outputs after loading")
    os.remove(path)
  end)
end)
