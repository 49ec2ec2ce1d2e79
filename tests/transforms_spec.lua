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

describe("the fused pass", function()
  local u8 = image(11, { 3, 61, 83 }, "uint8")
  local f32 = image(12, { 3, 61, 83 }, "float32")
  local batch = image(13, { 2, 3, 30, 40 }, "uint8")
  local mean, std = { 0.485, 0.456, 0.406 }, { 0.229, 0.224, 0.225 }

  -- The same chain fused and not, from the same (seed, epoch, index).
  local function both(list, x, index)
    local fused, plain = T.Compose(list), T.Compose(list)
    plain.fuse = false
    assert(fused:fused_count(x) >= 2 and plain:fused_count(x) == 0)
    rng.begin(7, 0, index)
    local a = fused(x)
    rng.begin(7, 0, index)
    local b = plain(x)
    rng.finish()
    return a, b
  end

  local chains = {
    { "RandomResizedCrop, flip, ToDtype, Normalize", function()
      return { T.RandomResizedCrop(24), T.RandomHorizontalFlip(), T.ToDtype("float32", { scale = true }),
               T.Normalize(mean, std) } end },
    { "RandomResizedCrop, flip, ToTensor, Normalize (a PyTorch script's names)", function()
      return { T.RandomResizedCrop(24), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(mean, std) } end },
    { "RandomResizedCrop without antialias, flip always", function()
      return { T.RandomResizedCrop({ 20, 28 }, { antialias = false }), T.RandomHorizontalFlip(1),
               T.ToDtype("float32", { scale = true }) } end },
    { "RandomResizedCrop nearest, flip", function()
      return { T.RandomResizedCrop(17, { interpolation = "nearest" }), T.RandomHorizontalFlip() } end },
    { "Resize, CenterCrop, ToDtype, Normalize (evaluation)", function()
      return { T.Resize(40), T.CenterCrop(32), T.ToDtype("float32", { scale = true }), T.Normalize(mean, std) } end },
    { "Resize {h, w} upward, ToDtype without scale", function()
      return { T.Resize({ 70, 90 }), T.ToDtype("float32") } end },
    { "ToImage first, RandomResizedCrop, ToDtype", function()
      return { T.ToImage(), T.RandomResizedCrop(19), T.ToDtype("float32", { scale = true }) } end },
    { "CenterCrop, ToDtype, Normalize of one value", function()
      return { T.CenterCrop({ 25, 37 }), T.ToDtype("float32", { scale = true }), T.Normalize(0.5, 0.25) } end },
  }
  for _, ch in ipairs(chains) do
    it("gives the unfused chain's values: " .. ch[1], function()
      for _, x in ipairs({ u8, f32, batch }) do
        for index = 0, 5 do
          local a, b = both(ch[2](), x, index)
          assert.equals(shape_of(b), shape_of(a))
          assert.equals(b:dtype(), a:dtype())
          assert(max_abs(a, b) <= 1e-6, ch[1] .. ": " .. max_abs(a, b))
        end
      end
    end)
  end

  it("goes on with the transforms after the fused ones, and leaves a CenterCrop that pads unfused", function()
    local a, b = both({ T.RandomResizedCrop(16), T.ToDtype("float32", { scale = true }),
                        T.ColorJitter { brightness = 0.5 }, T.Normalize(mean, std) }, u8, 3)
    assert(max_abs(a, b) <= 1e-6)
    local pads = T.Compose { T.Resize(20), T.CenterCrop(30), T.ToDtype("float32", { scale = true }) }
    assert.equals(0, pads:fused_count(u8))
    assert.equals("3x30x30", shape_of(pads(u8)))
    assert.equals(2, T.Compose({ T.Resize(20), T.CenterCrop(16), T.ColorJitter { hue = 0.1 } }):fused_count(u8))
    assert.equals(0, T.Compose({ T.ColorJitter { hue = 0.1 }, T.Resize(20), T.ToDtype("float32") }):fused_count(u8))
  end)

  it("is F.fused_resize: crop, size, window, flip, dtype, scale, mean and std", function()
    local a = F.fused_resize(u8, { crop = { 3, 5, 40, 50 }, size = { 30, 36 }, window = { 2, 4, 20, 25 }, flip = true,
                                   dtype = "float32", scale = true, mean = mean, std = std })
    local b = F.resized_crop(u8, 3, 5, 40, 50, { 30, 36 })
    b = F.normalize(F.to_dtype(F.horizontal_flip(F.crop(b, 2, 4, 20, 25)), "float32", { scale = true }), mean, std)
    assert.equals(shape_of(b), shape_of(a))
    assert(max_abs(a, b) <= 1e-6)
    assert.equals("uint8", F.fused_resize(u8, { size = 20 }):dtype())
  end)
end)

