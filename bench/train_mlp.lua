-- train_mlp.lua: training throughput of the Fashion-MNIST MLP (784-1024-
-- 1024-10, batch 64, AdamW), twin of train_mlp.py.
--   ddplua bench/train_mlp.lua THREADS
local ddp = require "ddp"
local nn = require "ddp.nn"
local optim = require "ddp.optim"
local data = require "ddp.data"
local F = nn.functional

local threads = tonumber(arg[1]) or 1
ddp.set_num_threads(threads)
ddp.manual_seed(0)

local now = dofile((arg[0]:match("^(.*)/") or ".") .. "/clock.lua")


local train = data.fashion_mnist("train")
local loader = data.DataLoader(train, { batch_size = 64, shuffle = true, seed = 0 })
local model = nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))
local opt = optim.AdamW(model:parameters(), { lr = 1e-3 })

local WARMUP, STEPS = 20, 300
local step, t0 = 0, nil
for _, x, y in loader:iter() do
  if step == WARMUP then t0 = now() end
  opt:zero_grad()
  F.cross_entropy(model(x), y):backward()
  opt:step()
  step = step + 1
  if step == WARMUP + STEPS then break end
end
local dt = now() - t0
print(("samples/s\t%.1f\tsamples/s"):format(STEPS * 64 / dt))
print(("peak RSS\t%.1f\tMiB"):format(now.peak_rss_mb()))
