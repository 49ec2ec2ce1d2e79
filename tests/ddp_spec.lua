-- ddp.DDP (runtime/dist/reducer.c through lua/ddp/nn/parallel.lua), in real jobs of
-- `ddplua --nproc N`: K steps of DDP with per-rank batches from a
-- DistributedSampler give the parameters of one process trained on the
-- union of those batches (to 1e-5 relative), for N = 1..4, SGD and AdamW,
-- an MLP and a CNN, a dataset size N does not divide, buckets of one
-- parameter each, no_sync and grad_accum accumulation, parameters that get
-- no gradient on some ranks or on all, and compressed or Lua-hooked
-- buckets; overlap counters; forwarding, state_dict, buffers and misuse.
local jobs = require "helpers.jobs"
local q, run = jobs.q, jobs.run
local function script(body) return jobs.script(body, "ddp") end

-- Every rank trains its DDP model and, beside it, a one-process reference
-- on the union of all ranks' batches; prints the largest difference
-- relative to the largest parameter.
local TRAIN = [[
local nn, optim, data = ddp.nn, ddp.optim, ddp.data
local F = nn.functional
ddp.init()
local r, W = ddp.rank(), ddp.world_size()
local MODEL, OPT, MODE = os.getenv("T_MODEL"), os.getenv("T_OPT"), os.getenv("T_MODE")

local Heads = nn.Module:extend("Heads")
function Heads:init()
  self.trunk = nn.Linear(6, 12)
  self.a = nn.Linear(12, 5)
  self.b = nn.Linear(12, 5)
  self.never = nn.Linear(12, 5)
end
function Heads:forward(x, head) return self[head](self.trunk(x):tanh()) end

local function build()
  if MODE == "unused" then return Heads() end
  if MODEL == "cnn" then
    return nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(36, 5))
  end
  return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 5))
end
ddp.manual_seed(100 + r)  -- each rank starts elsewhere: DDP takes rank 0's
local model = build()
ddp.manual_seed(100)
local ref = build()

local opts = {}
if MODE == "tiny" then opts = { bucket_cap_mb = 1e-6, first_bucket_mb = 1e-6 } end
if MODE == "accum" then opts = { grad_accum = 2 } end
if MODE == "bf16" or MODE == "fp16" then opts = { comm_hook = MODE } end
if MODE == "custom" then
  opts = { comm_hook = function(b, info)
    assert(info.world_size == W)
    return ddp.all_reduce_async(b, "avg")
  end }
end
local dm = ddp.DDP(model, opts)
local function make_opt(ps)
  if OPT == "adamw" then return optim.AdamW(ps, { lr = 1e-2, weight_decay = 0.1 }) end
  return optim.SGD(ps, { lr = 0.1, momentum = 0.9 })
end
local opt, ropt = make_opt(dm:parameters()), make_opt(ref:parameters())

local n = 7 * W + (W > 1 and 1 or 0)
ddp.manual_seed(7)
local X = MODEL == "cnn" and ddp.randn(n, 1, 8, 8) or ddp.randn(n, 6)
local Y = ddp.randint(0, 5, { n })
local samplers = {}
for q = 0, W - 1 do samplers[q + 1] = data.DistributedSampler(n, { seed = 5, num_replicas = W, rank = q }) end
local mine = data.DistributedSampler(n, { seed = 5 })
local B = 3
local early, unused = 0, 0

local function micro_batches(idx)
  local m = idx:numel()
  if (MODE == "nosync" or MODE == "accum") and m >= 2 then
    local h = math.floor(m / 2)
    return { idx:narrow(0, 0, h), idx:narrow(0, h, m - h) }
  end
  return { idx }
end

