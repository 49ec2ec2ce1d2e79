-- tests/step_stats_spec.lua: the step breakdown -- ddp.step_stats() by
-- phase in one process, and through real jobs the launcher naming a rank
-- slowed in its loader as a data straggler, its end-of-job table, and a
-- balanced job that names nobody (communication counted with the flight
-- recorder off).
local jobs = require "helpers.jobs"
local q = jobs.q

local function has(s, text) assert.truthy(s:find(text, 1, true), "no «" .. text .. "» in:\n" .. s) end
local function hasnt(s, text) assert.falsy(s:find(text, 1, true), "«" .. text .. "» in:\n" .. s) end

-- a dataset of n samples of 16 features whose get(i) sleeps `ms`
-- milliseconds on the ranks listed in SLOW_RANKS
local DATASET = [[
local nn, data = ddp.nn, ddp.data
local slow_ms = 0
for r in (os.getenv("SLOW_RANKS") or ""):gmatch("%d+") do
  if tonumber(r) == ddp.rank() then slow_ms = tonumber(os.getenv("SLOW_MS")) end
end
local Slow = {}
Slow.__index = Slow
function Slow:len() return self.n end
function Slow:get(i)
  if slow_ms > 0 then sleep(slow_ms / 1000) end
  return self.x:select(0, i), self.y:select(0, i)
end
local function dataset(n)
  ddp.manual_seed(1)
  return setmetatable({ n = n, x = ddp.randn(n, 16), y = ddp.randint(0, 4, {n}) }, Slow)
end
]]

