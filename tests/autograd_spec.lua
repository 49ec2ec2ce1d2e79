-- Autograd: every differentiable op checked against finite differences
-- (float64), and the engine's semantics: accumulation, retain_graph,
-- no_grad, detach, leaves, in-place safety, broadcasting, dtypes.
local ddp = require "ddp"
local gradcheck = ddp.autograd.gradcheck

local function leaf(...)
  return ddp.randn(...):double():requires_grad_()
end
local function pos(...)  -- strictly positive inputs, for log, sqrt, pow
  return (ddp.rand(...):double() + 0.5):requires_grad_()
end

describe("gradcheck of every op", function()
  ddp.manual_seed(42)
  local cases = {
    -- name, fn, inputs
    { "add broadcast", function(a, b) return a + b end, function() return { leaf(3, 4), leaf(4) } end },
    { "sub", function(a, b) return a - b end, function() return { leaf(2, 3), leaf(2, 1) } end },
    { "mul", function(a, b) return a * b end, function() return { leaf(2, 3), leaf(3) } end },
    { "div", function(a, b) return a / b end, function() return { leaf(2, 3), pos(2, 3) } end },
    { "pow", function(a, b) return a ^ b end, function() return { pos(2, 3), leaf(2, 3) } end },
    { "pow scalar", function(a) return a ^ 3 end, function() return { leaf(4) } end },
    { "maximum", function(a, b) return a:maximum(b) end, function() return { leaf(5), leaf(5) } end },
    { "minimum", function(a, b) return a:minimum(b) end, function() return { leaf(5), leaf(5) } end },
    { "atan2", function(a, b) return a:atan2(b) end, function() return { leaf(4), leaf(4) } end },
    { "scalar ops", function(a) return (2 - a) * 3 / 4 + 1 end, function() return { leaf(3) } end },
    { "neg abs", function(a) return (-a):abs() end, function() return { leaf(5) } end },
    { "exp log", function(a) return a:exp() + a:log() end, function() return { pos(5) } end },
    { "sqrt rsqrt", function(a) return a:sqrt() + a:rsqrt() end, function() return { pos(5) } end },
    { "sin cos tanh", function(a) return a:sin() * a:cos() + a:tanh() end, function() return { leaf(5) } end },
    { "sigmoid silu", function(a) return a:sigmoid() + a:silu() end, function() return { leaf(6) } end },
    { "relu", function(a) return a:relu() end, function() return { leaf(6) } end },
    { "gelu", function(a) return a:gelu() end, function() return { leaf(6) } end },
    { "gelu tanh", function(a) return a:gelu("tanh") end, function() return { leaf(6) } end },
    { "reciprocal square", function(a) return a:reciprocal() + a:square() end, function() return { pos(5) } end },
    { "log1p expm1 log2", function(a) return a:log1p() + a:expm1() + a:log2() end, function() return { pos(5) } end },
    { "clamp", function(a) return a:clamp(-0.5, 0.5) end, function() return { leaf(8) } end },
    { "where", function(a, b) return ddp.where(a:gt(0), a, b) end, function() return { leaf(6), leaf(6) } end },
    { "view reshape", function(a) return a:view(3, 2):t():reshape(6) * ddp.arange(6):double() end, function() return { leaf(2, 3) } end },
    { "permute flatten", function(a) return a:permute(2, 0, 1):flatten() * ddp.arange(24):double() end, function() return { leaf(2, 3, 4) } end },
    { "narrow select", function(a) return a:narrow(1, 1, 2):select(0, 1) end, function() return { leaf(3, 4) } end },
    { "squeeze unsqueeze expand", function(a) return a:unsqueeze(0):expand(3, 2, 4):squeeze() end, function() return { leaf(2, 4) } end },
    { "sum mean", function(a) return a:sum(1) + a:mean(0):sum() end, function() return { leaf(3, 4) } end },
    { "sum keepdim dims", function(a) return a:sum({ 0, 2 }, true) end, function() return { leaf(2, 3, 4) } end },
    { "prod", function(a) return a:prod(1) end, function() return { pos(3, 4) } end },
    { "amax amin", function(a) return a:amax(1) + a:amin() end, function() return { leaf(3, 4) } end },
    { "var std", function(a) return a:var(1):sum() + a:std(0, false):sum() end, function() return { leaf(3, 4) } end },
    { "norm 2", function(a) return a:norm() end, function() return { leaf(3, 4) } end },
    { "norm 1 and 3", function(a) return a:norm(1, 1) + a:norm(3, 1) end, function() return { leaf(3, 4) } end },
    { "logsumexp", function(a) return a:logsumexp(1) end, function() return { leaf(3, 4) } end },
    { "max dim", function(a) local v = a:max(1) return v end, function() return { leaf(3, 4) } end },
    { "min dim keepdim", function(a) local v = a:min(0, true) return v end, function() return { leaf(3, 4) } end },
    { "sort", function(a) local v = a:sort(1, true) return v * ddp.arange(4):double() end, function() return { leaf(3, 4) } end },
    { "topk", function(a) local v = a:topk(2, 1) return v end, function() return { leaf(3, 4) } end },
    { "cumsum", function(a) return a:cumsum(1) end, function() return { leaf(3, 4) } end },
    { "cumprod", function(a) return a:cumprod(0) end, function() return { pos(3, 4) } end },
    { "softmax", function(a) return a:softmax(1) end, function() return { leaf(3, 4) } end },
    { "log_softmax", function(a) return a:log_softmax(0) end, function() return { leaf(3, 4) } end },
    { "mm", function(a, b) return a:mm(b) end, function() return { leaf(3, 4), leaf(4, 2) } end },
    { "matmul batched broadcast", function(a, b) return a:matmul(b) end, function() return { leaf(2, 3, 4), leaf(4, 5) } end },
    { "matmul 1-D 2-D", function(a, b) return a:matmul(b) end, function() return { leaf(4), leaf(4, 3) } end },
    { "matmul 2-D 1-D", function(a, b) return a:matmul(b) end, function() return { leaf(3, 4), leaf(4) } end },
    { "matmul batched 1-D", function(a, b) return a:matmul(b) end, function() return { leaf(2, 3, 4), leaf(4) } end },
    { "dot", function(a, b) return a:dot(b) end, function() return { leaf(5), leaf(5) } end },
    { "outer", function(a, b) return a:outer(b) end, function() return { leaf(3), leaf(4) } end },
    { "bmm", function(a, b) return a:bmm(b) end, function() return { leaf(2, 3, 4), leaf(2, 4, 2) } end },
    { "addmm", function(c, a, b) return c:addmm(a, b, { beta = 0.5, alpha = 2 }) end, function() return { leaf(3), leaf(2, 4), leaf(4, 3) } end },
    { "index_select", function(a) return a:index_select(0, { 2, 0, 2 }) end, function() return { leaf(3, 4) } end },
    { "gather", function(a) return a:gather(1, ddp.tensor({ { 0, 0 }, { 3, 1 } })) end, function() return { leaf(2, 4) } end },
    { "scatter", function(a, s) return a:scatter(1, ddp.tensor({ { 0, 2 }, { 3, 1 } }), s) end, function() return { leaf(2, 4), leaf(2, 2) } end },
    { "scatter_add", function(a, s) return a:scatter_add(1, ddp.tensor({ { 0, 0 }, { 3, 1 } }), s) end, function() return { leaf(2, 4), leaf(2, 2) } end },
    { "masked_fill", function(a) return a:masked_fill(ddp.tensor({ true, false, true }), 0) end, function() return { leaf(2, 3) } end },
    { "masked_select", function(a) return a:masked_select(ddp.tensor({ true, false, true })) end, function() return { leaf(2, 3) } end },
    { "cat", function(a, b) return ddp.cat({ a, b }, 1) end, function() return { leaf(2, 3), leaf(2, 2) } end },
    { "stack", function(a, b) return ddp.stack({ a, b }, -1) end, function() return { leaf(2, 3), leaf(2, 3) } end },
    { "split chunk", function(a) local p = a:split(2, 1) return p[1] * 2 + p[2] end, function() return { leaf(3, 4) } end },
    { "tril triu", function(a) return a:tril(-1) + a:triu(1) * 3 end, function() return { leaf(4, 4) } end },
    -- float32 rounding needs a wide finite-difference step
    { "to float32 and back", function(a) return a:float():double() * 2 end, function() return { leaf(4) } end,
      { eps = 1e-2, atol = 1e-3, rtol = 1e-3 } },
    { "clone contiguous", function(a) return a:t():contiguous() + a:clone():t() end, function() return { leaf(2, 3) } end },
    { "a reused input", function(a) return a * a + a:exp() * a end, function() return { leaf(4) } end },
  }
  for _, c in ipairs(cases) do
    it(c[1], function()
      assert.is_true(gradcheck(c[2], c[3](), c[4] or { atol = 1e-5, rtol = 1e-4 }))
    end)
  end
end)

