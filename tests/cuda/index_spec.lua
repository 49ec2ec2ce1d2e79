-- Indexing, masks, joining and creation on CUDA tensors equal the CPU's:
-- index_select, gather, scatter (replace and add), masked_fill,
-- masked_select, nonzero, tril/triu, cat, stack, one_hot in every dtype
-- they take, several dims, non-contiguous and empty operands, index
-- errors on both devices, gradients, and creation with {device="cuda"}.
local ddp = require "ddp"
local H = require "helpers.cuda"
local core = require "ddp.core"

local DTYPES = {"float32", "float64", "int32", "int64", "uint8", "bool", "bfloat16", "float16"}

-- Small integer values (exact in every dtype, so sums do not depend on
-- the order atomics add them in).
local function sample(dtype, shape, seed)
  ddp.manual_seed(seed or 1)
  local x = (ddp.randn(shape) * 4):round()
  if dtype == "bool" then return x:gt(0) end
  if dtype == "uint8" then return x:abs():to("uint8") end
  return x:to(dtype)
end

-- Random indices in [0, n) of shape (int64 unless dtype says).
local function index(n, shape, seed, dtype)
  ddp.manual_seed(seed or 7)
  return ddp.randint(0, n, shape, {dtype = dtype or "int64"})
end

-- The CPU decides what is an error; CUDA must then fail too, with a
-- message naming the same error (pat: a Lua pattern both must match).
local function both(what, f, args, pat)
  local ok, cerr = pcall(f, table.unpack(args))
  if not ok then
    local dok, err = pcall(f, table.unpack(H.todev(args)))
    assert(not dok, what .. ": fails on cpu (" .. tostring(cerr) .. ") but not on cuda")
    if pat then
      assert(tostring(cerr):match(pat), what .. ": cpu error " .. tostring(cerr))
      assert(tostring(err):match(pat), what .. ": cuda error " .. tostring(err))
    end
    return
  end
  assert(not pat, what .. ": expected an error matching " .. tostring(pat))
  H.check(what, f, args)
end