describe("random parameters", function()
  it("come from sample_rng: the same (seed, epoch, index) gives the same output, another index another crop", function()
    local x = image(21, { 3, 64, 80 }, "uint8")
    local t = T.Compose { T.RandomResizedCrop(20), T.RandomHorizontalFlip(), T.ColorJitter { brightness = 0.3, hue = 0.1 } }
    rng.begin(1, 2, 3)
    local a = t(x)
    ddp.manual_seed(99)  -- the global generator plays no part
    rng.begin(1, 2, 3)
    local b = t(x)
    assert.equals(0, max_abs(a, b))
    local crops = {}
    for index = 0, 19 do
      rng.begin(1, 2, index)
      crops[table.concat({ T.RandomResizedCrop(20):get_params(64, 80) }, ",")] = true
    end
    rng.finish()
    local n = 0
    for _ in pairs(crops) do n = n + 1 end
    assert(n >= 18, "only " .. n .. " different crops in 20 samples")
  end)

  it("RandomResizedCrop.get_params: inside the image, the area and aspect ratio in range, spread over them", function()
    local t = T.RandomResizedCrop(8, { scale = { 0.2, 0.9 }, ratio = { 0.5, 2 } })
    local lo, hi = math.huge, 0
    for index = 0, 1999 do
      rng.begin(5, 0, index)
      local top, left, h, w = t:get_params(300, 400)
      assert(top >= 0 and left >= 0 and top + h <= 300 and left + w <= 400)
      local frac, ratio = h * w / (300 * 400), w / h
      -- rounding each side to an integer moves both a little
      assert(frac > 0.2 * 0.98 and frac < 0.9 * 1.02, frac)
      assert(ratio > 0.5 * 0.98 and ratio < 2 * 1.02, ratio)
      lo, hi = math.min(lo, frac), math.max(hi, frac)
    end
    rng.finish()
    assert(lo < 0.25 and hi > 0.85, lo .. " " .. hi)
  end)

  it("RandomResizedCrop.get_params falls back to the central crop of the nearest ratio after 10 tries", function()
    local t = T.RandomResizedCrop(8, { scale = { 0.95, 1 } })
    rng.begin(0, 0, 0)
    assert.same({ 0, 493, 10, 13 }, { t:get_params(10, 1000) })  -- w = round(10 * 4 / 3)
    assert.same({ 493, 0, 13, 10 }, { t:get_params(1000, 10) })  -- h = round(10 / (3 / 4))
    rng.finish()
  end)

  it("RandomHorizontalFlip flips with probability p", function()
    local x = ddp.arange(6):to("uint8"):view(1, 2, 3)
    local t, flips = T.RandomHorizontalFlip(0.3), 0
    for index = 0, 999 do
      rng.begin(9, 1, index)
      if t(x):get(0, 0, 0) == 2 then flips = flips + 1 end
    end
    rng.finish()
    assert(flips > 250 and flips < 350, flips)
    assert.equals(0, T.RandomHorizontalFlip(0)(x):get(0, 0, 0))
    assert.equals(2, T.RandomHorizontalFlip(1)(x):get(0, 0, 0))
  end)

  it("ColorJitter draws its factors in range and applies the four in every order", function()
    local t = T.ColorJitter { brightness = 0.4, contrast = { 0.5, 0.7 }, saturation = 0.2, hue = 0.1 }
    assert.same({ 0.6, 1.4 }, t.brightness)
    local orders = {}
    for index = 0, 499 do
      rng.begin(3, 0, index)
      local order, f = t:get_params()
      orders[table.concat(order)] = true
      assert(f[1] >= 0.6 and f[1] < 1.4 and f[2] >= 0.5 and f[2] < 0.7)
      assert(f[3] >= 0.8 and f[3] < 1.2 and f[4] >= -0.1 and f[4] < 0.1)
    end
    rng.finish()
    local n = 0
    for _ in pairs(orders) do n = n + 1 end
    assert.equals(24, n)
    -- the factors of one sample, applied in its order, are what the transform does
    local x = image(31, { 3, 12, 14 }, "uint8")
    rng.begin(3, 0, 17)
    local order, f = t:get_params()
    rng.begin(3, 0, 17)
    local got = t(x)
    rng.finish()
    local fns = { F.adjust_brightness, F.adjust_contrast, F.adjust_saturation, F.adjust_hue }
    local want = x
    for _, i in ipairs(order) do want = fns[i](want, f[i]) end
    assert.equals(0, max_abs(got, want))
  end)
end)

