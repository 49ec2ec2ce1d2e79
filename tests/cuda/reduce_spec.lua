-- Reductions, max/min with indices, scans and softmax on CUDA tensors
-- equal the CPU's: every op in every dtype the CPU takes, over all dims,
-- one dim (first, middle, last, negative) or several, keepdim,
-- transposed inputs, empty tensors, rows long enough for several warps,
-- blocks and slices, NaNs, ties, the errors, and the backward passes.
local ddp = require "ddp"
local H = require "helpers.cuda"

local DTYPES = {"float32", "float64", "int32", "int64", "uint8", "bool", "bfloat16", "float16"}
local FLOATS = {float32 = true, float64 = true, bfloat16 = true, float16 = true}

-- Values with signs, zeros and fractions, and for floats a NaN and an inf
-- (nan = false: finite only).
local function sample(dtype, shape, seed, nan)
  local x = H.sample(dtype, shape, seed)
  return nan == false and x or H.specials(x, 9, 4, 7, 2)
end

local both = H.both

local DIMS = {{nil}, {0}, {1}, {2}, {-1}, {{0, 2}}, {{-1, 0}}, {1, true}, {{0, 2}, true}, {nil, true}}

local function dimname(d)
  local dim, keep = d[1], d[2]
  local s = type(dim) == "table" and ("{" .. table.concat(dim, ",") .. "}") or tostring(dim)
  return s .. (keep and " keepdim" or "")
end

local REDOPS = {"sum", "mean", "prod", "amax", "amin", "all", "any", "logsumexp", "count_nonzero"}
-- Loose where the CPU adds float32 lanes in float and CUDA in double.
local LOOSE = {float32 = {1e-4, 1e-5}}