describe("the step breakdown", function()
  after_each(jobs.no_strays)
  teardown(jobs.cleanup)

  it("splits one process's steps into data, forward, backward, optimizer and other", function()
    local s = jobs.script(DATASET .. [[
-- a layer whose forward takes 10 ms
local Slow10 = nn.Module:extend("Slow10")
function Slow10:forward(x) sleep(0.010) return x end
ddp.init()
assert(ddp.step_stats() == nil, "stats before the first step")
local model = nn.Sequential(nn.Linear(16, 8), Slow10(), nn.Linear(8, 4))
local opt = ddp.optim.SGD(model:parameters(), {lr = 0.1})
local opt2 = ddp.optim.SGD(nn.Linear(2, 2):parameters(), {lr = 0.1})  -- a second optimizer: not a step
local loader = data.DataLoader(dataset(48), {batch_size = 4})       -- 4 samples: 8 ms a batch
local bar = ddp.progress(12, {steps = true, every = 1e9})
assert(not pcall(ddp.progress, 12, {steps = "yes"}))
local n = 0
for _, x, y in loader:iter() do
  opt:zero_grad()
  local loss = nn.functional.cross_entropy(model(x), y)
  loss:backward()
  opt:step()
  opt2:step()
  sleep(0.015)   -- the loop's own work: other
  n = n + 1
  bar:update(1)
end
bar:close()
local st = ddp.step_stats()
assert(st.step == n, "steps " .. st.step .. " of " .. n)
local sum = st.data + st.forward + st.backward + st.comm + st.optimizer + st.other
assert(math.abs(sum - st.total) < 1e-9, ("phases add to %.6f, the step took %.6f"):format(sum, st.total))
local m = st.median
print(("data %.6f forward %.6f backward %.6f comm %.6f optimizer %.6f other %.6f total %.6f window %d"):format(
  m.data, m.forward, m.backward, m.comm, m.optimizer, m.other, m.total, st.window))
]], "breakdown")
    local out, err, rc = jobs.run(q(s), "SLOW_RANKS=0 SLOW_MS=2", 60)
    assert.equals(0, rc, err)
    local d, f, b, c, o, other, total, window = out:match(
      "data (%S+) forward (%S+) backward (%S+) comm (%S+) optimizer (%S+) other (%S+) total (%S+) window (%d+)")
    assert.truthy(d, out .. err)
    d, f, b, c, o, other, total = tonumber(d), tonumber(f), tonumber(b), tonumber(c), tonumber(o), tonumber(other),
                                  tonumber(total)
    -- the sleeps put a floor under each phase; the ceilings are loose (a loaded machine)
    assert.is_true(d >= 0.008 and d < 0.08, "data " .. d)
    assert.is_true(f >= 0.010 and f < 0.08, "forward " .. f)
    assert.is_true(other >= 0.015 and other < 0.1, "other " .. other)
    assert.is_true(b > 0 and b < 0.01, "backward " .. b)
    assert.is_true(o > 0 and o < 0.01, "optimizer " .. o)
    assert.equals(0, c)
    assert.is_true(total >= d + f + other, "total " .. total)
    assert.equals("12", window)
    -- the progress line's share of each phase, from the same medians
    assert.truthy(out:find("step [%d.]+ ms: data %d+%% fwd %d+%% bwd %d+%% comm 0%% opt %d+%%"), out)
  end)

  it("names a rank whose loader sleeps as a data straggler, and prints the table of phases at the end", function()
    local s = jobs.script(DATASET .. [[
ddp.init()
local model = ddp.DDP(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)))
local opt = ddp.optim.SGD(model:parameters(), {lr = 0.1})
local ds = dataset(2400)   -- 240 steps a rank: about 7 s
local loader = data.DataLoader(ds, {batch_size = 5, sampler = data.DistributedSampler(ds)})
for _, x, y in loader:iter() do
  opt:zero_grad()
  nn.functional.cross_entropy(model(x), y):backward()
  opt:step()
end
local m = ddp.step_stats().median
print(("rank %d data %.4f comm %.4f"):format(ddp.rank(), m.data, m.comm))
]], "straggler")
    local out, err, rc = jobs.run("--nproc 2 " .. q(s), "SLOW_RANKS=1 SLOW_MS=6", 60)
    assert.equals(0, rc, err)
    -- 5 samples of 6 ms: rank 1 spends 30 ms a step on data; rank 0 waits for it
    has(err, "ddplua: rank 1 is a straggler: ")
    has(err, "most of the difference is data: ")
    hasnt(err, "rank 0 is a straggler")
    local d1 = tonumber(out:match("rank 1 data (%S+)"))
    local c0 = tonumber(out:match("rank 0 data %S+ comm (%S+)"))
    assert.is_true(d1 >= 0.03, "rank 1's data wait " .. tostring(d1) .. "\n" .. out)
    assert.is_true(c0 >= 0.02, "rank 0's communication " .. tostring(c0) .. "\n" .. out)
    has(err, "ddplua: where the step time went (2 of 2 ranks, ")
    assert.truthy(err:find("\n  data +[%d.]+ +[%d.]+ %(rank 1%)"), err)
    assert.truthy(err:find("\n  communication +[%d.]+ +[%d.]+ %(rank 0%)"), err)
    assert.truthy(err:find("\n  step +[%d.]+ +[%d.]+ %(rank %d%) +100%%"), err)
  end)

  it("names nobody in a balanced job, and counts communication with the flight recorder off", function()
    local s = jobs.script(DATASET .. [[
ddp.init()
local model = ddp.DDP(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)))
local opt = ddp.optim.SGD(model:parameters(), {lr = 0.1})
local ds = dataset(200)
local loader = data.DataLoader(ds, {batch_size = 5, sampler = data.DistributedSampler(ds)})
local comm = 0
for _ = 1, 100 do   -- 2000 steps
  for _, x, y in loader:iter() do
    opt:zero_grad()
    nn.functional.cross_entropy(model(x), y):backward()
    opt:step()
    comm = comm + ddp.step_stats().comm
  end
end
-- a blocking collective alone (no DDP), rank 1 late to it: rank 0 waits
local plain = nn.Linear(16, 4)
local opt2 = ddp.optim.SGD(plain:parameters(), {lr = 0.1})
local x = ddp.randn(5, 16)
local blocking = 0
for _ = 1, 20 do
  if ddp.rank() == 1 then sleep(0.005) end
  ddp.all_reduce(plain(x):sum():detach())
  opt2:step()   -- from its second step on, its steps end the steps: the first steps no more
  blocking = blocking + ddp.step_stats().comm
end
print(("rank %d comm %.6f blocking %.6f"):format(ddp.rank(), comm, blocking))
]], "balanced")
    local out, err, rc = jobs.run("--nproc 2 " .. q(s), "SLOW_RANKS= DDP_FLIGHT_ENTRIES=0", 60)
    assert.equals(0, rc, err)
    hasnt(err, "straggler")
    has(err, "ddplua: where the step time went (2 of 2 ranks, ")
    for r = 0, 1 do
      local c = tonumber(out:match("rank " .. r .. " comm (%S+)"))
      assert.is_true(c and c > 0, "rank " .. r .. " counted no communication:\n" .. out)
    end
    local waited = tonumber(out:match("rank 0 comm %S+ blocking (%S+)"))
    assert.is_true(waited >= 0.06, "rank 0 waited " .. tostring(waited) .. " s for rank 1:\n" .. out)
  end)
end)
