-- ddp.checkpoint: tensors to and from safetensors files (ddp.save,
-- ddp.load) and whole training states on top of them (ddp.save_checkpoint,
-- ddp.load_checkpoint).
--
-- A checkpoint is a plain safetensors file: every tensor of every state_dict
-- under a prefixed name ("model.fc.weight", "optimizer.state.1.exp_avg"),
-- and in the metadata the rest of the structure as text, in which tensors
-- are references to those names:
--
--   value := number | string | true | false | @string | { key=value, ... }
--   key   := number | string | true | false
--
-- Numbers are integers or %.17g (exact), inf, -inf, nan; strings are quoted
-- with \\, \" and \xHH for every byte outside printable ASCII; @"name" is the
-- tensor of that name.  Reading it back is a parser of that grammar only:
-- nothing from a file is ever run with load().
local core = require "ddp.core"
local C, ffi = core.C, core.ffi
local raise, check = core.raise, core.check
local type, pairs, tostring = type, pairs, tostring
local floor, huge = math.floor, math.huge

core.add_lib_file(debug.getinfo(1, "S").source)

local M = {}

local FORMAT_KEY, STATE_KEY, FORMAT = "ddplua.format", "ddplua.state", "checkpoint 1"

-- -- save / load ------------------------------------------------------------

