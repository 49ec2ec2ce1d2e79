-- image_folder.lua: train a small ResNet-style CNN on a folder of images,
-- data-parallel, as a PyTorch user would with torchvision: ImageFolder
-- (one subfolder per class), transforms with torchvision's names, a
-- DistributedSampler and a DataLoader whose worker threads decode and
-- augment ahead of the loop.  Any ImageFolder works; to make one from the
-- Fashion-MNIST package already installed:
--
--   ddplua tools/fashion_mnist_folder.lua /tmp/fmnist --split train --limit 6000
--   ddplua tools/fashion_mnist_folder.lua /tmp/fmnist-test --split test --limit 1000
--   ddplua --nproc 2 examples/image_folder.lua --root /tmp/fmnist --test-root /tmp/fmnist-test
--          [--epochs 2] [--batch-size 64 (per rank)] [--workers 2] [--size 28] [--lr 2e-3]
--
-- The progress line shows "data N%", the share of the loop spent waiting
-- for batches: raise --workers while it is more than a few percent (and
-- cores are free).  Rank 0 saves the model each epoch.
local ddp = require "ddp"
local nn = require "ddp.nn"
local optim = require "ddp.optim"
local data = require "ddp.data"
local T = require "ddp.data.transforms"
local F = nn.functional

local args = ddp.argparse({
  root = "", test_root = "", epochs = 2, batch_size = 64, workers = 2, size = 28, lr = 2e-3, seed = 0,
  checkpoint = "image_folder.ckpt", channels = 1,
}, arg, {
  program = "ddplua examples/image_folder.lua",
  help = { root = "the training ImageFolder", test_root = "an ImageFolder to evaluate on (optional)",
           workers = "DataLoader worker threads per rank", size = "the crop the model sees",
           channels = "1 (gray) or 3 (RGB)" },
})
if args.root == "" then
  io.stderr:write("image_folder.lua: --root DIR is needed (an ImageFolder; see the top of this file)\n")
  os.exit(2)
end

-- -- The model: two residual stages ----------------------------------------------

local Block = nn.Module:extend("Block")
function Block:init(cin, cout, stride)
  self.conv1 = nn.Conv2d(cin, cout, 3, { stride = stride, padding = 1, bias = false })
  self.bn1 = nn.BatchNorm2d(cout)
  self.conv2 = nn.Conv2d(cout, cout, 3, { padding = 1, bias = false })
  self.bn2 = nn.BatchNorm2d(cout)
  if stride ~= 1 or cin ~= cout then
    self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, { stride = stride, bias = false }), nn.BatchNorm2d(cout))
  end
end
function Block:forward(x)
  local y = F.relu(self.bn1(self.conv1(x)))
  y = self.bn2(self.conv2(y))
  return F.relu(y + (self.down and self.down(x) or x))
end

local ResNet = nn.Module:extend("ResNet")
function ResNet:init(channels, classes)
  self.stem = nn.Sequential(nn.Conv2d(channels, 16, 3, { padding = 1, bias = false }), nn.BatchNorm2d(16), nn.ReLU())
  self.stages = nn.Sequential(Block(16, 16, 1), Block(16, 32, 2), Block(32, 64, 2))
  self.head = nn.Linear(64, classes)
end
function ResNet:forward(x)
  local h = self.stages(self.stem(x))
  return self.head(h:mean({ 2, 3 }))
end

-- -- Data -------------------------------------------------------------------------

ddp.init()
ddp.manual_seed(args.seed)
local mean, std = {}, {}
for c = 1, args.channels do mean[c], std[c] = 0.5, 0.25 end
local mode = args.channels == 3 and "rgb" or "gray"
local train_tf = T.Compose {
  T.RandomResizedCrop(args.size, { scale = { 0.6, 1 } }),
  T.RandomHorizontalFlip(),
  T.ToDtype("float32", { scale = true }),
  T.Normalize(mean, std),
}
local test_tf = T.Compose { T.Resize(args.size), T.CenterCrop(args.size), T.ToDtype("float32", { scale = true }),
                            T.Normalize(mean, std) }
local train = data.ImageFolder(args.root, { transform = train_tf, mode = mode })
local sampler = data.DistributedSampler(train, { seed = args.seed })
local loader = data.DataLoader(train, { batch_size = args.batch_size, sampler = sampler,
                                        num_workers = args.workers, persistent_workers = args.workers > 0 })
local test_loader
if args.test_root ~= "" then
  local test = data.ImageFolder(args.test_root, { transform = test_tf, mode = mode })
  test_loader = data.DataLoader(test, { batch_size = 256, sampler = data.DistributedSampler(test, { eval = true }),
                                        num_workers = args.workers })
end

local device = ddp.device()
local model = ddp.DDP(ResNet(args.channels, #train.classes):to(device))
local opt = optim.AdamW(model:parameters(), { lr = args.lr, weight_decay = 1e-2 })
local sched = optim.lr_scheduler.CosineWithWarmup(opt, { warmup_steps = math.min(50, #loader),
                                                         total_steps = args.epochs * #loader })
ddp.print(("%d classes, %d images, %d rank(s) x batch %d, %d worker thread(s) a rank, on %s"):format(
  #train.classes, #train, ddp.world_size(), args.batch_size, args.workers, device))

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

-- -- Training ---------------------------------------------------------------------

for epoch = 1, args.epochs do
  local bar = ddp.progress(#sampler, { desc = ("epoch %d/%d"):format(epoch, args.epochs), unit = "images",
                                      loader = loader })
  local loss_sum, batches = 0, 0
  for _, x, y in loader:iter() do
    x, y = x:to(device, { non_blocking = true }), y:to(device, { non_blocking = true })
    opt:zero_grad()
    local loss = F.cross_entropy(model(x), y)
    loss:backward()
    opt:step()
    sched:step()
    local l = loss:item()
    loss_sum, batches = loss_sum + l, batches + 1
    bar:update(y:size(0), { loss = l })
  end
  bar:close()
  local mean_loss = data.reduce_metrics({ loss = loss_sum / batches }).loss / ddp.world_size()
  if test_loader then
    local acc, n = evaluate()
    ddp.print(("epoch %d  loss %.4f  test accuracy %.2f%% (%d images)"):format(epoch, mean_loss, 100 * acc, n))
  else
    ddp.print(("epoch %d  loss %.4f"):format(epoch, mean_loss))
  end
  ddp.save_checkpoint(args.checkpoint, { model = model, optimizer = opt, scheduler = sched, loader = loader,
                                         epoch = epoch }, { all_ranks = true })
end
loader:shutdown_workers()
