-- tensor_tour.lua: softmax regression on Fashion-MNIST with hand-written
-- gradients -- a tour of the tensor library (matmul, softmax, one_hot,
-- reductions) and of ddp.data (datasets, DataLoader) until autograd lands.
--
--   ddplua examples/tensor_tour.lua [--epochs N] [--batch B] [--lr LR] [--limit N]
local ddp = require "ddp"
local data = require "ddp.data"

local args = { epochs = 3, batch = 128, lr = 0.1, limit = 0 }
do
  local i = 1
  while i <= #arg do
    local k = arg[i]:match("^%-%-(.+)$")
    if not k or args[k] == nil or arg[i + 1] == nil then
      io.stderr:write("usage: ddplua examples/tensor_tour.lua [--epochs N] [--batch B] [--lr LR] [--limit N]\n")
      os.exit(2)
    end
    args[k] = tonumber(arg[i + 1]) or error("--" .. k .. " expects a number")
    i = i + 2
  end
end

-- Fashion-MNIST from the Debian package dataset-fashion-mnist (or
-- $FASHION_MNIST_DIR): float32 images [N, 784] in [0, 1], int64 labels.
local t0 = os.clock()
local train = data.fashion_mnist("train")
local test = data.fashion_mnist("test")
if args.limit > 0 then
  local x, y = unpack(train:tensors())
  train = data.TensorDataset(x:narrow(0, 0, args.limit), y:narrow(0, 0, args.limit))
end
local xtest, ytest = unpack(test:tensors())
print(("loaded %d training and %d test images in %.2fs"):format(#train, #test, os.clock() - t0))

ddp.manual_seed(0)
-- a new order each epoch (the loader advances its epoch after every pass)
local loader = data.DataLoader(train, { batch_size = args.batch, shuffle = true })
local W = ddp.zeros(784, 10)
local b = ddp.zeros(10)

local function accuracy(x, y)
  local pred = (x:matmul(W) + b):argmax(1)
  return pred:eq(y):float():mean():item()
end

for epoch = 1, args.epochs do
  local loss_sum, batches = 0, 0
  for _, x, y in loader:iter() do
    local logp = (x:matmul(W) + b):log_softmax(1)
    local onehot = ddp.one_hot(y, 10):float()
    loss_sum = loss_sum - (logp * onehot):sum(1):mean():item()
    batches = batches + 1
    -- d(loss)/d(logits) = softmax - onehot, averaged over the batch
    local g = (logp:exp() - onehot) / x:size(0)
    W:sub_(x:t():matmul(g), args.lr)
    b:sub_(g:sum(0), args.lr)
  end
  print(("epoch %d  loss %.4f  test accuracy %.2f%%"):format(
    epoch, loss_sum / batches, 100 * accuracy(xtest, ytest)))
end

print("weights of class 0, first 5 pixels:")
print(W:select(1, 0):narrow(0, 0, 5))
