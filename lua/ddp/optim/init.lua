-- ddp.optim: SGD, Adam and AdamW (each step one fused C loop per
-- parameter) and learning-rate schedulers, with state_dicts laid out as
-- PyTorch's ({state = {[0] = {...}}, param_groups = {{lr = ..., params = {0, 1}}}}).
local core = require "ddp.core"
local factory = require "ddp.tensor.factory"
local autograd = require "ddp.autograd"
local C = core.C
local check, raise = core.check, core.raise

core.add_lib_file(debug.getinfo(1, "S").source)

local optim = {}

-- -- The optimizer base -----------------------------------------------------------

-- Optimizers and schedulers are core.class classes: optim.SGD(params,
-- opts) runs SGD's init.
local Optimizer = core.class("Optimizer")

-- Fills a new optimizer self.  params: a list of tensors
-- (model:parameters()), or a list of groups {params = {...}, lr = ...}
-- whose options override the defaults.
local function setup(self, name, params, defaults, opts)
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
  autograd.no_grad(function()
    for idx, p, g in self:each() do
      local grad = p.grad
      if grad then
        self.state[idx] = self.state[idx] or {}
        self:update(p, grad, self.state[idx], g)
      end
    end
  end)
  return loss
end

local function copy_value(v)
  if core.is_tensor(v) then return v:clone() end
  if type(v) == "table" then
    local r = {}
    for k, x in pairs(v) do r[k] = copy_value(x) end
    return r
  end
  return v
end

function Optimizer:state_dict()
  local groups, state = {}, {}
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
  for k, s in pairs(self.state) do state[k] = copy_value(s) end
  return { state = state, param_groups = groups }
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
local function check_state(self, name, k, st, p, group)
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

function Optimizer:load_state_dict(sd)
  local name = self.name .. ".load_state_dict"
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
  -- each parameter's group as it will be once loaded: ours, then the state's options
  local params, loaded = {}, {}
  for gi, g in ipairs(self.param_groups) do
    local merged = {}
    for k, v in pairs(g) do merged[k] = v end
    for k, v in pairs(sd.param_groups[gi]) do merged[k] = v end
    loaded[g] = merged
  end
  for idx, p, g in self:each() do params[idx] = { p, loaded[g] } end
  for k, s in pairs(sd.state) do
    local idx = tonumber(k)
    local p = idx and params[idx]
    if not p then raise(("%s: state for parameter %s, which the optimizer does not have"):format(name, tostring(k))) end
    check_state(self, name, k, s, p[1], p[2])
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

-- -- SGD ------------------------------------------------------------------------------

optim.SGD = core.class("SGD", Optimizer)

function optim.SGD:init(params, opts)
  setup(self, "SGD", params,
    { lr = 1e-3, momentum = 0, dampening = 0, weight_decay = 0, nesterov = false, maximize = false }, opts)
  if self.defaults.nesterov and (self.defaults.momentum <= 0 or self.defaults.dampening ~= 0) then
    raise("SGD: nesterov needs momentum > 0 and dampening 0")
  end
end

optim.SGD.state_fields = { momentum_buffer = "tensor" }

function optim.SGD:update(p, grad, st, g)
  local buf, first = nil, 0
  if g.momentum ~= 0 then
    if not st.momentum_buffer then
      st.momentum_buffer = factory.zeros_like(p)
      first = 1
    end
    buf = st.momentum_buffer
  end
  check(C.dl_sgd_step(p, grad:contiguous(), buf, g.lr, g.momentum, g.dampening,
                      g.weight_decay, g.nesterov and 1 or 0, first, g.maximize and 1 or 0))
end

-- -- Adam and AdamW -------------------------------------------------------------------

local function adam_class(name, decoupled, wd)
  local cls = core.class(name, Optimizer)
  function cls:init(params, opts)
    setup(self, name, params,
      { lr = 1e-3, betas = { 0.9, 0.999 }, eps = 1e-8, weight_decay = wd, amsgrad = false, maximize = false }, opts)
    local b = self.defaults.betas
    if type(b) ~= "table" or not (b[1] >= 0 and b[1] < 1 and b[2] >= 0 and b[2] < 1) then
      raise(name .. ": betas must be a table {beta1, beta2} with values in [0, 1)")
    end
  end
  cls.state_fields = { step = "count", exp_avg = "tensor", exp_avg_sq = "tensor", max_exp_avg_sq = "tensor" }
  function cls.state_needs(group)
    local r = { "step", "exp_avg", "exp_avg_sq" }
    if group.amsgrad then r[4] = "max_exp_avg_sq" end
    return r
  end
  function cls:update(p, grad, st, g)
    if not st.step then
      st.step = 0
      st.exp_avg = factory.zeros_like(p)
      st.exp_avg_sq = factory.zeros_like(p)
      if g.amsgrad then st.max_exp_avg_sq = factory.zeros_like(p) end
    end
    st.step = st.step + 1
    check(C.dl_adam_step(p, grad:contiguous(), st.exp_avg, st.exp_avg_sq,
                         g.amsgrad and st.max_exp_avg_sq or nil, st.step, g.lr,
                         g.betas[1], g.betas[2], g.eps, g.weight_decay,
                         decoupled and 1 or 0, g.maximize and 1 or 0))
  end
  return cls
