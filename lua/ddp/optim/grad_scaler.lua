-- ddp.optim.grad_scaler: GradScaler, PyTorch's torch.amp.GradScaler for
-- float16 training (ddp.GradScaler, ddp.amp.GradScaler):
--
--   local scaler = ddp.GradScaler()
--   ddp.autocast("fp16", function() loss = F.cross_entropy(model(x), y) end)
--   scaler:scale(loss):backward()
--   scaler:step(opt)        -- unscales the gradients; skips the step on inf/NaN
--   scaler:update()         -- halves the scale after an inf, doubles it after 2000 clean steps
--
-- The loss is multiplied by the scale so that float16 gradients do not
-- flush to zero; step() first divides the gradients back (unscale_, one C
-- call over the optimizer's parameters that also looks for inf and NaN,
-- dl_amp_unscale_grads), and skips the optimizer's step when it found any.
-- Under ddp.DDP the gradients are all-reduced before, so every rank finds
-- the same and skips the same steps.  The scale is a float32 value, as
-- PyTorch's; state_dict / load_state_dict carry it with the growth tracker.
local core = require "ddp.core"
local ffi, C = core.ffi, core.C
local raise, show = core.raise, core.show

core.add_lib_file(debug.getinfo(1, "S").source)

local M = {}

local GradScaler = core.class("GradScaler")
M.GradScaler = GradScaler

local f32 = ffi.new("float[1]")
local function float32(x)
  f32[0] = x
  return tonumber(f32[0])
end

local DEFAULTS = { init_scale = 2.0 ^ 16, growth_factor = 2.0, backoff_factor = 0.5, growth_interval = 2000,
                   enabled = true, device = "cpu" }

-- GradScaler([{init_scale=, growth_factor=, backoff_factor=, growth_interval=,
-- enabled=, device=}]): PyTorch's defaults.  device is accepted for
-- torch.amp.GradScaler("cuda")'s sake: the scale multiplies the loss on
-- the loss's own device.
function GradScaler:init(opts)
  if opts ~= nil and type(opts) ~= "table" then
    raise("GradScaler: options must be a table such as {init_scale = 65536}, got " .. show(opts))
  end
  opts = opts or {}
  for k in pairs(opts) do
    if DEFAULTS[k] == nil then
      raise(("GradScaler: unknown option %s (expected init_scale, growth_factor, backoff_factor, "
             .. "growth_interval, enabled or device)"):format(show(k)))
    end
  end
  local o = {}
  for k, v in pairs(DEFAULTS) do if opts[k] == nil then o[k] = v else o[k] = opts[k] end end
  if type(o.enabled) ~= "boolean" then raise("GradScaler: enabled must be true or false, got " .. show(o.enabled)) end
  if type(o.init_scale) ~= "number" or not (o.init_scale > 0 and o.init_scale < math.huge) then
    raise("GradScaler: init_scale must be a positive finite number, got " .. show(o.init_scale))
  end
  if type(o.growth_factor) ~= "number" or not (o.growth_factor > 1) then
    raise("GradScaler: growth_factor should be > 1, got " .. show(o.growth_factor))
  end
  if type(o.backoff_factor) ~= "number" or not (o.backoff_factor > 0 and o.backoff_factor < 1) then
    raise("GradScaler: backoff_factor should be in (0, 1), got " .. show(o.backoff_factor))
  end
  if not core.is_integer(o.growth_interval) or o.growth_interval < 1 then
    raise("GradScaler: growth_interval should be a positive integer, got " .. show(o.growth_interval))
  end
  self._enabled = o.enabled
  self._scale = float32(o.init_scale)
  self._growth_factor, self._backoff_factor, self._growth_interval = o.growth_factor, o.backoff_factor, o.growth_interval
  self._growth_tracker = 0
  self._states = setmetatable({}, { __mode = "k" })  -- optimizer -> {stage =, found_inf =}
end

function GradScaler:is_enabled() return self._enabled end
function GradScaler:get_scale() return self._enabled and self._scale or 1.0 end
function GradScaler:get_growth_factor() return self._growth_factor end
function GradScaler:get_backoff_factor() return self._backoff_factor end
function GradScaler:get_growth_interval() return self._growth_interval end
function GradScaler:set_growth_factor(v) self._growth_factor = v end
function GradScaler:set_backoff_factor(v) self._backoff_factor = v end
function GradScaler:set_growth_interval(v) self._growth_interval = v end

-- scale(outputs): a tensor times the scale, or a (nested) table of them.
function GradScaler:scale(outputs)
  if not self._enabled then return outputs end
  local s = self._scale
  local function go(x, depth)
    if core.is_tensor(x) then return x * s end
    if type(x) == "table" and depth < 16 then
      local out = {}
      for k, v in pairs(x) do out[k] = go(v, depth + 1) end
      return out
    end
    raise("GradScaler.scale: expected a tensor or a table of tensors, got " .. core.describe(x))
  end
  return go(outputs, 0)
