-- ddp.summary.tfevents: TensorBoard's event file format, written by hand
-- (no protobuf library): CRC32C, the TFRecord framing of each record, and
-- the few protobuf messages ddp.SummaryWriter writes -- Event, Summary,
-- Summary.Value with a simple_value, a HistogramProto or a text tensor,
-- and SessionLog -- with the field numbers of tensorboard/compat/proto's
-- event.proto, summary.proto, tensor.proto and tensor_shape.proto.
-- Messages come out as the protobuf library serializes them (fields in
-- number order, proto3 zeros left out, doubles packed), so
-- tests/golden/make_summary.py can compare them byte for byte.
local core = require "ddp.core"
local bit = require "bit"
local ffi = core.ffi
local band, bor, bxor, rshift, lshift, bnot = bit.band, bit.bor, bit.bxor, bit.rshift, bit.lshift, bit.bnot
local char, concat, floor = string.char, table.concat, math.floor
local tonumber = tonumber

core.add_lib_file(debug.getinfo(1, "S").source)

local M = {}

-- -- CRC32C ------------------------------------------------------------------

-- Castagnoli's polynomial (reflected), one table byte at a time: LuaJIT
-- compiles the loop to about 400 MB/s here, and a scalar's record is some
-- 60 bytes, a histogram's a few kilobytes, so C (or SSE4.2) would buy
-- nothing measurable.
local TABLE = ffi.new("uint32_t[256]")
for i = 0, 255 do
  local c = i
  for _ = 1, 8 do
    c = band(c, 1) ~= 0 and bxor(rshift(c, 1), 0x82F63B78) or rshift(c, 1)
  end
  TABLE[i] = c
end

local function crc32c_bits(s)
  local p = ffi.cast("const uint8_t *", s)
  local c = -1
  for i = 0, #s - 1 do c = bxor(TABLE[band(bxor(c, p[i]), 255)], rshift(c, 8)) end
  return bnot(c)  -- a signed 32-bit number, as LuaJIT's bit ops give
end

local function u32(x) return x % 4294967296 end  -- as an unsigned number

-- tfevents.crc32c(s): the CRC32C of string s, 0 .. 2^32 - 1
-- ("123456789" -> 0xE3069283).
function M.crc32c(s) return u32(crc32c_bits(s)) end

-- The masked CRC TFRecord stores: rotated right by 15, plus a constant
-- (a CRC of data holding CRCs is then not degenerate).
local function masked_bits(s)
  local c = crc32c_bits(s)
  return bor(rshift(c, 15), lshift(c, 17)) + 0xA282EAD8
end
function M.masked_crc32c(s) return u32(masked_bits(s)) end

-- -- Little-endian bytes -----------------------------------------------------

local num = ffi.new("union { double d; float f; uint32_t u; uint64_t q; uint8_t b[8]; }")

local function le32(x)  -- any number, taken mod 2^32 (a bit-op result, a sum of them)
  num.u = x % 4294967296
  return ffi.string(num.b, 4)
end
local function le64(n)  -- a length, n < 2^53
  num.q = n
  return ffi.string(num.b, 8)
end
local function f64(v)
  num.d = v
  return ffi.string(num.b, 8)
end
local function f32(v)
  num.f = v
  return ffi.string(num.b, 4)
end

