-- ddp.summary.histogram: the buckets of SummaryWriter:add_histogram, as
-- PyTorch's torch.utils.tensorboard.summary.make_histogram makes them:
-- numpy.histogram's counts over the bin edges ("tensorflow": PyTorch's
-- default exponential edges, +-1e-12 * 1.1^k up to 1e20 and 0; a number n:
-- n equal bins from the minimum to the maximum; a list: those edges), then
-- trimmed to the buckets from one before the first non-empty one to the
-- last non-empty one, each named by its right edge (TensorBoard's
-- HistogramProto).  Values outside the edges are not counted, as numpy's.
local core = require "ddp.core"
local raise, show, is_integer = core.raise, core.show, core.is_integer
local floor, huge = math.floor, math.huge
local type = type

core.add_lib_file(debug.getinfo(1, "S").source)

local M = {}

-- PyTorch's SummaryWriter.default_bins, computed the same way (the same
-- doubles: v *= 1.1 from 1e-12 while v < 1e20).
local tf_edges
local function tensorflow_edges()
  if tf_edges then return tf_edges end
  local pos, v = {}, 1e-12
  while v < 1e20 do
    pos[#pos + 1] = v
    v = v * 1.1
  end
  local e = {}
  for i = #pos, 1, -1 do e[#e + 1] = -pos[i] end
  e[#e + 1] = 0
  for i = 1, #pos do e[#e + 1] = pos[i] end
  tf_edges = e
  return e
end

-- The edges of bins (see the top) for values from lo to hi.
local function edges_of(op, bins, lo, hi)
  if bins == nil or bins == "tensorflow" then return tensorflow_edges(), false end
  if is_integer(bins) and bins >= 1 then
    -- numpy.histogram(bins = n): linspace(lo, hi, n + 1), a point widened
    -- to +-0.5
    if lo == hi then lo, hi = lo - 0.5, hi + 0.5 end
    local e, step = {}, (hi - lo) / bins
    for i = 0, bins - 1 do e[i + 1] = i * step + lo end
    e[bins + 1] = hi
    return e, true
  end
  if type(bins) == "table" and #bins >= 2 then
    for i = 1, #bins do
      if type(bins[i]) ~= "number" or bins[i] ~= bins[i] or (i > 1 and bins[i] < bins[i - 1]) then
        raise(("%s: bins must be increasing numbers, got %s at %d"):format(op, show(bins[i]), i))
      end
    end
    return bins, false
  end
  raise(("%s: bins must be \"tensorflow\", a number of bins >= 1 or a list of at least 2 edges, got %s")
        :format(op, show(bins)))
end

-- The bin of x among the edges e (1-based), or nil outside them: the
-- last edge belongs to the last bin, every other edge to the bin it opens.
local function bin_search(e, x)
  local m = #e
  if x < e[1] or x > e[m] then return nil end
  if x == e[m] then return m - 1 end
  local a, b = 1, m  -- e[a] <= x < e[b]
  while b - a > 1 do
    local mid = floor((a + b) / 2)
    if e[mid] <= x then a = mid else b = mid end
  end
  return a
end

-- histogram.make(p, n, bins[, op]): the HistogramProto's fields of the n
-- float64 values at p -- {min =, max =, num =, sum =, sum_squares =,
-- bucket_limit = {...}, bucket = {...}}.  An empty input or one holding NaN
-- or an infinity is an error, as PyTorch's.
function M.make(p, n, bins, op)
  op = op or "add_histogram"
  if n == 0 then raise(op .. ": the tensor has no element") end
  local lo, hi, sum, sq = huge, -huge, 0, 0
  for i = 0, n - 1 do
    local x = p[i]
    if x ~= x or x == huge or x == -huge then
      raise(("%s: the values must be finite, element %d is %s"):format(op, i + 1, tostring(x)))
    end
    if x < lo then lo = x end
    if x > hi then hi = x end
    sum, sq = sum + x, sq + x * x
  end
  local e, uniform = edges_of(op, bins, lo, hi)
  local nb = #e - 1
  local counts = {}
  for i = 1, nb do counts[i] = 0 end
  if uniform then
    -- numpy's way for equal bins: the index from the scale, then moved by
    -- one where rounding put x past an edge
    local first, denom = e[1], e[nb + 1] - e[1]
    for i = 0, n - 1 do
      local x = p[i]
      local k = floor((x - first) / denom * nb)  -- 0-based
      if k == nb then k = nb - 1 end
      if x < e[k + 1] then k = k - 1 end
      if k < nb - 1 and x >= e[k + 2] then k = k + 1 end
      counts[k + 1] = counts[k + 1] + 1
    end
  else
    for i = 0, n - 1 do
      local k = bin_search(e, p[i])
      if k then counts[k] = counts[k] + 1 end
    end
  end
  local first, last
  for i = 1, nb do
    if counts[i] > 0 then
      first = first or i
      last = i
    end
  end
  if not first then
    raise(("%s: no value lies within the bins (from %s to %s)"):format(op, show(e[1]), show(e[#e])))
  end
  -- one empty bucket before the first non-empty one, so TensorBoard sees
  -- its left edge too (the bucket before it, or a new one ending at e[1])
  local limit, bucket = {}, {}
  if first == 1 then
    limit[1], bucket[1] = e[1], 0
  else
    limit[1], bucket[1] = e[first], counts[first - 1]
  end
  for i = first, last do
    limit[#limit + 1], bucket[#bucket + 1] = e[i + 1], counts[i]
  end
  return { min = lo, max = hi, num = n, sum = sum, sum_squares = sq, bucket_limit = limit, bucket = bucket }
end

return M
