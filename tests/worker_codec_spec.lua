-- ddp.data.worker_codec (values copied into a loader worker's Lua state)
-- and ddp.data.sample_rng (a sample's random numbers from (seed, epoch,
-- index)): round trips of every kind of value, shared tensors, the errors
-- naming what cannot travel, and the determinism the loader relies on.
local ddp = require "ddp"
local codec = require "ddp.data.worker_codec"
local rng = require "ddp.data.sample_rng"

local function trip(v)
  local bytes, ts = assert(codec.encode(v, "value"))
  return codec.decode(bytes, ts), ts
end

describe("worker_codec", function()
  it("copies plain values, nested tables with cycles and shared parts, and 64-bit integers", function()
    local shared = { 1, 2 }
    local v = { a = 1.5, s = "x\0y", t = true, f = false, nested = { shared, shared }, big = 2 ^ 60, i = 7LL,
                u = 9ULL, [3] = "three", inf = math.huge }
    v.self = v
    local w = trip(v)
    assert.equals(1.5, w.a)
    assert.equals("x\0y", w.s)
    assert.is_true(w.t)
    assert.is_false(w.f)
    assert.equals("three", w[3])
    assert.equals(math.huge, w.inf)
    assert.equals(w, w.self)
    assert.equals(w.nested[1], w.nested[2])
    assert.are_not.equal(shared, w.nested[1])
    assert.is_true(w.i == 7LL and w.u == 9ULL)
    assert.equals(2 ^ 60, w.big)
  end)

  it("shares tensors instead of copying them", function()
    local t = ddp.arange(6)
    local w, ts = trip({ t, { t } })
    assert.equals(1, #ts)
    assert.is_true(require("ddp.core").same(w[1], t))
    assert.is_true(require("ddp.core").same(w[2][1], t))
  end)

  it("copies functions with their upvalues, and finds modules and their members by name", function()
    local data = require "ddp.data"
    local k = 10
    local function add(x) return x + k end
    local obj = setmetatable({ n = 2 }, { __index = { get = function(self, i) return add(i) * self.n end } })
    local w = trip({ obj = obj, floor = math.floor, data = data, ds = data.TensorDataset })
    assert.equals(24, w.obj:get(2))
    assert.equals(math.floor, w.floor)
    assert.equals(data, w.data)
    assert.equals(data.TensorDataset, w.ds)
  end)

  it("copies instances of the library's classes, fields and class kept", function()
    local data = require "ddp.data"
    local ds = data.TensorDataset(ddp.arange(5), ddp.arange(5) * 2)
    local w = trip(ds)
    assert.equals(5, #w)
    assert.equals(getmetatable(ds), getmetatable(w))
    local _, y = w:get(3)
    assert.equals(6, type(y) == "number" and y or y:item())
  end)

  it("names what cannot travel", function()
    local fh = assert(io.open("/dev/null"))
    local bytes, err = codec.encode({ a = { b = fh } }, "dataset")
    assert.is_nil(bytes)
    assert.truthy(err:find("dataset.a.b: an open file cannot be sent to a worker thread", 1, true), err)
    fh:close()
    bytes, err = codec.encode({ co = coroutine.create(print) }, "dataset")
    assert.truthy(err:find("dataset.co: a thread cannot be sent", 1, true), err)
    bytes, err = codec.encode({ buf = require("ffi").new("double[2]") }, "dataset")
    assert.truthy(err:find("dataset.buf: ctype<double [2]> cannot be sent", 1, true), err)
  end)
end)

describe("sample_rng", function()
  it("is a pure function of (seed, epoch, index) and the draw's number", function()
    local function draws(seed, epoch, index)
      rng.begin(seed, epoch, index)
      return { rng.uniform(), rng.uniform(2, 3), rng.randint(0, 100), rng.bernoulli(0.5) }
    end
    local a = draws(5, 1, 7)
    assert.same({ 5, 1, 7 }, { rng.context() })
    rng.uniform()
    assert.same(a, draws(5, 1, 7))
    assert.are_not.same(a, draws(5, 1, 8))
    assert.are_not.same(a, draws(5, 2, 7))
    assert.are_not.same(a, draws(6, 1, 7))
    assert.is_true(a[2] >= 2 and a[2] < 3)
    rng.finish()
    assert.is_nil(rng.context())
  end)

  it("draws uniform numbers", function()
    rng.begin(1, 0, 0)
    local n, s, lo, hi = 20000, 0, 1, 0
    local counts = { 0, 0, 0, 0 }
    for _ = 1, n do
      local u = rng.uniform()
      s, lo, hi = s + u, math.min(lo, u), math.max(hi, u)
      local r = rng.randint(0, 4)
      counts[r + 1] = counts[r + 1] + 1
    end
    assert.is_true(math.abs(s / n - 0.5) < 0.01)
    assert.is_true(lo >= 0 and hi < 1)
    for i = 1, 4 do assert.is_true(math.abs(counts[i] / n - 0.25) < 0.02) end
    rng.finish()
  end)

  it("refuses bad arguments", function()
    assert.has_error(function() rng.begin(1.5, 0, 0) end)
    assert.has_error(function() rng.begin(1, -1, 0) end)
    assert.has_error(function() rng.randint(3, 3) end)
  end)
end)
