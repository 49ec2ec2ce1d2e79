-- ddp.data.transforms: torchvision.transforms.v2's image transforms by
-- their names and arguments (data.transforms; `local T = require
-- "ddp.data.transforms"`): Compose, Resize, CenterCrop, RandomResizedCrop,
-- RandomHorizontalFlip, ToDtype, Normalize, ColorJitter, ToImage, and the
-- functions under T.functional (ddp.data.transforms_functional).  Images
-- are uint8 or float32 tensors [C, H, W] (batches [N, C, H, W] too); each
-- transform is callable, t(img), and prints as torchvision's repr.
--
-- Random parameters come from ddp.data.sample_rng, a pure function of
-- (seed, epoch, sample index) inside a loader, so a sample's augmentation
-- is the same whatever the number of workers or ranks.  Compose runs a
-- crop or resize followed by a flip, ToDtype("float32") and Normalize as
-- one C pass (the same values, no image in between).
local core = require "ddp.core"
local F = require "ddp.data.transforms_functional"
local rng = require "ddp.data.sample_rng"
local raise, show, is_tensor, is_integer = core.raise, core.show, core.is_tensor, core.is_integer
local floor, ceil, min, max, sqrt, log, exp, abs = math.floor, math.ceil, math.min, math.max, math.sqrt,
                                                  math.log, math.exp, math.abs
local type, ipairs, tostring = type, ipairs, tostring

core.add_lib_file(debug.getinfo(1, "S").source)

local M = { functional = F }
M.InterpolationMode = { BILINEAR = "bilinear", NEAREST = "nearest" }

-- -- Printing as Python does --------------------------------------------------

-- A float as Python's repr: the shortest digits that read back, "1.0" for
-- an integral value.
local function pyfloat(x)
  if x == floor(x) and abs(x) < 1e16 then return ("%.1f"):format(x) end
  for p = 1, 17 do
    local s = ("%." .. p .. "g"):format(x)
    if tonumber(s) == x then return s end
  end
  return ("%.17g"):format(x)
end

local function pybool(b) return b and "True" or "False" end

local function seq(vals, open, close, f)
  local parts = {}
  for i, v in ipairs(vals) do parts[i] = f and f(v) or tostring(v) end
  return open .. table.concat(parts, ", ") .. close
end

-- -- The base class ---------------------------------------------------------------

local Transform = core.class("Transform")
M.Transform = Transform

-- Metamethods first: subclasses copy them when made.
function Transform:__call(img) return self:forward(img) end
function Transform:__tostring() return self:repr() end
function Transform:repr() return self.__name .. "()" end

-- The smallest image (height, width) a JPEG may be decoded at for this
-- transform to see what it needs (scaled decoding): the image's own size
-- when no smaller one will do.
function Transform:decode_min_size(h, w) return h, w end

