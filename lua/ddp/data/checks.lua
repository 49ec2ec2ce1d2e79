-- ddp.data.checks: what the data classes share -- their class idiom
-- (callable, measured by #), the length of a dataset or sampler, a field
-- read without raising, and the checks of their options, seeds, epochs
-- and state dicts.
local core = require "ddp.core"
local factory = require "ddp.tensor.factory"
local raise, show = core.raise, core.show
local is_tensor, is_integer = core.is_tensor, core.is_integer
local type, pcall = type, pcall

core.add_lib_file(debug.getinfo(1, "S").source)

local M = {}

-- The classes here are callable (data.TensorDataset(x, y) runs its init).
-- LuaJIT ignores __len on tables, so their objects, which `#` must
-- measure, are core.class's userdata proxies; getmetatable(obj) names the
-- class.
function M.class(name)
  return core.class(name, nil, { proxy = true })
end

-- Reads obj[k] without raising on values that cannot be indexed.
local function field(obj, k)
  local t = type(obj)
  if t ~= "table" and t ~= "userdata" and t ~= "cdata" then return nil end
  local ok, v = pcall(function() return obj[k] end)
  if ok then return v end
  return nil
end

-- The length of a dataset or sampler: obj:len(), or its __len metamethod
-- (called directly, so it works on tables too).
local function length(obj, op, what)
  local n
  local len = field(obj, "len")
  if type(len) == "function" then
    n = len(obj)
  elseif type(obj) == "table" then
    local mt = getmetatable(obj)
    if type(mt) == "table" and mt.__len then n = mt.__len(obj) end
  elseif type(obj) == "userdata" or type(obj) == "cdata" then
    local ok, v = pcall(function() return #obj end)
    if ok then n = v end
  end
  if n == nil then
    raise(("%s: the %s has no len() method and no __len metamethod"):format(op, what))
  end
  if not is_integer(n) or n < 0 then
    raise(("%s: the %s's length must be a non-negative integer, got %s"):format(op, what, show(n)))
  end
  return n
end

function M.bool_opt(v, op, name, dflt)
  if v == nil then return dflt end
  if type(v) ~= "boolean" then raise(("%s: %s must be true or false, got %s"):format(op, name, show(v))) end
  return v
end

-- Seeds and epochs reach C as uint64: keep them exact Lua integers.
function M.seed_arg(v, op, what)
  if not is_integer(v) or v < 0 or v >= 2^53 then
    raise(("%s: %s must be an integer from 0 to 2^53 - 1, got %s"):format(op, what, show(v)))
  end
  return v
end

-- A state dict given to load_state_dict: a table whose listed fields are
-- exact non-negative integers (a checkpoint's numbers, checked before use;
-- 2^63 would print as a negative number and count nothing right).
function M.state_arg(sd, op, ints)
  if type(sd) ~= "table" or is_tensor(sd) then
    raise(("%s: expected a table from state_dict(), got %s"):format(op, show(sd)))
  end
  for _, k in ipairs(ints) do
    local v = sd[k]
    if not is_integer(v) or v < 0 or v >= 2^53 then
      raise(("%s: the state's %s must be an integer from 0 to 2^53 - 1, got %s"):format(op, k, show(v)))
    end
  end
  return sd
end

-- "1 batch", "2 batches".
function M.count(n, one, many)
  return ("%.0f %s"):format(n, n == 1 and one or many)
end

-- A seed from the global generator: so ddp.manual_seed(n) before building
-- a loader fixes its shuffles too.
function M.draw_seed()
  return factory.randint(0, 2^53, { 1 }):get(0)
end

M.field, M.length = field, length

-- Epochs reach C as a counter of epoch * 2^32 blocks: below 2^21 it stays
-- an exact Lua number.
local MAX_EPOCH = 2^21
M.MAX_EPOCH = MAX_EPOCH

function M.epoch_arg(e, op)
  if not is_integer(e) or e < 0 or e >= MAX_EPOCH then
    raise(("%s: epoch must be an integer from 0 to %d, got %s"):format(op, MAX_EPOCH - 1, show(e)))
  end
  return e
end

return M
