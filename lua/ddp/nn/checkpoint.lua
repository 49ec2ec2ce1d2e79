-- ddp.nn.checkpoint: activation checkpointing -- ddp.checkpoint(fn, ...)
-- and module:checkpoint() run a forward that keeps none of its
-- activations, and recompute it during backward, with the random state
-- and autocast it first ran with (so dropout draws the same mask).
--
-- Design (runtime/autograd/checkpoint.c, pass.c): the first forward
-- records its graph but saves no tensor; the graph's boundary (parameters,
-- inputs, captured tensors) becomes the edges of one CheckpointBackward
-- node that stands in for it.  A backward pass pauses there; this module
-- recomputes the forward with grad on, runs a capturing pass over the new
-- graph that stops at that boundary, and hands the gradients it caught to
-- the paused pass, which completes each parameter once.  That is PyTorch's
-- use_reentrant=False behaviour, without its trap under DDP, and no C
-- code ever calls Lua.
local core = require "ddp.core"
local grad = require "ddp.tensor.grad"
local autocast = require "ddp.autocast"
local factory = require "ddp.tensor.factory"
local steps = require "ddp.core.steps"

local C = core.C
local check, raise, is_tensor = core.check, core.raise, core.is_tensor
local select, pcall, error, unpack, type = select, pcall, error, unpack, type

local M = {}

local function pack(...) return { n = select("#", ...), ... } end

local checkpoints = grad.checkpoints
local next_id = 0

-- The tensor results that carry the checkpoint: the floating ones with a
-- graph made by this forward (their positions in r).
local function carried(r)
  local at = {}
  for i = 1, r.n do
    local x = r[i]
    if is_tensor(x) and C.dl_grad_fn_name(x) ~= nil and core.ffi.string(C.dl_grad_fn_name(x)) ~= "" then
      at[#at + 1] = i
    end
  end
  return at
end

-- One tensor for the node: the result itself, or for several, their
-- flattened values one after another (the results become views of it).
local function carrier(r, at)
  if #at == 1 then return r[at[1]] end
  local parts, dtype = {}, r[at[1]]:dtype()
  for k, i in ipairs(at) do
    if r[i]:dtype() ~= dtype then
      raise(("checkpoint: the function's tensor results must share a dtype to be checkpointed together; "
        .. "result %d is %s, result %d is %s"):format(at[1], dtype, i, r[i]:dtype()), 3)
    end
    parts[k] = r[i]:reshape(-1)
  end
  return factory.cat(parts, 0)
end

-- The region's intermediate tensors are garbage once it returns, but Lua
-- frees their handles only when it collects: without a collection here
-- they would stay until then, and checkpointing would save nothing.  A
-- full collection costs about a millisecond for a training script's heap;
-- it runs only when the region allocated more than 1 MiB.
local function collect_since(base)
  if C.dl_mem_allocated() - base > 1048576 then
    collectgarbage()
    C.dl_gc_done()
  end
end

local function with_autocast(dtype, fn, ...)
  if dtype == autocast.get_dtype() then return fn(...) end
  return autocast.autocast(dtype or false, fn, ...)
end

-- ddp.checkpoint(fn, ...) -> fn(...), whose activations are recomputed in
-- backward instead of kept.
function M.checkpoint(fn, ...)
  if type(fn) ~= "function" and not (type(fn) == "table" and getmetatable(fn) and getmetatable(fn).__call) then
    raise("checkpoint: expected a function or a module, e.g. ddp.checkpoint(block, x), got " .. core.describe(fn), 2)
  end
  if C.dl_is_grad_enabled() == 0 then return fn(...) end  -- no graph, nothing to recompute
  if next(checkpoints) then grad.drop_freed_checkpoints() end
  local args = pack(...)
  local rng = { tonumber(C.dl_rng_seed()), tonumber(C.dl_rng_offset()) }
  local dtype = autocast.get_dtype()
  local base = C.dl_mem_allocated()
  local mark = C.dl_checkpoint_begin()
  local r = pack(pcall(fn, ...))
  C.dl_checkpoint_end()
  if not r[1] then error(r[2], 0) end
  table.remove(r, 1)
  r.n = r.n - 1
  local at = carried(r)
  if #at == 0 then return unpack(r, 1, r.n) end
  local prev = C.dl_set_grad_enabled(1)
  C.dl_checkpoint_begin()  -- the carrier's own op: part of the checkpointed graph
  local ok, out = pcall(carrier, r, at)
  C.dl_checkpoint_end()
  C.dl_set_grad_enabled(prev)
  if not ok then error(out, 0) end
  next_id = next_id + 1
  local id = next_id
  local nin = C.dl_checkpoint_attach(out, mark, id)
  if nin < 0 then check(nin) end
  if nin == 0 then return unpack(r, 1, r.n) end
  collect_since(base)
  checkpoints[id] = function(p, g)
    local base2 = C.dl_mem_allocated()
    local now_seed, now_offset = C.dl_rng_seed(), C.dl_rng_offset()
    C.dl_rng_set_state(rng[1], rng[2])
    local inner = C.dl_autograd_next_seq()
    local was = C.dl_set_grad_enabled(1)
    steps.recomputing = steps.recomputing + 1
    local done, root = pcall(function()
      local r2 = pack(with_autocast(dtype, fn, unpack(args, 1, args.n)))
      local at2 = carried(r2)
      if #at2 ~= #at then
        raise(("checkpoint: the recomputed forward gave %d tensor results with a graph, the first gave %d; "
          .. "the function must compute the same thing twice"):format(#at2, #at))
      end
      return carrier(r2, at2)
    end)
    steps.recomputing = steps.recomputing - 1
    C.dl_set_grad_enabled(was)
    C.dl_rng_set_state(now_seed, now_offset)
    if not done then error(root, 0) end
    if g == nil then return end
    -- the recompute's intermediates are held by the new graph alone now,
    -- which lets go of each as its backward runs
    collect_since(base2)
    grad.run_pass(root, g, false, inner, function(q) check(C.dl_pass_give(p, q)) end)
  end
  if #at == 1 then
    r[at[1]] = out
    return unpack(r, 1, r.n)
  end
  local off = 0
  for _, i in ipairs(at) do
    local n = r[i]:numel()
    r[i] = out:narrow(0, off, n):view(r[i]:shape())
    off = off + n
  end
  return unpack(r, 1, r.n)
end

return M
