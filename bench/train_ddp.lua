-- train_ddp.lua: data-parallel training throughput of train_mlp's MLP
-- (784-1024-1024-10, ReLU; AdamW, lr 1e-3; batch 64 a rank) on 2 ranks of
-- one thread, wrapped in ddp.DDP (default buckets: 25 MB, first 1 MB) and,
-- as the baseline, not wrapped ("local": each rank trains its own copy, no
-- gradient exchange); twin of train_ddp.py.
--   ddplua --nproc 2 --no-prefix bench/train_ddp.lua [both|ddp|local]
-- Data (the same in both twins): random images of Fashion-MNIST's shape
-- (uniform in [0, 1)) and labels 0-9, a pool of POOL batches a rank made
-- in memory with seed 1000 + rank and used in turn; no dataset files.
-- Method (the same in both twins): WARMUP steps of each variant, then
-- WINDOWS windows of STEPS steps, the two variants alternating window by
-- window so a noisy neighbour hits both alike.  A window starts and ends
-- with a barrier and is timed on rank 0 with the monotonic clock; the
-- median window of each variant gives ms per step and samples/s over the
-- job (world size x 64 x STEPS / time).  Rank 0 prints
-- "name<TAB>value<TAB>unit" lines for bench/run.sh; lines whose unit ends
-- in "(info)" are not compared.  The reducer lines are dmodel:stats() of
-- the last step: buckets, how many all-reduces started while backward ran
-- (launched_during_backward), and overlap_ms, from the first bucket's
-- all-reduce start to the end of backward.
local ddp = require "ddp"
local nn = require "ddp.nn"
local optim = require "ddp.optim"
local F = nn.functional

local BATCH, POOL, WARMUP, WINDOWS, STEPS = 64, 16, 20, 5, 40
local variant = arg[1] or "both"
assert(variant == "both" or variant == "ddp" or variant == "local", "variant: both, ddp or local")

local now = dofile((arg[0]:match("^(.*)/") or ".") .. "/clock.lua")

ddp.set_num_threads(1)
ddp.init()
local rank, world = ddp.rank(), ddp.world_size()

local function mlp()
  ddp.manual_seed(0)
  return nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))
end

ddp.manual_seed(1000 + rank)
local pool = {}
for i = 1, POOL do pool[i] = { ddp.rand(BATCH, 784), ddp.randint(0, 10, { BATCH }) } end

local runs, order = {}, {}
local function add(name, model)
  runs[name] = { model = model, opt = optim.AdamW(model:parameters(), { lr = 1e-3 }), i = 0, times = {} }
  order[#order + 1] = name
end
if variant ~= "ddp" then add("local", mlp()) end
if variant ~= "local" then add("DDP", ddp.DDP(mlp())) end

local function steps(r, n)
  local model, opt = r.model, r.opt
  for _ = 1, n do
    local b = pool[r.i % POOL + 1]
    r.i = r.i + 1
    opt:zero_grad()
    F.cross_entropy(model(b[1]), b[2]):backward()
    opt:step()
  end
end

for _, name in ipairs(order) do steps(runs[name], WARMUP) end
for w = 1, WINDOWS do
  for _, name in ipairs(order) do
    local r = runs[name]
    ddp.barrier()
    local t0 = now()
    steps(r, STEPS)
    ddp.barrier()
    r.times[w] = now() - t0
  end
end

if rank == 0 then
  local ms = {}
  for _, name in ipairs({ "DDP", "local" }) do
    local r = runs[name]
    if r then
      table.sort(r.times)
      local dt = r.times[math.floor((WINDOWS + 1) / 2)]
      ms[name] = dt / STEPS * 1e3
      print(("%s samples/s\t%.1f\tsamples/s"):format(name, world * BATCH * STEPS / dt))
      print(("%s ms/step\t%.3f\tms"):format(name, ms[name]))
    end
  end
  if ms.DDP and ms["local"] then print(("DDP/local throughput\t%.3f\tx"):format(ms["local"] / ms.DDP)) end
  if runs.DDP then
    local s = runs.DDP.model:stats()
    print(("reducer buckets\t%d\tn (info)"):format(s.buckets))
    print(("launched in backward\t%d\tn (info)"):format(s.launched_during_backward))
    print(("reducer overlap\t%.3f\tms (info)"):format(s.overlap_ms))
  end
end
ddp.shutdown()
