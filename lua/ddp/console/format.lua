-- ddp.console.format: the values a typed chunk returned, as the prompt
-- shows them -- tables nested and depth-limited, tensors as PyTorch prints
-- them, modules as PyTorch's repr.
local core = require "ddp.core"
local nn = require "ddp.nn"
local keywords = require("ddp.console.chunk").keywords
local type, pairs, tostring, select, getmetatable, rawget = type, pairs, tostring, select, getmetatable, rawget

core.add_lib_file(debug.getinfo(1, "S").source)

local M = {}

local MAX_DEPTH, MAX_ITEMS, WIDTH = 3, 40, 80

local function is_ident(k) return type(k) == "string" and k:match("^[%a_][%w_]*$") and not keywords[k] end

local function has_tostring(v)
  local mt = getmetatable(v)
  return type(mt) == "table" and rawget(mt, "__tostring") ~= nil
end

local format_value

local function format_table(t, depth, seen, indent)
  if seen[t] then return "<cycle>" end
  if depth > MAX_DEPTH then return "{...}" end
  seen[t] = true
  local n, parts = #t, {}
  for i = 1, math.min(n, MAX_ITEMS) do parts[#parts + 1] = format_value(t[i], depth + 1, seen, indent .. "  ") end
  local keys = {}
  for k in pairs(t) do
    if not (type(k) == "number" and k >= 1 and k <= n and k % 1 == 0) then keys[#keys + 1] = k end
  end
  table.sort(keys, function(a, b)
    local ta, tb = type(a), type(b)
    if ta ~= tb then return ta < tb end
    if ta == "number" or ta == "string" then return a < b end
    return tostring(a) < tostring(b)
  end)
  for i = 1, #keys do
    if #parts >= MAX_ITEMS then break end
    local k = keys[i]
    local key = is_ident(k) and k or ("[" .. format_value(k, MAX_DEPTH, seen, "") .. "]")
    parts[#parts + 1] = key .. " = " .. format_value(t[k], depth + 1, seen, indent .. "  ")
  end
  local more = (n + #keys) - #parts
  if more > 0 then parts[#parts + 1] = ("... (%d more)"):format(more) end
  seen[t] = nil
  if #parts == 0 then return "{}" end
  local flat = "{" .. table.concat(parts, ", ") .. "}"
  if #flat + #indent <= WIDTH and not flat:find("\n", 1, true) then return flat end
  return "{\n" .. indent .. "  " .. table.concat(parts, ",\n" .. indent .. "  ") .. "\n" .. indent .. "}"
end

function format_value(v, depth, seen, indent)
  local tv = type(v)
  if tv == "string" then return depth == 0 and v or ("%q"):format(v):gsub("\\\n", "\\n") end
  if core.is_tensor(v) or nn.is_module(v) then
    local str = tostring(v)
    return depth == 0 and str or str:gsub("\n", "\n" .. indent)
  end
  if tv == "table" and not has_tostring(v) then return format_table(v, depth, seen or {}, indent) end
  return tostring(v)
end

-- The values a chunk returned, as the prompt shows them: tab separated,
-- strings as they are at the top level.
function M.format(...)
  local out = {}
  for i = 1, select("#", ...) do
    local ok, str = pcall(format_value, (select(i, ...)), 0, {}, "")
    out[i] = ok and str or ("<cannot print: " .. tostring(str) .. ">")
  end
  return table.concat(out, "\t")
end

-- Whether k reads as a name (not a keyword): table keys printed bare,
-- completions offered (ddp.console.complete).
M._is_ident = is_ident

return M
