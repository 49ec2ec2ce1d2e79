-- Moving data to the GPU: pinned host memory, copies that do not wait
-- (non_blocking, on the device's copy stream, the compute stream ordered
-- after each by an event) with their source kept alive until done,
-- DataLoader batches in pinned memory, and a dataset living on the GPU.
-- Under the emulator's race checker (scripts/run-tests.sh) a kernel that
-- used a copy's destination unordered would fail its op
-- (runtime/cuda/emu/streamcheck.cc; tests/emu/test_streams.cc shows it).
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

  it("a prefetched batch's copy is ordered before every op on it, on the copy stream", function()
    -- a training loop's prefetch: batch i+1's copy is issued before batch
    -- i's kernels, then each batch is read, written in place and reduced
    local n = 6
    local xs = {}
    for i = 1, n do xs[i] = (ddp.arange(4096) % 97 + i):float():view(64, 64):pin_memory() end
    local nxt = xs[1]:cuda({non_blocking = true})
    for i = 1, n do
      local cur = nxt
      if i < n then nxt = xs[i + 1]:cuda({non_blocking = true}) end
      local y = cur * 2 + 1
      cur:mul_(3)
      H.same(xs[i] * 2 + 1, y, "step " .. i .. ": read")
      H.same(xs[i] * 3, cur, "step " .. i .. ": written in place")
      assert.equal(xs[i]:sum():item() * 3, cur:sum():item(), "step " .. i .. ": reduced")
    end
  end)

  it("a dropped destination's memory comes back for later copies, not for the compute stream", function()
    local src = (ddp.arange(65536) % 13):float():pin_memory()
    local want = src:sum():item()
    local reserved
    for i = 1, 30 do
      local d = src:cuda({non_blocking = true})
      assert.equal(want, d:sum():item(), "copy " .. i)
      d = nil  -- luacheck: ignore
      collectgarbage()
      collectgarbage()
      local s = ddp.cuda.memory_stats()
      if i == 5 then reserved = s.reserved end
      if i > 5 then assert.equal(reserved, s.reserved, "copy " .. i .. ": no new segment, the block is reused") end
    end
    -- a block the compute stream just released (its kernels may still be
    -- queued) is not handed to a copy, which runs on another stream
    local c = ddp.zeros(65536):cuda()
    local cp = c:data_ptr()
    c = nil  -- luacheck: ignore
    collectgarbage()
    collectgarbage()
    local d = src:cuda({non_blocking = true})
    assert.are_not.equal(cp, d:data_ptr())
    assert.equal(want, d:sum():item())
    -- nor is a copy's block, released, handed to the compute stream
    local dp = d:data_ptr()
    d = nil  -- luacheck: ignore
    collectgarbage()
    collectgarbage()
    local z = ddp.zeros(65536, {device = "cuda"})
    assert.are_not.equal(dp, z:data_ptr())
    assert.equal(0, z:sum():item())
  end)

  it("DataLoader pin_memory = true yields pinned batches", function()
    local ds = ddp.data.TensorDataset(ddp.randn(10, 3), ddp.arange(10))
    local seen = 0
    for _, x, y in ddp.data.DataLoader(ds, {batch_size = 4, pin_memory = true}):iter() do
      assert.is_true(x:is_pinned() and y:is_pinned())
      seen = seen + x:size(0)
    end
    assert.equal(10, seen)
    -- and prefetched to the GPU without waiting, every value arrives
    local X = ddp.randn(50, 3)
    local loader = ddp.data.DataLoader(ddp.data.TensorDataset(X, ddp.arange(50)), {batch_size = 8, pin_memory = true})
    local got = {}
    for _, x, y in loader:iter() do
      local gx, gy = x:cuda({non_blocking = true}), y:cuda({non_blocking = true})
      H.same(X:index_select(0, y), gx, "batch at " .. tostring(y:get(0)))
      got[#got + 1] = gy:cpu()
    end
    H.same(ddp.arange(50), ddp.cat(got, 0):cuda(), "every label once, in order")
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
