-- ddp.data.worker_codec: a dataset (or any Lua value) copied into a loader
-- worker thread's own Lua state -- what pickle does for PyTorch's worker
-- processes, without its traps: tensors are not copied but shared (the
-- worker gets a reference to the same C tensor, so a memory-mapped array
-- or a big in-memory tensor costs nothing per worker), and a class defined
-- in the training script itself travels by value.
--
-- What travels:
--   nil, booleans, numbers, strings, int64/uint64 cdata;
--   tensors (shared, by reference);
--   anything reachable as require(m) or require(m)[key] -- modules, their
--     classes and functions (ddp's own, the user's modules, the standard
--     library): the worker requires m itself;
--   tables, with their metatables (cycles and shared parts kept);
--   instances of core.class classes (datasets, transforms), fields copied;
--   Lua functions, as bytecode with their upvalues (each a copy).
-- Anything else (an open file, a coroutine, other cdata) is an error naming
-- where it sits ("dataset.cache.fh: an open file ..."): open such things
-- lazily in get(), once per worker.  A function's globals are the worker's
-- (the standard library and what it requires), not the script's.
--
-- The encoding is binary (tag byte, then fixed-width numbers), read back
-- through the FFI, so a dataset of a million file names crosses in well
-- under a second (no Lua chunk: those stop at 65536 constants).
local core = require "ddp.core"
local class = require "ddp.core.class"
local ffi = core.ffi
local is_tensor, show = core.is_tensor, core.show
local type, pairs, tostring, rawset = type, pairs, tostring, rawset
local dgetmt, getupvalue, setupvalue = debug.getmetatable, debug.getupvalue, debug.setupvalue
local concat, char = table.concat, string.char

core.add_lib_file(debug.getinfo(1, "S").source)

local M = {}

local T_NIL, T_FALSE, T_TRUE, T_NUM, T_STR, T_TENSOR, T_BACK, T_TABLE, T_REF, T_PROXY, T_FUNC, T_I64, T_U64 =
  0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12

local num_buf = ffi.new("double[1]")
local u32_buf = ffi.new("uint32_t[1]")
local i64_buf = ffi.new("int64_t[1]")
local u64_buf = ffi.new("uint64_t[1]")
local i64_ct, u64_ct = ffi.typeof("int64_t"), ffi.typeof("uint64_t")

-- codec.ref_index(): where a shared value can be found by name in any Lua state that loads
-- the same modules: value -> {module, key} (key nil: the module itself).
function M.ref_index()
  local refs = {}
  for name, mod in pairs(package.loaded) do
    local tm = type(mod)
    if (tm == "table" or tm == "function" or tm == "userdata") and refs[mod] == nil then refs[mod] = { name } end
  end
  for name, mod in pairs(package.loaded) do
    if type(mod) == "table" then
      for k, v in pairs(mod) do
        local tv = type(v)
        if type(k) == "string" and refs[v] == nil and (tv == "table" or tv == "function" or tv == "userdata"
                                                         or tv == "cdata" and not is_tensor(v)) then
          -- a script's own globals are not the worker's: of _G only the
          -- builtins (C functions) and the library tables
          if name ~= "_G" or tv == "function" and debug.getinfo(v, "S").what == "C" then
            refs[v] = { name, k }
          end
        end
      end
    end
  end
  return refs
end

local Writer = {}
Writer.__index = Writer

local function u32(v)
  u32_buf[0] = v
  return ffi.string(u32_buf, 4)
end

