-- ddp.serialize: Lua values as text and back, for what leaves the process:
-- the objects of ddp.broadcast_object / all_gather_object (ddp.dist) and
-- the state of a checkpoint (ddp.checkpoint, in the file's metadata).
--
--   value := nil (only the whole value) | number | string | true | false
--          | @string (a tensor, where the caller allows them)
--          | { key=value, ... }
--   key   := number | string | true | false
--
-- Numbers are integers ("%.0f" below 2^53) or %.17g (exact), inf, -inf,
-- nan; strings are quoted, with \\, \" and \xHH for every byte outside
-- printable ASCII, so any bytes pass.  Keys are written sorted (numbers,
-- then strings, then false, true), so the same value gives the same text.
-- This is the grammar checkpoints have always been written in: files saved
-- before this module existed read back unchanged.
--
-- Reading is a parser of that grammar only: nothing received or read from
-- a file is ever run with load().  Tables nest at most MAX_DEPTH deep;
-- cycles are refused (a table reached twice without a cycle is written
-- twice and comes back as two copies).  Errors name the path of the value
-- at fault ("value.cfg[2]").
local core = require "ddp.core"
local raise, describe, is_tensor = core.raise, core.describe, core.is_tensor
local type, pairs, tostring, tonumber = type, pairs, tostring, tonumber
local floor, huge, concat = math.floor, math.huge, table.concat

core.add_lib_file(debug.getinfo(1, "S").source)

local M = {}

local MAX_DEPTH = 200  -- tables inside tables, the outermost counting 1
M.MAX_DEPTH = MAX_DEPTH

-- -- Writing -------------------------------------------------------------------

-- A number as the grammar writes it (also the checkpoint's tensor names).
local function num(x)
  if x ~= x then return "nan" end
  if x == huge then return "inf" elseif x == -huge then return "-inf" end
  if x == floor(x) and x > -2^53 and x < 2^53 then return ("%.0f"):format(x) end
  return ("%.17g"):format(x)
end
M.number = num

local function str(s)
  return '"' .. s:gsub('[%c"\\\128-\255]', function(c) return ("\\x%02x"):format(c:byte()) end) .. '"'
end

local key_order = { number = 1, string = 2, boolean = 3 }
local function key_less(a, b)
  local ta, tb = type(a), type(b)
  if ta ~= tb then return key_order[ta] < key_order[tb] end
  if ta == "boolean" then return not a and b end
  return a < b
end

-- keys (a list) as a path for messages: root.name[2]["a b"]; root may be
-- "" (the path then starts at the first key).
function M.path(root, keys)
  local out = { root }
  for i = 1, #keys do
    local k = keys[i]
    if type(k) == "string" and k:match("^[%a_][%w_]*$") then
      out[#out + 1] = (i == 1 and root == "") and k or ("." .. k)
    elseif type(k) == "string" then
      out[#out + 1] = ("[%q]"):format(k)
    else
      out[#out + 1] = "[" .. (type(k) == "number" and num(k) or tostring(k)) .. "]"
    end
  end
  local s = concat(out)
  return s ~= "" and s or "the value"
end

-- encode(v[, opts]) -> text.  opts:
--   op      the name errors begin with ("ddp.broadcast_object")
--   root    the value's name in error paths (default "value")
--   verb    what is done with it, for errors ("sent", "saved")
--   tensor  function(t, keys) -> name: tensors are written as @"name"
--           (keys: the path to t); without it a tensor is an error
--   plain   true: a table with a metatable is an error (it would come
--           back without its methods)
function M.encode(v, opts)
  opts = opts or {}
  local op, root, verb = opts.op or "serialize", opts.root or "value", opts.verb or "serialized"
  local tensor, plain = opts.tensor, opts.plain
  local out, keys, active = {}, {}, {}
  local function fail(what, ...)
    raise(("%s: %s " .. what):format(op, M.path(root, keys), ...))
  end
  local put
  local function put_table(t)
    if active[t] then fail("contains itself (a cycle)") end
    if plain and getmetatable(t) ~= nil then
      fail("is a table with a metatable; only plain tables can be %s", verb)
    end
    local depth = #keys + 1
    if depth > MAX_DEPTH then fail("is nested too deep (more than %d levels of tables)", MAX_DEPTH) end
    active[t] = true
    local ks = {}
    for k in pairs(t) do
      if not key_order[type(k)] then
        fail("has a %s key; keys must be numbers, strings or booleans", describe(k))
      end
      ks[#ks + 1] = k
    end
    table.sort(ks, key_less)
    out[#out + 1] = "{"
    for i, k in ipairs(ks) do
      if i > 1 then out[#out + 1] = "," end
      put(k)
      out[#out + 1] = "="
      keys[depth] = k
      put(t[k])
      keys[depth] = nil
    end
    out[#out + 1] = "}"
    active[t] = nil
  end
  function put(x)
    local tx = type(x)
    if tx == "number" then out[#out + 1] = num(x)
    elseif tx == "string" then out[#out + 1] = str(x)
    elseif tx == "boolean" then out[#out + 1] = tostring(x)
    elseif tensor and is_tensor(x) then out[#out + 1] = "@" .. str(tensor(x, keys))
    elseif tx == "table" then put_table(x)
    else
      fail("is a %s; only numbers, strings, booleans%s can be %s", describe(x),
           tensor and ", tables and tensors" or plain and " and plain tables" or " and tables", verb)
    end
  end
  if v == nil then return "nil" end
  put(v)
  return concat(out)
end

-- -- Reading -------------------------------------------------------------------

-- decode(text[, opts]) -> value, or nil and a message ("at byte 12:
-- unterminated string").  opts.tensors: name -> tensor, for @"name"
-- references (without it, a reference is an error).
function M.decode(text, opts)
  if type(text) ~= "string" then return nil, "expected a string, got " .. describe(text) end
  local tensors = opts and opts.tensors
  local pos, depth = 1, 0
  local function fail(what) error({ decode_error = ("at byte %d: %s"):format(pos, what) }, 0) end
  local function ws() pos = text:find("[^ \t\r\n]", pos) or #text + 1 end
  local function quoted()
    local parts, i = {}, pos + 1
    while true do
      local j = text:find('["\\]', i)
      if not j then fail("unterminated string") end
      parts[#parts + 1] = text:sub(i, j - 1)
      if text:byte(j) == 34 then pos = j + 1; break end
      local e = text:sub(j + 1, j + 1)
      if e == '"' or e == "\\" then
        parts[#parts + 1], i = e, j + 2
      elseif e == "x" and text:find("^%x%x", j + 2) then
        parts[#parts + 1], i = string.char(tonumber(text:sub(j + 2, j + 3), 16)), j + 4
      else
        pos = j
        fail("invalid escape in a string")
      end
    end
    return concat(parts)
  end
  local function scalar()
    ws()
    local c = text:sub(pos, pos)
    if c == '"' then return quoted() end
    local word = text:match("^[%w%.%+%-]+", pos)
    if not word then fail(c == "" and "unexpected end" or ("unexpected %q"):format(c)) end
    local v
    if word == "true" then v = true
    elseif word == "false" then v = false
    elseif word == "inf" then v = huge
    elseif word == "-inf" then v = -huge
    elseif word == "nan" then v = 0 / 0
    elseif word:find("^%-?%d[%d%.eE%+%-]*$") then v = tonumber(word) end
    if v == nil then fail(("unexpected %q"):format(word:sub(1, 20))) end
    pos = pos + #word
    return v
  end
  local function value()
    ws()
    local c = text:sub(pos, pos)
    if c == "@" then
      pos = pos + 1
      if text:sub(pos, pos) ~= '"' then fail("expected a tensor name after @") end
      local name = quoted()
      if not tensors then fail(("a tensor reference @\"%s\", which is not allowed here"):format(name)) end
      local t = tensors[name]
      if t == nil then fail(("refers to tensor \"%s\", which the file does not hold"):format(name)) end
      return t
    elseif c == "{" then
      depth = depth + 1
      if depth > MAX_DEPTH then fail("nested too deep") end
      pos = pos + 1
      local t = {}
      ws()
      if text:sub(pos, pos) == "}" then pos = pos + 1; depth = depth - 1; return t end
      while true do
        local k = scalar()
        if k ~= k then fail("NaN as a key") end
        if t[k] ~= nil then fail("key " .. tostring(k) .. " given twice") end
        ws()
        if text:sub(pos, pos) ~= "=" then fail("expected '='") end
        pos = pos + 1
        t[k] = value()
        ws()
        c = text:sub(pos, pos)
        pos = pos + 1
        if c == "}" then break end
        if c ~= "," then pos = pos - 1; fail("expected ',' or '}'") end
      end
      depth = depth - 1
      return t
    end
    return scalar()
  end
  -- nil is a whole value only (a table never holds one)
  if text:find("^[ \t\r\n]*nil[ \t\r\n]*$") then return nil end
  local ok, v = pcall(function()
    local r = value()
    ws()
    if pos <= #text then fail("unexpected data after the end") end
    return r
  end)
  if ok then return v end
  if type(v) == "table" and v.decode_error then return nil, v.decode_error end
  error(v, 0)
end

return M
