-- Trains a small MLP for four epochs and prints, after epochs 2 and 4, the
-- live tensor bytes and the resident set size (run by tests/memory_spec.lua
-- in a fresh process, so earlier tests cannot shape the heap).
local ddp = require "ddp"
local nn = require "ddp.nn"
local optim = require "ddp.optim"
local data = require "ddp.data"
local F = nn.functional

local function rss_bytes()
  local f = assert(io.open("/proc/self/statm"))
  local _, resident = f:read("*n", "*n")
  f:close()
  return resident * 4096
end

ddp.manual_seed(0)
local x = ddp.rand(4096, 784)
local y = ddp.randint(0, 10, { 4096 })
local loader = data.DataLoader(data.TensorDataset(x, y), { batch_size = 64, shuffle = true, seed = 1 })
local model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
local opt = optim.AdamW(model:parameters(), { lr = 1e-3 })
for e = 1, 4 do
  for _, xb, yb in loader:iter() do
    opt:zero_grad()
    F.cross_entropy(model(xb), yb):backward()
    opt:step()
  end
  collectgarbage()
  collectgarbage()
  if e == 2 or e == 4 then print(e, ddp.memory_allocated(), rss_bytes()) end
end
