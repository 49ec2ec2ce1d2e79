-- h2d_overlap.lua: host-to-device copies from pinned memory on a GPU (run
-- by tests/gpu/check.sh through build/ddplua): a DataLoader's batches,
-- prefetched with {non_blocking = true} while the previous batch's kernels
-- run, arrive with every value; and a copy issued after a step's kernels
-- overlaps them (it runs on the device's copy stream, not queued behind
-- them on the compute stream).  Prints "h2d overlap: ..." with the times,
-- last "h2d_overlap: N passed, M failed"; a "SKIP:" line with no GPU.
-- Runs on the emulator too (DDPLUA_CUDA_EMU=1: values only, no timing).
local ddp = require "ddp"
local now = dofile((arg[0]:match("^(.*)/tests/gpu/") or ".") .. "/bench/clock.lua")
local tally = dofile((arg[0]:match("^(.*)/") or ".") .. "/tally.lua")("h2d_overlap")
local check, try = tally.check, tally.try
local emulated = (os.getenv("DDPLUA_CUDA_EMU") or "0") ~= "0"

if not ddp.cuda.is_available() then
  print("SKIP: h2d overlap: " .. ddp.cuda.status())
else
  try("prefetched DataLoader batches", function()
    ddp.manual_seed(3)
    local n, d = emulated and 96 or 4096, emulated and 16 or 512
    local X = ddp.randn(n, d)
    local loader = ddp.data.DataLoader(ddp.data.TensorDataset(X, ddp.arange(n)),
                                       { batch_size = emulated and 16 or 256, shuffle = true, seed = 1, pin_memory = true })
    local W = ddp.randn(d, d):cuda()
    local nextb = loader:iter()
    local function fetch()
      local i, x, y = nextb()
      if not i then return nil end
      return x:cuda({ non_blocking = true }), y:cuda({ non_blocking = true }), y
    end
    local gx, gy, y = fetch()
    local seen, bad = 0, 0
    while gx do
      local nx, ny, ncy = fetch()  -- the next batch's copy, issued before this batch's kernels
      local h = gx:matmul(W):relu():matmul(W)  -- this batch's "step"
      gx:mul_(2)                               -- written in place after the copy
      bad = bad + (gx:cpu() - X:index_select(0, y) * 2):abs():max():item()
      bad = bad + (gy:cpu() - y):abs():max():item()
      check(h:isfinite():all(), "step output finite")
      seen = seen + gx:size(0)
      gx, gy, y = nx, ny, ncy
    end
    check(seen == n, "every sample once: " .. seen)
    check(bad == 0, "prefetched batches arrive intact (max difference " .. bad .. ")")
  end)

  if emulated then
    print("h2d overlap: (emulated: no timing)")
  else
    try("a copy overlaps the kernels queued before it", function()
      local W = ddp.randn(4096, 4096):cuda()
      local host = ddp.zeros(64 * 1024 * 1024):add_(1):pin_memory()  -- 256 MiB
      local function kernels()
        local out
        for _ = 1, 12 do out = W:matmul(W) end
        return out
      end
      local function timed(f)
        ddp.cuda.synchronize()
        local t0 = now()
        local r = f()
        ddp.cuda.synchronize()
        return now() - t0, r
      end
      timed(kernels)
      timed(function() return host:cuda({ non_blocking = true }) end)  -- warm: the copy stream, cuBLAS
      local tk = timed(kernels)
      local tc = timed(function() return host:cuda({ non_blocking = true }) end)
      local tb, g = timed(function()
        local k = kernels()
        return { k, host:cuda({ non_blocking = true }) }
      end)
      check(g[2]:sum():item() == 64 * 1024 * 1024, "the overlapped copy's values")
      local ms = function(t) return string.format("%.1f ms", t * 1e3) end
      print(string.format("h2d overlap: kernels %s, copy %s, both %s (one after the other: %s), %.0f%% hidden",
                          ms(tk), ms(tc), ms(tb), ms(tk + tc), 100 * (tk + tc - tb) / math.min(tk, tc)))
      if tk > 0.003 and tc > 0.003 then
        check(tb < 0.85 * (tk + tc), "copy and kernels overlap: both took " .. ms(tb) .. " of " .. ms(tk + tc))
      else
        print("h2d overlap: too short to tell")
      end
    end)
  end
end
os.exit(tally.report() == 0 and 0 or 1)
