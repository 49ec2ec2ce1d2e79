-- fashion_mnist.lua: train an MLP or a small CNN on Fashion-MNIST with
-- AdamW, as a PyTorch user would write it: argument parsing, dataset,
-- loader, model, optimizer, training loop, evaluation, checkpoint.
--
--   ddplua examples/fashion_mnist.lua [--model mlp|cnn] [--epochs 3]
--          [--batch-size 64] [--lr 1e-3] [--checkpoint PATH] [--resume]
local ddp = require "ddp"
local nn = require "ddp.nn"
local optim = require "ddp.optim"
local data = require "ddp.data"
local F = nn.functional

local args = ddp.argparse({
  model = "mlp", epochs = 3, batch_size = 64, lr = 0, weight_decay = 1e-2,
  checkpoint = "fashion_mnist.ckpt", resume = false, seed = 0, limit = 0,
}, arg, {
  program = "ddplua examples/fashion_mnist.lua",
  help = { model = "mlp or cnn", resume = "continue from --checkpoint", limit = "use only N training images (0: all)",
           lr = "peak learning rate (0: 1e-3 for mlp, 2e-3 for cnn)" },
})
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

ddp.manual_seed(args.seed)
local train = data.fashion_mnist("train")
if args.limit > 0 then
  local x, y = unpack(train:tensors())
  train = data.TensorDataset(x:narrow(0, 0, args.limit), y:narrow(0, 0, args.limit))
end
local test = data.fashion_mnist("test")
local loader = data.DataLoader(train, { batch_size = args.batch_size, shuffle = true, seed = args.seed })
local test_loader = data.DataLoader(test, { batch_size = 1000 })

local model = models[args.model]()
local opt = optim.AdamW(model:parameters(), { lr = args.lr, weight_decay = args.weight_decay })
-- a short linear warm-up, then cosine decay to zero by the last step
local sched = optim.lr_scheduler.CosineWithWarmup(opt, { warmup_steps = 100, total_steps = args.epochs * #loader })
local start_epoch = 1
if args.resume then
  local state = ddp.load_checkpoint(args.checkpoint, { model = model, optimizer = opt, scheduler = sched })
  start_epoch = state.epoch + 1
  loader:set_epoch(state.epoch)
  print(("resumed from %s after epoch %d"):format(args.checkpoint, state.epoch))
end
print(("%s: %d parameters, %d training images, batch %d, %d threads"):format(
  args.model, model:num_parameters(), #train, args.batch_size, ddp.get_num_threads()))

local function evaluate()
  model:eval()
  local correct, total = 0, 0
  ddp.no_grad(function()
    for _, x, y in test_loader:iter() do
      correct = correct + model(x):argmax(1):eq(y):sum():item()
      total = total + y:size(0)
    end
  end)
  model:train()
  return correct / total
end

-- -- Training ----------------------------------------------------------------------

for epoch = start_epoch, args.epochs do
  local t0 = os.clock()
  local loss_sum, batches = 0, 0
  for _, x, y in loader:iter() do
    opt:zero_grad()
    local loss = F.cross_entropy(model(x), y)
    loss:backward()
    opt:step()
    sched:step()
    loss_sum = loss_sum + loss:item()
    batches = batches + 1
  end
  local acc = evaluate()
  print(("epoch %d  loss %.4f  test accuracy %.2f%%  (%.1fs cpu)"):format(
    epoch, loss_sum / batches, 100 * acc, os.clock() - t0))
  ddp.save_checkpoint(args.checkpoint, { model = model, optimizer = opt, scheduler = sched, epoch = epoch })
end
