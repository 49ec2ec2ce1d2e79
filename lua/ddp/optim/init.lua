-- ddp.optim: SGD, Adam and AdamW (each group's step one fused C call over
-- all its parameters, ddp.optim.foreach; foreach = false: a call per
-- parameter) over the Optimizer base, and the learning-rate schedulers
-- (ddp.optim.lr_scheduler), with state_dicts laid out as PyTorch's
-- ({state = {[0] = {...}}, param_groups = {{lr = ..., params = {0, 1}}}}).
local core = require "ddp.core"
local factory = require "ddp.tensor.factory"
local base = require "ddp.optim.optimizer"
local foreach = require "ddp.optim.foreach"
local C = core.C
local check, raise = core.check, core.raise
local Optimizer, setup = base.Optimizer, base.setup

core.add_lib_file(debug.getinfo(1, "S").source)

local optim = {}

-- -- SGD ------------------------------------------------------------------------------

optim.SGD = core.class("SGD", Optimizer)

function optim.SGD:init(params, opts)
  setup(self, "SGD", params,
    { lr = 1e-3, momentum = 0, dampening = 0, weight_decay = 0, nesterov = false, maximize = false,
      foreach = true }, opts)
  if self.defaults.nesterov and (self.defaults.momentum <= 0 or self.defaults.dampening ~= 0) then
    raise("SGD: nesterov needs momentum > 0 and dampening 0")
  end
end

optim.SGD.state_fields = { momentum_buffer = "tensor" }

function optim.SGD:step_group(g, idx0) foreach.sgd(self, g, idx0) end

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
      { lr = 1e-3, betas = { 0.9, 0.999 }, eps = 1e-8, weight_decay = wd, amsgrad = false, maximize = false,
        foreach = true }, opts)
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
  function cls:step_group(g, idx0) foreach.adam(self, g, idx0, decoupled) end
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

-- Learning-rate schedulers (optim.lr_scheduler.StepLR, ...): ddp.optim.lr_scheduler.
optim.lr_scheduler = require "ddp.optim.lr_scheduler"

-- optim.ZeroRedundancyOptimizer(params, optim.AdamW, opts): the state
-- sharded over the ranks (ddp.optim.zero), as torch.distributed.optim's.
optim.ZeroRedundancyOptimizer = require("ddp.optim.zero").ZeroRedundancyOptimizer

-- optim.GradScaler([opts]): loss scaling for float16 (ddp.optim.grad_scaler),
-- as torch.amp.GradScaler.
optim.GradScaler = require("ddp.optim.grad_scaler").GradScaler

optim.Optimizer = Optimizer
return optim
