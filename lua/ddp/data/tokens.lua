-- ddp.data.tokens (also ddp.tokens): token data for language models -- TokenDataset, windows of
-- block_size + 1 tokens over a memory-mapped flat token file (nanoGPT's
-- headerless uint16 `.bin`, llm.c's `.bin` with its 1024-byte header, or
-- uint32 tokens), and the tools that write such files (byte-level
-- encoding of a text, or any list of token ids).
--
-- The file is mapped shared and read-only by the runtime (dl_tokens_open):
-- the ranks of a node all read one copy of it in the page cache.  A batch
-- is gathered in C from the mapping into fresh int64 tensors x [B, T] and
-- y [B, T] (y is x shifted by one token), so the DataLoader, the
-- DistributedSampler (set_epoch, shuffle, drop_last) and their
-- state_dict for exact resume work over it as over a TensorDataset.
--
--   local tokens = require "ddp.tokens"      -- also ddp.data.TokenDataset
--   tokens.encode_bytes("input.txt", "input.bin")          -- vocab 256, uint16
--   local ds = tokens.TokenDataset("input.bin", { block_size = 64 })
--   local train, val = ds:split(0.9)
--   local loader = data.DataLoader(train, { batch_size = 32,
--                                           sampler = data.DistributedSampler(train, { seed = 0 }) })
--   for _, x, y in loader:iter() do ... end                 -- int64 [32, 64] each
--
-- From the shell (tools/encode_tokens.lua):
--   ddplua tools/encode_tokens.lua input.txt out.bin [--dtype uint16|uint32] [--header none|llmc]
local core = require "ddp.core"
local factory = require "ddp.tensor.factory"
local C, ffi = core.C, core.ffi
local files = require "ddp.data.files"
local new, raise, show = core.new, core.raise, core.show
local is_tensor, is_integer = core.is_tensor, core.is_integer
local floor = math.floor
local type = type

core.add_lib_file(debug.getinfo(1, "S").source)

local tokens = {}

local ITEMSIZE = { uint16 = 2, uint32 = 4, auto = 0 }
local HEADER = { auto = -1, llmc = 1, none = 0 }
local DTYPE_OF = { [2] = "uint16", [4] = "uint32" }
local MAGIC = { uint16 = 20240520, uint32 = 20240801 }

-- "tokens: path: problem" from C, under the caller's name.
local function raise_c(op)
  raise((core.last_error():gsub("^tokens: ", op .. ": ")))
end

local check_opts = core.check_opts

