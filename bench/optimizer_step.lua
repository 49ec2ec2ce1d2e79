-- optimizer_step.lua: what the optimizers' group-at-once step
-- (ddp.optim.foreach, the default) saves against a step per parameter
-- (foreach = false), the optimizer step alone, at one thread, for AdamW
-- (weight decay on the matrices: two groups) and SGD with momentum, over
-- train_gpt's GPT (2 blocks, n_embd 176: 26 tensors, 0.9M parameters)
-- and a deep narrow one (12 blocks, n_embd 64: 150 tensors, 0.65M
-- parameters, where the per-tensor cost shows); twin of optimizer_step.py
-- (torch.optim with foreach=False, foreach=True and, for AdamW,
-- fused=True).
--   ddplua bench/optimizer_step.lua
-- Method: the gradients are set once; WARMUP steps of each variant, then
-- WINDOWS windows of STEPS steps alternating between the variants; the
-- median window gives us/step.  Prints "model optimizer variant<TAB>us".
local ddp = require "ddp"
local optim = require "ddp.optim"

local here = arg[0]:match("^(.*)/") or "."
local now = dofile(here .. "/clock.lua")
local gpt = dofile(here .. "/../examples/gpt_model.lua")
local WARMUP, WINDOWS, STEPS = 20, 7, 50

ddp.set_num_threads(1)

local MODELS = {
  { "gpt", { vocab_size = 256, block_size = 64, n_layer = 2, n_head = 4, n_embd = 176 } },
  { "gpt12", { vocab_size = 256, block_size = 64, n_layer = 12, n_head = 4, n_embd = 64 } },
}
local OPTS = {
  { "AdamW", function(m, foreach) return optim.AdamW(gpt.param_groups(m, 0.1), { lr = 1e-3, foreach = foreach }) end },
  { "SGD", function(m, foreach) return optim.SGD(m:parameters(), { lr = 1e-3, momentum = 0.9, foreach = foreach }) end },
}

for _, mc in ipairs(MODELS) do
  local name, cfg = mc[1], mc[2]
  for _, oc in ipairs(OPTS) do
    local runs, order = {}, { "per-parameter", "foreach" }
    for _, variant in ipairs(order) do
      ddp.manual_seed(0)
      local m = gpt.GPT(cfg)
      ddp.manual_seed(1)
      local n = 0
      for _, p in ipairs(m:parameters()) do
        p.grad = ddp.randn(p:shape()) * 1e-2
        n = n + 1
      end
      runs[variant] = { opt = oc[2](m, variant == "foreach"), times = {}, tensors = n }
    end
    for _, v in ipairs(order) do
      for _ = 1, WARMUP do runs[v].opt:step() end
    end
    for w = 1, WINDOWS do
      for _, v in ipairs(order) do
        local opt = runs[v].opt
        collectgarbage()
        local t0 = now()
        for _ = 1, STEPS do opt:step() end
        runs[v].times[w] = now() - t0
      end
    end
    for _, v in ipairs(order) do
      local t = runs[v].times
      table.sort(t)
      print(("%s %s %s\t%.1f\tus (%d tensors)"):format(name, oc[1], v, t[(WINDOWS + 1) / 2] / STEPS * 1e6, runs[v].tensors))
    end
  end
end
