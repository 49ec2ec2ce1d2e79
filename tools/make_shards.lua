-- make_shards.lua: an image folder (torchvision's ImageFolder layout: one
-- subfolder per class, sorted names) written as tar shards in the
-- WebDataset convention, for data.WebDataset and data.ShardSampler: each
-- sample is the file's bytes unchanged, under its extension (lower case:
-- "x.JPEG" -> "jpeg"), and the class index as ".cls"; keys are the
-- samples' positions in the written order, zero-padded.  Each shard gets
-- its index cache beside it.
--
--   ddplua tools/make_shards.lua IMAGE_FOLDER OUT_PATTERN [--maxcount 10000] [--maxsize BYTES]
--                                [--shuffle-seed 0] [--no-shuffle]
--
-- OUT_PATTERN holds one integer conversion: "out/train-%06d.tar".  The
-- samples are shuffled first (seeded: the same shards every time):
-- ImageFolder's order is class by class, and shards of one class each
-- would defeat shuffling shards; --no-shuffle keeps that order.  The
-- class names go to OUT_PATTERN's folder as classes.txt, one a line, in
-- class index order.
local ddp = require "ddp"
local data = require "ddp.data"
local files = require "ddp.data.files"
local core = require "ddp.core"
local C = core.C

local args = ddp.argparse({ maxcount = 10000, maxsize = 3e9, shuffle_seed = 0, shuffle = true }, arg, {
  program = "ddplua tools/make_shards.lua",
  positional = { "folder", "pattern" },
  help = { folder = "an image folder: one subfolder of images per class",
           pattern = "the shards to write, with one integer conversion (out/train-%06d.tar)",
           maxcount = "samples per shard at most", maxsize = "bytes per shard at most (webdataset's rule)",
           shuffle_seed = "the seed of the samples' order", shuffle = "shuffle the samples (--no-shuffle: class by class)" },
})

-- torchvision's IMG_EXTENSIONS (ImageFolder takes only these files).
local IMG = { jpg = true, jpeg = true, png = true, ppm = true, bmp = true, pgm = true, tif = true, tiff = true,
              webp = true }

-- The folder as torchvision's ImageFolder walks it: class folders sorted,
-- each walked as sorted(os.walk(class_dir)) with its file names sorted.
-- data.ImageFolder does the same when it is there.
local function walk(folder)
  local names, dirs = files.list_dir(folder)
  if not names then error(("make_shards: %s: %s"):format(folder, dirs), 0) end
  local classes, samples = {}, {}
  for _, c in ipairs(names) do
    if dirs[c] then classes[#classes + 1] = c end
  end
  if #classes == 0 then error(("make_shards: %s has no class folders"):format(folder), 0) end
  for ci, c in ipairs(classes) do
    local roots, stack = {}, { folder .. "/" .. c }
    while #stack > 0 do
      local dir = table.remove(stack)
      local ns, ds = files.list_dir(dir)
      local files = {}
      for _, n in ipairs(ns or {}) do
        if ds[n] then stack[#stack + 1] = dir .. "/" .. n
        elseif IMG[(n:match("%.([^.]*)$") or ""):lower()] then files[#files + 1] = n end
      end
      roots[#roots + 1] = { dir = dir, files = files }
    end
    table.sort(roots, function(a, b) return a.dir < b.dir end)
    for _, r in ipairs(roots) do
      for _, n in ipairs(r.files) do samples[#samples + 1] = { r.dir .. "/" .. n, ci - 1 } end
    end
  end
  return classes, samples
end

if args.shuffle_seed ~= math.floor(args.shuffle_seed) or args.shuffle_seed < 0 or args.shuffle_seed >= 2^53 then
  error(("make_shards: --shuffle-seed must be an integer from 0 to 2^53 - 1, got %s"):format(args.shuffle_seed), 0)
end

local classes, samples
if data.ImageFolder then
  local f = data.ImageFolder(args.folder)
  classes, samples = f.classes, f:samples()
else
  classes, samples = walk(args.folder)
end
local n = #samples
if n == 0 then error(("make_shards: %s holds no images (%s)"):format(args.folder, "jpg, jpeg, png, ..."), 0) end

local order = {}
if args.shuffle then
  local perm = core.new(C.dl_randperm_stream, n, args.shuffle_seed, 0, C.DL_INT64)
  local p = core.ffi.cast("const int64_t *", C.dl_tensor_data(perm))
  for i = 1, n do order[i] = tonumber(p[i - 1]) + 1 end
else
  for i = 1, n do order[i] = i end
end

local dir = args.pattern:match("^(.*)/") or "."
os.execute("mkdir -p '" .. dir:gsub("'", "'\\''") .. "'")
local w = data.ShardWriter(args.pattern, { maxcount = args.maxcount, maxsize = args.maxsize })
local width = math.max(6, #tostring(n - 1))
for k, i in ipairs(order) do
  local path, cls = samples[i][1], samples[i][2]
  local f, err = io.open(path, "rb")
  if not f then error("make_shards: " .. err, 0) end
  local bytes = f:read("*a")
  f:close()
  local ext = (path:match("[^/]*$"):match("%.([^.]*)$") or "bin"):lower()
  w:write({ __key__ = ("%0" .. width .. "d"):format(k - 1), [ext] = bytes, cls = cls })
end
local shards = w:close()
local cf = assert(io.open(dir .. "/classes.txt", "w"))
cf:write(table.concat(classes, "\n"), "\n")
cf:close()
print(("%s: %d samples of %d classes in %d shards (%s ... %s)%s"):format(args.folder, n, #classes, #shards,
  shards[1], shards[#shards], data.ImageFolder and "" or " [folder walked by make_shards itself]"))
