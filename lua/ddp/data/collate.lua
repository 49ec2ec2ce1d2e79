-- ddp.data.collate: one batch of a dataset from its sample indices -- the
-- same code in the training loop (num_workers = 0) and in every loader
-- worker thread, so a batch is bit for bit the same whoever makes it.
-- Before each sample the random stream of its augmentation is set to
-- (seed, epoch, index) (ddp.data.sample_rng).
local core = require "ddp.core"
local factory = require "ddp.tensor.factory"
local sample_rng = require "ddp.data.sample_rng"
local field = require("ddp.data.checks").field
local C, ffi = core.C, core.ffi
local new, is_tensor = core.new, core.is_tensor
local type, tonumber, select, ipairs, unpack, next, getmetatable = type, tonumber, select, ipairs, unpack, next,
  getmetatable

core.add_lib_file(debug.getinfo(1, "S").source)

local M = {}

-- How a dataset is cut: its tensors (a TensorDataset's _fields), or its
-- getitems(idx) (PyTorch's __getitems__), or sample by sample with get(i).
function M.plan(ds)
  local fields = field(ds, "_fields")
  local getitems = not fields and field(ds, "getitems")
  if type(getitems) ~= "function" then getitems = nil end
  return { fields = fields, nf = fields and #fields, getitems = getitems }
end

-- A sample's fields: get(i)'s values (return x, y), or the elements of the
-- one list it returned when that list holds a tensor ({x, y}: PyTorch's
-- tuple).  A list of numbers alone stays one field (a 1-D tensor of them).
local function fields_of(...)
  local n, first = select("#", ...), ...
  if n == 1 and type(first) == "table" and getmetatable(first) == nil then
    for _, v in ipairs(first) do
      if is_tensor(v) then return { n = #first, unpack(first) } end
    end
  end
  return { n = n, ... }
end

-- The samples of bi (a 1-D int64 tensor) stacked field by field; mark(i)
-- is told each sample index first (a worker's progress, for messages).
local function stack_samples(ds, bi, seed, epoch, mark)
  local p = ffi.cast("const int64_t *", C.dl_tensor_data(bi))
  local cols = {}
  local nf
  for k = 0, bi:size(0) - 1 do
    local i = tonumber(p[k])
    if mark then mark(i) end
    sample_rng.begin(seed, epoch, i)
    local sample = fields_of(ds:get(i))
    nf = nf or sample.n
    if sample.n ~= nf then
      core.raise(("DataLoader: sample %d has %d field%s, sample %d had %d: every sample gives the same fields")
                 :format(i, sample.n, sample.n == 1 and "" or "s", tonumber(p[0]), nf))
    end
    for f = 1, nf do
      cols[f] = cols[f] or {}
      cols[f][k + 1] = sample[f]
    end
  end
  sample_rng.finish()
  for f = 1, nf or 0 do
    local c = cols[f]
    if type(c[1]) == "table" and not is_tensor(c[1]) and next(c[1]) ~= nil and c[1][1] == nil then
      core.raise(("DataLoader: field %d of a sample is a table of named values (a dict); return the fields as "
                  .. "values (return x, y) or as a list {x, y}, as PyTorch's tuple"):format(f))
    end
    cols[f] = is_tensor(c[1]) and factory.stack(c, 0) or factory.tensor(c)
  end
  return cols, nf or 0
end

-- collate.batch(ds, plan, bi, seed, epoch, mark): the fields of the batch
-- of indices bi, as a list and its length.
function M.batch(ds, plan, bi, seed, epoch, mark)
  local fields, nf = plan.fields, plan.nf
  if fields then
    local out = {}
    for f = 1, nf do out[f] = new(C.dl_index_select, fields[f], 0, bi) end
    return out, nf
  end
  if plan.getitems then
    if mark then mark(tonumber(ffi.cast("const int64_t *", C.dl_tensor_data(bi))[0])) end
    local out = { plan.getitems(ds, bi) }
    return out, #out
  end
  return stack_samples(ds, bi, seed, epoch, mark)
end

return M
