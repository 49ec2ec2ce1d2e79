-- ddp.optim.lr_scheduler: optim.lr_scheduler, the learning-rate
-- schedulers (StepLR, CosineWithWarmup, LinearDecay, LambdaLR,
-- OneCycleLR) as torch.optim.lr_scheduler's, each setting its optimizer's
-- param_groups[i].lr at every step, with a state_dict.
local core = require "ddp.core"
local raise, copy_value = core.raise, core.copy_value
local type, ipairs, pairs, getmetatable = type, ipairs, pairs, getmetatable

core.add_lib_file(debug.getinfo(1, "S").source)

local M = {}

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

-- lr = base * gamma ^ floor(epoch / step_size)
M.StepLR = scheduler_class("StepLR", function(o)
  return { step_size = need(o, "step_size", "StepLR", 1), gamma = o.gamma or 0.1 }
end, function(self, base, e)
  return base * self.gamma ^ math.floor(e / self.step_size)
end)

-- Linear warm-up, base * (e + 1) / warmup_steps for the first warmup_steps
-- steps (no step at lr 0), the peak reached once at e = warmup_steps - 1,
-- then cosine from there down to min_lr at total_steps and held after:
-- PyTorch's LambdaLR(opt, f) with f that function of e over base (the
-- lr used to be held at its peak for two steps, the cosine starting one
-- step after the warm-up's end).
M.CosineWithWarmup = scheduler_class("CosineWithWarmup", function(o)
  local total = need(o, "total_steps", "CosineWithWarmup", 1)
  local warm = o.warmup_steps or 0
  if type(warm) ~= "number" or warm < 0 or warm % 1 ~= 0 then
    raise("CosineWithWarmup: warmup_steps must be a non-negative integer, got " .. tostring(warm))
  end
  if warm >= total then raise("CosineWithWarmup: warmup_steps must be less than total_steps") end
  return { total_steps = total, warmup_steps = warm, min_lr = o.min_lr or 0 }
end, function(self, base, e)
  local top = math.max(self.warmup_steps - 1, 0)  -- the step at the peak
  if e < top then return base * (e + 1) / self.warmup_steps end
  local t = math.min(1, (e - top) / (self.total_steps - top))
  return self.min_lr + (base - self.min_lr) * 0.5 * (1 + math.cos(math.pi * t))
end)

-- linear from start_factor * base to end_factor * base over total_steps
M.LinearDecay = scheduler_class("LinearDecay", function(o)
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
M.LambdaLR = core.class("LambdaLR", Scheduler)
function M.LambdaLR:init(opt, lr_lambda)
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
function M.LambdaLR:apply()
  for i, g in ipairs(self.optimizer.param_groups) do
    local f = self.lr_lambdas[i](self.last_epoch)
    if type(f) ~= "number" then
      raise(("LambdaLR: lr_lambda %d returned %s for epoch %d, not a number"):format(i, core.describe(f), self.last_epoch))
    end
    g.lr = self.base_lrs[i] * f
  end
end
function M.LambdaLR:state_dict()
  local s = Scheduler.state_dict(self)
  s.lr_lambdas = nil
  return s
end
function M.LambdaLR:load_state_dict(s)
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

M.OneCycleLR = core.class("OneCycleLR", Scheduler)
function M.OneCycleLR:init(opt, o)
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

function M.OneCycleLR:apply()
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
function M.OneCycleLR:step()
  self.last_epoch = self.last_epoch + 1
  local ok, e = pcall(self.apply, self)
  if not ok then
    self.last_epoch = self.last_epoch - 1
    error(e, 0)
  end
end

return M
