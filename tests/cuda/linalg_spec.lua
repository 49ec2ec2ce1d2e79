-- Matrix products on CUDA tensors equal the CPU's: matmul / mm / bmm /
-- addmm / outer / dot in every dtype the CPU takes, vector, batched and
-- broadcast shapes, transposed and non-contiguous operands, empty dims,
-- F.linear forward and backward, the TF32 switch, and the errors.
local ddp = require "ddp"
local F = require "ddp.functional"
local H = require "helpers.cuda"

local DTYPES = {"float32", "float64", "int32", "int64", "uint8", "bfloat16", "float16"}

local function sample(dtype, shape, seed)
  ddp.manual_seed(seed or 1)
  local x = ddp.randn(shape)
  if dtype == "uint8" then return (x:abs() * 4):to("uint8") end
  if dtype == "int32" or dtype == "int64" then return (x * 3):round():to(dtype) end
  return x:to(dtype)
end

-- bf16 / fp16 products: rounding of the result differs with the order of
-- the float32 sums, so within a few ulps of the half type.
local HALF_TOL = { bfloat16 = {2e-2, 2e-2}, float16 = {4e-3, 4e-3} }

local function both(what, f, args) H.both(what, f, args, HALF_TOL[args[1]:dtype()]) end

H.describe("CUDA matrix products", function()
  it("matmul in every dtype: vector, matrix, batched and broadcast shapes", function()
    local shapes = {
      {{5}, {5}}, {{5}, {5, 3}}, {{4, 5}, {5}}, {{4, 5}, {5, 3}},
      {{2, 4, 5}, {2, 5, 3}}, {{2, 4, 5}, {5, 3}}, {{5}, {2, 5, 3}}, {{3, 1, 4, 5}, {2, 5, 3}},
      {{2, 1, 4, 5}, {1, 3, 5, 2}}, {{2, 4, 5}, {5}},
    }
    for _, dt in ipairs(DTYPES) do
      for i, s in ipairs(shapes) do
        both("matmul " .. dt .. " #" .. i, ddp.matmul, {sample(dt, s[1], i), sample(dt, s[2], i + 50)})
      end
    end
  end)

  it("mm, bmm, dot, outer in every dtype", function()
    for _, dt in ipairs(DTYPES) do
      local a, b = sample(dt, {3, 4}, 1), sample(dt, {4, 6}, 2)
      both("mm " .. dt, function(x, y) return x:mm(y) end, {a, b})
      both("bmm " .. dt, function(x, y) return x:bmm(y) end, {sample(dt, {3, 2, 4}, 3), sample(dt, {3, 4, 5}, 4)})
      both("dot " .. dt, function(x, y) return x:dot(y) end, {sample(dt, {7}, 5), sample(dt, {7}, 6)})
      both("outer " .. dt, function(x, y) return x:outer(y) end, {sample(dt, {3}, 7), sample(dt, {4}, 8)})
    end
  end)

  it("addmm with alpha and beta, c broadcast, beta 0 ignoring NaNs", function()
    for _, dt in ipairs(DTYPES) do
      local c, a, b = sample(dt, {3, 5}, 1), sample(dt, {3, 4}, 2), sample(dt, {4, 5}, 3)
      both("addmm " .. dt, function(z, x, y) return z:addmm(x, y) end, {c, a, b})
      both("addmm alpha beta " .. dt, function(z, x, y) return z:addmm(x, y, {beta = 2, alpha = 3}) end, {c, a, b})
      both("addmm bias row " .. dt, function(z, x, y) return z:addmm(x, y, {beta = 0.5}) end,
           {sample(dt, {5}, 4), a, b})
    end
    local nan = ddp.full({3, 5}, 0 / 0)
    both("addmm beta 0", function(z, x, y) return z:addmm(x, y, {beta = 0}) end,
         {nan, sample("float32", {3, 4}, 2), sample("float32", {4, 5}, 3)})
    both("addmm 0-dim c", function(z, x, y) return ddp.addmm(z, x, y) end,
         {ddp.tensor(2.5), sample("float32", {3, 4}, 2), sample("float32", {4, 5}, 3)})
  end)

  it("transposed, narrowed, expanded and strided operands", function()
    for _, dt in ipairs({"float32", "float64", "bfloat16", "int64"}) do
      local a, b = sample(dt, {6, 5}, 1), sample(dt, {7, 6}, 2)
      both("a^T @ b^T " .. dt, function(x, y) return x:t():matmul(y:t()) end, {a, b})
      both("narrow " .. dt, function(x, y) return x:narrow(1, 1, 3):t():mm(y:narrow(0, 0, 3)) end,
           {a, sample(dt, {4, 6}, 3)})
      both("step slices " .. dt, function(x, y) return x:transpose(0, 1):matmul(y:narrow(1, 0, 2)) end,
           {sample(dt, {6, 4}, 4), sample(dt, {6, 3}, 5)})
      both("batched transposes " .. dt, function(x, y) return x:transpose(-1, -2):matmul(y:transpose(0, 1)) end,
           {sample(dt, {2, 5, 3}, 6), sample(dt, {5, 2, 4}, 7)})
      both("expanded batch " .. dt, function(x, y) return x:expand({3, 4, 5}):bmm(y) end,
           {sample(dt, {1, 4, 5}, 8), sample(dt, {3, 5, 2}, 9)})
      both("non-contiguous vector dot " .. dt, function(x, y) return x:select(1, 1):dot(y:select(0, 2)) end,
           {a, sample(dt, {3, 6}, 10)})
    end
  end)

  it("zero-size dims: k = 0 gives zeros or beta * c", function()
    for _, dt in ipairs(DTYPES) do
      both("k=0 " .. dt, ddp.matmul, {sample(dt, {3, 0}), sample(dt, {0, 4})})
      both("m=0 " .. dt, ddp.matmul, {sample(dt, {0, 3}), sample(dt, {3, 4})})
      both("batch 0 " .. dt, ddp.matmul, {sample(dt, {0, 2, 3}), sample(dt, {3, 4})})
      both("dot empty " .. dt, ddp.dot, {sample(dt, {0}), sample(dt, {0})})
      both("addmm k=0 " .. dt, function(z, x, y) return z:addmm(x, y, {beta = 2}) end,
           {sample(dt, {3, 4}, 3), sample(dt, {3, 0}), sample(dt, {0, 4})})
    end
  end)

  it("the CPU's errors: shapes, dtypes, bool, mixed devices", function()
    local a, b = sample("float32", {3, 4}), sample("float32", {5, 2})
    both("shape", ddp.matmul, {a, b})
    both("dtype", ddp.matmul, {a, sample("float64", {4, 2})})
    both("bool", ddp.matmul, {a:gt(0), a:t():gt(0)})
    both("bmm ndim", function(x, y) return x:bmm(y) end, {a, a:t()})
    both("0-dim", ddp.matmul, {ddp.tensor(1.0), a})
    local ok, err = pcall(ddp.matmul, a:cuda(), a:t())
    assert(not ok and tostring(err):match("cuda"), "mixed devices must fail: " .. tostring(err))
  end)

  it("bfloat16 matmul within bfloat16 rounding of the float64 product", function()
    local a, b = sample("float64", {16, 32}, 1), sample("float64", {32, 8}, 2)
    local exact = a:matmul(b)
    local got = a:bfloat16():cuda():matmul(b:bfloat16():cuda()):cpu():double()
    local err = (got - exact):abs():max():item()
    assert(err < 0.1, "bf16 product off by " .. err)
  end)

  it("F.linear forward and backward on the device", function()
    for _, dt in ipairs({"float32", "float64"}) do
      for _, xs in ipairs({{4, 5}, {2, 3, 5}}) do
        local x, w, b = sample(dt, xs, 1), sample(dt, {3, 5}, 2), sample(dt, {3}, 3)
        local function run(x_, w_, b_)
          x_:requires_grad_(true) w_:requires_grad_(true) b_:requires_grad_(true)
          local y = F.linear(x_, w_, b_)
          -- a seed gradient that is not all ones (sum is a CPU op for now)
          local seed = ddp.arange(y:numel()):to(y:dtype()):reshape(y:shape()) * 0.1 - 0.3
          y:backward(seed:to(y:device()))
          return y, x_.grad, w_.grad, b_.grad
        end
        local rc = {run(x:clone(), w:clone(), b:clone())}
        local rd = {run(x:cuda(), w:cuda(), b:cuda())}
        for i, name in ipairs({"y", "x.grad", "w.grad", "b.grad"}) do
          H.same(rc[i], rd[i], "linear " .. dt .. " " .. table.concat(xs, "x") .. " " .. name)
        end
      end
    end
  end)

  it("TF32 switch round-trips and keeps float32 results", function()
    assert(ddp.cuda.allow_tf32() == false, "TF32 must be off by default")
    ddp.cuda.set_allow_tf32(true)
    assert(ddp.cuda.allow_tf32() == true)
    local a, b = sample("float32", {8, 16}, 1), sample("float32", {16, 4}, 2)
    local r = a:cuda():mm(b:cuda())
    ddp.cuda.set_allow_tf32(false)
    assert(ddp.cuda.allow_tf32() == false)
    H.same(a:mm(b), r, "mm with tf32", {2e-2, 2e-2})
  end)
end)