describe("gradcheck of the network ops", function()
  local F = require("ddp.nn").functional
  ddp.manual_seed(7)
  local cases = {
    { "linear", function(x, w, b) return F.linear(x, w, b) end, function() return { leaf(2, 3, 4), leaf(5, 4), leaf(5) } end },
    { "conv2d stride padding", function(x, w, b) return F.conv2d(x, w, b, { stride = 2, padding = 1 }) end,
      function() return { leaf(2, 3, 5, 5), leaf(4, 3, 3, 3), leaf(4) } end },
    { "conv2d dilation groups", function(x, w) return F.conv2d(x, w, nil, { dilation = 2, groups = 2 }) end,
      function() return { leaf(1, 4, 6, 6), leaf(4, 2, 2, 2) } end },
    { "max_pool2d", function(x) return F.max_pool2d(x, 2) end, function() return { leaf(2, 2, 4, 4) } end },
    { "max_pool2d ceil padding", function(x) return F.max_pool2d(x, 3, { stride = 2, padding = 1, ceil_mode = true }) end,
      function() return { leaf(1, 2, 5, 5) } end },
    { "avg_pool2d", function(x) return F.avg_pool2d(x, 2, { stride = 1, padding = 1, count_include_pad = false }) end,
      function() return { leaf(1, 2, 4, 4) } end },
    { "embedding", function(w) return F.embedding(ddp.tensor({ { 0, 2 }, { 2, 1 } }), w) end,
      function() return { leaf(4, 3) } end },
    { "layer_norm", function(x, w, b) return F.layer_norm(x, { 4 }, w, b) end, function() return { leaf(3, 4), leaf(4), leaf(4) } end },
    { "batch_norm training", function(x, w, b) return F.batch_norm(x, nil, nil, { weight = w, bias = b, training = true }) end,
      function() return { leaf(5, 3), leaf(3), leaf(3) } end },
    { "batch_norm eval", function(x, w, b)
        return F.batch_norm(x, ddp.zeros(3, { dtype = "float64" }), ddp.ones(3, { dtype = "float64" }) * 2,
                            { weight = w, bias = b, training = false })
      end, function() return { leaf(4, 3, 2), leaf(3), leaf(3) } end },
    { "dropout (same mask each call)", function(x) ddp.manual_seed(5) return F.dropout(x, 0.3) end, function() return { leaf(20) } end },
    { "cross_entropy smoothing ignore", function(x)
        return F.cross_entropy(x, ddp.tensor({ 1, 0, -100, 2 }), { label_smoothing = 0.2 })
      end, function() return { leaf(4, 3) } end },
    { "cross_entropy weighted sum", function(x)
        return F.cross_entropy(x, ddp.tensor({ 1, 0, 2 }), { weight = ddp.tensor({ 1, 2, 3 }, { dtype = "float64" }), reduction = "sum" })
      end, function() return { leaf(3, 3) } end },
    { "nll_loss", function(x) return F.nll_loss(x:log_softmax(1), ddp.tensor({ 1, 0, 2 })) end, function() return { leaf(3, 4) } end },
    { "mse_loss", function(a, b) return F.mse_loss(a, b) end, function() return { leaf(3, 2), leaf(3, 2) } end },
  }
  for _, c in ipairs(cases) do
    it(c[1], function()
      assert.is_true(gradcheck(c[2], c[3](), { atol = 1e-5, rtol = 1e-4 }))
    end)
  end
end)