for epoch = 0, 1 do
  local all = {}
  for q = 1, W do all[q] = samplers[q]:tensor(epoch) end
  local idx = mine:tensor(epoch)
  assert(idx:equal(all[r + 1]), "the sampler is this rank's")
  local len = idx:numel()
  for s = 0, len - 1, B do
    local k = math.min(B, len - s)
    local head = function(q) return ((s / B + q) % 2 == 0) and "a" or "b" end
    -- DDP on this rank's batch
    opt:zero_grad()
    local mbs = micro_batches(idx:narrow(0, s, k))
    for i, mb in ipairs(mbs) do
      local function step()
        local out = MODE == "unused" and dm(X:index_select(0, mb), head(r)) or dm(X:index_select(0, mb))
        local loss = F.cross_entropy(out, Y:index_select(0, mb)) / #mbs
        loss:backward()
      end
      if MODE == "nosync" and i < #mbs then dm:no_sync(step) else step() end
    end
    opt:step()
    local st = dm:stats()
    early = math.max(early, st.launched_during_backward)
    unused = math.max(unused, st.unused_parameters)
    -- the reference: every rank's batch, one process
    ropt:zero_grad()
    local nm = #mbs
    for i = 1, nm do
      local loss = 0
      for q = 1, W do
        local mb = micro_batches(all[q]:narrow(0, s, k))[i]
        local out = MODE == "unused" and ref(X:index_select(0, mb), head(q - 1)) or ref(X:index_select(0, mb))
        loss = loss + F.cross_entropy(out, Y:index_select(0, mb)) / (nm * W)
      end
      loss:backward()
    end
    ropt:step()
  end
end
local maxd, maxp = 0, 0
local rp = ref:parameters()
for i, p in ipairs(model:parameters()) do
  maxd = math.max(maxd, (p - rp[i]):abs():max():item())
  maxp = math.max(maxp, rp[i]:abs():max():item())
end
if MODE == "unused" then
  assert(model.never.weight.grad == nil and ref.never.weight.grad == nil, "never used: no grad")
end
print(("MAXREL %.3e EARLY %d UNUSED %d BUCKETS %d"):format(maxd / maxp, early, unused, dm:stats().buckets))
]]

local function train(n, model, opt, mode, tol, extra_env)
  local env = ("T_MODEL=%s T_OPT=%s T_MODE=%s %s"):format(model, opt, mode, extra_env or "")
  local out, err, rc = run((n > 1 and "--nproc " .. n .. " " or "") .. q(script(TRAIN)), env, 120)
  assert.equals(0, rc, err .. out)
  local seen, stats = 0, {}
  for rel, early, unused, buckets in out:gmatch("MAXREL (%S+) EARLY (%d+) UNUSED (%d+) BUCKETS (%d+)") do
    seen = seen + 1
    assert.is_true(tonumber(rel) <= tol, ("%s %s %s on %d ranks: off by %s relative\n%s"):format(
      model, opt, mode, n, rel, out))
    stats = { rel = tonumber(rel), early = tonumber(early), unused = tonumber(unused), buckets = tonumber(buckets) }
  end
  assert.equals(n, seen, out .. err)
  return stats
end

