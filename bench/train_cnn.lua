-- train_cnn.lua: training throughput of the Fashion-MNIST CNN
-- (examples/fashion_mnist.lua's: 2 x (conv 3x3 + ReLU + max-pool 2) +
-- linear 3136-128-10; AdamW, lr 2e-3; batch 64 a rank), twin of
-- train_cnn.py.  One process at THREADS threads, or, under
-- `ddplua --nproc 2`, every rank with one thread and the model in ddp.DDP.
--   ddplua bench/train_cnn.lua THREADS
--   ddplua --nproc 2 --no-prefix bench/train_cnn.lua 1
-- Data (the same in both twins): random images of Fashion-MNIST's shape
-- (uniform in [0, 1)) and labels 0-9, a pool of POOL batches made in
-- memory with seed 1000 + rank and used in turn; no dataset files.
-- WARMUP steps, then STEPS timed steps (between barriers when
-- distributed); rank 0 prints "name<TAB>value<TAB>unit" for bench/run.sh.
local ddp = require "ddp"
local nn = require "ddp.nn"
local optim = require "ddp.optim"
local F = nn.functional

local BATCH, POOL, WARMUP, STEPS = 64, 16, 10, 60
local threads = tonumber(arg[1]) or 1
local now = dofile((arg[0]:match("^(.*)/") or ".") .. "/clock.lua")

ddp.set_num_threads(threads)
ddp.init()
local rank, world = ddp.rank(), ddp.world_size()

ddp.manual_seed(0)
local model = nn.Sequential(
  nn.Conv2d(1, 32, 3, { padding = 1 }), nn.ReLU(), nn.MaxPool2d(2),
  nn.Conv2d(32, 64, 3, { padding = 1 }), nn.ReLU(), nn.MaxPool2d(2),
  nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))
if world > 1 then model = ddp.DDP(model) end
local opt = optim.AdamW(model:parameters(), { lr = 2e-3 })

ddp.manual_seed(1000 + rank)
local pool = {}
for i = 1, POOL do pool[i] = { ddp.rand(BATCH, 1, 28, 28), ddp.randint(0, 10, { BATCH }) } end

local function steps(first, n)
  for s = first, first + n - 1 do
    local b = pool[s % POOL + 1]
    opt:zero_grad()
    F.cross_entropy(model(b[1]), b[2]):backward()
    opt:step()
  end
end

steps(0, WARMUP)
if world > 1 then ddp.barrier() end
local t0 = now()
steps(WARMUP, STEPS)
if world > 1 then ddp.barrier() end
local dt = now() - t0

if rank == 0 then
  print(("samples/s\t%.1f\tsamples/s"):format(world * BATCH * STEPS / dt))
  print(("ms/step\t%.2f\tms"):format(dt / STEPS * 1e3))
  print(("peak RSS (rank 0)\t%.1f\tMiB"):format(now.peak_rss_mb()))
end