local function enum_opt(v, op, name, choices, dflt)
  if v == nil then return dflt end
  if choices[v] == nil then
    local names = {}
    for k in pairs(choices) do names[#names + 1] = ('"%s"'):format(k) end
    table.sort(names)
    raise(("%s: %s must be one of %s, got %s"):format(op, name, table.concat(names, ", "), show(v)))
  end
  return v
end

local function int_opt(v, op, name, lo, dflt)
  if v == nil then return dflt end
  if not is_integer(v) or v < lo then
    raise(("%s: %s must be an integer >= %d, got %s"):format(op, name, lo, show(v)))
  end
  return v
end

-- -- TokenDataset -------------------------------------------------------------

local TokenDataset = core.class("TokenDataset", nil, { proxy = true })
tokens.TokenDataset = TokenDataset

-- tokens.TokenDataset(path, {block_size =, dtype = "auto", header =
-- "auto", stride = block_size, start = 0, stop = the file's end}).
-- Sample i is the window of block_size + 1 tokens starting at token
-- start + i * stride, given as x = w[0:T] and y = w[1:T+1] (int64, T =
-- block_size); stride = block_size gives windows that overlap by one token
-- (every token is a target once per epoch), stride = 1 every position.
-- dtype: "uint16", "uint32" or "auto" (an llm.c header's, else uint16);
-- header: "auto" (an llm.c header when its magic is there), "llmc" (must
-- be there) or "none" (the whole file is tokens).  start, stop: the tokens
-- used (0-based, stop excluded), for a split of one file.
local ds_opts = { block_size = true, dtype = true, header = true, stride = true, start = true, stop = true }
function TokenDataset:init(path, opts, shared)
  local op = "TokenDataset"
  if type(path) ~= "string" then raise(("%s: path must be a string, got %s"):format(op, show(path))) end
  opts = check_opts(opts, op, ds_opts)
  local T = opts.block_size
  if T == nil then raise(op .. ": option block_size (the context length T) is required") end
  T = int_opt(T, op, "block_size", 1)
  local dtype = enum_opt(opts.dtype, op, "dtype", ITEMSIZE, "auto")
  local header = enum_opt(opts.header, op, "header", HEADER, "auto")
  local f = shared
  if f == nil then
    local p = C.dl_tokens_open(path, ITEMSIZE[dtype], HEADER[header])
    if p == nil then raise_c(op) end
    f = ffi.gc(p, C.dl_tokens_close)
  end
  local n = tonumber(C.dl_tokens_count(f))
  local start = int_opt(opts.start, op, "start", 0, 0)
  local stop = int_opt(opts.stop, op, "stop", 0, n)
  if stop > n then raise(("%s: stop = %d is past the end of %s (%d tokens)"):format(op, stop, path, n)) end
  local stride = int_opt(opts.stride, op, "stride", 1, T)
  local have = stop - start
  if have < T + 1 then
    raise(("%s: %s holds %d tokens%s, shorter than one window of block_size + 1 = %d tokens")
          :format(op, path, have, (start ~= 0 or stop ~= n) and (" from %d to %d"):format(start, stop) or "", T + 1))
  end
  self._f, self.path, self.block_size, self.stride = f, path, T, stride
  self.dtype = DTYPE_OF[C.dl_tokens_itemsize(f)]
  self.header = C.dl_tokens_header_bytes(f) > 0 and "llmc" or "none"
  self.start, self.stop, self.ntokens = start, stop, n
  self._n = floor((have - (T + 1)) / stride) + 1
  self._opts = { block_size = T, dtype = self.dtype, header = self.header, stride = stride }
end

function TokenDataset:len() return self._n end
TokenDataset.__len = TokenDataset.len

local function windows(self, idx, shift)
  local f = self._f
  return new(C.dl_tokens_windows, f, idx, self.start + shift, self.stride, self.block_size)
end

-- ds:getitems(idx): the batch of the samples idx (a 1-D int64 tensor),
-- x and y as int64 [B, T] -- what a DataLoader calls (PyTorch's
-- __getitems__), one gather in C per tensor.
function TokenDataset:getitems(idx)
  if not is_tensor(idx) or idx:dim() ~= 1 then
    raise("TokenDataset:getitems: expected a 1-D int64 tensor of sample indices, got " .. show(idx))
  end
  idx = idx:to("int64"):contiguous()
  local n = self._n
  if idx:numel() > 0 then
    local lo, hi = idx:amin():item(), idx:amax():item()
    if lo < 0 or hi >= n then
      raise(("TokenDataset:getitems: index %d out of range for %d windows"):format(lo < 0 and lo or hi, n))
    end
  end
  return windows(self, idx, 0), windows(self, idx, 1)
end

-- ds:get(i) (0-based; negative from the end): x and y of window i, int64 [T].
function TokenDataset:get(i)
  local n = self._n
  if not is_integer(i) or i < -n or i >= n then
    raise(("TokenDataset:get: index %s out of range for %d windows"):format(show(i), n))
  end
  if i < 0 then i = i + n end
  local x, y = self:getitems(factory.tensor({ i }, { dtype = "int64" }))
  return x:get(0), y:get(0)
end

-- ds:split(fraction): two datasets over the same mapping, the first
-- fraction of the tokens and the rest (a train/validation split: the
-- windows of one never reach into the other).  opts override the windows'
-- settings of the second (e.g. {stride = block_size} for evaluation).
function TokenDataset:split(frac, opts)
  if type(frac) ~= "number" or frac <= 0 or frac >= 1 then
    raise(("TokenDataset:split: fraction must be a number in (0, 1), got %s"):format(show(frac)))
  end
  local cut = self.start + floor((self.stop - self.start) * frac)
  local function part(lo, hi, extra)
    local o = {}
    for k, v in pairs(self._opts) do o[k] = v end
    for k, v in pairs(extra or {}) do o[k] = v end
    o.start, o.stop = lo, hi
    return TokenDataset(self.path, o, self._f)
  end
  return part(self.start, cut), part(cut, self.stop, opts)
end

-- All the tokens used (start to stop) as a 1-D int64 tensor.
function TokenDataset:tokens()
  local idx = factory.tensor({ 0 }, { dtype = "int64" })
  return new(C.dl_tokens_windows, self._f, idx, self.start, 0, self.stop - self.start):view(-1)
end

function TokenDataset:__tostring()
  return ("TokenDataset(%s: %d windows of %d + 1 tokens, stride %d, tokens %d to %d of %d, %s%s)"):format(
    self.path, self._n, self.block_size, self.stride, self.start, self.stop, self.ntokens, self.dtype,
    self.header == "llmc" and ", llm.c header" or "")
end

-- -- Writing token files -------------------------------------------------------

-- tokens.write(path, ids[, {dtype = "uint16", header = "none"}]): writes
-- the token ids (a 1-D integer tensor or a Lua list) as a flat file of
-- little-endian uint16 or uint32, headerless or with llm.c's header
-- (header = "llmc").  Atomic (dl_file_create): path holds the old file or
-- the new one, never a mix; its mode is kept, a symbolic link followed.
-- Returns the number of tokens.
function tokens.write(path, ids, opts)
  local op = "tokens.write"
  if type(path) ~= "string" then raise(("%s: path must be a string, got %s"):format(op, show(path))) end
  opts = check_opts(opts, op, { dtype = true, header = true })
  local dtype = enum_opt(opts.dtype, op, "dtype", { uint16 = 2, uint32 = 4 }, "uint16")
  local header = enum_opt(opts.header, op, "header", { none = 0, llmc = 1 }, "none")
  if not is_tensor(ids) then
    if type(ids) ~= "table" then raise(("%s: ids must be a 1-D integer tensor or a list, got %s"):format(op, show(ids))) end
    ids = #ids > 0 and factory.tensor(ids, { dtype = "int64" }) or factory.empty(0, { dtype = "int64" })
  end
  if ids:dim() ~= 1 or (ids:dtype() ~= "int64" and ids:dtype() ~= "int32" and ids:dtype() ~= "uint8") then
    raise(("%s: ids must be a 1-D integer tensor, got %s %s"):format(op, ids:dtype(), core.fmt_shape(ids:shape())))
  end
  local n = ids:numel()
  local maxv = dtype == "uint16" and 65535 or 4294967295
  if n > 0 then
    local lo, hi = ids:amin():item(), ids:amax():item()
    if lo < 0 or hi > maxv then
      raise(("%s: token %d does not fit in %s (0 to %d)"):format(op, lo < 0 and lo or hi, dtype, maxv))
    end
  end
  local src = ids:to("int64"):contiguous()
  local p = ffi.cast("const int64_t *", C.dl_tensor_data(src))
  local buf = ffi.new(dtype == "uint16" and "uint16_t[?]" or "uint32_t[?]", math.max(n, 1))
  for i = 0, n - 1 do buf[i] = p[i] end  -- x86 and arm64 are little-endian, as the format
  -- through the runtime's atomic writer (dl_file_*): fsynced, the old
  -- file's mode kept, written through symbolic links, and a failed write
  -- (a full disk, ulimit -f) leaves the old file and no temporary
  local h, nh = nil, 0
  if header == "llmc" then
    h, nh = ffi.new("int32_t[256]"), 1024
    h[0], h[1], h[2] = MAGIC[dtype], 1, n
  end
  files.write_atomic(path, { { h, nh }, { buf, n * ITEMSIZE[dtype] } }, op)
  return n
end

-- tokens.encode_bytes(text_path, out_path[, opts]): a byte-level encoding
-- of a file -- every byte is a token, vocabulary 256 -- written by
-- tokens.write (opts as there: uint16 by default).  Returns the count.
function tokens.encode_bytes(text_path, out_path, opts)
  local op = "tokens.encode_bytes"
  if type(text_path) ~= "string" then raise(("%s: text_path must be a string, got %s"):format(op, show(text_path))) end
  local f, err = io.open(text_path, "rb")
  if not f then raise(("%s: cannot open %s"):format(op, err)) end
  local s = f:read("*a")
  f:close()
  return tokens.write(out_path, tokens.bytes(s), opts)
end

-- tokens.bytes(s): the bytes of a Lua string as a 1-D uint8 tensor (the
-- byte-level token ids of a text).
function tokens.bytes(s)
  if type(s) ~= "string" then raise("tokens.bytes: expected a string, got " .. show(s)) end
  local t = factory.empty(#s, { dtype = "uint8" })
  if #s > 0 then ffi.copy(C.dl_tensor_data(t), s, #s) end
  return t
end

-- tokens.decode_bytes(ids): the string of byte-level token ids (a tensor
-- or a list; ids outside 0-255 are an error).
function tokens.decode_bytes(ids)
  if is_tensor(ids) then ids = ids:reshape(-1):tolist() end
  if type(ids) ~= "table" then raise("tokens.decode_bytes: expected a tensor or a list of ids, got " .. show(ids)) end
  local out = {}
  for i = 1, #ids do
    local v = ids[i]
    if not is_integer(v) or v < 0 or v > 255 then
      raise(("tokens.decode_bytes: id %s at position %d is not a byte (0-255)"):format(show(v), i))
    end
    out[i] = string.char(v)
  end
  return table.concat(out)
end

return tokens
