-- ddp.data.json: a small JSON reader and writer (RFC 8259) for the .json
-- members of tar shards (ddp.data.webdataset): objects become tables,
-- arrays 1-based lists, null json.null (a sentinel, so a list keeps its
-- length), numbers Lua numbers, strings UTF-8 (\u escapes and surrogate
-- pairs decoded).  json.decode(s[, what]) raises "what: invalid JSON at
-- byte N: ..."; json.encode(v) writes objects with their keys sorted.
local core = require "ddp.core"
local raise, show = core.raise, core.show
local byte, sub, char, find, format = string.byte, string.sub, string.char, string.find, string.format
local concat, sort, floor = table.concat, table.sort, math.floor
local type, tonumber, pairs = type, tonumber, pairs

core.add_lib_file(debug.getinfo(1, "S").source)

local M = {}

M.null = setmetatable({}, { __tostring = function() return "json.null" end })

local function fail(st, pos, msg)
  raise(("%s: invalid JSON at byte %d: %s"):format(st.what, pos, msg))
end

local function skip(s, pos)
  local _, e = find(s, "^[ \t\r\n]*", pos)
  return e + 1
end

local function utf8(cp)
  if cp < 0x80 then return char(cp) end
  if cp < 0x800 then return char(0xC0 + floor(cp / 64), 0x80 + cp % 64) end
  if cp < 0x10000 then return char(0xE0 + floor(cp / 4096), 0x80 + floor(cp / 64) % 64, 0x80 + cp % 64) end
  return char(0xF0 + floor(cp / 262144), 0x80 + floor(cp / 4096) % 64, 0x80 + floor(cp / 64) % 64, 0x80 + cp % 64)
end

local ESC = { ['"'] = '"', ["\\"] = "\\", ["/"] = "/", b = "\b", f = "\f", n = "\n", r = "\r", t = "\t" }

