-- tests/helpers/fails.lua: checking error messages.
--   local message = require("helpers.fails").message
--   message(f, args...)                        -- the error f(args...) raises
--   local fails = require("helpers.fails").located("data_spec.lua")
--   fails(function() ... end, "needle", ...)  -- raises, at a line of that
--                                              -- file, a message holding each needle
local M = {}

-- err holds every needle given (plain text); returns err.
function M.has_all(err, ...)
  for i = 1, select("#", ...) do
    local needle = select(i, ...)
    assert(err:find(needle, 1, true), ("the message lacks %q: %s"):format(needle, err))
  end
  return err
end

-- The message of the error f(...) raises (failing if it raises none).
function M.message(f, ...)
  local ok, err = pcall(f, ...)
  assert(not ok, "expected an error, but the call succeeded")
  return tostring(err)
end

-- A fails(f, ...) for specs whose errors must point at their own lines.
function M.located(file)
  local pat = "^[^:]*" .. file:gsub("%p", "%%%0") .. ":%d+: "
  return function(f, ...)
    local ok, err = pcall(f)
    assert(not ok, "expected an error, but the call succeeded")
    err = tostring(err)
    assert(err:match(pat), "the error is not located in " .. file .. ": " .. err)
    return M.has_all(err, ...)
  end
end

return M