function Writer:put(s) local o = self.out; o[#o + 1] = s end

function Writer:str(s)
  self:put(u32(#s))
  self:put(s)
end

function Writer:fail(path, what)
  error({ codec = ("%s: %s"):format(path, what) }, 0)
end

function Writer:value(v, path)
  local tv = type(v)
  if tv == "nil" then return self:put(char(T_NIL)) end
  if tv == "boolean" then return self:put(char(v and T_TRUE or T_FALSE)) end
  if tv == "number" then
    num_buf[0] = v
    self:put(char(T_NUM))
    return self:put(ffi.string(num_buf, 8))
  end
  if tv == "string" then
    self:put(char(T_STR))
    return self:str(v)
  end
  local id = self.ids[v]
  if id then
    self:put(char(T_BACK))
    return self:put(u32(id))
  end
  if tv == "cdata" and is_tensor(v) then
    local k = self.tensor_ids[v]
    if not k then
      k = #self.tensors + 1
      self.tensors[k] = v
      self.tensor_ids[v] = k
    end
    self:put(char(T_TENSOR))
    return self:put(u32(k))
  end
  local ref = self.refs[v]
  if ref then
    self:put(char(T_REF))
    self:str(ref[1])
    return self:value(ref[2], path)
  end
  if tv == "cdata" then
    if ffi.istype(i64_ct, v) then
      i64_buf[0] = v
      self:put(char(T_I64))
      return self:put(ffi.string(i64_buf, 8))
    elseif ffi.istype(u64_ct, v) then
      u64_buf[0] = v
      self:put(char(T_U64))
      return self:put(ffi.string(u64_buf, 8))
    end
    return self:fail(path, ("%s cannot be sent to a worker thread (only tensors and int64 cdata can)"):format(
      tostring(ffi.typeof(v))))
  end
  if self.busy[v] then return self:fail(path, "a cycle through a class instance's own class") end
  if tv == "table" then
    self:new_id(v)
    local n = 0
    for _ in pairs(v) do n = n + 1 end
    self:put(char(T_TABLE))
    self:put(u32(n))
    for k, x in pairs(v) do
      local tk = type(k)
      local kp = tk == "string" and k:match("^[%a_][%w_]*$") and (path .. "." .. k) or (path .. "[" .. show(k) .. "]")
      self:value(k, path .. " (a key)")
      self:value(x, kp)
    end
    return self:value(dgetmt(v), path .. " (its metatable)")
  end
  if tv == "userdata" then
    local cls = class.class_of(v)
    if not cls then
      local what = io.type(v) and "an open file" or "a userdata"
      return self:fail(path, what .. " cannot be sent to a worker thread: open it lazily (in get), once per worker")
    end
    self:put(char(T_PROXY))
    self.busy[v] = true
    self:value(cls, path .. " (its class)")
    self.busy[v] = nil
    self:new_id(v)
    local fields = dgetmt(v).__index
    local n = 0
    for _ in pairs(fields) do n = n + 1 end
    self:put(u32(n))
    for k, x in pairs(fields) do
      self:value(k, path .. " (a key)")
      self:value(x, type(k) == "string" and (path .. "." .. k) or (path .. "[" .. show(k) .. "]"))
    end
    return
  end
  if tv == "function" then
    local info = debug.getinfo(v, "Su")
    if info.what == "C" then
      return self:fail(path, "a C function that no module holds cannot be sent to a worker thread")
    end
    local ok, bc = pcall(string.dump, v)
    if not ok then return self:fail(path, "a function that cannot be dumped: " .. tostring(bc)) end
    self:new_id(v)
    self:put(char(T_FUNC))
    self:str(bc)
    self:put(char(info.nups))
    for i = 1, info.nups do
      local name, x = getupvalue(v, i)
      self:value(x, ("%s (function at %s:%d, upvalue '%s')"):format(path, info.short_src, info.linedefined, name))
    end
    return
  end
  return self:fail(path, "a " .. tv .. " cannot be sent to a worker thread")
end

function Writer:new_id(v)
  self.nid = self.nid + 1
  self.ids[v] = self.nid
end

-- codec.encode(value, what): the bytes, and the tensors they refer to (a
-- Lua list the caller keeps alive until every reader has decoded); or nil
-- and what cannot travel, naming its path from `what` ("dataset.fh: ...").
-- refs: a ref_index() made earlier (it walks package.loaded).
function M.encode(value, what, refs)
  local w = setmetatable({ out = {}, ids = {}, nid = 0, tensors = {}, tensor_ids = {}, busy = {},
                           refs = refs or M.ref_index() }, Writer)
  local ok, err = pcall(w.value, w, value, what or "value")
  if not ok then
    if type(err) == "table" and err.codec then return nil, (err.codec:gsub("^%.", "")) end
    error(err, 0)
  end
  return concat(w.out), w.tensors
end

-- -- Reading ------------------------------------------------------------------

local Reader = {}
Reader.__index = Reader

function Reader:byte()
  local b = self.p[self.pos]
  self.pos = self.pos + 1
  return b
end

function Reader:u32()
  local v = ffi.cast("const uint32_t *", self.p + self.pos)[0]
  self.pos = self.pos + 4
  return v
end

function Reader:str()
  local n = self:u32()
  local s = ffi.string(self.p + self.pos, n)
  self.pos = self.pos + n
  return s
end

function Reader:value()
  local t = self:byte()
  if t == T_NIL then return nil end
  if t == T_FALSE then return false end
  if t == T_TRUE then return true end
  if t == T_NUM then
    local v = ffi.cast("const double *", self.p + self.pos)[0]
    self.pos = self.pos + 8
    return v
  end
  if t == T_STR then return self:str() end
  if t == T_TENSOR then return self.tensors[self:u32()] end
  if t == T_BACK then return self.objs[self:u32()] end
  if t == T_I64 or t == T_U64 then
    local v = ffi.cast(t == T_I64 and "const int64_t *" or "const uint64_t *", self.p + self.pos)[0]
    self.pos = self.pos + 8
    return v
  end
  if t == T_REF then
    local mod = require(self:str())
    local key = self:value()
    if key == nil then return mod end
    return mod[key]
  end
  if t == T_TABLE then
    local v = {}
    self.objs[#self.objs + 1] = v
    for _ = 1, self:u32() do
      local k = self:value()
      v[k] = self:value()
    end
    local mt = self:value()
    if mt ~= nil then setmetatable(v, mt) end
    return v
  end
  if t == T_PROXY then
    local cls = self:value()
    local v = cls.__new(cls)
    self.objs[#self.objs + 1] = v
    local fields = dgetmt(v).__index
    for _ = 1, self:u32() do
      local k = self:value()
      rawset(fields, k, self:value())
    end
    return v
  end
  if t == T_FUNC then
    local f = assert(loadstring(self:str()))
    self.objs[#self.objs + 1] = f
    for i = 1, self:byte() do setupvalue(f, i, self:value()) end
    return f
  end
  error(("worker_codec: bad tag %d at byte %d"):format(t, self.pos - 1))
end

-- codec.decode(bytes, tensors): the value encode gave; tensors: the list
-- encode returned (or handles to the same C tensors).
function M.decode(bytes, tensors)
  local r = setmetatable({ p = ffi.cast("const uint8_t *", bytes), pos = 0, objs = {}, tensors = tensors,
                           keep = bytes }, Reader)
  return r:value()
end

return M
