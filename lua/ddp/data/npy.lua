-- ddp.data.npy: NumPy's files -- .npy arrays and .npz archives of them,
-- read and written in C (runtime/io/npy.c, runtime/io/npz.c) -- and
-- NpyDataset, a TensorDataset over memory-mapped arrays, so a dataset
-- prepared with NumPy trains without a conversion step.
--
--   local data = require "ddp.data"
--   data.save_npy("x.npy", ddp.randn(1000, 784))           -- np.save's bytes exactly
--   local x = data.load_npy("x.npy", {mmap = true})         -- np.load(mmap_mode="c") + torch.from_numpy
--   data.save_npz("d.npz", {x = x, y = y})                  -- np.savez
--   local t = data.load_npz("d.npz")                        -- t.x, t.y (np.savez_compressed's too)
--   local ds = data.NpyDataset("x.npy", "y.npy")            -- batches gathered from the mapping
local core = require "ddp.core"
local TensorDataset = require("ddp.data.dataset").TensorDataset
local checks = require "ddp.data.checks"
local C, ffi = core.C, core.ffi
local new, raise, show, is_tensor = core.new, core.raise, core.show, core.is_tensor
local type, select, ipairs, pairs, unpack = type, select, ipairs, pairs, unpack

core.add_lib_file(debug.getinfo(1, "S").source)

local M = {}

local function path_arg(path, op)
  if type(path) ~= "string" then raise(("%s: path must be a string, got %s"):format(op, show(path))) end
end

local function mmap_opt(opts, op, dflt)
  opts = core.check_opts(opts, op, { mmap = true })
  return checks.bool_opt(opts.mmap, op, "mmap", dflt) and 1 or 0
end

-- data.load_npy(path[, {mmap = false}]): the array as a tensor of its shape
-- and dtype (int8, int16 and uint16 arrays as int32, uint32 as int64; a
-- Fortran-order array with column-major strides, as torch.from_numpy gives
-- it).  mmap = true maps the file copy-on-write: instant for any size, pages
-- read as they are touched, writes into the tensor never reach the file.
function M.load_npy(path, opts)
  path_arg(path, "load_npy")
  return new(C.dl_npy_load, path, mmap_opt(opts, "load_npy", false))
end

-- data.save_npy(path, t): t as np.save(path, t.numpy()) writes it, byte for
-- byte (atomically: the old file or the new one, never a mix).
function M.save_npy(path, t)
  if is_tensor(path) and type(t) == "string" then
    raise("save_npy: expected (path, tensor), as np.save(file, arr) takes them, got (tensor, path)")
  end
  path_arg(path, "save_npy")
  if not is_tensor(t) then raise(("save_npy: expected a tensor to save, got %s"):format(core.describe(t))) end
  core.check(C.dl_npy_save(path, t))
end

-- data.load_npz(path[, {mmap = false}]) -> {name = tensor}, names: the
-- arrays by np.load's keys ("arr_0", ... for np.savez's positional ones),
-- and the names in the file's order.  np.savez's stored members map (with
-- mmap = true) when their data is aligned -- numpy does not align them, so
-- most of its arrays are copied; save_npz's always are -- and
-- np.savez_compressed's are inflated into memory.
function M.load_npz(path, opts)
  path_arg(path, "load_npz")
  local z = C.dl_npz_open(path, mmap_opt(opts, "load_npz", false))
  if z == nil then core.raise_c() end
  z = ffi.gc(z, C.dl_npz_close)
  local tensors, names = {}, {}
  for i = 0, C.dl_npz_count(z) - 1 do
    local name = ffi.string(C.dl_npz_name(z, i))
    tensors[name] = new(C.dl_npz_tensor, z, i)
    names[#names + 1] = name
  end
  C.dl_npz_close(ffi.gc(z, nil))
  return tensors, names
end

-- data.save_npz(path, tensors): np.savez(path, *list, **named) -- the
-- list part of tensors as arr_0, arr_1, ..., its string keys as names.
function M.save_npz(path, tensors)
  local op = "save_npz"
  path_arg(path, op)
  if type(tensors) ~= "table" or is_tensor(tensors) then
    raise(("%s: expected a table of tensors ({x = t, ...} or {t1, t2}), got %s"):format(op, core.describe(tensors)))
  end
  local names, list, keys = {}, {}, {}
  local n = #tensors
  for k, v in pairs(tensors) do
    local positional = type(k) == "number" and k >= 1 and k <= n and k % 1 == 0
    if not positional then
      if type(k) ~= "string" then
        raise(("%s: key %s is a %s; array names must be strings (or list positions)"):format(op, show(k), type(k)))
      end
      keys[#keys + 1] = k
    end
    if not is_tensor(v) then
      raise(("%s: value of %s is a %s, expected a tensor"):format(op, show(k), core.describe(v)))
    end
  end
  for i = 1, n do
    local name = "arr_" .. (i - 1)
    if tensors[name] ~= nil then
      raise(("%s: cannot use un-named tensors and the name %s together (np.savez's rule)"):format(op, show(name)))
    end
    names[#names + 1], list[#list + 1] = name, tensors[i]
  end
  table.sort(keys)
  for _, k in ipairs(keys) do names[#names + 1], list[#list + 1] = k, tensors[k] end
  local cn, ct = ffi.new("const char *[?]", #names + 1), ffi.new("dl_tensor *[?]", #names + 1)
  for i = 1, #names do cn[i - 1], ct[i - 1] = names[i], list[i] end
  local rc = C.dl_npz_save(path, cn, ct, #names)
  local _ = { names, list }  -- the strings and tensors stay referenced during the call
  core.check(rc)
end

-- -- NpyDataset -----------------------------------------------------------------

local NpyDataset = core.class("NpyDataset", TensorDataset, { proxy = true })
M.NpyDataset = NpyDataset

-- data.NpyDataset(x, y, ...[, {mmap = true}]): a TensorDataset whose
-- tensors are .npy files (paths, loaded memory-mapped) or tensors, sample i
-- being row i of each; the DataLoader gathers a batch from the mapping with
-- one index_select per array, reading only the rows it takes.  ds.paths:
-- the paths (false for a tensor given as is).
function NpyDataset:init(...)
  local op = "NpyDataset"
  local n = select("#", ...)
  local args = { ... }
  local opts
  if n > 0 and type(args[n]) == "table" and not is_tensor(args[n]) then
    opts, n = args[n], n - 1
  end
  local mmap = mmap_opt(opts, op, true)
  if n == 0 then raise(op .. ": expected one or more .npy paths or tensors") end
  local fields, paths = {}, {}
  for i = 1, n do
    local a = args[i]
    if type(a) == "string" then
      fields[i], paths[i] = new(C.dl_npy_load, a, mmap), a
    elseif is_tensor(a) then
      fields[i], paths[i] = a, false
    else
      raise(("%s: argument %d is a %s, expected a .npy path or a tensor"):format(op, i, core.describe(a)))
    end
    if fields[i]:dim() == 0 then
      raise(("%s: %s is 0-dim; every array needs a first dim that counts samples")
            :format(op, paths[i] or ("tensor " .. i)))
    end
  end
  for i = 2, n do
    if fields[i]:size(0) ~= fields[1]:size(0) then
      raise(("%s: all arrays need the same size(0), but %s has shape %s and %s has shape %s")
            :format(op, paths[1] or "tensor 1", core.fmt_shape(fields[1]:shape()),
                    paths[i] or ("tensor " .. i), core.fmt_shape(fields[i]:shape())))
    end
  end
  TensorDataset.init(self, unpack(fields, 1, n))
  self.paths = paths
end

function NpyDataset:__tostring()
  local parts = {}
  for k, t in ipairs(self._fields) do
    local p = self.paths[k]
    parts[k] = t:dtype() .. " " .. core.fmt_shape(t:shape()) .. (p and (" " .. p) or "")
  end
  return ("NpyDataset(%d samples: %s)"):format(self._n, table.concat(parts, ", "))
end

return M