describe("the engine", function()
  it("gives the embedding's padding row no gradient", function()
    local F = require("ddp.nn").functional
    local w = ddp.ones(4, 2):requires_grad_()
    F.embedding(ddp.tensor({ 0, 3, 3 }), w, { padding_idx = 3 }):sum():backward()
    assert.same({ { 1, 1 }, { 0, 0 }, { 0, 0 }, { 0, 0 } }, w.grad:totable())
  end)

  it("accumulates across backward calls and resets with grad = nil", function()
    local x = ddp.tensor({ 1, 2, 3 }, { dtype = "float32" }):requires_grad_()
    ;(x * 2):sum():backward()
    ;(x * 3):sum():backward()
    assert.same({ 5, 5, 5 }, x.grad:totable())
    x.grad = nil
    assert.is_nil(x.grad)
    ;(x * x):sum():backward()
    assert.same({ 2, 4, 6 }, x.grad:totable())
  end)

  it("keeps the graph only with retain_graph", function()
    local x = ddp.ones(2):requires_grad_()
    local y = (x:exp() * 2):sum()
    y:backward({ retain_graph = true })
    y:backward()
    assert.is_true(x.grad:allclose(ddp.ones(2):exp() * 4))
    local ok, err = pcall(function() y:backward() end)
    assert.is_false(ok)
    assert.matches("freed by an earlier backward", err)
    assert.matches("autograd_spec.lua:%d+:", err)
  end)

  it("records nothing under no_grad and restores the mode after errors", function()
    local x = ddp.ones(2):requires_grad_()
    local y = ddp.no_grad(function() return x * 2 end)
    assert.is_false(y.requires_grad)
    assert.is_nil(y.grad_fn)
    assert.is_false(pcall(ddp.no_grad, function() error("boom") end))
    assert.is_true(ddp.is_grad_enabled())
    assert.equal(6, ddp.no_grad(function(a, b) return a + b end, 2, 4))
  end)

  it("detach shares data but leaves the graph", function()
    local x = ddp.ones(3):requires_grad_()
    local d = (x * 2):detach()
    assert.is_false(d.requires_grad)
    assert.is_true(d.is_leaf)
    local y = (x * d):sum()
    y:backward()
    assert.same({ 2, 2, 2 }, x.grad:totable())
  end)

  it("sums gradients of broadcast inputs back to their shapes and dtypes", function()
    local a = ddp.ones(3, 1):requires_grad_()
    local b = ddp.ones(4, { dtype = "float64" }):requires_grad_()
    local y = (a * b):sum()
    assert.equal("float64", y:dtype())
    y:backward()
    assert.same({ 3, 1 }, a.grad:shape())
    assert.equal("float32", a.grad:dtype())
    assert.same({ 4, 4, 4 }, a.grad:view(3):totable())
    assert.same({ 3, 3, 3, 3 }, b.grad:totable())
  end)

  it("reports grad_fn names and leaves", function()
    local x = ddp.ones(2):requires_grad_()
    assert.is_true(x.is_leaf)
    assert.is_nil(x.grad_fn)
    assert.equal("MulBackward", (x * 2).grad_fn)
    assert.equal("SumBackward", (x * 2):sum().grad_fn)
    assert.is_false((x * 2).is_leaf)
  end)

  it("takes an explicit gradient for non-scalar outputs", function()
    local x = ddp.ones(3):requires_grad_()
    local y = x * 2
    local ok, err = pcall(function() y:backward() end)
    assert.is_false(ok)
    assert.matches("one%-element output", err)
    y:backward(ddp.tensor({ 1, 2, 3 }, { dtype = "float32" }))
    assert.same({ 2, 4, 6 }, x.grad:totable())
  end)

  it("adds into an existing .grad in place, so a grad can be a view", function()
    local x = ddp.ones(4):requires_grad_()
    local bucket = ddp.zeros(10)
    x.grad = bucket:narrow(0, 3, 4)
    ;(x * 5):sum():backward()
    assert.same({ 0, 0, 0, 5, 5, 5, 5, 0, 0, 0 }, bucket:totable())
  end)

  it("sums the gradients of split pieces, selects and reused tensors in place without touching the caller's", function()
    -- the engine adds a slice's gradient into its input's running sum in
    -- place when the sum is its own; a gradient the caller passed in, or one
    -- a backward hands on unchanged, must never be written to
    ddp.manual_seed(11)
    local x = ddp.randn(4, 9):requires_grad_()
    local h = x * 1  -- a non-leaf, so the pieces meet at a node
    local a, b, c = table.unpack(h:split(3, 1))
    local row = h:select(0, 2)
    local ga, gb, gc, gr = ddp.randn(4, 3), ddp.randn(4, 3), ddp.randn(4, 3), ddp.randn(9)
    local keep = { ga:clone(), gb:clone(), gc:clone(), gr:clone() }
    -- c first, then a, b and the row: any arrival order
    local loss = (c * gc):sum() + (a * ga):sum() + (row * gr):sum() + (b * gb):sum()
    loss:backward()
    local want = ddp.cat({ ga, gb, gc }, 1)
    want:select(0, 2):add_(gr)
    assert.is_true(x.grad:allclose(want, 1e-6, 1e-6))
    for i, g in ipairs({ ga, gb, gc, gr }) do assert.is_true(g:equal(keep[i])) end
    -- a gradient given to backward is passed through a narrow of a leaf
    local y = ddp.zeros(6):requires_grad_()
    local g1, g2 = ddp.ones(3), ddp.ones(3) * 2
    local p1, p2 = y:narrow(0, 0, 3), y:narrow(0, 3, 3)
    p1:backward(g1, { retain_graph = true })
    p2:backward(g2)
    assert.same({ 1, 1, 1, 2, 2, 2 }, y.grad:totable())
    assert.same({ 1, 1, 1 }, g1:totable())
    -- the same gradient tensor reaching one input twice (x + x) stays intact
    local z = ddp.ones(3):requires_grad_()
    local gz = ddp.tensor({ 1, 2, 3 }, { dtype = "float32" })
    local s = z * 1
    ;(s + s):backward(gz)
    assert.same({ 2, 4, 6 }, z.grad:totable())
    assert.same({ 1, 2, 3 }, gz:totable())
    local w = ddp.ones(6):requires_grad_()
    local ws = w * 1
    local u = ws:narrow(0, 0, 3) + ws:narrow(0, 3, 3)
    u:backward(gz)
    assert.same({ 1, 2, 3, 1, 2, 3 }, w.grad:totable())
    assert.same({ 1, 2, 3 }, gz:totable())
  end)

  it("refuses in-place changes that would corrupt the graph", function()
    local x = ddp.ones(3):requires_grad_()
    local ok, err = pcall(function() x:mul_(2) end)
    assert.is_false(ok)
    assert.matches("leaf tensor that requires grad", err)
    local y = x * 2
    ok, err = pcall(function() y:add_(1) end)
    assert.is_false(ok)
    assert.matches("not supported", err)
    -- a saved input changed after the forward pass
    local a = ddp.ones(3)
    local z = (x * a):sum()
    a:add_(1)
    ok, err = pcall(function() z:backward() end)
    assert.is_false(ok)
    assert.matches("modified in place", err)
  end)

  it("only float leaves can require grad, only leaves can stop", function()
    local ok, err = pcall(function() ddp.arange(3):requires_grad_() end)
    assert.is_false(ok)
    assert.matches("floating point", err)
    local y = ddp.ones(2):requires_grad_() * 2
    ok, err = pcall(function() y:requires_grad_(false) end)
    assert.is_false(ok)
    assert.matches("detach", err)
  end)

  it("backward needs something that requires grad", function()
    local ok, err = pcall(function() ddp.ones(1):sum():backward() end)
    assert.is_false(ok)
    assert.matches("does not require grad", err)
  end)

  it("frees the graph with the tensors (no leak over many steps)", function()
    local w = ddp.randn(64, 64):requires_grad_()
    collectgarbage()
    collectgarbage()
    local base = ddp.memory_allocated()
    for _ = 1, 200 do
      local x = ddp.randn(32, 64)
      local loss = x:matmul(w):relu():sum()
      loss:backward()
      w.grad = nil
    end
    collectgarbage()
    collectgarbage()
    assert.equal(base, ddp.memory_allocated())
  end)
end)

