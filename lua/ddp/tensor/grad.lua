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

-- backward([grad][, {retain_graph=}]) or backward({retain_graph=})
function m.backward(t, grad, opts)
  if core.is_opts(grad) then grad, opts = nil, grad end
  opts = opts or {}
  if grad ~= nil then grad = core.operand(grad, "backward", 1) end
  C.dl_flight_site(core.user_site())  -- DDP's bucket all-reduces come from this line
  local t0, c0 = steps.mark()
  check(C.dl_backward(t, grad, opts.retain_graph and 1 or 0))
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