H.describe("CUDA indexing ops", function()
  it("index_select in every dtype, dims, index dtypes and layouts", function()
    for _, dt in ipairs(DTYPES) do
      local x = sample(dt, {3, 4, 5}, 1)
      for _, d in ipairs {0, 1, 2, -1} do
        local n = x:shape()[(d % 3) + 1]
        both("index_select " .. dt .. " dim " .. d, function(t, i) return t:index_select(d, i) end,
          {x, index(n, {6}, 2)})
      end
    end
    local x = sample("float32", {6, 5}, 3)
    H.check("int32 index", function(t, i) return t:index_select(1, i) end, {x, index(5, {7}, 4, "int32")})
    H.check("transposed input", function(t, i) return t:t():index_select(0, i) end, {x, index(5, {3}, 5)})
    H.check("strided index", function(t, i) return t:index_select(0, i:narrow(0, 0, 4):view(2, 2):t():reshape(4)) end,
      {x, index(6, {4}, 6)})
    H.check("strided index 2", function(t, i) return t:index_select(0, i:view(4, 2):select(1, 1)) end,
      {x, index(6, {8}, 6)})
    H.check("empty index", function(t, i) return t:index_select(0, i:narrow(0, 0, 0)) end, {x, index(6, {3}, 7)})
    H.check("0-dim input", function(t, i) return t:index_select(0, i) end, {ddp.tensor(3.5), ddp.tensor({0})})
    H.check("wide rows", function(t, i) return t:index_select(0, i) end, {sample("float64", {9, 33}, 8), index(9, {20}, 9)})
    H.check("number index", function(t) return t:index_select(1, 2) end, {x})
    both("out of range", function(t, i) return t:index_select(0, i) end, {x, ddp.tensor({1, 6, 0})}, "out of range")
    both("negative", function(t, i) return t:index_select(1, i) end, {x, ddp.tensor({-1})}, "out of range")
    both("float index", function(t, i) return t:index_select(1, i) end, {x, ddp.tensor({1}, {dtype = "float32"})}, "index")
  end)

  it("gather in every dtype and dims, with bad indices", function()
    for _, dt in ipairs(DTYPES) do
      local x = sample(dt, {4, 5, 6}, 11)
      both("gather " .. dt .. " dim 0", function(t, i) return t:gather(0, i) end, {x, index(4, {3, 5, 2}, 12)})
      both("gather " .. dt .. " dim -1", function(t, i) return t:gather(-1, i) end, {x, index(6, {4, 2, 9}, 13)})
    end
    local x = sample("float32", {5, 7}, 14)
    H.check("gather transposed", function(t, i) return t:t():gather(1, i) end, {x, index(5, {7, 3}, 15, "int32")})
    H.check("gather strided index", function(t, i) return t:gather(1, i:t()) end, {x, index(7, {4, 5}, 16)})
    H.check("gather empty", function(t, i) return t:gather(1, i:narrow(1, 0, 0)) end, {x, index(7, {5, 2}, 17)})
    both("gather out of range", function(t, i) return t:gather(1, i) end, {x, ddp.tensor({{0, 7}})}, "out of range")
    both("gather index too big", function(t, i) return t:gather(1, i) end, {x, index(7, {6, 2}, 18)})
  end)

  it("scatter, scatter_ and scatter_add in every dtype", function()
    for _, dt in ipairs(DTYPES) do
      local x, src = sample(dt, {4, 6}, 21), sample(dt, {4, 6}, 22)
      -- replace: a permutation per row, so no two writes hit one place
      local perm = ddp.stack({ddp.randperm(6), ddp.randperm(6), ddp.randperm(6), ddp.randperm(6)})
      both("scatter " .. dt, function(t, i, s) return t:scatter(1, i, s) end, {x, perm:narrow(1, 0, 4), src})
      both("scatter_ " .. dt, function(t, i, s) local c = t:clone() c:scatter_(1, i, s) return c end,
        {x, perm, src})
      both("scatter_add " .. dt .. " dim 0", function(t, i, s) return t:scatter_add(0, i, s) end,
        {x, index(4, {7, 6}, 23), sample(dt, {8, 6}, 24)})
      both("scatter_add " .. dt .. " dim 1", function(t, i, s) return t:scatter_add(1, i, s) end,
        {x, index(6, {4, 9}, 25), sample(dt, {4, 9}, 26)})
    end
    local x = sample("float32", {5, 6}, 27)
    H.check("scatter number", function(t, i) return t:scatter(1, i, 2.5) end, {x, index(6, {5, 1}, 28)})
    H.check("scatter_add int32 index, transposed", function(t, i, s) return t:t():scatter_add(1, i, s) end,
      {x, index(5, {6, 8}, 29, "int32"), sample("float32", {6, 8}, 30)})
    H.check("scatter_add empty", function(t, i, s) return t:scatter_add(0, i:narrow(0, 0, 0), s) end,
      {x, index(5, {2, 6}, 31), sample("float32", {2, 6}, 32)})
    both("scatter out of range", function(t, i, s) return t:scatter_add(0, i, s) end,
      {x, ddp.tensor({{0, 5}}), ddp.ones({1, 2})}, "out of range")
    H.check("scatter_ src aliasing self", function(t, i) local c = t:clone() c:scatter_(1, i, c:narrow(1, 1, 2)) return c end,
      {x, ddp.tensor({{0, 1}, {2, 3}, {4, 5}, {1, 0}, {3, 2}})})
    H.check("masked_fill_ mask is self", function(t) local b = t:gt(0) b:masked_fill_(b, 0) return b end, {x})
    -- an in-place scatter with a bad index leaves self unchanged
    local d = x:cuda()
    local ok = pcall(function() d:scatter_(0, ddp.tensor({{1, 9}}):cuda(), ddp.ones({1, 2}):cuda()) end)
    assert(not ok, "scatter_ with a bad index must fail")
    H.same(x, d, "scatter_ left self unchanged")
  end)

  it("masked_fill and masked_fill_ in every dtype, broadcast and strided", function()
    for _, dt in ipairs(DTYPES) do
      local x, m = sample(dt, {4, 5}, 41), sample("bool", {4, 5}, 42)
      both("masked_fill " .. dt, function(t, k) return t:masked_fill(k, 3) end, {x, m})
      both("masked_fill_ " .. dt, function(t, k) local c = t:clone() c:masked_fill_(k, 1) return c end, {x, m})
    end
    local x = sample("float32", {4, 5}, 43)
    H.check("broadcast mask", function(t, k) return t:masked_fill(k, -1.5) end, {x, sample("bool", {5}, 44)})
    H.check("broadcast both", function(t, k) return t:masked_fill(k, 9) end, {x:narrow(0, 0, 1), sample("bool", {3, 1}, 45)})
    H.check("transposed", function(t, k) return t:t():masked_fill(k:t(), 0 / 0) end, {x, sample("bool", {4, 5}, 46)})
    H.check("empty", function(t, k) return t:narrow(0, 0, 0):masked_fill(k:narrow(0, 0, 0), 1) end,
      {x, sample("bool", {4, 5}, 47)})
    both("mask not bool", function(t, k) return t:masked_fill(k, 1) end, {x, sample("int32", {4, 5}, 48)}, "bool")
  end)

  it("masked_select and nonzero, also across many chunks", function()
    for _, dt in ipairs(DTYPES) do
      local x = sample(dt, {3, 4, 5}, 51)
      both("masked_select " .. dt, function(t, k) return t:masked_select(k) end, {x, sample("bool", {3, 4, 5}, 52)})
      both("nonzero " .. dt, function(t) return t:nonzero() end, {x})
    end
    local big = sample("float32", {37, 131}, 53)  -- 4847 elements: 5 chunks of 1024
    H.check("masked_select big", function(t) return t:masked_select(t:gt(0)) end, {big})
    H.check("masked_select transposed, broadcast", function(t, k) return t:t():masked_select(k) end,
      {big, sample("bool", {37}, 54)})
    H.check("masked_select empty", function(t) return t:masked_select(t:gt(100)) end, {big})
    H.check("nonzero big", function(t) return t:nonzero() end, {big})
    -- over 256 chunks: the chunk offsets are scanned in several tiles
    H.check("masked_select 300 chunks", function(t) return t:masked_select(t:gt(0.5)) end,
      {ddp.randn({300, 1024})})
    H.check("nonzero 0-dim", function(t) return t:nonzero() end, {ddp.tensor(2.0)})
    H.check("nonzero none", function(t) return (t * 0):nonzero() end, {big})
    H.check("nonzero 4-d strided", function(t) return t:view(37, 131, 1, 1):transpose(0, 1):nonzero() end, {big})
  end)

  it("tril and triu in every dtype, diagonals and batches", function()
    for _, dt in ipairs(DTYPES) do
      local x = sample(dt, {2, 4, 5}, 61)
      for _, k in ipairs {0, 1, -2, 7, -9} do
        both("tril " .. dt .. " " .. k, function(t) return t:tril(k) end, {x})
        both("triu " .. dt .. " " .. k, function(t) return t:triu(k) end, {x})
      end
    end
    H.check("tril transposed", function(t) return t:transpose(1, 2):tril() end, {sample("float32", {2, 4, 5}, 62)})
    both("tril 1-d", function(t) return t:tril() end, {sample("float32", {4}, 63)}, "dim")
  end)

  it("cat and stack: dtypes, dims, promotion, empty", function()
    for _, dt in ipairs(DTYPES) do
      local a, b = sample(dt, {2, 3}, 71), sample(dt, {4, 3}, 72)
      both("cat " .. dt, function(x, y) return ddp.cat({x, y}) end, {a, b})
      both("cat dim -1 " .. dt, function(x, y) return ddp.cat({x, y:t()}, -1) end, {b, sample(dt, {3, 4}, 73)})
      both("stack " .. dt, function(x, y) return ddp.stack({x, y:narrow(0, 0, 2)}, 1) end, {a, b})
    end
    local a = sample("float32", {2, 3}, 74)
    H.check("cat promotes", function(x, y) return ddp.cat({x, y}) end, {a, sample("int64", {1, 3}, 75)})
    H.check("cat skips [0]", function(x, y) return ddp.cat({x, y}, 1) end, {a, ddp.zeros({0})})
    H.check("cat all empty", function(x, y) return ddp.cat({x, y}) end, {ddp.zeros({0}), ddp.zeros({0})})
    H.check("stack 0-dim", function(x, y) return ddp.stack({x, y}) end, {ddp.tensor(1.5), ddp.tensor(2.5)})
    H.check("stack last, transposed", function(x) return ddp.stack({x:t(), x:t()}, -1) end, {a})
    both("cat shapes", function(x, y) return ddp.cat({x, y}) end, {a, sample("float32", {2, 4}, 76)}, "cat")
  end)

  it("one_hot, with bad classes", function()
    for _, dt in ipairs {"int64", "int32"} do
      local i = index(5, {3, 4}, 81, dt)
      H.check("one_hot " .. dt, function(t) return t:one_hot() end, {i})
      H.check("one_hot " .. dt .. " 7", function(t) return t:one_hot(7) end, {i})
      H.check("one_hot strided " .. dt, function(t) return t:t():one_hot(5) end, {i})
    end
    H.check("one_hot empty", function(t) return t:narrow(0, 0, 0):one_hot(3) end, {index(3, {4}, 82)})
    H.check("one_hot 0-dim", function(t) return t:one_hot(4) end, {ddp.tensor(2)})
    both("one_hot too small", function(t) return t:one_hot(2) end, {ddp.tensor({0, 3})}, "out of range")
    both("one_hot negative", function(t) return t:one_hot() end, {ddp.tensor({0, -1})}, "out of range")
  end)

  it("gradients of index_select, gather, scatter, masks, cat and stack", function()
    local function grads(f)
      return function(...)
        local xs = {...}
        local y = f(...)
        local g = ddp.arange(y:numel(), {dtype = y:dtype(), device = y:device()}):view(y:shape())
        y:backward(g)
        local r = {y}
        for _, x in ipairs(xs) do
          if core.is_tensor(x) and x.requires_grad then r[#r + 1] = x.grad end
        end
        return table.unpack(r)
      end
    end
    local function leaf(shape, seed) return sample("float32", shape, seed):requires_grad_(true) end
    H.check("index_select grad", grads(function(x, i) return x:index_select(1, i) end),
      {leaf({3, 4}, 91), index(4, {6}, 92)})
    H.check("gather grad", grads(function(x, i) return x:gather(0, i) end), {leaf({3, 4}, 93), index(3, {5, 4}, 94)})
    H.check("scatter grad", grads(function(x, i, s) return x:scatter(1, i, s) end),
      {leaf({3, 4}, 95), ddp.tensor({{0, 2}, {3, 1}, {1, 0}}), leaf({3, 2}, 96)})
    H.check("scatter_add grad", grads(function(x, i, s) return x:scatter_add(0, i, s) end),
      {leaf({3, 4}, 97), index(3, {5, 4}, 98), leaf({5, 4}, 99)})
    H.check("masked_fill grad", grads(function(x, m) return x:masked_fill(m, 2) end),
      {leaf({3, 4}, 100), sample("bool", {4}, 101)})
    H.check("masked_select grad", grads(function(x, m) return x:masked_select(m) end),
      {leaf({3, 4}, 102), sample("bool", {3, 4}, 103)})
    H.check("cat grad", grads(function(x, y) return ddp.cat({x, y}, 1) end), {leaf({3, 4}, 104), leaf({3, 2}, 105)})
    H.check("stack grad", grads(function(x, y) return ddp.stack({x, y}, 2) end), {leaf({3, 4}, 106), leaf({3, 4}, 107)})
    H.check("tril grad", grads(function(x) return x:tril(1) end), {leaf({4, 4}, 108)})
  end)

  it("mixed devices are refused, CPU scalars go along", function()
    local x = sample("float32", {3, 4}, 111):cuda()
    local ok, err = pcall(function() return x:index_select(0, ddp.tensor({0, 1})) end)
    assert(not ok and tostring(err):match("same device"), "cpu index with cuda input: " .. tostring(err))
    ok, err = pcall(function() return x:gather(0, ddp.tensor({{0}})) end)
    assert(not ok and tostring(err):match("same device"), "cpu gather index: " .. tostring(err))
    ok, err = pcall(function() return x:masked_fill(ddp.ones({3, 4}, {dtype = "bool"}), 1) end)
    assert(not ok and tostring(err):match("same device"), "cpu mask: " .. tostring(err))
    ok, err = pcall(function() return ddp.cat({x, x:cpu()}) end)
    assert(not ok and tostring(err):match("same device"), "cat across devices: " .. tostring(err))
    -- a 0-dim CPU index or mask goes with a CUDA input, as in PyTorch
    H.same(x:cpu():index_select(1, ddp.tensor(2)), x:index_select(1, ddp.tensor(2)), "0-dim cpu index")
    H.same(x:cpu():masked_fill(ddp.tensor(true), 4), x:masked_fill(ddp.tensor(true), 4), "0-dim cpu mask")
    H.same(x:cpu():masked_select(ddp.tensor(true)), x:masked_select(ddp.tensor(true)), "0-dim cpu mask, select")
  end)
end)

H.describe("CUDA creation", function()
  it("makes tensors on the device in every dtype", function()
    local dev = {device = "cuda"}
    for _, dt in ipairs(DTYPES) do
      local o = {dtype = dt, device = "cuda"}
      local c = {dtype = dt}
      H.same(ddp.zeros({3, 4}, c), ddp.zeros({3, 4}, o), "zeros " .. dt)
      H.same(ddp.ones({2, 5}, c), ddp.ones({2, 5}, o), "ones " .. dt)
      H.same(ddp.full({4}, 3, c), ddp.full({4}, 3, o), "full " .. dt)
      H.same(ddp.eye(3, 5, c), ddp.eye(3, 5, o), "eye " .. dt)
      H.same(ddp.eye(4, c), ddp.eye(4, o), "eye square " .. dt)
      H.same(ddp.arange(2, 9, 2, c), ddp.arange(2, 9, 2, o), "arange " .. dt)
      local e = ddp.empty({2, 3}, o)
      assert(e:device():match("^cuda") and e:dtype() == dt, "empty " .. dt)
      if dt ~= "bool" then
        H.same(ddp.linspace(-3, 5, 7, c), ddp.linspace(-3, 5, 7, o), "linspace " .. dt)
      end
    end
    H.same(ddp.arange(10), ddp.arange(10, dev), "arange int64")
    H.same(ddp.arange(-1, 1, 0.1), ddp.arange(-1, 1, 0.1, dev), "arange float")
    H.same(ddp.arange(0, 300, 1, {dtype = "uint8"}), ddp.arange(0, 300, 1, {dtype = "uint8", device = "cuda"}), "arange uint8 wraps")
    H.same(ddp.linspace(0, 1, 1001), ddp.linspace(0, 1, 1001, dev), "linspace long")
    H.same(ddp.linspace(2, 3, 1), ddp.linspace(2, 3, 1, dev), "linspace one")
    H.same(ddp.linspace(2, 3, 0), ddp.linspace(2, 3, 0, dev), "linspace none")
    H.same(ddp.zeros({0, 3}), ddp.zeros({0, 3}, dev), "zeros empty")
    H.same(ddp.full({2}, true), ddp.full({2}, true, dev), "full bool")
    H.same(ddp.eye(0), ddp.eye(0, dev), "eye 0")
    H.same(ddp.tensor({{1, 2}, {3, 4}}), ddp.tensor({{1, 2}, {3, 4}}, dev), "tensor")
    H.same(ddp.tensor({1.5, 2}):cuda():cpu(), ddp.tensor({1.5, 2}):cuda(), "cuda()")
    local x = ddp.randn({2, 3}):cuda()
    H.same(ddp.zeros({2, 3}), ddp.zeros_like(x), "zeros_like")
    H.same(ddp.full({2, 3}, 2, {dtype = "float32"}), ddp.full_like(x, 2), "full_like")
    local ok, err = pcall(ddp.arange, 0, 5, -1, dev)
    assert(not ok and tostring(err):match("arange"), "arange error: " .. tostring(err))
    ok, err = pcall(ddp.zeros, {2}, {device = "cuda:7"})
    assert(not ok and tostring(err):match("no CUDA device"), "bad device: " .. tostring(err))
  end)
end)
