-- fashion_mnist.lua: train an MLP or a small CNN on Fashion-MNIST with
-- AdamW, data-parallel, as a PyTorch DDP user would write it: argument
-- parsing, dataset, distributed sampler, model, optimizer, training loop,
-- evaluation over all ranks, rank-0 logging and a checkpoint each epoch
-- that --resume continues from exactly (the loader's place and every
-- rank's random stream go with it).  The same script runs alone or on N
-- ranks, with no flag:
--
--   ddplua examples/fashion_mnist.lua [--model mlp|cnn] [--epochs 3]
--   ddplua --nproc 2 examples/fashion_mnist.lua      (make run)
--   ddplua --nproc auto examples/fashion_mnist.lua   (one rank per GPU)
--          [--batch-size 64 (per rank)] [--lr 1e-3] [--checkpoint PATH] [--resume]
--          [--device auto|cpu|cuda:N] [--amp bf16]
--
-- Each rank trains on its own GPU (cuda:LOCAL_RANK) where CUDA is there,
-- else on the CPU; --device cpu forces the CPU.  --amp bf16 runs the
-- forward pass and the loss under ddp.autocast (matmuls in bfloat16, the
-- loss in float32; parameters, gradients and AdamW stay float32).
local ddp = require "ddp"
local nn = require "ddp.nn"
local optim = require "ddp.optim"
local data = require "ddp.data"
local F = nn.functional

local args = ddp.argparse({
  model = "mlp", epochs = 3, batch_size = 64, lr = 0, weight_decay = 1e-2,
  checkpoint = "fashion_mnist.ckpt", resume = false, seed = 0, limit = 0,
  device = "auto", amp = "none",
}, arg, {
  program = "ddplua examples/fashion_mnist.lua",
  help = { model = "mlp or cnn", resume = "continue from --checkpoint", limit = "use only N training images (0: all)",
           lr = "peak learning rate (0: 1e-3 for mlp, 2e-3 for cnn)",
           device = "auto (this rank's GPU, else cpu), cpu or cuda:N", amp = "none or bf16" },
})
if args.amp ~= "none" and args.amp ~= "bf16" then
  io.stderr:write("unknown --amp " .. args.amp .. " (expected none or bf16)\n")
  os.exit(2)
end
if args.lr == 0 then args.lr = args.model == "cnn" and 2e-3 or 1e-3 end

-- -- Models ----------------------------------------------------------------------

local MLP = nn.Module:extend("MLP")
function MLP:init()
  self.layers = nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                              nn.Linear(1024, 10))
end
function MLP:forward(x) return self.layers(x) end

local CNN = nn.Module:extend("CNN")
function CNN:init()
  self.features = nn.Sequential(
    nn.Conv2d(1, 32, 3, { padding = 1 }), nn.ReLU(), nn.MaxPool2d(2),
    nn.Conv2d(32, 64, 3, { padding = 1 }), nn.ReLU(), nn.MaxPool2d(2))
  self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))
end
function CNN:forward(x) return self.classifier(self.features(x:view(-1, 1, 28, 28))) end

local models = { mlp = MLP, cnn = CNN }
if not models[args.model] then
  io.stderr:write("unknown --model " .. args.model .. " (expected mlp or cnn)\n")
  os.exit(2)
end

-- -- Data, model, optimizer ------------------------------------------------------

local device = args.device == "auto" and ddp.device() or args.device
-- a world of one without the launcher; NCCL where each rank has a GPU,
-- unless the model stays on the CPU (then the CPU transports, unless
-- DDP_BACKEND says otherwise)
ddp.init((device == "cpu" and (os.getenv("DDP_BACKEND") or "") == "") and { backend = "cpu" } or nil)
ddp.manual_seed(args.seed)
local train = data.fashion_mnist("train")
if args.limit > 0 then
  local x, y = unpack(train:tensors())
  train = data.TensorDataset(x:narrow(0, 0, args.limit), y:narrow(0, 0, args.limit))