describe("decode_min_size", function()
  it("of Resize: the output's size scaled to the image's shape, or the image's own when it grows", function()
    assert.same({ 256, 342 }, { T.Resize(256):decode_min_size(1500, 2000) })
    assert.same({ 342, 256 }, { T.Resize(256):decode_min_size(2000, 1500) })
    assert.same({ 100, 200 }, { T.Resize(256):decode_min_size(100, 200) })
    assert.same({ 300, 400 }, { T.Resize({ 300, 200 }):decode_min_size(1500, 2000) })
    -- Compose asks its first transform; CenterCrop needs the whole image
    assert.same({ 256, 342 }, { T.Compose({ T.Resize(256), T.CenterCrop(224) }):decode_min_size(1500, 2000) })
    assert.same({ 1500, 2000 }, { T.CenterCrop(224):decode_min_size(1500, 2000) })
    assert.same({ 256, 342 }, { T.Compose({ T.ToImage(), T.Resize(256) }):decode_min_size(1500, 2000) })
  end)

  it("of RandomResizedCrop: every crop of an image at least that size is at least the output's size", function()
    local t = T.RandomResizedCrop({ 224, 200 })
    for _, hw in ipairs({ { 3000, 4000 }, { 4000, 3000 }, { 1000, 5000 }, { 1200, 1500 } }) do
      local h2, w2 = t:decode_min_size(hw[1], hw[2])
      assert(h2 <= hw[1] and w2 <= hw[2])
      for index = 0, 2999 do
        rng.begin(2, 0, index)
        local _, _, ch, cw = t:get_params(h2, w2)
        assert(ch >= 224 and cw >= 200, ("%dx%d decoded at %dx%d gave a crop of %dx%d"):format(hw[1], hw[2], h2, w2, ch, cw))
      end
    end
    rng.finish()
    local h2, w2 = t:decode_min_size(6000, 8000)
    assert(h2 < 3000 and w2 < 4000, h2 .. "x" .. w2)  -- a big image may decode at half size or less
    -- a small one has crops below the output's size at its own size already
    assert.same({ 600, 800 }, { t:decode_min_size(600, 800) })
  end)
end)

describe("ToTensor", function()
  it("is ToDtype(float32, scale = true) under the name PyTorch scripts write", function()
    local img = ddp.arange(3 * 5 * 7):remainder(256):to("uint8"):view(3, 5, 7)
    local a, b = T.ToTensor()(img), T.ToDtype("float32", { scale = true })(img)
    assert.equals("float32", a:dtype())
    assert.equals(0, (a - b):abs():max():item())
    assert.equals(1, (img:to("float32") / 255 - a):abs():max():item() < 1e-7 and 1 or 0)
    -- it fuses with the crop and the normalisation as ToDtype does
    local chain = T.Compose { T.RandomResizedCrop(4), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(0.5, 0.25) }
    assert.equals(4, chain:fused_count(img))
    local ok, err = pcall(T.ToTensor, "float16")
    assert.is_false(ok)
    assert.truthy(tostring(err):find("ToTensor: takes no arguments", 1, true), err)
  end)
end)

