-- zero_optimizer.lua: what ddp.ZeroRedundancyOptimizer saves and costs on
-- 2 ranks of one thread: the optimizer state each rank keeps and the step
-- time of DDP with AdamW against DDP with AdamW sharded, on train_ddp's MLP
-- (784-1024-1024-10, batch 64 a rank; 1.86M parameters, where AdamW's
-- step is a large share of a ~15 ms step) or train_gpt's GPT (2 blocks,
-- n_embd 176, batch 32 x 64; weight decay on the matrices); twin of
-- zero_optimizer.py (torch.distributed.optim.ZeroRedundancyOptimizer).
--   ddplua --nproc 2 --no-prefix bench/zero_optimizer.lua mlp|gpt
-- Method (as train_ddp.lua): WARMUP steps of each variant, then WINDOWS
-- windows of STEPS steps alternating between the variants, each between
-- barriers and timed on rank 0; the median window gives ms/step.  The
-- state is every rank's optimizer state in bytes (opt:state_nbytes()),
-- the largest rank's printed.  Rank 0 prints "name<TAB>value<TAB>unit";
-- the last line is the largest parameter difference between the variants
-- after the run (0: sharding changes no number).
local ddp = require "ddp"
local nn = require "ddp.nn"
local optim = require "ddp.optim"
local tokens = require "ddp.tokens"
local F = nn.functional

local here = arg[0]:match("^(.*)/") or "."
local now = dofile(here .. "/clock.lua")
local which = arg[1] or "mlp"
assert(which == "mlp" or which == "gpt", "model: mlp or gpt")
local WARMUP, WINDOWS = 5, 5
local STEPS = which == "mlp" and 40 or 10

ddp.set_num_threads(1)
ddp.init()
local rank, world = ddp.rank(), ddp.world_size()

local make, batch, loss_of, groups
if which == "mlp" then
  make = function()
    ddp.manual_seed(0)
    return nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))
  end
  ddp.manual_seed(1000 + rank)
  local pool = {}
  for i = 1, 16 do pool[i] = { ddp.rand(64, 784), ddp.randint(0, 10, { 64 }) } end
  batch = function(k) return pool[k % 16 + 1][1], pool[k % 16 + 1][2] end
  loss_of = function(m, x, y) return F.cross_entropy(m(x), y) end
  groups = function(m) return m:parameters() end
else
  local gpt = dofile(here .. "/../examples/gpt_model.lua")
  gpt.force_explicit = true
  local B, T = 32, 64
  local f = assert(io.open("/usr/share/common-licenses/GPL-3", "rb"))
  local corpus = tokens.bytes(f:read("*a")):long()
  f:close()
  local N = corpus:numel()
  make = function()
    ddp.manual_seed(0)
    return gpt.GPT({ vocab_size = 256, block_size = T, n_layer = 2, n_head = 4, n_embd = 176 })
  end
  batch = function(k)
    local starts = {}
    for b = 0, B - 1 do starts[b + 1] = (((k * world + rank) * B + b) * 67) % (N - T - 1) end
    local idx = ddp.tensor(starts, { dtype = "int64" }):view(B, 1) + ddp.arange(T + 1):view(1, T + 1)
    local w = corpus:index_select(0, idx:view(-1)):view(B, T + 1)
    return w:narrow(1, 0, T):contiguous(), w:narrow(1, 1, T):contiguous()
  end
  loss_of = function(m, x, y) local _, loss = m(x, y) return loss end
  groups = function(m) return gpt.param_groups(m, 0.1) end
end

local runs, order = {}, { "AdamW", "ZeRO AdamW" }
local function add(name, sharded)
  local m = ddp.DDP(make())
  local opt = sharded and ddp.ZeroRedundancyOptimizer(groups(m), optim.AdamW, { lr = 1e-3 })
    or optim.AdamW(groups(m), { lr = 1e-3 })
  runs[name] = { model = m, opt = opt, k = 0, times = {} }
end
add("AdamW", false)
add("ZeRO AdamW", true)

local function steps(r, n)
  for _ = 1, n do
    local x, y = batch(r.k)
    r.k = r.k + 1
    r.opt:zero_grad()
    loss_of(r.model, x, y):backward()
    r.opt:step()
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

local state = {}
for _, name in ipairs(order) do
  local all = ddp.all_gather_object(runs[name].opt:state_nbytes())
  state[name] = math.max(unpack(all))
end
local diff = 0
do
  local a, b = runs["AdamW"].model:state_dict(), runs["ZeRO AdamW"].model:state_dict()
  for k, v in pairs(a) do diff = math.max(diff, (v - b[k]):abs():max():item()) end
end
if rank == 0 then
  local ms = {}
  for _, name in ipairs(order) do
    local r = runs[name]
    table.sort(r.times)
    ms[name] = r.times[math.floor((WINDOWS + 1) / 2)] / STEPS * 1e3
    print(("%s ms/step\t%.3f\tms"):format(name, ms[name]))
    print(("%s state per rank\t%.3f\tMiB"):format(name, state[name] / 2 ^ 20))
  end
  print(("ZeRO/AdamW step time\t%.3f\tx"):format(ms["ZeRO AdamW"] / ms["AdamW"]))
  print(("ZeRO/AdamW state per rank\t%.3f\tx"):format(state["ZeRO AdamW"] / state["AdamW"]))
  print(("parameters differ by\t%g\t(info)"):format(diff))
end
ddp.shutdown()
