-- ddp.memory_summary / ddp.memory_breakdown: where a rank's memory goes.
-- Parameters, gradients and optimizer state counted exactly (each tensor
-- once, tied weights too), activations at peak that scale with the batch
-- and fall under checkpointing, ZeroRedundancyOptimizer's state halved on
-- 2 ranks, the launcher's end-of-job line of each rank's peak (after a
-- failure too), and clear errors for bad options.  Each case is a fresh
-- process: the registries and the allocator's peaks are per process.
local jobs = require "helpers.jobs"
local q, run = jobs.q, jobs.run

local COMMON = [[
local nn, optim = ddp.nn, ddp.optim
-- the model, and its layers in order
local function mlp(width)
  ddp.manual_seed(3)
  local l = { nn.Linear(64, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 10) }
  return nn.Sequential(unpack(l)), l
end
local function nparams(m)
  local n = 0
  for _, p in ipairs(m:parameters()) do n = n + p:numel() end
  return n
end
local function train(m, opt, batch, steps, fwd)
  for i = 1, steps do
    ddp.manual_seed(i)
    local x, y = ddp.randn(batch, 64), ddp.randint(0, 10, { batch })
    opt:zero_grad()
    local loss = nn.functional.cross_entropy((fwd or m)(x), y)
    loss:backward()
    opt:step()
  end
end
]]

local function job(body, args, env)
  local s = jobs.script(COMMON .. body, "memsum")
  local out, err, rc = run((args or "") .. " " .. q(s), env, 120)
  assert(rc == 0, "the job failed (exit " .. tostring(rc) .. "):\n" .. err .. out)
  return out, err
end

local MiB = 1048576

