-- ddp.data.samplers: the orders of an epoch -- SequentialSampler,
-- RandomSampler and DistributedSampler (each rank's share, as PyTorch's),
-- following the sampler protocol (ddp.data.loader tells it), with their
-- state for exact resume.
local core = require "ddp.core"
local dist = require "ddp.dist"
local checks = require "ddp.data.checks"
local C, ffi = core.C, core.ffi
local new, raise, show = core.new, core.raise, core.show
local is_integer = core.is_integer
local check_opts, bool_opt, seed_arg, state_arg = core.check_opts, checks.bool_opt, checks.seed_arg, checks.state_arg
local length, count, draw_seed, epoch_arg = checks.length, checks.count, checks.draw_seed, checks.epoch_arg
local floor, ceil, min = math.floor, math.ceil, math.min
local type = type

core.add_lib_file(debug.getinfo(1, "S").source)

local M = {}

local function size_arg(n, op)
  if is_integer(n) and n >= 0 then return n end
  if n ~= nil and (type(n) == "table" or type(n) == "userdata") then return length(n, op, "dataset") end
  raise(("%s: expected a dataset or a number of samples, got %s"):format(op, show(n)))
end

local SequentialSampler = checks.class("SequentialSampler")
M.SequentialSampler = SequentialSampler

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

local RandomSampler = checks.class("RandomSampler")
M.RandomSampler = RandomSampler

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

function RandomSampler:indices(epoch)
  epoch = epoch_arg(epoch or 0, "RandomSampler:indices")
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

-- The share a rank takes: opts.num_replicas and opts.rank, checked, or the
-- job's world size and rank (ddp.dist) when not given.  What every
-- sampler that cuts an epoch over ranks shares (DistributedSampler, and
-- ddp.data.webdataset's ShardSampler).
local function world_opts(opts, op)
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
  return w, r
end
M._world_opts = world_opts

local DistributedSampler = checks.class("DistributedSampler")
M.DistributedSampler = DistributedSampler
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
  local w, r = world_opts(opts, op)
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
-- epoch boundary the next epoch is simply cut for this sampler); a
-- subclass lists more settings in its _cut_keys.  The DataLoader checks
-- its sampler's state so too (M._check_same_cut).
local CUT_KEYS = { "shuffle", "drop_last", "eval" }
local function check_same_cut(s, sd, op, where)
  -- a position within an epoch is only right for the cut it was taken in:
  -- a state without these fields (tampered, or hand-made) cannot show it
  for _, k in ipairs { "num_replicas", "dataset_len" } do
    if sd[k] == nil then
      raise(("%s: the state was saved %s but holds no %s, so it cannot show the epoch is cut as it was "
             .. "(a state from state_dict() holds it)"):format(op, where, k))
    end
  end
  local w = sd.num_replicas
  if w ~= s.num_replicas then
    raise(("%s: the state was saved %s by a world of %s ranks, and this sampler has num_replicas = %d: "
           .. "a different world size can resume only from a checkpoint saved at an epoch boundary")
          :format(op, where, show(w), s.num_replicas))
  end
  if sd.dataset_len ~= s._n then
    raise(("%s: the state was saved %s over a dataset of %s samples, and this sampler's has %d")
          :format(op, where, show(sd.dataset_len), s._n))
  end
  for _, k in ipairs(s._cut_keys or CUT_KEYS) do
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

-- Samplers start fresh when a checkpoint holds no state for them (one
-- written before they were saved): load_checkpoint leaves them.
RandomSampler.checkpoint_optional = true
DistributedSampler.checkpoint_optional = true

M._check_same_cut = check_same_cut

return M