-- tfevents.record(data): data framed as one TFRecord -- its length (uint64),
-- the masked CRC of those 8 bytes, data, the masked CRC of data.  Written
-- whole, so a reader never meets half a record from us.
function M.record(data)
  local len = le64(#data)
  return len .. le32(masked_bits(len)) .. data .. le32(masked_bits(data))
end

-- -- Protobuf ------------------------------------------------------------------

-- A varint: n an integer; a negative one (an int64 step) is its
-- two's-complement 64-bit form, ten bytes, as protobuf writes it.
local function varint(n)
  if n >= 0 and n < 128 then return char(n) end
  local out = {}
  if n >= 0 and n < 2^53 then
    while n >= 128 do
      out[#out + 1] = char(n % 128 + 128)
      n = floor(n / 128)
    end
    out[#out + 1] = char(n)
  else
    local u = ffi.cast("uint64_t", ffi.cast("int64_t", n))
    while u >= 128 do
      out[#out + 1] = char(tonumber(u % 128) + 128)
      u = u / 128
    end
    out[#out + 1] = char(tonumber(u))
  end
  return concat(out)
end
M.varint = varint

-- Fields: the key (number << 3 | wire type), then the value.
local function f_varint(field, n) return varint(field * 8) .. varint(n) end
local function f_double(field, v) return varint(field * 8 + 1) .. f64(v) end
local function f_float(field, v) return varint(field * 8 + 5) .. f32(v) end
local function f_bytes(field, s) return varint(field * 8 + 2) .. varint(#s) .. s end

-- proto3 writes no field that holds its default (0, ""); -0.0 is not 0 to
-- it (its bits are not zero).
local function is_zero(v) return v == 0 and 1 / v > 0 end

-- A packed repeated double (empty: nothing).
local function f_doubles(field, list)
  if #list == 0 then return "" end
  local parts = {}
  for i = 1, #list do parts[i] = f64(list[i]) end
  return f_bytes(field, concat(parts))
end

-- -- Messages ------------------------------------------------------------------

-- Summary.Value{tag = 1, simple_value = 2 (a float, so float32)}:
-- simple_value is in a oneof, so a 0 is written too.
function M.scalar_value(tag, v)
  return f_bytes(1, tag) .. f_float(2, v)
end

-- Summary.Value{tag = 1, histo = 5}: HistogramProto{min = 1, max = 2,
-- num = 3, sum = 4, sum_squares = 5, bucket_limit = 6, bucket = 7}, all
-- doubles.  h: {min =, max =, num =, sum =, sum_squares =, bucket_limit =
-- {...}, bucket = {...}}.
function M.histogram_value(tag, h)
  local parts = {}
  for i, k in ipairs { "min", "max", "num", "sum", "sum_squares" } do
    if not is_zero(h[k]) then parts[#parts + 1] = f_double(i, h[k]) end
  end
  parts[#parts + 1] = f_doubles(6, h.bucket_limit)
  parts[#parts + 1] = f_doubles(7, h.bucket)
  return f_bytes(1, tag) .. f_bytes(5, concat(parts))
end

-- Summary.Value{tag = 1, tensor = 8, metadata = 9} of the text plugin, as
-- PyTorch's add_text: a TensorProto{dtype = 1: DT_STRING (7), tensor_shape
-- = 2: {dim = 2: {size = 1: 1}}, string_val = 8: text}, and
-- SummaryMetadata{plugin_data = 1: {plugin_name = 1: "text"}} (its content,
-- TextPluginData{version = 0}, serializes to nothing).
function M.text_value(tag, text)
  local tensor = f_varint(1, 7) .. f_bytes(2, f_bytes(2, f_varint(1, 1))) .. f_bytes(8, text)
  local metadata = f_bytes(1, f_bytes(1, "text"))
  return f_bytes(1, tag) .. f_bytes(8, tensor) .. f_bytes(9, metadata)
end

-- Summary{value = 1 (repeated)} of already encoded values.
function M.summary(values)
  local parts = {}
  for i = 1, #values do parts[i] = f_bytes(1, values[i]) end
  return concat(parts)
end

-- Event{wall_time = 1 (double), step = 2 (int64), file_version = 3,
-- summary = 5, session_log = 7 (SessionLog{status = 1: START = 1}),
-- source_metadata = 10 (SourceMetadata{writer = 1})}.  e: {wall_time =,
-- step =, file_version =, summary = (encoded), session_start = true,
-- writer =}.
function M.event(e)
  local parts = {}
  if e.wall_time and not is_zero(e.wall_time) then parts[#parts + 1] = f_double(1, e.wall_time) end
  if e.step and e.step ~= 0 then parts[#parts + 1] = f_varint(2, e.step) end
  if e.file_version then parts[#parts + 1] = f_bytes(3, e.file_version) end
  if e.summary then parts[#parts + 1] = f_bytes(5, e.summary) end
  if e.session_start then parts[#parts + 1] = f_bytes(7, f_varint(1, 1)) end
  if e.writer then parts[#parts + 1] = f_bytes(10, f_bytes(1, e.writer)) end
  return concat(parts)
end

return M
