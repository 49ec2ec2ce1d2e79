-- ddp.data.idx: IDX files (MNIST, Fashion-MNIST), read in C
-- (runtime/io/mnist_idx.c), as tensors or as a TensorDataset of images
-- and labels.
local core = require "ddp.core"
local TensorDataset = require("ddp.data.dataset").TensorDataset
local checks = require "ddp.data.checks"
local C = core.C
local new, raise, show = core.new, core.raise, core.show
local type, tostring = type, tostring

core.add_lib_file(debug.getinfo(1, "S").source)

local M = {}

-- data.read_idx(path): an IDX file (gzip'd or not) as a tensor with the
-- file's shape: uint8, int32 (int8, int16, int32 files), float32 or float64.
function M.read_idx(path)
  if type(path) ~= "string" then raise("read_idx: path must be a string, got " .. show(path)) end
  return new(C.dl_read_idx, path)
end

-- Images (uint8 [N, rows, cols]) and labels (uint8 [N]) as a TensorDataset
-- of float32 images scaled to [0, 1] -- [N, rows * cols], or with
-- flat = false [N, 1, rows, cols] -- and int64 labels.
local function load_images(op, images_path, labels_path, flat)
  local x, y = M.read_idx(images_path), M.read_idx(labels_path)
  if x:dtype() ~= "uint8" or x:dim() ~= 3 then
    raise(("%s: %s holds %s %s; expected uint8 images [N, rows, cols]")
          :format(op, images_path, x:dtype(), core.fmt_shape(x:shape())))
  end
  if y:dtype() ~= "uint8" or y:dim() ~= 1 then
    raise(("%s: %s holds %s %s; expected uint8 labels [N]")
          :format(op, labels_path, y:dtype(), core.fmt_shape(y:shape())))
  end
  local n, rows, cols = x:size(0), x:size(1), x:size(2)
  if y:size(0) ~= n then
    raise(("%s: %d images in %s but %d labels in %s"):format(op, n, images_path, y:size(0), labels_path))
  end
  -- x / 255 as torchvision's ToTensor computes it
  local images = x:to("float32"):div_(255)
  images = flat and images:view(n, rows * cols) or images:view(n, 1, rows, cols)
  local labels = y:long()
  x:free()
  y:free()
  return TensorDataset(images, labels)
end

-- data.mnist_idx(images_path, labels_path[, {flat = true}])
function M.mnist_idx(images_path, labels_path, opts)
  opts = core.check_opts(opts, "mnist_idx", { flat = true })
  for _, p in ipairs { images_path, labels_path } do
    if type(p) ~= "string" then raise("mnist_idx: paths must be strings, got " .. show(p)) end
  end
  return load_images("mnist_idx", images_path, labels_path, checks.bool_opt(opts.flat, "mnist_idx", "flat", true))
end

M.FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"
local split_prefix = { train = "train", test = "t10k" }

-- The file in dir, gzip'd (as Debian ships it) or not; nil and why not.
local function find_file(dir, name)
  local why
  for _, p in ipairs { dir .. "/" .. name .. ".gz", dir .. "/" .. name } do
    local f, err = io.open(p, "rb")
    if f then
      f:close()
      return p
    end
    why = why or err
  end
  return nil, why
end

-- The images' and labels' files of a split, for fashion_mnist and
-- fashion_mnist_files (op names the caller in messages).
local function split_files(op, split, dir)
  if not split_prefix[split] then
    raise(('%s: split must be "train" or "test", got %s'):format(op, show(split)))
  end
  local env = os.getenv("FASHION_MNIST_DIR")
  dir = dir or (env ~= "" and env) or M.FASHION_MNIST_DIR
  if type(dir) ~= "string" then raise(op .. ": dir must be a string, got " .. show(dir)) end
  local paths = {}
  for i, kind in ipairs { "images-idx3-ubyte", "labels-idx1-ubyte" } do
    local name = split_prefix[split] .. "-" .. kind
    local p, why = find_file(dir, name)
    if not p then
      raise(("%s: cannot open %s (%s): install the Debian package dataset-fashion-mnist "
             .. "(apt-get install dataset-fashion-mnist, or make deps), or set FASHION_MNIST_DIR "
             .. "to a directory holding the Fashion-MNIST files")
            :format(op, dir .. "/" .. name .. ".gz", tostring(why):match(": ([^:]*)$") or tostring(why)))
    end
    paths[i] = p
  end
  return paths[1], paths[2]
end

-- data.fashion_mnist(split[, dir | {dir =, flat =}]): "train" (60000
-- images) or "test" (10000); the directory defaults to $FASHION_MNIST_DIR,
-- then to where the Debian package dataset-fashion-mnist puts the files.
function M.fashion_mnist(split, opts)
  local op = "fashion_mnist"
  if type(opts) == "string" then opts = { dir = opts } end
  opts = core.check_opts(opts, op, { dir = true, flat = true })
  local images, labels = split_files(op, split, opts.dir)
  return load_images(op, images, labels, checks.bool_opt(opts.flat, op, "flat", true))
end

-- data.fashion_mnist_files(split[, dir]) -> images_path, labels_path: the
-- IDX files fashion_mnist reads, found the same way, for reading them raw
-- (data.read_idx: uint8 [N, 28, 28] and [N]).
function M.fashion_mnist_files(split, dir)
  return split_files("fashion_mnist_files", split, dir)
end

return M