H.describe("CUDA reductions", function()
  it("every reduction in every dtype, over every kind of dim list", function()
    for _, dt in ipairs(DTYPES) do
      local x = sample(dt, {3, 5, 7}, 1)
      for _, op in ipairs(REDOPS) do
        for _, d in ipairs(DIMS) do
          both(op .. " " .. dt .. " " .. dimname(d), function(t) return t[op](t, d[1], d[2]) end, {x},
               LOOSE[dt])
        end
      end
    end
  end)

  it("var, std and norm (every p) in the float dtypes, and their dtype errors", function()
    for _, dt in ipairs(DTYPES) do
      local x = sample(dt, {4, 6, 5}, 2)
      for _, d in ipairs(DIMS) do
        local n = dt .. " " .. dimname(d)
        both("var " .. n, function(t) return t:var(d[1], nil, d[2]) end, {x}, LOOSE[dt])
        both("std unbiased=false " .. n, function(t) return t:std(d[1], false, d[2]) end, {x}, LOOSE[dt])
        both("var correction=2 " .. n, function(t) return t:var(d[1], {correction = 2}, d[2]) end, {x}, LOOSE[dt])
        for _, p in ipairs({2, 1, 0, 3, 0.5, math.huge, -math.huge}) do
          both("norm p=" .. p .. " " .. n, function(t) return t:norm(p, d[1], d[2]) end, {x}, LOOSE[dt])
        end
      end
    end
  end)

  it("finite inputs (no NaN hiding a wrong value)", function()
    for _, dt in ipairs({"float32", "float64", "float16"}) do
      local x = sample(dt, {6, 4, 9}, 3, false)
      for _, op in ipairs({"sum", "mean", "prod", "amax", "amin", "logsumexp", "var", "std", "norm"}) do
        for _, d in ipairs(DIMS) do
          H.check(op .. " finite " .. dt .. " " .. dimname(d), function(t)
            if op == "norm" then return t:norm(3, d[1], d[2]) end
            return t[op](t, d[1], d[2])
          end, {x}, LOOSE[dt])
        end
      end
    end
  end)

  it("transposed and sliced inputs", function()
    for _, dt in ipairs({"float32", "int64", "bool", "bfloat16"}) do
      local x = sample(dt, {6, 8, 5}, 4)
      local views = {
        t = function(t) return t:transpose(0, 2) end,
        p = function(t) return t:permute({1, 2, 0}) end,
        n = function(t) return t:narrow(1, 2, 5) end,
      }
      for vn, v in pairs(views) do
        for _, op in ipairs({"sum", "amax", "any", "count_nonzero", "prod"}) do
          for _, d in ipairs({{nil}, {0}, {1}, {2}, {{0, 1}}, {{1, 2}, true}}) do
            both(op .. " " .. vn .. " " .. dt .. " " .. dimname(d),
                 function(t) return v(t)[op](v(t), d[1], d[2]) end, {x}, LOOSE[dt])
          end
        end
      end
    end
  end)

  it("long rows and tall columns: several warps, blocks and slices", function()
    local x = sample("float32", {3, 3000}, 5, false)
    for _, op in ipairs({"sum", "mean", "amax", "amin", "logsumexp", "var", "norm", "prod"}) do
      H.check(op .. " 3x3000 dim 1", function(t) return t[op](t, 1) end, {x}, LOOSE.float32)
      H.check(op .. " 3000x3 dim 0", function(t) return t:t()[op](t:t(), 0) end, {x}, LOOSE.float32)
      H.check(op .. " 3x3000 all", function(t) return t[op](t) end, {x}, {1e-4, 1e-4})
    end
    local big = sample("float64", {20000}, 6, false)
    H.check("sum 20000 sliced", function(t) return t:sum() end, {big})
    H.check("var 20000 sliced", function(t) return t:var() end, {big})
    H.check("amax 20000 sliced", function(t) return t:amax() end, {big})
    local tall = sample("int64", {3000, 4}, 7)
    H.check("sum int64 3000x4 dim 0", function(t) return t:sum(0) end, {tall})
    H.check("count_nonzero 3000x4 dim 0", function(t) return t:count_nonzero(0) end, {tall})
    local nanbig = sample("float32", {12000}, 8, false)
    nanbig:set(9000, 0 / 0)
    H.check("amax with one NaN late in a sliced row", function(t) return t:amax() end, {nanbig})
    H.check("sum with one NaN late in a sliced row", function(t) return t:sum() end, {nanbig})
  end)

  it("empty tensors and the errors", function()
    for _, dt in ipairs({"float32", "int64", "bool", "float16"}) do
      local e = sample(dt, {0, 4}, 1)
      for _, op in ipairs({"sum", "mean", "prod", "amax", "amin", "all", "any", "logsumexp",
                           "count_nonzero", "var", "std", "norm"}) do
        for _, d in ipairs({{nil}, {0}, {1}, {0, true}}) do
          both(op .. " empty " .. dt .. " " .. dimname(d), function(t) return t[op](t, d[1], d[2]) end, {e})
        end
      end
    end
    local x = sample("float32", {2, 3}, 1)
    both("sum dim out of range", function(t) return t:sum(5) end, {x})
    both("sum repeated dim", function(t) return t:sum({1, 1}) end, {x})
    both("mean of int64", function(t) return t:mean() end, {sample("int64", {2, 3})})
    H.check("0-dim sum", function(t) return t:sum() end, {ddp.tensor(2.5)})
    local one = sample("float32", {1, 4}, 22, false)
    for _, c in ipairs({0, 1, 2}) do
      H.check("var of one element, correction " .. c, function(t) return t:var(0, {correction = c}) end, {one})
      H.check("std of 4, correction " .. c, function(t) return t:std(1, {correction = c}) end, {one})
    end
    for _, op in ipairs({"softmax", "log_softmax", "cumprod", "argmax", "max"}) do
      both(op .. " 0-dim", function(t) return t[op](t, 0) end, {ddp.tensor(-1.5)})
    end
    local inf = ddp.tensor({{1 / 0, 1 / 0}, {-1 / 0, -1 / 0}, {-1 / 0, 3}})
    H.check("logsumexp of infinities", function(t) return t:logsumexp(1) end, {inf})
    H.check("logsumexp over nothing", function(t) return t:logsumexp(1) end, {ddp.zeros({2, 0})})
  end)

  it("mixed devices fail", function()
    local a = sample("float32", {2, 3}, 1):cuda()
    assert.has_error(function() return a:sum() + ddp.ones({2}) end)
  end)

  it("backward of the reductions on CUDA", function()
    local x = sample("float32", {4, 5}, 9, false)
    for _, op in ipairs({"sum", "mean", "prod", "amax", "amin", "var", "std", "norm", "logsumexp"}) do
      for _, d in ipairs({{nil}, {1}, {0, true}}) do
        H.check(op .. " backward " .. dimname(d), function(t)
          local l = t:detach():requires_grad_(true)
          local y = op == "norm" and l:norm(2, d[1], d[2]) or l[op](l, d[1], d[2])
          y:sum():backward()
          return y, l.grad
        end, {x}, LOOSE.float32)
      end
    end
  end)
end)

