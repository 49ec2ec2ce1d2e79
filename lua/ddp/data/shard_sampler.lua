-- ddp.data.shard_sampler: ShardSampler, the order of an epoch over a
-- dataset in shards (data.WebDataset): the shards shuffled per epoch, each
-- read in order (or shuffled within small windows), the epoch's list cut
-- in consecutive runs, one per rank, of equal length -- DistributedSampler
-- (whose epoch, iter and state it inherits) for sequential reads.
local core = require "ddp.core"
local factory = require "ddp.tensor.factory"
local checks = require "ddp.data.checks"
local samplers = require "ddp.data.samplers"
local C, ffi = core.C, core.ffi
local raise, show = core.raise, core.show
local is_integer = core.is_integer
local check_opts, bool_opt, seed_arg, field = core.check_opts, checks.bool_opt, checks.seed_arg, checks.field
local epoch_arg = checks.epoch_arg
local floor, ceil, min = math.floor, math.ceil, math.min
local type, tonumber, ipairs = type, tonumber, ipairs

core.add_lib_file(debug.getinfo(1, "S").source)

local M = {}

local ShardSampler = core.class("ShardSampler", samplers.DistributedSampler, { proxy = true })
M.ShardSampler = ShardSampler
ShardSampler._cut_keys = { "shuffle", "drop_last", "eval", "window", "num_shards" }

local sampler_opts = { shuffle = true, seed = true, drop_last = true, num_replicas = true, rank = true, eval = true,
                       window = true }

