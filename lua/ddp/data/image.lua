-- ddp.data.image: image files as torchvision.io reads and writes them --
-- JPEG and PNG decoded in C (runtime/io/image_decode.c: libjpeg-turbo,
-- libpng) into uint8 [C, H, W] tensors, the transforms' input; encoded
-- back (image_encode.c); files read whole and written atomically.
--
--   local img = data.read_image("cats/001.jpg", {mode = "rgb"})   -- uint8 [3, H, W]
--   local t = data.decode_image(bytes)                            -- bytes: a uint8 tensor or a string
--   local info = data.image_info(bytes)                           -- {format = "jpeg", height =, width =, ...}
--   data.write_png(img, "out.png")                                -- torchvision.io.write_png(img, path)
--
-- A JPEG may be decoded smaller than it is stored, for a fraction of the
-- work: {min_size = {h, w}} takes the largest of libjpeg's 1/8 .. 8/8
-- reductions that keeps it at least h x w; {transform = T} asks T (a
-- Resize, a RandomResizedCrop or a Compose starting with one:
-- T:decode_min_size) what it needs.
local core = require "ddp.core"
local files = require "ddp.data.files"
local C, ffi = core.C, core.ffi
local raise, show, is_tensor, is_integer = core.raise, core.show, core.is_tensor, core.is_integer
local new, own = core.new, core.own
local type, tonumber = type, tonumber
local lower = string.lower

core.add_lib_file(debug.getinfo(1, "S").source)

local M = {}

-- torchvision.io.ImageReadMode's names (and its strings "RGB", "GRAY", ...)
local MODES = {
  unchanged = C.DL_IMAGE_UNCHANGED, gray = C.DL_IMAGE_GRAY, gray_alpha = C.DL_IMAGE_GRAY_ALPHA,
  rgb = C.DL_IMAGE_RGB, rgb_alpha = C.DL_IMAGE_RGB_ALPHA, rgba = C.DL_IMAGE_RGB_ALPHA,
}
local FORMATS = { [1] = "jpeg", [2] = "png" }

-- The mode's code; op names the caller in the message.
local function mode_arg(mode, op)
  if mode == nil then return C.DL_IMAGE_UNCHANGED end
  local m = type(mode) == "string" and MODES[lower(mode)]
  if not m then
    raise(("%s: mode must be \"unchanged\", \"gray\", \"gray_alpha\", \"rgb\" or \"rgb_alpha\", got %s")
          :format(op, show(mode)))
  end
  return m
end
M._mode_arg = mode_arg

-- Encoded bytes as a contiguous uint8 CPU tensor (a string is copied into one).
local function bytes_arg(b, op)
  if type(b) == "string" then
    local n = #b
    local t = new(C.dl_empty, ffi.new("int64_t[1]", n), 1, C.DL_UINT8)
    if n > 0 then ffi.copy(C.dl_tensor_data(t), b, n) end
    return t
  end
  if not is_tensor(b) then
    raise(("%s: expected the encoded image as a uint8 tensor or a string, got %s"):format(op, show(b)))
  end
  if C.dl_tensor_device(b) >= 0 then b = b:cpu() end
  if not b:is_contiguous() then b = b:contiguous() end
  return b
end

local function name_arg(name, op)
  if name ~= nil and type(name) ~= "string" then
    raise(("%s: name must be a string (the file's, for messages), got %s"):format(op, show(name)))
  end
  return name
end

local header = ffi.typeof("dl_image_header[1]")

-- The header of encoded bytes: format, size, channels, decoding nothing;
-- nil and the message (naming op) when it cannot be read.
local function read_header(bytes, name, op)
  local h = header()
  if C.dl_image_header_read(bytes, name, h) ~= 0 then
    return nil, (ffi.string(C.dl_last_error()):gsub("^image_info", op))
  end
  local x = h[0]
  return {
    format = FORMATS[x.format], height = tonumber(x.height), width = tonumber(x.width),
    channels = x.channels, bit_depth = x.bit_depth, progressive = x.progressive ~= 0,
  }
end

