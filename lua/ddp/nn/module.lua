-- ddp.nn.module: nn.Module, the base of every layer, as torch.nn.Module.
-- A module registers what is assigned to it: other modules become
-- children, tensors that require grad become parameters, register_buffer
-- adds buffers; names are kept in assignment order, so state_dict names
-- read "layers.0.weight" as in PyTorch.  Calling, traversal
-- (named_parameters, modules, ...), to(), state dicts and printing.
--
--   local Net = nn.Module:extend("Net")
--   function Net:init(hidden) self.fc1 = nn.Linear(784, hidden) ... end
--   function Net:forward(x) return self.fc1(x):relu() end
--   local model = Net(128)
local core = require "ddp.core"
local autograd = require "ddp.autograd"
local checkpoint = require "ddp.nn.checkpoint"
local steps = require "ddp.core.steps"
local trace = require "ddp.core.trace"
local trace_clock = core.clock
local raise = core.raise

core.add_lib_file(debug.getinfo(1, "S").source)

local M = {}

-- Instances keep what is assigned to them in self._fields (so every
-- assignment goes through _set, which registers parameters, buffers and
-- children); the class is their metatable, as core.class makes it, with
-- __index reading the fields first, then the class.
local Module = core.class("Module")
M.Module = Module

-- Whether v is a module (an instance of nn.Module or of a subclass).
local function is_module(v)
  return core.is_instance(v, Module)
end
M.is_module = is_module

Module.__index = function(self, k)
  local v = rawget(self, "_fields")[k]
  if v ~= nil then return v end
  return getmetatable(self)[k]
end
Module.__newindex = function(self, k, v) self:_set(k, v) end
Module.__tostring = function(self) return self:repr("") end

-- -- Calling -------------------------------------------------------------------------
--
-- model(x) runs forward.  An error inside names the module it happened in,
-- by its path from the module called (as state_dict names it) and its type:
--   train.lua:20: fc2 (Linear(in_features=16, out_features=15, bias=True)): linear: ...
-- Only the outermost call runs forward under xpcall; its handler runs
-- where the error happened and takes the innermost forward still on the
-- stack: a frame running m.forward with m as its first local.  Inner calls
-- tail-call forward as before (free), and that frame is there even when
-- the user's forward tail-called the child (`return self.fc2(...)`),
-- which leaves no frame of its own.  So the message is prefixed once, with
-- the whole path, and keeps its file:line in front; an error that is not a
-- string passes unchanged.

local root = nil  -- the module called outermost, while its forward runs

local module_call

-- The module of the innermost module call on the stack.
local function innermost()
  local level = 3
  while true do
    local info = debug.getinfo(level, "f")
    if not info then return nil end
    if info.func == module_call then
      local _, m = debug.getlocal(level, 1)
      return m
    end
    level = level + 1
  end
end

-- "Linear(in_features=2, ...)" for a layer, the class name for a container.
local function label(m)
  if #rawget(m, "_modules") > 0 then return m.__name end
  local ok, r = pcall(m.repr, m, "")
  return ok and type(r) == "string" and not r:find("\n") and r or m.__name
end

local function annotate(e)
  local m = innermost()
  if m == nil or m == root then return e end
  local path
  for _, pm in ipairs(root:named_modules()) do
    if pm[2] == m then path = pm[1] break end
  end
  local prefix = path and (path .. " (" .. label(m) .. "): ") or (label(m) .. ": ")
  local loc, rest = e:match('^(%[string ".-"%]:%d+: )(.*)$')
  if not loc then loc, rest = e:match("^([^\n:]*:%d+: )(.*)$") end
  if loc then return loc .. prefix .. rest end
  return prefix .. e
end

local function on_error(e)
  if type(e) ~= "string" or root == nil then return e end
  local ok, r = pcall(annotate, e)
  return ok and r or e
end

-- the outermost call's time is the step's forward (ddp.core.steps)
local steps_forward, steps_mark = steps.forward, steps.mark

local function finish(t0, c0, ok, ...)
  root = nil
  if ok then
    steps_forward(t0, c0)
    return ...
  end
  error((...), 0)
end

local function pass(...) return ... end

-- While a trace is on: each call is a span named by the module's path
-- under the outermost ("fc1: Linear"; the outermost: its class), with the
-- autograd nodes it made, whose backward is the module's (ddp.core.trace).
local paths = setmetatable({}, { __mode = "k" })  -- outermost module -> {module -> path}
local names = setmetatable({}, { __mode = "k" })  -- outermost module -> {module -> span name}
local function path_of(m)
  local map = paths[root]
  if not map or map[m] == nil then
    map, names[root] = {}, {}
    for _, pm in ipairs(root:named_modules()) do map[pm[2]] = pm[1] end
    map[m] = map[m] or ""
    paths[root] = map
  end
  local path = map[m]
  local nm = names[root]
  local name = nm[m]
  if not name then
    name = path == "" and m.__name or path .. ": " .. m.__name
    nm[m] = name
  end
  return path, name
