-- ddp.data.transforms: torchvision.transforms.v2's image transforms -- the
-- deterministic ones against torchvision 0.29 (tests/golden/make_transforms.py:
-- uint8 within 1 level with at most 1% of the values off by one, float32
-- within 1e-5), the fused one-pass chain against the unfused transforms,
-- the random parameters (RandomResizedCrop's get_params, flips, ColorJitter)
-- as functions of sample_rng's (seed, epoch, index), decode_min_size, the
-- reprs, and an error naming the transform for each misuse.
local ddp = require "ddp"
local T = require "ddp.data.transforms"
local rng = require "ddp.data.sample_rng"
local ffi = require "ffi"
local F = T.functional

local fails = require("helpers.fails").located("transforms_spec.lua")

-- -- Inputs as make_transforms.py's image(): MINSTD numbers after ten
-- discarded, bits 8..15 (uint8) or the number / (2^31 - 1) (float32).
local function image(seed, shape, dtype)
  local n = 1
  for _, d in ipairs(shape) do n = n * d end
  local s = seed
  for _ = 1, 10 do s = s * 48271 % 2147483647 end
  local buf = ffi.new(dtype == "uint8" and "uint8_t[?]" or "float[?]", n)
  for i = 0, n - 1 do
    s = s * 48271 % 2147483647
    buf[i] = dtype == "uint8" and math.floor(s / 256) % 256 or s / 2147483647
  end
  return ddp.from_blob(buf, shape, { dtype = dtype }):clone()
end

local function max_abs(a, b)
  return (a:to("float64") - b:to("float64")):abs():max():item()
end

local function off_by_one(a, b)
  return ((a:to("float64") - b:to("float64")):abs():gt(0.5)):sum():item() / a:numel()
end

local function shape_of(t) return table.concat(t:shape(), "x") end

-- uint8 results within 1 level, at most `frac` of them off by one;
-- float32 ones within atol.
local function close(got, want, what, frac, atol)
  assert.equals(shape_of(want), shape_of(got), what .. ": shape")
  assert.equals(want:dtype(), got:dtype(), what .. ": dtype")
  local d = max_abs(got, want)
  if want:dtype() == "uint8" then
    assert(d <= 1, ("%s: uint8 values differ by %g"):format(what, d))
    local f = off_by_one(got, want)
    assert(f <= (frac or 0.01), ("%s: %.2f%% of the values are off by one"):format(what, 100 * f))
  else
    assert(d <= (atol or 1e-5), ("%s: float32 values differ by %g"):format(what, d))
  end
end

describe("transforms against torchvision 0.29", function()
  local golden = dofile("tests/golden/transforms_cases.lua")
  local blob = assert(io.open("tests/golden/transforms_out.bin", "rb")):read("*a")
  local inputs = {}
  for name, spec in pairs(golden.inputs) do inputs[name] = image(spec.seed, spec.shape, spec.dtype) end
  inputs.ramp = ddp.arange(256):to("uint8"):view(1, 16, 16)

  local function want(c)
    local p = ffi.cast("const uint8_t *", blob) + c.offset
    return ddp.from_blob(ffi.cast(c.dtype == "uint8" and "uint8_t *" or "float *", p), c.shape,
                         { dtype = c.dtype, owner = blob }):clone()
  end

  local function run(c)
    local x = inputs[c.input]
    if c.view then
      local nd = x:dim()
      x = x:narrow(nd - 2, c.view[1], c.view[3]):narrow(nd - 1, c.view[2], c.view[4])
    end
    if c.op == "chain" then
      -- crop -> resize -> flip -> to float32 -> normalize, fused and not
      local t, l, h, w, size, flip, mean, std = unpack(c.args)
      local fused = F.fused_resize(x, { crop = { t, l, h, w }, size = size, flip = flip, dtype = "float32",
                                        scale = true, mean = mean, std = std })
      local y = F.resized_crop(x, t, l, h, w, size)
      if flip then y = F.horizontal_flip(y) end
      y = F.normalize(F.to_dtype(y, "float32", { scale = true }), mean, std)
      return fused, y
    end
    return F[c.op](x, unpack(c.args))
  end

  for _, c in ipairs(golden.cases) do
    it(c.name, function()
      local got, unfused = run(c)
      close(got, want(c), c.name)
      if unfused then close(unfused, want(c), c.name .. " (unfused)") end
    end)
  end

  it("crop and center_crop inside the image are views, as torchvision's slicing", function()
    local x = inputs.A
    local v = F.crop(x, 5, 7, 20, 30)
    v:fill_(0)
    assert.equals(0, x:narrow(1, 5, 20):narrow(2, 7, 30):sum():item())
    assert.equals(3 * 10 * 12, F.center_crop(inputs.J, { 10, 12 }):numel())
  end)

  it("resize to the image's own size, and to_dtype to its dtype, return the image itself", function()
    local x = inputs.J
    assert.is_true(rawequal(x, F.resize(x, { 16, 20 })))
    assert.is_true(rawequal(x, F.to_dtype(x, "uint8", { scale = true })))
  end)
end)
