-- Image files: data.decode_image / read_image / image_info / encode_png,
-- encode_jpeg / write_png, write_jpeg / read_file, write_file.  Files PIL
-- wrote (JPEG 4:2:0, 4:4:4, progressive, gray, CMYK, restart markers; PNG
-- of every color type, palettes with and without transparency, 16 and 1
-- bits, Adam7: tests/golden/make_images.py) decoded exactly as
-- torchvision 0.29's decode_image in every mode; scaled JPEG decoding
-- exactly as PIL's draft(); round trips through the encoders; truncated,
-- corrupt, foreign and oversized images refused naming the image (and
-- 2,000 mutated files never crash).
local ddp = require "ddp"
local data = require "ddp.data"
local T = data.transforms
local ffi = require "ffi"
local shell = require "helpers.shell"
local fails = require("helpers.fails").located("image_spec.lua")

local root, q = shell.root, shell.q
local golden = root .. "/tests/golden/images/"
local cases = dofile(golden .. "cases.lua")
local dir = shell.tempdir()
teardown(function() os.execute("rm -rf " .. q(dir)) end)
local function path(name) return dir .. "/" .. name end

local function shape(t) return table.concat(t:shape(), "x") end
local function max_diff(a, b)
  return (a:to("int64") - b:to("int64")):abs():max():item()
end
local function bytes_of(file) return data.read_file(golden .. file) end