local function str(st, s, pos)  -- pos at the opening quote
  local out, i = {}, pos + 1
  while true do
    local a = find(s, '["\\%z\1-\31]', i)
    if not a then fail(st, pos, "unterminated string") end
    out[#out + 1] = sub(s, i, a - 1)
    local c = sub(s, a, a)
    if c == '"' then return concat(out), a + 1 end
    if c ~= "\\" then fail(st, a, "control character in a string") end
    local e = sub(s, a + 1, a + 1)
    if ESC[e] then
      out[#out + 1] = ESC[e]
      i = a + 2
    elseif e == "u" then
      local h = sub(s, a + 2, a + 5)
      if not find(h, "^%x%x%x%x$") then fail(st, a, "bad \\u escape") end
      local cp = tonumber(h, 16)
      i = a + 6
      if cp >= 0xD800 and cp < 0xDC00 then  -- a surrogate pair
        local lo = find(s, "^\\u[dD][c-fC-F]%x%x", i) and tonumber(sub(s, i + 2, i + 5), 16)
        if not lo then fail(st, a, "lone surrogate in a \\u escape") end
        cp = 0x10000 + (cp - 0xD800) * 1024 + (lo - 0xDC00)
        i = i + 6
      elseif cp >= 0xDC00 and cp < 0xE000 then
        fail(st, a, "lone surrogate in a \\u escape")
      end
      out[#out + 1] = utf8(cp)
    else
      fail(st, a, "bad escape \\" .. e)
    end
  end
end

-- -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][-+]?[0-9]+)?, as RFC 8259 has it.
local function number(st, s, pos)
  local i = pos
  local function bad()
    local c = sub(s, pos, pos)
    fail(st, pos, c == "" and "unexpected end" or ("unexpected %s"):format(show(sub(s, pos, pos + 9))))
  end
  if sub(s, i, i) == "-" then i = i + 1 end
  if sub(s, i, i) == "0" then
    i = i + 1
  else
    local _, e = find(s, "^[1-9]%d*", i)
    if not e then bad() end
    i = e + 1
  end
  if sub(s, i, i) == "." then
    local _, e = find(s, "^%d+", i + 1)
    if not e then bad() end
    i = e + 1
  end
  if find(s, "^[eE]", i) then
    local _, e = find(s, "^[-+]?%d+", i + 1)
    if not e then bad() end
    i = e + 1
  end
  return tonumber(sub(s, pos, i - 1)), i
end

local value

local function array(st, s, pos)
  local out, n = {}, 0
  pos = skip(s, pos + 1)
  if sub(s, pos, pos) == "]" then return out, pos + 1 end
  while true do
    local v
    v, pos = value(st, s, pos)
    n = n + 1
    out[n] = v
    pos = skip(s, pos)
    local c = sub(s, pos, pos)
    if c == "]" then return out, pos + 1 end
    if c ~= "," then fail(st, pos, "expected ',' or ']' in an array") end
    pos = skip(s, pos + 1)
  end
end

local function object(st, s, pos)
  local out = {}
  pos = skip(s, pos + 1)
  if sub(s, pos, pos) == "}" then return out, pos + 1 end
  while true do
    if sub(s, pos, pos) ~= '"' then fail(st, pos, "expected a string key in an object") end
    local k
    k, pos = str(st, s, pos)
    pos = skip(s, pos)
    if sub(s, pos, pos) ~= ":" then fail(st, pos, "expected ':' after an object key") end
    local v
    v, pos = value(st, s, skip(s, pos + 1))
    out[k] = v
    pos = skip(s, pos)
    local c = sub(s, pos, pos)
    if c == "}" then return out, pos + 1 end
    if c ~= "," then fail(st, pos, "expected ',' or '}' in an object") end
    pos = skip(s, pos + 1)
  end
end

value = function(st, s, pos)
  st.depth = st.depth + 1
  if st.depth > 512 then fail(st, pos, "nested more than 512 deep") end
  local c = sub(s, pos, pos)
  local v
  if c == "{" then
    v, pos = object(st, s, pos)
  elseif c == "[" then
    v, pos = array(st, s, pos)
  elseif c == '"' then
    v, pos = str(st, s, pos)
  elseif find(s, "^true", pos) then
    v, pos = true, pos + 4
  elseif find(s, "^false", pos) then
    v, pos = false, pos + 5
  elseif find(s, "^null", pos) then
    v, pos = M.null, pos + 4
  else
    v, pos = number(st, s, pos)
  end
  st.depth = st.depth - 1
  return v, pos
end

-- json.decode(s[, what]): the value of the JSON text s; what names it in
-- errors (default "json").
function M.decode(s, what)
  local st = { what = what or "json", depth = 0 }
  if type(s) ~= "string" then raise(("%s: expected a JSON string, got %s"):format(st.what, show(s))) end
  local v, pos = value(st, s, skip(s, 1))
  pos = skip(s, pos)
  if pos <= #s then fail(st, pos, "trailing characters after the value") end
  return v
end

local function enc_str(s)
  return '"' .. s:gsub('[%c"\\]', function(c)
    local e = ({ ['"'] = '\\"', ["\\"] = "\\\\", ["\n"] = "\\n", ["\r"] = "\\r", ["\t"] = "\\t",
                 ["\b"] = "\\b", ["\f"] = "\\f" })[c]
    return e or format("\\u%04x", byte(c))
  end) .. '"'
end

local function enc(v, out, seen, path)
  local t = type(v)
  if v == nil or v == M.null then
    out[#out + 1] = "null"
  elseif t == "boolean" then
    out[#out + 1] = v and "true" or "false"
  elseif t == "number" then
    if v ~= v or v == math.huge or v == -math.huge then
      raise(("json.encode: %s is %s, which JSON cannot hold"):format(path, tostring(v)))
    end
    if v == floor(v) and v > -2^53 and v < 2^53 then
      out[#out + 1] = format("%d", v)
    else  -- the shortest of 15 to 17 digits that reads back as v: 1e-05, not 1.0000000000000001e-05
      local s = format("%.15g", v)
      if tonumber(s) ~= v then s = format("%.16g", v) end
      if tonumber(s) ~= v then s = format("%.17g", v) end
      out[#out + 1] = s
    end
  elseif t == "string" then
    out[#out + 1] = enc_str(v)
  elseif t == "table" then
    if seen[v] then raise(("json.encode: %s holds itself (a cycle)"):format(path)) end
    seen[v] = true
    local n, keys = #v, {}
    for k in pairs(v) do keys[#keys + 1] = k end
    if n > 0 and #keys == n then  -- a list
      out[#out + 1] = "["
      for i = 1, n do
        if i > 1 then out[#out + 1] = "," end
        enc(v[i], out, seen, path .. "[" .. i .. "]")
      end
      out[#out + 1] = "]"
    else
      for _, k in ipairs(keys) do
        if type(k) ~= "string" then
          raise(("json.encode: %s has the key %s; JSON object keys are strings"):format(path, show(k)))
        end
      end
      sort(keys)
      out[#out + 1] = "{"
      for i, k in ipairs(keys) do
        if i > 1 then out[#out + 1] = "," end
        out[#out + 1] = enc_str(k) .. ":"
        enc(v[k], out, seen, path .. "." .. k)
      end
      out[#out + 1] = "}"
    end
    seen[v] = nil
  else
    raise(("json.encode: %s is %s, which JSON cannot hold"):format(path, show(v)))
  end
end

-- json.encode(v): the JSON text of v (tables with keys 1..n are arrays,
-- other tables objects with string keys, written sorted).
function M.encode(v)
  local out = {}
  enc(v, out, {}, "the value")
  return concat(out)
end

return M
