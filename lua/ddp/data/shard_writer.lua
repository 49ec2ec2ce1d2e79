-- ddp.data.shard_writer: ShardWriter, samples written to numbered tar
-- shards in the WebDataset convention (webdataset's ShardWriter), each
-- shard atomic (a crash leaves the shards closed before it, never half a
-- shard) and with its index cache "<shard>.idx" beside it, which
-- WebDataset reads instead of the shard's headers.
--
--   local w = data.ShardWriter("out/shard-%06d.tar", {maxcount = 10000})
--   w:write({__key__ = "000123", jpg = bytes, cls = 3})   -- bytes: a string or a uint8 tensor
--   w:close()                                             -- -> the shards written
local core = require "ddp.core"
local checks = require "ddp.data.checks"
local json = require "ddp.data.json"
local C, ffi = core.C, core.ffi
local raise, show = core.raise, core.show
local is_tensor, is_integer = core.is_tensor, core.is_integer
local check_opts, bool_opt = core.check_opts, checks.bool_opt
local type, tostring, tonumber, pairs = type, tostring, tonumber, pairs

core.add_lib_file(debug.getinfo(1, "S").source)

local M = {}

local ShardWriter = checks.class("ShardWriter")
M.ShardWriter = ShardWriter

-- The number's shortest text that reads back as the same number.
local function number_text(v)
  if is_integer(v) and v > -2^53 and v < 2^53 then return ("%d"):format(v) end
  for digits = 15, 17 do
    local s = ("%." .. digits .. "g"):format(v)
    if tonumber(s) == v then return s end
  end
  return ("%.17g"):format(v)
end

-- A member's bytes: a string as it is, a uint8 tensor's bytes, a number as
-- its text (cls = 3 -> "3"), a table as JSON.  Returns the data (a string
-- or a tensor, kept alive by the caller) and the pointer and size.
local function encode(v, op, key, ext)
  local t = type(v)
  if t == "string" then return v, v, #v end
  if is_tensor(v) then
    if v:dtype() ~= "uint8" then
      raise(("%s: sample %s: %s is a %s tensor; a member's bytes are a uint8 tensor (or a string)")
            :format(op, show(key), ext, v:dtype()))
    end
    if C.dl_tensor_device(v) >= 0 then v = v:cpu() end
    v = v:contiguous()
    return v, C.dl_tensor_data(v), v:numel()
  end
  if t == "number" then
    if v ~= v or v == math.huge or v == -math.huge then
      raise(("%s: sample %s: %s is %s, which has no text"):format(op, show(key), ext, tostring(v)))
    end
    local s = number_text(v)
    return s, s, #s
  end
  if t == "table" then
    local s = json.encode(v)
    return s, s, #s
  end
  raise(("%s: sample %s: %s is %s; a member is a string, a uint8 tensor, a number or a table (JSON)")
        :format(op, show(key), ext, show(v)))
end

-- data.ShardWriter(pattern[, {maxcount = 10000, maxsize = 3e9, start = 0,
-- index = true, mtime = os.time()}]): shards named pattern:format(k), k =
-- start, start + 1, ... (pattern holds one integer conversion, such as
-- "shard-%06d.tar").  A new shard starts before a sample when the current
-- one holds maxcount samples or maxsize bytes (webdataset's rule, so a
-- shard may pass maxsize by one sample).  index = false writes no index
-- cache.  mtime: the members' modification time (fix it for shards that
-- are the same bytes every time they are written).
local writer_opts = { maxcount = true, maxsize = true, start = true, index = true, mtime = true }
function ShardWriter:init(pattern, opts)
  local op = "ShardWriter"
  opts = check_opts(opts, op, writer_opts)
  if type(pattern) ~= "string" then
    raise(("%s: pattern must be a string such as \"shard-%%06d.tar\", got %s"):format(op, show(pattern)))
  end
  local convs = 0
  for spec in pattern:gmatch("%%(.)") do
    if spec ~= "%" then convs = convs + 1 end
  end
  local ok, a = pcall(string.format, pattern, 0)
  local ok2, b = pcall(string.format, pattern, 1)
  if convs ~= 1 or not ok or not ok2 or a == b then
    raise(("%s: pattern must hold one integer conversion for the shard number (such as \"shard-%%06d.tar\"), got %s")
          :format(op, show(pattern)))
  end
  local function int_opt(k, lo, dflt)
    local v = opts[k]
    if v == nil then return dflt end
    if not is_integer(v) or v < lo then raise(("%s: %s must be an integer >= %d, got %s"):format(op, k, lo, show(v))) end
    return v
  end
  self.pattern = pattern
  self.maxcount = int_opt("maxcount", 1, 10000)
  self.maxsize = int_opt("maxsize", 1, 3e9)
  self.start = int_opt("start", 0, 0)
  self.mtime = int_opt("mtime", 0, os.time())
  self.index = bool_opt(opts.index, op, "index", true)
  self.shards, self.count = {}, 0
  self._w, self._in_shard, self._closed = nil, 0, false