-- data.ShardSampler(ds[, {shuffle = true, seed = 0, window = 0, drop_last
-- = false, num_replicas = dist.world_size(), rank = dist.rank(), eval =
-- false}]): this rank's share of each epoch of a dataset in shards (any
-- with shard_ranges(), as WebDataset), read shard by shard.  The epoch's
-- list: the shards in order, or with shuffle in an order drawn from a
-- Philox stream of its own (key seed, counter epoch * 2^32: the same on
-- every rank, a new one each epoch), each shard's samples in tar order --
-- or, with window = w > 1, shuffled within consecutive windows of w
-- samples of the shard (reading stays within w samples; window >= the
-- shard's size shuffles the whole shard).  That list is cut as
-- DistributedSampler cuts its own -- padded from its start to num_samples
-- * num_replicas, num_samples = ceil(n / num_replicas), or with drop_last
-- cut to floor(n / num_replicas) * num_replicas -- but in consecutive
-- runs: rank r takes positions r * num_samples ... (r + 1) * num_samples
-- - 1, so each rank reads whole shards but at the two ends of its run, and
-- every rank gets the same number of samples (DDP never waits on a rank
-- with a shorter epoch).  eval = true: no padding, no dropping, no
-- shuffle (unless given): rank r takes positions floor(r * n / R) ...
-- floor((r + 1) * n / R) - 1 of the list.
--
-- As DistributedSampler: epoch()/set_epoch(e), iter(), state_dict() and
-- load_state_dict() (a state saved mid-epoch resumes only over the same
-- cut: world size, dataset, shuffle, drop_last, eval, window, shards).
function ShardSampler:init(ds, opts)
  local op = "ShardSampler"
  opts = check_opts(opts, op, sampler_opts)
  if type(field(ds, "shard_ranges")) ~= "function" then
    raise(("%s: expected a dataset in shards (with shard_ranges(), as a WebDataset), got %s"):format(op, show(ds)))
  end
  local ranges = ds:shard_ranges()
  local first, count, n = {}, {}, 0
  for s, r in ipairs(ranges) do
    if not is_integer(r.first) or not is_integer(r.count) or r.count < 0 then
      raise(("%s: the dataset's shard_ranges()[%d] must be {first =, count =} integers, got %s")
            :format(op, s, show(r)))
    end
    first[s], count[s], n = r.first, r.count, n + r.count
  end
  local eval = bool_opt(opts.eval, op, "eval", false)
  local shuffle = bool_opt(opts.shuffle, op, "shuffle", not eval)
  local drop_last = bool_opt(opts.drop_last, op, "drop_last", false)
  if eval and drop_last then
    raise(op .. ": eval = true and drop_last = true exclude each other: eval gives every sample to exactly one rank")
  end
  local seed = opts.seed == nil and 0 or seed_arg(opts.seed, op, "seed")
  local window = opts.window == nil and 0 or opts.window
  if not is_integer(window) or window < 0 then
    raise(("%s: window must be a non-negative integer (samples shuffled together within a shard), got %s")
          :format(op, show(window)))
  end
  if window > 1 and not shuffle then raise(op .. ": window is for shuffle = true, which is not set") end
  local w, r = samplers._world_opts(opts, op)
  local m
  if eval then
    m = floor((r + 1) * n / w) - floor(r * n / w)
  else
    m = drop_last and floor(n / w) or ceil(n / w)
  end
  self._n, self._m, self._epoch, self.num_replicas, self.rank = n, m, 0, w, r
  self.shuffle, self.seed, self.drop_last, self.eval, self.window = shuffle, seed, drop_last, eval, window
  self.num_shards, self._first, self._count = #ranges, first, count
end

-- s:shard_order([epoch]): the shards (1-based) in that epoch's order.
function ShardSampler:shard_order(epoch)
  if epoch == nil then epoch = self._epoch end
  epoch_arg(epoch, "ShardSampler:shard_order")
  local S, out = self.num_shards, {}
  if not self.shuffle or S == 0 then
    for s = 1, S do out[s] = s end
    return out
  end
  local perm = core.new(C.dl_randperm_stream, S, self.seed, epoch * 2^32, C.DL_INT64)
  local p = ffi.cast("const int64_t *", C.dl_tensor_data(perm))
  for s = 1, S do out[s] = tonumber(p[s - 1]) + 1 end
  perm:free()
  return out
end

-- s:tensor([epoch]): this rank's indices of that epoch (default: the
-- current one) as a 1-D int64 tensor.
function ShardSampler:tensor(epoch)
  if epoch == nil then epoch = self._epoch end
  epoch_arg(epoch, "ShardSampler:tensor")
  local n, m, w, r = self._n, self._m, self.num_replicas, self.rank
  local out = factory.empty(m, { dtype = "int64" })
  if m == 0 then return out end
  local list = factory.empty(n, { dtype = "int64" })
  local L = ffi.cast("int64_t *", C.dl_tensor_data(list))
  local win = self.shuffle and self.window > 1 and self.window or 0
  local pos = 0
  for _, s in ipairs(self:shard_order(epoch)) do
    local f, c = self._first[s], self._count[s]
    if win > 0 then
      for b = 0, c - 1, win do
        local k = min(win, c - b)
        -- a stream of its own per window: counters past the shard order's
        -- (which takes num_shards / 2 blocks), by the window's first sample
        local perm = core.new(C.dl_randperm_stream, k, self.seed, epoch * 2^32 + 2^31 + f + b, C.DL_INT64)
        local p = ffi.cast("const int64_t *", C.dl_tensor_data(perm))
        for j = 0, k - 1 do L[pos + b + j] = f + b + p[j] end
        perm:free()
      end
    else
      for j = 0, c - 1 do L[pos + j] = f + j end
    end
    pos = pos + c
  end
  local o = ffi.cast("int64_t *", C.dl_tensor_data(out))
  local base = self.eval and floor(r * n / w) or r * m
  for j = 0, m - 1 do o[j] = L[(base + j) % n] end  -- past n: the padding, from the start
  list:free()
  return out
end

function ShardSampler:state_dict()
  local sd = samplers.DistributedSampler.state_dict(self)
  sd.window, sd.num_shards = self.window, self.num_shards
  return sd
end

function ShardSampler:__tostring()
  local how = self.shuffle and ("shards shuffled, seed %d%s"):format(self.seed,
    self.window > 1 and (", window %d"):format(self.window) or "") or "in order"
  local cut = self.eval and ", eval" or self.drop_last and ", drop_last" or ""
  return ("ShardSampler(%d samples in %d shards, rank %d of %d: %d, %s%s, epoch %d)"):format(
    self._n, self.num_shards, self.rank, self.num_replicas, self._m, how, cut, self._epoch)
end

return M