-- The CRC-32 (zlib's) of s as 4 big-endian bytes: a PNG chunk's.
local function crc32_be(s)
  local bit = require "bit"
  local crc = 0xffffffff
  for i = 1, #s do
    crc = bit.bxor(crc, s:byte(i))
    for _ = 1, 8 do
      local low = bit.band(crc, 1)
      crc = bit.rshift(crc, 1)
      if low == 1 then crc = bit.bxor(crc, 0xedb88320) end
    end
  end
  crc = bit.bnot(crc)
  return string.char(bit.band(bit.rshift(crc, 24), 255), bit.band(bit.rshift(crc, 16), 255),
                     bit.band(bit.rshift(crc, 8), 255), bit.band(crc, 255))
end

describe("decode_image against torchvision", function()
  for _, c in ipairs(cases) do
    it(c.file .. ": every mode as torchvision.io.decode_image gives it", function()
      local pil = {}
      for _, m in ipairs(c.from_pil) do pil[m] = true end
      for _, m in ipairs(c.modes) do
        local want = data.load_npy(golden .. "dec/" .. c.file .. "." .. m .. ".npy")
        local got = data.read_image(golden .. c.file, { mode = m })
        assert.equal(shape(want), shape(got), c.file .. " " .. m)
        assert.equal("uint8", got:dtype())
        -- PIL's gray conversion rounds its own way: within 1 where it is the reference
        assert.is_true(max_diff(got, want) <= (pil[m] and 1 or 0), c.file .. " " .. m)
      end
    end)
  end

  it("reads the header alone: format, size, stored channels", function()
    for _, c in ipairs(cases) do
      local info = data.image_info(golden .. c.file)
      assert.same({ c.format, c.height, c.width, c.channels },
                  { info.format, info.height, info.width, info.channels }, c.file)
    end
    assert.is_true(data.image_info(golden .. "progressive.jpg").progressive)
    assert.is_true(data.image_info(golden .. "interlaced.png").progressive)
    assert.equal(16, data.image_info(bytes_of("rgb16.png")).bit_depth)
  end)

  it("tells the format from the bytes, not the file's name; takes a string too", function()
    local png = shell.slurp(golden .. "rgb.png")
    shell.writefile(path("really_a_png.jpg"), png)
    local a = data.read_image(path("really_a_png.jpg"))
    local b = data.decode_image(png)
    assert.equal(0, max_diff(a, b))
    assert.equal("3x29x37", shape(b))
  end)

  it("the unchanged mode: CMYK JPEGs and palette PNGs come out as RGB", function()
    assert.equal("3x29x37", shape(data.read_image(golden .. "cmyk.jpg")))
    assert.equal(0, max_diff(data.read_image(golden .. "cmyk.jpg"), data.read_image(golden .. "cmyk.jpg", { mode = "rgb" })))
    assert.equal("4x29x37", shape(data.read_image(golden .. "palette_trns.png")))
    assert.equal("3x29x37", shape(data.read_image(golden .. "rgb.png", { mode = "RGB" })))  -- torchvision's spelling
  end)
end)

describe("scaled JPEG decoding", function()
  for _, f in ipairs { "big.jpg", "progressive.jpg", "rgb420.jpg" } do
    it(f .. ": 1/2, 1/4 and 1/8 exactly as PIL's draft()", function()
      local info = data.image_info(golden .. f)
      for _, m in ipairs { 2, 4, 8 } do
        local want = data.load_npy(golden .. "draft/" .. f .. "." .. m .. ".npy")
        local h, w = math.ceil(info.height / m), math.ceil(info.width / m)
        local got = data.read_image(golden .. f, { mode = "rgb", min_size = { h, w } })
        assert.equal(shape(want), shape(got), f .. " 1/" .. m)
        assert.equal(0, max_diff(got, want), f .. " 1/" .. m)
      end
    end)
  end

  it("takes the largest reduction that keeps the asked size, from min_size or the transform", function()
    local bytes = bytes_of("big.jpg")  -- 77 x 101
    assert.equal("3x77x101", shape(data.decode_image(bytes, { min_size = { 77, 1 } })))
    assert.equal("3x39x51", shape(data.decode_image(bytes, { min_size = { 39, 40 } })))  -- 4/8
    assert.equal("3x49x64", shape(data.decode_image(bytes, { min_size = { 40, 40 } })))  -- 5/8
    assert.equal("3x10x13", shape(data.decode_image(bytes, { min_size = { 1, 1 } })))    -- 1/8
    assert.equal("3x77x101", shape(data.decode_image(bytes, { min_size = { 0, 0 } })))
    -- Resize(20) of 77 x 101 needs 20 x 27 (Resize:decode_min_size keeps the
    -- aspect ratio, rounding up): 2/8 gives 20 x 26, so 3/8 (29 x 38)
    local tf = T.Compose { T.Resize(20), T.CenterCrop(16) }
    assert.same({ 20, 27 }, { tf:decode_min_size(77, 101) })
    assert.equal("3x29x38", shape(data.decode_image(bytes, { transform = tf })))
    assert.equal("1x29x38", shape(data.read_image(golden .. "big.jpg", { transform = tf, mode = "gray" })))
    -- a plain function, or a PNG: in full
    assert.equal("3x77x101", shape(data.decode_image(bytes, { transform = function(x) return x end })))
    assert.equal("3x77x101", shape(data.decode_image(bytes_of("interlaced.png"), { transform = tf })))
    -- the result through the transform has the transform's size
    assert.equal("3x16x16", shape(tf(data.decode_image(bytes, { transform = tf }))))
  end)
end)

describe("encoding", function()
  it("PNG round trips exactly for 1 to 4 channels, any strides", function()
    local base = data.read_image(golden .. "rgba.png")  -- 4 x 29 x 37
    for c = 1, 4 do
      local img = base:narrow(0, 0, c):contiguous()
      local back = data.decode_image(data.encode_png(img))
      assert.equal(shape(img), shape(back))
      assert.equal(0, max_diff(img, back))
    end
    local cut = base:narrow(0, 1, 3):narrow(2, 5, 20)      -- a view inside the image
    local transposed = base:narrow(0, 0, 3):transpose(1, 2)
    for _, v in ipairs { cut, transposed } do
      assert.equal(0, max_diff(v, data.decode_image(data.encode_png(v, 9))))
    end
    assert.is_true(data.encode_png(base, 0):numel() > data.encode_png(base, 9):numel())
  end)

  it("JPEG is close at quality 95 and smaller at 20; files are written atomically", function()
    local img = data.read_image(golden .. "big.jpg")
    local hi, lo = data.encode_jpeg(img, 95), data.encode_jpeg(img, 20)
    assert.is_true(lo:numel() < hi:numel())
    local back = data.decode_image(hi)
    assert.equal(shape(img), shape(back))
    assert.is_true((back:to("float32") - img:to("float32")):abs():mean():item() < 3)
    local gray = data.read_image(golden .. "big.jpg", { mode = "gray" })
    data.write_jpeg(gray, path("g.jpg"), 90)
    assert.equal(1, data.image_info(path("g.jpg")).channels)
    data.write_png(img, path("a.png"))
    assert.equal(0, max_diff(img, data.read_image(path("a.png"))))
    data.write_file(path("copy.jpg"), hi)
    assert.equal(hi:numel(), data.read_file(path("copy.jpg")):numel())
    local left = shell.sh("ls " .. q(dir) .. " | grep -c tmp || true"):match("%d+")
    assert.equal("0", left)
  end)

  it("refuses what it cannot encode, naming it", function()
    local img = data.read_image(golden .. "rgba.png")
    fails(function() data.encode_jpeg(img) end, "encode_jpeg: expected a uint8 image of shape [C, H, W] with 1 or 3 channels, got uint8 [4, 29, 37]")
    fails(function() data.encode_png(img:to("float32")) end, "encode_png: expected a uint8 image", "got float32 [4, 29, 37]")
    fails(function() data.encode_png(img:narrow(0, 0, 1):squeeze(0)) end, "got uint8 [29, 37]")
    fails(function() data.encode_png(img, 10) end, "encode_png: compression_level must be an integer from 0 to 9, got 10")
    fails(function() data.encode_jpeg(img:narrow(0, 0, 3), 0) end, "quality must be an integer from 1 to 100, got 0")
    fails(function() data.write_png(path("x.png"), img) end, "write_png: expected (image, path)")
    fails(function() data.write_png(img, path("no/such/dir/x.png")) end, "write_png: ", "no/such/dir/x.png")
  end)
end)

describe("bad images", function()
  it("names a foreign format and says what to do", function()
    fails(function() data.decode_image("GIF89a\1\0\1\0", { name = "cats/1.gif" }) end,
          "decode_image: cats/1.gif is not a JPEG or PNG image: it is a GIF image; convert it to PNG or JPEG")
    fails(function() data.decode_image("BM\0\0\0\0") end, "the image is not a JPEG or PNG image: it is a BMP image")
    fails(function() data.decode_image("RIFF\0\0\0\0WEBPVP8 ") end, "it is a WebP image")
    fails(function() data.decode_image("hello world") end, "it starts with bytes 68 65 6c 6c 6f 20 77 6f")
    fails(function() data.decode_image("") end, "decode_image: the image is empty (0 bytes)")
    shell.writefile(path("notes.jpg"), "just text")
    fails(function() data.read_image(path("notes.jpg")) end, "read_image: " .. path("notes.jpg") .. " is not a JPEG or PNG image")
    fails(function() data.read_image(path("missing.jpg")) end, "read_image: " .. path("missing.jpg") .. ": cannot open: No such file or directory")
    fails(function() data.read_image(dir) end, "read_image: " .. dir .. ": not a regular file")
    fails(function() data.decode_image(ddp.zeros(4)) end, "decode_image: expected the encoded image as a 1-D uint8 CPU tensor (or a string), got float32")
    fails(function() data.decode_image(bytes_of("rgb.png"), { mode = "bgr" }) end, 'mode must be "unchanged", "gray"')
    fails(function() data.decode_image(bytes_of("rgb.png"), { min_size = { -1, 3 } }) end, "min_size must be {height, width}")
    fails(function() data.image_info(42) end, "image_info: expected a file's path or the encoded bytes")
  end)

  it("a truncated JPEG or PNG is an error, never a picture finished in gray", function()
    for _, f in ipairs { "big.jpg", "progressive.jpg", "restart.jpg", "interlaced.png", "rgb.png", "rgb16.png" } do
      local b = bytes_of(f)
      local n = b:numel()
      for k = 1, 9 do
        local cut = b:narrow(0, 0, math.floor(n * k / 10))
        local ok, err = pcall(data.decode_image, cut, { name = f })
        assert.is_false(ok, f .. " cut at " .. k .. "/10 decoded")
        assert.truthy(tostring(err):find("decode_image: " .. f .. ": ", 1, true), err)
      end
      -- cut inside the pixels: the message says truncated
      local err = select(2, pcall(data.decode_image, b:narrow(0, 0, math.floor(n * 0.8)), { name = f }))
      assert.truthy(tostring(err):find("truncated", 1, true), err)
    end
  end)

  it("an image claiming more than 2^28 pixels is refused before anything is allocated", function()
    local png = shell.slurp(golden .. "rgb.png")
    -- IHDR width and height: 100,000 x 100,000, with the chunk's CRC made right
    local ihdr = "IHDR\0\1\134\160\0\1\134\160" .. png:sub(25, 29)
    local big = png:sub(1, 12) .. ihdr .. crc32_be(ihdr) .. png:sub(34)
    fails(function() data.decode_image(big, { name = "bomb.png" }) end,
          "decode_image: bomb.png: a 100000 x 100000 image has more than the 268435456 pixels an image may have")
    local jpg = shell.slurp(golden .. "rgb420.jpg")
    local sof = jpg:find("\255\192", 1, true)  -- SOF0: length(2) precision(1) height(2) width(2)
    local bomb = jpg:sub(1, sof + 4) .. "\234\96\234\96" .. jpg:sub(sof + 9)
    fails(function() data.decode_image(bomb) end, "a 60000 x 60000 image has more than the 268435456 pixels")
  end)

  it("2,000 mutated files: each decodes or raises a message naming the image, never crashes", function()
    ddp.manual_seed(7)
    local files = { "rgb420.jpg", "progressive.jpg", "restart.jpg", "rgb.png", "palette_trns.png", "interlaced.png",
                    "gray16.png", "cmyk.jpg" }
    local decoded, refused = 0, 0
    for _, f in ipairs(files) do
      local b = bytes_of(f)
      local n = b:numel()
      for _ = 1, 250 do
        local m = b:clone()
        local p = m:data_ptr()
        local u = ffi.cast("uint8_t *", p)
        for _ = 1, 1 + math.floor(ddp.rand(1):item() * 4) do
          local at = math.floor(ddp.rand(1):item() * n)
          u[at] = math.floor(ddp.rand(1):item() * 256)
        end
        local ok, err = pcall(data.decode_image, m, { name = "m-" .. f, mode = "rgb" })
        if ok then
          decoded = decoded + 1
          assert.equal(3, err:size(0))
        else
          refused = refused + 1
          assert.truthy(tostring(err):find("decode_image: m-" .. f, 1, true), err)
        end
      end
    end
    assert.equal(2000, decoded + refused)
    assert.is_true(refused > 100 and decoded > 100, decoded .. " decoded, " .. refused .. " refused")
  end)
end)
