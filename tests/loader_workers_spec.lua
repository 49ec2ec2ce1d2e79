-- DataLoader workers (num_workers > 0): threads with a Lua state each.
-- Batches are bit for bit those of num_workers = 0 for any worker count
-- (augmentations drawn from (seed, epoch, index)); a script's own dataset
-- class travels into the workers; resume with batches in flight lands on
-- the same next batch; the prefetch is bounded; a worker's error names the
-- worker, batch and sample with the user's traceback; a stuck worker is
-- named after timeout; Ctrl-C ends a job with workers at once; stats()
-- measures the data wait.
local ddp = require "ddp"
local data = require "ddp.data"
local sample_rng = require "ddp.data.sample_rng"
local jobs = require "helpers.jobs"

local fails = require("helpers.fails").located("loader_workers_spec.lua")

-- A dataset class written in this file (not a module): its methods travel
-- to the workers by value, with their upvalues (sample_rng, a local
-- function, a module).
local function jitter(x, amount) return x + amount * sample_rng.uniform(-1, 1) end
local Noisy = {}
Noisy.__index = Noisy
local function noisy(n, extra)
  local self = setmetatable({ n = n, base = ddp.arange(n * 3):float():view(n, 3) }, Noisy)
  for k, v in pairs(extra or {}) do self[k] = v end
  return self
end
function Noisy:len() return self.n end
function Noisy:get(i)
  if i == self.bad then error("cannot read sample " .. i) end
  if i == self.slow then
    local t = os.clock()
    while os.clock() - t < self.slow_s do end
  end
  if self.delay then
    local t = os.clock()
    while os.clock() - t < self.delay do end
  end
  if self.count then self.count:add_(1) end
  local x = self.base:narrow(0, i, 1):squeeze(0)
  return jitter(x, 0.5), i % 4, sample_rng.randint(0, 1000)
end

