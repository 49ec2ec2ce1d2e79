-- Training equals PyTorch: the same initial weights (written by PyTorch,
-- tests/golden/make_train.py), the same batches, and PyTorch's losses over
-- 20 SGD and 20 AdamW steps within 1e-4 relative, for an MLP and a CNN.
local ddp = require "ddp"
local nn = require "ddp.nn"
local optim = require "ddp.optim"
local data = require "ddp.data"
local F = nn.functional

local golden = dofile("tests/golden/train_cases.lua")

local MLP = nn.Module:extend("MLP")
function MLP:init()
  self.layers = nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10))
end
function MLP:forward(x) return self.layers(x) end

local CNN = nn.Module:extend("CNN")
function CNN:init()
  self.conv1 = nn.Conv2d(1, 8, 3, { padding = 1 })
  self.conv2 = nn.Conv2d(8, 16, 3, { padding = 1 })
  self.fc = nn.Linear(16 * 7 * 7, 10)
end
function CNN:forward(x)
  x = F.max_pool2d(self.conv1(x:view(-1, 1, 28, 28)):relu(), 2)
  x = F.max_pool2d(self.conv2(x):relu(), 2)
  return self.fc(x:flatten(1))
end

local train = data.fashion_mnist("train")
local n = golden.batch * golden.steps
local all = train:tensors()
local x, y = all[1]:narrow(0, 0, n), all[2]:narrow(0, 0, n)

local function replay(model, opt)
  local losses = {}
  for step = 0, golden.steps - 1 do
    local xb = x:narrow(0, step * golden.batch, golden.batch)
    local yb = y:narrow(0, step * golden.batch, golden.batch)
    opt:zero_grad()
    local loss = F.cross_entropy(model(xb), yb)
    loss:backward()
    opt:step()
    losses[#losses + 1] = loss:item()
  end
  return losses
end

local models = { mlp = MLP, cnn = CNN }
local optimizers = {
  sgd = function(p) return optim.SGD(p, { lr = 0.05, momentum = 0.9, weight_decay = 1e-4 }) end,
  adamw = function(p) return optim.AdamW(p, { lr = 1e-3, weight_decay = 1e-2 }) end,
}

describe("training matches PyTorch 1.13", function()
  for _, mname in ipairs { "mlp", "cnn" } do
    for _, oname in ipairs { "sgd", "adamw" } do
      it(mname .. " with " .. oname .. ", 20 steps", function()
        local model = models[mname]()
        model:load_state_dict((ddp.load("tests/golden/train_" .. mname .. ".safetensors")))
        local losses = replay(model, optimizers[oname](model:parameters()))
        local want = golden[mname .. "_" .. oname]
        local worst = 0
        for i = 1, #want do
          local rel = math.abs(losses[i] - want[i]) / math.abs(want[i])
          worst = math.max(worst, rel)
          assert(rel < 1e-4, ("step %d: loss %.9g, PyTorch %.9g (relative error %.2g)"):format(i, losses[i], want[i], rel))
        end
        if os.getenv("DDPLUA_VERBOSE") then print(mname, oname, "worst relative error", worst) end
      end)
    end
  end
end)
