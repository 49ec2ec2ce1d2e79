-- ddp.data: IDX files, Fashion-MNIST (the files of the Debian package
-- dataset-fashion-mnist), TensorDataset, the samplers and the DataLoader --
-- batch counts, orders, reproducible shuffles, the sampler protocol, and an
-- error at the caller's line for every misuse.
local ddp = require "ddp"
local data = require "ddp.data"
local ffi = require "ffi"

pcall(ffi.cdef, [[
int setenv(const char *name, const char *value, int overwrite);
int unsetenv(const char *name);
]])

-- f (written in this file) must raise an error located in this file whose
-- message holds every string given (plain text).
local fails = require("helpers.fails").located("data_spec.lua")

local function values(t) return t:totable() end

-- Writes an uncompressed IDX file: type byte, shape, bytes of data.
local tmpdir = os.tmpname()
os.remove(tmpdir)
os.execute("mkdir -p " .. tmpdir)
local function idx_file(name, type_byte, shape, bytes)
  local path = tmpdir .. "/" .. name
  local f = assert(io.open(path, "wb"))
  f:write(string.char(0, 0, type_byte, #shape))
  for _, s in ipairs(shape) do
    f:write(string.char(math.floor(s / 2^24) % 256, math.floor(s / 2^16) % 256, math.floor(s / 256) % 256, s % 256))
  end
  f:write(bytes)
  f:close()
  return path
end

local function byte_string(n, f)
  local t = {}
  for i = 0, n - 1 do t[i + 1] = string.char(f(i)) end
  return table.concat(t)
end

local loaders = require "helpers.loaders"
local index_dataset, pass = loaders.index_dataset, loaders.pass

local function is_permutation(list, n)
  if #list ~= n then return false end
  local hit = {}
  for _, v in ipairs(list) do
    if v < 0 or v >= n or hit[v] then return false end
    hit[v] = true
  end
  return true
end

local function same(a, b)
  if #a ~= #b then return false end
  for i = 1, #a do
    if a[i] ~= b[i] then return false end
  end
  return true
end

local FMNIST = "/usr/share/datasets/fashion-mnist"
local train, test  -- loaded once: 0.5 s each

describe("data", function()
  setup(function()
    train = data.fashion_mnist("train")
    test = data.fashion_mnist("test")
  end)

  teardown(function()
    os.execute("rm -rf " .. tmpdir)
  end)

  describe("read_idx", function()
    it("reads the gzip'd labels of Fashion-MNIST", function()
      local y = data.read_idx(FMNIST .. "/train-labels-idx1-ubyte.gz")
      assert.are.same({ 60000 }, y:shape())
      assert.are.equal("uint8", y:dtype())
      assert.are.same({ 9, 0, 0, 3, 0 }, values(y:narrow(0, 0, 5)))
    end)

    it("reads plain files of every type", function()
      local p = idx_file("i16", 0x0B, { 3 }, "\255\254\0\5\128\0")
      local t = data.read_idx(p)
      assert.are.equal("int32", t:dtype())
      assert.are.same({ -2, 5, -32768 }, values(t))
      p = idx_file("u8", 0x08, { 2, 2 }, "\1\2\3\255")
      assert.are.same({ { 1, 2 }, { 3, 255 } }, values(data.read_idx(p)))
    end)

    it("reports a missing file at the caller's line", function()
      fails(function() data.read_idx(tmpdir .. "/nope") end, "read_idx: cannot open", "/nope", "No such file")
      fails(function() data.read_idx(7) end, "read_idx: path must be a string, got 7")
    end)

    it("reports truncated data and a bad magic", function()
      local p = idx_file("short", 0x08, { 4 }, "\1\2\3")
      fails(function() data.read_idx(p) end, "is truncated", "shape [4] of uint8", "needs 4 bytes", "has only 3")
      local f = assert(io.open(tmpdir .. "/text", "wb"))
      f:write("hello world\n")
      f:close()
      fails(function() data.read_idx(tmpdir .. "/text") end, "is not an IDX file", "68 65 6c 6c")
    end)
  end)

  describe("fashion_mnist", function()
    it("gives the training set as float32 N x 784 in [0, 1] and int64 labels", function()
      assert.are.equal(60000, #train)
      local x, y = unpack(train:tensors())
      assert.are.same({ 60000, 784 }, x:shape())
      assert.are.equal("float32", x:dtype())
      assert.are.same({ 60000 }, y:shape())
      assert.are.equal("int64", y:dtype())
      assert.are.equal(0, x:amin():item())
      assert.are.equal(1, x:amax():item())
      assert.are.same({ 9, 0, 0, 3, 0 }, values(y:narrow(0, 0, 5)))
      assert.are.same({ 0, 9 }, { y:amin():item(), y:amax():item() })
      -- the pixels are the file's bytes / 255, exactly
      local raw = data.read_idx(FMNIST .. "/train-images-idx3-ubyte.gz")
      assert.is_true((raw:float() / 255):view(60000, 784):equal(x))
    end)

    it("gives the test set (t10k files), and N x 1 x 28 x 28 with flat = false", function()
      assert.are.equal(10000, #test)
      local x, y = unpack(test:tensors())
      assert.are.same({ 10000, 784 }, x:shape())
      assert.are.same({ 10000 }, y:shape())
      local img = data.fashion_mnist("test", { flat = false })
      local x4 = img:tensors()[1]
      assert.are.same({ 10000, 1, 28, 28 }, x4:shape())
      assert.is_true(x4:view(10000, 784):equal(x))
    end)

    it("gives samples with get (0-based)", function()
      local x, y = train:get(0)
      assert.are.same({ 784 }, x:shape())
      assert.are.equal(9, y)
      local _, last = train:get(-1)
      assert.are.equal(train:tensors()[2]:get(59999), last)
    end)

    it("takes the directory as an argument, or from FASHION_MNIST_DIR", function()
      local ds = data.fashion_mnist("test", FMNIST)
      assert.are.equal(10000, #ds)
      ds = data.fashion_mnist("test", { dir = FMNIST })
      assert.are.equal(10000, #ds)
      ffi.C.setenv("FASHION_MNIST_DIR", tmpdir .. "/empty", 1)
      local ok, err = pcall(data.fashion_mnist, "test")
      ffi.C.unsetenv("FASHION_MNIST_DIR")
      assert.is_false(ok)
      assert.truthy(err:find(tmpdir .. "/empty/t10k-images-idx3-ubyte.gz", 1, true), err)
    end)

    it("says how to install the files when they are missing", function()
      fails(function() data.fashion_mnist("train", tmpdir .. "/nothing-here") end,
            "fashion_mnist: cannot open " .. tmpdir .. "/nothing-here/train-images-idx3-ubyte.gz",
            "No such file or directory",
            "install the Debian package dataset-fashion-mnist (apt-get install dataset-fashion-mnist, or make deps)")
    end)

    it("refuses a bad split or option", function()
      fails(function() data.fashion_mnist("val") end, 'split must be "train" or "test", got "val"')
      fails(function() data.fashion_mnist() end, 'split must be "train" or "test", got nil')
      fails(function() data.fashion_mnist("test", { flatten = true }) end, 'unknown option "flatten"', "dir, flat")
      fails(function() data.fashion_mnist("test", { flat = 1 }) end, "flat must be true or false, got 1")
    end)

    it("is reachable as ddp.data", function()
      assert.are.equal(data, ddp.data)
    end)
  end)

  describe("mnist_idx", function()
    it("reads any images and labels pair", function()
      local xi = idx_file("img", 0x08, { 3, 2, 2 }, byte_string(12, function(i) return i * 20 end))
      local yi = idx_file("lab", 0x08, { 3 }, "\7\8\9")
      local ds = data.mnist_idx(xi, yi)
      local x, y = unpack(ds:tensors())
      assert.are.same({ 3, 4 }, x:shape())
      assert.is_true(x:allclose(ddp.arange(12):float():mul(20 / 255):view(3, 4)))
      assert.are.same({ 7, 8, 9 }, values(y))
      assert.are.same({ 3, 1, 2, 2 }, data.mnist_idx(xi, yi, { flat = false }):tensors()[1]:shape())
    end)

    it("refuses files that do not pair up", function()
      local xi = idx_file("img3", 0x08, { 3, 2, 2 }, byte_string(12, function(i) return i end))
      local y2 = idx_file("lab2", 0x08, { 2 }, "\1\2")
      fails(function() data.mnist_idx(xi, y2) end, "mnist_idx: 3 images in", "but 2 labels in")
      local flat = idx_file("flat", 0x08, { 3, 4 }, byte_string(12, function(i) return i end))
      fails(function() data.mnist_idx(flat, y2) end, "holds uint8 [3, 4]; expected uint8 images [N, rows, cols]")
      local yf = idx_file("labf", 0x0D, { 3 }, string.rep("\0", 12))
      fails(function() data.mnist_idx(xi, yf) end, "holds float32 [3]; expected uint8 labels [N]")
    end)
  end)

  describe("TensorDataset", function()
    it("has a length and 0-based samples", function()
      local ds = data.TensorDataset(ddp.arange(6):view(3, 2), ddp.tensor({ 7, 8, 9 }), ddp.zeros(3, 1, 1))
      assert.are.equal(3, #ds)
      assert.are.equal(3, ds:len())
      local x, y, z = ds:get(1)
      assert.are.same({ 2, 3 }, values(x))
      assert.are.equal(8, y)
      assert.are.same({ 1, 1 }, z:shape())
      assert.are.equal(9, select(2, ds:get(-1)))
      assert.are.equal("TensorDataset(3 samples: int64 [3, 2], int64 [3], float32 [3, 1, 1])", tostring(ds))
    end)

    it("refuses tensors of different lengths, non-tensors, 0-dim tensors", function()
      fails(function() data.TensorDataset(ddp.zeros(5, 2), ddp.zeros(4)) end,
            "TensorDataset: all tensors need the same size(0)", "tensor 1 has shape [5, 2]", "tensor 2 has shape [4]")
      fails(function() data.TensorDataset(ddp.zeros(5), {1, 2}) end, "argument 2 is a table, expected a tensor")
      fails(function() data.TensorDataset(ddp.tensor(3)) end, "tensor 1 is 0-dim")
      fails(function() data.TensorDataset() end, "expected one or more tensors")
    end)

    it("refuses an index out of range", function()
      local ds = data.TensorDataset(ddp.zeros(4))
      fails(function() ds:get(4) end, "TensorDataset:get: index 4 out of range for 4 samples")
      fails(function() ds:get(-5) end, "index -5 out of range")
      fails(function() ds:get(0.5) end, "index 0.5 out of range")
    end)
  end)

  describe("DataLoader", function()
    it("counts batches with and without drop_last", function()
      local ds = index_dataset(10)
      local l = data.DataLoader(ds, { batch_size = 3 })
      assert.are.equal(4, #l)
      local seen, sizes, numbers = pass(l)
      assert.are.same({ 3, 3, 3, 1 }, sizes)
      assert.are.same({ 0, 1, 2, 3 }, numbers)
      assert.are.same({ 0, 1, 2, 3, 4, 5, 6, 7, 8, 9 }, seen)
      l = data.DataLoader(ds, { batch_size = 3, drop_last = true })
      assert.are.equal(3, #l)
      assert.are.same({ 3, 3, 3 }, select(2, pass(l)))
      assert.are.equal(10, #data.DataLoader(ds))  -- batch_size 1 by default
      assert.are.equal(1, #data.DataLoader(ds, { batch_size = 10, drop_last = true }))
      assert.are.equal(0, #data.DataLoader(ds, { batch_size = 11, drop_last = true }))
      assert.are.same({}, select(2, pass(data.DataLoader(ds, { batch_size = 11, drop_last = true }))))
    end)

    it("batches Fashion-MNIST: 938 batches of 64, the last of 32", function()
      local l = data.DataLoader(train, { batch_size = 64 })
      assert.are.equal(938, #l)
      assert.are.equal(937, #data.DataLoader(train, { batch_size = 64, drop_last = true }))
      local n, last = 0
      for i, x, y in l:iter() do
        if i == 0 then
          assert.are.same({ 64, 784 }, x:shape())
          assert.are.equal("float32", x:dtype())
          assert.are.equal("int64", y:dtype())
          assert.are.same({ 9, 0, 0, 3, 0 }, values(y:narrow(0, 0, 5)))
          assert.is_true(x:equal(train:tensors()[1]:narrow(0, 0, 64)))
        end
        n, last = n + x:size(0), x:size(0)
      end
      assert.are.equal(60000, n)
      assert.are.equal(32, last)
    end)

    it("shuffles every sample exactly once per epoch, differently each epoch", function()
      local l = data.DataLoader(index_dataset(1000), { batch_size = 64, shuffle = true, seed = 7 })
      local e0 = pass(l)
      local e1 = pass(l)
      assert.is_true(is_permutation(e0, 1000))
      assert.is_true(is_permutation(e1, 1000))
      assert.is_false(same(e0, e1))
      local sorted = {}
      for i = 1, 1000 do sorted[i] = i - 1 end
      assert.is_false(same(e0, sorted))
    end)

    it("shuffles Fashion-MNIST with every label kept with its image", function()
      local x0, y0 = unpack(train:tensors())
      -- a third field numbers the samples, so each batch can be checked
      local ds = data.TensorDataset(x0, y0, ddp.arange(60000))
      local l = data.DataLoader(ds, { batch_size = 64, shuffle = true, seed = 3 })
      local seen = ddp.zeros(60000, { dtype = "int64" })
      for _, x, y, k in l:iter() do
        assert.is_true(x:equal(x0:index_select(0, k)))
        assert.is_true(y:equal(y0:index_select(0, k)))
        seen:scatter_add_(0, k, ddp.ones(k:size(0), { dtype = "int64" }))
      end
      assert.is_true(seen:eq(1):all())
    end)

    it("repeats an order with the same seed and epoch", function()
      local a = data.DataLoader(index_dataset(500), { batch_size = 10, shuffle = true, seed = 42 })
      local b = data.DataLoader(index_dataset(500), { batch_size = 10, shuffle = true, seed = 42 })
      local c = data.DataLoader(index_dataset(500), { batch_size = 10, shuffle = true, seed = 43 })
      assert.is_true(same(pass(a), pass(b)))
      assert.is_false(same(pass(a), pass(c)))
      a:set_epoch(5)
      b:set_epoch(5)
      assert.is_true(same(pass(a), pass(b)))
      a:set_epoch(5)
      b:set_epoch(6)
      assert.is_false(same(pass(a), pass(b)))
    end)

    it("advances the epoch after each completed pass; set_epoch wins", function()
      local l = data.DataLoader(index_dataset(200), { batch_size = 16, shuffle = true, seed = 1 })
      assert.are.equal(0, l:epoch())
      local e0 = pass(l)
      assert.are.equal(1, l:epoch())
      local e1 = pass(l)
      assert.are.equal(2, l:epoch())
      assert.is_false(same(e0, e1))
      l:set_epoch(0)
      assert.is_true(same(e0, pass(l)))
      l:set_epoch(1)
      assert.is_true(same(e1, pass(l)))
      -- a loop left with break does not complete the pass
      l:set_epoch(0)
      for i in l:iter() do
        if i == 2 then break end
      end
      assert.are.equal(0, l:epoch())
      assert.is_true(same(e0, pass(l)))
      -- set_epoch during a pass is kept
      for i in l:iter() do
        if i == 0 then l:set_epoch(9) end
      end
      assert.are.equal(9, l:epoch())
    end)

    it("draws its seed from the global generator when none is given", function()
      ddp.manual_seed(11)
      local a = data.DataLoader(index_dataset(300), { batch_size = 30, shuffle = true })
      ddp.manual_seed(11)
      local b = data.DataLoader(index_dataset(300), { batch_size = 30, shuffle = true })
      ddp.manual_seed(12)
      local c = data.DataLoader(index_dataset(300), { batch_size = 30, shuffle = true })
      assert.is_true(same(pass(a), pass(b)))
      assert.is_false(same(pass(a), pass(c)))
    end)

    it("leaves the global random stream alone while shuffling", function()
      local l = data.DataLoader(index_dataset(300), { batch_size = 30, shuffle = true, seed = 5 })
      ddp.manual_seed(99)
      local before = ddp.get_rng_state()
      pass(l)
      pass(l)
      assert.are.same(before, ddp.get_rng_state())
      local r1 = ddp.rand(3)
      ddp.manual_seed(99)
      assert.is_true(r1:equal(ddp.rand(3)))
    end)

    it("shuffles as randperm does from the stream (seed, epoch * 2^32)", function()
      local s = data.RandomSampler(1000, { seed = 123 })
      local saved = ddp.get_rng_state()
      ddp.set_rng_state({ seed = 123, offset = 3 * 2^32 })
      local expect = ddp.randperm(1000)
      ddp.set_rng_state(saved)
      assert.is_true(s:indices(3):equal(expect))
    end)

    it("hands out fresh tensors: no batch shares storage", function()
      local ds = index_dataset(8)
      local x0 = ds:tensors()[1]
      local l = data.DataLoader(ds, { batch_size = 4 })
      local batches = {}
      for _, x in l:iter() do
        batches[#batches + 1] = x
        assert.is_false(ffi.C.dl_tensor_same_storage(x, x0) ~= 0)
      end
      assert.is_false(ffi.C.dl_tensor_same_storage(batches[1], batches[2]) ~= 0)
      batches[1]:fill_(-1)
      assert.are.same({ 0, 1, 2, 3 }, values(select(2, l:iter()())))
    end)

    it("batches one field, or three", function()
      local l = data.DataLoader(data.TensorDataset(ddp.arange(5)), { batch_size = 2 })
      local got = {}
      for i, x, extra in l:iter() do
        assert.is_nil(extra)
        got[#got + 1] = values(x)
      end
      assert.are.same({ { 0, 1 }, { 2, 3 }, { 4 } }, got)
      local ds = data.TensorDataset(ddp.arange(5), ddp.arange(5):mul(2), ddp.ones(5, 2))
      for i, a, b, c in data.DataLoader(ds, { batch_size = 5 }):iter() do
        assert.are.same({ 0, 2, 4, 6, 8 }, values(b))
        assert.are.same({ 5, 2 }, c:shape())
      end
    end)

    it("takes any dataset with get and len, stacking its samples", function()
      local ds = {
        len = function() return 5 end,
        get = function(_, i) return ddp.full({ 2 }, i), i * 10 end,
      }
      local l = data.DataLoader(ds, { batch_size = 2 })
      assert.are.equal(3, #l)
      local got = {}
      for _, x, y in l:iter() do got[#got + 1] = { values(x), values(y) } end
      assert.are.same({ { { { 0, 0 }, { 1, 1 } }, { 0, 10 } }, { { { 2, 2 }, { 3, 3 } }, { 20, 30 } },
                        { { { 4, 4 } }, { 40 } } }, got)
    end)

    describe("sampler protocol", function()
      it("takes a table with indices(epoch) and len()", function()
        local epochs = {}
        local s = {
          indices = function(_, epoch)
            epochs[#epochs + 1] = epoch
            return ddp.arange(9, -1, -1)  -- 9 .. 0
          end,
          len = function() return 10 end,
        }
        local l = data.DataLoader(index_dataset(10), { batch_size = 4, sampler = s })
        assert.are.equal(3, #l)
        assert.are.same({ 9, 8, 7, 6, 5, 4, 3, 2, 1, 0 }, pass(l))
        l:set_epoch(4)
        pass(l)
        assert.are.same({ 0, 4 }, epochs)
      end)

      it("takes a __len metamethod, on a table too", function()
        local s = setmetatable({ indices = function() return ddp.tensor({ 1, 3, 5 }) end },
                               { __len = function() return 3 end })
        local l = data.DataLoader(index_dataset(6), { batch_size = 2, sampler = s })
        assert.are.equal(2, #l)
        assert.are.same({ 1, 3, 5 }, pass(l))
      end)

      it("is what SequentialSampler and RandomSampler implement", function()
        local seq = data.SequentialSampler(5)
        assert.are.equal(5, #seq)
        assert.are.same({ 0, 1, 2, 3, 4 }, values(seq:indices(0)))
        local ds = index_dataset(50)
        local r = data.RandomSampler(ds, { seed = 9 })
        assert.are.equal(50, #r)
        assert.are.equal(50, r:len())
        assert.is_true(r:indices(2):equal(r:indices(2)))
        assert.is_false(r:indices(2):equal(r:indices(3)))
        local l = data.DataLoader(ds, { batch_size = 7, sampler = r })
        l:set_epoch(2)
        assert.are.same(values(r:indices(2)), pass(l))
        assert.are.same(values(data.SequentialSampler(ds):indices(0)), pass(data.DataLoader(ds, {
          batch_size = 7, sampler = data.SequentialSampler(ds) })))
      end)

      it("reports samplers that break it", function()
        local ds = index_dataset(4)
        local function with(s) return data.DataLoader(ds, { sampler = s }) end
        fails(function() with({ len = function() return 4 end }) end,
              "sampler must have an indices(epoch) method (the sampler protocol)")
        fails(function() with({ indices = function() return ddp.arange(4) end }) end,
              "the sampler has no len() method and no __len metamethod")
        -- a Lua table of indices is fine; a table of something else is not
        local l = with({ indices = function() return { 3, 2, 1, 0 } end, len = function() return 4 end })
        local order = {}
        for _, x in l:iter() do order[#order + 1] = x:item() end
        assert.are.same({ 3, 2, 1, 0 }, order)
        l = with({ indices = function() return { 0, "1", 2, 3 } end, len = function() return 4 end })
        fails(function() l:iter() end, 'sampler:indices(0) item 2 is "1", not an integer index')
        l = with({ indices = function() return "0123" end, len = function() return 4 end })
        fails(function() l:iter() end, "sampler:indices(0) must return a 1-D int64 tensor or a table of indices")
        l = with({ indices = function() return ddp.arange(4):float() end, len = function() return 4 end })
        fails(function() l:iter() end, "got float32 [4]")
        l = with({ indices = function() return ddp.arange(3) end, len = function() return 4 end })
        fails(function() l:iter() end, "sampler:indices(0) returned 3 indices but the sampler's length is 4")
        l = with({ indices = function() return ddp.tensor({ 0, 1, 2, 4 }) end, len = function() return 4 end })
        fails(function() l:iter() end, "holds index 4, out of range for a dataset of 4 samples")
        l = with({ indices = function() return ddp.tensor({ 0, -1, 2, 3 }) end, len = function() return 4 end })
        fails(function() l:iter() end, "holds index -1")
      end)
    end)

    describe("state_dict", function()
      local serialize = require "ddp.serialize"
      -- a state as a checkpoint gives it back: written and parsed again
      local function through_text(sd) return assert(serialize.decode(serialize.encode(sd))) end
      -- every batch of passes over l until its epoch reaches `upto`, as
      -- "epoch:i:x,x,x" strings
      local function batches(l, upto, out)
        out = out or {}
        while l:epoch() < upto do
          local e = l:epoch()
          for i, x in l:iter() do out[#out + 1] = ("%d:%d:%s"):format(e, i, table.concat(x:totable(), ",")) end
        end
        return out
      end

      it("resumes where the saved loader stood: the rest of its epoch, then the same epochs", function()
        for _, o in ipairs {
          { n = 23, batch_size = 4, shuffle = true, seed = 5 },
          { n = 23, batch_size = 4, shuffle = true, seed = 5, drop_last = true },
          { n = 24, batch_size = 4, shuffle = true },  -- seed drawn from the global generator
          { n = 10, batch_size = 3 },                  -- in order
        } do
          local function make()
            return data.DataLoader(index_dataset(o.n), { batch_size = o.batch_size, shuffle = o.shuffle,
                                                         seed = o.seed, drop_last = o.drop_last })
          end
          ddp.manual_seed(1)
          local want = batches(make(), 3)
          local nb = #make()
          -- stop after k batches of epoch e: k = 0 is the epoch's start, k = nb
          -- is after its last batch, before the loop ran out
          for _, stop in ipairs { { 0, 0 }, { 0, 1 }, { 1, 2 }, { 1, nb - 1 }, { 1, nb }, { 2, nb } } do
            local e, k = stop[1], stop[2]
            ddp.manual_seed(1)
            local l = make()
            local got = batches(l, e)
            if k > 0 then
              for i, x in l:iter() do
                got[#got + 1] = ("%d:%d:%s"):format(e, i, table.concat(x:totable(), ","))
                if i == k - 1 then break end
              end
            end
            local sd = through_text(l:state_dict())
            assert.are.same({ e, k }, { sd.epoch, sd.batches })
            ddp.manual_seed(99)  -- another start: another drawn seed, restored from the state
            local l2 = make()
            l2:load_state_dict(sd)
            assert.are.same(sd, through_text(l2:state_dict()))
            batches(l2, 3, got)
            assert.are.same(want, got, ("n = %d, stop at epoch %d batch %d"):format(o.n, e, k))
          end
        end
      end)

      it("says where the next batch comes from, at boundaries and mid-epoch", function()
        local l = data.DataLoader(index_dataset(10), { batch_size = 3, shuffle = true, seed = 2 })
        local function at() local sd = l:state_dict() return { sd.epoch, sd.batches } end
        assert.are.same({ 0, 0 }, at())
        local it = l:iter()
        assert.are.same({ 0, 0 }, at())
        it()
        assert.are.same({ 0, 1 }, at())
        for _ = 1, 3 do it() end
        assert.are.same({ 0, 4 }, at())  -- every batch handed out, the loop not yet over
        assert.is_nil(it())
        assert.are.same({ 1, 0 }, at())  -- the pass ended: the next epoch's start
        for i in l:iter() do if i == 1 then break end end
        assert.are.same({ 1, 2 }, at())  -- a loop left with break: after its last batch
        l:set_epoch(4)
        assert.are.same({ 4, 0 }, at())
        for i in l:iter() do if i == 0 then l:set_epoch(7) end end
        assert.are.same({ 7, 0 }, at())  -- set_epoch during the pass: that epoch's start
        local sd = l:state_dict()
        assert.are.same({ batch_size = 3, drop_last = false, dataset_len = 10, sampler_len = 10,
                          epoch = 7, batches = 0, sampler = { seed = 2, dataset_len = 10 } }, sd)
        -- without shuffling there is no sampler state
        assert.is_nil(data.DataLoader(index_dataset(4)):state_dict().sampler)
      end)

      it("lets set_epoch win over a loaded position, unless it names the same epoch", function()
        local function make() return data.DataLoader(index_dataset(12), { batch_size = 4, shuffle = true, seed = 3 }) end
        local ref = make()
        ref:set_epoch(1)
        local e1 = loaders.pass(ref)
        ref:set_epoch(5)
        local e5 = loaders.pass(ref)
        local sd = { epoch = 1, batches = 2, batch_size = 4, drop_last = false, dataset_len = 12, sampler_len = 12,
                     sampler = { seed = 3 } }
        local l = make()
        l:load_state_dict(sd)
        l:set_epoch(1)  -- what a PyTorch-style loop calls: the position stays
        local rest, _, numbers = loaders.pass(l)
        assert.are.same({ e1[9], e1[10], e1[11], e1[12] }, rest)
        assert.are.same({ 2 }, numbers)
        assert.are.equal(2, l:epoch())
        l = make()
        l:load_state_dict(sd)
        l:set_epoch(5)
        assert.are.same(e5, loaders.pass(l))
      end)

      it("refuses a mid-epoch state for batches cut otherwise; an epoch boundary takes any", function()
        local function make(n, bs) return data.DataLoader(index_dataset(n), { batch_size = bs, shuffle = true, seed = 1 }) end
        local l = make(20, 4)
        for i in l:iter() do if i == 1 then break end end
        local mid = l:state_dict()
        fails(function() make(20, 5):load_state_dict(mid) end,
              "DataLoader:load_state_dict: the state was saved 2 batches into epoch 0 with batch_size = 4, and this loader has 5")
        fails(function() make(21, 4):load_state_dict(mid) end, "dataset_len = 20, and this loader has 21")
        fails(function() data.DataLoader(index_dataset(20), { batch_size = 4 }):load_state_dict(mid) end,
              "and this loader's sampler SequentialSampler(20) has no load_state_dict")
        local other = make(21, 5)
        other:load_state_dict({ epoch = 3, batches = 0, batch_size = 4, dataset_len = 20, sampler = { seed = 9 } })
        assert.are.equal(3, other:epoch())
        assert.are.equal(9, other.sampler.seed)
        fails(function() l:load_state_dict(nil) end, "DataLoader:load_state_dict: expected a table from state_dict(), got nil")
        fails(function() l:load_state_dict({ epoch = 1 }) end, "the state's batches must be an integer from 0 to 2^53 - 1, got nil")
        fails(function() l:load_state_dict({ epoch = -1, batches = 0 }) end, "the state's epoch must be an integer from 0 to 2^53 - 1, got -1")
        fails(function() l:load_state_dict({ epoch = 2^21, batches = 0 }) end, "epoch must be an integer from 0 to")
        fails(function() l:load_state_dict({ epoch = 0, batches = 6, batch_size = 4, drop_last = false, dataset_len = 20,
                                             sampler_len = 20 }) end,
              "the state was saved 6 batches into epoch 0, but this loader has 5 batches per epoch")
        -- mid-epoch, the fields that show the cut are required: a tampered state is refused, naming the one missing
        for _, k in ipairs { "batch_size", "drop_last", "dataset_len", "sampler_len" } do
          local sd = l:state_dict()
          sd.batches, sd[k] = 1, nil
          fails(function() make(20, 4):load_state_dict(sd) end,
                "the state was saved 1 batch into epoch 0 but holds no " .. k .. ", so it cannot show the batches are cut as they were")
        end
        fails(function() l:load_state_dict({ epoch = 0, batches = 2^63 }) end,
              "the state's batches must be an integer from 0 to 2^53 - 1, got 9.2233720368548e+18")
        fails(function() l:load_state_dict({ epoch = 0, batches = 0, sampler = { seed = -2 } }) end,
              "RandomSampler:load_state_dict: the state's seed must be an integer from 0 to 2^53 - 1, got -2")
      end)
    end)

    it("reports bad options at the caller's line", function()
      local ds = index_dataset(4)
      fails(function() data.DataLoader(ds, { batch_size = 0 }) end, "batch_size must be a positive integer, got 0")
      fails(function() data.DataLoader(ds, { batch_size = 1.5 }) end, "got 1.5")
      fails(function() data.DataLoader(ds, { batch_size = "64" }) end, 'got "64"')
      fails(function() data.DataLoader(ds, { batchsize = 64 }) end,
            'DataLoader: unknown option "batchsize" (expected batch_size, drop_last, num_workers, persistent_workers, pin_memory, prefetch_factor, sampler, seed, shuffle, timeout, worker_init_fn)')
      fails(function() data.DataLoader(ds, { shuffle = "yes" }) end, 'shuffle must be true or false, got "yes"')
      fails(function() data.DataLoader(ds, { shuffle = true, sampler = data.SequentialSampler(4) }) end,
            "sampler and shuffle = true exclude each other")
      fails(function() data.DataLoader(ds, { shuffle = true, seed = -1 }) end, "seed must be an integer from 0 to 2^53 - 1, got -1")
      fails(function() data.DataLoader(ds, { seed = 3.5 }) end, "seed must be an integer")  -- seeds augmentations only
      fails(function() data.DataLoader(ddp.zeros(3)) end, "dataset must be a TensorDataset or an object with get(i) and len(), got a tensor")
      fails(function() data.DataLoader(ds):set_epoch(-1) end, "set_epoch: epoch must be an integer from 0")
      fails(function() data.RandomSampler(4, { seed = 0.5 }) end, "RandomSampler: seed must be an integer")
      fails(function() data.SequentialSampler("x") end, 'SequentialSampler: expected a dataset or a number of samples, got "x"')
    end)
  end)
end)

describe("a dataset of the script's own (the protocol: #ds or ds:len(), ds:get(i))", function()
  local function dataset(get, n)
    local D = {}
    D.__index = D
    function D:len() return n or 10 end
    D.get = get
    return setmetatable({}, D)
  end
  local function batches(ds, opts)
    local out = {}
    for _, x, y in data.DataLoader(ds, opts):iter() do out[#out + 1] = { x:totable(), y and y:totable() } end
    return out
  end

  it("takes a sample's fields as values (return x, y) or as one list {x, y}, PyTorch's tuple", function()
    local values = dataset(function(_, i) return ddp.full({ 2 }, i), i end)
    local tuple = dataset(function(_, i) return { ddp.full({ 2 }, i), i } end)
    local want = batches(values, { batch_size = 4 })
    assert.same({ { { 0, 0 }, { 1, 1 }, { 2, 2 }, { 3, 3 } }, { 0, 1, 2, 3 } }, want[1])
    assert.same(want, batches(tuple, { batch_size = 4 }))
    assert.same(want, batches(tuple, { batch_size = 4, num_workers = 2 }))
    -- a list of numbers alone is one field, a 1-D tensor per sample
    local numbers = dataset(function(_, i) return { i, 2 * i } end, 4)
    assert.same({ { { 0, 0 }, { 1, 2 } } }, { batches(numbers, { batch_size = 2 })[1][1] })
  end)

  it("names a dict sample and samples of unequal fields", function()
    local dict = dataset(function(_, i) return { x = ddp.zeros(2), y = i } end)
    fails(function() batches(dict, { batch_size = 2 }) end,
          "DataLoader: field 1 of a sample is a table of named values (a dict); return the fields as values (return x, y) or as a list {x, y}")
    local odd = dataset(function(_, i) if i == 2 then return ddp.zeros(2) end return ddp.zeros(2), i end)
    fails(function() batches(odd, { batch_size = 4 }) end,
          "DataLoader: sample 2 has 1 field, sample 0 had 2: every sample gives the same fields")
  end)
end)
