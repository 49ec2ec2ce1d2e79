-- ddp.data.loader: the DataLoader, which cuts a dataset into batches in
-- the order its sampler gives, each gathered in C by one index_select per
-- field (a TensorDataset's), and can resume on the very batch a run was
-- interrupted before.
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
-- SequentialSampler, RandomSampler and DistributedSampler
-- (ddp.data.samplers) implement it.
--
-- Exact resume: a DataLoader's state_dict() is where its next batch comes
-- from -- the epoch and how many batches of it were handed out -- plus its
-- sampler's state, so ddp.save_checkpoint(path, {loader = loader, ...})
-- and load_checkpoint put a resumed run on the very batch the interrupted
-- one would have taken next.  Batches prefetched by workers but not yet
-- handed out do not count: a resumed run makes them again, the same.
--
-- Workers (num_workers > 0): threads with a Lua state each make whole
-- batches ahead of the loop (ddp.data.workers), at most prefetch_factor x
-- num_workers at once, and the loop gets them in the order num_workers = 0
-- gives, bit for bit: a sample's random augmentation is drawn from (seed,
-- epoch, sample index) (ddp.data.sample_rng), whoever makes it.
local core = require "ddp.core"
local factory = require "ddp.tensor.factory"
local checks = require "ddp.data.checks"
local samplers = require "ddp.data.samplers"
local collate = require "ddp.data.collate"
local dist = require "ddp.dist"
local workers = require "ddp.data.workers"
local steps_data = require("ddp.core.steps").data
local C, ffi = core.C, core.ffi
local new, raise, show = core.new, core.raise, core.show
local is_tensor, is_integer = core.is_tensor, core.is_integer
local check_opts, bool_opt, seed_arg, state_arg = core.check_opts, checks.bool_opt, checks.seed_arg, checks.state_arg
local field, length, count, epoch_arg, MAX_EPOCH = checks.field, checks.length, checks.count, checks.epoch_arg,
  checks.MAX_EPOCH
local floor, ceil, min = math.floor, math.ceil, math.min
local type, tostring, unpack = type, tostring, unpack

core.add_lib_file(debug.getinfo(1, "S").source)

local M = {}