-- Every gradient rule's node, by the name PyTorch gives it (runtime/autograd/
-- rules.h lists them): the names users and printing see stay the same.
describe("grad_fn names", function()
  local F = require("ddp.nn").functional
  local jobs = require "helpers.jobs"
  teardown(jobs.cleanup)
  local one, two = 1, 2  -- how many [2, 4] leaves the op takes
  local cases = {
    { "AddBackward", two, function(a, b) return a + b end },
    { "SubBackward", two, function(a, b) return a - b end },
    { "MulBackward", two, function(a, b) return a * b end },
    { "DivBackward", two, function(a, b) return a / b end },
    { "PowBackward", two, function(a, b) return a ^ b end },
    { "MaximumBackward", two, function(a, b) return a:maximum(b) end },
    { "MinimumBackward", two, function(a, b) return a:minimum(b) end },
    { "FmodBackward", two, function(a, b) return a:fmod(b) end },
    { "RemainderBackward", two, function(a, b) return a:remainder(b) end },
    { "Atan2Backward", two, function(a, b) return a:atan2(b) end },
    { "NegBackward", one, function(a) return -a end },
    { "AbsBackward", one, function(a) return a:abs() end },
    { "ExpBackward", one, function(a) return a:exp() end },
    { "LogBackward", one, function(a) return a:log() end },
    { "SqrtBackward", one, function(a) return a:sqrt() end },
    { "RsqrtBackward", one, function(a) return a:rsqrt() end },
    { "SinBackward", one, function(a) return a:sin() end },
    { "CosBackward", one, function(a) return a:cos() end },
    { "TanhBackward", one, function(a) return a:tanh() end },
    { "SigmoidBackward", one, function(a) return a:sigmoid() end },
    { "ReluBackward", one, function(a) return a:relu() end },
    { "GeluBackward", one, function(a) return a:gelu() end },
    { "GeluBackward", one, function(a) return a:gelu("tanh") end },
    { "SiluBackward", one, function(a) return a:silu() end },
    { "SignBackward", one, function(a) return a:sign() end },
    { "FloorBackward", one, function(a) return a:floor() end },
    { "CeilBackward", one, function(a) return a:ceil() end },
    { "RoundBackward", one, function(a) return a:round() end },
    { "TruncBackward", one, function(a) return a:trunc() end },
    { "ReciprocalBackward", one, function(a) return a:reciprocal() end },
    { "PowBackward", one, function(a) return a:square() end },
    { "Log1PBackward", one, function(a) return a:log1p() end },
    { "Expm1Backward", one, function(a) return a:expm1() end },
    { "Log2Backward", one, function(a) return a:log2() end },
    { "ClampBackward", one, function(a) return a:clamp(-1, 1) end },
    { "WhereBackward", two, function(a, b) return ddp.where(a:gt(0), a, b) end },
    { "ToCopyBackward", one, function(a) return a:float() end },
    { "ToCopyBackward", one, function(a) return a:clone() end },
    { "ToCopyBackward", one, function(a) return a:t():contiguous() end },
    { "ViewBackward", one, function(a) return a:view(4, 2) end },
    { "ReshapeBackward", one, function(a) return a:reshape(8) end },
    { "SqueezeBackward", one, function(a) return a:unsqueeze(0):squeeze(0) end },
    { "SqueezeBackward", one, function(a) return a:unsqueeze(0):squeeze() end },
    { "UnsqueezeBackward", one, function(a) return a:unsqueeze(1) end },
    { "FlattenBackward", one, function(a) return a:flatten() end },
    { "ExpandBackward", one, function(a) return a:unsqueeze(0):expand(3, 2, 4) end },
    { "TransposeBackward", one, function(a) return a:t() end },
    { "PermuteBackward", one, function(a) return a:permute(1, 0) end },
    { "NarrowBackward", one, function(a) return a:narrow(1, 1, 2) end },
    { "SelectBackward", one, function(a) return a:select(0, 1) end },
    { "MatmulBackward", one, function(a) return a:matmul(a:t()) end },
    { "MmBackward", one, function(a) return a:mm(a:t()) end },
    { "BmmBackward", one, function(a) return a:unsqueeze(0):bmm(a:t():unsqueeze(0)) end },
    { "DotBackward", one, function(a) return a:select(0, 0):dot(a:select(0, 1)) end },
    { "OuterBackward", one, function(a) return a:select(0, 0):outer(a:select(0, 1)) end },
    { "AddmmBackward", one, function(a) return a:select(0, 0):addmm(a:t(), a) end },
    { "IndexSelectBackward", one, function(a) return a:index_select(0, { 1, 0 }) end },
    { "GatherBackward", one, function(a) return a:gather(1, ddp.tensor({ { 0 }, { 3 } })) end },
    { "ScatterBackward", one, function(a) return a:scatter(1, ddp.tensor({ { 0 }, { 3 } }), a:narrow(1, 0, 1)) end },
    { "ScatterAddBackward", one, function(a) return a:scatter_add(1, ddp.tensor({ { 0 }, { 3 } }), a:narrow(1, 0, 1)) end },
    { "MaskedFillBackward", one, function(a) return a:masked_fill(ddp.tensor({ true, false, true, false }), 0) end },
    { "MaskedSelectBackward", one, function(a) return a:masked_select(ddp.tensor({ true, false, true, false })) end },
    { "CatBackward", one, function(a) return ddp.cat({ a, a }, 1) end },
    { "StackBackward", one, function(a) return ddp.stack({ a, a }) end },
    { "SumBackward", one, function(a) return a:sum() end },
    { "MeanBackward", one, function(a) return a:mean(1) end },
    { "ProdBackward", one, function(a) return a:prod(1) end },
    { "AmaxBackward", one, function(a) return a:amax(1) end },
    { "AminBackward", one, function(a) return a:amin() end },
    { "VarBackward", one, function(a) return a:var(1) end },
    { "StdBackward", one, function(a) return a:std() end },
    { "NormBackward", one, function(a) return a:norm() end },
    { "LogsumexpBackward", one, function(a) return a:logsumexp(1) end },
    { "MaxBackward", one, function(a) return (a:max(1)) end },
    { "MinBackward", one, function(a) return (a:min(0, true)) end },
    { "SortBackward", one, function(a) return (a:sort(1)) end },
    { "TopkBackward", one, function(a) return (a:topk(2, 1)) end },
    { "CumsumBackward", one, function(a) return a:cumsum(1) end },
    { "CumprodBackward", one, function(a) return a:cumprod(0) end },
    { "SoftmaxBackward", one, function(a) return a:softmax(1) end },
    { "LogSoftmaxBackward", one, function(a) return a:log_softmax(1) end },
    { "TrilBackward", one, function(a) return a:tril() end },
    { "TriuBackward", one, function(a) return a:triu(1) end },
    { "LinearBackward", one, function(a) return F.linear(a, a) end },
    { "LinearBackward", one, function(a) return F.linear(a, a, a:select(1, 0)) end },
    { "ConvolutionBackward", one, function(a) return F.conv2d(a:view(1, 1, 2, 4), a:view(1, 1, 2, 4)) end },
    { "MaxPool2DWithIndicesBackward", one, function(a) return F.max_pool2d(a:view(1, 1, 2, 4), 2) end },
    { "AvgPool2DBackward", one, function(a) return F.avg_pool2d(a:view(1, 1, 2, 4), 2) end },
    { "EmbeddingBackward", one, function(a) return F.embedding(ddp.tensor({ 0, 1 }), a) end },
    { "NativeLayerNormBackward", one, function(a) return F.layer_norm(a, { 4 }) end },
    { "NativeBatchNormBackward", one, function(a) return F.batch_norm(a, nil, nil, { training = true }) end },
    { "NativeDropoutBackward", one, function(a) return F.dropout(a, 0.5) end },
    { "ScaledDotProductAttentionBackward", one, function(a)
        local q = a:view(1, 1, 2, 4)
        return F.scaled_dot_product_attention(q, q, q)
      end },
    { "CrossEntropyLossBackward", one, function(a) return F.cross_entropy(a, ddp.tensor({ 1, 0 })) end },
    { "NllLossBackward", one, function(a) return F.nll_loss(a, ddp.tensor({ 1, 0 })) end },
    { "MseLossBackward", two, function(a, b) return F.mse_loss(a, b) end },
  }
  for i, c in ipairs(cases) do
    it(("%d: %s"):format(i, c[1]), function()
      local ins = {}
      for j = 1, c[2] do ins[j] = ddp.randn(2, 4):double():requires_grad_() end
      local out = c[3](unpack(ins))
      assert.equal(c[1], out.grad_fn)
      out:sum():backward()  -- the rule's backward runs
      assert.is_not_nil(ins[1].grad)
    end)
  end

  it("AllReduceBackward, in a world of one", function()
    local out, err, rc = jobs.run(jobs.q(jobs.script([[
ddp.init({ backend = "gloo" })
local x = ddp.ones(3):requires_grad_()
local y = ddp.dist.differentiable_all_reduce(x * 2)
y:sum():backward()
print(y.grad_fn, x.grad:totable()[1])
]], "names")))
    assert.equal(0, rc, err)
    assert.equal("AllReduceBackward\t2\n", out)
    jobs.no_strays()
  end)
end)
