-- ddp.core.class: the one class idiom of the library's Lua classes
-- (nn.Module, optimizers and schedulers, datasets, samplers and the
-- DataLoader, Store, Work, the progress bar).
local errors = require "ddp.core.errors"
local type, setmetatable, getmetatable, pairs, ipairs = type, setmetatable, getmetatable, pairs, ipairs

errors.add_lib_file(debug.getinfo(1, "S").source)

local M = {}

--   local Store = core.class("Store")        -- core.class(name, Parent)
--   function Store:init(h, host) self.h, self.host = h, host end
--   function Store:close() ... end
--   local s = Store(h, host)                 -- a new instance, init run on it
--
-- The class is its instances' metatable: methods through __index (the
-- parent's through the class's own metatable), and metamethods defined on
-- the class (__tostring, __len, __call, ...) apply to instances.  A
-- subclass starts with copies of its parent's metamethods (Lua looks them
-- up raw, not through __index), so define a class's metamethods before
-- extending it.  tostring(Class) is its name; core.is_instance(x, Class)
-- also holds for subclasses.  Class.__new(Class), when defined, makes the
-- bare instance that init then fills (nn.Module's own layout).
--
-- opts.proxy: instances are userdata (newproxy) with their fields in a
-- table behind them, since LuaJIT, as Lua 5.1, ignores __len (and __gc) on
-- tables: the datasets and samplers, which `#` measures.  getmetatable of
-- such an instance gives the class name.

local parent_of = setmetatable({}, { __mode = "k" })    -- class -> parent or false
local proxy_class = setmetatable({}, { __mode = "k" })  -- proxy instance -> class

local function construct(cls, ...)
  local new = cls.__new
  local obj = new and new(cls) or setmetatable({}, cls)
  local init = cls.init
  if init then init(obj, ...) end
  return obj
end

-- The metamethods a proxy's own metatable takes from its class.
local proxy_meta = { "__len", "__tostring", "__gc", "__call", "__eq", "__concat", "__unm" }

local function new_proxy(cls)
  local u = newproxy(true)
  local mt = getmetatable(u)
  local fields = setmetatable({}, cls)
  mt.__index, mt.__newindex = fields, fields
  for _, k in ipairs(proxy_meta) do mt[k] = cls[k] end
  mt.__metatable = cls.__name
  proxy_class[u] = cls
  return u
end

function M.class(name, parent, opts)
  local cls = {}
  if parent then
    for k, v in pairs(parent) do
      if type(k) == "string" and k:sub(1, 2) == "__" then cls[k] = v end
    end
  end
  if cls.__index == nil or cls.__index == parent then cls.__index = cls end
  cls.__name = name
  if opts and opts.proxy then cls.__new = new_proxy end
  parent_of[cls] = parent or false
  return setmetatable(cls, {
    __index = parent,
    __call = construct,
    __tostring = function() return name end,
  })
end

-- The class of x (made by core.class), or nil.
function M.class_of(x)
  local tx = type(x)
  if tx == "table" then
    local mt = getmetatable(x)
    if parent_of[mt] ~= nil then return mt end
  elseif tx == "userdata" then
    return proxy_class[x]
  end
  return nil
end

function M.is_instance(x, cls)
  local c = M.class_of(x)
  while c do
    if c == cls then return true end
    c = parent_of[c]
  end
  return false
end

return M
