-- ddp.data.transforms_functional: torchvision.transforms.v2.functional's
-- kernels on tensor images (data.transforms.functional, usually
-- `local F = T.functional`): resize, crop, center_crop, resized_crop,
-- horizontal_flip, to_dtype, normalize, adjust_brightness / contrast /
-- saturation / hue, and fused_resize, the one-pass crop -> resize -> crop
-- -> flip -> to float32 -> normalize the transforms' fast path takes.
-- Images are uint8 or float32 tensors [C, H, W] or batches [N, C, H, W];
-- the arithmetic is C's (runtime/nn/image_resize.c, image_color.c).
-- Every function here takes the name errors give first (the transform's,
-- "Resize"); the public ones are bound to their own.
local core = require "ddp.core"
local C, ffi = core.C, core.ffi
local raise, show, is_tensor, is_integer = core.raise, core.show, core.is_tensor, core.is_integer
local new, fmt_shape = core.new, core.fmt_shape
local floor, min, max = math.floor, math.min, math.max
local type, ipairs = type, ipairs

core.add_lib_file(debug.getinfo(1, "S").source)

local M = {}

-- -- Arguments ----------------------------------------------------------------

-- img checked as an image; returns its dims, channels, height and width.
local function image_arg(op, img)
  if not is_tensor(img) then
    raise(("%s: expected an image tensor [C, H, W] or [N, C, H, W], got %s"):format(op, core.describe(img)))
  end
  local nd = img:dim()
  if nd ~= 3 and nd ~= 4 then
    raise(("%s: expected an image [C, H, W] or a batch of images [N, C, H, W], got shape %s")
          :format(op, fmt_shape(img:shape())))
  end
  local dt = img:dtype()
  if dt ~= "uint8" and dt ~= "float32" then
    raise(("%s: expected a uint8 or float32 image, got %s (convert it with to_dtype or :to())"):format(op, dt))
  end
  return nd, img:size(nd - 3), img:size(nd - 2), img:size(nd - 1)
end
M._image_arg = image_arg

