-- examples/mlp.lua: a small MLP and its training loop, as a module a
-- project would test -- the specs in examples/spec/ do, with busted under
-- ddplua (docs/testing.md).  The same loop
-- trains one process or a ddp.DDP model on each rank's share of a batch.
local ddp = require "ddp"
local nn, optim = require "ddp.nn", require "ddp.optim"
local F = nn.functional

local M = {}

M.MLP = nn.Module:extend("MLP")
function M.MLP:init(n_in, hidden, n_out)
  self.fc1 = nn.Linear(n_in, hidden)
  self.fc2 = nn.Linear(hidden, n_out)
end
function M.MLP:forward(x)
  return self.fc2(self.fc1(x):relu())
end

-- new([seed]) -> the MLP 4 -> 16 -> 2, its weights drawn from seed (0).
function M.new(seed)
  ddp.manual_seed(seed or 0)
  return M.MLP(4, 16, 2)
end

-- data([n]) -> x [n, 4], y [n, 2]: a fixed regression problem (n = 32),
-- the same wherever it is made.
function M.data(n)
  n = n or 32
  local gen = ddp.get_rng_state()
  ddp.manual_seed(1234)
  local x = ddp.randn(n, 4)
  local y = ddp.cat({ x:narrow(1, 0, 2):sum(1, true), x:narrow(1, 2, 2):prod(1, true) }, 1):tanh()
  ddp.set_rng_state(gen)  -- making data leaves the caller's random numbers alone
  return x, y
end

-- train(model, x, y[, {steps =, batch =, lr =}]) -> model, losses: SGD
-- with momentum over batches of x and y in order.  Under a process group,
-- rank r of W takes rows [r * batch / W, (r + 1) * batch / W) of each
-- batch: with ddp.DDP averaging the gradients, that is one process on the
-- whole batches.
function M.train(model, x, y, opts)
  opts = opts or {}
  local steps, batch, lr = opts.steps or 8, opts.batch or 8, opts.lr or 0.05
  local rank, world = ddp.rank(), ddp.world_size()
  assert(batch % world == 0, "the batch must split evenly over the ranks")
  local share = math.floor(batch / world)
  local opt = optim.SGD(model:parameters(), { lr = lr, momentum = 0.9 })
  local losses = {}
  for step = 0, steps - 1 do
    local first = (step * batch) % x:size(0) + rank * share
    opt:zero_grad()
    local loss = F.mse_loss(model(x:narrow(0, first, share)), y:narrow(0, first, share))
    loss:backward()
    opt:step()
    losses[#losses + 1] = loss:item()
  end
  return model, losses
end

return M
