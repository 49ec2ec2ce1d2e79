-- checkpoint_gpt.lua: activation checkpointing on the GPT of train_gpt.lua
-- (examples/gpt_model.lua: 2 pre-LN blocks, n_embd 176, 4 heads, context
-- 64, batch 32; AdamW), each block plain or checkpointed (block:checkpoint()),
-- twin of checkpoint_gpt.py (torch.utils.checkpoint, use_reentrant=False).
--   ddplua bench/checkpoint_gpt.lua plain|ckpt [THREADS] [STEPS]
-- Prints "name<TAB>value<TAB>unit": ms/step over STEPS (default 20) after
-- 3 warm-up steps; the activations the forward keeps for backward
-- (allocated after the forward less before it); the activation peak (the
-- process's allocation peak less what a step leaves: parameters, their
-- gradients, AdamW's state); the last loss (the same in both modes: the
-- recompute gives the plain run's numbers).
local ddp = require "ddp"
local optim = require "ddp.optim"
local tokens = require "ddp.tokens"

local here = arg[0]:match("^(.*)/") or "."
local gpt = dofile(here .. "/../examples/gpt_model.lua")
local now = dofile(here .. "/clock.lua")
gpt.force_explicit = os.getenv("GPT_FUSED") == nil

local mode = arg[1] or "plain"
assert(mode == "plain" or mode == "ckpt", "mode: plain or ckpt")
local threads = tonumber(arg[2]) or 1
local STEPS, WARMUP = tonumber(arg[3]) or 20, 3
local B, T = 32, 64
ddp.set_num_threads(threads)

local f = assert(io.open("/usr/share/common-licenses/GPL-3", "rb"))
local corpus = tokens.bytes(f:read("*a")):long()
f:close()
local N = corpus:numel()
local function batch(k)
  local starts = {}
  for b = 0, B - 1 do starts[b + 1] = ((k * B + b) * 67) % (N - T - 1) end
  local idx = ddp.tensor(starts, { dtype = "int64" }):view(B, 1) + ddp.arange(T + 1):view(1, T + 1)
  local w = corpus:index_select(0, idx:view(-1)):view(B, T + 1)
  return w:narrow(1, 0, T):contiguous(), w:narrow(1, 1, T):contiguous()
end

ddp.manual_seed(0)
local model = gpt.GPT({ vocab_size = 256, block_size = T, n_layer = 2, n_head = 4, n_embd = 176 })
if mode == "ckpt" then for _, block in model.h:iter() do block:checkpoint() end end
local opt = optim.AdamW(gpt.param_groups(model, 0.1), { lr = 1e-3, betas = { 0.9, 0.95 } })

local kept = 0
local function step(k, measure)
  local x, y = batch(k)
  opt:zero_grad()
  local before
  if measure then
    collectgarbage()
    before = ddp.memory_allocated()
  end
  local _, loss = model(x, y)
  if measure then
    collectgarbage()
    kept = ddp.memory_allocated() - before
  end
  loss:backward()
  opt:step()
  return loss
end

local k = 0
for _ = 1, WARMUP do step(k); k = k + 1 end
collectgarbage()
local static = ddp.memory_allocated()  -- parameters, gradients, AdamW's state
local t0 = now()
for _ = 1, STEPS do step(k); k = k + 1 end
local dt = now() - t0
local peak = ddp.max_memory_allocated() - static
local loss = step(k, true)
print(("ms/step\t%.2f\tms"):format(dt / STEPS * 1e3))
print(("activations kept\t%.2f\tMiB"):format(kept / 1048576))
print(("activation peak\t%.2f\tMiB"):format(peak / 1048576))
print(("last loss\t%.6f\tnats"):format(loss:item()))
