-- tensor_tour.lua: softmax regression on Fashion-MNIST with hand-written
-- gradients -- a tour of the tensor library (matmul, softmax, one_hot,
-- reductions, indexing) until autograd and DDP land.
--
--   ddplua examples/tensor_tour.lua [--epochs N] [--batch B] [--lr LR] [--limit N]
local ddp = require "ddp"
local ffi = require "ffi"

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

local DIR = os.getenv("FASHION_MNIST_DIR") or "/usr/share/datasets/fashion-mnist"

-- Reads one gzip'd idx file into a uint8 tensor (header skipped).
local function read_idx(name, header, shape)
  local path = DIR .. "/" .. name
  local f = io.open(path, "rb")
  if not f then
    error(("cannot open %s: install the Debian package dataset-fashion-mnist (make deps)"):format(path), 0)
  end
  f:close()
  local p = assert(io.popen("gzip -dc '" .. path .. "'", "r"))
  local bytes = p:read("*a")
  p:close()
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  assert(#bytes == header + n, path .. ": unexpected size")
  local buf = ffi.new("uint8_t[?]", n)
  ffi.copy(buf, ffi.cast("const char *", bytes) + header, n)
  return ddp.from_blob(buf, shape, { dtype = "uint8", owner = buf }):clone()
end

local function load(split, count)
  local x = read_idx(split .. "-images-idx3-ubyte.gz", 16, { count, 784 })
  local y = read_idx(split .. "-labels-idx1-ubyte.gz", 8, { count })
  return x:float() / 255, y:long()
end

local t0 = os.clock()
local xtrain, ytrain = load("train", 60000)
local xtest, ytest = load("t10k", 10000)
if args.limit > 0 then
  xtrain, ytrain = xtrain:narrow(0, 0, args.limit), ytrain:narrow(0, 0, args.limit)
end
print(("loaded %d training and %d test images in %.2fs"):format(
  xtrain:size(0), xtest:size(0), os.clock() - t0))

ddp.manual_seed(0)
local W = ddp.zeros(784, 10)
local b = ddp.zeros(10)

local function accuracy(x, y)
  local pred = (x:matmul(W) + b):argmax(1)
  return pred:eq(y):float():mean():item()
end

for epoch = 1, args.epochs do
  local perm = ddp.randperm(xtrain:size(0))
  local loss_sum, batches = 0, 0
  for start = 0, xtrain:size(0) - 1, args.batch do
    local idx = perm:narrow(0, start, math.min(args.batch, xtrain:size(0) - start))
    local x, y = xtrain:index_select(0, idx), ytrain:index_select(0, idx)
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
