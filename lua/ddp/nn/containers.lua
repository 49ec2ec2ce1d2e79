-- ddp.nn.containers: the modules that hold others -- Sequential and
-- ModuleList, as torch.nn's.
local core = require "ddp.core"
local module = require "ddp.nn.module"
local Module, is_module = module.Module, module.is_module
local raise = core.raise

core.add_lib_file(debug.getinfo(1, "S").source)

local nn = {}

nn.Sequential = Module:extend("Sequential")
function nn.Sequential:init(...)
  local mods = { ... }
  if #mods == 1 and not is_module(mods[1]) and type(mods[1]) == "table" then mods = mods[1] end
  for i, m in ipairs(mods) do
    if not is_module(m) then raise(("Sequential: element %d is a %s, not a module"):format(i, core.describe(m))) end
    self:add_module(tostring(i - 1), m)
  end
end
function nn.Sequential:forward(x)
  for _, m in ipairs(self:children()) do x = m(x) end
  return x
end
function nn.Sequential:get(i) return self._fields[tostring(i)] end  -- 0-based, as seq[i]

nn.ModuleList = Module:extend("ModuleList")
function nn.ModuleList:init(mods)
  for _, m in ipairs(mods or {}) do self:append(m) end
end
function nn.ModuleList:append(m)
  if not is_module(m) then raise("ModuleList: append expects a module, got " .. core.describe(m)) end
  self:add_module(tostring(#self._modules), m)
  return self
end
function nn.ModuleList:get(i) return self._fields[tostring(i)] end
function nn.ModuleList:len() return #self._modules end
function nn.ModuleList:iter()
  local i = -1
  return function()
    i = i + 1
    local m = self._fields[tostring(i)]
    if m then return i, m end
  end
end

return nn
