-- ddp.nn.weight_init: nn.init, the weight initialisations of torch.nn.init
-- (uniform_, normal_, zeros_, ones_, kaiming_uniform_, xavier_uniform_),
-- each in place and outside autograd.
local core = require "ddp.core"
local autograd = require "ddp.autograd"

core.add_lib_file(debug.getinfo(1, "S").source)

local M = {}

function M.uniform_(t, a, b) return autograd.no_grad(function() return t:uniform_(a, b) end) end
function M.normal_(t, mean, std) return autograd.no_grad(function() return t:normal_(mean or 0, std or 1) end) end
function M.zeros_(t) return autograd.no_grad(function() return t:zero_() end) end
function M.ones_(t) return autograd.no_grad(function() return t:fill_(1) end) end

local function fans(t)
  local s = t:shape()
  local receptive = 1
  for i = 3, #s do receptive = receptive * s[i] end
  return s[2] * receptive, s[1] * receptive
end

-- kaiming_uniform_(t, a): PyTorch's default for Linear and Conv weights
-- (a = sqrt(5) gives bound 1 / sqrt(fan_in)).
function M.kaiming_uniform_(t, a)
  local fan_in = fans(t)
  local gain = math.sqrt(2 / (1 + (a or 0) ^ 2))
  local bound = gain * math.sqrt(3 / fan_in)
  return M.uniform_(t, -bound, bound)
end

function M.xavier_uniform_(t, gain)
  local fan_in, fan_out = fans(t)
  local bound = (gain or 1) * math.sqrt(6 / (fan_in + fan_out))
  return M.uniform_(t, -bound, bound)
end

return M
