-- ddp.dist.collectives: the tensor collectives -- all_reduce, broadcast,
-- all_gather, reduce_scatter, send / recv, all_reduce_async and its Work
-- handle, differentiable_all_reduce -- and barrier, over runtime/dist/pg.c
-- (its shm, gloo, hier and nccl transports).  Blocking, as PyTorch's;
-- every rank must make the same calls in the same order.  Errors (a
-- timeout names the call, its number and the ranks that had not arrived)
-- leave the group unusable.
local core = require "ddp.core"
local group_mod = require "ddp.dist.group"
local raise, show = core.raise, core.show
local need_init, group, timed = group_mod._need_init, group_mod._group, group_mod._timed
local flight_dump = group_mod._flight_dump
local type = type

core.add_lib_file(debug.getinfo(1, "S").source)

local M = {}
local C, ffi = core.C, core.ffi

local function check_name(op, name)
  if name ~= nil and type(name) ~= "string" then
    raise(op .. ": name must be a string, got " .. show(name))
  end
  return name or "barrier"
end

-- the user's line the next call is recorded with (the flight recorder);
-- level: the first frame that may be the user's, counted from user_site
-- (1), site (2), its caller (3), ...
local user_site = core.user_site
local function site(level) C.dl_flight_site(user_site(level)) end

-- ddp.barrier([name][, {timeout=}]): returns once every rank called it.
function M.barrier(name, opts)
  if type(name) == "table" and opts == nil then name, opts = nil, name end
  name = check_name("ddp.barrier", name)
  local st = need_init("ddp.barrier")
  if not st.store then return end
  site(4)
  if timed(st.pg, "ddp.barrier", opts, C.dl_pg_barrier, st.pg) ~= 0 then
    raise(("ddp.barrier(%q): %s"):format(name, core.last_error()) .. flight_dump())
  end
end

local red_ops = { sum = C.DL_PG_SUM, avg = C.DL_PG_AVG, max = C.DL_PG_MAX,
                  min = C.DL_PG_MIN, prod = C.DL_PG_PROD }

local function red_arg(op, r)
  if r == nil then return C.DL_PG_SUM end
  local v = type(r) == "string" and red_ops[r]
  if not v then
    raise(op .. ": op must be \"sum\", \"avg\", \"max\", \"min\" or \"prod\", got " .. show(r))
  end
  return v
end

local function tensor_in(op, t)
  if not core.is_tensor(t) then raise(op .. ": expected a tensor, got " .. core.describe(t)) end
  return t
end

-- A C call returning 0 or an error, under opts' timeout.
local function call(pg, op, opts, f, ...)
  site(4)
  if timed(pg, op, opts, f, ...) ~= 0 then raise("ddp." .. core.last_error() .. flight_dump()) end
end

-- As call, for C calls returning a new tensor.
local function call_new(pg, op, opts, f, ...)
  site(4)
  local p = timed(pg, op, opts, f, ...)
  if p == nil then raise("ddp." .. core.last_error() .. flight_dump()) end
  return core.own(p)
end

local function rank_arg(op, what, r, dflt)
  if r == nil and dflt ~= nil then return dflt end
  if not core.is_integer(r) then raise(op .. ": " .. what .. " must be a rank number, got " .. show(r)) end
  return r
end

-- ddp.all_reduce(t[, op][, {timeout=}]): t reduced over all ranks, in
-- place; returns t.
function M.all_reduce(t, op, opts)
  local name = "ddp.all_reduce"
  tensor_in(name, t)
  if type(op) == "table" and opts == nil then op, opts = nil, op end
  local o = red_arg(name, op)
  local pg = group(name)
  call(pg, name, opts, C.dl_pg_all_reduce, pg, t, o)
  return t
end