end
optim.Adam = adam_class("Adam", false, 0)
optim.AdamW = adam_class("AdamW", true, 1e-2)

-- optim.SGD(params, opts) as in PyTorch; optim.SGD.new(params, opts), the
-- older spelling, still works.
for _, name in ipairs { "SGD", "Adam", "AdamW" } do
  local cls = optim[name]
  cls.new = function(params, opts) return cls(params, opts) end
end

-- -- Learning-rate schedulers --------------------------------------------------------

local Scheduler = core.class("Scheduler")

-- Fills a new scheduler self, which already holds its own options.
local function setup_scheduler(self, name, opt)
  if getmetatable(opt) == nil or type(opt.param_groups) ~= "table" then
    raise(name .. ": expected an optimizer from ddp.optim")
  end
  self.optimizer = opt
  self.name = name
  self.last_epoch = 0
  self.base_lrs = {}
  for i, g in ipairs(opt.param_groups) do self.base_lrs[i] = g.initial_lr or g.lr; g.initial_lr = self.base_lrs[i] end
  self:apply()
end

function Scheduler:apply()
  for i, g in ipairs(self.optimizer.param_groups) do g.lr = self:lr_at(self.base_lrs[i], self.last_epoch) end
end

function Scheduler:step()
  self.last_epoch = self.last_epoch + 1
  self:apply()
end

function Scheduler:get_last_lr()
  local r = {}
  for i, g in ipairs(self.optimizer.param_groups) do r[i] = g.lr end
  return r
end

function Scheduler:state_dict()
  local s = {}
  for k, v in pairs(self) do
    if k ~= "optimizer" then s[k] = copy_value(v) end
  end
  return s
end

function Scheduler:load_state_dict(s)
  for k, v in pairs(s) do
    if k ~= "optimizer" then self[k] = copy_value(v) end
  end
  self:apply()
end

local function scheduler_class(name, check_opts, lr_at)
  local cls = core.class(name, Scheduler)
  cls.lr_at = lr_at
  function cls:init(opt, opts)
    for k, v in pairs(check_opts(opts or {})) do self[k] = v end
    setup_scheduler(self, name, opt)
  end
  return cls
end

local function need(opts, key, name, min)
  local v = opts[key]
  if type(v) ~= "number" or v < (min or 0) then
    raise(("%s: %s must be a number >= %s, got %s"):format(name, key, tostring(min or 0), tostring(v)))
  end
  return v
end

optim.lr_scheduler = {}

-- lr = base * gamma ^ floor(epoch / step_size)
optim.lr_scheduler.StepLR = scheduler_class("StepLR", function(o)
  return { step_size = need(o, "step_size", "StepLR", 1), gamma = o.gamma or 0.1 }
end, function(self, base, e)
  return base * self.gamma ^ math.floor(e / self.step_size)
end)

-- linear warm-up from 0 over warmup_steps, then cosine down to min_lr at total_steps
optim.lr_scheduler.CosineWithWarmup = scheduler_class("CosineWithWarmup", function(o)
  local total = need(o, "total_steps", "CosineWithWarmup", 1)
  local warm = o.warmup_steps or 0
  if warm >= total then raise("CosineWithWarmup: warmup_steps must be less than total_steps") end
  return { total_steps = total, warmup_steps = warm, min_lr = o.min_lr or 0 }
end, function(self, base, e)
  if e < self.warmup_steps then return base * (e + 1) / self.warmup_steps end
  local t = math.min(1, (e - self.warmup_steps) / (self.total_steps - self.warmup_steps))
  return self.min_lr + (base - self.min_lr) * 0.5 * (1 + math.cos(math.pi * t))
end)

-- linear from start_factor * base to end_factor * base over total_steps
optim.lr_scheduler.LinearDecay = scheduler_class("LinearDecay", function(o)
  return { total_steps = need(o, "total_steps", "LinearDecay", 1),
           start_factor = o.start_factor or 1, end_factor = o.end_factor or 0 }
end, function(self, base, e)
  local t = math.min(1, e / self.total_steps)
  return base * (self.start_factor + (self.end_factor - self.start_factor) * t)
end)

