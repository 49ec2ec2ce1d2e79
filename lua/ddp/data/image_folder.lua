-- ddp.data.image_folder: ImageFolder, torchvision's dataset of class
-- subfolders (root/cat/001.jpg, root/dog/xyz.png, ...): classes sorted,
-- class_to_idx by that order, samples in the order of sorted(os.walk(...))
-- and sorted file names, so sample i is torchvision's sample i.  Images
-- decode in C (ddp.data.image), a JPEG at the smallest size the transform
-- needs.  The sample list lives in three tensors (the paths' bytes, their
-- offsets, the targets): loader workers share them instead of copying a
-- million strings each.
--
--   local ds = data.ImageFolder("train", {transform = T.Compose{T.RandomResizedCrop(224), ...}})
--   print(#ds, #ds.classes, ds.class_to_idx.cat)      -- 1281167  1000  281
--   local img, target = ds:get(0)                     -- ds[0] too
local core = require "ddp.core"
local checks = require "ddp.data.checks"
local files = require "ddp.data.files"
local image = require "ddp.data.image"
local handles = require "ddp.core.handles"
local C, ffi = core.C, core.ffi
local raise, show, is_integer = core.raise, core.show, core.is_integer
local type, ipairs, pairs, tostring, tonumber, pcall, getmetatable = type, ipairs, pairs, tostring, tonumber, pcall,
  getmetatable
local lower, sub, concat = string.lower, string.sub, table.concat

core.add_lib_file(debug.getinfo(1, "S").source)

local M = {}

-- What ddplua decodes, and what else torchvision's ImageFolder would take
-- (IMG_EXTENSIONS): those are counted and named, never dropped unsaid.
M.IMG_EXTENSIONS = { ".jpg", ".jpeg", ".png" }
local OTHER_IMAGES = { ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp", ".gif", ".avif", ".heic" }
local MAX_DEPTH = 64
local BAD = { error = true, warn = true, skip = true }
local SLOTS = 65  -- bad-file counters: the loop's state, then workers 0..63

local ImageFolder = checks.class("ImageFolder")
M.ImageFolder = ImageFolder

local function ends_with_any(name, exts)
  local l = lower(name)
  for _, e in ipairs(exts) do
    if #l >= #e and sub(l, -#e) == e then return e end
  end
  return nil
end

-- The class folder's image files, relative to root, in torchvision's order:
-- directories sorted by path (os.walk's tuples sorted), names sorted within
-- each; links to folders followed (followlinks=True), MAX_DEPTH deep at most.
local function walk_class(root, cls, accept, other, op)
  local dirs = {}
  local function visit(rel, depth)
    if depth > MAX_DEPTH then
      raise(("%s: %s/%s: folders nest more than %d deep (a link loop?)"):format(op, root, rel, MAX_DEPTH))
    end
    local names, sub_dirs = files.list_dir(root .. "/" .. rel)
    if not names then
      raise(("%s: cannot read the folder %s/%s: %s"):format(op, root, rel, sub_dirs))
    end
    local fs = {}
    for _, name in ipairs(names) do
      if sub_dirs[name] then
        visit(rel .. "/" .. name, depth + 1)
      else
        fs[#fs + 1] = name
      end
    end
    dirs[#dirs + 1] = { rel = rel, files = fs }
  end
  visit(cls, 0)
  table.sort(dirs, function(a, b) return a.rel < b.rel end)
  local out = {}
  for _, d in ipairs(dirs) do
    for _, name in ipairs(d.files) do
      local p = d.rel .. "/" .. name
      if accept(name, p) then
        out[#out + 1] = p
      else
        local e = ends_with_any(name, OTHER_IMAGES)
        if e then other[e] = (other[e] or 0) + 1 end
      end
    end
  end
  return out
end

local function tensor_of_bytes(s)
  local n = #s
  local t = core.new(C.dl_empty, ffi.new("int64_t[1]", n), 1, C.DL_UINT8)
  if n > 0 then ffi.copy(C.dl_tensor_data(t), s, n) end
  return t
end

local function int64_tensor(list)
  local n = #list
  local t = core.new(C.dl_empty, ffi.new("int64_t[1]", n), 1, C.DL_INT64)
  local p = ffi.cast("int64_t *", C.dl_tensor_data(t))
  for k = 1, n do p[k - 1] = list[k] end
  return t
end

local folder_opts = {
  transform = true, target_transform = true, extensions = true, is_valid_file = true, loader = true,
  mode = true, allow_empty = true, on_bad_file = true, decode_scaled = true,
}

-- data.ImageFolder(root[, {transform =, target_transform =, extensions =,
-- is_valid_file =, loader =, mode = "rgb", allow_empty = false,
-- on_bad_file = "error", decode_scaled = true}]).
--   extensions: the file endings taken (case-insensitive; default
--     {".jpg", ".jpeg", ".png"}); or is_valid_file(path) -> bool instead.
--   loader(path) -> image: reads a sample instead of the built-in decoder.
--   mode: the decoded channels, as data.decode_image ("rgb": PIL's
--     convert("RGB"), which torchvision's default loader does).
--   decode_scaled: a JPEG decodes at the smallest size the transform says
--     it needs (T:decode_min_size); false decodes every image in full, for
--     torchvision's very pixels.
--   on_bad_file: "error" (a file that cannot be read or decoded stops the
--     loader, naming the sample and the file), "warn" or "skip": the next
--     good sample stands in for it (so batches keep their size and every
--     rank its count), with one line on stderr each ("warn"); ds:stats()
--     counts them.
function ImageFolder:init(root, opts)
  local op = "ImageFolder"
  if type(root) ~= "string" or root == "" then raise(op .. ": root must be a folder's path, got " .. show(root)) end
  opts = core.check_opts(opts, op, folder_opts)
  for _, k in ipairs { "transform", "target_transform", "loader", "is_valid_file" } do
    local v = opts[k]
    if v ~= nil and type(v) ~= "function" and not (type(v) == "table" and getmetatable(v) and getmetatable(v).__call) then
      raise(("%s: %s must be a function or a callable object, got %s"):format(op, k, show(v)))
    end
  end
  if opts.extensions ~= nil and opts.is_valid_file ~= nil then
    raise(op .. ": give extensions or is_valid_file, not both (as torchvision)")
  end
  local exts = opts.extensions or M.IMG_EXTENSIONS
  if type(exts) == "string" then exts = { exts } end
  if type(exts) ~= "table" or #exts == 0 then
    raise(op .. ": extensions must be a list of file endings such as {\".jpg\", \".png\"}, got " .. show(exts))
  end
  local lexts = {}
  for k, e in ipairs(exts) do
    if type(e) ~= "string" or e == "" then raise(("%s: extensions[%d] must be a file ending, got %s"):format(op, k, show(e))) end
    lexts[k] = lower(e)
  end
  local bad = opts.on_bad_file == nil and "error" or opts.on_bad_file
  if not BAD[bad] then
    raise(("%s: on_bad_file must be \"error\", \"warn\" or \"skip\", got %s"):format(op, show(bad)))
  end
  image._mode_arg(opts.mode == nil and "rgb" or opts.mode, op)
  root = root:gsub("(.)/+$", "%1")

  local names, dirs = files.list_dir(root)
  if not names then raise(("%s: cannot read the folder %s: %s"):format(op, root, dirs)) end
  local classes, class_to_idx = {}, {}
  for _, name in ipairs(names) do
    if dirs[name] then
      classes[#classes + 1] = name
      class_to_idx[name] = #classes - 1
    end
  end
  if #classes == 0 then
    raise(("%s: found no class folder in %s (expected %s/<class>/<image>, e.g. %s/cat/001.jpg)"):format(op, root, root, root))
  end
  local valid = opts.is_valid_file
  local accept = valid and function(_, rel)
    local ok, v = pcall(valid, root .. "/" .. rel)
    if not ok then raise(("%s: is_valid_file(%q) failed: %s"):format(op, root .. "/" .. rel, tostring(v))) end
    return v and true or false
  end or function(name) return ends_with_any(name, lexts) ~= nil end
  local paths, targets, other, empty = {}, {}, {}, {}
  for k, cls in ipairs(classes) do
    local ps = walk_class(root, cls, accept, other, op)
    if #ps == 0 then empty[#empty + 1] = cls end
    for _, p in ipairs(ps) do
      paths[#paths + 1] = p
      targets[#targets + 1] = k - 1
    end
  end
  local left = {}
  for e, n in pairs(other) do left[#left + 1] = ("%d %s"):format(n, e) end
  table.sort(left)
  local left_msg = #left > 0 and ("%s files left out: ddplua decodes JPEG and PNG; convert them")
                                 :format(concat(left, ", ")) or ""
  if #empty > 0 and not opts.allow_empty then
    raise(("%s: found no valid file for the class%s %s in %s; the extensions taken are %s%s (allow_empty = true lets a class be empty)")
          :format(op, #empty > 1 and "es" or "", concat(empty, ", "), root,
                  valid and "those is_valid_file accepts" or concat(lexts, ", "),
                  left_msg ~= "" and " (" .. left_msg .. ")" or ""))
  end
  -- every rank lists the same folder: rank 0 says it
  if left_msg ~= "" and (tonumber(os.getenv("RANK")) or 0) == 0 then
    io.stderr:write(("%s: %s: %s\n"):format(op, root, left_msg))
  end

  local offsets, at = { 0 }, 0
  for k, p in ipairs(paths) do
    at = at + #p
    offsets[k + 1] = at
  end
  self.root, self.classes, self.class_to_idx = root, classes, class_to_idx
  self._names, self._offsets = tensor_of_bytes(concat(paths)), int64_tensor(offsets)
  self.targets = int64_tensor(targets)
  self._n = #paths
  self.transform, self.target_transform, self.loader = opts.transform, opts.target_transform, opts.loader
  self.mode, self.on_bad_file = opts.mode == nil and "rgb" or opts.mode, bad
  self.decode_scaled = opts.decode_scaled ~= false
  self._bad = core.new(C.dl_zeros, ffi.new("int64_t[1]", SLOTS), 1, C.DL_INT64)
end

function ImageFolder:len() return self._n end
ImageFolder.__len = ImageFolder.len

function ImageFolder:__tostring()
  return ("ImageFolder(%s: %d samples, %d classes)"):format(self.root, self._n, #self.classes)
end

local function index_arg(self, i, op)
  local n = self._n
  if not is_integer(i) or i < -n or i >= n then
    raise(("ImageFolder:%s: index %s out of range for %d samples"):format(op, show(i), n))
  end
  return i < 0 and i + n or i
end

local function path_of(self, i)
  local off = ffi.cast("const int64_t *", C.dl_tensor_data(self._offsets))
  local a, b = tonumber(off[i]), tonumber(off[i + 1])
  return self.root .. "/" .. ffi.string(ffi.cast("const char *", C.dl_tensor_data(self._names)) + a, b - a)
end

local function target_of(self, i)
  return tonumber(ffi.cast("const int64_t *", C.dl_tensor_data(self.targets))[i])
end

-- ds:path(i), ds:target(i), ds:sample(i) -> path, target (0-based i).
function ImageFolder:path(i) return path_of(self, index_arg(self, i, "path")) end
function ImageFolder:target(i) return target_of(self, index_arg(self, i, "target")) end
function ImageFolder:sample(i)
  i = index_arg(self, i, "sample")
  return path_of(self, i), target_of(self, i)
end

-- ds:samples() -> {{path, target}, ...}: torchvision's ds.samples (a new
-- table: the dataset itself keeps them in tensors).
function ImageFolder:samples()
  local out = {}
  for i = 0, self._n - 1 do out[i + 1] = { path_of(self, i), target_of(self, i) } end
  return out
end

-- Reads and decodes sample i's file: the image, or nil and the message.
local function load(self, i)
  local path = path_of(self, i)
  if self.loader then
    local ok, img = pcall(self.loader, path)
    if not ok then return nil, ("loader(%q) failed: %s"):format(path, tostring(img)) end
    return img
  end
  return image._read(path, image._mode_arg(self.mode, "ImageFolder"), 0, 0, self.decode_scaled and self.transform)
end

local warned = {}  -- per Lua state: a file is named once

-- ds:get(i) -> image, target: sample i decoded and transformed.
function ImageFolder:get(i)
  i = index_arg(self, i, "get")
  local img, err = load(self, i)
  local at = i
  if not img then
    if self.on_bad_file == "error" then
      raise(("ImageFolder: sample %d: %s (on_bad_file = \"skip\" lets the next good sample stand in)"):format(i, err))
    end
    local slot = math.min((handles.worker_id or -1) + 1, SLOTS - 1)
    local counts = ffi.cast("int64_t *", C.dl_tensor_data(self._bad))
    for tries = 1, self._n do
      counts[slot] = counts[slot] + 1
      if self.on_bad_file == "warn" and not warned[path_of(self, at)] then
        warned[path_of(self, at)] = true
        io.stderr:write(("ImageFolder: sample %d left out: %s; sample %d stands in\n")
                        :format(at, err, (at + 1) % self._n))
      end
      if tries == self._n then break end
      at = (at + 1) % self._n
      img, err = load(self, at)
      if img then break end
    end
    if not img then raise(("ImageFolder: none of the %d samples could be read: the last, %s"):format(self._n, err)) end
  end
  local target = target_of(self, at)
  if self.transform then
    local out = self.transform(img)
    -- the decoded image is garbage unless the transform handed it back
    -- (its views, such as a crop's, keep the pixels alive themselves)
    if not rawequal(out, img) and not self.loader then C.dl_tensor_free_data(img) end
    img = out
  end
  if self.target_transform then target = self.target_transform(target) end
  return img, target
end

-- ds:stats() -> {samples =, classes =, bad_files =}: bad_files counts the
-- reads that failed and were skipped, in the loop and in every worker.
function ImageFolder:stats()
  local p = ffi.cast("const int64_t *", C.dl_tensor_data(self._bad))
  local bad = 0
  for k = 0, SLOTS - 1 do bad = bad + tonumber(p[k]) end
  return { samples = self._n, classes = #self.classes, bad_files = bad }
end

return M
