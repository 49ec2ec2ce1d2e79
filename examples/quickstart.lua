-- examples/quickstart.lua: the README's first script -- a PyTorch DDP
-- training script without the plumbing, on made-up data so it runs in a
-- second: `ddplua examples/quickstart.lua`, `ddplua --nproc 2 examples/quickstart.lua`.
local ddp = require "ddp"
local nn, optim, data = ddp.nn, ddp.optim, ddp.data

local args = ddp.argparse({ epochs = 3, lr = 1e-2, batch_size = 32, save = "" }, arg)
ddp.init()          -- one process alone, the whole job under --nproc: no flag to switch
ddp.manual_seed(0)  -- the same data and first weights on every rank

-- 512 points of two classes; each rank trains on its own share of them
local x = ddp.randn(512, 8)
local y = x:sum(1):gt(0):long()
local sampler = data.DistributedSampler(data.TensorDataset(x, y), { seed = 0 })
local loader = data.DataLoader(data.TensorDataset(x, y), { batch_size = args.batch_size, sampler = sampler })

local model = ddp.DDP(nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 2)))
local opt = optim.AdamW(model:parameters(), { lr = args.lr })

for epoch = 1, args.epochs do     -- the loader moves to the next epoch's order itself
  local total, n = 0, 0
  for _, xb, yb in loader:iter() do
    opt:zero_grad()
    local loss = nn.functional.cross_entropy(model(xb), yb)
    loss:backward()               -- gradients averaged over the ranks
    opt:step()
    total, n = total + loss:item(), n + 1
  end
  local m = data.reduce_metrics({ loss = total, batches = n })  -- summed over the ranks
  ddp.print(("epoch %d: loss %.4f"):format(epoch, m.loss / m.batches))  -- printed once, by rank 0
end
if args.save ~= "" then
  ddp.save_checkpoint(args.save, { model = model, optimizer = opt, loader = loader })  -- written once
end
