-- data.DistributedSampler and data.reduce_metrics: every rank's list
-- without shuffling equals PyTorch 1.13's (tests/golden/sampler_cases.lua,
-- from tests/golden/make_sampler.py); shuffled epochs partition the dataset
-- (with PyTorch's padding), change by themselves from pass to pass, agree
-- across ranks and replay with set_epoch; eval mode sees every sample once;
-- errors name the option at the caller's line; and one `ddplua --nproc 3`
-- job checks the partition and the metric sums through the process group.
local ddp = require "ddp"
local data = require "ddp.data"

local jobs = require "helpers.jobs"
local q, run = jobs.q, jobs.run

local cases = dofile("tests/golden/sampler_cases.lua")

-- f (written in this file) must raise an error located in this file whose
-- message holds every string given (plain text).
local fails = require("helpers.fails").located("sampler_spec.lua")

local function samplers(n, w, opts)
  local out = {}
  for r = 0, w - 1 do
    local o = { num_replicas = w, rank = r }
    for k, v in pairs(opts or {}) do o[k] = v end
    out[r + 1] = data.DistributedSampler(n, o)
  end
  return out
end

-- index -> how many times it occurs in the lists
local function counts(lists)
  local c = {}
  for _, l in ipairs(lists) do
    for _, i in ipairs(l) do c[i] = (c[i] or 0) + 1 end
  end
  return c
end

local function lists_of(ss, epoch)
  local out = {}
  for r, s in ipairs(ss) do out[r] = s:list(epoch) end
  return out
end

-- The epoch's whole list (the order every rank cuts from), as a world of
-- one with the same seed sees it.
local function whole(n, seed, epoch)
  return data.DistributedSampler(n, { num_replicas = 1, rank = 0, seed = seed }):list(epoch)
end

local loaders = require "helpers.loaders"
local index_dataset = loaders.index_dataset
-- every x of one pass, in order
local function pass(loader) return (loaders.pass(loader)) end

describe("DistributedSampler", function()
  it("hands every rank what PyTorch's DistributedSampler does (shuffle = false)", function()
    assert.is_true(#cases >= 200)
    local seen_big_pad, seen_zero, seen_small = false, false, false
    for _, c in ipairs(cases) do
      local what = ("n = %d, W = %d, drop_last = %s"):format(c.n, c.W, tostring(c.drop_last))
      for r = 0, c.W - 1 do
        local s = data.DistributedSampler(c.n, { num_replicas = c.W, rank = r, shuffle = false,
                                                 drop_last = c.drop_last })
        assert.are.equal(c.len, #s, what)
        assert.are.equal(c.len, s:len(), what)
        assert.are.same(c.ranks[r + 1], s:list(), what .. ", rank " .. r)
        assert.are.same(c.ranks[r + 1], s:indices(0), what .. ", rank " .. r)
        local t = s:tensor(0)
        assert.are.equal("int64", t:dtype())
        assert.are.same({ c.len }, t:shape())
        assert.are.same(c.ranks[r + 1], t:totable(), what .. ", rank " .. r)
      end
      seen_zero = seen_zero or c.n == 0
      seen_small = seen_small or (c.n > 0 and c.n < c.W)
      seen_big_pad = seen_big_pad or (not c.drop_last and c.len * c.W - c.n > c.n)
    end
    assert.is_true(seen_zero and seen_small and seen_big_pad)
  end)

  it("takes a dataset as well as a number", function()
    local s = data.DistributedSampler(index_dataset(7), { num_replicas = 2, rank = 1, shuffle = false })
    assert.are.same({ 1, 3, 5, 0 }, s:list())
  end)

  it("defaults to the process group's world size and rank", function()
    local s = data.DistributedSampler(10)
    assert.are.equal(ddp.world_size(), s.num_replicas)
    assert.are.equal(ddp.rank(), s.rank)
    assert.is_true(s.shuffle)
    assert.are.equal(0, s.seed)
    assert.are.equal(0, s:epoch())
  end)

  describe("with shuffle", function()
    it("partitions the dataset every epoch when W divides n", function()
      local ss = samplers(120, 4, { seed = 5 })
      for epoch = 0, 3 do
        local c = counts(lists_of(ss, epoch))
        for i = 0, 119 do assert.are.equal(1, c[i], "index " .. i .. " in epoch " .. epoch) end
        for _, s in ipairs(ss) do assert.are.equal(30, #s:list(epoch)) end
      end
    end)

    it("pads by repeating the epoch's list from its start, as PyTorch does", function()
      for _, nw in ipairs { { 10, 3 }, { 101, 8 }, { 2, 7 }, { 1, 5 }, { 5, 13 } } do
        local n, w = nw[1], nw[2]
        local ss = samplers(n, w, { seed = 9 })
        local m = math.ceil(n / w)
        for epoch = 0, 2 do
          local perm = whole(n, 9, epoch)
          local lists = lists_of(ss, epoch)
          -- position r + j * w of the padded list is perm[(r + j * w) % n]
          for r = 0, w - 1 do
            assert.are.equal(m, #lists[r + 1])
            for j = 0, m - 1 do
              assert.are.equal(perm[(r + j * w) % n + 1], lists[r + 1][j + 1])
            end
          end
          -- the union covers the dataset; the counts add up to m * w
          local c, total = counts(lists), 0
          for i = 0, n - 1 do
            assert.is_true((c[i] or 0) >= 1)
            total = total + c[i]
          end
          assert.are.equal(m * w, total)
        end
      end
    end)

    it("drops the tail with drop_last: no index twice", function()
      local ss = samplers(103, 4, { seed = 2, drop_last = true })
      local c, total = counts(lists_of(ss, 1)), 0
      for _, k in pairs(c) do
        assert.are.equal(1, k)
        total = total + k
      end
      assert.are.equal(100, total)
      assert.are.equal(25, #ss[1])
    end)

    it("cuts one order per epoch, the same on every rank, a RandomSampler's", function()
      local n, w = 50, 3
      local ss = samplers(n, w, { seed = 77 })
      for epoch = 0, 2 do
        local perm = data.RandomSampler(n, { seed = 77 }):indices(epoch):totable()
        assert.are.same(perm, whole(n, 77, epoch))
        -- interleaving the ranks' lists gives back the one order
        local lists = lists_of(ss, epoch)
        for k = 0, n - 1 do
          assert.are.equal(perm[k + 1], lists[k % w + 1][math.floor(k / w) + 1])
        end
      end
      assert.are_not.same(whole(n, 77, 0), whole(n, 78, 0))
    end)

    it("changes the order each pass over itself, without set_epoch", function()
      local s = data.DistributedSampler(40, { num_replicas = 2, rank = 1, seed = 3 })
      local passes = {}
      for e = 1, 3 do
        assert.are.equal(e - 1, s:epoch())
        local got = {}
        for i in s:iter() do got[#got + 1] = i end
        assert.are.same(s:list(e - 1), got)
        passes[e] = got
      end
      assert.are.equal(3, s:epoch())
      assert.are_not.same(passes[1], passes[2])
      assert.are_not.same(passes[2], passes[3])
      -- list() and indices() only look: the epoch stays
      s:list()
      s:indices()
      assert.are.equal(3, s:epoch())
      -- a loop left with break does not advance; set_epoch meanwhile wins
      s:set_epoch(0)
      for _ in s:iter() do break end
      assert.are.equal(0, s:epoch())
      for _ in s:iter() do s:set_epoch(7) end
      assert.are.equal(7, s:epoch())
    end)

    it("replays epoch e after set_epoch(e)", function()
      local s = data.DistributedSampler(64, { num_replicas = 4, rank = 2, seed = 11 })
      local e0, e1 = s:list(), s:list(1)
      for _ in s:iter() do end
      assert.are.same(e1, s:list())
      s:set_epoch(0)
      assert.are.same(e0, s:list())
      s:set_epoch(1)
      local got = {}
      for i in s:iter() do got[#got + 1] = i end
      assert.are.same(e1, got)
      assert.is_true(s:tensor(5):equal(data.DistributedSampler(64, { num_replicas = 4, rank = 2, seed = 11 })
                                          :tensor(5)))
    end)
  end)

  describe("under a DataLoader", function()
    it("gives each pass a new order, the sampler's epoch driving it", function()
      local s = data.DistributedSampler(30, { num_replicas = 3, rank = 0, seed = 4 })
      local l = data.DataLoader(index_dataset(30), { batch_size = 4, sampler = s })
      assert.are.equal(3, #l)
      assert.are.equal(0, l:epoch())
      local p0 = pass(l)
      assert.are.same(s:list(0), p0)
      assert.are.equal(1, l:epoch())
      assert.are.equal(1, s:epoch())
      local p1 = pass(l)
      assert.are.same(s:list(1), p1)
      assert.are_not.same(p0, p1)
      assert.are.equal(2, s:epoch())
    end)

    it("takes set_epoch through the loader or the sampler, one epoch for both", function()
      local s = data.DistributedSampler(30, { num_replicas = 3, rank = 2, seed = 4 })
      local l = data.DataLoader(index_dataset(30), { batch_size = 4, sampler = s })
      l:set_epoch(5)
      assert.are.equal(5, s:epoch())
      assert.are.same(s:list(5), pass(l))
      s:set_epoch(2)
      assert.are.equal(2, l:epoch())
      assert.are.same(s:list(2), pass(l))
      assert.are.equal(3, l:epoch())
      -- iterating the sampler itself counts as a pass too
      for _ in s:iter() do end
      assert.are.equal(4, l:epoch())
      -- break leaves the epoch; set_epoch during a pass is kept
      for i in l:iter() do break end
      assert.are.equal(4, l:epoch())
      for i in l:iter() do if i == 0 then s:set_epoch(9) end end
      assert.are.equal(9, l:epoch())
      assert.truthy(tostring(l):find("epoch 9", 1, true))
    end)
  end)

  describe("state_dict", function()
    local serialize = require "ddp.serialize"
    local function through_text(sd) return assert(serialize.decode(serialize.encode(sd))) end

    it("resumes its own iter() mid-pass and at boundaries, the seed and epoch restored", function()
      local function make(seed) return data.DistributedSampler(37, { num_replicas = 3, rank = 1, seed = seed }) end
      local ref = make(4)
      local want = {}
      for _ = 1, 3 do for i in ref:iter() do want[#want + 1] = i end end
      for _, stop in ipairs { { 0, 0 }, { 0, 5 }, { 1, 12 }, { 1, 13 }, { 2, 0 } } do
        local e, k = stop[1], stop[2]
        local s = make(4)
        local got = {}
        for _ = 1, e do for i in s:iter() do got[#got + 1] = i end end
        if k > 0 then
          local j = 0
          for i in s:iter() do
            got[#got + 1], j = i, j + 1
            if j == k then break end
          end
        end
        local sd = through_text(s:state_dict())
        assert.are.same({ e, k }, { sd.epoch, sd.samples })
        local s2 = make(77)  -- the state's seed wins
        s2:load_state_dict(sd)
        assert.are.equal(4, s2.seed)
        while s2:epoch() < 3 do for i in s2:iter() do got[#got + 1] = i end end
        assert.are.same(want, got, ("stop at epoch %d index %d"):format(e, k))
      end
      assert.are.same({ epoch = 0, samples = 0, seed = 4, shuffle = true, drop_last = false, eval = false,
                        num_replicas = 3, dataset_len = 37 }, make(4):state_dict())
    end)

    it("under a DataLoader: the loader holds it and resumes mid-epoch on every rank", function()
      local n, w, bs = 50, 3, 4
      for r = 0, w - 1 do
        local function make(seed)
          local s = data.DistributedSampler(n, { num_replicas = w, rank = r, seed = seed })
          return data.DataLoader(index_dataset(n), { batch_size = bs, sampler = s }), s
        end
        local ref = make(6)
        local want = {}
        for _ = 1, 3 do for _, v in ipairs(pass(ref)) do want[#want + 1] = v end end
        local l = make(6)
        local got = pass(l)
        for i, x in l:iter() do
          for _, v in ipairs(x:totable()) do got[#got + 1] = v end
          if i == 2 then break end
        end
        local sd = l:state_dict()
        assert.are.same({ 1, 3, 1 }, { sd.epoch, sd.batches, sd.sampler.epoch })
        local l2, s2 = make(0)
        l2:load_state_dict(through_text(sd))
        assert.are.equal(1, s2:epoch())
        while l2:epoch() < 3 do for _, v in ipairs(pass(l2)) do got[#got + 1] = v end end
        assert.are.same(want, got, "rank " .. r)
      end
    end)

    it("takes another world size at an epoch boundary, and refuses it mid-epoch", function()
      local function loader(w, r)
        local s = data.DistributedSampler(40, { num_replicas = w, rank = r, seed = 2 })
        return data.DataLoader(index_dataset(40), { batch_size = 5, sampler = s }), s
      end
      local l = loader(2, 0)
      pass(l)
      local boundary = l:state_dict()
      for i in l:iter() do if i == 0 then break end end
      local mid = l:state_dict()
      -- at the boundary each rank of the new world takes its cut of the next epoch
      for r = 0, 3 do
        local l4, s4 = loader(4, r)
        l4:load_state_dict(boundary)
        assert.are.equal(1, l4:epoch())
        assert.are.same(s4:list(1), pass(l4))
        assert.are.same(data.DistributedSampler(40, { num_replicas = 4, rank = r, seed = 2 }):list(1), s4:list(1))
      end
      fails(function() loader(4, 0):load_state_dict(mid) end,
            "DataLoader:load_state_dict: the state was saved 1 batch into epoch 1 by a world of 2 ranks, "
            .. "and this sampler has num_replicas = 4: a different world size can resume only from a checkpoint "
            .. "saved at an epoch boundary")
      local s = data.DistributedSampler(40, { num_replicas = 2, rank = 0 })
      for _ in s:iter() do break end
      fails(function() data.DistributedSampler(40, { num_replicas = 4, rank = 0 }):load_state_dict(s:state_dict()) end,
            "DistributedSampler:load_state_dict: the state was saved 1 index into epoch 0 by a world of 2 ranks")
      fails(function() data.DistributedSampler(40, { num_replicas = 2, rank = 0, shuffle = false }):load_state_dict(s:state_dict()) end,
            "with shuffle = true, and this sampler has shuffle = false")
      fails(function() s:load_state_dict({ epoch = 0, samples = 0 }) end,
            "DistributedSampler:load_state_dict: the state's seed must be an integer from 0 to 2^53 - 1, got nil")
      -- mid-epoch, a state that cannot show its cut (fields dropped) is refused, naming the field
      for _, k in ipairs { "num_replicas", "dataset_len" } do
        local sd = s:state_dict()
        sd[k] = nil
        fails(function() data.DistributedSampler(40, { num_replicas = 2, rank = 0 }):load_state_dict(sd) end,
              "the state was saved 1 index into epoch 0 but holds no " .. k)
        local lsd = l:state_dict()
        lsd.sampler[k] = nil
        fails(function() loader(2, 0):load_state_dict(lsd) end, "but holds no " .. k)
      end
      local lsd = l:state_dict()
      lsd.sampler = nil
      fails(function() loader(2, 0):load_state_dict(lsd) end,
            "the state was saved 1 batch into epoch 1 but holds no sampler state, and this loader's DistributedSampler needs it")
    end)
  end)

  describe("with eval = true", function()
    it("gives every sample to exactly one rank, in order, without padding", function()
      for _, nw in ipairs { { 10, 3 }, { 9, 3 }, { 2, 5 }, { 0, 4 }, { 101, 8 }, { 1, 1 } } do
        local n, w = nw[1], nw[2]
        local ss = samplers(n, w, { eval = true })
        local lists = lists_of(ss)
        local c, total, lo, hi = counts(lists), 0, math.huge, -1
        for i = 0, n - 1 do assert.are.equal(1, c[i]) end
        for r, l in ipairs(lists) do
          assert.are.equal(#l, #ss[r])
          total = total + #l
          lo, hi = math.min(lo, #l), math.max(hi, #l)
          for j, i in ipairs(l) do assert.are.equal((r - 1) + (j - 1) * w, i) end
        end
        assert.are.equal(n, total)
        assert.is_true(hi - lo <= 1)
      end
      assert.are.same({ 1, 4, 7 }, data.DistributedSampler(10, { num_replicas = 3, rank = 1, eval = true }):list())
      assert.are.same({ 2, 5, 8 }, data.DistributedSampler(10, { num_replicas = 3, rank = 2, eval = true }):list())
    end)

    it("shuffles only when asked, still without padding", function()
      local ss = samplers(23, 4, { eval = true, shuffle = true, seed = 8 })
      for epoch = 0, 1 do
        local perm = whole(23, 8, epoch)
        local lists = lists_of(ss, epoch)
        local c = counts(lists)
        for i = 0, 22 do assert.are.equal(1, c[i]) end
        for k = 0, 22 do assert.are.equal(perm[k + 1], lists[k % 4 + 1][math.floor(k / 4) + 1]) end
      end
      assert.is_false(samplers(23, 4, { eval = true })[1].shuffle)
    end)
  end)

  it("refuses bad arguments, naming the option, at the caller's line", function()
    fails(function() data.DistributedSampler(10, { num_replicas = 3, rank = 3 }) end,
          "DistributedSampler: rank 3 is out of range for num_replicas = 3 (ranks are 0..2)")
    fails(function() data.DistributedSampler(10, { num_replicas = 3, rank = -1 }) end, "rank -1 is out of range")
    fails(function() data.DistributedSampler(10, { rank = ddp.world_size() }) end,
          "(the world size)")
    fails(function() data.DistributedSampler(10, { rank = 0.5 }) end, "rank must be an integer, got 0.5")
    fails(function() data.DistributedSampler(10, { num_replicas = 0 }) end,
          "num_replicas must be a positive integer, got 0")
    fails(function() data.DistributedSampler(10, { seed = -1 }) end, "DistributedSampler: seed must be an integer")
    fails(function() data.DistributedSampler(10, { shuffle = "yes" }) end, "shuffle must be true or false")
    fails(function() data.DistributedSampler(10, { drop_last = 1 }) end, "drop_last must be true or false")
    fails(function() data.DistributedSampler(10, { eval = true, drop_last = true }) end,
          "eval = true and drop_last = true exclude each other")
    fails(function() data.DistributedSampler(10, { shufle = true }) end, 'unknown option "shufle"')
    fails(function() data.DistributedSampler(-1) end, "expected a dataset or a number of samples")
    local s = data.DistributedSampler(10, { num_replicas = 2, rank = 0 })
    fails(function() s:set_epoch(-1) end, "DistributedSampler:set_epoch: epoch must be an integer from 0")
    fails(function() s:indices(1.5) end, "DistributedSampler:indices: epoch must be an integer")
    fails(function() s:list("1") end, "DistributedSampler:indices: epoch must be an integer")
  end)

  it("prints what it is", function()
    local s = data.DistributedSampler(10, { num_replicas = 3, rank = 1, seed = 2 })
    assert.are.equal("DistributedSampler(10 samples, rank 1 of 3: 4, shuffled, seed 2, epoch 0)", tostring(s))
    assert.are.equal("DistributedSampler(10 samples, rank 2 of 3: 3, in order, eval, epoch 0)",
                     tostring(data.DistributedSampler(10, { num_replicas = 3, rank = 2, eval = true })))
  end)
end)

describe("reduce_metrics", function()
  it("is a copy in a world of one, taking numbers and one-element tensors", function()
    local t = { correct = 3, count = 10, loss_sum = ddp.tensor(2.5, { dtype = "float64" }) }
    local r = data.reduce_metrics(t)
    assert.are_not.equal(t, r)
    assert.are.same({ correct = 3, count = 10, loss_sum = 2.5 }, r)
    assert.are.same({ 1, 2 }, data.reduce_metrics { 1, 2 })
  end)

  it("refuses what it cannot sum", function()
    fails(function() data.reduce_metrics(5) end, "reduce_metrics: expected a table of numbers")
    fails(function() data.reduce_metrics { a = "x" } end, 'metric "a" must be a number or a one-element tensor')
    fails(function() data.reduce_metrics { a = ddp.ones(2) } end, "tensor of 2 elements")
    fails(function() data.reduce_metrics { [true] = 1 } end, "keys must be strings or integers")
  end)
end)

describe("DistributedSampler #dist", function()
  after_each(jobs.no_strays)
  teardown(jobs.cleanup)

  it("partitions the dataset across `ddplua --nproc 3`, and reduce_metrics sums exactly", function()
    local s = jobs.script([[
local data = require "ddp.data"
local N = 101
-- the defaults come from the environment, before ddp.init
local train = data.DistributedSampler(N, { seed = 6 })
local eval = data.DistributedSampler(N, { eval = true })
assert(train.num_replicas == 3 and train.rank == ddp.rank())
ddp.init()
local loader = data.DataLoader(data.TensorDataset(ddp.arange(N)), { batch_size = 8, sampler = train })
local epochs = {}
for e = 1, 2 do
  local got = {}
  for _, x in loader:iter() do
    for _, v in ipairs(x:totable()) do got[#got + 1] = v end
  end
  epochs[e] = got
end
local g = ddp.all_gather_object({ train = epochs, eval = eval:list() })
if ddp.rank() == 0 then
  for e = 1, 2 do
    local c, total = {}, 0
    for r = 1, 3 do
      assert(#g[r].train[e] == 34, "rank " .. (r - 1) .. " has " .. #g[r].train[e])
      for _, i in ipairs(g[r].train[e]) do c[i] = (c[i] or 0) + 1; total = total + 1 end
    end
    for i = 0, N - 1 do assert(c[i] == 1 or c[i] == 2, "index " .. i) end
    assert(total == 102)
    -- the padding repeats the first index of the epoch's order
    local first = g[1].train[e][1]
    assert(c[first] == 2, "the repeated index is not the epoch's first")
  end
  assert(table.concat(g[1].train[1], ",") ~= table.concat(g[1].train[2], ","), "same order in both epochs")
  local c = {}
  for r = 1, 3 do for _, i in ipairs(g[r].eval) do assert(not c[i]); c[i] = true end end
  for i = 0, N - 1 do assert(c[i], "eval misses " .. i) end
  print("PARTITION OK")
end
-- the metrics of an evaluation over this rank's share
local m = { count = 0, correct = 0, loss_sum = 0 }
for i in eval:iter() do
  m.count = m.count + 1
  if i % 3 == 0 then m.correct = m.correct + 1 end
  m.loss_sum = m.loss_sum + i * 0.25
end
m.extra = ddp.tensor(ddp.rank() + 1)
local tot = data.reduce_metrics(m)
assert(tot.count == N and tot.correct == 34 and tot.loss_sum == 0.25 * N * (N - 1) / 2 and tot.extra == 6,
       ("got %s %s %s %s"):format(tot.count, tot.correct, tot.loss_sum, tot.extra))
local all = ddp.all_gather_object(tot)
for r = 1, 3 do
  for k, v in pairs(tot) do assert(all[r][k] == v) end
end
-- different keys on one rank: every rank raises, nobody hangs
local ok, err = pcall(data.reduce_metrics, ddp.rank() == 1 and { a = 1, b = 2 } or { a = 1 })
assert(not ok and tostring(err):find("every rank must pass the same keys", 1, true), tostring(err))
ddp.barrier()
print("METRICS OK " .. ddp.rank())
]], "sampler")
    local out, err, rc = run("--nproc 3 " .. q(s), nil, 120)
    assert.are.equal(0, rc, (out or "") .. (err or ""))
    assert.truthy(out:find("PARTITION OK", 1, true), out)
    for r = 0, 2 do assert.truthy(out:find("METRICS OK " .. r, 1, true), out) end
  end)
end)
