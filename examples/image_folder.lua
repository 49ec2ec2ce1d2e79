-- image_folder.lua: train a small ResNet on your own images, data-parallel,
-- as a PyTorch DDP user writes train.py over torchvision's ImageFolder:
-- one subfolder of JPEG or PNG files per class (DIR/cat/001.jpg,
-- DIR/dog/xyz.png, ...), decoded and augmented in loader worker threads
-- (random resized crop, horizontal flip), a distributed sampler, rank-0
-- logging of the loss and accuracy each epoch, and the time the loop
-- waited for its data.  The same script runs alone or on N ranks:
--
--   ddplua tools/fashion_mnist_folder.lua /tmp/fm --limit 2000   (a folder to try it on)
--   ddplua --nproc 2 examples/image_folder.lua --data /tmp/fm
--   ddplua examples/image_folder.lua --data DIR [--val DIR] [--epochs 5]
--          [--batch-size 32 (per rank)] [--lr 5e-3] [--workers 2 (per rank)]
--          [--image-size 28] [--mode gray|rgb] [--save PATH] [--device auto|cpu|cuda:N]
--
-- Accuracy is measured on --val (a folder with the same class folders)
-- when given, else on --data itself (a check that it learns, not a test
-- score), both center-cropped without augmentation.  --save PATH writes a
-- checkpoint after each epoch (model, optimizer, loader, epoch and the
-- class names, in class index order), which ddp.load_checkpoint reads.
local ddp = require "ddp"
local nn = require "ddp.nn"
local optim = require "ddp.optim"
local data = require "ddp.data"
local T = data.transforms
local F = nn.functional

local args = ddp.argparse({
  data = "", val = "", epochs = 5, batch_size = 32, lr = 5e-3, weight_decay = 1e-2, workers = 2,
  image_size = 28, mode = "gray", save = "", seed = 0, device = "auto",
}, arg, {
  program = "ddplua examples/image_folder.lua",
  help = { data = "the training folder: one subfolder of images per class (required)",
           val = "a folder of the same classes to measure accuracy on (default: --data)",
           batch_size = "images per rank and step", workers = "loader worker threads per rank",
           image_size = "the side of the square crops the model sees", mode = "gray or rgb: the channels decoded",
           save = "write a checkpoint here after each epoch",
           device = "auto (this rank's GPU, else cpu), cpu or cuda:N" },
})
local function usage_error(msg)
  io.stderr:write("ddplua examples/image_folder.lua: error: ", msg, "\n")
  os.exit(2)
end
if args.data == "" then usage_error("--data DIR is required: a folder with one subfolder of images per class") end
if args.mode ~= "gray" and args.mode ~= "rgb" then usage_error("--mode must be gray or rgb, got " .. args.mode) end
if args.image_size < 8 or args.image_size ~= math.floor(args.image_size) then
  usage_error(("--image-size must be an integer >= 8, got %s"):format(args.image_size))
end

-- -- Model ----------------------------------------------------------------------

-- conv 3x3 (no bias: the batch norm has one) and batch norm
local function conv_bn(cin, cout, stride)
  return nn.Sequential(nn.Conv2d(cin, cout, 3, { padding = 1, stride = stride, bias = false }), nn.BatchNorm2d(cout))
end

-- ResNet's basic block: two conv-bn, the input added back (through a 1x1
-- conv where the shape changes), then ReLU
local Block = nn.Module:extend("Block")
function Block:init(cin, cout, stride)
  self.conv1, self.conv2 = conv_bn(cin, cout, stride), conv_bn(cout, cout, 1)
  if stride ~= 1 or cin ~= cout then
    self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, { stride = stride, bias = false }), nn.BatchNorm2d(cout))
  end
end
function Block:forward(x)
  local y = self.conv2(F.relu(self.conv1(x)))
  return F.relu(y + (self.shortcut and self.shortcut(x) or x))
end

-- a small ResNet: a conv stem, three stages of one block (16, 32, 64
-- channels; the last two halve the size), global average pooling (any
-- image size), a linear head
local ResNet = nn.Module:extend("ResNet")
function ResNet:init(channels, num_classes)
  self.stem = nn.Sequential(nn.Conv2d(channels, 16, 3, { padding = 1, bias = false }), nn.BatchNorm2d(16), nn.ReLU())
  self.layers = nn.Sequential(Block(16, 16, 1), Block(16, 32, 2), Block(32, 64, 2))
  self.head = nn.Linear(64, num_classes)
end
function ResNet:forward(x) return self.head(self.layers(self.stem(x)):mean({ 2, 3 })) end

-- -- Data, model, optimizer ------------------------------------------------------

local device = args.device == "auto" and ddp.device() or args.device
-- a world of one without the launcher; NCCL where each rank has a GPU,
-- unless the model stays on the CPU (then the CPU transports, unless
-- DDP_BACKEND says otherwise)
ddp.init((device == "cpu" and (os.getenv("DDP_BACKEND") or "") == "") and { backend = "cpu" } or nil)
ddp.manual_seed(args.seed)

