-- conv2d, max_pool2d and avg_pool2d on CUDA tensors equal the CPU's,
-- forward and backward (grads of input, weight and bias): stride,
-- padding, dilation, groups, 3-D and 4-D inputs, the half dtypes, pooling
-- with ceil_mode, count_include_pad, divisor_override, NaNs; and errors.
local ddp = require "ddp"
local F = require "ddp.functional"
local H = require "helpers.cuda"

local function sample(dtype, shape, seed)
  ddp.manual_seed(seed or 1)
  return ddp.randn(shape):to(dtype)
end

-- f(args...) -> y with grad on, backward from a fixed seed gradient; the
-- output and every argument's .grad, CPU vs CUDA.
local function check_grads(what, f, args, tol)
  local function run(xs)
    local ins = {}
    for i, a in ipairs(xs) do
      ins[i] = a:detach():clone():requires_grad_(true)
    end
    local y = f(table.unpack(ins))
    local seed = ddp.arange(y:numel()):to(y:dtype()):reshape(y:shape()):cpu()
    seed = (seed * 0.37):sin():to(y:device())
    y:backward(seed)
    local r = {y}
    for i, a in ipairs(ins) do r[i + 1] = a.grad end
    return r
  end
  local rc = run(args)
  local rd = run(H.todev(args))
  for i = 1, #rc do
    H.same(rc[i], rd[i], what .. (i == 1 and " out" or (" grad #" .. (i - 1))), tol)
  end
end

-- conv: a float32 sum of a few hundred products, in another order
local CONV_TOL = { float32 = {1e-4, 1e-5}, float64 = {1e-11, 1e-12},
                   bfloat16 = {2e-2, 2e-2}, float16 = {4e-3, 4e-3} }

