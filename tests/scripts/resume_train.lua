-- A small deterministic data-parallel training run for tests/resume_spec.lua:
-- synthetic data, a shuffling DistributedSampler, dropout, AdamW and a
-- StepLR schedule; every step prints this rank's loss in full precision.
-- It can stop after saving a checkpoint (mid-epoch with --stop-at, at an
-- epoch boundary with --stop-after-epoch) and resume from it, so the spec
-- can check that an interrupted run plus its resumed rest give the losses
-- of an uninterrupted one.
--
--   ddplua --nproc 2 tests/scripts/resume_train.lua --steps 20 [--stop-at 9 |
--     --stop-after-epoch 0] [--resume] --checkpoint PATH [--rank-seeds] [--all-ranks] [--zero]
--
-- --rank-seeds seeds each rank differently (seed + rank), so the ranks'
-- dropout streams differ; --all-ranks saves with {all_ranks = true}, which
-- keeps every rank's stream (else rank 0 saves alone, and every rank takes
-- back rank 0's stream); --zero shards AdamW's state over the ranks
-- (ddp.ZeroRedundancyOptimizer; every rank saves its shard).
local ddp = require "ddp"
local nn = require "ddp.nn"
local optim = require "ddp.optim"
local data = require "ddp.data"
local F = nn.functional

local args = ddp.argparse({
  steps = 20, stop_at = 0, stop_after_epoch = -1, resume = false, checkpoint = "resume.ckpt",
  rank_seeds = false, all_ranks = false, batch_size = 4, zero = false,
}, arg)

ddp.init()
-- the same data on every rank, whatever the training seed
ddp.manual_seed(123)
local x, y = ddp.randn(50, 6), ddp.randint(0, 3, { 50 })
ddp.manual_seed(1 + (args.rank_seeds and ddp.rank() or 0))

local train = data.TensorDataset(x, y)
-- 50 samples on 2 ranks: 25 each (7 batches of 4, the last of 1)
local loader = data.DataLoader(train, { batch_size = args.batch_size,
                                        sampler = data.DistributedSampler(train, { seed = 7 }) })
local model = ddp.DDP(nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 3)))
local opt = args.zero and ddp.ZeroRedundancyOptimizer(model:parameters(), optim.AdamW, { lr = 0.05, bucket_cap_mb = 0.0002 })
  or optim.AdamW(model:parameters(), { lr = 0.05 })
local sched = optim.lr_scheduler.StepLR(opt, { step_size = 5, gamma = 0.7 })

local step = 0
if args.resume then
  local state = ddp.load_checkpoint(args.checkpoint, { model = model, optimizer = opt, scheduler = sched, loader = loader })
  step = state.step
end

local function save_and_stop()
  local parts = { model = model, optimizer = opt, scheduler = sched, loader = loader, step = step }
  if args.all_ranks or args.zero then
    ddp.save_checkpoint(args.checkpoint, parts, { all_ranks = true })
  else
    if ddp.is_main() then ddp.save_checkpoint(args.checkpoint, parts) end
    ddp.barrier()
  end
  ddp.log(("stopped after step %d"):format(step))
  os.exit(0)
end

while step < args.steps do
  local epoch = loader:epoch()
  for _, xb, yb in loader:iter() do
    step = step + 1
    opt:zero_grad()
    local loss = F.cross_entropy(model(xb), yb)
    loss:backward()
    opt:step()
    sched:step()
    ddp.log(("step %d epoch %d loss %.17g"):format(step, epoch, loss:item()))
    if step == args.stop_at then save_and_stop() end
    if step == args.steps then break end
  end
  if epoch == args.stop_after_epoch then save_and_stop() end
end
