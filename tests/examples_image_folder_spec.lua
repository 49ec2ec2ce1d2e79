-- tools/fashion_mnist_folder.lua and examples/image_folder.lua: the tool
-- writes torchvision's FashionMNIST class folders ("T-shirt/top" as
-- "T-shirt_top"), as many files per class as the IDX labels say, each PNG
-- the IDX image's very pixels, and refuses what it cannot do, naming why;
-- the example trains on such a folder as a real 2-rank job with loader
-- workers: rank 0 alone reports, the loss falls and the accuracy beats
-- chance, and the --save checkpoint loads.
local ddp = require "ddp"
local data = require "ddp.data"
local files = require "ddp.data.files"
local jobs = require "helpers.jobs"
local q, run = jobs.q, jobs.run

-- torchvision.datasets.FashionMNIST.classes (0.29), by label, slash replaced
local CLASSES = { "T-shirt_top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
                  "Ankle boot" }

local dir = jobs.tempname()
os.remove(dir)
assert(files.make_dirs(dir))
teardown(function()
  os.execute("rm -rf " .. q(dir))
  jobs.cleanup()
end)

-- The split's IDX images (uint8 [N, 28, 28]) and labels (a Lua list).
local function idx(split)
  local ip, lp = data.fashion_mnist_files(split)
  return data.read_idx(ip), data.read_idx(lp):to("int64"):totable()
end

-- Runs the tool into dir/name; returns that folder and the output.
local function make_folder(name, flags)
  local out, err, rc = run(("tools/fashion_mnist_folder.lua %s %s"):format(q(dir .. "/" .. name), flags), nil, 120)
  assert.equals(0, rc, err .. out)
  return dir .. "/" .. name, out
end

local train_folder  -- made once, by the first test, used by the example's
local function fm400()
  if not train_folder then train_folder = make_folder("fm400", "--limit 400") end
  return train_folder
end

