-- trace_cost.lua: what the trace costs a training step: an MLP through a
-- DataLoader with AdamW, timed over 300 steps after 20, with the trace off,
-- on (module level) or with C ops (ops); twin of trace_cost.py (PyTorch
-- without and with torch.profiler).
--   ddplua bench/trace_cost.lua small|large off|on|ops|alt
-- alt: off and on in alternating blocks of 20 steps within one process.
local ddp = require "ddp"
local nn, data, F = ddp.nn, ddp.data, ddp.nn.functional
local now = dofile((arg[0]:match("^(.*)/") or ".") .. "/clock.lua")
local size, mode = arg[1] or "small", arg[2] or "off"
ddp.set_num_threads(1)
ddp.manual_seed(0)
local d_in, hidden, batch = 64, 256, 32
if size == "large" then d_in, hidden, batch = 784, 1024, 64 end
local x, y = ddp.randn(8192, d_in), ddp.randint(0, 10, { 8192 })
local loader = data.DataLoader(data.TensorDataset(x, y), { batch_size = batch, shuffle = true, seed = 0 })
local model = nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 10))
local opt = ddp.optim.AdamW(model:parameters(), { lr = 1e-3 })
local dir = os.tmpname()
os.remove(dir)
local function step_once(xb, yb)
  opt:zero_grad()
  F.cross_entropy(model(xb), yb):backward()
  opt:step()
end
if mode == "alt" then
  -- blocks of 20 steps, off and on in turn in one process: the machine's
  -- drift from run to run cancels; each block's on steps end with a stop
  -- that writes the file (counted apart: it is the end of a trace)
  local t = { off = 0, on = 0, write = 0 }
  local n = { off = 0, on = 0 }
  local it = loader:iter()
  local function batch()
    local _, xb, yb = it()
    if not xb then it = loader:iter() _, xb, yb = it() end
    return xb, yb
  end
  for _ = 1, 20 do step_once(batch()) end
  for round = 1, 40 do
    for _, m in ipairs(round % 2 == 1 and { "off", "on" } or { "on", "off" }) do
      if m == "on" then ddp.trace.start(dir) end
      local t0 = now()
      for _ = 1, 20 do step_once(batch()) end
      t[m], n[m] = t[m] + now() - t0, n[m] + 20
      if m == "on" then
        local t1 = now()
        os.remove(ddp.trace.stop())
        t.write = t.write + now() - t1
      end
    end
  end
  os.remove(dir)
  print(("trace %s alt off\t%.2f\tus/step"):format(size, t.off / n.off * 1e6))
  print(("trace %s alt on\t%.2f\tus/step"):format(size, t.on / n.on * 1e6))
  print(("trace %s alt writing\t%.2f\tus/step"):format(size, t.write / n.on * 1e6))
  return
end
if mode ~= "off" then ddp.trace.start(dir, { ops = mode == "ops" }) end
local WARMUP, STEPS = 20, 300
local step, t0 = 0, nil
while step < WARMUP + STEPS do
  for _, xb, yb in loader:iter() do
    if step == WARMUP then t0 = now() end
    step_once(xb, yb)
    step = step + 1
    if step == WARMUP + STEPS then break end
  end
end
local dt = now() - t0
if mode ~= "off" then
  local path = ddp.trace.stop()
  os.remove(path)
  os.remove(dir)
end
print(("trace %s %s\t%.1f\tus/step"):format(size, mode, dt / STEPS * 1e6))