describe("the transforms' reprs", function()
  it("read as torchvision's", function()
    local mean, std = { 0.485, 0.456, 0.406 }, { 0.229, 0.224, 0.225 }
    for _, c in ipairs({
      { T.Resize(256), "Resize(size=[256], interpolation=bilinear, antialias=True)" },
      { T.Resize({ 100, 200 }, { interpolation = "nearest", antialias = false }),
        "Resize(size=[100, 200], interpolation=nearest, antialias=False)" },
      { T.Resize(nil, { max_size = 300 }), "Resize(interpolation=bilinear, max_size=300, antialias=True)" },
      { T.Resize(256, { max_size = 400 }), "Resize(size=[256], interpolation=bilinear, max_size=400, antialias=True)" },
      { T.CenterCrop(224), "CenterCrop(size=(224, 224))" },
      { T.RandomResizedCrop(224), "RandomResizedCrop(size=(224, 224), scale=(0.08, 1.0), "
        .. "ratio=(0.75, 1.3333333333333333), interpolation=bilinear, antialias=True)" },
      { T.RandomHorizontalFlip(), "RandomHorizontalFlip(p=0.5)" },
      { T.ToDtype("float32", { scale = true }), "ToDtype(dtype=float32, scale=True)" },
      { T.Normalize(mean, std), "Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225], inplace=False)" },
      { T.ColorJitter { brightness = 0.4, contrast = 0.4, saturation = 0.4, hue = 0.1 },
        "ColorJitter(brightness=(0.6, 1.4), contrast=(0.6, 1.4), saturation=(0.6, 1.4), hue=(-0.1, 0.1))" },
      { T.ColorJitter(), "ColorJitter()" },
      { T.ToImage(), "ToImage()" },
      { T.ToTensor(), "ToTensor()" },
      { T.Compose { T.RandomResizedCrop(224), T.RandomHorizontalFlip() },
        "Compose(\n      RandomResizedCrop(size=(224, 224), scale=(0.08, 1.0), ratio=(0.75, 1.3333333333333333), "
        .. "interpolation=bilinear, antialias=True)\n      RandomHorizontalFlip(p=0.5)\n)" },
    }) do
      assert.equals(c[2], tostring(c[1]))
    end
  end)
end)