describe("ddp.DDP trains as one process would", function()
  after_each(jobs.no_strays)
  teardown(jobs.cleanup)

  for _, n in ipairs { 1, 2, 3, 4 } do
    for _, model in ipairs { "mlp", "cnn" } do
      for _, opt in ipairs { "sgd", "adamw" } do
        if n ~= 1 or (model == "mlp" and opt == "sgd") then
          it(("%s with %s on %d rank(s)"):format(model, opt, n), function()
            train(n, model, opt, "plain", 1e-5)
          end)
        end
      end
    end
  end

  it("with one bucket per parameter, and starts buckets during backward", function()
    local st = train(2, "mlp", "sgd", "tiny", 1e-5)
    assert.equals(6, st.buckets)
    assert.is_true(st.early >= 1, "no bucket started before backward ended")
  end)

  it("accumulating with no_sync", function() train(2, "mlp", "adamw", "nosync", 1e-5) end)
  it("accumulating with grad_accum = 2", function() train(3, "mlp", "sgd", "accum", 1e-5) end)

  for _, opt in ipairs { "sgd", "adamw" } do
    it("when some parameters get no gradient on some ranks or on all (" .. opt .. ")", function()
      local st = train(2, "mlp", opt, "unused", 1e-5)
      assert.equals(2, st.unused)  -- never.weight and never.bias
    end)
  end
  it("when one rank uses a head the other does not, alone", function()
    local st = train(1, "mlp", "adamw", "unused", 1e-5)
    assert.equals(4, st.unused)  -- the idle head and never
  end)

  for _, c in ipairs { { "bf16", 2e-2 }, { "fp16", 2e-3 } } do
    it("with " .. c[1] .. " buckets, close", function()
      local st = train(2, "mlp", "sgd", c[1], c[2])
      assert.is_true(st.rel > 0, c[1] .. " rounding should show")
    end)
  end
  it("with a Lua comm hook", function() train(2, "cnn", "sgd", "custom", 1e-5) end)

  for _, b in ipairs { "gloo", "hier" } do
    it("over the " .. b .. " backend", function()
      train(3, "mlp", "adamw", "unused", 1e-5, "DDP_BACKEND=" .. b)
    end)
  end
end)