-- ddp.dist.differentiable_all_reduce(t[, op][, {timeout=}]): a new tensor,
-- t reduced over all ranks ("sum" or "avg"), recorded by autograd: its
-- backward all-reduces the gradient the same way, as
-- torch.distributed.nn.functional.all_reduce (SyncBatchNorm's statistics).
-- Every rank must run the same backward.
function M.differentiable_all_reduce(t, op, opts)
  local name = "ddp.differentiable_all_reduce"
  tensor_in(name, t)
  if type(op) == "table" and opts == nil then op, opts = nil, op end
  local o = red_arg(name, op)
  if o ~= C.DL_PG_SUM and o ~= C.DL_PG_AVG then
    raise(name .. ': op must be "sum" or "avg" (the differentiable ones), got ' .. show(op))
  end
  local pg = group(name)
  return call_new(pg, name, opts, C.dl_pg_all_reduce_grad, pg, t, o)
end

-- ddp.broadcast(t, src[, {timeout=}]): src's t on every rank, in place;
-- returns t.
function M.broadcast(t, src, opts)
  local name = "ddp.broadcast"
  tensor_in(name, t)
  src = rank_arg(name, "src", src, 0)
  local pg = group(name)
  call(pg, name, opts, C.dl_pg_broadcast, pg, t, src)
  return t
end

-- ddp.all_gather(t[, {timeout=}]): a new tensor, the ranks' t
-- concatenated along dim 0.
function M.all_gather(t, opts)
  local name = "ddp.all_gather"
  tensor_in(name, t)
  local pg = group(name)
  return call_new(pg, name, opts, C.dl_pg_all_gather, pg, t)
end

-- ddp.all_gather_into_tensor(out, input[, {timeout=}]): out (1-D, the
-- world size times input's elements) gets every rank's input, rank r's as
-- its block r, as PyTorch's.  input may be out's own block: then nothing
-- is copied in, and with the shm backend a buffer every rank maps (a
-- ZeroRedundancyOptimizer's parameters) is read where it lies.
function M.all_gather_into_tensor(out, input, opts)
  local name = "ddp.all_gather_into_tensor"
  tensor_in(name, out)
  tensor_in(name, input)
  local pg = group(name)
  local w, r = C.dl_pg_world_size(pg), C.dl_pg_rank(pg)
  if out:dim() ~= 1 or not out:is_contiguous() then
    raise(name .. ": out must be a contiguous 1-D tensor, got shape [" .. table.concat(out:shape(), ", ") .. "]")
  end
  if out:dtype() ~= input:dtype() then
    raise(("%s: out is %s, input %s (they must match)"):format(name, out:dtype(), input:dtype()))
  end
  local n = input:numel()
  if out:numel() ~= n * w then
    raise(("%s: out has %d elements; it must hold the %d ranks' %d each (%d)"):format(name, out:numel(), w, n, n * w))
  end
  local block = out:narrow(0, r * n, n)
  if not (C.dl_tensor_same_storage(block, input) ~= 0 and C.dl_tensor_offset(block) == C.dl_tensor_offset(input)
          and input:is_contiguous()) then
    core.check(C.dl_copy_(block, input:reshape(-1)))
  end
  call(pg, name, opts, C.dl_pg_all_gather_inplace, pg, out)
  return out
end

-- ddp.reduce_scatter(t[, op][, {timeout=}]): a new tensor, this rank's
-- 1/world slice (along dim 0) of t reduced over all ranks.
function M.reduce_scatter(t, op, opts)
  local name = "ddp.reduce_scatter"
  tensor_in(name, t)
  if type(op) == "table" and opts == nil then op, opts = nil, op end
  local o = red_arg(name, op)
  local pg = group(name)
  return call_new(pg, name, opts, C.dl_pg_reduce_scatter, pg, t, o)
end

-- ddp.send(t, dst[, {timeout=}]): t's data to rank dst, which receives it
-- with ddp.recv (blocking until it did, for messages over 1 MiB).
function M.send(t, dst, opts)
  local name = "ddp.send"
  tensor_in(name, t)
  dst = rank_arg(name, "dst", dst)
  local pg = group(name)
  call(pg, name, opts, C.dl_pg_send, pg, t, dst)
end

-- ddp.recv(t, src[, {timeout=}]): fills t, in place, with what rank src
-- sent; returns t.  Size and dtype must match the send's.
function M.recv(t, src, opts)
  local name = "ddp.recv"
  tensor_in(name, t)
  src = rank_arg(name, "src", src)
  local pg = group(name)
  call(pg, name, opts, C.dl_pg_recv, pg, t, src)
  return t
end

-- Handles of ddp.all_reduce_async: Work(w, t) owns w, the C handle of
-- the all-reduce of t.
local Work = core.class("ddp.Work")

function Work:init(w, t)
  self.w, self.t = ffi.gc(w, C.dl_work_free), t
end

-- h:wait(): blocks until the all-reduce finished; returns its tensor, or
-- raises its error.
function Work:wait()
  if C.dl_work_wait(self.w) ~= 0 then raise("ddp." .. core.last_error() .. flight_dump()) end
  return self.t
end

-- h:done(): true once the all-reduce finished (successfully or not).
function Work:done() return C.dl_work_done(self.w) ~= 0 end

Work.is_completed = Work.done
Work.__tostring = function(h)
  return ("ddp.Work(all_reduce, %s)"):format(h:done() and "done" or "running")
end

-- ddp.all_reduce_async(t[, op][, {timeout=}]): starts an in-place
-- all-reduce of t on the group's own thread and returns a handle with
-- :wait() and :done(); leave t alone until it is done.  Asynchronous
-- calls run in call order; a blocking collective waits for them first.
function M.all_reduce_async(t, op, opts)
  local name = "ddp.all_reduce_async"
  tensor_in(name, t)
  if type(op) == "table" and opts == nil then op, opts = nil, op end
  local o = red_arg(name, op)
  local pg = group(name)
  site(4)
  local w = timed(pg, name, opts, C.dl_pg_all_reduce_async, pg, t, o)
  if w == nil then raise("ddp." .. core.last_error()) end
  return Work(w, t)
end

return M