H.describe("CUDA max/min with indices", function()
  it("max/min values and indices, argmax/argmin, every dtype and dim", function()
    for _, dt in ipairs(DTYPES) do
      local x = sample(dt, {4, 5, 6}, 10)
      for _, fn in ipairs({"max", "min"}) do
        for _, dim in ipairs({0, 1, 2, -1}) do
          both(fn .. " " .. dt .. " dim " .. dim, function(t) return t[fn](t, dim) end, {x})
          both(fn .. " keepdim " .. dt .. " dim " .. dim, function(t) return t[fn](t, dim, true) end, {x})
        end
      end
      for _, fn in ipairs({"argmax", "argmin"}) do
        for _, dim in ipairs({0, 1, 2, -2}) do
          both(fn .. " " .. dt .. " dim " .. dim, function(t) return t[fn](t, dim) end, {x})
        end
        both(fn .. " " .. dt .. " flat", function(t) return t[fn](t) end, {x})
        both(fn .. " " .. dt .. " flat keepdim", function(t) return t[fn](t, nil, true) end, {x})
      end
    end
  end)

  it("ties go to the first index, the first NaN wins", function()
    local ties = ddp.tensor({{1, 3, 3, 0, 3}, {2, 2, 2, 2, 2}, {0 / 0, 1, 0 / 0, 5, 5}})
    for _, fn in ipairs({"max", "min"}) do
      H.check(fn .. " ties", function(t) return t[fn](t, 1) end, {ties})
      H.check(fn .. " ties dim 0", function(t) return t[fn](t, 0) end, {ties})
    end
    -- long rows: ties and NaNs across warps (row kernel) and along columns
    local long = ddp.zeros({2, 3000})
    long:set(0, 2999, 1) long:set(0, 1500, 1)
    long:set(1, 2000, 0 / 0) long:set(1, 2500, 0 / 0)
    for _, fn in ipairs({"argmax", "argmin"}) do
      H.check(fn .. " long ties", function(t) return t[fn](t, 1) end, {long})
      H.check(fn .. " long ties transposed", function(t) return t:t()[fn](t:t(), 0) end, {long})
      H.check(fn .. " long flat", function(t) return t[fn](t) end, {long})
    end
    -- rows long enough to be cut into slices: ties and NaNs across them
    local sl = ddp.zeros({2, 20000})
    sl:set(0, 19000, 2) sl:set(0, 5000, 2) sl:set(0, 12000, -3) sl:set(0, 300, -3)
    sl:set(1, 15000, 0 / 0) sl:set(1, 9000, 0 / 0) sl:set(1, 100, 7)
    for _, fn in ipairs({"max", "min"}) do
      H.check(fn .. " sliced rows", function(t) return t[fn](t, 1) end, {sl})
    end
    H.check("argmax sliced flat", function(t) return t:argmax() end, {sl})
    local si = sl:narrow(0, 0, 1):to("int64")
    H.check("argmin sliced flat int64", function(t) return t:argmin() end, {si})
    H.check("argmax sliced flat int64", function(t) return t:argmax() end, {si})
    local wide = ddp.zeros({5000, 3}):to("int32")
    H.check("argmax all ties, many outputs", function(t) return t:argmax(1) end, {wide})
    H.check("argmin all ties, columns", function(t) return t:argmin(0) end, {wide})
  end)

  it("empty dims fail, backward of max(dim)", function()
    both("max over an empty dim", function(t) return t:max(0) end, {ddp.zeros({0, 3})})
    both("argmax of nothing", function(t) return t:argmax() end, {ddp.zeros({0})})
    H.check("max(dim) of size-0 kept dims", function(t) return t:max(1) end, {ddp.zeros({0, 3})})
    local x = sample("float32", {4, 5}, 11, false)
    local function back(t)
      local l = t:detach():requires_grad_(true)
      local v = l:max(1)
      v:sum():backward()
      return v, l.grad
    end
    H.check("max dim backward", back, {x})
    H.check("min dim keepdim backward", function(t)
      local l = t:detach():requires_grad_(true)
      local v = l:min(0, true)
      v:sum():backward()
      return v, l.grad
    end, {x})
  end)
end)

