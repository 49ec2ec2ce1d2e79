-- ddp.optim.optimizer: the Optimizer base of ddp.optim's optimizers
-- (parameter groups, zero_grad, step over each parameter's update,
-- state_dict / load_state_dict laid out as PyTorch's) and setup, which
-- fills a new optimizer from its params and options.
local core = require "ddp.core"
local autograd = require "ddp.autograd"
local steps = require "ddp.core.steps"
local memory = require "ddp.core.memory"
local factory = require "ddp.tensor.factory"
local shards = require "ddp.optim.shards"
local raise = core.raise

core.add_lib_file(debug.getinfo(1, "S").source)

local M = {}

-- -- The optimizer base -----------------------------------------------------------

-- Optimizers and schedulers are core.class classes: optim.SGD(params,
-- opts) runs SGD's init.
local Optimizer = core.class("Optimizer")

-- Fills a new optimizer self.  params: a list of tensors
-- (model:parameters()), or a list of groups {params = {...}, lr = ...}
-- whose options override the defaults.
function M.setup(self, name, params, defaults, opts)
  if type(params) ~= "table" or core.is_tensor(params) then
    raise(name .. ": params must be a list of tensors (model:parameters()) or of groups {params = ...}")
  end
  opts = opts or {}
  for k in pairs(opts) do
    if defaults[k] == nil then raise(("%s: unknown option %q"):format(name, tostring(k))) end
  end
  self.name, self.defaults, self.param_groups, self.state = name, {}, {}, {}
  for k, v in pairs(defaults) do self.defaults[k] = opts[k] == nil and v or opts[k] end
  local groups = (params[1] ~= nil and core.is_tensor(params[1])) and { { params = params } } or params
  if #groups == 0 then raise(name .. ": got an empty parameter list") end
  local seen, index = {}, 0
  for gi, g in ipairs(groups) do
    if type(g) ~= "table" or type(g.params) ~= "table" then
      raise(("%s: parameter group %d needs a params list"):format(name, gi))
    end
    local group = { params = {} }
    for k, v in pairs(self.defaults) do group[k] = v end
    for k, v in pairs(g) do
      if k ~= "params" then
        if self.defaults[k] == nil then raise(("%s: unknown option %q in group %d"):format(name, tostring(k), gi)) end
        group[k] = v
      end
    end
    for pi, p in ipairs(g.params) do
      if not core.is_tensor(p) then
        raise(("%s: parameter %d of group %d is a %s, not a tensor"):format(name, pi, gi, core.describe(p)))
      end
      local key = tostring(core.ffi.cast("void *", p))
      if seen[key] then raise(("%s: a parameter appears twice (group %d, position %d)"):format(name, gi, pi)) end
      seen[key] = true
      group.params[#group.params + 1] = p
      index = index + 1
    end
    self.param_groups[gi] = group
  end
  if type(self.defaults.lr) ~= "number" or self.defaults.lr < 0 then
    raise(name .. ": lr must be a non-negative number, got " .. tostring(self.defaults.lr))
  end
  memory.track_optimizer(self)  -- ddp.memory_summary counts its parameters and state
end

-- Every parameter with its 0-based index across groups (PyTorch's numbering).
function Optimizer:each()
  local gi, pi, idx = 1, 0, -1
  return function()
    while true do
      local g = self.param_groups[gi]
      if not g then return nil end
      pi = pi + 1
      if g.params[pi] then
        idx = idx + 1
        return idx, g.params[pi], g
      end
      gi, pi = gi + 1, 0
    end
  end
end

-- set_to_none (default true) frees the gradients; false zeroes them in place.
function Optimizer:zero_grad(set_to_none)
  for _, p in self:each() do
    if set_to_none == false then
      local g = p.grad
      if g then autograd.no_grad(function() g:zero_() end) end
    else
      p.grad = nil
    end
  end
end

function Optimizer:step(closure)
  local loss = closure and autograd.enable_grad(closure) or nil
  local t0, c0 = steps.mark()  -- a closure's forward and backward are theirs, not the optimizer's
  autograd.no_grad(function()
    local idx0 = 0
    for _, g in ipairs(self.param_groups) do
      if self.step_group and g.foreach ~= false then
        -- the whole group in one C call (ddp.optim.foreach)
        self:step_group(g, idx0)
      else
        for i, p in ipairs(g.params) do
          local grad = p.grad
          if grad then
            local idx = idx0 + i - 1
            self.state[idx] = self.state[idx] or {}
            self:update(p, grad, self.state[idx], g)
          end
        end
      end
      idx0 = idx0 + #g.params
    end
  end)
  steps.optimizer(self, t0, c0)  -- the first optimizer to step ends each step
  return loss
end

local copy_value = core.copy_value

-- The param_groups of a state_dict: each group's options (copied) and its
-- parameters' 0-based indices.
function M.groups_state(self)
  local groups = {}
  local idx = 0
  for gi, g in ipairs(self.param_groups) do
    local out = { params = {} }
    for k, v in pairs(g) do
      if k ~= "params" then out[k] = copy_value(v) end
    end
    for _ in ipairs(g.params) do
      out.params[#out.params + 1] = idx
      idx = idx + 1
    end
    groups[gi] = out
  end
  return groups
end

function Optimizer:state_dict()
  local state = {}
  for k, s in pairs(self.state) do state[k] = copy_value(s) end
  return { state = state, param_groups = M.groups_state(self) }
end

-- Bytes the optimizer's state tensors take on this rank.
function Optimizer:state_nbytes()
  local n = 0
  for _, s in pairs(self.state) do
    for _, v in pairs(s) do
      if core.is_tensor(v) then n = n + v:numel() * v:element_size() end
    end
  end
  return n
end

-- What a parameter's state may hold, field -> kind ("tensor": one of the
-- parameter's size; "count": a non-negative integer, or PyTorch 1.13's
-- one-element tensor), and which fields a state that has any of them needs
-- (group: the loaded group's options).  load_state_dict checks a state
-- against them, so a corrupt one fails there, naming the field, rather
-- than inside the FFI at step().  Fields not listed are kept, as PyTorch.
Optimizer.state_fields = {}
function Optimizer.state_needs() return {} end

-- Checks the state st of parameter k (the tensor p) against self's fields;
-- group: p's group as it will be once loaded.
function M.check_state(self, name, k, st, p, group)
  if type(st) ~= "table" then
    raise(("%s: state %s must be a table of the parameter's state, got %s"):format(name, tostring(k), core.show(st)))
  end
  local kinds, any = self.state_fields, false
  for field, v in pairs(st) do
    local what = ("state %s.%s"):format(tostring(k), tostring(field))
    local kind = kinds[field]
    if kind then any = true end
    if kind == "count" and core.is_tensor(v) and v:numel() == 1 then v = v:item() end
    if kind == "count" and not (type(v) == "number" and v >= 0 and v == math.floor(v)) then
      raise(("%s: %s must be a non-negative integer, got %s"):format(name, what, core.show(v)))
    end
    if kind == "tensor" and not core.is_tensor(v) then
      raise(("%s: %s must be a tensor of the parameter's %d elements, got %s"):format(name, what, p:numel(), core.show(v)))
    end
    if core.is_tensor(v) and v:numel() ~= p:numel() then
      raise(("%s: %s has %d elements, the parameter %d"):format(name, what, v:numel(), p:numel()))
    end
  end
  if any then
    for _, field in ipairs(self.state_needs(group)) do
      if st[field] == nil then
        raise(("%s: state %s has no %s (%s's state needs %s)"):format(
          name, tostring(k), field, self.name, table.concat(self.state_needs(group), ", ")))
      end
    end
  end
end

-- Checks a state_dict's layout against self's groups (their number, sizes
-- and option types).
function M.check_groups(self, name, sd)
  if type(sd) ~= "table" or type(sd.param_groups) ~= "table" or type(sd.state) ~= "table" then
    raise(name .. ": expected a table with state and param_groups (from state_dict())")
  end
  if #sd.param_groups ~= #self.param_groups then
    raise(("%s: the state has %d parameter groups, the optimizer %d"):format(name, #sd.param_groups, #self.param_groups))
  end
  for gi, g in ipairs(self.param_groups) do
    local sg = sd.param_groups[gi]
    if type(sg) ~= "table" then
      raise(("%s: param_groups[%d] must be a table, got %s"):format(name, gi, core.show(sg)))
    end
    if #(sg.params or {}) ~= #g.params then
      raise(("%s: group %d has %d parameters in the state, %d in the optimizer"):format(name, gi, #(sg.params or {}), #g.params))
    end
    for k, v in pairs(sg) do  -- an option the step passes to C must have its default's type
      local d = self.defaults[k]
      if d ~= nil and type(v) ~= type(d) then
        raise(("%s: param_groups[%d].%s must be a %s, got %s"):format(name, gi, tostring(k), type(d), core.show(v)))
      end
    end
  end
end

-- Each group as it will be once sd is loaded (ours, then the state's
-- options), by group: what check_state checks a parameter's state against.
function M.loaded_groups(self, sd)
  local loaded = {}
  for gi, g in ipairs(self.param_groups) do
    local merged = {}
    for k, v in pairs(g) do merged[k] = v end
    for k, v in pairs(sd.param_groups[gi]) do merged[k] = v end
    loaded[g] = merged
  end
  return loaded
end

-- A sharded checkpoint's state (a ZeroRedundancyOptimizer's index) loads
-- whole: every parameter's state read from the shard files.
local function consolidated(self, name, sd)
  local shapes, n = {}, 0
  for idx, p in self:each() do shapes[idx], n = p:shape(), n + 1 end
  return shards.consolidate(sd, name, function(idx)
    if not shapes[idx] then
      raise(("%s: the sharded state has a parameter %d, the optimizer's are 0..%d"):format(name, idx, n - 1))
    end
    return shapes[idx]
  end, function(n, dt) return factory.zeros({ n }, { dtype = dt }) end)
end

function Optimizer:load_state_dict(sd)
  local name = self.name .. ".load_state_dict"
  M.check_groups(self, name, sd)
  if sd.zero ~= nil then sd = consolidated(self, name, sd) end
  local params, loaded = {}, M.loaded_groups(self, sd)
  for idx, p, g in self:each() do params[idx] = { p, loaded[g] } end
  for k, s in pairs(sd.state) do
    local idx = tonumber(k)
    local p = idx and params[idx]
    if not p then raise(("%s: state for parameter %s, which the optimizer does not have"):format(name, tostring(k))) end
    M.check_state(self, name, k, s, p[1], p[2])
  end
  for gi, g in ipairs(self.param_groups) do
    for k, v in pairs(sd.param_groups[gi]) do
      if k ~= "params" then g[k] = copy_value(v) end
    end
  end
  self.state = {}
  for k, s in pairs(sd.state) do
    local idx = tonumber(k)
    local st = copy_value(s)
    for field, v in pairs(st) do  -- state tensors follow the parameter's dtype, shape and device
      if self.state_fields[field] == "count" then
        if core.is_tensor(v) then st[field] = v:item() end
      elseif core.is_tensor(v) then
        local p = params[idx][1]
        st[field] = v:to(p:dtype()):view(p:shape()):to(p:device())
      end
    end
    self.state[idx] = st
  end
end

M.Optimizer = Optimizer
return M
