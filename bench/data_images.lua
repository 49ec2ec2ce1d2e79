-- data_images.lua: an ImageNet-style input pipeline -- JPEG decode +
-- RandomResizedCrop(224) + RandomHorizontalFlip + ToDtype(float32, scale)
-- + Normalize into float32 batches of 64 -- through data.ImageFolder and
-- the DataLoader with 1 and 2 worker threads, twin of data_images.py, over
-- the very JPEG files it wrote (256 of 500 x 375 at quality 90 in
-- DATA_IMAGES_DIR: `data_images.py --make` first, as bench/run.sh does).
--   ddplua bench/data_images.lua [THREADS]
-- Each row: a warm pass first (persistent workers started, the files in
-- the page cache), then PASSES timed passes.  ImageFolder decodes a JPEG
-- at the size the transform needs (libjpeg's scaled decoding): for
-- RandomResizedCrop(224)'s smallest crops that is the whole 500 x 375
-- image; the "eval" row's Resize(256) + CenterCrop(224) takes 6/8 of it,
-- where torchvision decodes in full.  Peak memory: the process's resident
-- memory (loop and workers are threads of it), sampled at every batch as
-- the twin samples its processes.
local ddp = require "ddp"
local data = require "ddp.data"
local T = data.transforms

local BATCH, PASSES = 64, 2
local root = os.getenv("DATA_IMAGES_DIR") or "/tmp/ddplua-bench-images"
local threads = tonumber(arg[1]) or 1
local now = dofile((arg[0]:match("^(.*)/") or ".") .. "/clock.lua")
ddp.set_num_threads(threads)

local function rss_mb()
  local f = io.open("/proc/self/status")
  if not f then return 0 end
  local kb = f:read("*a"):match("VmRSS:%s*(%d+)")
  f:close()
  return (tonumber(kb) or 0) / 1024
end

local MEAN, STD = { 0.485, 0.456, 0.406 }, { 0.229, 0.224, 0.225 }
local augment = T.Compose { T.RandomResizedCrop(224), T.RandomHorizontalFlip(),
                            T.ToDtype("float32", { scale = true }), T.Normalize(MEAN, STD) }

-- the evaluation pipeline: Resize(256) needs only 256 x 341 of a 500 x
-- 375 JPEG, which libjpeg decodes at 6/8 of its size
local evaluate = T.Compose { T.Resize(256), T.CenterCrop(224), T.ToDtype("float32", { scale = true }),
                             T.Normalize(MEAN, STD) }

local function run(workers, tf)
  local ds = data.ImageFolder(root, { transform = tf })
  local loader = data.DataLoader(ds, { batch_size = BATCH, shuffle = true, num_workers = workers,
                                       persistent_workers = true, prefetch_factor = 2 })
  local peak = 0
  for _ in loader:iter() do peak = math.max(peak, rss_mb()) end  -- warm
  local t0, n = now(), 0
  for _ = 1, PASSES do
    for _, x in loader:iter() do
      n = n + x:size(0)
      peak = math.max(peak, rss_mb())
    end
  end
  local rate = n / (now() - t0)
  loader:shutdown_workers()
  return rate, peak
end

for _, workers in ipairs { 1, 2 } do
  local rate, mem = run(workers, augment)
  print(("images %d worker%s\t%.1f\timages/s"):format(workers, workers == 1 and "" or "s", rate))
  print(("peak memory %d w\t%.0f\tMB (info)"):format(workers, mem))
end
print(("eval images 2 workers\t%.1f\timages/s"):format(run(2, evaluate)))