-- LambdaLR(opt, lr_lambda): lr = base * lr_lambda(epoch), lr_lambda a
-- function or a list of functions, one per parameter group (PyTorch's).
-- The functions are not part of state_dict (PyTorch keeps only callable
-- objects, which Lua does not have); a loaded scheduler keeps its own.
optim.lr_scheduler.LambdaLR = core.class("LambdaLR", Scheduler)
function optim.lr_scheduler.LambdaLR:init(opt, lr_lambda)
  local n = type(opt) == "table" and type(opt.param_groups) == "table" and #opt.param_groups or 0
  local fns = {}
  if type(lr_lambda) == "function" then
    for i = 1, n do fns[i] = lr_lambda end
  elseif type(lr_lambda) == "table" then
    if #lr_lambda ~= n then raise(("LambdaLR: expected %d lr_lambdas, but got %d"):format(n, #lr_lambda)) end
    for i, f in ipairs(lr_lambda) do
      if type(f) ~= "function" then
        raise(("LambdaLR: lr_lambda %d must be a function, got %s"):format(i, core.describe(f)))
      end
      fns[i] = f
    end
  else
    raise("LambdaLR: lr_lambda must be a function or a list of functions (one per parameter group), got "
          .. core.describe(lr_lambda))
  end
  self.lr_lambdas = fns
  setup_scheduler(self, "LambdaLR", opt)
end
function optim.lr_scheduler.LambdaLR:apply()
  for i, g in ipairs(self.optimizer.param_groups) do
    local f = self.lr_lambdas[i](self.last_epoch)
    if type(f) ~= "number" then
      raise(("LambdaLR: lr_lambda %d returned %s for epoch %d, not a number"):format(i, core.describe(f), self.last_epoch))
    end
    g.lr = self.base_lrs[i] * f
  end
end
function optim.lr_scheduler.LambdaLR:state_dict()
  local s = Scheduler.state_dict(self)
  s.lr_lambdas = nil
  return s
end
function optim.lr_scheduler.LambdaLR:load_state_dict(s)
  local fns = self.lr_lambdas
  Scheduler.load_state_dict(self, s)
  self.lr_lambdas = fns
  self:apply()
end

-- OneCycleLR(opt, {max_lr=, total_steps= or epochs= and steps_per_epoch=,
-- pct_start=0.3, anneal_strategy="cos"|"linear", div_factor=25,
-- final_div_factor=1e4, three_phase=false, cycle_momentum=true,
-- base_momentum=0.85, max_momentum=0.95}) as PyTorch's: the lr rises from
-- max_lr/div_factor to max_lr over pct_start of the steps, then falls to
-- max_lr/div_factor/final_div_factor (three_phase: back to the start,
-- then down); the momentum (SGD's momentum, Adam's beta1) moves the other
-- way.  max_lr, base_momentum and max_momentum may be lists, one per group.
local one_cycle_opts = {
  max_lr = true, total_steps = true, epochs = true, steps_per_epoch = true, pct_start = true,
  anneal_strategy = true, div_factor = true, final_div_factor = true, three_phase = true,
  cycle_momentum = true, base_momentum = true, max_momentum = true,
}
local function per_group(v, n, what)
  if type(v) == "table" then
    if #v ~= n then raise(("OneCycleLR: expected %d values for %s, got %d"):format(n, what, #v)) end
    for i = 1, n do
      if type(v[i]) ~= "number" then raise(("OneCycleLR: %s[%d] must be a number, got %s"):format(what, i, core.describe(v[i]))) end
    end
    return v
  end
  if type(v) ~= "number" then raise(("OneCycleLR: %s must be a number or a list of numbers, got %s"):format(what, core.describe(v))) end
  local r = {}
  for i = 1, n do r[i] = v end
  return r
end
local function positive_int(v, what)
  if not (type(v) == "number" and v > 0 and v == math.floor(v)) then
    raise(("OneCycleLR: expected positive integer %s, but got %s"):format(what, tostring(v)))
  end
  return v
end

optim.lr_scheduler.OneCycleLR = core.class("OneCycleLR", Scheduler)
function optim.lr_scheduler.OneCycleLR:init(opt, o)
  if getmetatable(opt) == nil or type(opt.param_groups) ~= "table" then
    raise("OneCycleLR: expected an optimizer from ddp.optim")
  end
  o = o or {}
  if type(o) ~= "table" then raise("OneCycleLR: options must be a table such as {max_lr = 0.1, total_steps = 100}") end
  for k in pairs(o) do
    if not one_cycle_opts[k] then raise(("OneCycleLR: unknown option %q"):format(tostring(k))) end
  end
  local total
  if o.total_steps ~= nil then
    total = positive_int(o.total_steps, "total_steps")
  elseif o.epochs ~= nil or o.steps_per_epoch ~= nil then
    total = positive_int(o.epochs, "epochs") * positive_int(o.steps_per_epoch, "steps_per_epoch")
  else
    raise("OneCycleLR: you must define either total_steps OR (epochs AND steps_per_epoch)")
  end
  local pct = o.pct_start == nil and 0.3 or o.pct_start
  if type(pct) ~= "number" or pct < 0 or pct > 1 then
    raise(("OneCycleLR: expected float between 0 and 1 pct_start, but got %s"):format(tostring(pct)))
  end
  local anneal = o.anneal_strategy or "cos"
  if anneal ~= "cos" and anneal ~= "linear" then
    raise(("OneCycleLR: anneal_strategy must be one of 'cos' or 'linear', instead got %s"):format(tostring(anneal)))
  end
  local n = #opt.param_groups
  if o.max_lr == nil then raise("OneCycleLR: max_lr is required") end
  local max_lrs = per_group(o.max_lr, n, "max_lr")
  local div, final_div = o.div_factor or 25, o.final_div_factor or 1e4
  self.total_steps, self.anneal_strategy = total, anneal
  self.cycle_momentum = o.cycle_momentum ~= false
  if o.three_phase then
    self.phases = {
      { end_step = pct * total - 1, start_lr = "initial_lr", end_lr = "max_lr", start_momentum = "max_momentum", end_momentum = "base_momentum" },
      { end_step = 2 * pct * total - 2, start_lr = "max_lr", end_lr = "initial_lr", start_momentum = "base_momentum", end_momentum = "max_momentum" },
      { end_step = total - 1, start_lr = "initial_lr", end_lr = "min_lr", start_momentum = "max_momentum", end_momentum = "max_momentum" },
    }
  else
    self.phases = {
      { end_step = pct * total - 1, start_lr = "initial_lr", end_lr = "max_lr", start_momentum = "max_momentum", end_momentum = "base_momentum" },
      { end_step = total - 1, start_lr = "max_lr", end_lr = "min_lr", start_momentum = "base_momentum", end_momentum = "max_momentum" },
    }
  end
  -- the per-group values, in the groups as PyTorch keeps them
  self.groups = {}
  for i, g in ipairs(opt.param_groups) do
    self.groups[i] = { initial_lr = max_lrs[i] / div, max_lr = max_lrs[i], min_lr = max_lrs[i] / div / final_div }
  end
  if self.cycle_momentum then
    local d = opt.defaults or {}
    if d.momentum == nil and d.betas == nil then
      raise("OneCycleLR: optimizer must support momentum with `cycle_momentum` option enabled")
    end
    self.use_beta1 = d.betas ~= nil
    local base = per_group(o.base_momentum == nil and 0.85 or o.base_momentum, n, "base_momentum")
    local top = per_group(o.max_momentum == nil and 0.95 or o.max_momentum, n, "max_momentum")
    for i = 1, n do self.groups[i].base_momentum, self.groups[i].max_momentum = base[i], top[i] end
  end
  self.optimizer, self.name, self.last_epoch = opt, "OneCycleLR", 0
  self.base_lrs = {}
  for i, g in ipairs(opt.param_groups) do
    g.initial_lr = self.groups[i].initial_lr
    self.base_lrs[i] = g.initial_lr
  end
  self:apply()
end

local function anneal(kind, a, b, pct)
  if kind == "linear" then return (b - a) * pct + a end
  return b + (a - b) / 2 * (math.cos(math.pi * pct) + 1)
end

function optim.lr_scheduler.OneCycleLR:apply()
  local step = self.last_epoch
  if step > self.total_steps then
    raise(("OneCycleLR: tried to step %d times. The specified number of total steps is %d")
          :format(step + 1, self.total_steps))
  end
  for i, g in ipairs(self.optimizer.param_groups) do
    local v, start = self.groups[i], 0
    for k, ph in ipairs(self.phases) do
      if step <= ph.end_step or k == #self.phases then
        local pct = (step - start) / (ph.end_step - start)
        g.lr = anneal(self.anneal_strategy, v[ph.start_lr], v[ph.end_lr], pct)
        if self.cycle_momentum then
          local m = anneal(self.anneal_strategy, v[ph.start_momentum], v[ph.end_momentum], pct)
          if self.use_beta1 then g.betas = { m, g.betas[2] } else g.momentum = m end
        end
        break
      end
      start = ph.end_step
    end
  end
end

-- stepping past total_steps fails and leaves the scheduler where it was
function optim.lr_scheduler.OneCycleLR:step()
  self.last_epoch = self.last_epoch + 1
  local ok, e = pcall(self.apply, self)
  if not ok then
    self.last_epoch = self.last_epoch - 1
    error(e, 0)
  end
end

optim.Optimizer = Optimizer
return optim
