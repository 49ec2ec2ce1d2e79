-- ddp.data.dataset: data.TensorDataset, samples as rows of tensors of one
-- length -- the dataset whose batches the DataLoader gathers in C.
local core = require "ddp.core"
local checks = require "ddp.data.checks"
local raise, show = core.raise, core.show
local is_tensor, is_integer = core.is_tensor, core.is_integer
local select, unpack = select, unpack

core.add_lib_file(debug.getinfo(1, "S").source)

local M = {}

local TensorDataset = checks.class("TensorDataset")
M.TensorDataset = TensorDataset

-- data.TensorDataset(x, y, ...): sample i is (x[i], y[i], ...); every
-- tensor has the same size(0).
function TensorDataset:init(...)
  local op = "TensorDataset"
  local n = select("#", ...)
  if n == 0 then raise(op .. ": expected one or more tensors") end
  local fields = { ... }
  for i = 1, n do
    local t = fields[i]
    if not is_tensor(t) then
      raise(("%s: argument %d is a %s, expected a tensor"):format(op, i, core.describe(t)))
    end
    if t:dim() == 0 then
      raise(("%s: tensor %d is 0-dim; every tensor needs a first dim that counts samples"):format(op, i))
    end
    if t:size(0) ~= fields[1]:size(0) then
      raise(("%s: all tensors need the same size(0), but tensor 1 has shape %s and tensor %d has shape %s")
            :format(op, core.fmt_shape(fields[1]:shape()), i, core.fmt_shape(t:shape())))
    end
  end
  self._fields, self._n = fields, fields[1]:size(0)
end

function TensorDataset:len() return self._n end
TensorDataset.__len = TensorDataset.len

-- ds:get(i) (0-based; negative from the end): the fields of sample i, each
-- as t:get(i) gives it -- a view for a tensor of 2 or more dims, a number
-- for a 1-D one.
function TensorDataset:get(i)
  local n = self._n
  if not is_integer(i) or i < -n or i >= n then
    raise(("TensorDataset:get: index %s out of range for %d samples"):format(show(i), n))
  end
  local f = self._fields
  if #f == 2 then return f[1]:get(i), f[2]:get(i) end
  local out = {}
  for k = 1, #f do out[k] = f[k]:get(i) end
  return unpack(out, 1, #f)
end

-- The tensors, as a new table.
function TensorDataset:tensors()
  return { unpack(self._fields) }
end

function TensorDataset:__tostring()
  local parts = {}
  for k, t in ipairs(self._fields) do
    parts[k] = t:dtype() .. " " .. core.fmt_shape(t:shape())
  end
  return ("TensorDataset(%d samples: %s)"):format(self._n, table.concat(parts, ", "))
end

return M
