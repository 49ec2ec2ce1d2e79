-- ddp.data: data for training -- IDX files (MNIST, Fashion-MNIST),
-- TensorDataset, samplers (DistributedSampler: each rank's share) and the
-- DataLoader that cuts a dataset into batches, each gathered in C by one
-- index_select per field; reduce_metrics sums evaluation metrics over ranks.
-- Token files for language models: data.TokenDataset (ddp.tokens).
--
-- The sampler protocol (how the DataLoader learns the order of an epoch; the
-- DistributedSampler plugs in through it):
--   s:indices(epoch)  the dataset indices of that epoch, in order: a 1-D
--                     int64 (or int32) tensor or a Lua table of numbers
--                     (0-based; epoch counts from 0).  The same epoch must
--                     give the same order.  A sampler may also offer
--                     s:tensor(epoch), the same as a tensor (a DataLoader
--                     then takes that).
--   s:len() or #s     how many indices every epoch gives.
--   s:epoch(), s:set_epoch(e)   optional: a sampler that keeps its own
--                     epoch (DistributedSampler).  A DataLoader over it then
--                     keeps none: it reads and sets the sampler's, so
--                     loader:set_epoch(e) and s:set_epoch(e) do the same,
--                     and each completed pass advances the sampler's epoch.
--   s:state_dict(), s:load_state_dict(sd)   optional: what a checkpoint
--                     must hold to give the same orders again (the seed,
--                     the epoch); a DataLoader's state_dict holds its
--                     sampler's, and its load_state_dict restores it.
-- SequentialSampler, RandomSampler and DistributedSampler implement it.
--
-- Exact resume: a DataLoader's state_dict() is where its next batch comes
-- from -- the epoch and how many batches of it were handed out -- plus its
-- sampler's state, so ddp.save_checkpoint(path, {loader = loader, ...})
-- and load_checkpoint put a resumed run on the very batch the interrupted
-- one would have taken next.  Nothing is prefetched or in flight (batches
-- are gathered when asked for), so handed out is consumed.
local core = require "ddp.core"
local factory = require "ddp.tensor.factory"
local dist = require "ddp.dist"
local C, ffi = core.C, core.ffi
local new, raise, show = core.new, core.raise, core.show
local is_tensor, is_integer = core.is_tensor, core.is_integer
local floor, ceil, min = math.floor, math.ceil, math.min
local type, select, tostring, pcall, unpack = type, select, tostring, pcall, unpack

core.add_lib_file(debug.getinfo(1, "S").source)

local data = {}
data.tokens = require "ddp.tokens"
data.TokenDataset = data.tokens.TokenDataset

-- -- Objects with a length ----------------------------------------------------

-- The classes here are callable (data.TensorDataset(x, y) runs its init).
-- LuaJIT ignores __len on tables, so their objects, which `#` must
-- measure, are core.class's userdata proxies; getmetatable(obj) names the
-- class.
local function class(name)
  return core.class(name, nil, { proxy = true })
end

-- Reads obj[k] without raising on values that cannot be indexed.
local function field(obj, k)
  local t = type(obj)
  if t ~= "table" and t ~= "userdata" and t ~= "cdata" then return nil end
  local ok, v = pcall(function() return obj[k] end)
  if ok then return v end
  return nil
end

-- The length of a dataset or sampler: obj:len(), or its __len metamethod
-- (called directly, so it works on tables too).
local function length(obj, op, what)
  local n
  local len = field(obj, "len")
  if type(len) == "function" then
    n = len(obj)
  elseif type(obj) == "table" then
    local mt = getmetatable(obj)
    if type(mt) == "table" and mt.__len then n = mt.__len(obj) end
  elseif type(obj) == "userdata" or type(obj) == "cdata" then
    local ok, v = pcall(function() return #obj end)
    if ok then n = v end
  end
  if n == nil then
    raise(("%s: the %s has no len() method and no __len metamethod"):format(op, what))
  end
  if not is_integer(n) or n < 0 then
    raise(("%s: the %s's length must be a non-negative integer, got %s"):format(op, what, show(n)))
  end
  return n
end

local check_opts = core.check_opts

local function bool_opt(v, op, name, dflt)
  if v == nil then return dflt end
  if type(v) ~= "boolean" then raise(("%s: %s must be true or false, got %s"):format(op, name, show(v))) end
  return v
end

-- Seeds and epochs reach C as uint64: keep them exact Lua integers.
local function seed_arg(v, op, what)
  if not is_integer(v) or v < 0 or v >= 2^53 then
    raise(("%s: %s must be an integer from 0 to 2^53 - 1, got %s"):format(op, what, show(v)))
  end
  return v
end

-- A state dict given to load_state_dict: a table whose listed fields are
-- non-negative integers (a checkpoint's numbers, checked before use).
local function state_arg(sd, op, ints)
  if type(sd) ~= "table" or is_tensor(sd) then
    raise(("%s: expected a table from state_dict(), got %s"):format(op, show(sd)))
  end
  for _, k in ipairs(ints) do
    local v = sd[k]
    if not is_integer(v) or v < 0 then
      raise(("%s: the state's %s must be a non-negative integer, got %s"):format(op, k, show(v)))
    end
  end
  return sd
end

-- "1 batch", "2 batches".
local function count(n, one, many)
  return ("%d %s"):format(n, n == 1 and one or many)
end

-- A seed from the global generator: so ddp.manual_seed(n) before building
-- a loader fixes its shuffles too.
local function draw_seed()
  return factory.randint(0, 2^53, { 1 }):get(0)
end

-- -- IDX files ----------------------------------------------------------------

-- data.read_idx(path): an IDX file (gzip'd or not) as a tensor with the
-- file's shape: uint8, int32 (int8, int16, int32 files), float32 or float64.
function data.read_idx(path)
  if type(path) ~= "string" then raise("read_idx: path must be a string, got " .. show(path)) end
  return new(C.dl_read_idx, path)
end

-- Images (uint8 [N, rows, cols]) and labels (uint8 [N]) as a TensorDataset
-- of float32 images scaled to [0, 1] -- [N, rows * cols], or with
-- flat = false [N, 1, rows, cols] -- and int64 labels.
local function load_images(op, images_path, labels_path, flat)
  local x, y = data.read_idx(images_path), data.read_idx(labels_path)
  if x:dtype() ~= "uint8" or x:dim() ~= 3 then
    raise(("%s: %s holds %s %s; expected uint8 images [N, rows, cols]")
          :format(op, images_path, x:dtype(), core.fmt_shape(x:shape())))
  end
  if y:dtype() ~= "uint8" or y:dim() ~= 1 then
    raise(("%s: %s holds %s %s; expected uint8 labels [N]")
          :format(op, labels_path, y:dtype(), core.fmt_shape(y:shape())))
  end
  local n, rows, cols = x:size(0), x:size(1), x:size(2)
  if y:size(0) ~= n then
    raise(("%s: %d images in %s but %d labels in %s"):format(op, n, images_path, y:size(0), labels_path))
  end
  -- x / 255 as torchvision's ToTensor computes it
  local images = x:to("float32"):div_(255)
  images = flat and images:view(n, rows * cols) or images:view(n, 1, rows, cols)
  local labels = y:long()
  x:free()
  y:free()
  return data.TensorDataset(images, labels)
end

-- data.mnist_idx(images_path, labels_path[, {flat = true}])
function data.mnist_idx(images_path, labels_path, opts)
  opts = check_opts(opts, "mnist_idx", { flat = true })
  for _, p in ipairs { images_path, labels_path } do
    if type(p) ~= "string" then raise("mnist_idx: paths must be strings, got " .. show(p)) end
  end
  return load_images("mnist_idx", images_path, labels_path, bool_opt(opts.flat, "mnist_idx", "flat", true))
end

data.FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"
local split_prefix = { train = "train", test = "t10k" }

-- The file in dir, gzip'd (as Debian ships it) or not; nil and why not.
local function find_file(dir, name)
  local why
  for _, p in ipairs { dir .. "/" .. name .. ".gz", dir .. "/" .. name } do
    local f, err = io.open(p, "rb")
    if f then
      f:close()
      return p
    end
    why = why or err
  end
  return nil, why
end

-- data.fashion_mnist(split[, dir | {dir =, flat =}]): "train" (60000
-- images) or "test" (10000); the directory defaults to $FASHION_MNIST_DIR,
-- then to where the Debian package dataset-fashion-mnist puts the files.
function data.fashion_mnist(split, opts)
  local op = "fashion_mnist"
  if not split_prefix[split] then
    raise(('%s: split must be "train" or "test", got %s'):format(op, show(split)))
  end
  if type(opts) == "string" then opts = { dir = opts } end
  opts = check_opts(opts, op, { dir = true, flat = true })
  local env = os.getenv("FASHION_MNIST_DIR")
  local dir = opts.dir or (env ~= "" and env) or data.FASHION_MNIST_DIR
  if type(dir) ~= "string" then raise(op .. ": dir must be a string, got " .. show(dir)) end
  local paths = {}
  for i, kind in ipairs { "images-idx3-ubyte", "labels-idx1-ubyte" } do
    local name = split_prefix[split] .. "-" .. kind
    local p, why = find_file(dir, name)
    if not p then
      raise(("%s: cannot open %s (%s): install the Debian package dataset-fashion-mnist "
             .. "(apt-get install dataset-fashion-mnist, or make deps), or set FASHION_MNIST_DIR "
             .. "to a directory holding the Fashion-MNIST files")
            :format(op, dir .. "/" .. name .. ".gz", tostring(why):match(": ([^:]*)$") or tostring(why)))
    end
    paths[i] = p
  end
  return load_images(op, paths[1], paths[2], bool_opt(opts.flat, op, "flat", true))
end

-- -- TensorDataset ------------------------------------------------------------

local TensorDataset = class("TensorDataset")
data.TensorDataset = TensorDataset

-- data.TensorDataset(x, y, ...): sample i is (x[i], y[i], ...); every
-- tensor has the same size(0).
function TensorDataset:init(...)
  local op = "TensorDataset"
  local n = select("#", ...)
  if n == 0 then raise(op .. ": expected one or more tensors") end
  local fields = { ... }
  for i = 1, n do
    local t = fields[i]
    if not is_tensor(t) then
      raise(("%s: argument %d is a %s, expected a tensor"):format(op, i, core.describe(t)))
    end
    if t:dim() == 0 then
      raise(("%s: tensor %d is 0-dim; every tensor needs a first dim that counts samples"):format(op, i))
    end
    if t:size(0) ~= fields[1]:size(0) then
      raise(("%s: all tensors need the same size(0), but tensor 1 has shape %s and tensor %d has shape %s")
            :format(op, core.fmt_shape(fields[1]:shape()), i, core.fmt_shape(t:shape())))
    end
  end
  self._fields, self._n = fields, fields[1]:size(0)
end

function TensorDataset:len() return self._n end
TensorDataset.__len = TensorDataset.len

-- ds:get(i) (0-based; negative from the end): the fields of sample i, each
-- as t:get(i) gives it -- a view for a tensor of 2 or more dims, a number
-- for a 1-D one.
function TensorDataset:get(i)
  local n = self._n
  if not is_integer(i) or i < -n or i >= n then
    raise(("TensorDataset:get: index %s out of range for %d samples"):format(show(i), n))
  end
  local f = self._fields
  if #f == 2 then return f[1]:get(i), f[2]:get(i) end
  local out = {}
  for k = 1, #f do out[k] = f[k]:get(i) end
  return unpack(out, 1, #f)
end

-- The tensors, as a new table.
function TensorDataset:tensors()
  return { unpack(self._fields) }
end

function TensorDataset:__tostring()
  local parts = {}
  for k, t in ipairs(self._fields) do
    parts[k] = t:dtype() .. " " .. core.fmt_shape(t:shape())
  end
  return ("TensorDataset(%d samples: %s)"):format(self._n, table.concat(parts, ", "))
end

-- -- Samplers -----------------------------------------------------------------

local function size_arg(n, op)
  if is_integer(n) and n >= 0 then return n end
  if n ~= nil and (type(n) == "table" or type(n) == "userdata") then return length(n, op, "dataset") end
  raise(("%s: expected a dataset or a number of samples, got %s"):format(op, show(n)))
end

local SequentialSampler = class("SequentialSampler")
data.SequentialSampler = SequentialSampler

-- data.SequentialSampler(n | dataset): 0, 1, ..., n - 1 every epoch.
function SequentialSampler:init(n)
  self._n = size_arg(n, "SequentialSampler")
end
function SequentialSampler:len() return self._n end
SequentialSampler.__len = SequentialSampler.len
function SequentialSampler:indices()
  return new(C.dl_arange, 0, self._n, 1, C.DL_INT64)
end
function SequentialSampler:__tostring() return ("SequentialSampler(%d)"):format(self._n) end

local RandomSampler = class("RandomSampler")
data.RandomSampler = RandomSampler

-- data.RandomSampler(n | dataset[, {seed =}]): a permutation per epoch,
-- from a Philox stream of its own (key seed, counter epoch * 2^32 blocks):
-- the same seed and epoch give the same order on every machine, and
-- shuffling leaves the global generator untouched.  seed defaults to a
-- draw from the global generator (so ddp.manual_seed fixes it).
function RandomSampler:init(n, opts)
  local op = "RandomSampler"
  opts = check_opts(opts, op, { seed = true })
  n = size_arg(n, op)
  local seed = opts.seed == nil and draw_seed() or seed_arg(opts.seed, op, "seed")
  self._n, self.seed = n, seed
end
function RandomSampler:len() return self._n end
RandomSampler.__len = RandomSampler.len

local MAX_EPOCH = 2^21  -- epoch * 2^32 stays an exact Lua number
function RandomSampler:indices(epoch)
  epoch = epoch or 0
  if not is_integer(epoch) or epoch < 0 or epoch >= MAX_EPOCH then
    raise(("RandomSampler:indices: epoch must be an integer from 0 to %d, got %s"):format(MAX_EPOCH - 1, show(epoch)))
  end
  -- randperm(n) takes n / 2 blocks, so epochs never share a block below
  -- n = 2^33
  return new(C.dl_randperm_stream, self._n, self.seed, epoch * 2^32, C.DL_INT64)
end
function RandomSampler:__tostring() return ("RandomSampler(%d, seed %d)"):format(self._n, self.seed) end

-- s:state_dict(): the seed, which with the epoch (the loader's) fixes
-- every order; a loader made without a seed drew its own, so a resumed
-- run takes the saved one back.
function RandomSampler:state_dict() return { seed = self.seed, dataset_len = self._n } end
function RandomSampler:load_state_dict(sd)
  local op = "RandomSampler:load_state_dict"
  state_arg(sd, op, { "seed" })
  self.seed = seed_arg(sd.seed, op, "seed")
end

local DistributedSampler = class("DistributedSampler")
data.DistributedSampler = DistributedSampler
local dist_opts = { shuffle = true, seed = true, drop_last = true, num_replicas = true, rank = true, eval = true }

-- data.DistributedSampler(n | dataset[, {shuffle = true, seed = 0,
-- drop_last = false, num_replicas = dist.world_size(), rank = dist.rank(),
-- eval = false}]): this rank's share of each epoch, as PyTorch's
-- DistributedSampler cuts it.  The epoch's list -- 0, ..., n - 1, or with
-- shuffle a permutation from a Philox stream of its own (key seed, counter
-- epoch * 2^32, as RandomSampler: the same on every rank, and the global
-- generator untouched) -- is padded by repeating it from the start (over
-- and over when the padding is longer than the list) to num_samples *
-- num_replicas, num_samples = ceil(n / num_replicas), or with drop_last
-- cut to floor(n / num_replicas) * num_replicas; rank r takes positions r,
-- r + num_replicas, ...  With eval = true (for evaluation) nothing is
-- padded or dropped: rank r takes positions r, r + num_replicas, ... < n of
-- the unshuffled list (unless shuffle is given), so every sample is seen
-- exactly once and ranks may differ by one sample.
--
-- The sampler keeps its own epoch (from 0): each completed pass over it --
-- a DataLoader's, or its own iter()'s -- advances it, and set_epoch(e) sets
-- it.  A DataLoader over it uses this epoch rather than one of its own.
function DistributedSampler:init(n, opts)
  local op = "DistributedSampler"
  opts = check_opts(opts, op, dist_opts)
  n = size_arg(n, op)
  local eval = bool_opt(opts.eval, op, "eval", false)
  local shuffle = bool_opt(opts.shuffle, op, "shuffle", not eval)
  local drop_last = bool_opt(opts.drop_last, op, "drop_last", false)
  if eval and drop_last then
    raise(op .. ": eval = true and drop_last = true exclude each other: eval gives every sample to exactly one rank")
  end
  local seed = opts.seed == nil and 0 or seed_arg(opts.seed, op, "seed")
  local w = opts.num_replicas
  if w == nil then
    w = dist.world_size()
  elseif not is_integer(w) or w < 1 then
    raise(("%s: num_replicas must be a positive integer, got %s"):format(op, show(w)))
  end
  local r = opts.rank
  if r == nil then r = dist.rank() end
  if not is_integer(r) then raise(("%s: rank must be an integer, got %s"):format(op, show(r))) end
  if r < 0 or r >= w then
    raise(("%s: rank %d is out of range for num_replicas = %d%s (ranks are 0..%d)")
          :format(op, r, w, opts.num_replicas == nil and " (the world size)" or "", w - 1))
  end
  local m  -- samples per rank
  if eval then
    m = r < n and ceil((n - r) / w) or 0
  else
    m = drop_last and floor(n / w) or ceil(n / w)
  end
  self._n, self._m, self._epoch, self.num_replicas, self.rank = n, m, 0, w, r
  self.shuffle, self.seed, self.drop_last, self.eval = shuffle, seed, drop_last, eval
end

-- Samples this rank gets per epoch.
function DistributedSampler:len() return self._m end
DistributedSampler.__len = DistributedSampler.len

local function epoch_arg(e, op)
  if not is_integer(e) or e < 0 or e >= MAX_EPOCH then
    raise(("%s: epoch must be an integer from 0 to %d, got %s"):format(op, MAX_EPOCH - 1, show(e)))
  end
  return e
end

-- The current epoch: that of the next pass.
function DistributedSampler:epoch() return self._epoch end

-- s:set_epoch(e): the next pass is epoch e (to resume; passes advance it
-- by themselves).
function DistributedSampler:set_epoch(e)
  self._epoch = epoch_arg(e, "DistributedSampler:set_epoch")
end

-- s:tensor([epoch]): this rank's indices of that epoch (default: the
-- current one) as a 1-D int64 tensor.
function DistributedSampler:tensor(epoch)
  if epoch == nil then epoch = self._epoch end
  epoch_arg(epoch, "DistributedSampler:tensor")
  local n, m, w, r = self._n, self._m, self.num_replicas, self.rank
  local out = new(C.dl_empty, ffi.new("int64_t[1]", m), 1, C.DL_INT64)
  if m == 0 then return out end
  local p = ffi.cast("int64_t *", C.dl_tensor_data(out))
  if self.shuffle then
    local perm = new(C.dl_randperm_stream, n, self.seed, epoch * 2^32, C.DL_INT64)
    local q = ffi.cast("const int64_t *", C.dl_tensor_data(perm))
    -- position k of the padded list is position k % n of the epoch's list
    for j = 0, m - 1 do p[j] = q[(r + j * w) % n] end
    perm:free()
  else
    for j = 0, m - 1 do p[j] = (r + j * w) % n end
  end
  return out
end

-- s:indices([epoch]) (also s:list): the same indices as a Lua table of
-- 0-based dataset indices -- the sampler protocol.
function DistributedSampler:indices(epoch)
  if epoch == nil then epoch = self._epoch end
  epoch_arg(epoch, "DistributedSampler:indices")
  local t = self:tensor(epoch)
  local p = ffi.cast("const int64_t *", C.dl_tensor_data(t))
  local out = {}
  for j = 0, self._m - 1 do out[j + 1] = tonumber(p[j]) end
  t:free()
  return out
end
DistributedSampler.list = DistributedSampler.indices

-- for i in s:iter() do ... end: this rank's indices of the current epoch;
-- when the loop runs out the epoch advances (unless set_epoch was called
-- meanwhile), as a DataLoader's pass does.  After load_state_dict of a
-- state saved mid-pass, the first pass of that epoch continues after the
-- indices already handed out.
function DistributedSampler:iter()
  local s, epoch = self, self._epoch
  local list = self:list(epoch)
  local k, m = 0, #list
  local r = self._resume
  self._resume = nil
  if r and r.epoch == epoch then k = min(r.samples, m) end
  -- the pass's position, for state_dict (the latest pass is the one saved)
  local p = { epoch = epoch, k = k }
  self._pass = p
  return function()
    if k >= m then
      if k == m then
        k = m + 1
        p.done = true
        if s._epoch == epoch then s._epoch = epoch + 1 end
      end
      return nil
    end
    k = k + 1
    p.k = k
    return list[k]
  end
end

-- A state saved mid-epoch can only continue over the same cut of the same
-- list: the same world size, dataset, shuffle, drop_last and eval (at an
-- epoch boundary the next epoch is simply cut for this sampler).
local function check_same_cut(s, sd, op, where)
  local w = sd.num_replicas
  if w ~= nil and w ~= s.num_replicas then
    raise(("%s: the state was saved %s by a world of %s ranks, and this sampler has num_replicas = %d: "
           .. "a different world size can resume only from a checkpoint saved at an epoch boundary")
          :format(op, where, show(w), s.num_replicas))
  end
  if sd.dataset_len ~= nil and sd.dataset_len ~= s._n then
    raise(("%s: the state was saved %s over a dataset of %s samples, and this sampler's has %d")
          :format(op, where, show(sd.dataset_len), s._n))
  end
  for _, k in ipairs { "shuffle", "drop_last", "eval" } do
    if sd[k] ~= nil and sd[k] ~= s[k] then
      raise(("%s: the state was saved %s with %s = %s, and this sampler has %s = %s")
            :format(op, where, k, show(sd[k]), k, show(s[k])))
    end
  end
end

-- s:state_dict(): {epoch =, samples =, seed =, ...}: the epoch of the pass
-- under way (or of the next one) and how many of its indices this
-- sampler's own iter() handed out, the seed, and the settings that cut
-- the epoch's list.  A DataLoader over the sampler counts its own batches:
-- checkpoint the loader, which holds this state too.
function DistributedSampler:state_dict()
  local e, k = self._epoch, 0
  local r, p = self._resume, self._pass
  if r and r.epoch == e then
    k = r.samples
  elseif p and p.epoch == e and not p.done then
    k = p.k
  end
  return { epoch = e, samples = k, seed = self.seed, shuffle = self.shuffle, drop_last = self.drop_last,
           eval = self.eval, num_replicas = self.num_replicas, dataset_len = self._n }
end

-- s:load_state_dict(sd): the saved epoch and seed, so the orders are the
-- saved run's; a state saved mid-pass also makes the next iter() continue
-- after the indices handed out, which needs the same cut (see
-- check_same_cut).  A set_epoch to another epoch before that pass wins.
function DistributedSampler:load_state_dict(sd)
  local op = "DistributedSampler:load_state_dict"
  state_arg(sd, op, { "epoch", "samples", "seed" })
  epoch_arg(sd.epoch, op)
  if sd.samples > 0 then
    local where = ("%s into epoch %d"):format(count(sd.samples, "index", "indices"), sd.epoch)
    check_same_cut(self, sd, op, where)
    if sd.samples > self._m then
      raise(("%s: the state was saved %s, but this sampler gives %d per epoch"):format(op, where, self._m))
    end
  end
  self.seed = seed_arg(sd.seed, op, "seed")
  self._epoch, self._pass = sd.epoch, nil
  self._resume = sd.samples > 0 and { epoch = sd.epoch, samples = sd.samples } or nil
end

function DistributedSampler:__tostring()
  local how = self.shuffle and ("shuffled, seed %d"):format(self.seed) or "in order"
  local cut = self.eval and ", eval" or self.drop_last and ", drop_last" or ""
  return ("DistributedSampler(%d samples, rank %d of %d: %d, %s%s, epoch %d)"):format(
    self._n, self.rank, self.num_replicas, self._m, how, cut, self._epoch)
end

-- -- DataLoader ---------------------------------------------------------------

local DataLoader = class("DataLoader")
data.DataLoader = DataLoader
local loader_opts = { batch_size = true, shuffle = true, drop_last = true, sampler = true, seed = true,
  pin_memory = true }

-- data.DataLoader(dataset, {batch_size = 1, shuffle = false, drop_last =
-- false, sampler = nil, seed = nil}).  dataset: a TensorDataset (batches
-- gathered in C), or any object with get(i) returning the fields of sample
-- i and a len() (batches stacked sample by sample: slower, unless it has
-- getitems(idx), PyTorch's __getitems__: the fields of the samples of a
-- 1-D int64 tensor of indices at once, as TokenDataset gathers them).  shuffle uses a
-- RandomSampler seeded with seed (default: drawn from the global generator
-- now); sampler: any object following the sampler protocol (see the top of
-- this file), which then decides the order.  pin_memory = true: batches in
-- page-locked memory, so x:cuda({non_blocking = true}) does not wait for
-- the copy (ignored where there is no CUDA device, as in PyTorch).  A
-- TensorDataset whose tensors are on a GPU gives batches on that GPU.
function DataLoader:init(ds, opts)
  local op = "DataLoader"
  opts = check_opts(opts, op, loader_opts)
  local fields = field(ds, "_fields")
  if is_tensor(ds) or not fields and type(field(ds, "get")) ~= "function" then
    raise(("%s: dataset must be a TensorDataset or an object with get(i) and len(), got %s")
          :format(op, show(ds)))
  end
  local n = length(ds, op, "dataset")
  local bs = opts.batch_size == nil and 1 or opts.batch_size
  if not is_integer(bs) or bs < 1 then
    raise(("%s: batch_size must be a positive integer, got %s"):format(op, show(bs)))
  end
  local shuffle = bool_opt(opts.shuffle, op, "shuffle", false)
  local drop_last = bool_opt(opts.drop_last, op, "drop_last", false)
  local pin = bool_opt(opts.pin_memory, op, "pin_memory", false) and C.dl_cuda_device_count() > 0
  local sampler = opts.sampler
  if sampler ~= nil then
    if shuffle then
      raise(op .. ": sampler and shuffle = true exclude each other: the sampler decides the order")
    end
    if opts.seed ~= nil then
      raise(op .. ": seed goes with shuffle = true; give the sampler its own seed")
    end
    if type(field(sampler, "indices")) ~= "function" then
      raise(("%s: sampler must have an indices(epoch) method (the sampler protocol), got %s")
            :format(op, show(sampler)))
    end
    length(sampler, op, "sampler")
  elseif shuffle then
    if opts.seed ~= nil then seed_arg(opts.seed, op, "seed") end
    sampler = data.RandomSampler(n, { seed = opts.seed })
  else
    if opts.seed ~= nil then raise(op .. ": seed is for shuffle = true, which is not set") end
    sampler = data.SequentialSampler(n)
  end
  -- a sampler keeping its own epoch keeps the loader's
  local owner = type(field(sampler, "epoch")) == "function" and type(field(sampler, "set_epoch")) == "function"
  self.dataset, self.sampler, self.batch_size, self.shuffle = ds, sampler, bs, shuffle
  self.drop_last, self.pin_memory, self._fields, self._n = drop_last, pin, fields, n
  self._epoch, self._sampler_epoch = 0, owner
end

-- Number of batches in a pass.
function DataLoader:len()
  local n = length(self.sampler, "DataLoader", "sampler")
  return self.drop_last and floor(n / self.batch_size) or ceil(n / self.batch_size)
end
DataLoader.__len = DataLoader.len

-- loader:set_epoch(e): the order of the next pass is that of epoch e
-- (the sampler's epoch, for a sampler that keeps one).
function DataLoader:set_epoch(e)
  if not is_integer(e) or e < 0 or e >= MAX_EPOCH then
    raise(("DataLoader:set_epoch: epoch must be an integer from 0 to %d, got %s"):format(MAX_EPOCH - 1, show(e)))
  end
  if self._sampler_epoch then
    self.sampler:set_epoch(e)
  else
    self._epoch = e
  end
  -- an explicit epoch wins over a loaded position in another one
  if self._resume and self._resume.epoch ~= e then self._resume = nil end
end

-- The epoch the next pass will use.
function DataLoader:epoch()
  if self._sampler_epoch then
    local e = self.sampler:epoch()
    if not is_integer(e) or e < 0 or e >= MAX_EPOCH then
      raise(("DataLoader: sampler:epoch() must return an integer from 0 to %d, got %s"):format(MAX_EPOCH - 1, show(e)))
    end
    return e
  end
  return self._epoch
end

-- The indices of one epoch, checked against the protocol and the dataset.
local function epoch_indices(self, epoch)
  local op = "DataLoader"
  local s = self.sampler
  local idx
  if type(field(s, "tensor")) == "function" then idx = s:tensor(epoch) else idx = s:indices(epoch) end
  local n = length(s, op, "sampler")
  if type(idx) == "table" and not is_tensor(idx) then
    for i = 1, #idx do
      if not is_integer(idx[i]) then
        raise(("%s: sampler:indices(%d) item %d is %s, not an integer index"):format(op, epoch, i, show(idx[i])))
      end
    end
    idx = #idx > 0 and factory.tensor(idx, { dtype = "int64" }) or factory.empty(0, { dtype = "int64" })
  end
  if not is_tensor(idx) or idx:dim() ~= 1 or (idx:dtype() ~= "int64" and idx:dtype() ~= "int32") then
    raise(("%s: sampler:indices(%d) must return a 1-D int64 tensor or a table of indices, got %s"):format(
      op, epoch, is_tensor(idx) and (idx:dtype() .. " " .. core.fmt_shape(idx:shape())) or show(idx)))
  end
  if idx:size(0) ~= n then
    raise(("%s: sampler:indices(%d) returned %d indices but the sampler's length is %d")
          :format(op, epoch, idx:size(0), n))
  end
  if n > 0 then
    local lo, hi = idx:amin():item(), idx:amax():item()
    if lo < 0 or hi >= self._n then
      raise(("%s: sampler:indices(%d) holds index %d, out of range for a dataset of %d samples")
            :format(op, epoch, lo < 0 and lo or hi, self._n))
    end
  end
  return idx:to("int64"):contiguous()
end

-- One batch from a dataset without tensors: its samples stacked.
local function stack_samples(ds, bi)
  local p = ffi.cast("const int64_t *", C.dl_tensor_data(bi))
  local cols = {}
  local nf
  for k = 0, bi:size(0) - 1 do
    local sample = { ds:get(tonumber(p[k])) }
    nf = nf or #sample
    for f = 1, nf do
      cols[f] = cols[f] or {}
      cols[f][k + 1] = sample[f]
    end
  end
  for f = 1, nf or 0 do
    local c = cols[f]
    cols[f] = is_tensor(c[1]) and factory.stack(c, 0) or factory.tensor(c)
  end
  return cols, nf or 0
end

-- for i, x, y in loader:iter() do ... end: i the 0-based batch number,
-- then the batch of each field (fresh tensors).  Every call starts a new
-- pass, in the order of the current epoch; when a pass ends (the loop runs
-- out of batches) the epoch advances unless set_epoch was called meanwhile,
-- so each pass has a new order without calling set_epoch.  (A loop left
-- with break does not advance it.)
--
-- After load_state_dict of a state saved mid-pass, the first pass of that
-- epoch starts at the batch after the last one handed out (i counts on
-- from there), so a resumed run takes the batches the interrupted one
-- would have; the passes after it go on as usual.
function DataLoader:iter()
  local loader = self
  local epoch = self:epoch()
  local idx = epoch_indices(self, epoch)
  local n, bs = idx:size(0), self.batch_size
  local nb = self.drop_last and floor(n / bs) or ceil(n / bs)
  local fields, ds = self._fields, self.dataset
  local nf = fields and #fields
  local f1, f2 = fields and fields[1], fields and fields[2]
  local getitems = not fields and field(ds, "getitems")
  if type(getitems) ~= "function" then getitems = nil end
  local b = 0
  local r = self._resume
  self._resume = nil
  if r and r.epoch == epoch then b = min(r.batches, nb) end
  -- the pass's position, for state_dict (the latest pass is the one saved)
  local p = { epoch = epoch, b = b }
  self._pass = p
  local narrow, index_select = C.dl_narrow, C.dl_index_select
  -- fields on a GPU: the indices go there once per pass
  if f1 ~= nil and C.dl_tensor_device(f1) >= 0 then idx = idx:to(f1:device()) end
  local pass = function()
    if b >= nb then
      if b == nb then
        b = nb + 1
        p.done = true
        if loader._sampler_epoch then
          local s = loader.sampler
          if s:epoch() == epoch then s:set_epoch(epoch + 1) end
        elseif loader._epoch == epoch then
          loader._epoch = epoch + 1
        end
      end
      return nil
    end
    local i = b
    b = b + 1
    p.b = b
    local bi = new(narrow, idx, 0, i * bs, min(bs, n - i * bs))
    if nf == 2 then
      return i, new(index_select, f1, 0, bi), new(index_select, f2, 0, bi)
    elseif nf == 1 then
      return i, new(index_select, f1, 0, bi)
    end
    if getitems then return i, getitems(ds, bi) end
    local out, k
    if fields then
      out, k = {}, nf
      for f = 1, nf do out[f] = new(index_select, fields[f], 0, bi) end
    else
      out, k = stack_samples(ds, bi)
    end
    return i, unpack(out, 1, k)
  end
  if not self.pin_memory then return pass end
  return function()
    local r = { pass() }
    if r[1] == nil then return nil end
    for k = 2, #r do
      if is_tensor(r[k]) and C.dl_tensor_device(r[k]) < 0 then r[k] = new(C.dl_pin_memory, r[k]) end
    end
    return unpack(r)
  end
end

-- The epoch of the pass under way (or of the next one) and how many of
-- its batches were handed out: that of a loaded state not yet iterated,
-- else that of the latest pass (a loop left with break included) unless it
-- ended or the epoch was set meanwhile.
local function position(self)
  local e = self:epoch()
  local r, p = self._resume, self._pass
  if r and r.epoch == e then return e, r.batches end
  if p and p.epoch == e and not p.done then return e, p.b end
  return e, 0
end

-- loader:state_dict(): {epoch =, batches =, ..., sampler =}: where the
-- next batch comes from (the epoch, and the batches of it handed out: 0
-- at an epoch boundary), what the position is counted in (batch_size,
-- drop_last, the sampler's and the dataset's lengths), and the sampler's
-- own state (its seed; for a DistributedSampler also its epoch and world
-- size) when it has a state_dict.  Save it with
-- ddp.save_checkpoint(path, {loader = loader, ...}).
function DataLoader:state_dict()
  local epoch, batches = position(self)
  local sd = { epoch = epoch, batches = batches, batch_size = self.batch_size, drop_last = self.drop_last,
               dataset_len = self._n, sampler_len = length(self.sampler, "DataLoader", "sampler") }
  local s = self.sampler
  if type(field(s, "state_dict")) == "function" then sd.sampler = s:state_dict() end
  return sd
end

-- loader:load_state_dict(sd): the sampler's state (its seed, epoch), the
-- epoch, and -- for a state saved mid-epoch -- the position: the next
-- pass continues after the batches handed out.  Mid-epoch, the batches
-- must be cut as they were (the same batch size, dataset, sampler length
-- and world size; a mismatch is an error naming both); at an epoch
-- boundary any of them may change.  set_epoch to another epoch before the
-- next pass wins over the loaded position.
function DataLoader:load_state_dict(sd)
  local op = "DataLoader:load_state_dict"
  state_arg(sd, op, { "epoch", "batches" })
  if sd.epoch >= MAX_EPOCH then
    raise(("%s: epoch must be an integer from 0 to %d, got %s"):format(op, MAX_EPOCH - 1, show(sd.epoch)))
  end
  local s = self.sampler
  if sd.batches > 0 then
    local where = ("%s into epoch %d"):format(count(sd.batches, "batch", "batches"), sd.epoch)
    if core.is_instance(s, DistributedSampler) and type(sd.sampler) == "table" then
      check_same_cut(s, sd.sampler, op, where)
    end
    local mine = { batch_size = self.batch_size, drop_last = self.drop_last, dataset_len = self._n,
                   sampler_len = length(s, op, "sampler") }
    for _, k in ipairs { "batch_size", "drop_last", "dataset_len", "sampler_len" } do
      if sd[k] ~= nil and sd[k] ~= mine[k] then
        raise(("%s: the state was saved %s with %s = %s, and this loader has %s: a position within an epoch "
               .. "needs the batches cut as they were (any change is fine at an epoch boundary)")
              :format(op, where, k, show(sd[k]), show(mine[k])))
      end
    end
    if sd.batches > self:len() then
      raise(("%s: the state was saved %s, but this loader has %d batches per epoch"):format(op, where, self:len()))
    end
  end
  if sd.sampler ~= nil then
    if type(field(s, "load_state_dict")) == "function" then
      s:load_state_dict(sd.sampler)
    elseif sd.batches > 0 then
      raise(("%s: the state holds a sampler's state (its seed and order), and this loader's sampler %s has no "
             .. "load_state_dict: make the loader as the saved one was"):format(op, tostring(s)))
    end
  end
  self._pass = nil
  self:set_epoch(sd.epoch)
  self._resume = sd.batches > 0 and { epoch = sd.epoch, batches = sd.batches } or nil
end

-- Loaders and samplers start fresh when a checkpoint holds no state for
-- them (one written before they were saved): load_checkpoint leaves them.
DataLoader.checkpoint_optional = true
RandomSampler.checkpoint_optional = true
DistributedSampler.checkpoint_optional = true

function DataLoader:__tostring()
  return ("DataLoader(%d batches of %d, %s, epoch %d)"):format(
    self:len(), self.batch_size, self.shuffle and "shuffled" or tostring(self.sampler), self:epoch())
end

-- -- Metrics across ranks -----------------------------------------------------

-- data.reduce_metrics(t): a new table with t's keys, each value summed over
-- all ranks -- e.g. {correct =, count =, loss_sum =} of an evaluation under
-- an eval-mode DistributedSampler, giving the full dataset's totals (so
-- accuracy = correct / count is exact, nothing counted twice).  Values are
-- numbers or one-element tensors; every rank must pass the same keys.  The
-- sums are taken in rank order on every rank, so each gets the very same
-- numbers (counts stay exact up to 2^53).  In a world of one it returns a
-- copy without touching the process group; otherwise it needs ddp.init().
function data.reduce_metrics(t)
  local op = "reduce_metrics"
  if type(t) ~= "table" or is_tensor(t) or getmetatable(t) ~= nil then
    raise(("%s: expected a table of numbers such as {correct = c, count = n}, got %s"):format(op, show(t)))
  end
  local vals = {}
  for k, v in pairs(t) do
    if type(k) ~= "string" and not is_integer(k) then
      raise(("%s: keys must be strings or integers, got %s"):format(op, show(k)))
    end
    if is_tensor(v) then
      if v:numel() ~= 1 then
        raise(("%s: metric %s is a tensor of %d elements; expected a number or a one-element tensor")
              :format(op, show(k), v:numel()))
      end
      v = v:item()
    elseif type(v) ~= "number" then
      raise(("%s: metric %s must be a number or a one-element tensor, got %s"):format(op, show(k), show(v)))
    end
    vals[k] = v
  end
  if dist.world_size() == 1 then return vals end
  if not dist.is_initialized() then
    raise(("%s: call ddp.init() first (a world of %d ranks sums through the process group)")
          :format(op, dist.world_size()))
  end
  local all = dist.all_gather_object(vals)
  -- every rank sees every table, so a mismatch raises on all of them
  local out = {}
  for k in pairs(vals) do out[k] = 0 end
  for r = 1, #all do
    for k in pairs(vals) do
      if all[r][k] == nil then
        raise(("%s: rank %d has no metric %s, which rank %d has; every rank must pass the same keys")
              :format(op, r - 1, show(k), dist.rank()))
      end
    end
    for k, v in pairs(all[r]) do
      if out[k] == nil then
        raise(("%s: rank %d has a metric %s, which rank %d lacks; every rank must pass the same keys")
              :format(op, r - 1, show(k), dist.rank()))
      end
      out[k] = out[k] + v
    end
  end
  return out
end

return data
