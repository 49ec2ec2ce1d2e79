-- data.ImageFolder: torchvision's classes, class_to_idx, sample order and
-- pixels on a tree with the orderings that matter (tests/golden/
-- make_images.py: nested folders, capitals, "sub-x" before "sub/deeper",
-- endings in capitals, files not taken); options (extensions,
-- is_valid_file, loader, mode, allow_empty); scaled JPEG decoding from the
-- transform; loader workers with the batches of num_workers = 0 and the
-- sample list shared, not copied; a bad file named with its sample, or
-- skipped and counted (in workers too); folders that give no dataset
-- refused, naming why.
local ddp = require "ddp"
local data = require "ddp.data"
local T = data.transforms
local shell = require "helpers.shell"
local fails = require("helpers.fails").located("image_folder_spec.lua")

local root, q = shell.root, shell.q
local golden = root .. "/tests/golden/images/"
local folder = golden .. "folder"
local cases = dofile(golden .. "folder_cases.lua")
local dir = shell.tempdir()
teardown(function() os.execute("rm -rf " .. q(dir)) end)

local function shape(t) return table.concat(t:shape(), "x") end
local function max_diff(a, b) return (a:to("int64") - b:to("int64")):abs():max():item() end

-- A folder tree of generated images: {["cls/name.png"] = {h, w}} (JPEG for
-- .jpg), each image a gradient seeded by its index.
local function make_tree(name, tree)
  local top = dir .. "/" .. name
  local k = 0
  local keys = {}
  for rel in pairs(tree) do keys[#keys + 1] = rel end
  table.sort(keys)
  for _, rel in ipairs(keys) do
    local hw = tree[rel]
    k = k + 1
    local p = top .. "/" .. rel
    os.execute("mkdir -p " .. q(p:match("^(.*)/")))
    if hw == "text" then
      shell.writefile(p, "not an image at all")
    else
      local img = (ddp.arange(3 * hw[1] * hw[2]):remainder(200) + k * 7):remainder(256):to("uint8"):view(3, hw[1], hw[2])
      if p:lower():find("%.jpe?g$") then data.write_jpeg(img, p, 90) else data.write_png(img, p) end
    end
  end
  return top
end

describe("ImageFolder", function()
  it("gives torchvision's classes, class_to_idx, samples and pixels", function()
    local ds = data.ImageFolder(folder)
    assert.same(cases.classes, ds.classes)
    assert.same(cases.class_to_idx, ds.class_to_idx)
    assert.equal(#cases.samples, #ds)
    local samples = ds:samples()
    for i, s in ipairs(cases.samples) do
      assert.same({ folder .. "/" .. s[1], s[2] }, samples[i])
      local path, target = ds:sample(i - 1)
      assert.equal(folder .. "/" .. s[1], path)
      local img, t = ds:get(i - 1)
      assert.equal(s[2], t)
      local want = data.load_npy(golden .. "dec/folder." .. (i - 1) .. ".npy")
      assert.equal(shape(want), shape(img), s[1])
      assert.equal(0, max_diff(img, want), s[1])
    end
    assert.same({ 0, 1, 1, 1, 1, 1, 2, 2 }, ds.targets:totable())
    -- negative indices from the end; a trailing slash on root changes nothing
    assert.equal(folder .. "/dog/1.jpeg", ds:path(-1))
    assert.equal(ds:path(3), data.ImageFolder(folder .. "/"):path(3))
    assert.equal("ImageFolder(" .. folder .. ": 8 samples, 3 classes)", tostring(ds))
  end)

  it("takes extensions, is_valid_file, a loader, a mode and target_transform", function()
    local png_only = data.ImageFolder(folder, { extensions = { ".png" } })
    assert.equal(5, #png_only)
    local dogs = data.ImageFolder(folder, { is_valid_file = function(p) return p:find("/dog/", 1, true) ~= nil end,
                                           allow_empty = true })
    assert.equal(3, #dogs)  -- is_valid_file replaces the extensions: old.bmp too, as torchvision
    local seen = {}
    local custom = data.ImageFolder(folder, { loader = function(p) seen[#seen + 1] = p return ddp.zeros(2) end,
                                             target_transform = function(t) return t * 10 end })
    local x, y = custom:get(2)
    assert.same({ 0, 0 }, x:totable())
    assert.equal(10, y)
    assert.equal(folder .. "/cat/b.png", seen[1])
    local gray = data.ImageFolder(folder, { mode = "gray" })
    assert.equal(1, gray:get(0):size(0))
    local tf = T.Compose { T.CenterCrop(4), T.ToDtype("float32", { scale = true }) }
    local img = data.ImageFolder(folder, { transform = tf }):get(1)
    assert.equal("3x4x4", shape(img))
    assert.equal("float32", img:dtype())
  end)

  it("decodes a JPEG at the smallest size the transform needs, or in full when asked", function()
    local top = make_tree("scaled", { ["a/big.jpg"] = { 240, 320 }, ["a/small.png"] = { 30, 40 } })
    local tf = T.Compose { T.Resize(32), T.CenterCrop(32) }
    local seen = {}
    local probe = T.Compose { T.Resize(32), T.CenterCrop(32) }
    -- a transform that records the size it was handed, then does tf's work
    local recorder = setmetatable({ decode_min_size = function(_, h, w) return probe:decode_min_size(h, w) end }, {
      __call = function(_, x) seen[#seen + 1] = shape(x) return tf(x) end })
    local ds = data.ImageFolder(top, { transform = recorder })
    local a = ds:get(0)
    -- Resize(32) needs 32 x 43 of it: 1/8 gives 30 x 40, too small; 2/8 gives 60 x 80
    assert.same({ 32, 43 }, { probe:decode_min_size(240, 320) })
    assert.equal("3x60x80", seen[1])
    assert.equal("3x32x32", shape(a))
    ds:get(1)
    assert.equal("3x30x40", seen[2])  -- a PNG: in full
    local full = data.ImageFolder(top, { transform = recorder, decode_scaled = false })
    full:get(0)
    assert.equal("3x240x320", seen[3])
    -- the scaled image is that of data.decode_image with the transform
    assert.equal(0, max_diff(a, tf(data.read_image(top .. "/a/big.jpg", { mode = "rgb", transform = tf }))))
  end)

  it("feeds loader workers the batches of num_workers = 0, sharing its sample list", function()
    local tree = {}
    for c = 1, 3 do
      for k = 1, 7 do tree[("c%d/%02d.%s"):format(c, k, k % 2 == 0 and "jpg" or "png")] = { 20 + k, 30 - k } end
    end
    local top = make_tree("workers", tree)
    local tf = T.Compose { T.RandomResizedCrop(12, { scale = { 0.3, 1 } }), T.RandomHorizontalFlip(),
                           T.ToDtype("float32", { scale = true }), T.Normalize({ 0.5, 0.5, 0.5 }, { 0.2, 0.2, 0.2 }) }
    local ds = data.ImageFolder(top, { transform = tf })
    local function run(nw)
      local l = data.DataLoader(ds, { batch_size = 4, shuffle = true, seed = 5, num_workers = nw })
      local out = {}
      for _ = 1, 2 do
        for _, x, y in l:iter() do out[#out + 1] = { x:totable(), y:totable() } end
      end
      return out
    end
    local ref = run(0)
    assert.equal(12, #ref)  -- 21 samples, batches of 4 (the last of 1), two epochs
    assert.same(ref, run(2))
    assert.same(ref, run(3))
    -- the sample list travels as tensors, shared by reference
    local codec = require "ddp.data.worker_codec"
    local bytes, ts = codec.encode({ ds = ds }, "dataset", codec.ref_index())
    assert.truthy(bytes)
    local back = codec.decode(bytes, ts)
    assert.equal(ds._names:data_ptr(), back.ds._names:data_ptr())
    assert.equal(ds:path(20), back.ds:path(20))
  end)

  it("names a bad file with its sample index, or skips it and counts it (in workers too)", function()
    local top = make_tree("bad", { ["a/0.png"] = { 8, 8 }, ["a/1.png"] = "text", ["a/2.png"] = { 8, 8 },
                                   ["b/3.jpg"] = { 8, 8 } })
    -- a JPEG cut in half
    local whole = shell.slurp(top .. "/b/3.jpg")
    shell.writefile(top .. "/b/4.jpg", whole:sub(1, math.floor(#whole / 2)))
    local strict = data.ImageFolder(top)
    fails(function() strict:get(1) end, "ImageFolder: sample 1: " .. top .. "/a/1.png is not a JPEG or PNG image",
          'on_bad_file = "skip"')
    fails(function() strict:get(4) end, "ImageFolder: sample 4: " .. top .. "/b/4.jpg: truncated JPEG")
    local l = data.DataLoader(strict, { batch_size = 5, num_workers = 2 })
    local ok, err = pcall(function() for _ in l:iter() do end end)
    assert.is_false(ok)
    assert.truthy(tostring(err):find("DataLoader worker %d %(of 2%), batch 0 of epoch 0, sample 1: "), err)
    assert.truthy(tostring(err):find(top .. "/a/1.png", 1, true), err)

    local skip = data.ImageFolder(top, { on_bad_file = "skip", transform = T.Resize({ 8, 8 }) })
    local x1, y1 = skip:get(1)   -- 1 is bad: 2 stands in
    local x2 = skip:get(2)
    assert.equal(0, max_diff(x1, x2))
    assert.equal(0, y1)
    local x4, y4 = skip:get(4)   -- the last is bad: the first stands in
    assert.equal(0, max_diff(x4, skip:get(0)))
    assert.equal(0, y4)
    assert.equal(2, skip:stats().bad_files)
    local batches = 0
    for _, x in data.DataLoader(skip, { batch_size = 5, num_workers = 2 }):iter() do
      batches = batches + 1
      assert.equal(5, x:size(0))  -- the batch keeps its size
    end
    assert.equal(1, batches)
    assert.equal(4, skip:stats().bad_files)  -- two more, counted in a worker
    -- "warn": a line on stderr naming the file
    local script = shell.tempfile(([[
      local data = require "ddp.data"
      local ds = data.ImageFolder(%q, {on_bad_file = "warn"})
      ds:get(1); ds:get(1)
      print("bad", ds:stats().bad_files)
    ]]):format(top))
    local out = shell.sh(shell.ddplua .. " " .. q(script) .. " 2>&1")
    assert.truthy(out:find("ImageFolder: sample 1 left out: " .. top .. "/a/1.png is not a JPEG or PNG image", 1, true), out)
    local _, lines = out:gsub("left out", "")
    assert.equal(1, lines)  -- once per file
    assert.truthy(out:find("bad\t2", 1, true), out)
  end)

  it("refuses folders that give no dataset, naming why", function()
    fails(function() data.ImageFolder(dir .. "/nowhere") end, "ImageFolder: cannot read the folder " .. dir .. "/nowhere: No such file or directory")
    local flat = make_tree("flat", {})
    os.execute("mkdir -p " .. q(flat))
    shell.writefile(flat .. "/x.png", "x")
    fails(function() data.ImageFolder(flat) end, "ImageFolder: found no class folder in " .. flat, "/cat/001.jpg")
    local top = make_tree("empty", { ["full/a.png"] = { 4, 4 } })
    os.execute("mkdir -p " .. q(top .. "/bmps"))
    shell.writefile(top .. "/bmps/x.bmp", "BM")
    shell.writefile(top .. "/bmps/y.BMP", "BM")
    fails(function() data.ImageFolder(top) end,
          "ImageFolder: found no valid file for the class bmps in " .. top .. "; the extensions taken are .jpg, .jpeg, .png",
          "(2 .bmp files left out: ddplua decodes JPEG and PNG; convert them)", "allow_empty = true")
    assert.equal(1, #data.ImageFolder(top, { allow_empty = true }))
    fails(function() data.ImageFolder(top, { on_bad_file = "ignore" }) end, 'on_bad_file must be "error", "warn" or "skip", got "ignore"')
    fails(function() data.ImageFolder(top, { extensions = { ".png" }, is_valid_file = function() return true end }) end,
          "give extensions or is_valid_file, not both")
    fails(function() data.ImageFolder(top, { transform = 3 }) end, "transform must be a function or a callable object, got 3")
    fails(function() data.ImageFolder(top, { mode = "cmyk" }) end, "ImageFolder: mode must be")
    fails(function() data.ImageFolder(top, { color = "rgb" }) end, "color")
    fails(function() data.ImageFolder(top, { allow_empty = true }):get(1) end, "ImageFolder:get: index 1 out of range for 1 samples")
  end)
end)
