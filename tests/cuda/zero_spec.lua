-- ddp.ZeroRedundancyOptimizer on CUDA parameters, in a real job of
-- `ddplua --nproc 2` (on GPUs, or on the emulator scripts/run-tests.sh
-- turns on): the shards' state lies on each rank's device, the
-- parameters' all-gather runs there (NCCL with a GPU per rank, else
-- staged through host memory), 20 AdamW steps equal the unsharded
-- optimizer's, and a sharded checkpoint saved from the device loads back
-- onto it (and into one CPU process) with the same state.
local H = require "helpers.cuda"
local jobs = require "helpers.jobs"
local q, run = jobs.q, jobs.run

local function env()
  if H.emulated then return "DDPLUA_CUDA_EMU=2" end
  return ""
end

H.describe("ZeroRedundancyOptimizer on CUDA", function()
  after_each(jobs.no_strays)

  it("steps as the unsharded optimizer with the state on the device, and checkpoints in shards", function()
    local dir = jobs.tempname() .. "_zcuda"
    assert(os.execute("mkdir -p " .. q(dir)) == 0)
    local s = jobs.script(([[
local nn, optim = ddp.nn, ddp.optim
ddp.init()
local r = ddp.rank()
local dev = ddp.device()
assert(dev:match("^cuda:%%d+$"), dev)
local function model()
  ddp.manual_seed(5)
  return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 4)):to(dev)
end
local dz, dp = ddp.DDP(model()), ddp.DDP(model())
local z = ddp.ZeroRedundancyOptimizer(dz:parameters(), optim.AdamW, { lr = 1e-2, bucket_cap_mb = 0.0002 })
local o = optim.AdamW(dp:parameters(), { lr = 1e-2 })
for i = 1, 20 do
  ddp.manual_seed(100 * i + r)
  local x = ddp.randn(4, 6):to(dev)
  for _, pair in ipairs { { dz, z }, { dp, o } } do
    pair[2]:zero_grad()
    pair[1](x):pow(2):mean():backward()
    pair[2]:step()
  end
end
local worst = 0
local a, b = dz:state_dict(), dp:state_dict()
for k, v in pairs(a) do
  assert(v:device() == dev, k .. " on " .. v:device())
  worst = math.max(worst, (v - b[k]):abs():max():item())
end
for _, seg in ipairs(z._segs) do
  for _, t in pairs(seg.flat) do assert(t:device() == dev, "state on " .. t:device()) end
end
ddp.save_checkpoint(%q, { model = dz, optimizer = z })
local z2 = ddp.ZeroRedundancyOptimizer(dz:parameters(), optim.AdamW, { lr = 1e-2, bucket_cap_mb = 0.0002 })
ddp.load_checkpoint(%q, { optimizer = z2 })
local sdiff = 0
for idx, st in pairs(z.state) do
  for f, v in pairs(st) do
    if ddp.is_tensor(v) then
      assert(z2.state[idx][f]:device() == dev)
      sdiff = math.max(sdiff, (z2.state[idx][f] - v):abs():max():item())
    end
  end
end
print("cuda zero", worst, sdiff, z:state_nbytes(), o:state_nbytes())
]]):format(dir .. "/ck", dir .. "/ck"), "zerocuda")
    local out, err, rc = run("--nproc 2 " .. q(s), env(), 300)
    assert(rc == 0, "the job failed (exit " .. tostring(rc) .. "):\n" .. err .. out)
    local seen = 0
    for diff, sdiff, zb, ob in out:gmatch("cuda zero%s+(%S+)%s+(%S+)%s+(%d+)%s+(%d+)") do
      seen = seen + 1
      assert.is_true(tonumber(diff) <= 1e-6, out)
      assert.are.equal(0, tonumber(sdiff), out)
      assert.is_true(tonumber(zb) / tonumber(ob) < 0.55, out)
    end
    assert.are.equal(2, seen, out)
    -- one CPU process, a plain optimizer: the whole state from the device's shards
    local l = jobs.script(([[
local nn, optim = ddp.nn, ddp.optim
ddp.manual_seed(5)
local m = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 4))
local o = optim.AdamW(m:parameters(), { lr = 1e-2 })
ddp.load_checkpoint(%q, { model = m, optimizer = o })
local n = 0
for _, st in pairs(o.state) do assert(st.step == 20 and st.exp_avg:device() == "cpu"); n = n + 1 end
print("cpu load", n)
]]):format(dir .. "/ck"), "zerocpu")
    out, err, rc = run(q(l), "", 60)
    assert(rc == 0, err .. out)
    assert.truthy(out:find("cpu load\t4"), out)
    os.execute("rm -rf " .. q(dir))
  end)
end)
