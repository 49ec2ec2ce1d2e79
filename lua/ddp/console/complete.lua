-- ddp.console.complete: completion of the word before the cursor for the
-- prompt's Tab key -- names, fields of tables and modules, and tensor
-- methods after `t:`.
local core = require "ddp.core"
local tensor = require "ddp.tensor"
local keywords = require("ddp.console.chunk").keywords
local is_ident = require("ddp.console.format")._is_ident
local type, pairs, ipairs, pcall, getmetatable, rawget = type, pairs, ipairs, pcall, getmetatable, rawget

core.add_lib_file(debug.getinfo(1, "S").source)

local M = {}

local function add_keys(v, out, seen_tables, methods_only)
  local depth = 0
  while type(v) == "table" and depth < 8 and not seen_tables[v] do
    seen_tables[v] = true
    local fields = rawget(v, "_fields")  -- a module's registered fields
    if type(fields) == "table" then
      for k, x in pairs(fields) do
        if type(k) == "string" and (not methods_only or type(x) == "function") then out[k] = true end
      end
    end
    for k, x in pairs(v) do
      if type(k) == "string" and (not methods_only or type(x) == "function") then out[k] = true end
    end
    local mt = getmetatable(v)
    v = type(mt) == "table" and rawget(mt, "__index") or nil
    depth = depth + 1
  end
end

-- Candidates for the word ending text ("ddp.ze", "x:ad", "pri"): full words
-- in sorted order.  Names starting with "_" only when the word does.
function M.complete(s, text)
  local word = text:match("[%w_%.:]*$") or ""
  local path, sep, partial = word:match("^(.-)([%.:])([%w_]*)$")
  local out = {}
  if not path then
    partial = word
    for k in pairs(keywords) do out[k] = true end
    add_keys(_G, out, {})
    for k in pairs(s.vars) do out[k] = true end
    if s.frame then for k in pairs(s.frame.has) do out[k] = true end end
  else
    if path == "" or path:find(":", 1, true) then return {} end
    local v = s.env
    for name in path:gmatch("[^%.]+") do
      local ok, x = pcall(function() return v[name] end)
      if not ok or x == nil then return {} end
      v = x
    end
    if core.is_tensor(v) then
      for k, f in pairs(tensor.methods) do
        if sep == ":" or type(f) == "function" then out[k] = true end
      end
      if sep == "." then
        for _, k in ipairs { "grad", "requires_grad", "is_leaf", "grad_fn", "data", "shape" } do out[k] = true end
      end
    else
      add_keys(v, out, {}, sep == ":")
    end
  end
  local list = {}
  for k in pairs(out) do
    if k:sub(1, #partial) == partial and is_ident(k) or (keywords[k] and not path and k:sub(1, #partial) == partial) then
      if k:sub(1, 1) ~= "_" or partial:sub(1, 1) == "_" then
        list[#list + 1] = (path and (path .. sep) or "") .. k
      end
    end
  end
  table.sort(list)
  return list
end

-- The candidates one per line, for the launcher's Tab key (link.c).
function M.complete_text(s, text)
  return true, table.concat(M.complete(s, text), "\n")
end

return M