end

local function state_of(self, opt)
  if type(opt) ~= "table" or type(opt.param_groups) ~= "table" or type(opt.step) ~= "function" then
    raise("GradScaler: expected an optimizer (ddp.optim), got " .. core.describe(opt))
  end
  local st = self._states[opt]
  if not st then
    st = { stage = "ready", found_inf = false }
    self._states[opt] = st
  end
  return st
end

-- unscale_(optimizer): divides the optimizer's gradients by the scale in
-- place (before clip_grad_norm_, as PyTorch's recipe), once a step.
function GradScaler:unscale_(opt)
  if not self._enabled then return end
  local st = state_of(self, opt)
  if st.stage == "unscaled" then
    raise("GradScaler.unscale_: unscale_() has already been called on this optimizer since the last update()")
  elseif st.stage == "stepped" then
    raise("GradScaler.unscale_: unscale_() is being called after step()")
  end
  local ps = {}
  for _, g in ipairs(opt.param_groups) do
    for _, p in ipairs(g.params) do ps[#ps + 1] = p end
  end
  local arr, found = ffi.new("dl_tensor *[?]", math.max(#ps, 1)), ffi.new("int[1]")
  for i, p in ipairs(ps) do arr[i - 1] = p end
  -- PyTorch's inv_scale: the reciprocal in double, then float32
  if C.dl_amp_unscale_grads(arr, #ps, float32(1 / self._scale), 0, found) ~= 0 then raise(core.last_error()) end
  st.found_inf = st.found_inf or found[0] ~= 0
  st.stage = "unscaled"
end

-- step(optimizer): unscale_ (unless done), then optimizer:step() unless an
-- inf or NaN was found; returns what the step returned, or nil if skipped.
function GradScaler:step(opt, closure)
  if not self._enabled then return opt:step(closure) end
  if closure ~= nil then raise("GradScaler.step: a closure is not supported while the GradScaler is enabled (as in PyTorch)") end
  local st = state_of(self, opt)
  if st.stage == "stepped" then raise("GradScaler.step: step() has already been called since the last update()") end
  if st.stage == "ready" then self:unscale_(opt) end
  local r
  if not st.found_inf then r = opt:step() end
  st.stage = "stepped"
  return r
end

-- update([new_scale]): the scale for the next step: backoff_factor times
-- after a found inf (the growth count restarts), growth_factor times after
-- growth_interval steps in a row without one; or new_scale.
function GradScaler:update(new_scale)
  if not self._enabled then return end
  if new_scale ~= nil then
    if core.is_tensor(new_scale) then new_scale = new_scale:item() end
    if type(new_scale) ~= "number" then raise("GradScaler.update: new_scale must be a number, got " .. show(new_scale)) end
    self._scale = float32(new_scale)
  else
    local any, found = false, false
    for _, st in pairs(self._states) do
      if st.stage ~= "ready" then any, found = true, found or st.found_inf end
    end
    if not any then raise("GradScaler.update: no inf checks were recorded before update() (call step() or unscale_() first)") end
    if found then
      self._scale = float32(self._scale * self._backoff_factor)
      self._growth_tracker = 0
    else
      local n = self._growth_tracker + 1
      if n == self._growth_interval then
        local grown = float32(self._scale * self._growth_factor)
        if grown < math.huge then self._scale = grown end
        n = 0
      end
      self._growth_tracker = n
    end
  end
  self._states = setmetatable({}, { __mode = "k" })
end

function GradScaler:state_dict()
  if not self._enabled then return {} end
  return { scale = self._scale, growth_factor = self._growth_factor, backoff_factor = self._backoff_factor,
           growth_interval = self._growth_interval, _growth_tracker = self._growth_tracker }
end

function GradScaler:load_state_dict(sd)
  if not self._enabled then return end
  if type(sd) ~= "table" or next(sd) == nil then
    raise("GradScaler.load_state_dict: the state is empty, possibly because it was saved from a disabled GradScaler")
  end
  for _, k in ipairs { "scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker" } do
    if type(sd[k]) ~= "number" then
      raise(("GradScaler.load_state_dict: %s must be a number, got %s"):format(k, show(sd[k])))
    end
  end
  if not (sd.scale > 0 and sd.scale < math.huge) then
    raise("GradScaler.load_state_dict: scale must be positive and finite, got " .. show(sd.scale))
  end
  if not core.is_integer(sd._growth_tracker) or sd._growth_tracker < 0 then
    raise("GradScaler.load_state_dict: _growth_tracker must be a non-negative integer, got " .. show(sd._growth_tracker))
  end
  self._scale = float32(sd.scale)
  self._growth_factor, self._backoff_factor = sd.growth_factor, sd.backoff_factor
  self._growth_interval, self._growth_tracker = sd.growth_interval, sd._growth_tracker
end

return M