describe("ddp.memory_summary", function()
  after_each(jobs.no_strays)

  it("counts parameters, gradients and AdamW's state exactly, each tensor once", function()
    local out = job [[
local m = mlp(128)
local opt = optim.AdamW(m:parameters(), { lr = 1e-3 })
local b0 = ddp.memory_breakdown()
print("before", b0.cpu.parameters, b0.cpu.gradients, b0.cpu.optimizer_state, b0.steps)
train(m, opt, 32, 3)
local b = ddp.memory_breakdown()
print("after", b.cpu.parameters, b.cpu.gradients, b.cpu.optimizer_state, opt:state_nbytes(), nparams(m) * 4, b.steps)
-- passing the model and optimizer too counts nothing twice
local b2 = ddp.memory_breakdown({ model = m, optimizer = opt })
print("given", b2.cpu.parameters, b2.cpu.gradients, b2.cpu.optimizer_state)
print("sum", b.cpu.parameters + b.cpu.gradients + b.cpu.optimizer_state + b.cpu.other + b.cpu.buffers == b.cpu.allocated)
print(ddp.memory_summary())
]]
    local n = (64 * 128 + 128 + 128 * 128 + 128 + 128 * 10 + 10) * 4
    assert.equal(("before\t%d\t0\t0\t0"):format(n), out:match("before[^\n]*"))
    local p, g, s, nb, want, steps = out:match("after\t(%d+)\t(%d+)\t(%d+)\t(%d+)\t(%d+)\t(%d+)")
    assert.equal(n, tonumber(want))
    assert.equal(n, tonumber(p))
    assert.equal(n, tonumber(g))
    assert.equal(2 * n, tonumber(s), "exp_avg and exp_avg_sq")
    assert.equal(tonumber(nb), tonumber(s), "state_nbytes agrees")
    assert.equal("2", steps, "the first of 3 steps is left out of the activations")
    assert.equal(("given\t%d\t%d\t%d"):format(n, n, 2 * n), out:match("given[^\n]*"))
    assert.truthy(out:find("sum\ttrue", 1, true))
    for _, row in ipairs { "memory of rank 0 of 1", "parameters", "gradients", "optimizer state",
                           "activations at peak", "other tensors", "allocated now", "peak allocated",
                           "allocator cache", "resident %(RSS%)" } do
      assert.truthy(out:find(row), row .. " missing from:\n" .. out)
    end
    assert.truthy(out:find("parameters%s+102 KiB"), out)  -- 104,488 bytes
  end)

  it("measures activations at peak: twice the batch about twice as much, less with checkpointing", function()
    -- each a fresh process: the breakdown is of the last steps of this one
    local function acts(batch, ckpt)
      local out = job(([[
local m, l = mlp(1024)
local opt = optim.SGD(m:parameters(), { lr = 1e-3 })
local fwd = %s and function(x)
  local h = l[1](x)
  h = ddp.checkpoint(function(t) return l[4](l[3](l[2](t))) end, h)
  return l[5](h)
end or nil
train(m, opt, %d, 6, fwd)
print("acts", ddp.memory_breakdown().cpu.activations)
]]):format(tostring(ckpt == true), batch))
      return out:match("acts\t(%d+)")
    end
    local a1, a2, ac = acts(256), acts(512), acts(512, true)
    a1, a2, ac = tonumber(a1), tonumber(a2), tonumber(ac)
    assert(a1 and a2 and ac, "no figures")
    -- batch 512 through 1024-wide layers: 2 MiB a [512, 1024] float32
    -- tensor, several of them saved for backward
    assert(a2 >= 4 * MiB and a2 <= 64 * MiB, "activations of batch 512: " .. a2)
    assert(a2 / a1 > 1.5 and a2 / a1 < 2.5, ("batch 512 / 256: %d / %d"):format(a2, a1))
    assert(ac < 0.8 * a2, ("checkpointed %d, plain %d"):format(ac, a2))
  end)

  it("gives ZeroRedundancyOptimizer's shard on each of 2 ranks, and the launcher each rank's peak", function()
    local out, err = job([[
ddp.init()
local dm = ddp.DDP((mlp(256)))
local z = ddp.ZeroRedundancyOptimizer(dm:parameters(), optim.AdamW, { lr = 1e-3 })
train(dm, z, 16, 3)
local b = ddp.memory_breakdown()
local n = nparams(dm.module) * 4
print(("rank%d\t%d\t%d\t%d\t%d"):format(ddp.rank(), b.cpu.parameters, b.cpu.gradients, b.cpu.optimizer_state, n))
if ddp.rank() == 1 then
  local big = ddp.ones(24 * 1048576 / 4)  -- 24 MiB on rank 1 alone, at its peak
  big = nil
end
ddp.barrier()
]], "--nproc 2")
    for r = 0, 1 do
      local p, g, s, n = out:match("rank" .. r .. "\t(%d+)\t(%d+)\t(%d+)\t(%d+)")
      assert(p, out)
      assert.equal(tonumber(n), tonumber(p))
      assert.equal(tonumber(n), tonumber(g))
      local share = tonumber(s) / (2 * tonumber(n))
      assert(share > 0.45 and share < 0.55, ("rank %d holds %.3f of AdamW's state"):format(r, share))
    end
    local line = err:match("ddplua: peak memory per rank: ([^\n]*)")
    assert(line, "no peak memory line in:\n" .. err)
    local function mib(s)
      local v, u = s:match("([%d.]+) (%a+)")
      return tonumber(v) * ({ B = 1 / MiB, KiB = 1 / 1024, MiB = 1, GiB = 1024 })[u]
    end
    local c0, r0 = line:match("rank 0: ([%d.]+ %a+) CPU tensors, ([%d.]+ %a+) resident")
    local c1, r1 = line:match("rank 1: ([%d.]+ %a+) CPU tensors, ([%d.]+ %a+) resident")
    assert(c0 and c1, line)
    assert(mib(c1) - mib(c0) > 20, "rank 1's 24 MiB tensor shows in its peak: " .. line)
    assert(mib(r0) > mib(c0) and mib(r1) > mib(c1), "resident above the tensors: " .. line)
  end)

  it("the launcher gives each rank's peak after a failure too", function()
    local s = jobs.script(COMMON .. [[
ddp.init()
local keep = ddp.ones(16 * 1048576 / 4)
local dm = ddp.DDP((mlp(64)))
train(dm, optim.SGD(dm:parameters(), { lr = 0.1 }), 8, 2)
ddp.barrier()
if ddp.rank() == 1 then error("rank 1 fails on purpose") end
sleep(30)
]], "memsum")
    local out, err, rc = run("--nproc 2 " .. q(s), nil, 90)
    assert(rc ~= 0, out .. err)
    assert.truthy(err:find("rank 1 fails on purpose", 1, true), err)
    local line = err:match("ddplua: peak memory per rank: ([^\n]*)")
    assert(line and line:find("rank 0: ") and line:find("rank 1: "), "no peaks after the failure:\n" .. err)
  end)

  it("refuses options it does not know, naming them", function()
    local out = job [[
local ok, e = pcall(ddp.memory_summary, { modle = 1 })
print(e)
ok, e = pcall(ddp.memory_breakdown, { model = 5 })
print(e)
ok, e = pcall(ddp.memory_summary, "all")
print(e)
]]
    assert.truthy(out:find("memory_summary: unknown option \"modle\" (expected model or optimizer)", 1, true), out)
    assert.truthy(out:find("memory_breakdown: model must be a model or a list of them, got", 1, true), out)
    assert.truthy(out:find("memory_summary: expected a table of options {model =, optimizer =}", 1, true), out)
    assert.truthy(out:find("memsum.lua:%d+:"), "errors name the user's line: " .. out)
  end)
end)
