-- ddp.multinomial / t:multinomial as torch.multinomial: the distribution
-- of the draws (chi-square tests with fixed seeds and generous bounds),
-- without replacement by default, determinism under ddp.manual_seed, and
-- PyTorch's errors.
local ddp = require "ddp"
require "ddp.testing"  -- assert.tensor_equal

-- counts[c + 1] of category c among the values of a list
local function counts(list, n)
  local r = {}
  for i = 1, n do r[i] = 0 end
  for _, v in ipairs(list) do r[v + 1] = r[v + 1] + 1 end
  return r
end

-- Pearson's chi-square of observed counts against probabilities p (only
-- the categories of p > 0; one of p == 0 must never occur).
local function chi2(obs, p, total)
  local x, df = 0, -1
  for i, pi in ipairs(p) do
    if pi == 0 then
      assert.equal(0, obs[i], "a category of weight 0 was drawn")
    else
      local e = total * pi
      x, df = x + (obs[i] - e) ^ 2 / e, df + 1
    end
  end
  return x, df
end

local function normalised(w)
  local s, r = 0, {}
  for _, v in ipairs(w) do s = s + v end
  for i, v in ipairs(w) do r[i] = v / s end
  return r
end

-- Bounds: the chi-square of df 3 to 5 exceeds 30 with probability < 2e-5.
local BOUND = 30

describe("multinomial", function()
  it("draws with replacement in proportion to unnormalised weights", function()
    ddp.manual_seed(1234)
    local w = { 1, 2, 3, 4, 0, 10 }
    local draws = ddp.multinomial(ddp.tensor(w, { dtype = "float32" }), 20000, { replacement = true })
    assert.same({ 20000 }, draws:shape())
    assert.equal("int64", draws:dtype())
    local x, df = chi2(counts(draws:totable(), #w), normalised(w), 20000)
    assert.equal(4, df)
    assert.is_true(x < BOUND, ("chi-square %.2f"):format(x))
    -- each row of a 2-D input by its own weights
    local rows = ddp.tensor({ { 5, 0, 1, 1 }, { 0.1, 0.2, 0.3, 0.4 } }, { dtype = "float64" })
    local d = rows:multinomial(10000, true)
    assert.same({ 2, 10000 }, d:shape())
    local t = d:totable()
    x = chi2(counts(t[1], 4), normalised { 5, 0, 1, 1 }, 10000)
    assert.is_true(x < BOUND, ("row 0: chi-square %.2f"):format(x))
    x = chi2(counts(t[2], 4), normalised { 0.1, 0.2, 0.3, 0.4 }, 10000)
    assert.is_true(x < BOUND, ("row 1: chi-square %.2f"):format(x))
  end)

  it("draws without replacement by default: distinct categories, first and second draws as sequential sampling", function()
    ddp.manual_seed(99)
    local w = { 1, 2, 3, 4 }
    local p = normalised(w)
    local rows = 20000
    local d = ddp.tensor(w, { dtype = "float32" }):unsqueeze(0):expand(rows, 4):contiguous():multinomial(2)
    assert.same({ rows, 2 }, d:shape())
    local first, second = {}, {}
    for i, r in ipairs(d:totable()) do
      assert.is_true(r[1] ~= r[2], "a category drawn twice")
      first[i], second[i] = r[1], r[2]
    end
    local x = chi2(counts(first, 4), p, rows)
    assert.is_true(x < BOUND, ("first draw: chi-square %.2f"):format(x))
    -- P(second = j) = sum over i ~= j of p_i p_j / (1 - p_i)
    local q = {}
    for j = 1, 4 do
      q[j] = 0
      for i = 1, 4 do
        if i ~= j then q[j] = q[j] + p[i] * p[j] / (1 - p[i]) end
      end
    end
    x = chi2(counts(second, 4), q, rows)
    assert.is_true(x < BOUND, ("second draw: chi-square %.2f"):format(x))
    -- as many samples as categories: a permutation; weight-0 categories come last
    local perm = ddp.tensor({ 0, 3, 1, 0, 2 }, { dtype = "float64" }):multinomial(5):totable()
    local seen = {}
    for _, v in ipairs(perm) do seen[v] = true end
    for c = 0, 4 do assert.is_true(seen[c]) end
    assert.is_true((perm[4] == 0 or perm[4] == 3) and (perm[5] == 0 or perm[5] == 3))
  end)

  it("is deterministic under ddp.manual_seed, and the method and the function agree", function()
    local w = ddp.rand(3, 7)
    ddp.manual_seed(5)
    local a = ddp.multinomial(w, 4)
    local b = w:multinomial(50, true)
    ddp.manual_seed(5)
    assert.tensor_equal(a, w:multinomial(4))
    assert.tensor_equal(b, ddp.multinomial(w, 50, { replacement = true }))
    ddp.manual_seed(6)
    assert.is_false(ddp.equal(b, w:multinomial(50, true)))
  end)

  it("refuses what PyTorch refuses, at the caller's line", function()
    local function err(f)
      local ok, e = pcall(f)
      assert.is_false(ok)
      return e
    end
    local bad = "probability tensor contains either `inf`, `nan` or element < 0"
    assert.matches("sampling_spec.lua:%d+: multinomial: " .. bad:gsub("%p", "%%%0"),
                   err(function() ddp.multinomial(ddp.tensor({ 0.2, -0.1, 0.5 }), 1) end))
    assert.matches(bad:gsub("%p", "%%%0"), err(function() ddp.multinomial(ddp.tensor({ 0.2, math.huge }), 1, true) end))
    assert.matches(bad:gsub("%p", "%%%0"), err(function() ddp.multinomial(ddp.tensor({ 0.2, 0 / 0 }), 1) end))
    assert.matches("invalid multinomial distribution %(sum of probabilities <= 0%)",
                   err(function() ddp.multinomial(ddp.tensor({ { 0.0, 0, 0 }, { 1, 1, 1 } }, { dtype = "float32" }), 1) end))
    assert.matches("cannot sample n_sample > prob_dist.size%(%-1%) samples without replacement",
                   err(function() ddp.multinomial(ddp.tensor({ 0.2, 0.3, 0.5 }), 4) end))
    assert.matches("cannot sample n_sample <= 0 samples", err(function() ddp.multinomial(ddp.tensor({ 0.5, 0.5 }), 0) end))
    assert.matches("prob_dist must be 1 or 2 dim", err(function() ddp.multinomial(ddp.ones(2, 2, 2), 1) end))
    assert.matches("multinomial only supports floating%-point dtypes for input, got: int64",
                   err(function() ddp.multinomial(ddp.tensor({ 1, 2 }), 1) end))
    assert.matches("generator is not supported", err(function() ddp.multinomial(ddp.ones(2), 1, { generator = {} }) end))
    assert.matches("unknown option \"replace\"", err(function() ddp.multinomial(ddp.ones(2), 1, { replace = true }) end))
  end)

  it("draws many samples with replacement in chunks", function()
    ddp.manual_seed(3)
    local w = ddp.rand(64, 300)
    w:narrow(1, 0, 150):zero_()
    local d = w:multinomial(300, true)  -- 64 * 300 * 300 comparisons: several chunks
    assert.same({ 64, 300 }, d:shape())
    assert.is_true(d:min():item() >= 150 and d:max():item() < 300)
  end)
end)
