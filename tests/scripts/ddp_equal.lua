-- tests/scripts/ddp_equal.lua: a DDP job that checks itself against one
-- process -- every rank trains a DDP model on its DistributedSampler share
-- and a reference model on every rank's share in one process; it prints
-- "DDPEQ rank R world W kind K allreduce S maxrel X" (X: the largest
-- parameter difference relative to the largest parameter).  Whatever
-- started it (ddplua --nproc, srun, mpirun, env://), the numbers must say
-- world W, all_reduce = W and maxrel ~ 1e-7.
local ddp = require "ddp"
local nn, F, optim, data = ddp.nn, ddp.nn.functional, ddp.optim, ddp.data
ddp.init()
local r, W = ddp.rank(), ddp.world_size()
local ones = ddp.ones(1)
ddp.all_reduce(ones)
local function build()
  return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 5))
end
ddp.manual_seed(100 + r)  -- each rank starts elsewhere: DDP takes rank 0's
local model = build()
ddp.manual_seed(100)
local ref = build()
local dm = ddp.DDP(model)
local opt = optim.SGD(dm:parameters(), { lr = 0.1, momentum = 0.9 })
local ropt = optim.SGD(ref:parameters(), { lr = 0.1, momentum = 0.9 })
local n = 6 * W
ddp.manual_seed(7)
local X, Y = ddp.randn(n, 6), ddp.randint(0, 5, { n })
local all = {}
for q = 0, W - 1 do all[q + 1] = data.DistributedSampler(n, { seed = 5, num_replicas = W, rank = q }):tensor(0) end
local idx = data.DistributedSampler(n, { seed = 5 }):tensor(0)
for s = 0, idx:numel() - 1, 3 do
  opt:zero_grad()
  local mb = idx:narrow(0, s, 3)
  F.cross_entropy(dm(X:index_select(0, mb)), Y:index_select(0, mb)):backward()
  opt:step()
  ropt:zero_grad()
  local loss = 0
  for q = 1, W do
    local m = all[q]:narrow(0, s, 3)
    loss = loss + F.cross_entropy(ref(X:index_select(0, m)), Y:index_select(0, m)) / W
  end
  loss:backward()
  ropt:step()
end
local maxd, maxp = 0, 0
local rp = ref:parameters()
for i, p in ipairs(model:parameters()) do
  maxd = math.max(maxd, (p - rp[i]):abs():max():item())
  maxp = math.max(maxp, rp[i]:abs():max():item())
end
print(("DDPEQ rank %d world %d kind %s allreduce %g maxrel %.3e backend %s"):format(
  r, W, ddp.launch_kind(), ones:item(), maxd / maxp, ddp.backend()))