describe("tools/fashion_mnist_folder.lua", function()
  it("writes torchvision's class folders, the IDX labels' counts and the IDX pixels exactly", function()
    local folder, out = make_folder("fm400", "--limit 400")
    train_folder = folder
    assert.truthy(out:find("^" .. folder:gsub("%p", "%%%0") .. ": 400 train images of 10 classes as PNG in [%d.]+ s\n$"), out)
    local want = {}
    for _, c in ipairs(CLASSES) do want[#want + 1] = c end
    table.sort(want)
    assert.same(want, (files.list_dir(folder)))

    local images, labels = idx("train")
    local counts = {}
    for i = 1, 400 do counts[labels[i] + 1] = (counts[labels[i] + 1] or 0) + 1 end
    for k, c in ipairs(CLASSES) do
      local names = files.list_dir(folder .. "/" .. c)
      assert.equals(counts[k] or 0, #names, c)
    end

    -- every sample: its folder is its label's class, its name its IDX index, its pixels the IDX image's
    local ds = data.ImageFolder(folder, { mode = "unchanged" })
    assert.equals(400, #ds)
    local seen = {}
    for s = 0, #ds - 1 do
      local path, target = ds:sample(s)
      local cls, i = path:match("/([^/]+)/(%d%d%d%d%d)%.png$")
      i = tonumber(i)
      assert.equals(CLASSES[labels[i + 1] + 1], cls, path)
      assert.equals(ds.class_to_idx[cls], target)
      local img = ds:get(s)
      assert.same({ 1, 28, 28 }, img:shape())
      assert.equals("uint8", img:dtype())
      assert.is_true(img:equal(images:narrow(0, i, 1)), path)
      seen[i] = true
    end
    for i = 0, 399 do assert.is_true(seen[i], "index " .. i) end
  end)

  it("writes the first images of the test split with --split test", function()
    local folder = make_folder("t20", "--split test --limit 20")
    local images, labels = idx("test")
    local img = data.read_image(("%s/%s/%05d.png"):format(folder, CLASSES[labels[20] + 1], 19))
    assert.is_true(img:equal(images:narrow(0, 19, 1)))
    local n = 0
    for _, c in ipairs(CLASSES) do n = n + #files.list_dir(folder .. "/" .. c) end
    assert.equals(20, n)
  end)

  it("refuses a folder in use, a bad split or limit and missing files, naming why", function()
    local folder = fm400()
    local out, err, rc = run("tools/fashion_mnist_folder.lua " .. q(folder) .. " --limit 5")
    assert.equals(2, rc, out)
    assert.truthy(err:find(folder .. " is not empty (10 entries): remove it or choose another folder", 1, true), err)
    out, err, rc = run("tools/fashion_mnist_folder.lua " .. q(dir .. "/x") .. " --split val")
    assert.equals(2, rc, out)
    assert.truthy(err:find('--split must be train or test, got "val"', 1, true), err)
    out, err, rc = run("tools/fashion_mnist_folder.lua " .. q(dir .. "/x") .. " --limit 2.5")
    assert.equals(2, rc, out)
    assert.truthy(err:find("--limit must be an integer >= 0, got 2.5", 1, true), err)
    out, err, rc = run("tools/fashion_mnist_folder.lua")
    assert.equals(2, rc, out)
    assert.truthy(err:find("the following arguments are required: out", 1, true), err)
    out, err, rc = run("tools/fashion_mnist_folder.lua " .. q(dir .. "/x"), "FASHION_MNIST_DIR=" .. q(dir .. "/none"))
    assert.equals(2, rc, out)
    assert.truthy(err:find("cannot open " .. dir .. "/none/train-images-idx3-ubyte.gz", 1, true), err)
    assert.is_nil(files.list_dir(dir .. "/x"))  -- nothing made
  end)
end)

describe("examples/image_folder.lua", function()
  after_each(jobs.no_strays)

  it("trains on 2 ranks with loader workers: rank 0 reports, the loss falls, the checkpoint loads", function()
    local folder, ckpt = fm400(), dir .. "/run.ckpt"
    local out, err, rc = run(("--nproc 2 examples/image_folder.lua --data %s --epochs 2 --workers 1 --save %s")
                             :format(q(folder), q(ckpt)), nil, 120)
    assert.equals(0, rc, err .. out)
    assert.truthy(out:find("[0] " .. folder .. ": 400 images of 10 classes, 2 rank(s) x batch 32, 1 worker(s) each", 1, true), out)
    -- progress from rank 0 only, as plain lines (not a terminal), with the data wait
    assert.truthy(out:find("%[0%] epoch 2/2  100%%  400/400 images .* data %d+%%"), out)
    assert.falsy(out:find("[1] ", 1, true), out)
    local losses, accs = {}, {}
    for e, l, a in out:gmatch("%[0%] epoch (%d)  train loss ([%d.]+)  train%-folder loss [%d.]+  accuracy ([%d.]+)%% %(400 images%)") do
      assert.equals(#losses + 1, tonumber(e))
      losses[#losses + 1], accs[#accs + 1] = tonumber(l), tonumber(a)
    end
    assert.equals(2, #losses, out)
    -- 400 images, 14 steps: about 1.9 then 1.6, and 30-45% (chance: 10%)
    assert.is_true(losses[2] < losses[1] - 0.1, out)
    assert.is_true(accs[2] > 20, out)
    local _, waits = out:gsub("%[0%] data wait: [%d.]+%% of the training loop %(1 worker%(s%) per rank%)", "")
    assert.equals(1, waits, out)
    assert.truthy(out:find("[0] saved " .. ckpt, 1, true), out)

    local state = ddp.load_checkpoint(ckpt)
    assert.equals(2, state.epoch)
    assert.same(data.ImageFolder(folder).classes, state.classes)
    assert.same({ 10, 64 }, state.model["head.weight"]:shape())
    assert.same({ 16, 1, 3, 3 }, state.model["stem.0.weight"]:shape())
    -- the residual blocks: a 1x1 shortcut where the channels change
    assert.same({ 32, 16, 1, 1 }, state.model["layers.1.shortcut.0.weight"]:shape())
    assert.is_nil(state.model["layers.0.shortcut.0.weight"])
    assert.is_true(state.model["head.weight"]:isfinite():all())
    assert.equals(2, state.loader.epoch)  -- two passes done: the next is epoch 2
  end)

  it("says --data is required, and which classes differ from --val's", function()
    local out, err, rc = run("examples/image_folder.lua")
    assert.equals(2, rc, out)
    assert.truthy(err:find("--data DIR is required", 1, true), err)
    local other = dir .. "/other/a"
    assert(files.make_dirs(other))
    data.write_png(ddp.zeros({ 1, 4, 4 }, { dtype = "uint8" }), other .. "/0.png")
    out, err, rc = run(("examples/image_folder.lua --data %s --val %s"):format(q(fm400()), q(dir .. "/other")))
    assert.equals(2, rc, out)
    assert.truthy(err:find("--val " .. dir .. "/other has the classes a, --data " .. fm400() .. " has Ankle boot, Bag,", 1, true), err)
  end)
end)