H.describe("CUDA conv2d and pooling", function()
  it("conv2d forward and backward: stride, padding, dilation, groups", function()
    local cases = {
      {x = {2, 3, 7, 6}, w = {4, 3, 3, 3}, o = {}},
      {x = {2, 3, 7, 6}, w = {4, 3, 3, 2}, o = {stride = {2, 1}, padding = {1, 2}}},
      {x = {1, 4, 8, 8}, w = {6, 2, 3, 3}, o = {groups = 2, dilation = {2, 1}, padding = 1}},
      {x = {3, 4, 5, 5}, w = {4, 1, 2, 2}, o = {groups = 4, stride = 2}},
      {x = {2, 3, 5, 5}, w = {5, 3, 1, 1}, o = {}},               -- pointwise
      {x = {2, 4, 3, 5}, w = {6, 2, 1, 1}, o = {groups = 2}},     -- pointwise, grouped
      {x = {2, 4, 5, 5}, w = {2, 4, 1, 1}, o = {stride = 2}},     -- 1x1, strided
      {x = {3, 6, 6}, w = {2, 3, 3, 3}, o = {padding = 1}},        -- unbatched
    }
    for _, dt in ipairs({"float32", "float64"}) do
      for i, c in ipairs(cases) do
        local x, w, b = sample(dt, c.x, i), sample(dt, c.w, i + 10), sample(dt, {c.w[1]}, i + 20)
        check_grads("conv2d " .. dt .. " #" .. i, function(x_, w_, b_) return F.conv2d(x_, w_, b_, c.o) end,
                    {x, w, b}, CONV_TOL[dt])
        check_grads("conv2d no bias " .. dt .. " #" .. i, function(x_, w_) return F.conv2d(x_, w_, nil, c.o) end,
                    {x, w}, CONV_TOL[dt])
      end
    end
  end)

  it("conv2d in the half dtypes, empty batches, and the CPU's errors", function()
    for _, dt in ipairs({"bfloat16", "float16"}) do
      local x, w, b = sample(dt, {2, 2, 5, 5}, 1), sample(dt, {3, 2, 3, 3}, 2), sample(dt, {3}, 3)
      H.check("conv2d " .. dt, function(x_, w_, b_) return F.conv2d(x_, w_, b_, {padding = 1}) end,
              {x, w, b}, CONV_TOL[dt])
    end
    check_grads("conv2d N=0", function(x_, w_, b_) return F.conv2d(x_, w_, b_) end,
                {sample("float32", {0, 2, 4, 4}), sample("float32", {3, 2, 3, 3}), sample("float32", {3})})
    local x, w = sample("float32", {1, 3, 5, 5}), sample("float32", {4, 2, 3, 3})
    for _, args in ipairs({{x, w}, {x, sample("float64", {4, 3, 3, 3})}, {sample("float32", {1, 3, 2, 2}), sample("float32", {4, 3, 3, 3})}}) do
      assert(not pcall(F.conv2d, table.unpack(args)), "cpu must refuse")
      local ok, err = pcall(F.conv2d, table.unpack(H.todev(args)))
      assert(not ok and tostring(err):match("conv2d"), "cuda must refuse too: " .. tostring(err))
    end
    local ok, err = pcall(F.conv2d, x:cuda(), sample("float32", {4, 3, 3, 3}))
    assert(not ok and tostring(err):match("cuda"), "mixed devices: " .. tostring(err))
  end)

  it("max_pool2d forward, indices and backward", function()
    local cases = {
      {2, {}}, {3, {stride = 2, padding = 1}}, {{2, 3}, {stride = {1, 2}, dilation = {2, 1}}},
      {3, {stride = 2, ceil_mode = true}}, {{3, 2}, {padding = {1, 0}, ceil_mode = true, stride = 2}},
    }
    for _, dt in ipairs({"float32", "float64", "bfloat16"}) do
      for i, c in ipairs(cases) do
        local x = sample(dt, {2, 3, 7, 8}, i)
        if dt ~= "bfloat16" then x:view(-1):set(5, 0 / 0) end  -- a NaN wins its windows
        H.check("max_pool2d idx " .. dt .. " #" .. i, function(x_)
          local o = c[2]
          return F.max_pool2d(x_, c[1], {stride = o.stride, padding = o.padding, dilation = o.dilation,
                                          ceil_mode = o.ceil_mode, return_indices = true})
        end, {x})
        if dt ~= "bfloat16" then
          check_grads("max_pool2d " .. dt .. " #" .. i, function(x_) return F.max_pool2d(x_, c[1], c[2]) end,
                      {sample(dt, {2, 3, 7, 8}, i)})
        end
      end
    end
    check_grads("max_pool2d 3-D", function(x_) return F.max_pool2d(x_, 2) end, {sample("float32", {3, 6, 6})})
  end)

  it("avg_pool2d forward and backward: padding, ceil_mode, count_include_pad, divisor", function()
    local cases = {
      {2, {}}, {3, {stride = 2, padding = 1}}, {3, {stride = 2, padding = 1, count_include_pad = false}},
      {{3, 2}, {stride = {2, 1}, ceil_mode = true}}, {3, {padding = 1, ceil_mode = true, stride = 2, count_include_pad = false}},
      {2, {divisor_override = 3}},
    }
    for _, dt in ipairs({"float32", "float64"}) do
      for i, c in ipairs(cases) do
        check_grads("avg_pool2d " .. dt .. " #" .. i, function(x_) return F.avg_pool2d(x_, c[1], c[2]) end,
                    {sample(dt, {2, 3, 7, 8}, i)})
      end
    end
    H.check("avg_pool2d float16", function(x_) return F.avg_pool2d(x_, 2) end, {sample("float16", {1, 2, 4, 4})})
    local x = sample("float32", {1, 1, 4, 4})
    assert(not pcall(F.avg_pool2d, x, 2, {padding = 2}))
    local ok, err = pcall(F.avg_pool2d, x:cuda(), 2, {padding = 2})
    assert(not ok and tostring(err):match("avg_pool2d"), "cuda must refuse: " .. tostring(err))
  end)

  it("a small CNN step (conv, relu, pool, linear) matches the CPU", function()
    local x, w1, b1 = sample("float32", {4, 1, 12, 12}, 1), sample("float32", {4, 1, 3, 3}, 2), sample("float32", {4}, 3)
    local w2, b2 = sample("float32", {5, 4 * 6 * 6}, 4) * 0.1, sample("float32", {5}, 5)
    check_grads("cnn", function(x_, w1_, b1_, w2_, b2_)
      local h = F.max_pool2d(F.conv2d(x_, w1_, b1_, {padding = 1}):relu(), 2)
      return F.linear(h:reshape({4, 4 * 6 * 6}), w2_, b2_)
    end, {x, w1, b1, w2, b2}, {1e-4, 1e-5})
  end)
end)
