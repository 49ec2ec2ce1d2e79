-- Collectives and DDP on CUDA tensors, in real jobs of `ddplua --nproc 2`
-- (on a GPU, or on the emulator that scripts/run-tests.sh turns on): every
-- collective on CUDA tensors (staged through host memory by the CPU
-- transports; NCCL where a real GPU per rank is there), DDP on CUDA
-- parameters equal to one process on the union of the batches, autocast
-- on CUDA, and the misuse errors.  Without a device (or the emulator)
-- each group is one pending line naming why; a CUDA op that fails fails
-- the spec.
local ddp = require "ddp"
local H = require "helpers.cuda"
local jobs = require "helpers.jobs"
local q, run = jobs.q, jobs.run
local function script(body) return jobs.script(body, "cudadist") end

-- The emulator for the jobs too, with as many devices as asked.
local function env(ndev)
  if H.emulated then return "DDPLUA_CUDA_EMU=" .. (ndev or 1) end
  return ""
end

local function expect_ok(out, err, rc, what)
  assert(rc == 0, what .. " failed (exit " .. tostring(rc) .. "):\n" .. err .. out)
end

H.describe("collectives on CUDA tensors", function()
  after_each(jobs.no_strays)

  it("all_reduce, broadcast, all_gather, reduce_scatter, send/recv and async give CUDA results", function()
    local s = script [[
ddp.init()
local r, w = ddp.rank(), ddp.world_size()
assert(ddp.device():match("^cuda:%d+$"), ddp.device())
local function vals(t) assert(t:device():match("^cuda"), "result on " .. t:device()) return t:cpu():double():tolist() end
local function same(what, got, want)
  for i = 1, #want do assert(math.abs(got[i] - want[i]) < 1e-6, what .. ": [" .. i .. "] " .. got[i] .. " ~= " .. want[i]) end
  assert(#got == #want, what .. ": length")
end
for _, dt in ipairs { "float32", "float64", "int64", "int32", "bfloat16", "float16", "uint8" } do
  for _, op in ipairs { "sum", "max", "min", "prod" } do
    local t = (ddp.arange(5, { dtype = "float64" }) + r + 1):to(dt):cuda()
    ddp.all_reduce(t, op)
    local want = {}
    for i = 1, 5 do
      local a, b = i, i + 1
      want[i] = op == "sum" and a + b or op == "max" and b or op == "min" and a or a * b
    end
    same("all_reduce " .. op .. " " .. dt, vals(t), want)
  end
end
local a = ddp.full({ 4 }, r + 1.5):cuda()
ddp.all_reduce(a, "avg")
same("avg", vals(a), { 2, 2, 2, 2 })
-- non-contiguous
local m = (ddp.arange(6, { dtype = "float32" }):view(2, 3) + r):cuda():t()
ddp.all_reduce(m)
same("transposed", vals(m:contiguous():view(-1)), { 1, 7, 3, 9, 5, 11 })
local b = ddp.full({ 3 }, r + 1, { dtype = "float32" }):cuda()
ddp.broadcast(b, 1)
same("broadcast", vals(b), { 2, 2, 2 })
local g = ddp.all_gather(ddp.full({ 2 }, r, { dtype = "float32" }):cuda())
same("all_gather", vals(g), { 0, 0, 1, 1 })
local rs = ddp.reduce_scatter(ddp.arange(4, { dtype = "float32" }):cuda())
same("reduce_scatter", vals(rs), r == 0 and { 0, 2 } or { 4, 6 })
if r == 0 then
  ddp.send(ddp.full({ 2 }, 7, { dtype = "float32" }):cuda(), 1)
else
  local x = ddp.zeros(2):cuda()
  ddp.recv(x, 0)
  same("recv", vals(x), { 7, 7 })
end
local hs = {}
for k = 1, 3 do hs[k] = ddp.all_reduce_async(ddp.full({ 3 }, k * (r + 1), { dtype = "float32" }):cuda()) end
for k = 1, 3 do same("async " .. k, vals(hs[k]:wait()), { 3 * k, 3 * k, 3 * k }) end
-- CPU tensors still work on the same group
local c = ddp.ones(2)
ddp.all_reduce(c)
assert(c:device() == "cpu")
same("cpu", c:double():tolist(), { 2, 2 })
ddp.barrier()
print("ok", ddp.backend())
]]
    for _, backend in ipairs { "auto", "gloo" } do  -- shared memory (or NCCL), then TCP
      local out, err, rc = run("--nproc 2 " .. q(s), env() .. " DDP_BACKEND=" .. backend, 120)
      expect_ok(out, err, rc, "collectives (" .. backend .. ")")
      assert.truthy(out:find("[0] ok", 1, true))
      assert.truthy(out:find("[1] ok", 1, true))
    end
  end)
end)

-- DDP on CUDA parameters: a model of elementwise ops only (so it runs
-- with just the elementwise family on CUDA), several steps of manual SGD;
-- each rank's DDP gradients and parameters match a one-process reference
-- on the CPU over both ranks' inputs.
local ELEMENTWISE_DDP = [[
local nn = ddp.nn
ddp.init()
local r, W = ddp.rank(), ddp.world_size()
local M = nn.Module:extend("M")
function M:init()
  self.w = ddp.randn(4, 3):requires_grad_()
  self.b = ddp.randn(4, 3):requires_grad_()
  self.c = ddp.randn(4, 3):requires_grad_()
end
function M:forward(x) return ((x * self.w + self.b):relu() * self.c):tanh() end
ddp.manual_seed(1 + r)
local model = M():to(ddp.device())
assert(ddp.device() == "cuda:" .. (r % ddp.cuda.device_count()), ddp.device())
ddp.manual_seed(1)
local ref = M()
local HOOK = os.getenv("T_HOOK")
local dm = ddp.DDP(model, { bucket_cap_mb = 1e-5, first_bucket_mb = 1e-5,
                           comm_hook = HOOK ~= "" and HOOK or nil })
local TOL = (HOOK ~= nil and HOOK ~= "") and 2e-2 or 1e-5
ddp.manual_seed(9)
local X = ddp.randn(5, W, 4, 3)
local lr = 0.1
for step = 1, 5 do
  for _, p in ipairs(dm:parameters()) do p.grad = nil end
  local out = dm(X:select(0, step - 1):select(0, r):cuda())
  out:backward(ddp.ones(4, 3):cuda())
  for _, p in ipairs(ref:parameters()) do p.grad = nil end
  for q = 1, W do ref(X:select(0, step - 1):select(0, q - 1)):backward(ddp.full({ 4, 3 }, 1 / W)) end
  ddp.no_grad(function()
    local mp, rp = dm:parameters(), ref:parameters()
    for i = 1, #mp do
      assert(mp[i]:device():match("^cuda"), "param on " .. mp[i]:device())
      assert(mp[i].grad:device() == mp[i]:device(), "grad on " .. mp[i].grad:device())
      local d = (mp[i].grad:cpu() - rp[i].grad):abs():max():item()
      assert(d < TOL * (1 + rp[i].grad:abs():max():item()), ("step %d param %d: grad off by %g"):format(step, i, d))
      mp[i]:sub_(mp[i].grad * lr)
      rp[i]:sub_(rp[i].grad * lr)
    end
  end)
end
local st = dm:stats()
print("ok", st.buckets, st.syncs)
]]

H.describe("the nccl backend", function()
  it("is chosen only with a real GPU per rank, and says why it cannot start", function()
    local s = script [[
ddp.init()
print("auto", ddp.backend())
]]
    local out, err, rc = run("--nproc 2 " .. q(s), env(), 60)
    expect_ok(out, err, rc, "auto")
    if H.emulated then
      assert.truthy(out:find("[0] auto\tshm", 1, true), out)
      out, err, rc = run("--nproc 2 " .. q(s), env() .. " DDP_BACKEND=nccl", 60)
      assert.is_true(rc ~= 0)
      assert.truthy(err:find("emulator (DDPLUA_CUDA_EMU) has no NCCL", 1, true), err)
    end
  end)
end)

H.describe("ddp.DDP on CUDA parameters", function()
  after_each(jobs.no_strays)

  it("equals one process on the union of the batches (elementwise model)", function()
    -- both ranks on one device, then (emulated) one device each
    for _, ndev in ipairs(H.emulated and { 1, 2 } or { 1 }) do
      local out, err, rc = run("--nproc 2 " .. q(script(ELEMENTWISE_DDP)), env(ndev), 120)
      expect_ok(out, err, rc, "ddp on " .. ndev .. " device(s)")
      assert.truthy(out:find("[0] ok", 1, true))
      assert.truthy(out:find("[1] ok", 1, true))
    end
  end)

  it("equals one process on the union of the batches (Linear + ReLU + MSE)", function()
    local s = script [[
local nn, F = ddp.nn, ddp.nn.functional
ddp.init()
local r, W = ddp.rank(), ddp.world_size()
local function build() return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3)) end
ddp.manual_seed(10 + r)
local model = build():to(ddp.device())
ddp.manual_seed(10)
local ref = build()
local dm = ddp.DDP(model)
ddp.manual_seed(3)
local X, Y = ddp.randn(4, W, 5, 6), ddp.randn(4, W, 5, 3)
for step = 1, 4 do
  for _, p in ipairs(dm:parameters()) do p.grad = nil end
  F.mse_loss(dm(X:select(0, step - 1):select(0, r):cuda()), Y:select(0, step - 1):select(0, r):cuda()):backward()
  for _, p in ipairs(ref:parameters()) do p.grad = nil end
  local loss = 0
  for q = 1, W do loss = loss + F.mse_loss(ref(X:select(0, step - 1):select(0, q - 1)), Y:select(0, step - 1):select(0, q - 1)) / W end
  loss:backward()
  ddp.no_grad(function()
    local mp, rp = dm:parameters(), ref:parameters()
    for i = 1, #mp do
      local d = (mp[i].grad:cpu() - rp[i].grad):abs():max():item()
      assert(d < 1e-4, ("step %d param %d: grad off by %g"):format(step, i, d))
      mp[i]:sub_(mp[i].grad * 0.1)
      rp[i]:sub_(rp[i].grad * 0.1)
    end
  end)
end
print("ok")
]]
    local out, err, rc = run("--nproc 2 " .. q(s), env(), 180)
    expect_ok(out, err, rc, "ddp linear")
    assert.truthy(out:find("[1] ok", 1, true))
  end)

  it("compresses buckets on the device with the bf16 and fp16 comm hooks", function()
    for _, hook in ipairs { "bf16", "fp16" } do
      local out, err, rc = run("--nproc 2 " .. q(script(ELEMENTWISE_DDP)), env() .. " T_HOOK=" .. hook, 120)
      expect_ok(out, err, rc, "ddp " .. hook)
      assert.truthy(out:find("[1] ok", 1, true))
    end
  end)

  it("refuses parameters on several devices", function()
    local s = script [[
local nn = ddp.nn
local M = nn.Module:extend("M")
function M:init()
  self.a = ddp.randn(3):requires_grad_()
  self.b = ddp.randn(3):cuda():requires_grad_()
end
local ok, err = pcall(ddp.DDP, M())
assert(not ok)
print("err1", err)
if ddp.cuda.device_count() < 2 then print("one device") return end
local M2 = nn.Module:extend("M2")
function M2:init()
  self.a = ddp.randn(3):to("cuda:0"):requires_grad_()
  self.b = ddp.randn(3):to("cuda:1"):requires_grad_()
end
ok, err = pcall(ddp.DDP, M2())
assert(not ok)
print("err2", err)
]]
    local out, err, rc = run(q(s), env(2), 60)
    expect_ok(out, err, rc, "devices")
    assert.truthy(out:find("err1.-are on different devices"), out)
    if not out:find("one device", 1, true) then
      assert.truthy(out:find("err2.-cuda:0.-cuda:1.-different devices"), out)
    end
  end)
end)

H.describe("ddp.autocast on CUDA", function()
  it("runs matmul in bfloat16, the loss in float32, grads in float32", function()
    local F = ddp.nn.functional
    ddp.manual_seed(4)
    local w = ddp.randn(5, 8):cuda():requires_grad_()
    local x, y = ddp.randn(6, 8):cuda(), ddp.randn(6, 5):cuda()
    local out, loss = ddp.autocast("bf16", function()
      local o = F.linear(x, w)
      return o, F.mse_loss(o, y)
    end)
    assert.equal("bfloat16", out:dtype())
    assert.equal("float32", loss:dtype())
    loss:backward()
    assert.equal("float32", w.grad:dtype())
    assert.truthy(w.grad:device():match("^cuda"))
    local w32 = w:detach():cpu():requires_grad_()
    local l32 = F.mse_loss(F.linear(x:cpu(), w32), y:cpu())
    l32:backward()
    assert.is_true(math.abs(loss:item() - l32:item()) < 0.05 * math.abs(l32:item()) + 1e-2)
    local d = (w.grad:cpu() - w32.grad):abs():max():item()
    assert.is_true(d < 0.05 * w32.grad:abs():max():item() + 1e-2, "grad off by " .. d)
  end)
end)
