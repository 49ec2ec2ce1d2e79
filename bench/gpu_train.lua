-- gpu_train.lua: training step time on cuda:0 of the Fashion-MNIST MLP
-- (784-1024-1024-10) and CNN of examples/fashion_mnist.lua, AdamW, batch
-- 128 of synthetic data already on the device (the GPU machine has no
-- dataset), and of bench/train_gpt.lua's GPT (batch 32 x 64 random
-- tokens, fused attention), twin of gpu_train.py (PyTorch eager).  Prints
-- one line:
--   RESULT gpu_train impl=ddplua amp=none batch=128 mlp_ms=<ms/step> cnn_ms=<ms/step> gpt_ms=<ms/step>
-- a model whose ops fail says <model>_ms=skip (and why on stderr).
--   ddplua bench/gpu_train.lua [STEPS] [none|bf16]
local ddp = require "ddp"
local nn = require "ddp.nn"
local optim = require "ddp.optim"
local F = nn.functional
local here = arg[0]:match("^(.*)/") or "."
local now = dofile(here .. "/clock.lua")
local gpt = dofile(here .. "/../examples/gpt_model.lua")

local steps, amp = tonumber(arg[1]) or 100, arg[2] or "none"
local B, WARMUP = 128, 10

if not ddp.cuda.is_available() then
  print(("RESULT gpu_train impl=ddplua skip=%q"):format(ddp.cuda.status()))
  os.exit(0)
end

local function mlp()
  return nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))
end
local function cnn()
  return nn.Sequential(
    nn.Conv2d(1, 32, 3, { padding = 1 }), nn.ReLU(), nn.MaxPool2d(2),
    nn.Conv2d(32, 64, 3, { padding = 1 }), nn.ReLU(), nn.MaxPool2d(2),
    nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))
end

local function gpt_model()
  return gpt.GPT({ vocab_size = 256, block_size = 64, n_layer = 2, n_head = 4, n_embd = 176 })
end

-- ms per step (forward, loss, backward, AdamW) after WARMUP steps; shape
-- a float input's (labels 0-9), or "tokens" for the GPT's [32, 64] pairs.
local function step_ms(build, shape)
  ddp.manual_seed(0)
  local model = build():to("cuda:0")
  local opt = optim.AdamW(model:parameters(), { lr = 1e-3 })
  local x, y, loss_of
  if shape == "tokens" then
    x, y = ddp.randint(0, 256, { 32, 64 }):cuda(), ddp.randint(0, 256, { 32, 64 }):cuda()
    loss_of = function() return select(2, model(x, y)) end
  else
    x, y = ddp.rand(shape):cuda(), ddp.randint(0, 10, { B }):cuda()
    loss_of = function() return F.cross_entropy(model(x), y) end
  end
  local function step()
    opt:zero_grad()
    local loss
    if amp == "bf16" then
      loss = ddp.autocast("bf16", loss_of)
    else
      loss = loss_of()
    end
    loss:backward()
    opt:step()
  end
  for _ = 1, WARMUP do step() end
  ddp.cuda.synchronize()
  local t0 = now()
  for _ = 1, steps do step() end
  ddp.cuda.synchronize()
  return (now() - t0) / steps * 1e3
end

local function measure(name, build, shape)
  local ok, v = pcall(step_ms, build, shape)
  if ok then return ("%.3f"):format(v) end
  io.stderr:write(("gpu_train %s: %s\n"):format(name, tostring(v)))
  return "skip"
end

local m = measure("mlp", mlp, { B, 784 })
local c = measure("cnn", cnn, { B, 1, 28, 28 })
local g = measure("gpt", gpt_model, "tokens")
print(("RESULT gpu_train impl=ddplua amp=%s batch=%d mlp_ms=%s cnn_ms=%s gpt_ms=%s"):format(amp, B, m, c, g))
