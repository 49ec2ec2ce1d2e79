-- fashion_mnist_folder.lua: Fashion-MNIST (the IDX files of the Debian
-- package dataset-fashion-mnist, or $FASHION_MNIST_DIR) written as an
-- image folder in torchvision's ImageFolder layout, one gray 1-channel
-- PNG per image, for trying data.ImageFolder and examples/image_folder.lua
-- on real pictures:
--
--   ddplua tools/fashion_mnist_folder.lua OUT [--split train|test] [--limit N]
--
-- OUT/<class>/<index>.png, <index> the image's place in the IDX file,
-- zero-padded to 5 digits (so sorted names keep the file's order).  The
-- class folders are torchvision's FashionMNIST.classes, except that
-- "T-shirt/top" holds a slash, which no file name can: its folder is
-- "T-shirt_top".  ImageFolder numbers classes by their sorted folder
-- names ("Ankle boot" 0, "Bag" 1, ..., "Trouser" 9), as torchvision's
-- does, so its targets are not the IDX label numbers.  --limit N writes
-- the first N images (0: all).  OUT must be missing or empty: files of an
-- earlier run would join the dataset unseen.  Each file is written
-- atomically; the last line says how many and how long it took.
local ddp = require "ddp"
local data = require "ddp.data"
local files = require "ddp.data.files"
local clock = require("ddp.core").clock

-- torchvision.datasets.FashionMNIST.classes, by label; [1] has no slash
local CLASSES = { "T-shirt_top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
                  "Ankle boot" }

local args = ddp.argparse({ split = "train", limit = 0 }, arg, {
  program = "ddplua tools/fashion_mnist_folder.lua",
  positional = { "out" },
  help = { out = "the folder to write (missing or empty)", split = "train (60000 images) or test (10000)",
           limit = "write only the first N images (0: all)" },
})

local function fail(msg)
  io.stderr:write("fashion_mnist_folder: ", msg, "\n")
  os.exit(2)
end

if args.split ~= "train" and args.split ~= "test" then
  fail(("--split must be train or test, got %q"):format(args.split))
end
if args.limit < 0 or args.limit ~= math.floor(args.limit) then
  fail(("--limit must be an integer >= 0, got %s"):format(args.limit))
end
local out = args.out:gsub("(.)/+$", "%1")
local names = files.list_dir(out)
if names and #names > 0 then
  fail(("%s is not empty (%d entries): remove it or choose another folder"):format(out, #names))
end

local t0 = clock()
local ok, images, labels = pcall(function()
  local ip, lp = data.fashion_mnist_files(args.split)
  return data.read_idx(ip), data.read_idx(lp)
end)
if not ok then fail((tostring(images):gsub("^[^\n]-:%d+: ", ""))) end
local n = images:size(0)
if args.limit > 0 and args.limit < n then n = args.limit end

for _, name in ipairs(CLASSES) do
  local made, why = files.make_dirs(out .. "/" .. name)
  if not made then fail("cannot make " .. why) end
end
local label = labels:to("int64"):totable()
for i = 0, n - 1 do
  -- [1, 28, 28], a view of the file's image: no copy before the encoder
  data.write_png(images:narrow(0, i, 1), ("%s/%s/%05d.png"):format(out, CLASSES[label[i + 1] + 1], i))
end
print(("%s: %d %s images of %d classes as PNG in %.1f s"):format(out, n, args.split, #CLASSES, clock() - t0))
