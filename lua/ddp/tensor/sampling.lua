-- ddp.tensor.sampling: t:multinomial(num_samples[, replacement][, {replacement =}])
-- (also ddp.multinomial), as torch.multinomial, composed from tensor ops
-- over the runtime's Philox stream, so ddp.manual_seed fixes the draws.
local core = require "ddp.core"
local C = core.C
local new, raise = core.new, core.raise
local type = type

core.add_lib_file(debug.getinfo(1, "S").source)

local M = {}
local T  -- every tensor method (ddp.tensor fills it)
local m = {}

-- float64 uniforms in [0, 1), [rows, cols], from the global stream
local function uniform(rows, cols)
  local n = core.shape_args("multinomial", false, { rows, cols })
  return new(C.dl_rand, core.shape_buf, n, C.DL_FLOAT64)
end

-- Most comparison elements one chunk of draws with replacement may build.
local CHUNK = 2 ^ 22

-- With replacement: each draw u * total lands in the category whose
-- interval of the cumulative weights holds it (the number of cumulative
-- weights <= it; a zero weight has an empty interval).
local function with_replacement(w, rows, n, s)
  local cdf = T.cumsum(w, 1)
  local total = T.narrow(cdf, 1, n - 1, 1)
  local per = math.max(1, math.floor(CHUNK / (rows * n)))
  local out
  if per < s then out = new(C.dl_empty, core.shape_buf, core.shape_args("multinomial", false, { rows, s }), C.DL_INT64) end
  for lo = 0, s - 1, per do
    local k = math.min(per, s - lo)
    local u = T.mul(uniform(rows, k), total)
    local idx = T.sum(T.le(T.unsqueeze(cdf, 1), T.unsqueeze(u, 2)), 2)
    idx = T.clamp_max(idx, n - 1)  -- u * total rounded up to total
    if not out then return idx end
    T.copy_(T.narrow(out, 1, lo, k), idx)
  end
  return out
end

-- Without replacement: the s largest of w / E, E ~ Exp(1) independent, are
-- a draw of s categories one after another, each in proportion to the
-- weights left (the exponential race; categories of weight 0 come last).
local function without_replacement(w, rows, n, s)
  local e = T.neg(T.log(uniform(rows, n)))
  local _, idx = T.topk(T.div(w, e), s, 1)
  return idx
end

function m.multinomial(t, num_samples, replacement, opts)
  if type(replacement) == "table" and opts == nil then replacement, opts = nil, replacement end
  opts = opts or {}
  if type(opts) ~= "table" then
    raise("multinomial: options must be a table such as {replacement = true}, got " .. core.show(opts))
  end
  for k in pairs(opts) do
    if k ~= "replacement" and k ~= "generator" then
      raise(("multinomial: unknown option %s (options: replacement, generator)"):format(core.show(k)))
    end
  end
  if opts.replacement ~= nil then replacement = opts.replacement end
  if opts.generator ~= nil then
    raise("multinomial: generator is not supported (ddplua has one generator per process: seed it with ddp.manual_seed, or keep its state with ddp.get_rng_state/set_rng_state)")
  end
  if not T.is_floating_point(t) then
    raise("multinomial: multinomial only supports floating-point dtypes for input, got: " .. T.dtype(t))
  end
  local nd = T.dim(t)
  if nd ~= 1 and nd ~= 2 then raise(("multinomial: prob_dist must be 1 or 2 dim, got %d dims"):format(nd)) end
  if not core.is_integer(num_samples) then
    raise("multinomial: num_samples must be an integer, got " .. core.show(num_samples))
  end
  if num_samples <= 0 then raise("multinomial: cannot sample n_sample <= 0 samples") end
  local n = T.size(t, -1)
  if not replacement and num_samples > n then
    raise(("multinomial: cannot sample n_sample > prob_dist.size(-1) samples without replacement (%d > %d)")
          :format(num_samples, n))
  end
  local device = T.device(t)
  local w = T.to(T.detach(t), "float64")
  if device ~= "cpu" then w = T.to(w, "cpu") end
  if nd == 1 then w = T.unsqueeze(w, 0) end
  local rows = T.size(w, 0)
  if T.any(T.logical_or(T.logical_or(T.lt(w, 0), T.isinf(w)), T.isnan(w))) then
    raise("multinomial: probability tensor contains either `inf`, `nan` or element < 0")
  end
  if n == 0 or T.any(T.le(T.sum(w, 1), 0)) then
    raise("multinomial: invalid multinomial distribution (sum of probabilities <= 0)")
  end
  local idx
  if rows == 0 then
    idx = T.to(uniform(0, num_samples), "int64")
  elseif replacement then
    idx = with_replacement(w, rows, n, num_samples)
  else
    idx = without_replacement(w, rows, n, num_samples)
  end
  if nd == 1 then idx = T.squeeze(idx, 0) end
  if device ~= "cpu" then idx = T.to(idx, device) end
  return idx
end

function M.methods(all)
  T = all
  return m
end

return M