local function collect(loader, limit)
  local out = {}
  for i, x, y, r in loader:iter() do
    out[#out + 1] = { i = i, x = x:totable(), y = y and y:totable(), r = r and r:totable() }
    if limit and #out >= limit then break end
  end
  return out
end

describe("DataLoader workers", function()
  it("give the batches of num_workers = 0, bit for bit, for any worker count and epoch", function()
    local ds = noisy(37)
    local function epochs(nw)
      local l = data.DataLoader(ds, { batch_size = 5, shuffle = true, seed = 11, num_workers = nw })
      return { collect(l), collect(l) }
    end
    local ref = epochs(0)
    assert.equals(8, #ref[1])
    assert.are_not.same(ref[1], ref[2])          -- a new order and new augmentations per epoch
    for _, nw in ipairs { 1, 2, 3 } do assert.same(ref, epochs(nw)) end
  end)

  it("draw each sample's augmentation from (seed, epoch, index), not from the worker or the order", function()
    local ds = noisy(12)
    local a = collect(data.DataLoader(ds, { batch_size = 12, seed = 3 }))[1]
    local b = collect(data.DataLoader(ds, { batch_size = 12, seed = 3, num_workers = 2 }))[1]
    local c = collect(data.DataLoader(ds, { batch_size = 12, seed = 4 }))[1]
    assert.same(a.x, b.x)
    assert.are_not.same(a.x, c.x)
    -- the same sample in a shuffled order gets the same jitter as in order
    local s = data.DataLoader(ds, { batch_size = 12, shuffle = true, seed = 3 })
    local sh = collect(s)[1]
    local idx = s.sampler:indices(0):totable()
    local first = sh.x[1]
    assert.same(a.x[idx[1] + 1], first)
  end)

  it("run ddp.data.transforms in the workers with the augmentations of num_workers = 0", function()
    local T = require "ddp.data.transforms"
    local tf = T.Compose { T.RandomResizedCrop(24), T.RandomHorizontalFlip(), T.ColorJitter { brightness = 0.4 },
                           T.ToDtype("float32", { scale = true }), T.Normalize({ 0.5, 0.5, 0.5 }, { 0.2, 0.2, 0.2 }) }
    local Images = {}
    Images.__index = Images
    function Images:len() return 48 end
    function Images:get(i)
      return self.tf((ddp.arange(3 * 40 * 50):view(3, 40, 50) + i * 7):remainder(256):to("uint8")), i
    end
    local ds = setmetatable({ tf = tf }, Images)
    local function run(nw)
      local out = {}
      for _, x in data.DataLoader(ds, { batch_size = 8, shuffle = true, seed = 3, num_workers = nw }):iter() do
        out[#out + 1] = x
      end
      return out
    end
    local a, b = run(0), run(3)
    assert.equals(6, #b)
    assert.same({ 8, 3, 24, 24 }, b[1]:shape())
    for k = 1, #a do assert.is_true(a[k]:equal(b[k]), "batch " .. k) end
  end)

  it("share a memory-mapped NpyDataset with the workers, not copy it", function()
    local path = os.tmpname() .. ".npy"
    data.save_npy(path, ddp.arange(120):float():view(40, 3))
    local ds = data.NpyDataset(path)
    local ref = collect(data.DataLoader(ds, { batch_size = 6, shuffle = true, seed = 2 }))
    local l = data.DataLoader(ds, { batch_size = 6, shuffle = true, seed = 2, num_workers = 2 })
    local got = {}
    for i, x in l:iter() do got[#got + 1] = x:totable() end
    assert.equals(#ref, #got)
    for k = 1, #ref do assert.same(ref[k].x, got[k]) end
    os.remove(path)
  end)

  it("start a loop again after break, and keep persistent workers between passes", function()
    local ds = noisy(40)
    local ref = collect(data.DataLoader(ds, { batch_size = 4, shuffle = true, seed = 1 }))
    for _, persistent in ipairs { false, true } do
      local l = data.DataLoader(ds, { batch_size = 4, shuffle = true, seed = 1, num_workers = 2,
                                      persistent_workers = persistent })
      collect(l, 3)  -- left with break: epoch 0 again
      local pool = l._pool
      assert.same(ref, collect(l))
      if persistent then assert.equals(pool, l._pool) else assert.is_nil(l._pool) end
      l:shutdown_workers()
    end
  end)

  it("resume on the very next batch with batches in flight", function()
    local ds = noisy(60)
    local opts = { batch_size = 4, shuffle = true, seed = 7, num_workers = 2, prefetch_factor = 4 }
    local ref = collect(data.DataLoader(ds, opts))
    local l = data.DataLoader(ds, opts)
    local seen = collect(l, 5)  -- 5 handed out, up to 8 more made ahead
    assert.same({ ref[1], ref[2], ref[3], ref[4], ref[5] }, seen)
    local sd = l:state_dict()
    assert.equals(5, sd.batches)
    l:shutdown_workers()
    local resumed = data.DataLoader(ds, opts)
    resumed:load_state_dict(sd)
    local rest = collect(resumed)
    assert.equals(#ref - 5, #rest)
    assert.same(ref[6], rest[1])
    assert.equals(5, rest[1].i)
  end)

  it("keep at most prefetch_factor x num_workers batches ahead of the loop", function()
    -- the count tensor is shared by the worker's copy of the dataset
    local count = ddp.zeros(1)
    local ds = noisy(200, { count = count })
    local l = data.DataLoader(ds, { batch_size = 2, num_workers = 1, prefetch_factor = 3 })
    local it = l:iter()
    it()
    local t = os.clock()
    while os.clock() - t < 0.3 do end
    -- the batch handed out, and three more at most
    local made = count:item()
    assert.is_true(made <= 2 * (1 + 3), "samples made: " .. made)
    assert.is_true(made >= 2 * 2, "samples made: " .. made)
    l:shutdown_workers()
  end)

  it("stop on a worker's error, naming the worker, the batch, the sample and the user's line", function()
    local l = data.DataLoader(noisy(30, { bad = 13 }), { batch_size = 4, num_workers = 2 })
    local ok, err = pcall(collect, l)
    assert.is_false(ok)
    err = tostring(err)
    assert.truthy(err:find("DataLoader worker %d %(of 2%), batch 3 of epoch 0, sample 13: "), err)
    assert.truthy(err:find("loader_workers_spec.lua:%d+: cannot read sample 13"), err)
    assert.truthy(err:find("in function 'get'", 1, true), err)
    assert.is_nil(err:find("worker_main.lua", 1, true), err)
    -- the loader works again after the error: a new pass starts new workers
    assert.equals(0, #collect(data.DataLoader(noisy(0), { batch_size = 4, num_workers = 2 })))
  end)

  it("name a worker stuck past timeout, with its batch and sample", function()
    local l = data.DataLoader(noisy(30, { slow = 9, slow_s = 2 }), { batch_size = 4, num_workers = 2, timeout = 0.5 })
    fails(function() collect(l) end,
          "has been making batch 2 of epoch 0 for", "now at sample 9, more than timeout = 0.5 s")
  end)

  it("refuse a dataset that cannot travel to a worker, naming where it sits", function()
    local fh = assert(io.open("/dev/null"))
    fails(function() data.DataLoader(noisy(4, { cache = { fh = fh } }), { num_workers = 1 }):iter() end,
          "num_workers = 1 needs the dataset in each worker thread", "dataset.cache.fh: an open file")
    fh:close()
  end)

  it("run worker_init_fn with the worker id in each worker", function()
    local ds = noisy(8, { seen = ddp.zeros(4) })
    local l = data.DataLoader(ds, { batch_size = 2, num_workers = 3,
                                    worker_init_fn = function(id) ds.seen:narrow(0, id, 1):add_(1) end })
    collect(l)
    assert.same({ 1, 1, 1, 0 }, ds.seen:totable())
  end)

  it("tell a worker its id, the worker count and its dataset copy (get_worker_info), nil in the loop", function()
    assert.is_nil(data.get_worker_info())
    local Info = {}
    Info.__index = Info
    function Info:len() return 12 end
    function Info:get(i)
      local w = data.get_worker_info()
      assert(rawequal(w.dataset, self), "the worker's dataset is its own copy")
      return ddp.tensor({ w.id, w.num_workers, i })
    end
    local l = data.DataLoader(setmetatable({}, Info), { batch_size = 3, num_workers = 2 })
    local n = 0
    for _, x in l:iter() do
      for _, row in ipairs(x:totable()) do
        assert.equals(2, row[2])
        assert.truthy(row[1] == 0 or row[1] == 1, row[1])  -- which worker takes a batch is up to the queue
        n = n + 1
      end
    end
    assert.equals(12, n)
  end)

  it("refuse from_blob inside a worker, naming the fix", function()
    local Blob = {}
    Blob.__index = Blob
    function Blob:len() return 4 end
    function Blob:get(i)
      local ffi = require "ffi"
      local buf = ffi.new("float[2]", i, i)
      return ddp.from_blob(buf, { 2 }, { dtype = "float32" }), i
    end
    local ok, err = pcall(collect, data.DataLoader(setmetatable({}, Blob), { batch_size = 2, num_workers = 1 }))
    assert.is_false(ok)
    assert.truthy(tostring(err):find("cannot be wrapped in a DataLoader worker thread", 1, true), tostring(err))
  end)

  it("check the worker options", function()
    local ds = noisy(4)
    fails(function() data.DataLoader(ds, { num_workers = -1 }) end, "num_workers must be an integer from 0 to 256")
    fails(function() data.DataLoader(ds, { prefetch_factor = 2 }) end, "prefetch_factor is for num_workers > 0")
    fails(function() data.DataLoader(ds, { num_workers = 1, prefetch_factor = 0 }) end,
          "prefetch_factor must be a positive integer")
    fails(function() data.DataLoader(ds, { persistent_workers = true }) end, "needs num_workers > 0")
    fails(function() data.DataLoader(ds, { num_workers = 1, timeout = -1 }) end, "timeout must be a number")
    fails(function() data.DataLoader(ds, { num_workers = 1, worker_init_fn = 3 }) end, "worker_init_fn must be")
  end)

  it("measure how long the loop waited for its batches", function()
    local l = data.DataLoader(noisy(8, { delay = 0.02 }), { batch_size = 2 })
    collect(l)
    local s = l:stats()
    assert.equals(4, s.batches)
    assert.is_true(s.wait_s > 0 and s.wait_s <= s.total_s + 1e-9)
    assert.is_true(s.wait_fraction > 0.5, "the loop did nothing else: " .. s.wait_fraction)
    l:stats({ reset = true })
    assert.equals(0, l:stats().batches)
  end)

  it("show the data wait in the progress line and warn at the end of a job that waited for data", function()
    local s = jobs.script([[
local data = require "ddp.data"
ddp.init()
local DS = {}
DS.__index = DS
function DS:len() return 80 end
function DS:get(i) local t = os.clock() while os.clock() - t < SLOW do end return ddp.tensor({ i }), i end
local l = data.DataLoader(setmetatable({}, DS), { batch_size = 2, sampler = data.DistributedSampler(80) })
local bar = ddp.progress(#l, { loader = l, every = 0 })
for i, x in l:iter() do bar:update(1) end
bar:close()
]], "data_wait")
    local slow = s .. ".slow.lua"
    jobs.sh("sed 's/SLOW/0.003/' " .. jobs.q(s) .. " > " .. jobs.q(slow))
    local out, err, rc = jobs.run("--nproc 2 " .. jobs.q(slow), nil, 60)
    assert.equals(0, rc, err)
    assert.truthy(out:find("%[0%] 100%%  40/40 it  [%d-]+ it/s  data %d+%%  in"), out)
    assert.truthy(err:find("ddplua: 2 of 2 ranks spent more than 10% of the training loop waiting for data (rank ",
                           1, true), err)
    assert.truthy(err:find("give the DataLoader more workers", 1, true), err)
    local fast = s .. ".fast.lua"
    jobs.sh("sed 's/SLOW/0/; s/bar:update(1)/local t = os.clock() while os.clock() - t < 0.01 do end bar:update(1)/' "
            .. jobs.q(s) .. " > " .. jobs.q(fast))
    out, err, rc = jobs.run("--nproc 2 " .. jobs.q(fast), nil, 60)
    assert.equals(0, rc, err)
    assert.is_nil(err:find("waiting for data", 1, true), err)
    os.remove(slow)
    os.remove(fast)
  end)

  it("warn once when worker threads oversubscribe the cores", function()
    local s = jobs.script([[
local data = require "ddp.data"
local l = data.DataLoader(data.TensorDataset(ddp.arange(8)), { batch_size = 2, num_workers = 3 })
for _ = 1, 2 do for i, x in l:iter() do end end
]], "budget")
    local _, err, rc = jobs.run("--nproc 2 " .. jobs.q(s), "DDPLUA_NUM_THREADS=1", 60)
    assert.equals(0, rc, err)
    local _, n = err:gsub("DataLoader: num_workers = 3 beside 1 compute thread in each of 2 ranks: 8 busy threads", "")
    assert.equals(1, n, err)
  end)

  it("pin batches in the workers with pin_memory (CUDA emulator)", function()
    local s = jobs.script([[
local data = require "ddp.data"
local DS = {} DS.__index = DS
function DS:len() return 20 end
function DS:get(i) return ddp.full({ 4 }, i), i end
for _, nw in ipairs { 0, 2 } do
  local l = data.DataLoader(setmetatable({}, DS), { batch_size = 4, num_workers = nw, pin_memory = true })
  local sum = 0
  for i, x, y in l:iter() do
    assert(x:is_pinned() and y:is_pinned(), "a batch not in page-locked memory")
    sum = sum + x:cuda({ non_blocking = true }):sum():item()
  end
  print(nw, sum)
end
]], "pinned")
    local out, err, rc = jobs.run(jobs.q(s), "DDPLUA_CUDA_EMU=1 DDPLUA_NUM_THREADS=1", 120)
    assert.equals(0, rc, err)
    assert.equals("0\t760\n2\t760\n", out)
  end)

  it("end every worker of a job at once on Ctrl-C", function()
    local s = jobs.script([[
local data = require "ddp.data"
local DS = {}
DS.__index = DS
function DS:len() return 1000000 end
-- (busy: the script's ffi.cdef of poll is not the worker's)
function DS:get(i) local t = os.clock() while os.clock() - t < 0.01 do end return ddp.tensor({ i }), i end
local l = data.DataLoader(setmetatable({}, DS), { batch_size = 2, num_workers = 2 })
for i, x in l:iter() do if i == 2 then io.stderr:write("running\n") end end
]], "ctrlc_workers")
    local res = jobs.tempname()
    jobs.sh("(" .. jobs.CLEAN .. " timeout 60 " .. jobs.q(jobs.ddplua) .. " --nproc 2 " .. jobs.q(s) .. " >/dev/null 2>"
      .. jobs.q(res .. ".err") .. " & echo $! >" .. jobs.q(res) .. "; wait $!; echo $? >" .. jobs.q(res .. ".rc")
      .. ") >/dev/null 2>&1 &")
    for _ = 1, 200 do
      local e = jobs.slurp(res .. ".err") or ""
      if select(2, e:gsub("running", "")) >= 2 then break end
      os.execute("sleep 0.05")
    end
    local launcher = tonumber(jobs.sh("pgrep -P " .. tonumber(jobs.slurp(res))):match("%d+"))
    local t0 = os.time()
    os.execute("kill -INT " .. launcher)
    for _ = 1, 100 do
      if jobs.slurp(res .. ".rc") then break end
      os.execute("sleep 0.1")
    end
    assert.equals("130", (jobs.slurp(res .. ".rc") or ""):match("%d+"), jobs.slurp(res .. ".err"))
    assert.is_true(os.time() - t0 <= 5)
    jobs.no_strays()
  end)
end)
