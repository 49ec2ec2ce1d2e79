-- ddp.nn.utils: nn.utils -- clip_grad_norm(_), as torch.nn.utils'.
local core = require "ddp.core"
local factory = require "ddp.tensor.factory"
local autograd = require "ddp.autograd"

core.add_lib_file(debug.getinfo(1, "S").source)

local M = {}

-- Scales gradients so their total norm is at most max_norm; returns the
-- total norm before clipping (a 0-dim tensor), as PyTorch.
function M.clip_grad_norm(params, max_norm, norm_type)
  norm_type = norm_type or 2
  if type(params) ~= "table" or core.is_tensor(params) then params = { params } end
  return autograd.no_grad(function()
    local norms = {}
    for _, p in ipairs(params) do
      local g = p.grad
      if g then norms[#norms + 1] = g:norm(norm_type):double() end
    end
    if #norms == 0 then return factory.tensor(0, { dtype = "float32" }) end
    local total = factory.stack(norms):norm(norm_type)
    local coef = max_norm / (total:item() + 1e-6)
    if coef < 1 then
      for _, p in ipairs(params) do
        local g = p.grad
        if g then g:mul_(coef) end
      end
    end
    return total:float()
  end)
end
M.clip_grad_norm_ = M.clip_grad_norm

return M
