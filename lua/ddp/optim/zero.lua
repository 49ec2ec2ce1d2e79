-- ddp.optim.zero: ZeroRedundancyOptimizer, torch.distributed.optim's
-- optimizer-state sharding (ZeRO stage 1) without its traps: each rank
-- keeps the state of 1/world of the parameters' elements, steps only
-- those, and the ranks all-gather the updated parameters.
--
--   local dmodel = ddp.DDP(model)
--   local opt = ddp.ZeroRedundancyOptimizer(dmodel:parameters(), ddp.optim.AdamW, {lr = 1e-3})
--
-- The parameters, in the optimizer's order, are cut into segments (one
-- dtype and device each, about bucket_cap_mb), each laid out in one flat
-- buffer of W blocks of S = ceil(N / W) elements, and rank r owns block r:
-- the same element count on every rank whatever the parameters' sizes.
-- The owned range of a parameter is a piece; the wrapped optimizer's own
-- update (optim.AdamW's, SGD's, ...) steps each piece as if it were a
-- parameter, its state tensors views into one flat tensor per segment and
-- field.  DDP's buckets still all-reduce the whole gradient, so p.grad is
-- every rank's average everywhere (clip_grad_norm_, logging, accumulation
-- work as without sharding); after the step each segment's buffer is
-- all-gathered in place (on one node, each rank copies the other blocks
-- straight from their owners' memory).  Results equal the unsharded optimizer's bit for
-- bit.  state_dict() is this rank's shard; ddp.save_checkpoint writes every
-- rank's shard and one index (docs/checkpoints.md), which loads into any
-- world size, or into a plain optimizer.
local core = require "ddp.core"
local factory = require "ddp.tensor.factory"
local autograd = require "ddp.autograd"
local steps = require "ddp.core.steps"
local memory = require "ddp.core.memory"
local dist = require "ddp.dist"
local group = require "ddp.dist.group"  -- the C group, for the shared buffers
local parallel = require "ddp.nn.parallel"
local base = require "ddp.optim.optimizer"
local shards = require "ddp.optim.shards"
local raise, show, C = core.raise, core.show, core.C
local type, pairs, ipairs, tostring = type, pairs, ipairs, tostring
local max, min, floor = math.max, math.min, math.floor

core.add_lib_file(debug.getinfo(1, "S").source)

local M = {}

local NAME = "ZeroRedundancyOptimizer"
local Z = core.class(NAME, base.Optimizer)

-- -- Layout ---------------------------------------------------------------------

-- Segments of consecutive parameters of one dtype and device; a segment
-- closes once it holds cap bytes.
local function segments(list, cap)
  local segs, cur, fill = {}, nil, 0
  for _, e in ipairs(list) do
    local p = e.p
    local dt, dev = p:dtype(), p:device()
    if not cur or cur.dtype ~= dt or cur.device ~= dev or fill >= cap then
      cur = { dtype = dt, device = dev, numel = 0, members = {}, flat = {}, fields = {} }
      segs[#segs + 1] = cur
      fill = 0
    end
    e.off, e.numel = cur.numel, p:numel()
    cur.members[#cur.members + 1] = e
    cur.numel = cur.numel + e.numel
    fill = fill + e.numel * p:element_size()
  end
  return segs
end

-- The members of seg that overlap [lo, hi), each as {e, a (offset in the
-- parameter), c (offset in the range), len}.
local function overlaps(seg, lo, hi)
  local out = {}
  for _, e in ipairs(seg.members) do
    local s, t = max(lo, e.off), min(hi, e.off + e.numel)
    if t > s then out[#out + 1] = { e = e, a = s - e.off, c = s - lo, len = t - s } end
  end
  return out
end

-- parameter -> {flat =, off =}: where an optimizer laid it out (a second
-- optimizer over the same parameters keeps that layout)
local laid_out = setmetatable({}, { __mode = "k" })

-- The segment's parameters move into one flat buffer of world blocks of S
-- elements (on the CPU in a mapping the node's ranks share), so the
-- all-gather after a step runs in place; this rank's block is its share,
-- cut into pieces where it crosses parameters.
local function place(seg, rank, world, pg)
  seg.lo, seg.hi = shards.range(seg.numel, rank, world)
  seg.share, seg.S = seg.hi - seg.lo, math.ceil(seg.numel / world)
  local total = seg.S * world
  local flat
  if world > 1 and seg.device == "cpu" then
    flat = core.new(C.dl_pg_shared_zeros, pg, total, core.dtype_arg(seg.dtype, NAME))
  else
    flat = factory.zeros({ total }, { dtype = seg.dtype, device = seg.device })
  end
  -- parameters an earlier optimizer laid out so already stay where they are
  local first = laid_out[seg.members[1].p]
  local reuse = first and first.off == 0 and first.flat:numel() == total and first.flat:dtype() == seg.dtype
  for _, e in ipairs(seg.members) do
    local at = laid_out[e.p]
    if at and not (reuse and at.flat == first.flat and at.off == e.off) then
      raise(("%s: parameter %d (%s) already lies in the flat buffer of another ZeroRedundancyOptimizer, "
             .. "at another place than this one's layout puts it; give both the same parameters, groups "
             .. "and bucket_cap_mb"):format(NAME, e.idx, table.concat(e.p:shape(), "x")))
    end
    if not at and reuse then
      raise(("%s: parameter %d (%s) is new to a segment another ZeroRedundancyOptimizer laid out; give both "
             .. "the same parameters, groups and bucket_cap_mb"):format(NAME, e.idx, table.concat(e.p:shape(), "x")))
    end
  end
  if reuse then flat = first.flat end
  for _, e in ipairs(reuse and {} or seg.members) do
    local dst = flat:narrow(0, e.off, e.numel)
    if C.dl_tensor_rebase(e.p, dst) ~= 0 then
      collectgarbage()  -- a dead view of the parameter may still hold its memory
      if C.dl_tensor_rebase(e.p, dst) ~= 0 then
        raise(("%s: parameter %d (%s): %s"):format(NAME, e.idx, table.concat(e.p:shape(), "x"), core.last_error()))
      end
    end
  end
  for _, e in ipairs(seg.members) do laid_out[e.p] = { flat = flat, off = e.off } end
  seg.params, seg.block = flat, flat:narrow(0, rank * seg.S, seg.S)
  seg.pieces = overlaps(seg, seg.lo, seg.hi)
  for _, pc in ipairs(seg.pieces) do
    pc.pv = flat:narrow(0, seg.lo + pc.c, pc.len)
    pc.adopted = {}
  end
end

-- Every rank must hold the same parameters, in the same order.
local function check_same(list)
  local sig = {}
  for i, e in ipairs(list) do sig[i] = ("%s %s"):format(table.concat(e.p:shape(), "x"), e.p:dtype()) end
  local all = dist.all_gather_object(sig)
  local lines = {}
  for r = 2, #all do
    local mine = all[r]
    for i = 1, max(#mine, #all[1]) do
      if mine[i] ~= all[1][i] then
        lines[#lines + 1] = ("rank %d's parameter %d is %s (rank 0's: %s)"):format(
          r - 1, i - 1, mine[i] or "missing", all[1][i] or "missing")
        break
      end
    end
  end
  if #lines > 0 then
    raise(NAME .. ": the ranks' parameters differ: " .. table.concat(lines, "; ") .. " (every rank must build the same model)")
  end
end

local own_options = { bucket_cap_mb = true }

-- ddp.ZeroRedundancyOptimizer(params, optimizer_class[, opts]): opts are
-- optimizer_class's options (lr, betas, ...) and bucket_cap_mb (the
-- segments' size, 25).  A collective when the world has several ranks.
function Z:init(params, optimizer_class, opts)
  if type(optimizer_class) ~= "table" or core.class_of(optimizer_class) ~= nil
     or type(optimizer_class.update) ~= "function" then
    raise(NAME .. ": the second argument must be an optimizer class such as ddp.optim.AdamW "
          .. "(the class, not an optimizer made from it), got " .. core.describe(optimizer_class))
  end
  if opts ~= nil and (type(opts) ~= "table" or core.is_tensor(opts)) then
    raise(NAME .. ": options must be a table such as {lr = 1e-3}, got " .. core.describe(opts))
  end
  local inner_opts, cap = {}, 25
  for k, v in pairs(opts or {}) do
    if own_options[k] then
      if type(v) ~= "number" or not (v > 0) then raise(("%s: %s must be a positive number, got %s"):format(NAME, k, show(v))) end
      cap = v
    else
      inner_opts[k] = v
    end
  end
  local inner = optimizer_class(params, inner_opts)
  if not core.is_instance(inner, base.Optimizer) then
    raise(NAME .. ": " .. tostring(optimizer_class) .. " is not a ddp.optim optimizer class")
  end
  self.inner, self.optimizer_class = inner, optimizer_class
  -- ddp.memory_summary counts this one's state (the inner one keeps none)
  memory.untrack_optimizer(inner)
  memory.track_optimizer(self)
  self.name = NAME
  self.defaults, self.param_groups, self.state = inner.defaults, inner.param_groups, {}
  self.state_fields, self.state_needs = inner.state_fields, inner.state_needs
  if dist.world_size() > 1 and not dist.is_initialized() then dist.init() end
  self.world, self.rank = dist.world_size(), dist.rank()
  local list = {}
  for idx, p, g in inner:each() do
    if not p:is_contiguous() then
      raise(("%s: parameter %d (%s) is not contiguous; its shard is a range of its elements"):format(
        NAME, idx, table.concat(p:shape(), "x")))
    end
    list[#list + 1] = { idx = idx, p = p, g = g }
  end
  if self.world > 1 then check_same(list) end
  self._list = list
  local pg = self.world > 1 and group._group(NAME) or nil
  autograd.no_grad(function()
    self._segs = segments(list, floor(cap * 2 ^ 20))
    for _, seg in ipairs(self._segs) do place(seg, self.rank, self.world, pg) end
  end)
end

-- -- Stepping ---------------------------------------------------------------------

-- The segment's flat tensor of a state field (this rank's share), made
-- on first use.
local function field_flat(seg, field, dtype, device)
  local flat = seg.flat[field]
  if not flat then
    flat = factory.zeros({ seg.share }, { dtype = dtype, device = device })
    seg.flat[field], seg.fields[field] = flat, dtype
  end
  return flat
end

-- A piece's new state tensors (the wrapped optimizer's update makes them
-- on its first step) move into the segment's flat tensor of that field.
local function adopt(seg, pc, st)
  for field, v in pairs(st) do
    if core.is_tensor(v) and pc.adopted[field] ~= v and v:numel() == pc.len then
      local flat = field_flat(seg, field, v:dtype(), v:device())
      local view = flat:narrow(0, pc.c, pc.len)
      view:copy_(v:view(-1))
      st[field], pc.adopted[field] = view, view
    end
  end
end

-- In a world of several ranks every gradient must be the ranks' average.
local function check_reduced(self)
  for _, e in ipairs(self._list) do
    if e.p.grad ~= nil and not parallel.reduces(e.p) then
      raise(("%s: parameter %d (%s) is not in a ddp.DDP model, so its gradient is this rank's own and "
             .. "each rank would step its shard with different gradients; wrap the model with ddp.DDP "
             .. "and give this optimizer dmodel:parameters()"):format(NAME, e.idx, table.concat(e.p:shape(), "x")))
    end
  end
  self._checked = true
end

function Z:step(closure)
  local loss = closure and autograd.enable_grad(closure) or nil
  local t0, c0 = steps.mark()
  autograd.no_grad(function()
    if self.world > 1 and not self._checked then check_reduced(self) end
    local inner, state = self.inner, self.state
    for _, seg in ipairs(self._segs) do
      for _, pc in ipairs(seg.pieces) do
        local e = pc.e
        local grad = e.p.grad
        if grad then
          local st = state[e.idx]
          if not st then st = {}; state[e.idx] = st end
          inner:update(pc.pv, grad:contiguous():view(-1):narrow(0, pc.a, pc.len), st, e.g)
          adopt(seg, pc, st)
        end
      end
    end
    if self.world > 1 then
      for _, seg in ipairs(self._segs) do dist.all_gather_into_tensor(seg.params, seg.block) end
    end
  end)
  steps.optimizer(self, t0, c0)
  return loss
end

-- Bytes of state on this rank: the flat tensors of its shares.
function Z:state_nbytes()
  local n = 0
  for _, seg in ipairs(self._segs) do
    for _, t in pairs(seg.flat) do n = n + t:numel() * t:element_size() end
  end
  return n
end

-- -- State -----------------------------------------------------------------------------

-- The layout part of the index: every segment's parameters and fields.
local function layout(self, fields)
  local segs = {}
  for k, seg in ipairs(self._segs) do
    local ps = {}
    for j, e in ipairs(seg.members) do ps[j] = { e.idx, e.numel } end
    segs[k] = { numel = seg.numel, params = ps, fields = fields and fields[k] or seg.fields }
  end
  return segs
end

-- The non-tensor values of a piece's state and the names of its tensors.
local function piece_state(st)
  local out, names = {}, {}
  for k, v in pairs(st) do
    if core.is_tensor(v) then names[#names + 1] = k else out[k] = core.copy_value(v) end
  end
  table.sort(names)
  out.tensors = names
  return out
end

-- This rank's shard: {zero = {format, world_size, rank, layout}, param_groups,
-- state = {[idx] = {step =, tensors = {...}}}, shards = {["seg1.exp_avg"] =
-- <this rank's share>}} (the tensors are the live ones, not copies).
function Z:state_dict()
  local state, tensors = {}, {}
  for idx, st in pairs(self.state) do state[idx] = piece_state(st) end
  for k, seg in ipairs(self._segs) do
    for field, t in pairs(seg.flat) do tensors[shards.tensor_name(k, field)] = t end
  end
  return { zero = { format = shards.FORMAT, world_size = self.world, rank = self.rank,
                    optimizer = self.inner.name, segments = layout(self) },
           param_groups = base.groups_state(self), state = state, shards = tensors }
end

-- For ddp.save_checkpoint (every rank calls it): write(tensors, metadata)
-- stores this rank's shard file and returns its name, or raises; returns
-- the index (the same on every rank), or raises naming the ranks whose
-- write failed.
function Z:save_shards(write, id)
  local sd = self:state_dict()
  local meta = { [shards.FORMAT_KEY] = shards.SHARD_FORMAT, ["ddplua.zero.id"] = id,
                 ["ddplua.zero.rank"] = tostring(self.rank), ["ddplua.zero.world_size"] = tostring(self.world) }
  local ok, res = pcall(write, sd.shards, meta)
  local fields = {}
  for k, seg in ipairs(self._segs) do fields[k] = seg.fields end
  local mine = { ok = ok, err = not ok and tostring(res) or nil, file = ok and res or nil,
                 state = sd.state, fields = fields }
  local all = self.world > 1 and dist.all_gather_object(mine) or { mine }
  local bad = {}
  for r, m in ipairs(all) do
    if not m.ok then bad[#bad + 1] = ("rank %d: %s"):format(r - 1, (tostring(m.err):gsub("^[^\n]-:%d+: ", "", 1))) end
  end
  if #bad > 0 then raise("save_checkpoint: the optimizer's shards were not written: " .. table.concat(bad, "; ")) end
  local files, state, merged = {}, {}, {}
  for k in ipairs(self._segs) do merged[k] = {} end
  for r, m in ipairs(all) do
    files[r] = m.file
    for idx, s in pairs(m.state) do
      -- a parameter split between ranks has its piece's state on each; the
      -- counts agree (every rank saw the same gradients)
      state[idx] = state[idx] or s
    end
    for k, f in ipairs(m.fields) do
      for field, dt in pairs(f) do merged[k][field] = dt end
    end
  end
  return { zero = { format = shards.FORMAT, id = id, world_size = self.world, optimizer = self.inner.name,
                    files = files, segments = layout(self, merged) },
           param_groups = sd.param_groups, state = state }
end

-- load_state_dict(sd): this rank's ranges of a state -- a sharded one
-- (ddp.load_checkpoint's, saved by any number of ranks) read from its
-- shard files, or a plain optimizer's ({state = {[idx] = {exp_avg = ...}}}).
function Z:load_state_dict(sd)
  local op = NAME .. ".load_state_dict"
  base.check_groups(self, op, sd)
  local read
  if sd.zero ~= nil then
    local rd = shards.reader(sd, op)
    local where = rd.where
    for _, e in ipairs(self._list) do
      local w = where[e.idx]
      if sd.state[e.idx] ~= nil and not w then raise(("%s: the sharded state has no parameter %d"):format(op, e.idx)) end
      if w and w.numel ~= e.numel then
        raise(("%s: parameter %d has %d elements, %d in the sharded state"):format(op, e.idx, e.numel, w.numel))
      end
    end
    read = function(e, field, a, len, dst) rd:read(e.idx, field, a, len, dst) end
  else
    local groups = base.loaded_groups(self, sd)
    for _, e in ipairs(self._list) do
      local s = sd.state[e.idx]
      if s ~= nil then base.check_state(self, op, e.idx, s, e.p, groups[e.g]) end
    end
    for k in pairs(sd.state) do
      if not (core.is_integer(k) and k >= 0 and k < #self._list) then
        raise(("%s: state for parameter %s, which the optimizer does not have"):format(op, tostring(k)))
      end
    end
    read = function(e, field, a, len, dst)
      dst:copy_(sd.state[e.idx][field]:reshape(-1):narrow(0, a, len))
    end
  end
  for gi, g in ipairs(self.param_groups) do
    for k, v in pairs(sd.param_groups[gi]) do
      if k ~= "params" then g[k] = core.copy_value(v) end
    end
  end
  autograd.no_grad(function()
    self.state = {}
    for _, seg in ipairs(self._segs) do
      seg.flat, seg.fields = {}, {}
      for _, pc in ipairs(seg.pieces) do
        pc.adopted = {}
        local s = sd.state[pc.e.idx]
        if s ~= nil then
          local st, names = {}, {}
          for f, v in pairs(s) do
            if f == "tensors" and sd.zero ~= nil then
              if type(v) ~= "table" then raise(("%s: state %d.tensors must be a list of names, got %s"):format(op, pc.e.idx, show(v))) end
              names = v
            elseif self.state_fields[f] == "count" and core.is_tensor(v) then st[f] = v:item()
            elseif core.is_tensor(v) then names[#names + 1] = f
            else st[f] = core.copy_value(v) end
          end
          for _, f in ipairs(names) do
            -- state tensors follow the parameter's dtype, as in a plain optimizer
            local view = field_flat(seg, f, pc.e.p:dtype(), seg.device):narrow(0, pc.c, pc.len)
            read(pc.e, f, pc.a, pc.len, view)
            st[f], pc.adopted[f] = view, view
          end
          self.state[pc.e.idx] = st
        end
      end
    end
  end)
end

M.ZeroRedundancyOptimizer = Z
return M