end

local function traced_end(path, name, t0, s0, ...)
  trace.module_call(name, path, t0, s0)
  return ...
end

local function traced_forward(self, ...)
  local path, name = path_of(self)
  return traced_end(path, name, trace_clock(), trace.seq(), self:forward(...))
end

-- A module marked with :checkpoint() runs its forward through
-- ddp.checkpoint (its activations recomputed in backward).  The recompute
-- runs inside backward, where no call is outermost: it runs under the
-- first call's outermost module, so the trace names its calls by the same
-- paths and the step's forward is not counted again.
local run_checkpointed = checkpoint.checkpoint
local function forward_of(self, ...)
  if not rawget(self, "_checkpoint") then return self:forward(...) end
  local outer = root
  return run_checkpointed(function(...)
    if root ~= nil then return self:forward(...) end  -- the first forward
    root = outer
    local r = { pcall(trace.on and traced_forward or self.forward, self, ...) }
    root = nil
    if not r[1] then error(r[2], 0) end
    return unpack(r, 2, table.maxn(r))
  end, ...)
end

local function traced(self, ...)
  local path, name = path_of(self)
  return traced_end(path, name, trace_clock(), trace.seq(), forward_of(self, ...))
end

local function traced_root(self, ...)
  local t0, c0 = steps_mark()
  local s0 = trace.seq()
  return traced_end("", self.__name, t0, s0, finish(t0, c0, xpcall(forward_of, on_error, self, ...)))
end

function module_call(self, ...)
  if root ~= nil then
    if trace.on then return traced(self, ...) end
    return pass(forward_of(self, ...))
  end
  root = self
  if trace.on then return traced_root(self, ...) end
  local t0, c0 = steps_mark()
  return finish(t0, c0, xpcall(forward_of, on_error, self, ...))
end
Module.__call = module_call

-- module:checkpoint([on]): from now on, each call keeps none of the
-- forward's activations and recomputes them in backward (PyTorch's
-- checkpoint_wrapper, or Hugging Face's gradient_checkpointing_enable on a
-- block); its parameters and state_dict names are unchanged.
-- module:checkpoint(false) turns it off.  Returns the module.
function Module:checkpoint(on)
  if on ~= nil and type(on) ~= "boolean" then
    raise("checkpoint: expected true or false (or nothing: true), got " .. core.describe(on))
  end
  rawset(self, "_checkpoint", on ~= false or nil)
  return self
end
function Module:is_checkpointed() return rawget(self, "_checkpoint") == true end

-- The bare instance, before init.
function Module.__new(class)
  local obj = setmetatable({ _fields = {}, _params = {}, _buffers = {}, _modules = {},
                             _nonpersistent = {} }, class)
  obj._fields.training = true
  return obj
end

-- A new class: Class(...) creates an instance and calls Class.init(self, ...).
function Module:extend(name)
  return core.class(name or "Module", self)
end

-- Class:new(...) is Class(...).
function Module:new(...)
  return self(...)
end

local function remove(list, name)
  for i = #list, 1, -1 do
    if list[i] == name then table.remove(list, i) end
  end
end

