-- tests/helpers/loaders.lua: the datasets and passes that the data-loading
-- specs (data_spec, sampler_spec) share.
local ddp = require "ddp"
local data = require "ddp.data"

local M = {}

-- A dataset whose x are the sample indices (and y = 10 x), so batches show
-- the order.
function M.index_dataset(n)
  return data.TensorDataset(ddp.arange(n), ddp.arange(n):mul(10))
end

-- Every x of one pass over loader, in order; then the batch sizes and the
-- batch numbers.
function M.pass(loader)
  local seen, sizes, numbers = {}, {}, {}
  for i, x in loader:iter() do
    numbers[#numbers + 1] = i
    sizes[#sizes + 1] = x:size(0)
    for _, v in ipairs(x:totable()) do seen[#seen + 1] = v end
  end
  return seen, sizes, numbers
end

return M
