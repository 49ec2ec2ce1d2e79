-- ddp.testing.assertions: the tensor assertions for luassert (busted's
-- assert) -- assert.tensor_equal, assert.tensor_close, and assert.are.same
-- comparing tensors by value -- over ddp.testing.compare.
local core = require "ddp.core"
local compare = require "ddp.testing.compare"
local serialize = require "ddp.serialize"
local options, check, has_tensor, deep_same = compare._options, compare._check, compare._has_tensor,
  compare._deep_same
local type, tostring, rawset = type, tostring, rawset

core.add_lib_file(debug.getinfo(1, "S").source)

local M = {}

local function user_message(arguments, i)
  local m = arguments[i]
  if m ~= nil then return tostring(m) end
end

-- The callback of tensor_equal / tensor_close: (expected, actual[, opts][, message]).
local function assertion(what)
  return function(state, arguments, level)
    level = (level or 1) + 1
    if (arguments.n or #arguments) < 2 then
      error(("tensor_%s: expected two arguments (expected, actual), got %d"):format(what, arguments.n or #arguments), level)
    end
    local e, a, opts, msg = arguments[1], arguments[2], arguments[3], nil
    if type(opts) == "string" then opts, msg = nil, opts else msg = user_message(arguments, 4) end
    local o, err = options(opts, what)
    if not o then error(err, level) end
    local why = check(e, a, o, what)
    -- shown as luassert shows same(): the value passed in, then the expected one
    arguments[1], arguments[2], arguments[3], arguments[4] = a, e, nil, nil
    arguments.n = 2
    if why or msg then rawset(state, "failure_message", (msg and msg .. "\n" or "") .. (why or "")) end
    return why == nil
  end
end

-- same(): tensors and tables holding them by value; the rest as luassert does.
local function make_same(orig)
  return function(state, arguments, level)
    local e, a = arguments[1], arguments[2]
    if (arguments.n or #arguments) < 2 or not (has_tensor(e) or has_tensor(a)) then
      return orig(state, arguments, level)
    end
    local keys = {}
    local ok, why = deep_same(e, a, keys, {}, true)
    local msg = user_message(arguments, 3)
    arguments[1], arguments[2] = a, e
    if type(e) == "table" and type(a) == "table" and not ok then
      local crumbs = {}  -- luassert's order: innermost key first
      for i = #keys, 1, -1 do crumbs[#crumbs + 1] = keys[i] end
      arguments.fmtargs = { { crumbs = crumbs }, { crumbs = crumbs } }
    end
    if not ok then
      if #keys > 0 then why = "at " .. serialize.path("", keys) .. ": " .. why end
      rawset(state, "failure_message", (msg and msg .. "\n" or "") .. why)
    elseif msg then
      rawset(state, "failure_message", msg)
    end
    return ok
  end
end

-- register([luassert]): adds tensor_equal and tensor_close to luassert and
-- makes same() compare tensors by value.  Requiring this module does it
-- when luassert is loaded (under busted it is).  Idempotent: busted loads
-- the module afresh for each spec file.
function M.register(luassert)
  luassert = luassert or require "luassert"
  local say = require "say"
  local namespaces = require "luassert.namespaces"
  for _, what in ipairs { "equal", "close" } do
    say:set("assertion.tensor_" .. what .. ".positive",
            "Expected tensors to be " .. what .. ".\nPassed in:\n%s\nExpected:\n%s")
    say:set("assertion.tensor_" .. what .. ".negative",
            "Expected tensors not to be " .. what .. ".\nPassed in:\n%s\nDid not expect:\n%s")
    luassert:register("assertion", "tensor_" .. what, assertion(what),
                      "assertion.tensor_" .. what .. ".positive", "assertion.tensor_" .. what .. ".negative")
  end
  local same = namespaces.assertion.same
  -- the original callback, kept on luassert's own entry across reloads
  local orig = same.ddp_original or same.callback
  luassert:register("assertion", "same", make_same(orig), same.positive_message, same.negative_message)
  namespaces.assertion.same.ddp_original = orig
  return luassert
end

return M