describe("the transforms' checks", function()
  local x = image(41, { 3, 20, 24 }, "uint8")

  it("normalize in place writes the image", function()
    local y = F.to_dtype(x, "float32", { scale = true })
    local z = T.Normalize(0.5, 0.5, { inplace = true })(y)
    assert.is_true(require("ddp.core").same(y, z))
    assert(max_abs(y, F.to_dtype(x, "float32", { scale = true }):sub(0.5):div(0.5)) <= 1e-6)
  end)

  it("name the transform and the problem", function()
    fails(function() T.Resize(10)(ddp.zeros(3, 4)) end, "Resize: expected an image [C, H, W] or a batch", "[3, 4]")
    fails(function() T.Resize(10)(ddp.zeros(3, 4, 4, { dtype = "int64" })) end, "Resize: expected a uint8 or float32 image, got int64")
    fails(function() T.Resize(10)("img") end, "Resize: expected an image tensor")
    fails(function() T.Resize(0) end, "Resize: size must be a positive integer")
    fails(function() T.Resize({ 1, 2, 3 }) end, "Resize: size must be")
    fails(function() T.Resize({ 10, 20 }, { max_size = 30 }) end, "max_size is only allowed")
    fails(function() T.Resize(30, { max_size = 30 }) end, "max_size = 30 must be strictly greater")
    fails(function() T.Resize(10, { interpolation = "bicubic" }) end, 'interpolation must be "bilinear" or "nearest"')
    fails(function() T.Resize(10, { antialiasing = true }) end, "Resize: unknown option")
    fails(function() T.CenterCrop(-1) end, "CenterCrop: size must be a positive integer")
    fails(function() T.RandomResizedCrop(10, { scale = { 0.5, 0.1 } }) end, "RandomResizedCrop: scale must be {lo, hi}")
    fails(function() T.RandomHorizontalFlip(2) end, "RandomHorizontalFlip: p must be a probability")
    fails(function() T.ToDtype("float16x") end, "ToDtype: unknown dtype")
    fails(function() T.Normalize({ 0.5, 0.5 }, { 0.5 }) end, "Normalize: mean has 2 values but std has 1")
    fails(function() T.Normalize({ 0.5 }, { 0 }) end, "Normalize: std evaluated to zero")
    fails(function() T.Normalize(0.5, 0.5)(x) end, "Normalize: expected a float32 image, got uint8")
    fails(function() T.Normalize({ 0.5, 0.5 }, { 1, 1 })(x:to("float32")) end,
          "Normalize: mean and std have 2 values, but the image has 3 channels")
    fails(function() T.ColorJitter { brightness = -1 } end, "ColorJitter: if brightness is a single number")
    fails(function() T.ColorJitter { hue = 0.7 } end, "ColorJitter: hue values should be between (-0.5, 0.5)")
    fails(function() T.ColorJitter { brightness = 0.2 }(ddp.zeros(4, 5, 5, { dtype = "uint8" })) end,
          "ColorJitter: expected an image of 1 or 3 channels, got shape [4, 5, 5]")
    fails(function() T.Compose { T.Resize(3), 5 } end, "Compose: transform 2 is not callable")
    fails(function() F.adjust_hue(x, 0.6) end, "adjust_hue: hue_factor (0.6) is not in [-0.5, 0.5]")
    fails(function() F.adjust_brightness(x, -0.1) end, "adjust_brightness: brightness_factor (-0.1) is not non-negative")
    fails(function() F.crop(x, 0, 0, 0, 5) end, "crop: height and width must be positive")
    fails(function() F.fused_resize(x, { size = 8, crop = { 0, 0, 30, 10 } }) end,
          "fused_resize: crop must be {top, left, height, width} inside the 20x24 image")
    fails(function() F.to_dtype(x, "int32", { scale = true }) end, "to_dtype: scale = true converts between uint8 and float32")
    fails(function() T.Resize(10):decode_min_size(0, 10) end, "Resize:decode_min_size: expected a positive height")
  end)

  it("say an image on a GPU is transformed on the CPU (the CUDA emulator's device)", function()
    local shell = require "helpers.shell"
    local out = shell.sh("DDPLUA_CUDA_EMU=1 DDPLUA_CUDA_LIB=" .. shell.q(shell.root .. "/build/libddplua_cudaemu.so")
      .. " " .. shell.q(shell.ddplua) .. [[ -e 'local ddp = require "ddp"; local T = require "ddp.data.transforms"
        local x = ddp.zeros(3, 8, 8, {dtype = "uint8", device = "cuda"})
        for _, t in ipairs({T.Resize(4), T.RandomHorizontalFlip(1), T.ToDtype("float32", {scale = true}),
                            T.ColorJitter{hue = 0.2}, T.Compose{T.CenterCrop(4), T.ToDtype("float32")}}) do
          print(select(2, pcall(t, x)))
        end
        print(T.CenterCrop(10)(x):device())' 2>&1]])
    for _, name in ipairs({ "Resize", "RandomHorizontalFlip", "ToDtype", "ColorJitter", "Compose" }) do
      assert.truthy(out:find(name .. ": image transforms run on the CPU, but the image is on cuda:0; transform it "
                             .. "before moving the batch to the device", 1, true), out)
    end
    assert.truthy(out:find("\ncuda:0\n"), out)  -- a padded crop stays on the image's device
  end)

  it("reach C's checks with the transform's name", function()
    -- what Lua leaves to C (a tensor freed under the transform) still names it
    local y = x:clone()
    y:free()
    fails(function() T.Resize(10)(y) end, "Resize: ")
  end)
end)
