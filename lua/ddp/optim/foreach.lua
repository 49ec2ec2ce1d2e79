-- ddp.optim.foreach: SGD's and Adam/AdamW's step over a whole parameter
-- group in one C call (PyTorch's foreach=True): one pass of the thread
-- pool over every parameter's elements on the CPU, one launch per 32
-- tensors on CUDA (runtime/nn/optim.c), the same bits as the step per
-- parameter.  Each group keeps a plan: C arrays of its parameters and of
-- their state tensors, made once and refreshed only where a state table
-- changed (load_state_dict, a first step), so a step makes no Lua tensor:
-- the gradients are read in C, and Lua only counts the steps and makes the
-- state of a parameter's first step, as the per-parameter update does.
local core = require "ddp.core"
local factory = require "ddp.tensor.factory"

local C, ffi = core.C, core.ffi
local check, raise = core.check, core.raise

core.add_lib_file(debug.getinfo(1, "S").source)

local M = {}

local plans = setmetatable({}, { __mode = "k" })  -- group -> its plan

-- The plan of group for the state fields given: rebuilt when the group's
-- parameters changed (another list, another tensor at a place).
local function plan_of(group, fields)
  local ps = group.params
  local n = #ps
  local pl = plans[group]
  if pl and pl.n == n then
    for i = 1, n do
      if not rawequal(pl.ph[i], ps[i]) then pl = nil break end
    end
  else
    pl = nil
  end
  if pl then return pl end
  pl = { n = n, ph = {}, P = ffi.new("dl_tensor *[?]", n), mask = ffi.new("uint8_t[?]", n),
         steps = ffi.new("int64_t[?]", n), first = ffi.new("uint8_t[?]", n), f = {} }
  for i = 1, n do
    pl.ph[i] = ps[i]
    pl.P[i - 1] = ps[i]
  end
  -- per field: the C array and the handles it points at (which keep them
  -- alive, and tell when the state table holds another tensor)
  for _, f in ipairs(fields) do pl.f[f] = { arr = ffi.new("dl_tensor *[?]", n), h = {} } end
  plans[group] = pl
  return pl
end

-- entry i of field fl now points at t
local function point(fl, i, t)
  if not rawequal(fl.h[i], t) then
    fl.h[i] = t
    fl.arr[i - 1] = t
  end
end

-- The parameters of the plan with a gradient (mask), their count.
local function present(pl)
  local cnt = C.dl_grads_present(pl.P, pl.n, pl.mask)
  if cnt < 0 then check(cnt) end
  return cnt
end

-- C names a parameter by its place in the group's arrays; the user by the
-- optimizer's 0-based index (PyTorch's), idx0 being the group's first.
local function step_error(idx0)
  local msg = core.last_error():gsub(": parameter (%d+)", function(k)
    return ": parameter " .. (idx0 + tonumber(k))
  end, 1)
  raise(msg)
end

local function count(v)
  if type(v) == "number" then return v end
  return core.is_tensor(v) and v:item() or 0  -- PyTorch 1.13's one-element step
end

-- -- SGD ------------------------------------------------------------------------------

local SGD_FIELDS = { "momentum_buffer" }

function M.sgd(opt, group, idx0)
  local pl = plan_of(group, SGD_FIELDS)
  if present(pl) == 0 then return end
  local state, mask, first = opt.state, pl.mask, pl.first
  local momentum = group.momentum ~= 0
  local buf = pl.f.momentum_buffer
  for i = 1, pl.n do
    if mask[i - 1] ~= 0 then
      local idx = idx0 + i - 1
      local st = state[idx]
      if not st then st = {}; state[idx] = st end
      if momentum then
        local b = st.momentum_buffer
        first[i - 1] = b == nil and 1 or 0
        if b == nil then
          b = factory.zeros_like(pl.ph[i])
          st.momentum_buffer = b
        end
        point(buf, i, b)
      end
    end
  end
  if C.dl_sgd_step_foreach(pl.P, momentum and buf.arr or nil, first, pl.n, group.lr, group.momentum,
                           group.dampening, group.weight_decay, group.nesterov and 1 or 0,
                           group.maximize and 1 or 0) ~= 0 then
    step_error(idx0)
  end
end

-- -- Adam and AdamW -------------------------------------------------------------------

local ADAM_FIELDS = { "exp_avg", "exp_avg_sq", "max_exp_avg_sq" }

function M.adam(opt, group, idx0, decoupled)
  local pl = plan_of(group, ADAM_FIELDS)
  if present(pl) == 0 then return end
  local state, mask, steps = opt.state, pl.mask, pl.steps
  local ams = group.amsgrad
  local m, v, vmax = pl.f.exp_avg, pl.f.exp_avg_sq, pl.f.max_exp_avg_sq
  for i = 1, pl.n do
    if mask[i - 1] ~= 0 then
      local idx = idx0 + i - 1
      local st = state[idx]
      if not st then st = {}; state[idx] = st end
      if not st.step then
        local p = pl.ph[i]
        st.step = 0
        st.exp_avg = factory.zeros_like(p)
        st.exp_avg_sq = factory.zeros_like(p)
        if ams then st.max_exp_avg_sq = factory.zeros_like(p) end
      end
      local s = count(st.step) + 1
      st.step = s
      steps[i - 1] = s
      point(m, i, st.exp_avg)
      point(v, i, st.exp_avg_sq)
      if ams then point(vmax, i, st.max_exp_avg_sq) end
    end
  end
  if C.dl_adam_step_foreach(pl.P, m.arr, v.arr, ams and vmax.arr or nil, steps, pl.n, group.lr,
                            group.betas[1], group.betas[2], group.eps, group.weight_decay,
                            decoupled and 1 or 0, group.maximize and 1 or 0) ~= 0 then
    step_error(idx0)
  end
end

return M