end
local test = data.fashion_mnist("test")
-- each rank its share, a new order every epoch (no set_epoch to forget)
local sampler = data.DistributedSampler(train, { seed = args.seed })
local loader = data.DataLoader(train, { batch_size = args.batch_size, sampler = sampler })
local test_loader = data.DataLoader(test, { batch_size = 1000, sampler = data.DistributedSampler(test, { eval = true }) })

local model = ddp.DDP(models[args.model]():to(device))  -- rank 0's weights everywhere
local opt = optim.AdamW(model:parameters(), { lr = args.lr, weight_decay = args.weight_decay })
-- a short linear warm-up, then cosine decay to zero by the last step
local total_steps = args.epochs * #loader
local sched = optim.lr_scheduler.CosineWithWarmup(opt, {
  warmup_steps = math.min(100, math.floor(total_steps / 10)), total_steps = total_steps })
local start_epoch = 1
if args.resume then
  -- every rank reads the file into its own memory (CPU tensors: no GPU 0
  -- pile-up) and takes back its own random stream; the loader continues
  -- with the next epoch's order
  local state = ddp.load_checkpoint(args.checkpoint, { model = model, optimizer = opt, scheduler = sched,
                                                       loader = loader })
  start_epoch = state.epoch + 1
  -- a checkpoint of an older ddplua holds no loader: its epoch says where
  if state.loader == nil then loader:set_epoch(state.epoch) end
  ddp.print(("resumed from %s after epoch %d"):format(args.checkpoint, state.epoch))
end
if device == "cpu" then
  ddp.print(("%s: %d parameters, %d training images, %d rank(s) x batch %d, %d thread(s) each"):format(
    args.model, model:num_parameters(), #train, ddp.world_size(), args.batch_size, ddp.get_num_threads()))
else
  ddp.print(("%s: %d parameters, %d training images, %d rank(s) x batch %d on %s (rank 0), backend %s%s"):format(
    args.model, model:num_parameters(), #train, ddp.world_size(), args.batch_size, device, ddp.backend(),
    args.amp == "bf16" and ", bf16 autocast" or ""))
end

-- the loss of one batch, under autocast with --amp bf16
local function batch_loss(x, y)
  if args.amp == "bf16" then
    return ddp.autocast("bf16", function() return F.cross_entropy(model(x), y) end)
  end
  return F.cross_entropy(model(x), y)
end

-- accuracy over the whole test set: each rank counts its share, then the sums
local function evaluate()
  model:eval()
  local correct, total = 0, 0
  ddp.no_grad(function()
    for _, x, y in test_loader:iter() do
      x, y = x:to(device), y:to(device)
      correct = correct + model(x):argmax(1):eq(y):sum():item()
      total = total + y:size(0)
    end
  end)
  model:train()
  local m = data.reduce_metrics({ correct = correct, count = total })
  return m.correct / m.count, m.count
end

-- -- Training ----------------------------------------------------------------------

for epoch = start_epoch, args.epochs do
  local bar = ddp.progress(#sampler, { desc = ("epoch %d/%d"):format(epoch, args.epochs), unit = "samples",
                                      loader = loader })  -- "data N%": the loop's wait for batches
  local loss_sum, batches = 0, 0
  for _, x, y in loader:iter() do
    x, y = x:to(device), y:to(device)
    opt:zero_grad()
    local loss = batch_loss(x, y)
    loss:backward()  -- gradients averaged over the ranks while backward runs
    opt:step()
    sched:step()
    local l = loss:item()
    loss_sum = loss_sum + l
    batches = batches + 1
    bar:update(y:size(0), { loss = l })
  end
  bar:close()
  local acc, n = evaluate()
  local mean_loss = data.reduce_metrics({ loss = loss_sum / batches }).loss / ddp.world_size()
  ddp.print(("epoch %d  loss %.4f  test accuracy %.2f%% (%d images)"):format(epoch, mean_loss, 100 * acc, n))
  -- every rank calls: rank 0 writes one file, atomically, holding each
  -- rank's random stream, and all return once it is in place
  ddp.save_checkpoint(args.checkpoint, { model = model, optimizer = opt, scheduler = sched, loader = loader,
                                         epoch = epoch }, { all_ranks = true })
end