-- A size as torchvision takes one: an integer, or a table of 1 or 2
-- positive integers; returned as a table of 1 or 2.
local function size_arg(op, size, what)
  if is_integer(size) then size = { size } end
  local ok = type(size) == "table" and not is_tensor(size) and (#size == 1 or #size == 2)
  if ok then
    for _, s in ipairs(size) do ok = ok and is_integer(s) and s > 0 end
  end
  if not ok then
    raise(("%s: %s must be a positive integer or a table {height, width} of them, got %s")
          :format(op, what or "size", type(size) == "table" and "{" .. table.concat(size, ", ") .. "}" or show(size)))
  end
  return { size[1], size[2] }
end
M._size_arg = size_arg

-- A {height, width} pair: an integer s is {s, s} (CenterCrop,
-- RandomResizedCrop).
local function pair_arg(op, size, what)
  local s = size_arg(op, size, what)
  return { s[1], s[2] or s[1] }
end
M._pair_arg = pair_arg

local interp_names = { bilinear = C.DL_INTERP_BILINEAR, nearest = C.DL_INTERP_NEAREST }

local function interp_arg(op, v)
  if v == nil then return "bilinear" end
  if interp_names[v] == nil then
    raise(('%s: interpolation must be "bilinear" or "nearest", got %s'):format(op, show(v)))
  end
  return v
end
M._interp_arg = interp_arg

local function bool_arg(op, v, name, dflt)
  if v == nil then return dflt end
  if type(v) ~= "boolean" then raise(("%s: %s must be true or false, got %s"):format(op, name, show(v))) end
  return v
end
M._bool_arg = bool_arg

-- A C call returning a tensor; its error named after op (the transform).
local function call(op, f, ...)
  local ok, r = pcall(new, f, ...)
  if not ok then
    local msg = core.last_error():gsub("^[%w_]+: ", "")
    raise(op .. ": " .. msg)
  end
  return r
end

-- Python's round (to even on a tie), which torchvision's crop anchors and
-- RandomResizedCrop's sizes use.
local function round_even(x)
  local f = floor(x)
  local d = x - f
  if d > 0.5 or (d == 0.5 and f % 2 == 1) then return f + 1 end
  return f
end
M._round_even = round_even

-- -- Sizes ----------------------------------------------------------------------

-- torchvision's _compute_resized_output_size: size {s} sets the shorter
-- side (the longer one keeps the aspect ratio, truncated; max_size bounds
-- it), {h, w} both, nil with max_size the longer side.
local function output_size(op, h, w, size, max_size)
  if max_size ~= nil and (not is_integer(max_size) or max_size <= 0) then
    raise(("%s: max_size must be a positive integer, got %s"):format(op, show(max_size)))
  end
  local short, long = min(h, w), max(h, w)
  local ns, nl
  if size == nil then
    if max_size == nil then raise(op .. ": size is nil; give a size, or max_size alone to bound the longer side") end
    ns, nl = floor(max_size * short / long), max_size
  elseif #size == 1 then
    ns, nl = size[1], floor(size[1] * long / short)
    if max_size ~= nil then
      if max_size <= size[1] then
        raise(("%s: max_size = %d must be strictly greater than the requested size for the smaller edge size = %d")
              :format(op, max_size, size[1]))
      end
      if nl > max_size then ns, nl = floor(max_size * ns / nl), max_size end
    end
  else
    if max_size ~= nil then
      raise(op .. ": max_size is only allowed when size is an integer (the smaller edge) or nil")
    end
    return size[1], size[2]
  end
  if w <= h then return nl, ns end
  return ns, nl
end
M._output_size = output_size

-- -- Geometry ---------------------------------------------------------------------

local buf_a, buf_b, buf_c = ffi.new("int64_t[4]"), ffi.new("int64_t[4]"), ffi.new("int64_t[4]")

local function fill4(buf, t)
  for i = 1, 4 do buf[i - 1] = t[i] end
  return buf
end

local function resize(op, img, size, opts)
  opts = core.check_opts(opts, op, { interpolation = true, antialias = true, max_size = true })
  local _, _, h, w = image_arg(op, img)
  if size ~= nil then size = size_arg(op, size) end
  local interp = interp_arg(op, opts.interpolation)
  local aa = bool_arg(op, opts.antialias, "antialias", true)
  local nh, nw = output_size(op, h, w, size, opts.max_size)
  if nh == h and nw == w then return img end  -- as torchvision: the image itself
  return call(op, C.dl_image_resize, img, nh, nw, interp_names[interp], aa and interp == "bilinear" and 1 or 0)
end
M._resize = resize

local function int_args(op, ...)
  local names = { "top", "left", "height", "width" }
  for i = 1, select("#", ...) do
    local v = select(i, ...)
    if not is_integer(v) then raise(("%s: %s must be an integer, got %s"):format(op, names[i], show(v))) end
  end
end

-- The window [top, top + height) x [left, left + width): a view when it
-- lies inside the image, else a new image with zeros outside (torchvision
-- pads so).
local function crop(op, img, top, left, height, width)
  local nd, _, h, w = image_arg(op, img)
  int_args(op, top, left, height, width)
  if height <= 0 or width <= 0 then
    raise(("%s: height and width must be positive, got %d x %d"):format(op, height, width))
  end
  local bottom, right = top + height, left + width
  if top >= 0 and left >= 0 and bottom <= h and right <= w then
    return img:narrow(nd - 2, top, height):narrow(nd - 1, left, width)
  end
  local shape = img:shape()
  shape[nd - 1], shape[nd] = height, width
  local out = require("ddp.tensor.factory").zeros(shape, { dtype = img:dtype(), device = img:device() })
  local r0, r1, c0, c1 = max(top, 0), min(bottom, h), max(left, 0), min(right, w)
  if r1 > r0 and c1 > c0 then
    out:narrow(nd - 2, r0 - top, r1 - r0):narrow(nd - 1, c0 - left, c1 - c0)
       :copy_(img:narrow(nd - 2, r0, r1 - r0):narrow(nd - 1, c0, c1 - c0))
  end
  return out
end
M._crop = crop

-- Where center_crop's window starts along a dim of n for a crop of k:
-- torchvision pads (k - n) // 2 before a crop larger than the image, else
-- takes round((n - k) / 2).
local function center_start(n, k)
  if k > n then return -floor((k - n) / 2) end
  return round_even((n - k) / 2)
end
M._center_start = center_start

local function center_crop(op, img, size)
  local _, _, h, w = image_arg(op, img)
  local s = pair_arg(op, size)
  return crop(op, img, center_start(h, s[1]), center_start(w, s[2]), s[1], s[2])
end
M._center_crop = center_crop

-- The fused chain (C's dl_image_resized_crop), opts as fused_resize's.
local function fused(op, img, opts)
  local _, c, h, w = image_arg(op, img)
  local cr = opts.crop or { 0, 0, h, w }
  local size = opts.size
  local win = opts.window or { 0, 0, size[1], size[2] }
  local dtype = opts.dtype or img:dtype()
  if dtype ~= img:dtype() and dtype ~= "float32" then
    raise(("%s: the fused path makes %s or float32, not %s"):format(op, img:dtype(), show(dtype)))
  end
  local mean, std, n = nil, nil, 0
  if opts.mean ~= nil then
    mean, std, n = opts.mean_c, opts.std_c, opts.nstat
    if mean == nil then
      mean, std, n = M._stats(op, opts.mean, opts.std, c)
    end
  end
  local interp = interp_arg(op, opts.interpolation)
  local aa = opts.antialias ~= false and interp == "bilinear"
  return call(op, C.dl_image_resized_crop, img, fill4(buf_a, cr), fill4(buf_b, { size[1], size[2], 0, 0 }),
              fill4(buf_c, win), interp_names[interp], aa and 1 or 0, opts.flip and 1 or 0,
              core.dtype_arg(dtype, op), opts.scale and 1 or 0, mean, std, n)
end
M._fused = fused

local function resized_crop(op, img, top, left, height, width, size, opts)
  opts = core.check_opts(opts, op, { interpolation = true, antialias = true })
  local _, _, h, w = image_arg(op, img)
  int_args(op, top, left, height, width)
  if height <= 0 or width <= 0 then
    raise(("%s: height and width must be positive, got %d x %d"):format(op, height, width))
  end
  size = size_arg(op, size)
  local interp = interp_arg(op, opts.interpolation)
  local aa = bool_arg(op, opts.antialias, "antialias", true)
  if top < 0 or left < 0 or top + height > h or left + width > w then
    -- a window reaching outside: torchvision's zero padding, then resize
    return resize(op, crop(op, img, top, left, height, width), size,
                  { interpolation = interp, antialias = aa })
  end
  local nh, nw = output_size(op, height, width, size, nil)
  return fused(op, img, { crop = { top, left, height, width }, size = { nh, nw }, interpolation = interp,
                          antialias = aa })
end
M._resized_crop = resized_crop

local function horizontal_flip(op, img)
  image_arg(op, img)
  return call(op, C.dl_image_hflip, img)
end
M._horizontal_flip = horizontal_flip

-- -- dtype and normalisation ----------------------------------------------------------

local scale_dtypes = { uint8 = true, float32 = true }

local function to_dtype(op, img, dtype, opts)
  opts = core.check_opts(opts, op, { scale = true })
  if not is_tensor(img) then raise(("%s: expected an image tensor, got %s"):format(op, core.describe(img))) end
  local d = core.dtype_name(core.dtype_arg(dtype, op))
  local scale = bool_arg(op, opts.scale, "scale", false)
  local from = img:dtype()
  if from == d then return img end  -- as torchvision: the image itself
  if not scale or (from ~= "uint8" and d ~= "uint8") then return img:to(d) end  -- float to float
  if from == "uint8" and d == "float64" then return img:to(d):mul_(1 / 255) end
  image_arg(op, img)
  if not scale_dtypes[d] then
    raise(("%s: scale = true converts between uint8 and float32, not to %s"):format(op, d))
  end
  return call(op, C.dl_image_to_dtype, img, core.dtype_arg(d, op), 1)
end
M._to_dtype = to_dtype

-- mean and std (tables of numbers, 1 or one per channel) as C arrays.
function M._stats(op, mean, std, c)
  local function list(v, what)
    if type(v) == "number" then v = { v } end
    if type(v) ~= "table" or is_tensor(v) or #v == 0 then
      raise(("%s: %s must be a table of numbers, got %s"):format(op, what, show(v)))
    end
    for _, x in ipairs(v) do
      if type(x) ~= "number" then raise(("%s: %s must hold numbers, got %s"):format(op, what, show(x))) end
    end
    return v
  end
  mean, std = list(mean, "mean"), list(std, "std")
  if #mean ~= #std then
    raise(("%s: mean has %d values but std has %d"):format(op, #mean, #std))
  end
  if c ~= nil and #mean ~= 1 and #mean ~= c then
    raise(("%s: mean and std have %d values, but the image has %d channels (give 1 or %d)")
          :format(op, #mean, c, c))
  end
  for _, s in ipairs(std) do
    if s == 0 then raise(op .. ": std evaluated to zero, leading to division by zero") end
  end
  local m, s = ffi.new("double[?]", #mean), ffi.new("double[?]", #std)
  for i = 1, #mean do m[i - 1], s[i - 1] = mean[i], std[i] end
  return m, s, #mean
end

local function normalize(op, img, mean, std, opts)
  opts = core.check_opts(opts, op, { inplace = true })
  local _, c = image_arg(op, img)
  if img:dtype() ~= "float32" then
    raise(("%s: expected a float32 image, got %s (ToDtype(\"float32\", {scale = true}) makes one)")
          :format(op, img:dtype()))
  end
  local m, s, n = M._stats(op, mean, std, c)
  local inplace = bool_arg(op, opts.inplace, "inplace", false)
  return call(op, C.dl_image_normalize, img, m, s, n, inplace and 1 or 0)
end
M._normalize = normalize

-- -- Colour ------------------------------------------------------------------------------

local function adjust(op, kind, what, img, factor)
  local _, c = image_arg(op, img)
  if c ~= 1 and c ~= 3 then
    raise(("%s: expected an image of 1 or 3 channels, got shape %s"):format(op, fmt_shape(img:shape())))
  end
  if type(factor) ~= "number" then raise(("%s: %s must be a number, got %s"):format(op, what, show(factor))) end
  if kind == C.DL_ADJUST_HUE then
    if not (factor >= -0.5 and factor <= 0.5) then
      raise(("%s: %s (%s) is not in [-0.5, 0.5]"):format(op, what, show(factor)))
    end
  elseif not (factor >= 0) then
    raise(("%s: %s (%s) is not non-negative"):format(op, what, show(factor)))
  end
  return call(op, C.dl_image_adjust, img, kind, factor)
end
M._adjust = adjust
function M._adjust_brightness(op, img, f) return adjust(op, C.DL_ADJUST_BRIGHTNESS, "brightness_factor", img, f) end
function M._adjust_contrast(op, img, f) return adjust(op, C.DL_ADJUST_CONTRAST, "contrast_factor", img, f) end
function M._adjust_saturation(op, img, f) return adjust(op, C.DL_ADJUST_SATURATION, "saturation_factor", img, f) end
function M._adjust_hue(op, img, f) return adjust(op, C.DL_ADJUST_HUE, "hue_factor", img, f) end

-- -- The public functions -------------------------------------------------------------------

-- F.resize(img, size[, {interpolation = "bilinear" | "nearest", antialias = true, max_size =}])
function M.resize(img, size, opts) return resize("resize", img, size, opts) end
-- F.crop(img, top, left, height, width)
function M.crop(img, top, left, height, width) return crop("crop", img, top, left, height, width) end
-- F.center_crop(img, size)
function M.center_crop(img, size) return center_crop("center_crop", img, size) end
-- F.resized_crop(img, top, left, height, width, size[, {interpolation =, antialias =}])
function M.resized_crop(img, top, left, height, width, size, opts)
  return resized_crop("resized_crop", img, top, left, height, width, size, opts)
end
function M.horizontal_flip(img) return horizontal_flip("horizontal_flip", img) end
M.hflip = M.horizontal_flip
-- F.to_dtype(img, dtype[, {scale = false}])
function M.to_dtype(img, dtype, opts) return to_dtype("to_dtype", img, dtype, opts) end
-- F.normalize(img, mean, std[, {inplace = false}])
function M.normalize(img, mean, std, opts) return normalize("normalize", img, mean, std, opts) end
function M.adjust_brightness(img, f) return M._adjust_brightness("adjust_brightness", img, f) end
function M.adjust_contrast(img, f) return M._adjust_contrast("adjust_contrast", img, f) end
function M.adjust_saturation(img, f) return M._adjust_saturation("adjust_saturation", img, f) end
function M.adjust_hue(img, f) return M._adjust_hue("adjust_hue", img, f) end

-- F.fused_resize(img, {size = {h, w}, crop = {top, left, h, w}, window =
-- {top, left, h, w}, flip =, dtype = "float32", scale =, mean =, std =,
-- interpolation =, antialias =}): crop (default: all of img, inside it),
-- resize to size, keep the window of that (default: all), flip, convert,
-- normalise -- in one pass; the same values as the separate functions.
function M.fused_resize(img, opts)
  local op = "fused_resize"
  opts = core.check_opts(opts, op, { size = true, crop = true, window = true, flip = true, dtype = true,
                                     scale = true, mean = true, std = true, interpolation = true,
                                     antialias = true })
  local _, _, h, w = image_arg(op, img)
  local size = pair_arg(op, opts.size, "size")
  local function window(v, what, H, W)
    if v == nil then return nil end
    local ok = type(v) == "table" and #v == 4
    for i = 1, 4 do ok = ok and is_integer(v[i]) end
    if not ok or v[3] <= 0 or v[4] <= 0 or v[1] < 0 or v[2] < 0 or v[1] + v[3] > H or v[2] + v[4] > W then
      raise(("%s: %s must be {top, left, height, width} inside the %dx%d %s, got %s")
            :format(op, what, H, W, what == "crop" and "image" or "resized image",
                    type(v) == "table" and "{" .. table.concat(v, ", ") .. "}" or show(v)))
    end
    return v
  end
  local o = {
    size = size, crop = window(opts.crop, "crop", h, w), window = window(opts.window, "window", size[1], size[2]),
    flip = bool_arg(op, opts.flip, "flip", false), dtype = opts.dtype, scale = bool_arg(op, opts.scale, "scale", false),
    mean = opts.mean, std = opts.std, interpolation = opts.interpolation,
    antialias = bool_arg(op, opts.antialias, "antialias", true),
  }
  if (o.mean == nil) ~= (o.std == nil) then raise(op .. ": give mean and std together") end
  return fused(op, img, o)
end

-- F.get_dimensions(img) -> channels, height, width; F.get_size(img) -> height, width.
function M.get_dimensions(img)
  local _, c, h, w = image_arg("get_dimensions", img)
  return c, h, w
end
function M.get_size(img)
  local _, _, h, w = image_arg("get_size", img)
  return h, w
end

return M