-- data.image_info(bytes | path) -> {format = "jpeg" | "png", height,
-- width, channels (as stored: a palette PNG's are 3), bit_depth,
-- progressive}, reading the header only: a tensor is the encoded bytes, a
-- string a file's path.
function M.image_info(src)
  local op, name = "image_info", nil
  if type(src) == "string" then
    name = src
    src = new(C.dl_read_file, src, op)
  elseif not is_tensor(src) then
    raise(("%s: expected a file's path or the encoded bytes (a uint8 tensor), got %s"):format(op, show(src)))
  end
  local info, err = read_header(bytes_arg(src, op), name, op)
  if not info then raise(err) end
  return info
end

-- The (min_h, min_w) to decode at: from opts.min_size, or from the
-- transform's decode_min_size for this image; 0, 0: in full.
local function min_size(bytes, opts, name, op)
  local ms, tf = opts.min_size, opts.transform
  if ms ~= nil then
    if type(ms) ~= "table" or not is_integer(ms[1]) or not is_integer(ms[2]) or ms[1] < 0 or ms[2] < 0 then
      raise(("%s: min_size must be {height, width} of non-negative integers, got %s"):format(op, show(ms)))
    end
    return ms[1], ms[2]
  end
  if tf == nil then return 0, 0 end
  local f = type(tf) == "table" and tf.decode_min_size
  if type(f) ~= "function" then return 0, 0 end  -- a plain function: it needs the whole image
  local info, err = read_header(bytes, name, op)
  if not info then raise(err) end
  if info.format ~= "jpeg" then return 0, 0 end
  return f(tf, info.height, info.width)
end

local decode_opts = { mode = true, min_size = true, transform = true, name = true }

-- data.decode_image(bytes[, {mode = "unchanged", min_size =, transform =,
-- name =}]) -> uint8 [C, H, W]: a JPEG or PNG, told from its first bytes
-- (torchvision.io.decode_image).  mode: "unchanged" (as stored: 1, 2, 3 or
-- 4 channels), "gray", "gray_alpha", "rgb", "rgb_alpha".  name: what
-- messages call the bytes (a file's path).  An image that is truncated,
-- corrupt or of another format is an error naming it and the problem.
-- WebDataset{decode = data.decode_image} calls it as (bytes, ext).
function M.decode_image(bytes, opts)
  local op = "decode_image"
  -- decode(bytes, ext), as WebDataset's decode hook calls it: the format
  -- comes from the bytes, the extension says nothing more
  if type(opts) == "string" then opts = nil end
  opts = core.check_opts(opts, op, decode_opts)
  local mode, name = mode_arg(opts.mode, op), name_arg(opts.name, op)
  bytes = bytes_arg(bytes, op)
  local mh, mw = min_size(bytes, opts, name, op)
  return new(C.dl_image_decode, bytes, mode, mh, mw, name)
end

-- data.read_file(path) -> the file's bytes as a 1-D uint8 tensor
-- (torchvision.io.read_file).
function M.read_file(path)
  if type(path) ~= "string" then raise("read_file: path must be a string, got " .. show(path)) end
  return new(C.dl_read_file, path, "read_file")
end

-- data.read_image(path[, {mode =, min_size =, transform =}]): the file
-- read and decoded (torchvision.io.decode_image(path)); messages name the
-- path.
function M.read_image(path, opts)
  local op = "read_image"
  if type(path) ~= "string" then raise(op .. ": path must be a string, got " .. show(path)) end
  opts = core.check_opts(opts, op, decode_opts)
  local mode = mode_arg(opts.mode, op)
  local mh, mw = 0, 0
  if opts.min_size ~= nil then mh, mw = min_size(nil, opts, path, op) end
  local t, err = M._read(path, mode, mh, mw, opts.transform)
  if not t then raise(op .. ": " .. err) end
  return t
end

-- The runtime's last message without its op ("PATH: truncated JPEG: ..."),
-- for a caller's own prefix.
local function unprefixed() return (ffi.string(C.dl_last_error()):gsub("^[%w_]+: ", "", 1)) end

-- image._read(path, mode, min_h, min_w, tf): the file decoded (mode: its
-- code), at least min_h x min_w -- or, with 0, 0, at the size tf's
-- decode_min_size asks for where tf has one -- or nil and the message as
-- "PATH: problem".  The file's bytes go at once, not at the state's next
-- collection: a loader worker's Lua heap does not see the megabytes
-- behind its handles.  (read_image's path, and ImageFolder's.)
function M._read(path, mode, mh, mw, tf)
  local bytes = C.dl_read_file(path, "read")
  if bytes == nil then return nil, unprefixed() end
  bytes = own(bytes)
  if mh == 0 and mw == 0 and type(tf) == "table" and type(tf.decode_min_size) == "function" then
    local h = header()
    if C.dl_image_header_read(bytes, path, h) ~= 0 then
      C.dl_tensor_free_data(bytes)
      return nil, unprefixed()
    end
    if h[0].format == C.DL_IMAGE_JPEG then mh, mw = tf:decode_min_size(tonumber(h[0].height), tonumber(h[0].width)) end
  end
  local img = C.dl_image_decode(bytes, mode, mh, mw, path)
  C.dl_tensor_free_data(bytes)
  if img == nil then return nil, unprefixed() end
  return own(img)
end

-- Writes bytes (a uint8 tensor or a string) to path atomically: the old
-- file or the new one, never a mix.
local function write_bytes(path, b, op)
  if is_tensor(b) then
    files.write_atomic(path, { { C.dl_tensor_data(b), b:numel() } }, op)
  else
    files.write_atomic(path, { { b, #b } }, op)
  end
end

-- data.write_file(path, data): data (a uint8 tensor or a string) as the
-- file's bytes, atomically (torchvision.io.write_file).
function M.write_file(path, b)
  if type(path) ~= "string" then raise("write_file: path must be a string, got " .. show(path)) end
  if type(b) ~= "string" then b = bytes_arg(b, "write_file") end
  write_bytes(path, b, "write_file")
end

local function image_arg(img, op)
  if not is_tensor(img) then
    raise(("%s: expected an image tensor (uint8 [C, H, W]), got %s"):format(op, show(img)))
  end
  if C.dl_tensor_device(img) >= 0 then img = img:cpu() end
  return img
end

local function int_opt(v, dflt, lo, hi, op, what)
  if v == nil then return dflt end
  if not is_integer(v) or v < lo or v > hi then
    raise(("%s: %s must be an integer from %d to %d, got %s"):format(op, what, lo, hi, show(v)))
  end
  return v
end

-- data.encode_png(img[, compression_level = 6]) / data.encode_jpeg(img[,
-- quality = 75]) -> the encoded bytes, a 1-D uint8 tensor (torchvision's
-- names and defaults).  img: uint8 [C, H, W]; PNG takes 1-4 channels, JPEG
-- 1 or 3.
function M.encode_png(img, level)
  img = image_arg(img, "encode_png")
  return new(C.dl_image_encode_png, img, int_opt(level, 6, 0, 9, "encode_png", "compression_level"))
end

function M.encode_jpeg(img, quality)
  img = image_arg(img, "encode_jpeg")
  return new(C.dl_image_encode_jpeg, img, int_opt(quality, 75, 1, 100, "encode_jpeg", "quality"))
end

local function write_args(img, path, op)
  if type(img) == "string" and is_tensor(path) then
    raise(("%s: expected (image, path), as torchvision.io.%s(input, filename), got (path, image)"):format(op, op))
  end
  if type(path) ~= "string" then raise(("%s: path must be a string, got %s"):format(op, show(path))) end
end

-- data.write_png(img, path[, compression_level]) / data.write_jpeg(img,
-- path[, quality]): encoded and written atomically.
function M.write_png(img, path, level)
  write_args(img, path, "write_png")
  write_bytes(path, M.encode_png(img, level), "write_png")
end

function M.write_jpeg(img, path, quality)
  write_args(img, path, "write_jpeg")
  write_bytes(path, M.encode_jpeg(img, quality), "write_jpeg")
end

M._read_header = read_header
M._bytes_arg = bytes_arg
return M