local function append(list, name)
  remove(list, name)
  list[#list + 1] = name
end

function Module:_set(k, v)
  local f = rawget(self, "_fields")
  remove(self._params, k)
  remove(self._modules, k)
  if is_module(v) then
    append(self._modules, k)
  elseif core.is_tensor(v) and v.requires_grad and v.is_leaf then
    append(self._params, k)
  elseif core.is_tensor(v) and f[k] ~= nil and core.is_tensor(f[k]) then
    -- a registered buffer keeps its registration when replaced
  elseif v == nil then
    remove(self._buffers, k)
  end
  f[k] = v
end

function Module:register_parameter(name, t)
  if t ~= nil and not core.is_tensor(t) then raise("register_parameter: expected a tensor, got " .. core.describe(t)) end
  if t ~= nil and not t.requires_grad then t:requires_grad_() end
  self:_set(name, t)
end

-- Buffers: state that is saved and moved with the module but not trained
-- (BatchNorm's running statistics, a step counter); persistent = false
-- leaves it out of state_dict.
function Module:register_buffer(name, t, persistent)
  if t ~= nil and not core.is_tensor(t) then raise("register_buffer: expected a tensor, got " .. core.describe(t)) end
  rawget(self, "_fields")[name] = t
  append(self._buffers, name)
  self._nonpersistent[name] = persistent == false or nil
end

function Module:add_module(name, m)
  if not is_module(m) then raise("add_module: expected a module, got " .. core.describe(m)) end
  self:_set(name, m)
end

function Module:forward()
  raise(self.__name .. ": forward is not defined")
end

-- -- Traversal ----------------------------------------------------------------------------

-- named_parameters() and the others return lists that are also iterators,
-- so both PyTorch's loop and the Lua one work:
--   for name, p in m:named_parameters() do ... end       -- as PyTorch's generator
--   for _, np in ipairs(m:named_parameters()) do ... end  -- np = {name, p}
--   for p in m:parameters() do ... end
--   for _, p in ipairs(m:parameters()) do ... end
-- A generic for calls the list (its __call) with the previous first value;
-- cursor remembers where that was, so each step is O(1), and a search
-- finds it when two loops over the same list interleave (from the end: a
-- module listed twice by children() then skips ahead, never loops).
local cursor = setmetatable({}, { __mode = "k" })

local function position(list, prev, key)
  local c = cursor[list]
  if c and list[c] ~= nil and rawequal(key(list[c]), prev) then return c end
  for i = #list, 1, -1 do
    if rawequal(key(list[i]), prev) then return i end
  end
  return nil
end

local function step(list, prev, key)
  local i = 1
  if prev ~= nil then
    local p = position(list, prev, key)
    if not p then return nil end
    i = p + 1
  end
  local v = list[i]
  cursor[list] = v ~= nil and i or nil
  return v
end

local function first(pair) return pair[1] end
local function itself(v) return v end

local pair_list = { __call = function(list, _, prev)
  local pair = step(list, prev, first)
  if pair then return pair[1], pair[2] end
end }
local value_list = { __call = function(list, _, prev) return step(list, prev, itself) end }

local function pairs_of(list) return setmetatable(list, pair_list) end
local function values_of(list) return setmetatable(list, value_list) end

-- Every (name, module) pair, a module shared by two parents under both
-- names (what state_dict walks).
local function walk(self, prefix, out)
  out[#out + 1] = { prefix, self }
  for _, name in ipairs(self._modules) do
    local m = self._fields[name]
    if m then walk(m, prefix == "" and name or (prefix .. "." .. name), out) end
  end
  return out
end

-- As PyTorch, a module reached twice is listed once, under its first name.
function Module:named_modules(prefix)
  local out, seen = {}, {}
  for _, pm in ipairs(walk(self, prefix or "", {})) do
    if not seen[pm[2]] then
      seen[pm[2]] = true
      out[#out + 1] = pm
    end
  end
  return pairs_of(out)
end

function Module:modules()
  local r = {}
  for i, p in ipairs(self:named_modules()) do r[i] = p[2] end
  return values_of(r)
end

function Module:children()
  local r = {}
  for _, name in ipairs(self._modules) do r[#r + 1] = self._fields[name] end
  return values_of(r)
end

function Module:named_children()
  local r = {}
  for _, name in ipairs(self._modules) do r[#r + 1] = { name, self._fields[name] } end
  return pairs_of(r)
end

-- A list of {name, tensor}, in PyTorch's order.  unique: a tensor held
-- twice (tied weights) is listed once, under its first name, as PyTorch's
-- named_parameters does; state_dict lists every name.
local function named(self, list_field, skip_nonpersistent, unique)
  local r, seen = {}, {}
  for _, pm in ipairs(unique and self:named_modules() or walk(self, "", {})) do
    local prefix, m = pm[1], pm[2]
    for _, name in ipairs(m[list_field]) do
      local t = m._fields[name]
      local key = t ~= nil and tostring(core.address(t))
      if t ~= nil and not (skip_nonpersistent and m._nonpersistent[name]) and not (unique and seen[key]) then
        if unique then seen[key] = true end
        r[#r + 1] = { prefix == "" and name or (prefix .. "." .. name), t }
      end
    end
  end
  return r
end

function Module:named_parameters() return pairs_of(named(self, "_params", false, true)) end
function Module:named_buffers() return pairs_of(named(self, "_buffers", false, true)) end

function Module:parameters()
  local r = {}
  for i, p in ipairs(self:named_parameters()) do r[i] = p[2] end
  return values_of(r)
end

function Module:buffers()
  local r = {}
  for i, p in ipairs(self:named_buffers()) do r[i] = p[2] end
  return values_of(r)
end

function Module:apply(fn)
  for _, m in ipairs(self:modules()) do fn(m) end
  return self
end

function Module:train(mode)
  mode = mode ~= false
  for _, m in ipairs(self:modules()) do m._fields.training = mode end
  return self
end

function Module:eval() return self:train(false) end

function Module:zero_grad()
  for _, p in ipairs(self:parameters()) do p.grad = nil end
end

-- to(dtype): parameters and floating buffers become new tensors of that
-- dtype; to("cuda[:N]") / to("cpu"): parameters and all buffers move
-- (create optimizers after, as in PyTorch).  A tensor held by two modules
-- (tied weights: a language model's lm_head and its embedding) becomes one
-- new tensor held by both, as PyTorch keeps the Parameter object.
function Module:to(what)
  local device = type(what) == "string" and (what == "cpu" or what:match("^cuda"))
  if device then core.device_arg(what, "Module:to") end
  local done = {}  -- old tensor's address -> its new tensor
  local function moved(t, make)
    local key = tostring(core.address(t))
    local r = done[key]
    if r == nil then r = make(t); done[key] = r end
    return r
  end
  local function param(p)
    local q = autograd.no_grad(function()
      local r = p:to(what)
      if core.same(r, p) then return p end
      return device and r or r:clone()
    end)
    if core.same(q, p) then return p end
    return q:requires_grad_()
  end
  local function buffer(b) return b:to(what) end
  for _, m in ipairs(self:modules()) do
    local names = { unpack(m._params) }  -- _set reorders m._params
    for _, name in ipairs(names) do m._fields[name] = moved(m._fields[name], param) end
    for _, name in ipairs(m._buffers) do
      local b = m._fields[name]
      if b and (device or b:is_floating_point()) then m._fields[name] = moved(b, buffer) end
    end
  end
  return self
end
function Module:float() return self:to("float32") end
function Module:double() return self:to("float64") end

-- -- State -------------------------------------------------------------------------------

-- name -> tensor (detached, sharing data): parameters and persistent
-- buffers; never a "module." prefix.
function Module:state_dict()
  local sd = {}
  for _, p in ipairs(named(self, "_params")) do sd[p[1]] = p[2]:detach() end
  for _, b in ipairs(named(self, "_buffers", true)) do sd[b[1]] = b[2]:detach() end
  return sd
end

-- Copies sd's tensors into the module.  strict (default true): any missing,
-- unexpected or mis-shaped key is an error listing all of them; otherwise
-- returns {missing_keys =, unexpected_keys =} and skips what does not fit.
function Module:load_state_dict(sd, opts)
  if type(sd) ~= "table" then raise("load_state_dict: expected a table of name -> tensor") end
  local strict = not (opts and opts.strict == false)
  local own = {}
  for _, p in ipairs(named(self, "_params")) do own[p[1]] = p[2] end
  for _, b in ipairs(named(self, "_buffers", true)) do own[b[1]] = b[2] end
  local missing, unexpected, misshaped = {}, {}, {}
  for name, t in pairs(own) do
    local v = sd[name]
    if v == nil then
      missing[#missing + 1] = name
    elseif not core.is_tensor(v) then
      misshaped[#misshaped + 1] = ("%s (a %s, not a tensor)"):format(name, core.describe(v))
    elseif v:numel() ~= t:numel() or #v:shape() ~= #t:shape() or core.fmt_shape(v:shape()) ~= core.fmt_shape(t:shape()) then
      misshaped[#misshaped + 1] = ("%s (checkpoint %s, model %s)"):format(name, core.fmt_shape(v:shape()), core.fmt_shape(t:shape()))
    end
  end
  for name in pairs(sd) do
    if own[name] == nil then unexpected[#unexpected + 1] = tostring(name) end
  end
  table.sort(missing); table.sort(unexpected); table.sort(misshaped)
  if #misshaped > 0 or (strict and (#missing > 0 or #unexpected > 0)) then
    local parts = {}
    if #missing > 0 then parts[#parts + 1] = "missing keys: " .. table.concat(missing, ", ") end
    if #unexpected > 0 then parts[#parts + 1] = "unexpected keys: " .. table.concat(unexpected, ", ") end
    if #misshaped > 0 then parts[#parts + 1] = "shape mismatch: " .. table.concat(misshaped, ", ") end
    raise("load_state_dict: " .. table.concat(parts, "; "))
  end
  autograd.no_grad(function()
    for name, t in pairs(own) do
      if sd[name] ~= nil then t:copy_(sd[name]) end
    end
  end)
  return { missing_keys = missing, unexpected_keys = unexpected }
end

function Module:num_parameters()
  local n = 0
  for _, p in ipairs(self:parameters()) do n = n + p:numel() end
  return n
end

-- -- Printing --------------------------------------------------------------------------

function Module:extra_repr() return "" end

function Module:repr(indent)
  local lines = {}
  for _, nc in ipairs(self:named_children()) do
    lines[#lines + 1] = indent .. "  (" .. nc[1] .. "): " .. nc[2]:repr(indent .. "  ")
  end
  local head = self.__name .. "(" .. self:extra_repr()
  if #lines == 0 then return head .. ")" end
  return head .. "\n" .. table.concat(lines, "\n") .. "\n" .. indent .. ")"
end

return M
