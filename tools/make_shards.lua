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

-- torchvision's IMG_EXTENSIONS: the bytes go into the shards unchanged, so
-- every format its ImageFolder takes is taken (data.ImageFolder's own
-- default is what ddplua decodes: JPEG and PNG).
local IMG = { ".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp" }

if args.shuffle_seed ~= math.floor(args.shuffle_seed) or args.shuffle_seed < 0 or args.shuffle_seed >= 2^53 then
  error(("make_shards: --shuffle-seed must be an integer from 0 to 2^53 - 1, got %s"):format(args.shuffle_seed), 0)
end

-- the folder as torchvision's ImageFolder walks it (data.ImageFolder's
-- order: class folders sorted, each walked as sorted(os.walk(...)))
local ok, folder = pcall(data.ImageFolder, args.folder, { extensions = IMG, allow_empty = true })
if not ok then error(("make_shards: %s"):format(tostring(folder):gsub("^[^:]*:%d+: ", "")), 0) end
local classes, samples = folder.classes, folder:samples()
local n = #samples
if n == 0 then error(("make_shards: %s holds no images (%s)"):format(args.folder, table.concat(IMG, ", ")), 0) end

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
print(("%s: %d samples of %d classes in %d shards (%s ... %s)"):format(args.folder, n, #classes, #shards,
  shards[1], shards[#shards]))
