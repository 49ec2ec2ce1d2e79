-- ddp.ZeroRedundancyOptimizer (ZeRO-1) in real jobs: equal to the unsharded
-- optimizer over 50 steps (AdamW with two groups and a schedule, amsgrad,
-- SGD with Nesterov momentum) with about 1/W of its state per rank and the
-- gradients left whole; sharded checkpoints that load into 3 ranks, into
-- one, and into a plain optimizer, resume exactly, and stay whole as a set
-- when a save fails; and the misuse errors.
local jobs = require "helpers.jobs"
local q, run = jobs.q, jobs.run

-- Every job starts with this: a model, two parameter groups, each rank's
-- batches (the same whatever the world), and comparisons.
local COMMON = [[
ddp.init()
local nn, optim = ddp.nn, ddp.optim
local rank, world = ddp.rank(), ddp.world_size()
local function model(width)
  ddp.manual_seed(5)
  return nn.Sequential(nn.Linear(6, width or 32), nn.LayerNorm(width or 32), nn.GELU(), nn.Linear(width or 32, 5))
end
local function groups(m)  -- matrices decayed, the rest not
  local decay, rest = {}, {}
  for _, np in ipairs(m:named_parameters()) do
    if np[2]:dim() == 2 then decay[#decay + 1] = np[2] else rest[#rest + 1] = np[2] end
  end
  return { { params = decay, weight_decay = 0.1 }, { params = rest, weight_decay = 0 } }
end
local function batch(i, r)
  ddp.manual_seed(1000 * i + r)
  return ddp.randn(8, 6), ddp.randint(0, 5, { 8 })
end
local function train_step(dm, opt, i)
  local x, y = batch(i, rank)
  opt:zero_grad()
  local loss = nn.functional.cross_entropy(dm(x), y)
  loss:backward()
  return loss
end
local function params_diff(a, b)
  local sa, sb, worst = a:state_dict(), b:state_dict(), 0
  for k, v in pairs(sa) do worst = math.max(worst, (v - sb[k]):abs():max():item()) end
  return worst
end
local function shards_of(dir)
  local p, names = io.popen("ls " .. dir .. " 2>/dev/null"), {}
  for l in p:lines() do names[#names + 1] = l end
  p:close()
  return names
end
]]

local function script(body) return jobs.script(COMMON .. body, "zero") end

local function expect_ok(out, err, rc, what)
  assert(rc == 0, (what or "the job") .. " failed (exit " .. tostring(rc) .. "):\n" .. err .. out)
end

describe("ddp.ZeroRedundancyOptimizer", function()
  after_each(jobs.no_strays)

  it("steps as the unsharded optimizer over 50 steps with 1/W of its state, gradients whole", function()
    local s = script [[
local cases = {
  { "AdamW", optim.AdamW, { lr = 1e-2 }, true },
  { "AdamW amsgrad", optim.AdamW, { lr = 1e-2, amsgrad = true } },
  { "Adam", optim.Adam, { lr = 1e-2, weight_decay = 0.01 } },
  { "SGD nesterov", optim.SGD, { lr = 0.05, momentum = 0.9, nesterov = true } },
  { "SGD dampening", optim.SGD, { lr = 0.05, momentum = 0.9, dampening = 0.3 } },
}
for _, c in ipairs(cases) do
  local name, cls, opts, sched = c[1], c[2], c[3], c[4]
  local dz, dp = ddp.DDP(model()), ddp.DDP(model())
  local zopts = { bucket_cap_mb = 0.001 }  -- several segments, parameters cut between ranks
  for k, v in pairs(opts) do zopts[k] = v end
  local z = ddp.ZeroRedundancyOptimizer(groups(dz), cls, zopts)
  local o = cls(groups(dp), opts)
  local sz = sched and optim.lr_scheduler.StepLR(z, { step_size = 10, gamma = 0.5 })
  local so = sched and optim.lr_scheduler.StepLR(o, { step_size = 10, gamma = 0.5 })
  local grads = 0
  for i = 1, 50 do
    train_step(dz, z, i)
    train_step(dp, o, i)
    -- the gradients stay every rank's average, whole: clipping sees them all
    local nz = nn.utils.clip_grad_norm_(dz:parameters(), 0.5):item()
    local np = nn.utils.clip_grad_norm_(dp:parameters(), 0.5):item()
    assert(nz == np, name .. ": clip_grad_norm_ " .. nz .. " vs " .. np)
    local pz, pp = dz:parameters(), dp:parameters()
    for j = 1, #pz do grads = math.max(grads, (pz[j].grad - pp[j].grad):abs():max():item()) end
    z:step(); o:step()
    if sz then sz:step(); so:step() end
  end
  print(("%s diff %.3g grads %.3g state %d %d lr %g"):format(name, params_diff(dz, dp), grads,
        z:state_nbytes(), o:state_nbytes(), z.param_groups[1].lr))
end
]]
    -- shared memory (the parameters gathered from the other rank's memory), then TCP
    for _, backend in ipairs { "auto", "gloo" } do
      local out, err, rc = run("--nproc 2 " .. q(s), "DDP_BACKEND=" .. backend, 120)
      expect_ok(out, err, rc, backend)
      local seen = 0
      for r, name, diff, grads, zb, ob, lr in out:gmatch("%[(%d)%] ([%w ]+) diff (%S+) grads (%S+) state (%d+) (%d+) lr (%S+)") do
        seen = seen + 1
        assert.is_true(tonumber(diff) <= 1e-6, name .. " on rank " .. r .. ": parameters differ by " .. diff)
        assert.are.equal(0, tonumber(grads), name .. ": gradients differ")
        local ratio = tonumber(zb) / tonumber(ob)
        -- each rank holds half the elements' state, to within a segment's rounding
        assert.is_true(ratio > 0.45 and ratio < 0.55, name .. " on rank " .. r .. ": state " .. zb .. " of " .. ob)
        if name == "AdamW" then assert.is_true(math.abs(tonumber(lr) - 1e-2 * 0.5 ^ 5) < 1e-12, lr) end
      end
      assert.are.equal(10, seen, out)
    end
  end)

  it("saves every rank's shard and one index, which loads into 3 ranks, 1 rank and a plain optimizer", function()
    local dir = jobs.tempname() .. "_zck"
    assert(os.execute("mkdir -p " .. q(dir)) == 0)
    local save = script(([[
local dz, dp = ddp.DDP(model()), ddp.DDP(model())
local z = ddp.ZeroRedundancyOptimizer(groups(dz), optim.AdamW, { lr = 1e-2, bucket_cap_mb = 0.001 })
local o = optim.AdamW(groups(dp), { lr = 1e-2 })
for i = 1, 10 do train_step(dz, z, i); z:step(); train_step(dp, o, i); o:step() end
ddp.save_checkpoint(%q, { model = dz, optimizer = z, step = 10 })
if rank == 0 then ddp.save_checkpoint(%q, { model = dp, optimizer = o, step = 10 }) end
ddp.barrier()
print("files", table.concat(shards_of(%q), " "))
]]):format(dir .. "/z.ckpt", dir .. "/plain.ckpt", dir .. "/z.ckpt.shards"))
    local out, err, rc = run("--nproc 2 " .. q(save), nil, 120)
    expect_ok(out, err, rc, "the saving job")
    local files = out:match("%[0%] files%s+([^\n]*)")
    assert.truthy(files, out)
    local n = 0
    for f in files:gmatch("%S+") do
      n = n + 1
      assert.truthy(f:match("^%x+%-%x+%.optimizer%.rank0000[01]%-of%-00002%.safetensors$"), f)
    end
    assert.are.equal(2, n, files)

    -- in 3 ranks (other segments too) and in 1: each rank's ranges equal the
    -- plain optimizer's state, and the next 5 steps equal the plain run's
    local load = script(([[
local dz, dp = ddp.DDP(model()), ddp.DDP(model())
local z = ddp.ZeroRedundancyOptimizer(groups(dz), optim.AdamW, { lr = 1e-2, bucket_cap_mb = 0.0005 })
local o = optim.AdamW(groups(dp), { lr = 1e-2 })
local st = ddp.load_checkpoint(%q, { model = dz, optimizer = z })
local plain = ddp.load_checkpoint(%q, { model = dp, optimizer = o })
assert(st.step == 10 and plain.step == 10)
local worst = 0
for _, seg in ipairs(z._segs) do
  for _, pc in ipairs(seg.pieces) do
    for f, v in pairs(z.state[pc.e.idx]) do
      if ddp.is_tensor(v) then
        worst = math.max(worst, (plain.optimizer.state[pc.e.idx][f]:reshape(-1):narrow(0, pc.a, pc.len) - v):abs():max():item())
      else assert(v == plain.optimizer.state[pc.e.idx][f], f) end
    end
  end
end
-- a plain optimizer takes the whole state from the shards
local m3 = ddp.DDP(model())
local o3 = optim.AdamW(groups(m3), { lr = 1e-2 })
ddp.load_checkpoint(%q, { model = m3, optimizer = o3 })
for idx, s in pairs(o.state) do
  for f, v in pairs(s) do
    if ddp.is_tensor(v) then worst = math.max(worst, (o3.state[idx][f] - v):abs():max():item())
    else assert(o3.state[idx][f] == v, f) end
  end
end
for i = 11, 15 do train_step(dz, z, i); z:step(); train_step(dp, o, i); o:step() end
print("state", worst, "params", params_diff(dz, dp), z:state_nbytes())
]]):format(dir .. "/z.ckpt", dir .. "/plain.ckpt", dir .. "/z.ckpt"))
    for _, w in ipairs { 3, 1 } do
      out, err, rc = run("--nproc " .. w .. " " .. q(load), nil, 120)
      expect_ok(out, err, rc, "loading into " .. w .. " rank(s)")
      local seen = 0
      for sdiff, pdiff in out:gmatch("state%s+(%S+)%s+params%s+(%S+)") do
        seen = seen + 1
        assert.are.equal(0, tonumber(sdiff), out)
        assert.is_true(tonumber(pdiff) <= 1e-6, out)
      end
      assert.are.equal(w, seen, out)
    end
    os.execute("rm -rf " .. q(dir))
  end)

  it("resumes exactly from its sharded checkpoint, with the unsharded run's losses", function()
    local dir = jobs.tempname() .. "_zres"
    assert(os.execute("mkdir -p " .. q(dir)) == 0)
    local ck = dir .. "/ck"
    local S = "tests/scripts/resume_train.lua --steps 14 --checkpoint " .. q(ck)
    local function losses(out)
      local l = {}
      for r, step, loss in out:gmatch("%[(%d)%] step (%d+) epoch %d+ loss (%S+)") do l[r .. ":" .. step] = loss end
      return l
    end
    local plain_out, err, rc = run("--nproc 2 " .. S, nil, 120)
    expect_ok(plain_out, err, rc, "the unsharded run")
    local whole, err2, rc2 = run("--nproc 2 " .. S .. " --zero", nil, 120)
    expect_ok(whole, err2, rc2, "the sharded run")
    local a, err3, rc3 = run("--nproc 2 " .. S .. " --zero --stop-at 9", nil, 120)
    expect_ok(a, err3, rc3, "the stopped run")
    local b, err4, rc4 = run("--nproc 2 " .. S .. " --zero --resume", nil, 120)
    expect_ok(b, err4, rc4, "the resumed run")
    local lp, lw, la, lb = losses(plain_out), losses(whole), losses(a), losses(b)
    local n = 0
    for k, v in pairs(lw) do
      n = n + 1
      assert.are.equal(lp[k], v, "sharded vs unsharded at " .. k)
      local step = tonumber(k:match(":(%d+)"))
      if step <= 9 then assert.are.equal(v, la[k], "stopped run at " .. k); assert.is_nil(lb[k])
      else assert.are.equal(v, lb[k], "resumed run at " .. k) end
    end
    assert.are.equal(28, n)
    os.execute("rm -rf " .. q(dir))
  end)

  it("keeps the previous checkpoint whole when a save fails, and removes old shards after one succeeds", function()
    local dir = jobs.tempname() .. "_zset"
    assert(os.execute("mkdir -p " .. q(dir)) == 0)
    local ck = dir .. "/ck"
    -- the checkpoint's main file holds an 8 MiB extra tensor; the shards are small
    local save = script(([[
local dz = ddp.DDP(model())
local z = ddp.ZeroRedundancyOptimizer(dz:parameters(), optim.AdamW, { lr = 1e-2 })
local tag = tonumber(arg[1])
for i = 1, tag do train_step(dz, z, i); z:step() end
local ok, e = pcall(ddp.save_checkpoint, %q, { model = dz, optimizer = z, step = tag, extra = ddp.zeros(2 * 1024 * 1024) })
print("save", tag, ok, ok and "" or e)
]]):format(ck))
    local out, err, rc = run("--nproc 2 " .. q(save) .. " 1", nil, 120)
    expect_ok(out, err, rc, "the first save")
    assert.truthy(out:find("%[1%] save\t1\ttrue"), out)
    local first = {}
    for f in io.popen("ls " .. q(ck .. ".shards")):lines() do first[#first + 1] = f end
    assert.are.equal(2, #first)
    -- a file size limit below the main file: the shards are written, the index is not
    local sh = jobs.sh("bash -c " .. q("ulimit -f 4096 && " .. jobs.CLEAN .. " timeout 120 " .. q(jobs.ddplua)
      .. " --nproc 2 " .. q(save) .. " 2 2>&1"))
    assert.truthy(sh:find("%[0%] save\t2\tfalse\t[^\n]*File too large"), sh)
    assert.truthy(sh:find("%[1%] save\t2\tfalse\t[^\n]*save_checkpoint: rank 0 failed to write [^\n]*File too large"), sh)
    local load = script(([[
local dz = ddp.DDP(model())
local z = ddp.ZeroRedundancyOptimizer(dz:parameters(), optim.AdamW, { lr = 1e-2 })
local st = ddp.load_checkpoint(%q, { model = dz, optimizer = z })
local steps = 0
for _, s in pairs(z.state) do steps = math.max(steps, s.step) end
print("loaded", st.step, steps, #shards_of(%q))
]]):format(ck, ck .. ".shards"))
    out, err, rc = run("--nproc 2 " .. q(load), nil, 120)
    expect_ok(out, err, rc, "loading after the failed save")
    -- the first save's state, its shards; the failed save's shards are left over
    assert.truthy(out:find("%[0%] loaded\t1\t1\t4"), out)
    out, err, rc = run("--nproc 2 " .. q(save) .. " 3", nil, 120)
    expect_ok(out, err, rc, "the third save")
    out, err, rc = run("--nproc 2 " .. q(load), nil, 120)
    expect_ok(out, err, rc)
    assert.truthy(out:find("%[0%] loaded\t3\t3\t2"), out)
    for f in io.popen("ls " .. q(ck .. ".shards")):lines() do
      for _, old in ipairs(first) do assert.are_not.equal(old, f) end
    end
    os.execute("rm -rf " .. q(dir))
  end)

  it("says why when only rank 0 saves a sharded optimizer", function()
    local dir = jobs.tempname() .. "_zmain"
    assert(os.execute("mkdir -p " .. q(dir)) == 0)
    local s = script(([[
local dz = ddp.DDP(model())
local z = ddp.ZeroRedundancyOptimizer(dz:parameters(), optim.AdamW, {})
if ddp.is_main() then
  local ok, e = pcall(ddp.save_checkpoint, %q, { optimizer = z })
  print("main", ok, e)
else
  sleep(8)
end
]]):format(dir .. "/ck"))
    local out, err, rc = run("--nproc 2 " .. q(s), "DDP_TIMEOUT=3", 60)
    assert.truthy(out:find("%[0%] main	false	[^\n]*save_checkpoint: [^\n]*ck holds a sharded optimizer, so every rank must call "
                           .. "save_checkpoint %(each writes its own shard; no `if ddp.is_main%(%)` around it%): [^\n]*rank 1"), out .. err)
    local _ = rc
    os.execute("rm -rf " .. q(dir))
  end)

  it("refuses misuse, naming the problem", function()
    local dir = jobs.tempname() .. "_zerr"
    assert(os.execute("mkdir -p " .. q(dir)) == 0)
    local s = script(([[
local function err(f, ...)
  local ok, e = pcall(f, ...)
  assert(not ok, "no error")
  return tostring(e)
end
-- not under ddp.DDP: each rank would step with its own gradients
local m = model()
local z = ddp.ZeroRedundancyOptimizer(m:parameters(), optim.AdamW, {})
train_step(m, z, 1)
print("nodpp", err(z.step, z))
print("instance", err(ddp.ZeroRedundancyOptimizer, m:parameters(), optim.AdamW(m:parameters()), {}))
print("option", err(ddp.ZeroRedundancyOptimizer, m:parameters(), optim.AdamW, { lr = 1e-3, bucket_cap_mb = -1 }))
print("inner", err(ddp.ZeroRedundancyOptimizer, m:parameters(), optim.AdamW, { lrr = 1e-3 }))
-- a view of a parameter alive would keep its old memory
local held = model()
local view = held:parameters()[1]:view(-1)
print("view", err(ddp.ZeroRedundancyOptimizer, held:parameters(), optim.SGD, {}))
-- a second optimizer over the same parameters keeps the first one's layout, or says why not
local dd = ddp.DDP(model())
local z1 = ddp.ZeroRedundancyOptimizer(dd:parameters(), optim.AdamW, {})
local z2 = ddp.ZeroRedundancyOptimizer(dd:parameters(), optim.SGD, { lr = 0.1 })
train_step(dd, z2, 1); z2:step(); train_step(dd, z1, 2); z1:step()
print("relayout", err(ddp.ZeroRedundancyOptimizer, dd:parameters(), optim.AdamW, { bucket_cap_mb = 0.0001 }))
-- the ranks build different models
print("differ", err(ddp.ZeroRedundancyOptimizer, model(rank == 1 and 33 or 32):parameters(), optim.SGD, {}))
-- a sharded checkpoint, then a model of other sizes, a lost shard, a tampered index
local dz = ddp.DDP(model())
local zz = ddp.ZeroRedundancyOptimizer(dz:parameters(), optim.AdamW, {})
train_step(dz, zz, 1); zz:step()
ddp.save_checkpoint(%q, { optimizer = zz })
local other = ddp.DDP(model(16))
local zo = ddp.ZeroRedundancyOptimizer(other:parameters(), optim.AdamW, {})
print("sizes", err(ddp.load_checkpoint, %q, { optimizer = zo }))
local st = ddp.load_checkpoint(%q)
st.optimizer.zero.files[1] = "../../etc/passwd"
print("tampered", err(zz.load_state_dict, zz, st.optimizer))
st = ddp.load_checkpoint(%q)
st.optimizer.zero.world_size = 3
print("world", err(zz.load_state_dict, zz, st.optimizer))
ddp.barrier()
if rank == 0 then for _, f in ipairs(shards_of(%q)) do if f:find("rank00001") then os.remove(%q .. "/" .. f) end end end
ddp.barrier()
local ok, e = pcall(ddp.load_checkpoint, %q, { optimizer = zz })
print("lost", ok and "loaded" or tostring(e))
]]):format(dir .. "/ck", dir .. "/ck", dir .. "/ck", dir .. "/ck", dir .. "/ck.shards", dir .. "/ck.shards", dir .. "/ck"))
    local out, err, rc = run("--nproc 2 " .. q(s), nil, 120)
    expect_ok(out, err, rc)
    local function line(r, what) return out:match("%[" .. r .. "%] " .. what .. "\t([^\n]*)") or "" end
    for r = 0, 1 do
      assert.truthy(line(r, "nodpp"):find("ZeroRedundancyOptimizer: parameter 0 %(32x6%) is not in a ddp.DDP model"), out)
      assert.truthy(line(r, "instance"):find("must be an optimizer class such as ddp.optim.AdamW %(the class, not an optimizer made from it%)"), out)
      assert.truthy(line(r, "option"):find("bucket_cap_mb must be a positive number, got %-1"), out)
      assert.truthy(line(r, "inner"):find("AdamW: unknown option \"lrr\""), out)
      assert.truthy(line(r, "view"):find("parameter 0 %(32x6%): rebase: another tensor %(a view%) shares its memory"), out)
      assert.truthy(line(r, "relayout"):find("parameter 0 %(32x6%) already lies in the flat buffer of another ZeroRedundancyOptimizer"), out)
      assert.truthy(line(r, "differ"):find("the ranks' parameters differ: rank 1's parameter 0 is 33x6 float32 %(rank 0's: 32x6 float32%)"), out)
      assert.truthy(line(r, "sizes"):find("parameter 0 has 96 elements, 192 in the sharded state"), out)
      assert.truthy(line(r, "tampered"):find("files%[1%] must be a file name in the shard folder"), out)
      assert.truthy(line(r, "world"):find("files must name one shard per rank %(3%)"), out)
    end
    -- only the rank whose ranges lie in the lost file reads it
    assert.truthy((line(0, "lost") .. line(1, "lost")):find("shard 1 of 2: [^\n]*rank00001%-of%-00002%.safetensors[^\n]*the shard folder must travel with the checkpoint"), out)
    os.execute("rm -rf " .. q(dir))
  end)
end)