-- The (h2, w2) of an h x w image scaled by the one factor that makes it at
-- least need_h x need_w (never above the image's size).
local function scaled_size(h, w, need_h, need_w)
  local s = max(need_h / h, need_w / w)
  if s >= 1 then return h, w end
  return min(h, ceil(h * s - 1e-9)), min(w, ceil(w * s - 1e-9))
end

local function size_args(op, h, w)
  if not is_integer(h) or not is_integer(w) or h <= 0 or w <= 0 then
    raise(("%s:decode_min_size: expected a positive height and width, got %s, %s"):format(op, show(h), show(w)))
  end
end

-- -- Compose --------------------------------------------------------------------------

local Compose = core.class("Compose", Transform)
M.Compose = Compose

local function callable(t)
  if type(t) == "function" then return true end
  local mt = getmetatable(t)
  return type(mt) == "table" and mt.__call ~= nil
end

-- T.Compose{t1, t2, ...[, fuse = false]}: the transforms in turn; fuse =
-- false turns the one-pass fast path off (the same values, slower).
function Compose:init(list)
  if type(list) ~= "table" or is_tensor(list) then
    raise("Compose: expected a table of transforms, got " .. show(list))
  end
  for k in pairs(list) do
    if not (is_integer(k) and k >= 1 and k <= #list) and k ~= "fuse" then
      raise(("Compose: unknown key %s (a list of transforms, and fuse =)"):format(show(k)))
    end
  end
  local ts = {}
  for i, t in ipairs(list) do
    if not callable(t) then raise(("Compose: transform %d is not callable (got %s)"):format(i, show(t))) end
    ts[i] = t
  end
  self.transforms = ts
  self.fuse = list.fuse ~= false
end

local is_a = core.is_instance

-- The fused plan for the transforms from the first on, for this image: the
-- geometry (RandomResizedCrop; Resize, and a CenterCrop after it that
-- stays inside; CenterCrop inside the image), then a RandomHorizontalFlip,
-- a ToDtype to float32 and a Normalize, each optional; nil when fewer than
-- two steps would merge.  Decided before any random draw, drawn in the
-- order the transforms would draw unfused.
local function plan_fused(ts, k, img)
  if not is_tensor(img) then return nil end
  local nd = img:dim()
  if nd ~= 3 and nd ~= 4 then return nil end
  local dt = img:dtype()
  if dt ~= "uint8" and dt ~= "float32" then return nil end
  local h, w = img:size(nd - 2), img:size(nd - 1)
  local p, first = {}, k
  local t = ts[k]
  k = k + 1
  if is_a(t, M.RandomResizedCrop) then
    p.rrc = t
  elseif is_a(t, M.Resize) then
    local rh, rw = t:out_size(h, w)
    p.resize, p.size = t, { rh, rw }
    local c = ts[k]
    if is_a(c, M.CenterCrop) and c.size[1] <= rh and c.size[2] <= rw then
      p.window = { F._center_start(rh, c.size[1]), F._center_start(rw, c.size[2]), c.size[1], c.size[2] }
      k = k + 1
    end
  elseif is_a(t, M.CenterCrop) and t.size[1] <= h and t.size[2] <= w then
    p.crop = { F._center_start(h, t.size[1]), F._center_start(w, t.size[2]), t.size[1], t.size[2] }
    p.size = { t.size[1], t.size[2] }
  else
    return nil
  end
  if is_a(ts[k], M.RandomHorizontalFlip) then p.flip, k = ts[k], k + 1 end
  if is_a(ts[k], M.ToDtype) and ts[k].dtype == "float32" then p.todtype, k = ts[k], k + 1 end
  if is_a(ts[k], M.Normalize) and (p.todtype or dt == "float32") then p.normalize, k = ts[k], k + 1 end
  p.last = k - 1
  if p.last - first < 1 then return nil end
  p.h, p.w = h, w
  return p
end

local function run_fused(p, img)
  local o = { size = p.size, crop = p.crop, window = p.window }
  if p.rrc then
    local t = p.rrc
    local top, left, ch, cw = t:get_params(p.h, p.w)
    o.crop, o.size, o.interpolation, o.antialias = { top, left, ch, cw }, t.size, t.interpolation, t.antialias
  elseif p.resize then
    o.interpolation, o.antialias = p.resize.interpolation, p.resize.antialias
  end
  o.flip = p.flip and p.flip:draw() or false
  if p.todtype then o.dtype, o.scale = "float32", p.todtype.scale end
  if p.normalize then
    local n = p.normalize
    local _, c = F._image_arg("Normalize", img)
    o.mean, o.std = n.mean, n.std
    o.mean_c, o.std_c, o.nstat = F._stats("Normalize", n.mean, n.std, c)
  end
  return F._fused("Compose", img, o)
end

function Compose:forward(img)
  local ts, k = self.transforms, 1
  while is_a(ts[k], M.ToImage) do  -- (torchvision's chains often start so)
    img = ts[k](img)
    k = k + 1
  end
  if self.fuse then
    local p = plan_fused(ts, k, img)
    if p then img, k = run_fused(p, img), p.last + 1 end
  end
  for i = k, #ts do img = ts[i](img) end
  return img
end

-- How many of the transforms (after any leading ToImage) the fast path
-- runs as one pass for img: 0 when it does not apply.  No draws.
function Compose:fused_count(img)
  local ts, k = self.transforms, 1
  while is_a(ts[k], M.ToImage) do k = k + 1 end
  local p = self.fuse and plan_fused(ts, k, img)
  return p and p.last - k + 1 or 0
end

function Compose:repr()
  local lines = { "Compose(" }
  for _, t in ipairs(self.transforms) do
    local s = tostring(t):gsub("\n", "\n      ")
    lines[#lines + 1] = "      " .. s
  end
  lines[#lines + 1] = ")"
  return table.concat(lines, "\n")
end

-- The first transform's (after any ToImage), which sees the decoded image.
function Compose:decode_min_size(h, w)
  size_args("Compose", h, w)
  local k = 1
  while is_a(self.transforms[k], M.ToImage) do k = k + 1 end
  local t = self.transforms[k]
  local mt = type(t) == "table" and getmetatable(t)
  if mt and type(t.decode_min_size) == "function" then return t:decode_min_size(h, w) end
  return h, w
end

-- -- Resize, CenterCrop, RandomResizedCrop ------------------------------------------------

local Resize = core.class("Resize", Transform)
M.Resize = Resize

-- T.Resize(size[, {interpolation = "bilinear", antialias = true, max_size =}]):
-- size an integer (the shorter side) or {height, width}; nil with max_size.
function Resize:init(size, opts)
  local op = "Resize"
  opts = core.check_opts(opts, op, { interpolation = true, antialias = true, max_size = true })
  self.size = size ~= nil and F._size_arg(op, size) or nil
  self.interpolation = F._interp_arg(op, opts.interpolation)
  self.antialias = F._bool_arg(op, opts.antialias, "antialias", true)
  self.max_size = opts.max_size
  F._output_size(op, 1000, 1000, self.size, self.max_size)  -- the argument checks, now
end

function Resize:out_size(h, w)
  return F._output_size("Resize", h, w, self.size, self.max_size)
end

function Resize:forward(img)
  return F._resize("Resize", img, self.size, { interpolation = self.interpolation, antialias = self.antialias,
                                               max_size = self.max_size })
end

function Resize:repr()
  local parts = {}
  if self.size then parts[#parts + 1] = "size=" .. seq(self.size, "[", "]") end
  parts[#parts + 1] = "interpolation=" .. self.interpolation
  if self.max_size then parts[#parts + 1] = "max_size=" .. self.max_size end
  parts[#parts + 1] = "antialias=" .. pybool(self.antialias)
  return "Resize(" .. table.concat(parts, ", ") .. ")"
end

-- What the resize makes of an h x w image: a decoded image at least that
-- size is only ever scaled down.
function Resize:decode_min_size(h, w)
  size_args("Resize", h, w)
  local oh, ow = self:out_size(h, w)
  return scaled_size(h, w, oh, ow)
end

local CenterCrop = core.class("CenterCrop", Transform)
M.CenterCrop = CenterCrop

-- T.CenterCrop(size): size an integer (square) or {height, width}; a crop
-- larger than the image is padded with zeros, as torchvision.
function CenterCrop:init(size)
  self.size = F._pair_arg("CenterCrop", size)
end

function CenterCrop:forward(img)
  return F._center_crop("CenterCrop", img, self.size)
end

function CenterCrop:repr()
  return ("CenterCrop(size=(%d, %d))"):format(self.size[1], self.size[2])
end

local RandomResizedCrop = core.class("RandomResizedCrop", Transform)
M.RandomResizedCrop = RandomResizedCrop

local function range_arg(op, v, name, dflt)
  if v == nil then return { dflt[1], dflt[2] } end
  if type(v) ~= "table" or #v ~= 2 or type(v[1]) ~= "number" or type(v[2]) ~= "number" then
    raise(("%s: %s must be a table of two numbers {lo, hi}, got %s"):format(op, name, show(v)))
  end
  if not (v[1] > 0 and v[1] <= v[2]) then
    raise(("%s: %s must be {lo, hi} with 0 < lo <= hi, got {%s, %s}"):format(op, name, pyfloat(v[1]), pyfloat(v[2])))
  end
  return { v[1], v[2] }
end

-- T.RandomResizedCrop(size[, {scale = {0.08, 1}, ratio = {3/4, 4/3},
-- interpolation = "bilinear", antialias = true}])
function RandomResizedCrop:init(size, opts)
  local op = "RandomResizedCrop"
  opts = core.check_opts(opts, op, { scale = true, ratio = true, interpolation = true, antialias = true })
  self.size = F._pair_arg(op, size)
  self.scale = range_arg(op, opts.scale, "scale", { 0.08, 1.0 })
  self.ratio = range_arg(op, opts.ratio, "ratio", { 3 / 4, 4 / 3 })
  self.interpolation = F._interp_arg(op, opts.interpolation)
  self.antialias = F._bool_arg(op, opts.antialias, "antialias", true)
  self.log_ratio = { log(self.ratio[1]), log(self.ratio[2]) }
end

-- torchvision's get_params for an h x w image -> top, left, height, width:
-- ten tries at an area fraction in scale and a log-uniform aspect ratio,
-- then the central crop of the ratio nearest the image's.
function RandomResizedCrop:get_params(h, w)
  local area = h * w
  local lr = self.log_ratio
  for _ = 1, 10 do
    local target = area * rng.uniform(self.scale[1], self.scale[2])
    local aspect = exp(rng.uniform(lr[1], lr[2]))
    local cw = F._round_even(sqrt(target * aspect))
    local ch = F._round_even(sqrt(target / aspect))
    if cw > 0 and cw <= w and ch > 0 and ch <= h then
      local top = rng.randint(0, h - ch + 1)
      local left = rng.randint(0, w - cw + 1)
      return top, left, ch, cw
    end
  end
  local in_ratio = w / h
  local rlo, rhi = min(self.ratio[1], self.ratio[2]), max(self.ratio[1], self.ratio[2])
  local cw, ch
  if in_ratio < rlo then
    cw = w
    ch = F._round_even(cw / rlo)
  elseif in_ratio > rhi then
    ch = h
    cw = F._round_even(ch * rhi)
  else
    cw, ch = w, h
  end
  return floor((h - ch) / 2), floor((w - cw) / 2), ch, cw
end

function RandomResizedCrop:forward(img)
  local op = "RandomResizedCrop"
  local _, _, h, w = F._image_arg(op, img)
  local top, left, ch, cw = self:get_params(h, w)
  return F._fused(op, img, { crop = { top, left, ch, cw }, size = self.size, interpolation = self.interpolation,
                             antialias = self.antialias })
end

function RandomResizedCrop:repr()
  return ("RandomResizedCrop(size=(%d, %d), scale=%s, ratio=%s, interpolation=%s, antialias=%s)")
         :format(self.size[1], self.size[2], seq(self.scale, "(", ")", pyfloat), seq(self.ratio, "(", ")", pyfloat),
                 self.interpolation, pybool(self.antialias))
end

-- Conservative: a decoded image of at least this size gives every crop
-- get_params can make (the smallest area at the extreme ratios, and the
-- fallback's crops, a pixel of rounding spare) at least the output size.
function RandomResizedCrop:decode_min_size(h, w)
  size_args("RandomResizedCrop", h, w)
  local oh, ow = self.size[1] + 1, self.size[2] + 1
  local rlo, rhi = min(self.ratio[1], self.ratio[2]), max(self.ratio[1], self.ratio[2])
  local a = sqrt(self.scale[1] * h * w)
  -- scale s of the image: crops of height >= s * a / sqrt(rhi), width >= s * a * sqrt(rlo)
  local s = max(oh * sqrt(rhi) / a, ow / (a * sqrt(rlo)), oh / h, ow / w, oh * rlo / w, ow / (rhi * h))
  return scaled_size(h, w, s * h, s * w)
end

-- -- Flip, dtype, normalisation -----------------------------------------------------------

local RandomHorizontalFlip = core.class("RandomHorizontalFlip", Transform)
M.RandomHorizontalFlip = RandomHorizontalFlip

-- T.RandomHorizontalFlip([p = 0.5])
function RandomHorizontalFlip:init(p)
  if p == nil then p = 0.5 end
  if type(p) ~= "number" or not (p >= 0 and p <= 1) then
    raise("RandomHorizontalFlip: p must be a probability in [0, 1], got " .. show(p))
  end
  self.p = p
end

-- Whether this sample flips (one draw, as torchvision's torch.rand(1) < p).
function RandomHorizontalFlip:draw() return rng.bernoulli(self.p) end

function RandomHorizontalFlip:forward(img)
  F._image_arg("RandomHorizontalFlip", img)
  if self:draw() then return F._horizontal_flip("RandomHorizontalFlip", img) end
  return img
end

function RandomHorizontalFlip:repr() return ("RandomHorizontalFlip(p=%s)"):format(pyfloat(self.p)) end

local ToDtype = core.class("ToDtype", Transform)
M.ToDtype = ToDtype

-- T.ToDtype(dtype[, {scale = false}]): scale = true maps uint8's [0, 255]
-- to float's [0, 1] (and back).
function ToDtype:init(dtype, opts)
  local op = "ToDtype"
  opts = core.check_opts(opts, op, { scale = true })
  self.dtype = core.dtype_name(core.dtype_arg(dtype, op))
  self.scale = F._bool_arg(op, opts.scale, "scale", false)
end

function ToDtype:forward(img) return F._to_dtype("ToDtype", img, self.dtype, { scale = self.scale }) end

-- (torchvision prints only scale; the dtype is shown too)
function ToDtype:repr() return ("ToDtype(dtype=%s, scale=%s)"):format(self.dtype, pybool(self.scale)) end

-- T.ToTensor(): the name a PyTorch script still writes (torchvision's v1
-- ToTensor; v2 keeps it, deprecated, for ToImage + ToDtype(float32,
-- scale=True)): a uint8 [C, H, W] image as float32 in [0, 1].  A ToDtype,
-- so it fuses with the crop before it as ToDtype does.
local ToTensor = core.class("ToTensor", ToDtype)
M.ToTensor = ToTensor

function ToTensor:init(...)
  if select("#", ...) > 0 then raise("ToTensor: takes no arguments (ToDtype(dtype, {scale =}) does)") end
  ToDtype.init(self, "float32", { scale = true })
end

function ToTensor:repr() return "ToTensor()" end

local Normalize = core.class("Normalize", Transform)
M.Normalize = Normalize

-- T.Normalize(mean, std[, {inplace = false}]): per channel (x - mean) / std
-- of a float32 image; 1 value or one per channel.
function Normalize:init(mean, std, opts)
  local op = "Normalize"
  opts = core.check_opts(opts, op, { inplace = true })
  if type(mean) == "number" then mean = { mean } end
  if type(std) == "number" then std = { std } end
  F._stats(op, mean, std, nil)
  self.mean, self.std = { unpack(mean) }, { unpack(std) }
  self.inplace = F._bool_arg(op, opts.inplace, "inplace", false)
end

function Normalize:forward(img)
  return F._normalize("Normalize", img, self.mean, self.std, { inplace = self.inplace })
end

function Normalize:repr()
  return ("Normalize(mean=%s, std=%s, inplace=%s)"):format(seq(self.mean, "[", "]", pyfloat),
                                                           seq(self.std, "[", "]", pyfloat), pybool(self.inplace))
end

-- -- ColorJitter -----------------------------------------------------------------------------

local ColorJitter = core.class("ColorJitter", Transform)
M.ColorJitter = ColorJitter

-- torchvision's _check_input: a number v is the range center -+ v (the
-- lower end clipped at 0 but for hue), a table {lo, hi} as it is, inside
-- bound; nil when the range is only the center (no change).
local function jitter_range(v, name, center, lo, hi, clip)
  if v == nil then return nil end
  local r
  if type(v) == "number" then
    if v < 0 then raise(("ColorJitter: if %s is a single number, it must be non negative, got %s"):format(name, show(v))) end
    r = { center - v, center + v }
    if clip then r[1] = max(r[1], 0) end
  elseif type(v) == "table" and #v == 2 and type(v[1]) == "number" and type(v[2]) == "number" then
    r = { v[1], v[2] }
  else
    raise(("ColorJitter: %s must be a number or a table {lo, hi}, got %s"):format(name, show(v)))
  end
  if not (lo <= r[1] and r[1] <= r[2] and r[2] <= hi) then
    raise(("ColorJitter: %s values should be between (%s, %s), but got (%s, %s)")
          :format(name, pyfloat(lo), hi == math.huge and "inf" or pyfloat(hi), pyfloat(r[1]), pyfloat(r[2])))
  end
  if r[1] == center and r[2] == center then return nil end
  return r
end

local JITTER = { "brightness", "contrast", "saturation", "hue" }

-- T.ColorJitter{brightness =, contrast =, saturation =, hue =}
function ColorJitter:init(opts)
  opts = core.check_opts(opts, "ColorJitter", { brightness = true, contrast = true, saturation = true, hue = true })
  self.brightness = jitter_range(opts.brightness, "brightness", 1, 0, math.huge, true)
  self.contrast = jitter_range(opts.contrast, "contrast", 1, 0, math.huge, true)
  self.saturation = jitter_range(opts.saturation, "saturation", 1, 0, math.huge, true)
  self.hue = jitter_range(opts.hue, "hue", 0, -0.5, 0.5, false)
end

local ADJUST = { F._adjust_brightness, F._adjust_contrast, F._adjust_saturation, F._adjust_hue }

-- The draws of one sample: the order of the four (a random permutation),
-- then each factor asked for, in torchvision's order.
function ColorJitter:get_params()
  local order = { 1, 2, 3, 4 }
  for i = 4, 2, -1 do
    local j = rng.randint(1, i + 1)
    order[i], order[j] = order[j], order[i]
  end
  local f = {}
  for i, name in ipairs(JITTER) do
    local r = self[name]
    if r then f[i] = rng.uniform(r[1], r[2]) end
  end
  return order, f
end

function ColorJitter:forward(img)
  F._image_arg("ColorJitter", img)
  local order, f = self:get_params()
  for _, i in ipairs(order) do
    if f[i] ~= nil then img = ADJUST[i]("ColorJitter", img, f[i]) end
  end
  return img
end

function ColorJitter:repr()
  local parts = {}
  for _, name in ipairs(JITTER) do
    if self[name] then parts[#parts + 1] = name .. "=" .. seq(self[name], "(", ")", pyfloat) end
  end
  return "ColorJitter(" .. table.concat(parts, ", ") .. ")"
end

-- -- ToImage -----------------------------------------------------------------------------------

local ToImage = core.class("ToImage", Transform)
M.ToImage = ToImage

-- T.ToImage(): images here are tensors already (the image reader makes
-- uint8 [C, H, W]), so it hands the tensor back, checked.
function ToImage:forward(img)
  if not is_tensor(img) then raise("ToImage: expected an image tensor, got " .. core.describe(img)) end
  return img
end

return M
