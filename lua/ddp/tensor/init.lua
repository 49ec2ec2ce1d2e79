-- ddp.tensor: the tensor type -- the one place that builds the methods
-- table and the metatable of dl_tensor* and calls ffi.metatype, once.
--
-- The methods come from five modules of this folder, each handing over a
-- table of its own (a name given twice is an error here, so the order they
-- are taken in cannot change the result): ddp.tensor.info (metadata,
-- conversion, element access), ddp.tensor.views (view, reshape, split,
-- ...), ddp.tensor.math (math, with the operators), ddp.tensor.grad
-- (backward and the grad fields) and ddp.tensor.sampling (multinomial).
-- Then, in this order: autocast's wrappers over its listed ops
-- (ddp.autocast), ddp.tensor.math's aliases (sharing those wrappers), and
-- a check of self on every method.  Nothing else adds to the type:
-- modules above use the table this returns.
local core = require "ddp.core"
local info = require "ddp.tensor.info"
local views = require "ddp.tensor.views"
local ops = require "ddp.tensor.math"
local grad = require "ddp.tensor.grad"
local sampling = require "ddp.tensor.sampling"
local autocast = require "ddp.autocast"
local printer = require "ddp.tensor.print"
local ffi = core.ffi

core.add_lib_file(debug.getinfo(1, "S").source)

local T = {}      -- name -> method
local from = {}   -- name -> the module that gave it

for _, part in ipairs {
  { "ddp.tensor.info", info }, { "ddp.tensor.views", views }, { "ddp.tensor.math", ops },
  { "ddp.tensor.grad", grad }, { "ddp.tensor.sampling", sampling },
} do
  local modname, mod = part[1], part[2]
  for name, f in pairs(mod.methods(T)) do
    if from[name] then
      error(("ddp.tensor: method %s is given by both %s and %s"):format(name, from[name], modname))
    end
    T[name], from[name] = f, modname
  end
end

-- Autocast's op lists: before the aliases, so they share the wrappers.
autocast.install(T, autocast.tensor_low, "low")
autocast.install(T, autocast.tensor_f32, "f32")

for alias, name in pairs(ops.aliases) do
  T[alias] = T[name]
  if T[name .. "_"] then T[alias .. "_"] = T[name .. "_"] end
end

-- A method called with a dot (t.view(2, 3)) gets no tensor as self: say
-- so at the user's line rather than fail inside the FFI, or, with nil for
-- self, crash in C on a NULL pointer.  Binary ops take numbers first
-- (2 + t calls add(2, t)) and check their operands themselves.
local takes_operand = {}
for name in pairs(ops.binops) do takes_operand[T[name]] = true end
for name, f in pairs(T) do
  if not takes_operand[f] then
    T[name] = function(self, ...)
      if not core.is_tensor(self) then
        core.raise(("%s: expected a tensor as self, got %s; call it as t:%s(...), with a colon")
                   :format(name, core.show(self), name))
      end
      return f(self, ...)
    end
  end
end

-- t.grad, t.requires_grad, t.is_leaf, t.grad_fn, t.data read as fields;
-- methods win over fields, both behind one __index.
local fields = grad.fields
local mt = {
  __index = function(t, k)
    local m = T[k]
    if m ~= nil then return m end
    local p = fields[k]
    if p then return p(t) end
    return nil
  end,
  __newindex = grad.set_field,
  __tostring = printer.format,
  __name = "ddp.Tensor",
}
for k, f in pairs(ops.operators) do mt[k] = f end

-- The tensor type is set once per process (LuaJIT keeps a ctype's first
-- metatable), so a second load of the library -- busted unloading a spec
-- file's modules, then the next file requiring ddp again -- would give
-- tensors the first load's methods while the script talks to the second
-- load's modules: set_printoptions, autocast or the default dtype would
-- silently not apply.  Refuse it, naming the fix.  (An opaque dl_tensor*
-- cdata can be indexed only once the metatable is there.)
local ok, seen = pcall(function() return ffi.cast("dl_tensor *", nil).numel end)
if ok and seen ~= nil then
  error("ddp: the library was loaded a second time in this process, and tensors keep the first"
        .. " load's methods (ffi.metatype is set once): load it once -- under busted, add"
        .. ' helper = "ddp" to your .busted (docs/testing.md)', 0)
end
ffi.metatype("dl_tensor", mt)

return { methods = T }  -- ddp.Tensor
