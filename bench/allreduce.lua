-- allreduce.lua: all_reduce (sum, in place) of float32 tensors from 4 KiB to
-- 256 MiB across the ranks of a job, twin of allreduce.py.
--   ddplua --nproc 2 --no-prefix bench/allreduce.lua [SIZE...]
-- SIZEs (say 4KiB) run only those rows: a quick check of one size.
-- Method (the same in both twins): after WARMUP calls and one barrier, a
-- sample is a loop of K back-to-back calls timed on rank 0 and divided by
-- K; the median of SAMPLES samples is the op time.  No barrier inside the
-- timed loop: each call already waits for every rank, and a barrier (a
-- round trip through the TCP store) would cost more than a small call.
-- Bus bandwidth follows nccl-tests: 2 (W - 1) / W * bytes / time.
-- Rank 0 prints "all_reduce SIZE<TAB>value<TAB>unit" lines for bench/run.sh.
local ddp = require "ddp"

local now = dofile((arg[0]:match("^(.*)/") or ".") .. "/clock.lua")

-- bytes, calls per sample, samples: fewer calls for the big sizes
local SIZES = {
  { "4KiB", 4 * 2^10, 200, 15 },
  { "64KiB", 64 * 2^10, 100, 15 },
  { "1MiB", 2^20, 20, 11 },
  { "16MiB", 16 * 2^20, 3, 7 },
  { "64MiB", 64 * 2^20, 1, 7 },
  { "256MiB", 256 * 2^20, 1, 5 },
}
local WARMUP = 5
local only = {}
for _, a in ipairs(arg or {}) do only[a] = true end

ddp.init()
local rank, w = ddp.rank(), ddp.world_size()

local function median(xs)
  table.sort(xs)
  return xs[math.floor((#xs + 1) / 2)]
end

for _, s in ipairs(SIZES) do
  local name, bytes, k, samples = s[1], s[2], s[3], s[4]
  if next(only) and not only[name] then goto continue end
  -- ones: the sums double each call and reach inf after ~128 calls, in
  -- both twins alike (inf + inf stays inf; no NaN, no denormals)
  local t = ddp.ones(bytes / 4)
  for _ = 1, WARMUP do ddp.all_reduce(t) end
  ddp.barrier()
  local times = {}
  for i = 1, samples do
    local t0 = now()
    for _ = 1, k do ddp.all_reduce(t) end
    times[i] = (now() - t0) / k
  end
  local dt = median(times)
  if rank == 0 then
    print(("all_reduce %s time\t%.2f\tus"):format(name, dt * 1e6))
    print(("all_reduce %s busbw\t%.3f\tGB/s"):format(name, 2 * (w - 1) / w * bytes / dt / 1e9))
  end
  t:free()
  ::continue::
end
ddp.shutdown()