describe("ddp.DDP wrapper", function()
  after_each(jobs.no_strays)
  teardown(jobs.cleanup)

  it("forwards methods and fields, saves like the model, syncs buffers from rank 0", function()
    local s = script([[
local nn = ddp.nn
local Net = nn.Module:extend("Net")
function Net:init()
  self.fc = nn.Linear(4, 3)
  self.bn = nn.BatchNorm1d(3)
  self.tag = "net"
end
function Net:forward(x) return self.bn(self.fc(x)) end
function Net:generate(x) return self(x):argmax(1) end
function Net:double_tag(k) return self.tag .. k end
ddp.manual_seed(ddp.rank())
local model = Net()
local dm = ddp.DDP(model)
assert(dm.module == model and dm.tag == "net" and dm:double_tag("!") == "net!")
assert(dm.fc == model.fc)
local sd, msd = dm:state_dict(), model:state_dict()
local keys = {}
for k in pairs(sd) do keys[#keys + 1] = k assert(msd[k], k) end
table.sort(keys)
assert(table.concat(keys, ",") == "bn.bias,bn.num_batches_tracked,bn.running_mean,bn.running_var,bn.weight,fc.bias,fc.weight", table.concat(keys, ","))
-- parameters came from rank 0
local w = ddp.all_gather(model.fc.weight:detach():reshape(1, -1))
assert(w:narrow(0, 0, 1):equal(w:narrow(0, 1, 1)), "same weights")
-- a training forward takes rank 0's buffers first
model.bn.running_mean:fill_(ddp.rank() + 5)
ddp.manual_seed(0)  -- the same batch everywhere: the same running stats if synced first
local x = ddp.randn(6, 4)
dm(x):sum():backward()
local rm = ddp.all_gather(model.bn.running_mean:reshape(1, -1))
assert(rm:narrow(0, 0, 1):equal(rm:narrow(0, 1, 1)), "buffers synced")
assert(dm:generate(x):numel() == 6)
dm.extra = 7
assert(model.extra == 7)
print("OK " .. tostring(dm):sub(1, 4))
]])
    local out, err, rc = run("--nproc 2 " .. q(s))
    assert.equals(0, rc, err)
    assert.equals(2, select(2, out:gsub("OK DDP%(", "")), out)
  end)

  it("keeps buckets in shared memory and all-reduces them where they lie", function()
    local s = script([[
local nn = ddp.nn
ddp.manual_seed(0)
local lin1 = nn.Linear(50, 40)
local model = nn.Sequential(lin1, nn.Linear(40, 3))
local dm = ddp.DDP(model)
local maps = 0
for line in io.lines("/proc/self/maps") do
  -- /dev/shm/ddplua-<job id>-<launch id>-<n>: the buckets' arenas are
  -- n = 500...; the ids are hex, and may hold "-5dd" themselves
  local n = tonumber(line:match("/dev/shm/ddplua%-[^/]*%-(%d+)%s") or line:match("/dev/shm/ddplua%-[^/]*%-(%d+)$"))
  if n and n >= 500 and n < 600 then maps = maps + 1 end
end
local r, w = ddp.rank(), ddp.world_size()
dm(ddp.ones(4, 50) * (r + 1)):sum():backward()
-- every rank's gradient is the average: the same everywhere
local g = ddp.all_gather(lin1.weight.grad:reshape(1, -1))
assert(g:narrow(0, 0, 1):equal(g:narrow(0, w - 1, 1)), "averaged")
-- a collective on a view into a shared bucket (at an offset) is right too
local gw = lin1.bias.grad
local before = gw:clone()
ddp.all_reduce(gw, "sum")
assert((gw - before * w):abs():max():item() < 1e-5, "sum of a shared view")
print(("MAPS %d"):format(maps))
]])
    local out, err, rc = run("--nproc 3 " .. q(s))
    assert.equals(0, rc, err)
    assert.equals(3, select(2, out:gsub("MAPS [1-9]", "")), out)
    out, err, rc = run("--nproc 3 " .. q(s), "DDP_SHM_ZERO_COPY=0")
    assert.equals(0, rc, err)
    assert.equals(3, select(2, out:gsub("MAPS 0", "")), out)
  end)

  it("takes tied weights once", function()
    local s = script([[
local nn = ddp.nn
local shared = nn.Linear(4, 4)
local Tied = nn.Module:extend("Tied")
function Tied:init() self.a = shared self.out = nn.Linear(4, 4) self.out.weight = shared.weight end
function Tied:forward(x) return self.out(self.a(x):tanh()) end
ddp.manual_seed(ddp.rank())
local dm = ddp.DDP(Tied())
for _ = 1, 2 do dm(ddp.randn(3, 4)):sum():backward() end
local g = ddp.all_gather(shared.weight.grad:reshape(1, -1))
assert(g:narrow(0, 0, 1):equal(g:narrow(0, 1, 1)), "averaged")
print("OK " .. #dm:parameters())
]])
    local out, err, rc = run("--nproc 2 " .. q(s))
    assert.equals(0, rc, err)
    assert.equals(2, select(2, out:gsub("OK 3", "")), out)
  end)

  it("reduces parameters of several dtypes in buckets of their own", function()
    local s = script([[
local nn = ddp.nn
local a, b = nn.Linear(5, 4):double(), nn.Linear(4, 3)
local M = nn.Module:extend("Mixed")
function M:init() self.a, self.b = a, b end
function M:forward(x) return self.b(self.a(x):float()) end
local dm = ddp.DDP(M())
ddp.manual_seed(ddp.rank())
dm(ddp.randn(6, 5, { dtype = "float64" })):sum():backward()
assert(#dm:buckets() == 2, "one bucket a dtype")
for _, p in ipairs { a.weight, b.weight } do
  local g = ddp.all_gather(p.grad:reshape(1, -1))
  assert(g:narrow(0, 0, 1):equal(g:narrow(0, 1, 1)), "averaged " .. p.grad:dtype())
end
print("OK")
]])
    local out, err, rc = run("--nproc 2 " .. q(s))
    assert.equals(0, rc, err)
    assert.equals(2, select(2, out:gsub("OK", "")), out)
  end)

  it("fails the backward clearly within seconds when another rank exits", function()
    local s = script([[
local nn = ddp.nn
local dm = ddp.DDP(nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 2)))
for step = 1, 3 do dm(ddp.ones(2, 8)):sum():backward() end
if ddp.rank() == 1 then os.exit(0) end
local t0 = os.time()
local ok, err = pcall(function() dm(ddp.ones(2, 8)):sum():backward() end)
io.stderr:write("RESULT ", tostring(err), "\n")
assert(not ok and os.time() - t0 < 10)
]])
    local _, err, rc = run("--nproc 2 " .. q(s))
    assert.equals(0, rc, err)
    assert.truthy(err:find("RESULT .-all_reduce #%d+: rank 1 %(pid %d+%) has exited"), err)
  end)

  it("an error in a layer names its path in the model, with no module. prefix", function()
    local s = script([[
local nn = ddp.nn
local Net = nn.Module:extend("Net")
function Net:init() self.fc1 = nn.Linear(4, 4) self.fc2 = nn.Linear(3, 2) end
function Net:forward(x) return self.fc2(self.fc1(x):relu()) end
local dm = ddp.DDP(Net())
local ok, e = pcall(function()
  local y = dm(ddp.ones(2, 4))  -- LINE
  return y
end)
assert(not ok)
print("ERR " .. e)
]])
    local out, err, rc = run("--nproc 2 " .. q(s))
    assert.equals(0, rc, err)
    local line
    local n = 0
    for l in io.lines(s) do
      n = n + 1
      if l:find("-- LINE", 1, true) then line = n end
    end
    local want = ("ERR %s:%d: fc2 (Linear(in_features=3, out_features=2, bias=True)): linear: shapes [2, 4] and [2, 3] cannot be multiplied (4 vs 3)"):format(s, line)
    assert.equals(2, select(2, out:gsub(want:gsub("%p", "%%%0"), "")), out)
    assert.falsy(out:find("module.", 1, true), out)
  end)

  it("refuses misuse with clear errors", function()
    local s = script([[
local nn = ddp.nn
local model = nn.Linear(3, 2)
local dm = ddp.DDP(model)
local function err_of(f, ...)
  local ok, e = pcall(f, ...)
  assert(not ok, "expected an error")
  return tostring(e)
end
local e = err_of(ddp.DDP, dm)
assert(e:find("already wrapped by ddp.DDP; wrap the plain model once", 1, true), e)
e = err_of(ddp.DDP, model)
assert(e:find("already wrapped by ddp.DDP; use that wrapper", 1, true), e)
e = err_of(ddp.DDP, nn.Linear(2, 2), { bucket_cap = 3 })
assert(e:find('unknown option "bucket_cap"', 1, true), e)
e = err_of(ddp.DDP, {})
assert(e:find("expected an nn.Module", 1, true), e)
e = err_of(ddp.DDP, nn.ReLU())
assert(e:find("no parameter that requires grad", 1, true), e)
e = err_of(ddp.DDP, nn.Linear(2, 2), { comm_hook = "int8" })
assert(e:find('comm_hook must be "bf16", "fp16" or a function', 1, true), e)
local loss = dm(ddp.ones(2, 3)):sum()
loss:backward()
e = err_of(function() loss:backward() end)
assert(e:find("backward", 1, true) and e:find("retain_graph", 1, true), e)
-- after shutdown the wrapper says so; a pending graph still runs locally
local pending = dm(ddp.ones(2, 3)):sum()
ddp.shutdown()
e = err_of(function() return dm(ddp.ones(2, 3)) end)
assert(e:find("the process group was shut down", 1, true), e)
pending:backward()
assert(model.weight.grad ~= nil)
print("OK")
]])
    local out, err, rc = run(q(s))
    assert.equals(0, rc, err)
    assert.truthy(out:find("OK", 1, true), out)
  end)

  it("names the ranks whose model differs from rank 0's", function()
    local s = script([[
local nn = ddp.nn
local width = ddp.rank() == 2 and 5 or 4
local model = nn.Sequential(nn.Linear(3, width), nn.Linear(width, 2))
if ddp.rank() == 1 then model = nn.Sequential(nn.Linear(3, 4)) end
local ok, e = pcall(ddp.DDP, model)
io.stderr:write("RESULT ", tostring(e), "\n")
]])
    local _, err = run("--nproc 3 " .. q(s))
    assert.truthy(err:find("the ranks' models differ from rank 0's: rank 1: 1.weight is missing; 1.bias is missing "
      .. "| rank 2: 0.weight has shape [5, 3] (rank 0: [4, 3]); 0.bias has shape [5] (rank 0: [4]); "
      .. "1.weight has shape [2, 5] (rank 0: [2, 4])", 1, true), err)
  end)
end)

describe("ddp.progress", function()
  teardown(jobs.cleanup)
  local s = script([[
local bar = ddp.progress(10, { desc = "ep", unit = "samples", every = 0 })
for i = 1, 10 do bar:update(1, { loss = 1 / i }) sleep(0.12) end
bar:close()
bar:close()
]])
  it("redraws one line on a terminal", function()
    local out, err, rc = run(q(s), "DDP_TTY=1")
    assert.equals(0, rc, err)
    assert.truthy(out:find("^ep   10%% |##  +|  1/10 samples  %- samples/s  loss 1  ETA [%d:]+\27%[K\r"), out)
    assert.truthy(out:find("\rep  100%% |########################|  10/10 samples  %d+ samples/s  loss 0.1  in 0:0%d\27%[K\n$"), out)
    assert.equals(0, select(2, out:gsub("\n", "")) - 1)
  end)
  it("prints plain lines elsewhere", function()
    local out, err, rc = run(q(s), "DDP_TTY=0")
    assert.equals(0, rc, err)
    assert.falsy(out:find("\r", 1, true))
    assert.truthy(out:find("ep  100%  10/10 samples", 1, true), out)
    assert.is_true(select(2, out:gsub("\n", "")) >= 5, out)
  end)
end)

describe("examples/fashion_mnist.lua", function()
  after_each(jobs.no_strays)
  teardown(jobs.cleanup)
  local ckpt = os.tmpname()

  it("trains on 2 ranks: rank 0 reports and saves once, reduced accuracy, --resume", function()
    local args = "examples/fashion_mnist.lua --limit 3000 --epochs 2 --batch-size 50 --checkpoint " .. q(ckpt)
    local out, err, rc = run("--nproc 2 " .. args, nil, 120)
    assert.equals(0, rc, err .. out)
    -- progress as plain lines (not a terminal), from rank 0 only
    assert.truthy(out:find("[0] epoch 1/2  100%  3000/3000 samples", 1, true), out)
    assert.falsy(out:find("[1] epoch", 1, true), out)
    assert.falsy(out:find("\r", 1, true))
    local accs = {}
    for e, a, n in out:gmatch("%[0%] epoch (%d)  loss [%d.]+  test accuracy ([%d.]+)%% %((%d+) images%)") do
      accs[#accs + 1] = tonumber(a)
      assert.equals("10000", n)
    end
    assert.equals(2, #accs, out)
    assert.is_true(accs[2] > 60, out)
    assert.is_truthy(io.open(ckpt)):close()
    out, err, rc = run("--nproc 2 " .. args:gsub("--epochs 2", "--epochs 3") .. " --resume", nil, 120)
    assert.equals(0, rc, err .. out)
    assert.truthy(out:find("[0] resumed from " .. ckpt .. " after epoch 2", 1, true), out)
    assert.truthy(out:find("[0] epoch 3  loss", 1, true), out)
    assert.falsy(out:find("epoch 1  loss", 1, true), out)
    os.remove(ckpt)
  end)

  it("runs the same script in one process", function()
    local out, err, rc = run("examples/fashion_mnist.lua --limit 1000 --epochs 1 --checkpoint " .. q(ckpt), nil, 120)
    assert.equals(0, rc, err .. out)
    assert.truthy(out:find("1 rank(s) x batch 64", 1, true), out)
    assert.truthy(out:find("epoch 1  loss [%d.]+  test accuracy [%d.]+%% %(10000 images%)"), out)
    os.remove(ckpt)
  end)
end)
