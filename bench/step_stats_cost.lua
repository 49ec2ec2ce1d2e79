-- step_stats_cost.lua: what the always-on step breakdown (ddp.core.steps)
-- costs.  `hooks`: the library's calls into it for one step (a batch's
-- data wait, the outermost forward, backward, the optimizer step) with no
-- work between, timed over 10^6 steps; `tiny on|off`: a tiny MLP's
-- training step (8-64-2, batch 16: where the breakdown's share is
-- largest), with the breakdown or with every entry stubbed out before ddp
-- loads (off).
--   ddplua bench/step_stats_cost.lua hooks | tiny on | tiny off
local mode, sw = arg[1] or "hooks", arg[2] or "on"
if mode == "tiny" and sw == "off" then
  local function nop() return 0, 0 end
  package.loaded["ddp.core.steps"] = { mark = nop, forward = nop, backward = nop, data = nop, optimizer = nop,
                                       stats = function() return nil end, flush = nop, PHASES = {} }
end
local ddp = require "ddp"
local now = dofile((arg[0]:match("^(.*)/") or ".") .. "/clock.lua")

if mode == "hooks" then
  local steps = require "ddp.core.steps"
  local opt = {}
  local function step()
    steps.data(0)
    local t, c = steps.mark()
    steps.forward(t, c)
    t, c = steps.mark()
    steps.backward(t, c)
    t, c = steps.mark()
    steps.optimizer(opt, t, c)
  end
  for _ = 1, 10000 do step() end
  local N = 1000000
  local t0 = now()
  for _ = 1, N do step() end
  print(("step breakdown per step\t%.3f\tus"):format((now() - t0) / N * 1e6))
  return
end

local nn, F = ddp.nn, ddp.nn.functional
ddp.set_num_threads(1)
ddp.manual_seed(0)
local model = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 2))
local opt = ddp.optim.SGD(model:parameters(), { lr = 0.01 })
local x, y = ddp.randn(16, 8), ddp.randint(0, 2, { 16 })
local function step()
  opt:zero_grad()
  F.cross_entropy(model(x), y):backward()
  opt:step()
end
for _ = 1, 2000 do step() end
local N = 20000
local t0 = now()
for _ = 1, N do step() end
print(("tiny MLP step %s\t%.3f\tus"):format(sw, (now() - t0) / N * 1e6))