H.describe("CUDA scans and softmax", function()
  it("cumsum and cumprod in every dtype along every dim", function()
    for _, dt in ipairs(DTYPES) do
      local x = sample(dt, {3, 4, 37}, 12)
      for _, fn in ipairs({"cumsum", "cumprod"}) do
        for _, dim in ipairs({0, 1, 2, -1}) do
          both(fn .. " " .. dt .. " dim " .. dim, function(t) return t[fn](t, dim) end, {x}, LOOSE[dt])
          both(fn .. " transposed " .. dt .. " dim " .. dim,
               function(t) return t:transpose(0, 2)[fn](t:transpose(0, 2), dim) end, {x}, LOOSE[dt])
        end
      end
    end
    local long = sample("float64", {2, 3000}, 13, false) / 10
    H.check("cumsum long rows", function(t) return t:cumsum(1) end, {long})
    H.check("cumprod long rows", function(t) return (t / 10 + 1):cumprod(1) end, {long})
    H.check("cumsum int64 long rows", function(t) return t:cumsum(1) end, {sample("int64", {2, 3000}, 23)})
    H.check("cumsum long columns", function(t) return t:t():cumsum(0) end, {long})
    both("cumsum empty", function(t) return t:cumsum(0) end, {ddp.zeros({0, 3})})
    both("cumsum bad dim", function(t) return t:cumsum(3) end, {ddp.zeros({2, 3})})
    H.check("cumsum 0-dim", function(t) return t:cumsum(0) end, {ddp.tensor(3.0)})
  end)

  it("softmax and log_softmax, rows short and long, NaN and -inf rows", function()
    for _, dt in ipairs(DTYPES) do
      local x = sample(dt, {3, 4, 33}, 14)
      for _, fn in ipairs({"softmax", "log_softmax"}) do
        for _, dim in ipairs({0, 1, 2, -1}) do
          both(fn .. " " .. dt .. " dim " .. dim, function(t) return t[fn](t, dim) end, {x})
        end
      end
    end
    local inf = ddp.tensor({{-1 / 0, -1 / 0, -1 / 0}, {1, -1 / 0, 2}, {0 / 0, 1, 2}})
    for _, fn in ipairs({"softmax", "log_softmax"}) do
      H.check(fn .. " inf/nan rows", function(t) return t[fn](t, 1) end, {inf})
      H.check(fn .. " inf/nan cols", function(t) return t[fn](t, 0) end, {inf})
      for _, n in ipairs({1, 31, 1024, 1025, 3000}) do
        local x = sample("float32", {3, n}, n, false)
        H.check(fn .. " width " .. n, function(t) return t[fn](t, 1) end, {x})
      end
      H.check(fn .. " float64 width 3000", function(t) return t[fn](t, -1) end,
              {sample("float64", {2, 3000}, 15, false)})
      both(fn .. " empty int", function(t) return t[fn](t, 0) end, {ddp.zeros({0, 3}):to("int64")})
      both(fn .. " int fails", function(t) return t[fn](t, 0) end, {ddp.zeros({2, 3}):to("int64")})
    end
  end)

  it("backward of softmax, log_softmax, cumsum and cumprod", function()
    local x = sample("float32", {4, 40}, 16, false)
    local w = sample("float32", {4, 40}, 17, false)
    for _, fn in ipairs({"softmax", "log_softmax", "cumsum", "cumprod"}) do
      for _, dim in ipairs({0, 1}) do
        H.check(fn .. " backward dim " .. dim, function(t, g)
          local l = t:detach():requires_grad_(true)
          local y = l[fn](l, dim)
          local s = (y * g):sum()
          s:backward()
          return y, l.grad
        end, {x, w}, {1e-4, 1e-5})
      end
    end
  end)
end)

