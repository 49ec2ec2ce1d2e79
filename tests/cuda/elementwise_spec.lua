-- Elementwise ops on CUDA tensors equal the CPU's: every binary and unary
-- op in every dtype it takes, broadcasting, non-contiguous operands, Lua
-- numbers as operands, in-place forms, casts, fill, where, clamp, element
-- access, copies across devices, and the errors.
local ddp = require "ddp"
local H = require "helpers.cuda"

local DTYPES = {"float32", "float64", "int32", "int64", "uint8", "bool", "bfloat16", "float16"}

-- Values that exercise signs, zeros, fractions and (for floats) NaN/inf.
local function sample(dtype, shape, seed)
  return H.specials(H.sample(dtype, shape, seed), 3, 0, 1, 2)
end

local BINOPS = {"add", "sub", "mul", "div", "pow", "maximum", "minimum", "eq", "ne", "lt",
  "le", "gt", "ge", "logical_and", "logical_or", "fmod", "remainder", "atan2"}
local UNOPS = {"neg", "abs", "exp", "log", "sqrt", "rsqrt", "sin", "cos", "tanh", "sigmoid",
  "relu", "gelu", "logical_not", "sign", "floor", "ceil", "round", "trunc", "reciprocal",
  "square", "log1p", "expm1", "log2", "silu", "isnan", "isinf", "isfinite"}

local both = H.both

H.describe("CUDA elementwise ops", function()
  it("binary ops in every dtype, with broadcasting", function()
    for _, op in ipairs(BINOPS) do
      for _, dt in ipairs(DTYPES) do
        local a, b = sample(dt, {3, 4}, 1), sample(dt, {4}, 2)
        if (op == "fmod" or op == "remainder" or op == "pow") and not a:is_floating_point() and dt ~= "bool" then
          b = b:abs():add(1):to(dt)  -- no division by zero or negative power here
        end
        both(op .. " " .. dt, function(x, y) return ddp[op] and ddp[op](x, y) or x[op](x, y) end, {a, b})
      end
    end
  end)

  it("non-contiguous, expanded and zero-size operands, Lua numbers", function()
    local a = sample("float32", {5, 6}, 3)
    local b = sample("float32", {6, 5}, 4)
    H.check("add transposed", function(x, y) return x + y:t() end, {a, b})
    H.check("mul narrow", function(x) return x:narrow(1, 1, 3) * 2.5 end, {a})
    H.check("sub expand", function(x) return x - x:select(0, 2):unsqueeze(0):expand(5, 6) end, {a})
    H.check("rsub number", function(x) return 1 - x end, {a})
    H.check("pow number", function(x) return x:abs() ^ 0.5 end, {a})
    H.check("3-d broadcast", function(x, y) return x:view(5, 1, 6) * y:view(1, 5, 6):narrow(2, 0, 6) end,
      {a, sample("float32", {5, 6}, 5)})
    H.check("empty", function(x) return x:narrow(0, 0, 0) + 1 end, {a})
    H.check("int + float number", function(x) return x + 0.5 end, {sample("int64", {7}, 6)})
    H.check("int tensor * float tensor", function(x, y) return x * y end,
      {sample("int32", {7}, 7), sample("float32", {7}, 8)})
    H.check("bf16 + f32", function(x, y) return x + y end,
      {sample("bfloat16", {7}, 9), sample("float32", {7}, 10)})
  end)

  it("unary ops in every dtype", function()
    for _, op in ipairs(UNOPS) do
      for _, dt in ipairs(DTYPES) do
        both(op .. " " .. dt, function(x) return x[op](x) end, {sample(dt, {4, 5}, 11)})
      end
    end
  end)

  it("in-place forms keep the tensor and its device", function()
    local a = sample("float32", {4, 5}, 12)
    H.check("add_", function(x) local y = x:clone() y:add_(x:t():t() * 2) return y end, {a})
    H.check("mul_ number", function(x) local y = x:clone() y:mul_(3) return y end, {a})
    H.check("exp_", function(x) local y = x:clone() y:exp_() return y end, {a})
    H.check("clamp_", function(x) local y = x:clone() y:clamp_(-1, 1) return y end, {a})
    H.check("int add_ float tensor refused like the cpu", function(x)
      local y = x:clone()
      local ok = pcall(function() y:add_(ddp.ones(5, {dtype = "float32", device = y:device()})) end)
      assert(not ok)
      return y
    end, {sample("int32", {4, 5}, 13)})
    H.check("slice fill_", function(x) local y = x:clone() y:narrow(1, 1, 2):fill_(7) return y end, {a})
  end)

  it("in-place writes into an expanded view are refused as on the cpu", function()
    local z = ddp.zeros(1):cuda()
    local x = z:expand(65536)
    for op, f in pairs {
      add_ = function() x:add_(1) end, fill_ = function() x:fill_(1) end,
      copy_ = function() x:copy_(ddp.ones(65536)) end, uniform_ = function() x:uniform_() end,
      clamp_ = function() x:clamp_(0, 1) end, exp_ = function() x:exp_() end,
    } do
      local ok, err = pcall(f)
      assert.is_false(ok)
      assert.truthy(tostring(err):find(op .. ": unsupported operation: more than one element of the "
                                       .. "written-to tensor refers to a single memory location", 1, true), err)
    end
    assert.equal(0, z:item())
  end)

  it("casts between every pair of dtypes", function()
    for _, from in ipairs(DTYPES) do
      for _, to in ipairs(DTYPES) do
        local x = sample(from, {3, 5}, 14)
        if from:match("float") or from == "bfloat16" then x = ddp.where(x:isfinite(), x, 0) end
        if to == "uint8" and x:is_floating_point() then x = x:abs() end
        H.check(from .. " -> " .. to, function(t) return t:to(to) end, {x})
        H.check(from .. " -> " .. to .. " transposed", function(t) return t:t():to(to) end, {x})
      end
    end
  end)

  it("fill, zeros, full and ones on the device", function()
    for _, dt in ipairs(DTYPES) do
      local z = ddp.zeros({2, 3}, {dtype = dt, device = "cuda"})
      assert.equal("cuda:0", z:device())
      H.same(ddp.zeros({2, 3}, {dtype = dt}), z, "zeros " .. dt)
      H.same(ddp.full({2, 3}, 1, {dtype = dt}), ddp.full({2, 3}, 1, {dtype = dt, device = "cuda"}), "full " .. dt)
    end
  end)

  it("where and clamp", function()
    local a, b = sample("float32", {3, 4}, 15), sample("float32", {4}, 16)
    H.check("where", function(x, y) return ddp.where(x:gt(y), x, y) end, {a, b})
    H.check("where number", function(x) return ddp.where(x:gt(0), x, 0) end, {a})
    H.check("where int64", function(x, y) return ddp.where(x:gt(0), x:long(), y:long()) end,
      {sample("int32", {3, 4}, 15):float(), sample("int32", {4}, 16):float()})
    for _, dt in ipairs({"float32", "float64", "int32", "int64", "uint8", "bfloat16"}) do
      H.check("clamp " .. dt, function(x) return x:clamp(1, 5) end, {sample(dt, {10}, 17)})
      H.check("clamp min " .. dt, function(x) return x:clamp(0 / 0, 2) end, {sample(dt, {10}, 18)})
    end
  end)

  it("element access, tolist and printing read device memory", function()
    local a = sample("float32", {2, 3}, 19)
    local d = a:cuda()
    assert.equal(a:get(1, 2), d:get(1, 2))
    d:set(0, 1, 42)
    assert.equal(42, d:get(0, 1))
    assert.same(ddp.tensor({{1, 2}, {3, 4}}):tolist(), ddp.tensor({{1, 2}, {3, 4}}):cuda():tolist())
    assert.equal(3, ddp.tensor({1, 2, 3}):cuda():get(2))
    assert.equal(7, ddp.tensor(7):cuda():item())
    assert.truthy(tostring(d):match("device='cuda:0'"))
  end)

  it("copy_ between devices, in either direction, with a cast", function()
    local a = sample("float32", {3, 4}, 20)
    local d = ddp.zeros({4, 3}, {dtype = "float64", device = "cuda"})
    d:copy_(a:t())
    H.same(a:t():double(), d, "cpu -> cuda copy_")
    local h = ddp.zeros({4, 3}, {dtype = "bfloat16"})
    h:copy_(d)
    H.same(a:t():to("bfloat16"), h:cuda(), "cuda -> cpu copy_")
    local nc = a:cuda():t()
    assert.is_false(nc:is_contiguous())
    H.same(a:t(), nc:cpu():cuda(), "non-contiguous cuda -> cpu")
  end)

  it("errors: mixed devices, integer division by zero, negative integer power", function()
    local a = ddp.ones(3):cuda()
    local ok, err = pcall(function() return a + ddp.ones(3) end)
    assert.is_false(ok)
    assert.truthy(tostring(err):match("same device"), err)
    assert.truthy(tostring(err):match("cuda:0") and tostring(err):match("cpu"), err)
    -- a CPU scalar tensor (0-dim) goes with a CUDA tensor, as in PyTorch
    H.same(ddp.ones(3) * 2, a * ddp.tensor(2.0), "cuda * cpu 0-dim")
    local i = ddp.tensor({1, 2, 3}, {dtype = "int64"}):cuda()
    ok, err = pcall(function() return i:fmod(ddp.tensor({1, 0, 1}, {dtype = "int64"}):cuda()) end)
    assert.is_false(ok)
    assert.truthy(tostring(err):match("division by zero"), err)
    ok, err = pcall(function() return i:pow(ddp.tensor({1, -2, 1}, {dtype = "int64"}):cuda()) end)
    assert.is_false(ok)
    assert.truthy(tostring(err):match("negative"), err)
    -- the error did not stick: the next op works
    H.same(ddp.tensor({2, 4, 6}, {dtype = "int64"}), i * 2, "after an error")
  end)
end)

