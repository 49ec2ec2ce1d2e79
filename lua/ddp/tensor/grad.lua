-- ddp.tensor.grad: the autograd face of a tensor -- requires_grad_,
-- detach, backward, zero_grad_ and the fields t.grad, t.requires_grad,
-- t.is_leaf, t.grad_fn, t.data (read as fields, as in PyTorch; t.grad and
-- t.requires_grad also assigned).  ddp.tensor composes them into the tensor
-- type; grad mode and gradcheck are ddp.autograd's.
local core = require "ddp.core"
local C, ffi = core.C, core.ffi
local new, check, raise = core.new, core.check, core.raise
local steps = require "ddp.core.steps"

core.add_lib_file(debug.getinfo(1, "S").source)

local M = {}
local m = {}  -- the methods of this file
local T       -- the whole method table (ddp.tensor's)

-- Functions run after every successful backward() (ddp.DDP's Lua comm
-- hooks), in order; ddp.autograd gives it out as _post_backward.
M.post_backward = {}
local post_backward = M.post_backward

function m.requires_grad_(t, requires)
  check(C.dl_requires_grad_(t, requires == false and 0 or 1))
  return t
end

function m.detach(t) return new(C.dl_detach, t) end

-- -- Passes, and the checkpoints they pause at --------------------------------

-- id -> the function that recomputes a checkpoint's forward and gives its
-- inputs' gradients to the paused pass: backward(pass, grad) (ddp.checkpoint,
-- lua/ddp/nn/checkpoint.lua, fills it; the runtime queues the ids of the
-- nodes that go, drained here).
M.checkpoints = {}
local checkpoints = M.checkpoints
local freed_ids = ffi.new("int64_t[64]")
function M.drop_freed_checkpoints()
  while true do
    local k = C.dl_checkpoint_freed(freed_ids, 64)
    for i = 0, k - 1 do checkpoints[tonumber(freed_ids[i])] = nil end
    if k < 64 then return end
  end
end

-- Runs pass p to its end, recomputing each checkpoint it reaches.
local function drive(p)
  while true do
    local st = C.dl_pass_run(p)
    if st == 0 then return end
    if st < 0 then check(st) end
    local id = tonumber(C.dl_pass_node_id(p))
    local recompute = checkpoints[id]
    if not recompute then raise("backward: a checkpoint's forward is gone (its function was dropped); this is a bug") end
    local g = C.dl_pass_node_grad(p)
    recompute(p, g ~= nil and core.own(g) or nil)
    if C.dl_pass_retains(p) == 0 then checkpoints[id] = nil end
  end
end

-- Runs a pass from root (stop_seq < 0: into .grad; else capturing) and
-- calls with_pass(p) before freeing it; errors free it too.
local function run_pass(root, grad, retain, stop_seq, with_pass)
  local p = C.dl_pass_begin(root, grad, retain and 1 or 0, stop_seq)
  if p == nil then check(-1) end
  local ok, err = pcall(drive, p)
  if ok and with_pass then ok, err = pcall(with_pass, p) end
  if not ok then
    C.dl_pass_end(p, 0)
    error(err, 0)
  end
  check(C.dl_pass_end(p, 1))
end
M.run_pass = run_pass

-- backward([grad][, {retain_graph=}]) or backward({retain_graph=})
function m.backward(t, grad, opts)
  if core.is_opts(grad) then grad, opts = nil, grad end
  opts = opts or {}
  if grad ~= nil then grad = core.operand(grad, "backward", 1) end
  C.dl_flight_site(core.user_site())  -- DDP's bucket all-reduces come from this line
  local t0, c0 = steps.mark()
  run_pass(t, grad, opts.retain_graph, -1)
  if next(checkpoints) then M.drop_freed_checkpoints() end
  for i = 1, #post_backward do post_backward[i]() end
  steps.backward(t0, c0)  -- less the wait for the last buckets: that is communication
end

function m.zero_grad_(t)
  check(C.dl_set_grad(t, nil))
  return t
end

-- Fields read as t.name (ddp.tensor's __index: methods win over fields).
M.fields = {
  grad = function(t)
    local g = C.dl_grad(t)
    if g == nil then return nil end
    return core.own(g)
  end,
  requires_grad = function(t) return C.dl_requires_grad(t) ~= 0 end,
  is_leaf = function(t) return C.dl_is_leaf(t) ~= 0 end,
  grad_fn = function(t)
    local name = ffi.string(C.dl_grad_fn_name(t))
    return name ~= "" and name or nil
  end,
  data = function(t) return new(C.dl_detach, t) end,
}

-- t.name = v (ddp.tensor's __newindex): the two fields that can be set.
function M.set_field(t, k, v)
  if k == "grad" then
    if v ~= nil and not core.is_tensor(v) then
      raise("grad: expected a tensor or nil, got " .. core.describe(v))
    end
    check(C.dl_set_grad(t, v))
  elseif k == "requires_grad" then
    T.requires_grad_(t, v and true or false)
  else
    raise(("cannot set field %q of a tensor (tensors have methods, not fields)"):format(tostring(k)))
  end
end

-- methods(all) -> this file's methods; all is the table they end up in.
function M.methods(all)
  T = all
  return m
end

return M
