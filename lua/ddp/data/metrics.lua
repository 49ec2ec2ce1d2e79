-- ddp.data.metrics: data.reduce_metrics, evaluation metrics summed over
-- the ranks (exactly, in rank order, the same numbers on every rank).
local core = require "ddp.core"
local dist = require "ddp.dist"
local raise, show = core.raise, core.show
local is_tensor, is_integer = core.is_tensor, core.is_integer
local type, pairs, getmetatable = type, pairs, getmetatable

core.add_lib_file(debug.getinfo(1, "S").source)

local M = {}

-- data.reduce_metrics(t): a new table with t's keys, each value summed over
-- all ranks -- e.g. {correct =, count =, loss_sum =} of an evaluation under
-- an eval-mode DistributedSampler, giving the full dataset's totals (so
-- accuracy = correct / count is exact, nothing counted twice).  Values are
-- numbers or one-element tensors; every rank must pass the same keys.  The
-- sums are taken in rank order on every rank, so each gets the very same
-- numbers (counts stay exact up to 2^53).  In a world of one it returns a
-- copy without touching the process group; otherwise it needs ddp.init().
function M.reduce_metrics(t)
  local op = "reduce_metrics"
  if type(t) ~= "table" or is_tensor(t) or getmetatable(t) ~= nil then
    raise(("%s: expected a table of numbers such as {correct = c, count = n}, got %s"):format(op, show(t)))
  end
  local vals = {}
  for k, v in pairs(t) do
    if type(k) ~= "string" and not is_integer(k) then
      raise(("%s: keys must be strings or integers, got %s"):format(op, show(k)))
    end
    if is_tensor(v) then
      if v:numel() ~= 1 then
        raise(("%s: metric %s is a tensor of %d elements; expected a number or a one-element tensor")
              :format(op, show(k), v:numel()))
      end
      v = v:item()
    elseif type(v) ~= "number" then
      raise(("%s: metric %s must be a number or a one-element tensor, got %s"):format(op, show(k), show(v)))
    end
    vals[k] = v
  end
  if dist.world_size() == 1 then return vals end
  if not dist.is_initialized() then
    raise(("%s: call ddp.init() first (a world of %d ranks sums through the process group)")
          :format(op, dist.world_size()))
  end
  local all = dist.all_gather_object(vals)
  -- every rank sees every table, so a mismatch raises on all of them
  local out = {}
  for k in pairs(vals) do out[k] = 0 end
  for r = 1, #all do
    for k in pairs(vals) do
      if all[r][k] == nil then
        raise(("%s: rank %d has no metric %s, which rank %d has; every rank must pass the same keys")
              :format(op, r - 1, show(k), dist.rank()))
      end
    end
    for k, v in pairs(all[r]) do
      if out[k] == nil then
        raise(("%s: rank %d has a metric %s, which rank %d lacks; every rank must pass the same keys")
              :format(op, r - 1, show(k), dist.rank()))
      end
      out[k] = out[k] + v
    end
  end
  return out
end

return M