end

local function finish_shard(self)
  local w = self._w
  if w == nil then return end
  self._w = nil
  local path = self.shards[#self.shards]
  if C.dl_tar_writer_finish(ffi.gc(w, nil), self.index and (path .. ".idx") or nil) ~= 0 then
    table.remove(self.shards)
    core.raise_c()
  end
end

local function next_shard(self)
  finish_shard(self)
  local path = self.pattern:format(self.start + #self.shards)
  local w = C.dl_tar_writer_create(path, self.mtime)
  if w == nil then core.raise_c() end
  self._w = ffi.gc(w, C.dl_tar_writer_abort)  -- an error escaping leaves no temporary
  self._in_shard = 0
  self.shards[#self.shards + 1] = path
end

-- w:write(sample): one sample, {__key__ = "000123", jpg = ..., cls = ...}:
-- its members "<key>.<ext>" in the order of their extensions (sorted, as
-- webdataset writes them); fields starting with "_" other than __key__ are
-- not written.  The key must be unique, and its basename holds no dot
-- (the first dot starts the extension).
function ShardWriter:write(sample)
  local op = "ShardWriter:write"
  if self._closed then raise(op .. ": the writer is closed") end
  if type(sample) ~= "table" or is_tensor(sample) then
    raise(("%s: expected a sample table {__key__ = ..., ext = value, ...}, got %s"):format(op, show(sample)))
  end
  local key = sample.__key__
  if type(key) ~= "string" or key == "" then
    raise(("%s: the sample's __key__ must be a non-empty string, got %s"):format(op, show(key)))
  end
  if key:match("[^/]*$"):find(".", 1, true) or key:sub(-1) == "/" then
    raise(("%s: key %s: its basename must be non-empty and hold no dot (a reader takes the first dot as the "
           .. "start of the extension)"):format(op, show(key)))
  end
  local exts = {}
  for k in pairs(sample) do
    if type(k) ~= "string" then
      raise(("%s: sample %s: field names are extensions (strings), got %s"):format(op, show(key), show(k)))
    end
    if k:sub(1, 1) ~= "_" then
      if k == "" or k:find("/", 1, true) then
        raise(("%s: sample %s: %s is not an extension (non-empty, no slash)"):format(op, show(key), show(k)))
      end
      exts[#exts + 1] = k
    end
  end
  if #exts == 0 then raise(("%s: sample %s has no fields besides its key"):format(op, show(key))) end
  table.sort(exts)
  local keep, ptrs, sizes = {}, {}, {}
  for i, ext in ipairs(exts) do keep[i], ptrs[i], sizes[i] = encode(sample[ext], op, key, ext) end
  if self._w == nil or self._in_shard >= self.maxcount or C.dl_tar_writer_bytes(self._w) >= self.maxsize then
    next_shard(self)
  end
  for i, ext in ipairs(exts) do
    if C.dl_tar_writer_add(self._w, key .. "." .. ext, ptrs[i], sizes[i]) ~= 0 then
      local msg = core.last_error()
      C.dl_tar_writer_abort(ffi.gc(self._w, nil))
      self._w, self._closed = nil, true
      table.remove(self.shards)
      raise(msg)
    end
  end
  self._in_shard, self.count = self._in_shard + 1, self.count + 1
  return self
end

-- w:close(): finishes the last shard; the paths of the shards written.
function ShardWriter:close()
  if not self._closed then
    self._closed = true
    finish_shard(self)
  end
  return self.shards
end

function ShardWriter:__tostring()
  return ("ShardWriter(%s: %d samples in %d shards%s)"):format(self.pattern, self.count, #self.shards,
                                                              self._closed and ", closed" or "")
end

return M