H.describe("CUDA sort and topk", function()
  it("sort in every dtype along every dim, both directions, stable ties and NaNs", function()
    for _, dt in ipairs(DTYPES) do
      local x = sample(dt, {3, 4, 37}, 18)
      if dt ~= "bool" and dt ~= "uint8" then x = (x / 2):round():to(dt) end  -- many ties
      for _, dim in ipairs({0, 1, 2, -1}) do
        for _, desc in ipairs({false, true}) do
          both("sort " .. dt .. " dim " .. dim .. (desc and " desc" or ""),
               function(t) return t:sort(dim, desc) end, {x})
        end
        both("sort transposed " .. dt .. " dim " .. dim,
             function(t) return t:transpose(0, 2):sort(dim, true) end, {x})
      end
    end
    local z = ddp.tensor({0.0, -0.0, 0 / 0, 1, -1 / 0, 0 / 0, -0.0, 1 / 0})
    H.check("sort signed zeros and NaNs", function(t) return t:sort() end, {z})
    H.check("sort signed zeros and NaNs desc", function(t) return t:sort(0, true) end, {z})
    local long = (sample("float32", {2, 3000}, 19, false) * 4):round()
    H.check("sort long rows (global network)", function(t) return t:sort(1) end, {long})
    H.check("sort long columns desc", function(t) return t:t():sort(0, true) end, {long})
    H.check("sort 0-dim", function(t) return t:sort() end, {ddp.tensor(1.5)})
    both("sort empty", function(t) return t:sort(0) end, {ddp.zeros({0, 3})})
    both("sort empty other dim", function(t) return t:sort(1) end, {ddp.zeros({0, 3})})
  end)

  it("topk: k from 0 to n, largest and smallest, dims, errors", function()
    for _, dt in ipairs({"float32", "int64", "float16", "uint8"}) do
      local x = sample(dt, {5, 9, 6}, 20)
      for _, k in ipairs({0, 1, 3, 6}) do
        for _, largest in ipairs({true, false}) do
          both("topk " .. dt .. " k " .. k .. (largest and "" or " smallest"),
               function(t) return t:topk(k, -1, largest) end, {x})
          both("topk dim 0 " .. dt .. " k " .. k, function(t) return t:topk(k, 0, largest) end, {x})
        end
      end
      both("topk k too large " .. dt, function(t) return t:topk(7) end, {x})
      both("topk k negative " .. dt, function(t) return t:topk(-1) end, {x})
    end
    H.check("topk long row", function(t) return t:topk(10, 1) end, {sample("float64", {2, 3000}, 21)})
  end)

  it("backward of sort and topk", function()
    local x = sample("float32", {4, 7}, 24, false)
    local w = sample("float32", {4, 3}, 25, false)
    H.check("sort backward", function(t)
      local l = t:detach():requires_grad_(true)
      local v = l:sort(1, true)
      local s = (v * t):sum()
      s:backward()
      return v, l.grad
    end, {x})
    H.check("topk backward", function(t, g)
      local l = t:detach():requires_grad_(true)
      local v = l:topk(3, 1)
      local s = (v * g):sum()
      s:backward()
      return v, l.grad
    end, {x, w})
  end)
end)