-- ddp.save(tensors, path[, metadata]): tensors maps names to tensors,
-- metadata maps strings to strings.
function M.save(tensors, path, metadata)
  if type(tensors) ~= "table" or core.is_tensor(tensors) then
    raise("save: expected a table mapping names to tensors, got " .. core.describe(tensors))
  end
  if type(path) ~= "string" then raise("save: path must be a string, got " .. core.show(path)) end
  if metadata ~= nil and (type(metadata) ~= "table" or core.is_tensor(metadata)) then
    raise("save: metadata must be a table of strings, got " .. core.describe(metadata))
  end
  local names, list = {}, {}
  for k, v in pairs(tensors) do
    if type(k) ~= "string" then
      raise(("save: key %s is a %s; tensor names must be strings"):format(core.show(k), type(k)))
    end
    if not core.is_tensor(v) then
      raise(("save: value of \"%s\" is a %s, expected a tensor"):format(k, core.describe(v)))
    end
    -- the file holds host bytes: CUDA tensors are copied to the CPU first
    -- (they load as CPU tensors; load_state_dict copies them to the device)
    if v:device() ~= "cpu" then v = v:cpu() end
    names[#names + 1], list[#list + 1] = k, v
  end
  local keys, values = {}, {}
  for k, v in pairs(metadata or {}) do
    if type(k) ~= "string" or type(v) ~= "string" then
      raise(("save: metadata must map strings to strings, got %s = %s")
            :format(core.show(k), core.show(v)))
    end
    keys[#keys + 1], values[#values + 1] = k, v
  end
  local n, nm = #names, #keys
  -- the strings stay referenced by the tables above during the call
  local cn, ct = ffi.new("const char *[?]", n + 1), ffi.new("dl_tensor *[?]", n + 1)
  local ck, cv = ffi.new("const char *[?]", nm + 1), ffi.new("const char *[?]", nm + 1)
  for i = 1, n do cn[i - 1], ct[i - 1] = names[i], list[i] end
  for i = 1, nm do ck[i - 1], cv[i - 1] = keys[i], values[i] end
  check(C.dl_st_save(path, cn, ct, n, ck, cv, nm))
  local _ = { names, list, keys, values }
end

-- ddp.load(path[, {device=}]) -> {name = tensor}, {key = value}.  Tensors
-- view the file's pages (mapped copy-on-write): loading is instant and
-- changing a tensor never changes the file.
function M.load(path, opts)
  if type(path) ~= "string" then raise("load: path must be a string, got " .. core.show(path)) end
  if opts ~= nil then
    if type(opts) ~= "table" or core.is_tensor(opts) then
      raise("load: options must be a table such as {device = \"cpu\"}, got " .. core.describe(opts))
    end
    for k in pairs(opts) do
      if k ~= "device" then raise(("load: unknown option %s (expected device)"):format(core.show(k))) end
    end
  end
  -- every rank reads into its own memory: the CPU unless {device=} says
  -- (never all of them onto GPU 0)
  local dev = core.device_arg(opts and opts.device, "load")
  local f = C.dl_st_open(path)
  if f == nil then core.raise_c() end
  f = ffi.gc(f, C.dl_st_close)
  local tensors, meta = {}, {}
  for i = 0, C.dl_st_count(f) - 1 do
    local t = core.new(C.dl_st_tensor, f, i)
    if dev >= 0 then t = core.new(C.dl_to_device, t, dev) end
    tensors[ffi.string(C.dl_st_name(f, i))] = t
  end
  for i = 0, C.dl_st_meta_count(f) - 1 do
    meta[ffi.string(C.dl_st_meta_key(f, i))] = ffi.string(C.dl_st_meta_value(f, i))
  end
  C.dl_st_close(ffi.gc(f, nil))
  return tensors, meta
end

-- -- The state as text --------------------------------------------------------

local MAX_DEPTH = 100

local function num(x)
  if x ~= x then return "nan" end
  if x == huge then return "inf" elseif x == -huge then return "-inf" end
  if x == floor(x) and x > -2^53 and x < 2^53 then return ("%.0f"):format(x) end
  return ("%.17g"):format(x)
end

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

local function show_path(path)
  return table.concat(path, ".")
end

-- Appends v to out; tensor(t, path) names a tensor.  Errors name the path.
local function encode(v, path, out, tensor, active)
  local tv = type(v)
  if tv == "number" then out[#out + 1] = num(v)
  elseif tv == "string" then out[#out + 1] = str(v)
  elseif tv == "boolean" then out[#out + 1] = tostring(v)
  elseif core.is_tensor(v) then out[#out + 1] = "@" .. str(tensor(v, path))
  elseif tv == "table" then
    if active[v] then raise(("save_checkpoint: %s contains itself (a cycle)"):format(show_path(path))) end
    if #path >= MAX_DEPTH then raise(("save_checkpoint: %s is nested too deep"):format(show_path(path))) end
    active[v] = true
    local keys = {}
    for k in pairs(v) do
      if not key_order[type(k)] then
        raise(("save_checkpoint: %s has a %s key; keys must be numbers, strings or booleans")
              :format(show_path(path), core.describe(k)))
      end
      keys[#keys + 1] = k
    end
    table.sort(keys, key_less)
    out[#out + 1] = "{"
    for i, k in ipairs(keys) do
      if i > 1 then out[#out + 1] = "," end
      encode(k, path, out, tensor, active)
      out[#out + 1] = "="
      path[#path + 1] = type(k) == "number" and num(k) or tostring(k)
      encode(v[k], path, out, tensor, active)
      path[#path] = nil
    end
    out[#out + 1] = "}"
    active[v] = nil
  else
    raise(("save_checkpoint: %s is a %s; a state holds only numbers, strings, booleans, tables and tensors")
          :format(show_path(path), core.describe(v)))
  end
end

-- Parses text; tensors maps the names of @"..." references.  Returns the
-- value, or nil and a message.
local function decode(text, tensors)
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
    return table.concat(parts)
  end
  local value
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
  function value()
    ws()
    local c = text:sub(pos, pos)
    if c == "@" then
      pos = pos + 1
      if text:sub(pos, pos) ~= '"' then fail("expected a tensor name after @") end
      local name = quoted()
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
M._encode, M._decode = encode, decode

-- -- Checkpoints -------------------------------------------------------------

local function has_method(x, name)
  return type(x) == "table" and type(x[name]) == "function"
end

local function rng_state()
  return require("ddp").get_rng_state()
end

-- ddp.save_checkpoint(path, {model=, optimizer=, scheduler=, epoch=, extra=,
-- ...}): each value with a :state_dict() method is saved as what it returns,
-- any other value (a number, a table, a tensor) as it is.  The RNG state goes
-- along as `rng` unless the table gives rng = false.
function M.save_checkpoint(path, parts)
  if type(path) ~= "string" then raise("save_checkpoint: path must be a string, got " .. core.show(path)) end
  if type(parts) ~= "table" or core.is_tensor(parts) then
    raise("save_checkpoint: expected a table such as {model = m, optimizer = opt, epoch = n}, got "
          .. core.describe(parts))
  end
  local state = {}
  for k, v in pairs(parts) do
    if type(k) ~= "string" then
      raise(("save_checkpoint: key %s is a %s; expected names such as model or epoch")
            :format(core.show(k), type(k)))
    end
    if has_method(v, "state_dict") then v = v:state_dict() end
    state[k] = v
  end
  if state.rng == nil then state.rng = rng_state() end
  if state.rng == false then state.rng = nil end

  local tensors, by_handle = {}, {}
  local function tensor(t, path)
    -- one tensor reachable twice (tied weights) is stored once and comes
    -- back shared
    local id = tostring(ffi.cast("uintptr_t", t))
    if by_handle[id] then return by_handle[id] end
    local name, n = show_path(path), 1
    while tensors[name] do n = n + 1; name = show_path(path) .. "#" .. n end
    tensors[name], by_handle[id] = t, name
    return name
  end
  local out = {}
  encode(state, {}, out, tensor, {})
  M.save(tensors, path, { [FORMAT_KEY] = FORMAT, [STATE_KEY] = table.concat(out) })
end

local load_order = { model = 1, optimizer = 2, scheduler = 3 }

-- ddp.load_checkpoint(path[, targets]) -> {model=, optimizer=, ..., epoch=,
-- rng=}.  With targets ({model = m, optimizer = opt, ...}) it also calls
-- each target's :load_state_dict with its part (model first, then the
-- optimizer and the scheduler, the rest by name) and restores the RNG, so
-- training resumes exactly; targets.rng = false leaves the RNG alone.
function M.load_checkpoint(path, targets)
  if type(path) ~= "string" then raise("load_checkpoint: path must be a string, got " .. core.show(path)) end
  if targets ~= nil and (type(targets) ~= "table" or core.is_tensor(targets)) then
    raise("load_checkpoint: targets must be a table such as {model = m, optimizer = opt}, got "
          .. core.describe(targets))
  end
  local tensors, meta = M.load(path)
  if meta[FORMAT_KEY] == nil or meta[STATE_KEY] == nil then
    raise(("load_checkpoint: %s: not a ddplua checkpoint (its metadata has no %s); ddp.load reads any safetensors file")
          :format(path, FORMAT_KEY))
  end
  if meta[FORMAT_KEY] ~= FORMAT then
    raise(("load_checkpoint: %s: unsupported checkpoint format \"%s\" (this version reads \"%s\")")
          :format(path, meta[FORMAT_KEY], FORMAT))
  end
  local state, err = decode(meta[STATE_KEY], tensors)
  if err then raise(("load_checkpoint: %s: corrupt checkpoint state %s"):format(path, err)) end
  if type(state) ~= "table" then
    raise(("load_checkpoint: %s: corrupt checkpoint state (a %s, not a table)"):format(path, type(state)))
  end
  if targets == nil then return state end

  local names = {}
  for k, obj in pairs(targets) do
    if k ~= "rng" then
      if not has_method(obj, "load_state_dict") then
        raise(("load_checkpoint: target %s has no load_state_dict method"):format(core.show(k)))
      end
      if state[k] == nil then
        local have = {}
        for s in pairs(state) do have[#have + 1] = tostring(s) end
        table.sort(have)
        raise(("load_checkpoint: %s holds no \"%s\" (it holds %s)")
              :format(path, tostring(k), table.concat(have, ", ")))
      end
      names[#names + 1] = k
    elseif obj ~= false then
      raise("load_checkpoint: targets.rng may only be false (to leave the RNG alone)")
    end
  end
  table.sort(names, function(a, b)
    local oa, ob = load_order[a] or 4, load_order[b] or 4
    if oa ~= ob then return oa < ob end
    return tostring(a) < tostring(b)
  end)
  for _, k in ipairs(names) do targets[k]:load_state_dict(state[k]) end
  if targets.rng ~= false and type(state.rng) == "table" then
    require("ddp").set_rng_state(state.rng)
  end
  return state
end

return M