local size, channels = args.image_size, args.mode == "rgb" and 3 or 1
local mean, std = {}, {}
for c = 1, channels do mean[c], std[c] = 0.5, 0.5 end
-- torchvision.transforms.v2's names; a sample's random crop and flip come
-- from (seed, epoch, index), the same whichever worker or rank makes it
local train_tf = T.Compose {
  T.RandomResizedCrop(size, { scale = { 0.8, 1 } }), T.RandomHorizontalFlip(),
  T.ToDtype("float32", { scale = true }), T.Normalize(mean, std) }
local eval_tf = T.Compose {
  T.Resize(size), T.CenterCrop(size), T.ToDtype("float32", { scale = true }), T.Normalize(mean, std) }
local train = data.ImageFolder(args.data, { mode = args.mode, transform = train_tf })
local val = data.ImageFolder(args.val ~= "" and args.val or args.data, { mode = args.mode, transform = eval_tf })
if table.concat(val.classes, "\0") ~= table.concat(train.classes, "\0") then
  usage_error(("--val %s has the classes %s, --data %s has %s: they must be the same folders")
              :format(args.val, table.concat(val.classes, ", "), args.data, table.concat(train.classes, ", ")))
end

-- each rank its share, a new order every epoch (no set_epoch to forget)
local sampler = data.DistributedSampler(train, { seed = args.seed })
local loader = data.DataLoader(train, { batch_size = args.batch_size, sampler = sampler,
                                        num_workers = args.workers, persistent_workers = args.workers > 0 })
local val_loader = data.DataLoader(val, { batch_size = 256, sampler = data.DistributedSampler(val, { eval = true }),
                                          num_workers = args.workers })

local model = ddp.DDP(ResNet(channels, #train.classes):to(device))  -- rank 0's weights everywhere
local opt = optim.AdamW(model:parameters(), { lr = args.lr, weight_decay = args.weight_decay })
local sched = optim.lr_scheduler.CosineWithWarmup(opt, {
  warmup_steps = math.min(100, math.floor(args.epochs * #loader / 10)), total_steps = args.epochs * #loader })
ddp.print(("%s: %d images of %d classes, %d rank(s) x batch %d, %d worker(s) each, %dx%d %s crops, %d parameters")
          :format(args.data, #train, #train.classes, ddp.world_size(), args.batch_size, args.workers, size, size,
                  args.mode, model:num_parameters()))

-- loss and accuracy over the whole evaluation folder: each rank its share, then the sums
local function evaluate()
  model:eval()
  local correct, loss_sum, total = 0, 0, 0
  ddp.no_grad(function()
    for _, x, y in val_loader:iter() do
      x, y = x:to(device), y:to(device)
      local logits = model(x)
      loss_sum = loss_sum + F.cross_entropy(logits, y):item() * y:size(0)
      correct = correct + logits:argmax(1):eq(y):sum():item()
      total = total + y:size(0)
    end
  end)
  model:train()
  local m = data.reduce_metrics({ correct = correct, loss = loss_sum, count = total })
  return m.loss / m.count, m.correct / m.count, m.count
end

-- -- Training ----------------------------------------------------------------------

for epoch = 1, args.epochs do
  local bar = ddp.progress(#sampler, { desc = ("epoch %d/%d"):format(epoch, args.epochs), unit = "images",
                                      loader = loader })  -- "data N%": the loop's wait for batches
  local loss_sum, batches = 0, 0
  for _, x, y in loader:iter() do
    x, y = x:to(device), y:to(device)
    opt:zero_grad()
    local loss = F.cross_entropy(model(x), y)
    loss:backward()  -- gradients averaged over the ranks while backward runs
    opt:step()
    sched:step()
    local l = loss:item()
    loss_sum, batches = loss_sum + l, batches + 1
    bar:update(y:size(0), { loss = l })
  end
  bar:close()
  local train_loss = data.reduce_metrics({ loss = loss_sum / batches }).loss / ddp.world_size()
  local val_loss, acc, n = evaluate()
  ddp.print(("epoch %d  train loss %.4f  %s loss %.4f  accuracy %.2f%% (%d images)"):format(
    epoch, train_loss, args.val ~= "" and "val" or "train-folder", val_loss, 100 * acc, n))
  if args.save ~= "" then
    -- every rank calls: rank 0 writes one file, atomically, and all return once it is in place
    ddp.save_checkpoint(args.save, { model = model, optimizer = opt, scheduler = sched, loader = loader,
                                     epoch = epoch, classes = train.classes }, { all_ranks = true })
  end
end

-- the share of the loop spent waiting for batches, over every rank: above
-- a few percent, more --workers (or fewer ranks per core) help
local s = loader:stats()
local w = data.reduce_metrics({ wait = s.wait_s, total = s.total_s })
ddp.print(("data wait: %.1f%% of the training loop (%d worker(s) per rank)")
          :format(w.total > 0 and 100 * w.wait / w.total or 0, args.workers))
if args.save ~= "" then ddp.print("saved " .. args.save) end
