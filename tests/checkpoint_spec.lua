-- tests/checkpoint_spec.lua: activation checkpointing -- ddp.checkpoint(fn,
-- ...) and module:checkpoint() give the gradients of the plain run (with
-- dropout: the recompute draws the same mask; under autocast; several
-- results; nested; a captured tensor; a parameter used inside and out;
-- a branch not taken), leave the random stream where the plain run
-- leaves it, keep less memory, refuse a result that escaped and a
-- function that computes something else the second time, match finite
-- differences, and under ddp.DDP on 2 ranks equal one process.
local ddp = require "ddp"
local jobs = require "helpers.jobs"
local nn, F = ddp.nn, ddp.nn.functional
local q = jobs.q

local function has(s, text) assert.truthy(s:find(text, 1, true), "no «" .. text .. "» in:\n" .. s) end

-- the largest difference between two lists of tensors (nil grads match nil)
local function maxdiff(a, b, what)
  local d = 0
  assert.equals(#a, #b, what)
  for i = 1, #a do
    if a[i] == nil or b[i] == nil then
      assert.equals(a[i] == nil, b[i] == nil, what .. ": gradient " .. i .. " nil on one side only")
    else
      d = math.max(d, (a[i] - b[i]):abs():max():item())
    end
  end
  return d
end

local function grads(params)
  local out = {}
  for i, p in ipairs(params) do out[i] = p.grad and p.grad:clone() or false end
  for i = 1, #out do if out[i] == false then out[i] = nil end end
  return out
end

-- a residual block with dropout, float64
local Block = nn.Module:extend("Block")
function Block:init(d)
  self.fc1 = nn.Linear(d, 2 * d)
  self.fc2 = nn.Linear(2 * d, d)
  self.drop = nn.Dropout(0.3)
end
function Block:forward(x)
  return x + self.fc2(self.drop(F.gelu(self.fc1(x))))
end

local function model(seed, d, n)
  ddp.manual_seed(seed)
  local blocks = {}
  for i = 1, n do blocks[i] = Block(d) end
  local net = nn.Sequential(unpack(blocks))
  net:to("float64")
  return net, blocks
end

-- one forward and backward from the same seeds; the gradients of the
-- parameters and of the input, and a draw from the stream afterwards
local function run(setup, x0)
  local net, blocks = model(1, 8, 3)
  setup(net, blocks)
  local x = x0:clone():requires_grad_()
  ddp.manual_seed(7)
  local y = net(x)
  y:square():mean():backward()
  local g = grads(net:parameters())
  g[#g + 1] = x.grad:clone()
  return g, ddp.randn(3):tolist()
end

describe("activation checkpointing", function()
  local x0
  setup(function()
    ddp.manual_seed(3)
    x0 = ddp.randn(16, 8, { dtype = "float64" })
  end)

  it("module:checkpoint() gives the plain run's gradients, dropout included, and the same random stream after", function()
    local plain, after0 = run(function() end, x0)
    local ck, after1 = run(function(_, blocks) for _, b in ipairs(blocks) do b:checkpoint() end end, x0)
    assert.truthy(maxdiff(plain, ck, "checkpointed blocks") < 1e-12)
    assert.same(after0, after1)
    -- a dropout of another mask would differ: the recompute drew the first one's
    local other = run(function(_, blocks)
      blocks[2]:checkpoint()
      local f = blocks[2].forward
      blocks[2].forward = function(self, x) ddp.randn(1); return f(self, x) end
    end, x0)
    assert.truthy(maxdiff(plain, other, "a shifted stream") > 1e-3)
  end)

  it("ddp.checkpoint(fn, ...) with several results, nested, over a captured tensor and a shared weight", function()
    ddp.manual_seed(5)
    local w = ddp.randn(8, 8, { dtype = "float64" }):requires_grad_()
    local b = ddp.randn(8, { dtype = "float64" }):requires_grad_()
    local unused = ddp.randn(8, { dtype = "float64" }):requires_grad_()
    local function loss_of(ck)
      local x = x0:clone():requires_grad_()
      local scale = (b * 2):tanh()  -- made outside, captured inside
      local function inner(h) return (h:matmul(w) * scale):sin() end
      local function fn(h, flag)
        local a = ck(inner, h)
        if flag then a = a + unused end  -- a branch not taken
        return a:matmul(w:t()), a:sum(1)
      end
      local y, s = ck(fn, x, false)
      local l = y:square():mean() + s:mean() + (w * w):sum() * 0.01  -- w inside and out
      l:backward()
      return { w.grad:clone(), b.grad:clone(), x.grad:clone() }, unused.grad
    end
    local function reset() for _, t in ipairs({ w, b, unused }) do t.grad = nil end end
    local plain = loss_of(function(f, ...) return f(...) end)
    reset()
    local ck, ug = loss_of(ddp.checkpoint)
    reset()
    assert.truthy(maxdiff(plain, ck, "ddp.checkpoint") < 1e-12)
    assert.is_nil(ug)
  end)

  it("runs plainly under no_grad and under autocast equals the plain autocast run", function()
    local net = model(1, 8, 2)
    local y0 = ddp.no_grad(function() return ddp.checkpoint(net, x0) end)
    assert.falsy(y0.requires_grad)
    local function step(ck)
      local m = model(1, 8, 2):to("float32")
      if ck then for _, blk in ipairs(m:children()) do blk:checkpoint() end end
      m:eval()  -- no dropout: bf16 rounding then is the only difference, and it is the same both times
      ddp.autocast("bf16", function() m(x0:float()):float():square():mean():backward() end)
      return grads(m:parameters())
    end
    assert.truthy(maxdiff(step(false), step(true), "autocast") == 0)
  end)

  it("matches finite differences", function()
    ddp.manual_seed(2)
    local w = ddp.randn(4, 4, { dtype = "float64" }):requires_grad_()
    local x = ddp.randn(3, 4, { dtype = "float64" }):requires_grad_()
    assert.truthy(ddp.autograd.gradcheck(function(a, b)
      return ddp.checkpoint(function(p, q) return (p:matmul(q)):tanh():matmul(q) end, a, b)
    end, { x, w }))
  end)

  it("keeps less memory: a forward of checkpointed blocks holds their inputs only", function()
    local function held(ck)
      local out = jobs.sh(q(jobs.ddplua) .. " -e " .. q(([[
local ddp = require "ddp"
local nn = ddp.nn
ddp.manual_seed(0)
local blocks = {}
for i = 1, 6 do blocks[i] = nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 256)) end
if %s then for _, b in ipairs(blocks) do b:checkpoint() end end
local net = nn.Sequential(unpack(blocks))
local x = ddp.randn(512, 256)
collectgarbage() collectgarbage()
local base = ddp.memory_allocated()
local y = net(x)
collectgarbage() collectgarbage()
local kept = ddp.memory_allocated() - base
y:sum():backward()
io.write(kept, " ", ddp.max_memory_allocated())
]]):format(tostring(ck))) .. " 2>&1")
      local kept, peak = out:match("^(%d+) (%d+)$")
      assert(kept, out)
      return tonumber(kept), tonumber(peak)
    end
    local k0, p0 = held(false)
    local k1, p1 = held(true)
    -- plain: each block keeps its two 512 x 1024 activations (4 MiB of float32 in all, ~12 MiB for 6);
    -- checkpointed: the outputs of the blocks only (512 x 256 each)
    assert.truthy(k1 < 0.2 * k0, ("kept after forward: %d checkpointed against %d plain"):format(k1, k0))
    assert.truthy(p1 < p0, ("peak: %d checkpointed against %d plain"):format(p1, p0))
  end)

  it("refuses a tensor that escaped the function, and a function that computes something else the second time", function()
    local w = ddp.randn(4, 4):requires_grad_()
    local leaked
    local y = ddp.checkpoint(function(x)
      leaked = x:matmul(w):relu()
      return leaked:sum(0)
    end, ddp.randn(2, 4))
    local ok, err = pcall(function() (leaked * 2):sum():backward() end)
    assert.falsy(ok)
    has(tostring(err), "a tensor computed inside ddp.checkpoint's function (by ReluBackward) but not returned by it")
    y:sum():backward()  -- the returned result is fine
    assert.truthy(w.grad ~= nil)
    local calls = 0
    local z = ddp.checkpoint(function(x)
      calls = calls + 1
      if calls == 1 then return x:matmul(w) end
      return x:matmul(w) * ddp.randn(4):requires_grad_()
    end, ddp.randn(2, 4))
    ok, err = pcall(function() z:sum():backward() end)
    assert.falsy(ok)
    has(tostring(err), "the recomputed forward reached a tensor the first forward did not use")
    ok, err = pcall(ddp.checkpoint, 42)
    has(tostring(err), "checkpoint: expected a function or a module")
    ok, err = pcall(function() nn.Linear(2, 2):checkpoint("yes") end)
    has(tostring(err), "checkpoint: expected true or false")
  end)

  it("counts the recompute in the step's backward, not as more forward", function()
    local json = require "ddp.data.json"
    local dir = os.tmpname() .. ".trace"
    local net, blocks = model(1, 8, 3)
    for _, b in ipairs(blocks) do b:checkpoint() end
    local opt = ddp.optim.SGD(net:parameters(), { lr = 0.01 })
    ddp.trace.start(dir)
    for _ = 1, 3 do
      opt:zero_grad()
      net(x0):square():mean():backward()
      opt:step()
    end
    local path = ddp.trace.stop()
    local st = ddp.step_stats()
    local sum = st.data + st.forward + st.backward + st.comm + st.optimizer + st.other
    assert.truthy(math.abs(sum - st.total) < 1e-9 and st.other >= 0, "phases do not add up")
    -- one forward phase a step; the recomputes ran inside the backward phase
    local f = assert(io.open(path))
    local events = json.decode(f:read("*a"), path)
    f:close()
    local fwd, bwd, rec = {}, {}, 0
    for _, e in ipairs(events) do
      if e.ph == "X" and e.cat == "forward" and e.name == "forward" then fwd[#fwd + 1] = e end
      if e.ph == "X" and e.cat == "backward" and e.name == "backward" then bwd[#bwd + 1] = e end
    end
    assert.equals(3, #fwd)
    assert.equals(3, #bwd)
    for _, e in ipairs(events) do  -- the blocks' recomputed forwards, by path, inside a backward
      if e.ph == "X" and e.cat == "forward" and e.name:match("^%d: Block$") then
        for _, b in ipairs(bwd) do
          if e.ts >= b.ts and e.ts + e.dur <= b.ts + b.dur then rec = rec + 1 end
        end
      end
    end
    assert.equals(9, rec)
    os.execute("rm -rf '" .. dir .. "'")
  end)

  it("runs backward twice with retain_graph, once without", function()
    local w = ddp.randn(4, 4):requires_grad_()
    local y = ddp.checkpoint(function(x) return x:matmul(w):tanh() end, ddp.randn(2, 4)):sum()
    y:backward({ retain_graph = true })
    local g1 = w.grad:clone()
    y:backward()
    assert.truthy(((w.grad - g1 * 2):abs():max():item()) < 1e-6)
    local ok, err = pcall(function() y:backward() end)
    assert.falsy(ok)
    has(tostring(err), "was freed by an earlier backward")
  end)
end)

describe("activation checkpointing under ddp.DDP", function()
  after_each(jobs.no_strays)
  teardown(jobs.cleanup)

  it("2 ranks with checkpointed blocks, bucketing, no_sync, a shared and an unused parameter equal one process", function()
    local s = jobs.script([[
local nn, F = ddp.nn, ddp.nn.functional
ddp.init()
local r, w = ddp.rank(), ddp.world_size()
-- two checkpointed blocks, one parameter of the first used again outside
-- it, a layer never used (find_unused_parameters)
local Net = nn.Module:extend("Net")
function Net:init()
  self.b1 = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 16))
  self.b2 = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 16))
  self.spare = nn.Linear(16, 16)
  self.head = nn.Linear(16, 4)
end
function Net:forward(x)
  local h = self.b2(self.b1(x))
  local w1 = self.b1:children()[1].weight
  return self.head(h + x:matmul(w1:t()):narrow(1, 0, 16) * 0.1)
end
local function net()
  ddp.manual_seed(0)
  local n = Net()
  return n, { n.b1, n.b2 }
end
ddp.manual_seed(11)
local X, Y = ddp.randn(2, 8 * w, 16, {dtype = "float64"}), ddp.randint(0, 4, {2, 8 * w})
local function all(t, k) return t:select(0, k - 1) end
local function mine(t, k) return all(t, k):narrow(0, 8 * r, 8) end
-- DDP over checkpointed blocks, small buckets, one accumulation step under no_sync
local m, blocks = net()
m:to("float64")
for _, b in ipairs(blocks) do b:checkpoint() end
local model = ddp.DDP(m, {bucket_cap_mb = 0.002, first_bucket_mb = 0.002, find_unused_parameters = true})
model:no_sync(function() F.cross_entropy(model(mine(X, 1)), mine(Y, 1)):backward() end)
F.cross_entropy(model(mine(X, 2)), mine(Y, 2)):backward()
-- one process, plain, on the union
local p = net()
p:to("float64")
for k = 1, 2 do F.cross_entropy(p(all(X, k)), all(Y, k)):backward() end
local worst = 0
local pp = p:parameters()
for i, q in ipairs(m:parameters()) do
  -- the unused layer: no gradient in one process, DDP's zeros (as PyTorch's buckets give)
  local a, b = q.grad or ddp.zeros_like(q), pp[i].grad or ddp.zeros_like(q)
  worst = math.max(worst, (a - b):abs():max():item())
end
print(("rank %d worst %.3g"):format(r, worst))
assert(worst < 1e-6, "rank " .. r .. ": DDP with checkpoints differs from one process by " .. worst)
]], "ckptddp")
    local out, err, rc = jobs.run("--nproc 2 " .. q(s), "", 120)
    assert(rc == 0, "job failed (exit " .. tostring(rc) .. "):\n" .. err .. out)
    has(out, "rank 0 worst")
    has(out, "rank 1 worst")
  end)
end)