H.describe("CUDA half-type elementwise ops", function()
  -- bfloat16 / float16 math runs in float32 registers and rounds once, as
  -- the CPU does through float32 copies: exactly rounded ops give the
  -- CPU's very bits, and one kernel writes the result (no float32 copies)
  it("give the CPU's bits for exactly rounded ops", function()
    for _, dt in ipairs({"bfloat16", "float16"}) do
      local a, b = H.sample(dt, {6, 7}, 31), H.sample(dt, {7}, 32)
      for _, op in ipairs({"add", "sub", "mul", "div", "maximum", "minimum", "eq", "lt"}) do
        H.check(op .. " " .. dt, function(x, y) return x[op](x, y) end, {a, b}, {0, 0})
      end
      for _, op in ipairs({"neg", "abs", "relu", "sqrt", "isnan", "floor"}) do
        H.check(op .. " " .. dt, function(x) return x[op](x) end, {a}, {0, 0})
      end
      H.check("number " .. dt, function(x) return x * 0.3 + 1 end, {a}, {0, 0})
    end
  end)

  it("allocate only their result", function()
    local x, y = ddp.randn(64, 64):bfloat16():cuda(), ddp.randn(64):bfloat16():cuda()
    local before = ddp.cuda.memory_stats().allocs
    local z, r = x + y, x:relu()
    assert.equal(2, ddp.cuda.memory_stats().allocs - before)
    assert.equal("bfloat16", z:dtype())
    assert.equal("bfloat16", r:dtype())
  end)
end)