-- data.get_worker_info() (torch.utils.data.get_worker_info): in a loader
-- worker thread {id = 0-based, num_workers =, dataset = this worker's copy},
-- nil in the training loop -- for a dataset that splits work by worker.
function M.get_worker_info()
  return require("ddp.core.handles").worker_info
end

local DataLoader = checks.class("DataLoader")
M.DataLoader = DataLoader
local loader_opts = { batch_size = true, shuffle = true, drop_last = true, sampler = true, seed = true,
  pin_memory = true, num_workers = true, prefetch_factor = true, persistent_workers = true, timeout = true,
  worker_init_fn = true }

-- data.DataLoader(dataset, {batch_size = 1, shuffle = false, drop_last =
-- false, sampler = nil, seed = nil, num_workers = 0, prefetch_factor = 2,
-- persistent_workers = false, timeout = 0, worker_init_fn = nil,
-- pin_memory = false}).  dataset: a TensorDataset (batches
-- gathered in C), or any object with get(i) returning the fields of sample
-- i (as values, or as one list {x, y}: PyTorch's tuple) and a len()
-- (batches stacked sample by sample: slower, unless it has
-- getitems(idx), PyTorch's __getitems__: the fields of the samples of a
-- 1-D int64 tensor of indices at once, as TokenDataset gathers them).  shuffle uses a
-- RandomSampler seeded with seed (default: drawn from the global generator
-- now); sampler: any object following the sampler protocol (see the top of
-- this file), which then decides the order.  Without shuffle or sampler,
-- seed seeds the samples' random augmentations only (by default they take
-- the sampler's seed, or a draw from the global generator).
-- num_workers > 0: that many worker threads make batches ahead of the
-- loop, prefetch_factor each at most; persistent_workers keeps them from
-- one pass to the next (else they start with each pass); timeout > 0:
-- seconds a batch may take before the worker making it is named in an
-- error; worker_init_fn(worker_id) runs first in each worker.
-- pin_memory = true: batches in
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
    sampler = samplers.RandomSampler(n, { seed = opts.seed })
  else
    if opts.seed ~= nil then seed_arg(opts.seed, op, "seed") end
    sampler = samplers.SequentialSampler(n)
  end
  self._aug_seed = opts.seed
  if self._aug_seed == nil then
    local ss = field(sampler, "seed")
    self._aug_seed = is_integer(ss) and ss or checks.draw_seed()
  end
  local nw = opts.num_workers == nil and 0 or opts.num_workers
  if not is_integer(nw) or nw < 0 or nw > 256 then
    raise(("%s: num_workers must be an integer from 0 to 256, got %s"):format(op, show(nw)))
  end
  local pf = opts.prefetch_factor
  if pf ~= nil and nw == 0 then
    raise(op .. ": prefetch_factor is for num_workers > 0 (batches made ahead by the workers)")
  end
  pf = pf == nil and 2 or pf
  if not is_integer(pf) or pf < 1 then
    raise(("%s: prefetch_factor must be a positive integer, got %s"):format(op, show(pf)))
  end
  local persistent = bool_opt(opts.persistent_workers, op, "persistent_workers", false)
  if persistent and nw == 0 then raise(op .. ": persistent_workers = true needs num_workers > 0") end
  local timeout = opts.timeout == nil and 0 or opts.timeout
  if type(timeout) ~= "number" or timeout < 0 or timeout ~= timeout then
    raise(("%s: timeout must be a number of seconds >= 0 (0: wait for ever), got %s"):format(op, show(timeout)))
  end
  if opts.worker_init_fn ~= nil and type(opts.worker_init_fn) ~= "function" then
    raise(("%s: worker_init_fn must be a function(worker_id), got %s"):format(op, show(opts.worker_init_fn)))
  end
  if opts.worker_init_fn ~= nil and nw == 0 then raise(op .. ": worker_init_fn is for num_workers > 0") end
  self.num_workers, self.prefetch_factor, self.persistent_workers = nw, nw > 0 and pf or nil, persistent
  self.timeout, self._init_fn = timeout, opts.worker_init_fn
  self._stats = { batches = 0, wait = 0, total = 0 }
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
  epoch_arg(e, "DataLoader:set_epoch")
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
-- The whole process's data wait, every loader together: at the end of
-- each pass a rank of a job leaves it in the job's store ("ddp/data/<rank>":
-- wait_s total_s batches), and the launcher's end-of-job line warns when a
-- rank spent more than a tenth of its loop waiting for data.
local waited = { wait = 0, total = 0, batches = 0 }
local function publish_wait(st)
  local ok, group = pcall(require, "ddp.dist.group")
  local store = ok and group._store()
  if not store then return end
  pcall(function()
    store:set("ddp/data/" .. dist.rank(), ("%.6f %.6f %d"):format(st.wait, st.total, st.batches))
  end)
end

-- The pool of worker threads for the next pass: the persistent one, or a
-- new one.
local function worker_pool(self)
  local pool = self._pool
  if pool and not pool.closed then return pool end
  pool = workers.start(self.dataset, { num_workers = self.num_workers,
                                       capacity = self.num_workers * self.prefetch_factor,
                                       timeout = self.timeout, init_fn = self._init_fn, pin = self.pin_memory })
  self._pool = pool
  return pool
end

-- Ends the workers now (persistent ones too); the next pass starts new ones.
function DataLoader:shutdown_workers()
  if self._pool then self._pool:close() end
  self._pool = nil
end

function DataLoader:iter()
  local loader = self
  local epoch = self:epoch()
  local idx = epoch_indices(self, epoch)
  local n, bs = idx:size(0), self.batch_size
  local nb = self.drop_last and floor(n / bs) or ceil(n / bs)
  local ds = self.dataset
  local plan = collate.plan(ds)
  local fields, nf = plan.fields, plan.nf
  local f1, f2 = fields and fields[1], fields and fields[2]
  local seed = self._aug_seed
  local b = 0
  local r = self._resume
  self._resume = nil
  if r and r.epoch == epoch then b = min(r.batches, nb) end
  -- the pass's position, for state_dict (the latest pass is the one saved)
  local p = { epoch = epoch, b = b }
  self._pass = p
  local narrow = C.dl_narrow
  local stats = self._stats
  local clock = core.clock
  local last_out
  -- batch i of this pass: made here, or taken from the workers
  local make
  if self.num_workers > 0 then
    local pool = worker_pool(self)
    pool:drain()
    self._pass_no = (self._pass_no or 0) + 1
    local key0 = self._pass_no * workers.PASS_SPAN
    local src = ffi.cast("const int64_t *", C.dl_tensor_data(idx))
    local ahead = b
    local function fill()
      while ahead < nb and pool:room() do
        local start, len = ahead * bs, min(bs, n - ahead * bs)
        local job = factory.empty({ len + 2 }, { dtype = "int64" })
        local jp = ffi.cast("int64_t *", C.dl_tensor_data(job))
        jp[0], jp[1] = seed, epoch
        ffi.copy(jp + 2, src + start, len * 8)
        pool:submit(key0 + ahead, job)
        ahead = ahead + 1
      end
    end
    fill()
    make = function(i)
      local out, k = pool:get(key0 + i, ("batch %d of epoch %d"):format(i, epoch))
      fill()
      return out, k
    end
  else
    make = function(i)
      return collate.batch(ds, plan, new(narrow, idx, 0, i * bs, min(bs, n - i * bs)), seed, epoch)
    end
  end
  -- fields on a GPU: the indices go there once per pass
  if f1 ~= nil and C.dl_tensor_device(f1) >= 0 then idx = idx:to(f1:device()) end
  local index_select = C.dl_index_select
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
        if loader._pool and not loader.persistent_workers then loader:shutdown_workers() end
        publish_wait(waited)
      end
      return nil
    end
    local t_in = clock()
    local i = b
    b = b + 1
    p.b = b
    local x, y
    local out, k
    if nf == 2 and loader.num_workers == 0 then
      -- a TensorDataset's two tensors: no table per batch
      local bi = new(narrow, idx, 0, i * bs, min(bs, n - i * bs))
      x, y = new(index_select, f1, 0, bi), new(index_select, f2, 0, bi)
    else
      out, k = make(i)
    end
    local t_out = clock()
    local dw, dt = t_out - t_in, t_out - (last_out or t_in)
    steps_data(dw)
    stats.batches, stats.wait, stats.total = stats.batches + 1, stats.wait + dw, stats.total + dt
    waited.batches, waited.wait, waited.total = waited.batches + 1, waited.wait + dw, waited.total + dt
    last_out = t_out
    if x then return i, x, y end
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

-- loader:stats(): how long the training loop waited for its batches:
-- {batches =, wait_s =, total_s =, wait_fraction =} since the loader was
-- made (or since stats({reset = true})).  total_s runs from the first
-- batch asked for to the latest handed out; wait_fraction = wait_s /
-- total_s, the share of the loop spent waiting for data (made in the loop
-- when num_workers = 0).
function DataLoader:stats(opts)
  local s = self._stats
  local out = { batches = s.batches, wait_s = s.wait, total_s = s.total,
                wait_fraction = s.total > 0 and s.wait / s.total or 0 }
  if opts and opts.reset then self._stats = { batches = 0, wait = 0, total = 0 } end
  return out
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
  epoch_arg(sd.epoch, op)
  local s = self.sampler
  if sd.batches > 0 then
    local where = ("%s into epoch %d"):format(count(sd.batches, "batch", "batches"), sd.epoch)
    if core.is_instance(s, samplers.DistributedSampler) then
      if type(sd.sampler) ~= "table" then
        raise(("%s: the state was saved %s but holds no sampler state, and this loader's DistributedSampler "
               .. "needs it to go on where it was"):format(op, where))
      end
      samplers._check_same_cut(s, sd.sampler, op, where)
    end
    local mine = { batch_size = self.batch_size, drop_last = self.drop_last, dataset_len = self._n,
                   sampler_len = length(s, op, "sampler") }
    for _, k in ipairs { "batch_size", "drop_last", "dataset_len", "sampler_len" } do
      if sd[k] == nil then
        raise(("%s: the state was saved %s but holds no %s, so it cannot show the batches are cut as they were "
               .. "(a state from state_dict() holds it)"):format(op, where, k))
      end
      if sd[k] ~= mine[k] then
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

-- A loader starts fresh when a checkpoint holds no state for it (one
-- written before loaders were saved): load_checkpoint leaves it.
DataLoader.checkpoint_optional = true

function DataLoader:__tostring()
  return ("DataLoader(%d batches of %d, %s, epoch %d)"):format(
    self:len(), self.batch_size, self.shuffle and "shuffled" or tostring(self.sampler), self:epoch())
end

return M
