-- train_gpt.lua: training throughput of a byte-level GPT (examples/
-- gpt_model.lua: 2 pre-LN blocks, n_embd 176, 4 heads, context 64, batch
-- 32, 849,728 parameters; attention from matmul, masked_fill and softmax;
-- AdamW with weight decay on the matrices, clip_grad_norm 1.0), twin of
-- train_gpt.py.
--   ddplua bench/train_gpt.lua THREADS [STEPS]                 one process
--   ddplua --nproc 2 --no-prefix bench/train_gpt.lua 1 [STEPS]  DDP, 2 ranks x 1 thread
-- STEPS (default 30, or $GPT_STEPS) timed steps after 5 warm-up steps.
-- Data (the same in both twins): the bytes of /usr/share/common-licenses'
-- texts (the list below, concatenated); row b of step k on rank r is the
-- window starting at ((k * W + r) * B + b) * 67 mod (N - T - 1), W the
-- world size.  Method: WARMUP steps, then STEPS steps timed on rank 0 with
-- the monotonic clock (a barrier before and after under DDP).  Prints
-- "name<TAB>value<TAB>unit" lines for bench/run.sh; peak RSS is rank 0's.
local ddp = require "ddp"
local nn = require "ddp.nn"
local optim = require "ddp.optim"
local tokens = require "ddp.tokens"

local here = arg[0]:match("^(.*)/") or "."
local gpt = dofile(here .. "/../examples/gpt_model.lua")
local now = dofile(here .. "/clock.lua")
gpt.force_explicit = os.getenv("GPT_FUSED") == nil  -- the formula, as the twin (torch 1.13 has no SDPA)

local threads = tonumber(arg[1]) or 1
local STEPS, WARMUP = tonumber(arg[2]) or tonumber(os.getenv("GPT_STEPS")) or 30, 5
local B, T = 32, 64
ddp.set_num_threads(threads)
ddp.init({ backend = "cpu" })
local rank, world = ddp.rank(), ddp.world_size()

local parts = {}
for _, n in ipairs { "Apache-2.0", "Artistic", "BSD", "CC0-1.0", "GFDL-1.2", "GFDL-1.3", "GPL-1", "GPL-2", "GPL-3",
                     "LGPL-2", "LGPL-2.1", "LGPL-3", "MPL-1.1", "MPL-2.0" } do
  local f = assert(io.open("/usr/share/common-licenses/" .. n, "rb"))
  parts[#parts + 1] = f:read("*a")
  f:close()
end
local corpus = tokens.bytes(table.concat(parts)):long()
local N = corpus:numel()

local function batch(k)
  local starts = {}
  for b = 0, B - 1 do starts[b + 1] = (((k * world + rank) * B + b) * 67) % (N - T - 1) end
  local idx = ddp.tensor(starts, { dtype = "int64" }):view(B, 1) + ddp.arange(T + 1):view(1, T + 1)
  local w = corpus:index_select(0, idx:view(-1)):view(B, T + 1)
  return w:narrow(1, 0, T):contiguous(), w:narrow(1, 1, T):contiguous()
end

ddp.manual_seed(0)
local model = gpt.GPT({ vocab_size = 256, block_size = T, n_layer = 2, n_head = 4, n_embd = 176 })
if world > 1 then model = ddp.DDP(model) end
local opt = optim.AdamW(gpt.param_groups(model, 0.1), { lr = 1e-3, betas = { 0.9, 0.95 } })

local function step(k)
  local x, y = batch(k)
  opt:zero_grad()
  local _, loss = model(x, y)
  loss:backward()
  nn.utils.clip_grad_norm(model:parameters(), 1.0)
  opt:step()
  return loss
end

local k = 0
for _ = 1, WARMUP do step(k); k = k + 1 end
if world > 1 then ddp.barrier() end
local t0 = now()
local loss
for _ = 1, STEPS do loss = step(k); k = k + 1 end
loss = loss:item()
if world > 1 then ddp.barrier() end
local dt = now() - t0

if rank == 0 then
  print(("steps/s\t%.3f\tsteps/s"):format(STEPS / dt))
  print(("ms/step\t%.1f\tms"):format(dt / STEPS * 1e3))
  print(("tokens/s\t%.0f\ttokens/s"):format(STEPS * world * B * T / dt))
  print(("peak RSS\t%.1f\tMiB"):format(now.peak_rss_mb()))
  print(("parameters\t%d\tn (info)"):format(model:num_parameters()))
  print(("last loss\t%.3f\tnats (info)"):format(loss))
end
ddp.shutdown()
