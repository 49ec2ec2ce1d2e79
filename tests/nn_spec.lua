-- Modules, optimizers and schedulers: registration and names, state_dict
-- round trips and their errors, train/eval, initialisation, functional
-- arguments (positional or named), optimizer state and its checks.
local ddp = require "ddp"
local nn = require "ddp.nn"
local optim = require "ddp.optim"
local F = nn.functional

local function keys(t)
  local r = {}
  for k in pairs(t) do r[#r + 1] = k end
  table.sort(r)
  return r
end

describe("modules", function()
  it("register children, parameters and buffers in assignment order", function()
    local Net = nn.Module:extend("Net")
    function Net:init()
      self.layers = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
      self.norm = nn.BatchNorm1d(2)
      self.scale = ddp.ones(1):requires_grad_()
      self:register_buffer("steps", ddp.zeros({}, { dtype = "int64" }))
      self.plain = ddp.zeros(2)  -- neither parameter nor buffer
    end
    local m = Net()
    local names = {}
    for _, p in ipairs(m:named_parameters()) do names[#names + 1] = p[1] end
    assert.same({ "scale", "layers.0.weight", "layers.0.bias", "layers.2.weight", "layers.2.bias",
                  "norm.weight", "norm.bias" }, names)
    assert.same({ "layers.0.bias", "layers.0.weight", "layers.2.bias", "layers.2.weight",
                  "norm.bias", "norm.num_batches_tracked", "norm.running_mean", "norm.running_var",
                  "norm.weight", "scale", "steps" }, keys(m:state_dict()))
    assert.equal(4 * 3 + 3 + 3 * 2 + 2 + 2 + 2 + 1, m:num_parameters())
    assert.equal(2, #m:children())
  end)

  it("lists a shared module or tied weight once, as PyTorch, but saves every name", function()
    local shared = nn.Linear(3, 3)
    local Tied = nn.Module:extend("Tied")
    function Tied:init()
      self.a = shared
      self.b = nn.Sequential(shared)
      self.out = nn.Linear(3, 3)
      self.out.weight = shared.weight
    end
    local m = Tied()
    local names = {}
    for _, p in ipairs(m:named_parameters()) do names[#names + 1] = p[1] end
    assert.same({ "a.weight", "a.bias", "out.bias" }, names)
    assert.equal(3, #m:parameters())
    assert.equal(4, #m:modules())  -- Tied, shared (once), the Sequential, out
    assert.same({ "a.bias", "a.weight", "b.0.bias", "b.0.weight", "out.bias", "out.weight" }, keys(m:state_dict()))
    assert.equal(9 + 3 + 3, m:num_parameters())
  end)

  it("iterates named_* as name, value in a generic for (PyTorch's loop) and keeps the lists", function()
    local Net = nn.Module:extend("Net")
    function Net:init()
      self.body = nn.Sequential(nn.Linear(2, 3), nn.ReLU())
      self.head = nn.Linear(3, 1)
      self.norm = nn.BatchNorm1d(1)
    end
    local m = Net()
    local function collect(list)
      local names, values = {}, {}
      for name, v in list do
        names[#names + 1] = name
        values[#values + 1] = v
      end
      return names, values
    end
    local names, values = collect(m:named_parameters())
    assert.same({ "body.0.weight", "body.0.bias", "head.weight", "head.bias", "norm.weight", "norm.bias" }, names)
    assert.equal(m.head.bias, values[4])
    assert.same({ "norm.running_mean", "norm.running_var", "norm.num_batches_tracked" },
                (collect(m:named_buffers())))
    assert.same({ "", "body", "body.0", "body.1", "head", "norm" }, (collect(m:named_modules())))
    local children
    children, values = collect(m:named_children())
    assert.same({ "body", "head", "norm" }, children)
    assert.equal(m.norm, values[3])
    -- the value lists iterate as PyTorch's `for p in model.parameters():`
    local n = 0
    for p in m:parameters() do n = n + p:numel() end
    assert.equal(m:num_parameters(), n)
    local kinds = {}
    for c in m:children() do kinds[#kinds + 1] = c.__name end
    assert.same({ "Sequential", "Linear", "BatchNorm1d" }, kinds)
    n = 0
    for _ in m:modules() do n = n + 1 end
    assert.equal(6, n)
    n = 0
    for _ in m:buffers() do n = n + 1 end
    assert.equal(3, n)
    -- and still lists: ipairs over {name, value} pairs, #, indexing
    local pairs_ = m:named_parameters()
    assert.equal(6, #pairs_)
    assert.equal("head.weight", pairs_[3][1])
    for i, np in ipairs(pairs_) do assert.equal(names[i], np[1]) end
    assert.equal(m.head.weight, m:parameters()[3])
    -- two loops over one list, one inside the other
    local ps, count = m:parameters(), 0
    for _ in ps do for _ in ps do count = count + 1 end end
    assert.equal(36, count)
    -- a module held twice by children() is met twice, in order
    local act = nn.ReLU()
    local seq = nn.Sequential(nn.Linear(1, 1), act, nn.Linear(1, 1), act)
    kinds = {}
    for c in seq:children() do kinds[#kinds + 1] = c.__name end
    assert.same({ "Linear", "ReLU", "Linear", "ReLU" }, kinds)
  end)

  it("calls forward when called, and custom methods directly", function()
    local Net = nn.Module:extend("Net")
    function Net:init() self.fc = nn.Linear(2, 2) end
    function Net:forward(x) return self.fc(x) end
    function Net:describe() return "a net" end
    local m = Net()
    assert.same({ 5, 2 }, m(ddp.randn(5, 2)):shape())
    assert.equal("a net", m:describe())
  end)

  it("initialises Linear and Conv2d as PyTorch (bound 1/sqrt(fan_in))", function()
    ddp.manual_seed(1)
    local l = nn.Linear(100, 50)
    local b = 1 / math.sqrt(100)
    assert.is_true(l.weight:abs():amax():item() <= b)
    assert.is_true(l.weight:abs():amax():item() > 0.9 * b)
    local c = nn.Conv2d(4, 8, 3)
    local cb = 1 / math.sqrt(4 * 9)
    assert.is_true(c.weight:abs():amax():item() <= cb)
    assert.same({ 8, 4, 3, 3 }, c.weight:shape())
  end)

  it("state_dict has no module. prefix and loads back exactly", function()
    local a, b = nn.Linear(3, 2), nn.Linear(3, 2)
    b:load_state_dict(a:state_dict())
    assert.is_true(a.weight:equal(b.weight))
    assert.is_true(a.bias:equal(b.bias))
    assert.same({ "bias", "weight" }, keys(a:state_dict()))
  end)

  it("load_state_dict lists missing, unexpected and mis-shaped keys", function()
    local m = nn.Sequential(nn.Linear(3, 2), nn.Linear(2, 1))
    local sd = m:state_dict()
    sd["1.bias"] = nil
    sd["extra.weight"] = ddp.zeros(1)
    sd["0.weight"] = ddp.zeros(5, 5)
    local ok, err = pcall(function() m:load_state_dict(sd) end)
    assert.is_false(ok)
    assert.matches("missing keys: 1.bias", err)
    assert.matches("unexpected keys: extra.weight", err)
    assert.matches("0.weight %(checkpoint %[5, 5%], model %[2, 3%]%)", err)
    assert.matches("nn_spec.lua:%d+:", err)
    sd["0.weight"] = nil
    local r = m:load_state_dict(sd, { strict = false })
    assert.same({ "0.weight", "1.bias" }, r.missing_keys)
  end)

  it("train and eval switch dropout and batch norm", function()
    local m = nn.Sequential(nn.Dropout(0.5), nn.BatchNorm1d(3))
    local x = ddp.randn(16, 3) * 3 + 1
    m:train()
    local y = m(x)
    assert.is_true(m:get(1).running_mean:abs():sum():item() > 0)  -- stats moved
    assert.equal(1, m:get(1).num_batches_tracked:item())
    m:eval()
    assert.is_false(m:get(0).training)
    local e1, e2 = m(x), m(x)
    assert.is_true(e1:equal(e2))  -- eval is deterministic
    local _ = y
  end)

  it("to(dtype) converts parameters and floating buffers", function()
    local m = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2)):to("float64")
    for _, p in ipairs(m:parameters()) do assert.equal("float64", p:dtype()) end
    assert.equal("float64", m:get(1).running_var:dtype())
    assert.equal("int64", m:get(1).num_batches_tracked:dtype())
    assert.same({ 4, 2 }, m(ddp.randn(4, 2, { dtype = "float64" })):shape())
  end)

  it("prints like PyTorch", function()
    local s = tostring(nn.Sequential(nn.Linear(2, 3), nn.ReLU()))
    assert.equal("Sequential(\n  (0): Linear(in_features=2, out_features=3, bias=True)\n  (1): ReLU()\n)", s)
    -- with their arguments, as torch 2.15 prints them
    for _, c in ipairs {
      { nn.LayerNorm(8), "LayerNorm((8,), eps=1e-05, elementwise_affine=True, bias=True)" },
      { nn.LayerNorm({ 4, 8 }, { elementwise_affine = false, eps = 1e-6 }),
        "LayerNorm((4, 8), eps=1e-06, elementwise_affine=False, bias=False)" },
      { nn.Embedding(10, 4), "Embedding(10, 4)" },
      { nn.Embedding(10, 4, { padding_idx = 0 }), "Embedding(10, 4, padding_idx=0)" },
      { nn.GELU(), "GELU(approximate='none')" },
      { nn.GELU({ approximate = "tanh" }), "GELU(approximate='tanh')" },
    } do
      assert.equal(c[2], tostring(c[1]))
    end
  end)

  it("clip_grad_norm scales gradients to the norm", function()
    local p = ddp.ones(4):requires_grad_()
    ;(p * 3):sum():backward()  -- grad 3 everywhere, norm 6
    local total = nn.utils.clip_grad_norm({ p }, 1.0)
    assert.is_true(math.abs(total:item() - 6) < 1e-5)
    assert.is_true(math.abs(p.grad:norm():item() - 1) < 1e-4)
  end)
end)

describe("functional", function()
  it("linear checks shapes", function()
    local ok, err = pcall(function() F.linear(ddp.randn(2, 3), ddp.randn(4, 5)) end)
    assert.is_false(ok)
    assert.matches("linear: shapes %[2, 3%] and %[4, 5%] cannot be multiplied %(3 vs 5%)", err)
  end)

  it("leaves to C what C checks: one wording (errmsg.h), at the user's line", function()
    local function err(f, ...)
      local ok, e = pcall(f, ...)
      assert.is_false(ok)
      return e
    end
    local x = ddp.randn(2, 3)
    for _, case in ipairs {
      { "linear: shapes [2, 3] and [4, 5] cannot be multiplied (3 vs 5)", function() return F.linear(x, ddp.randn(4, 5)) end },
      { "linear: weight must be 2-D [out_features, in_features]", function() return F.linear(x, ddp.randn(3)) end },
      { "dropout: p must be in [0, 1], got 1.5", function() return F.dropout(x, 1.5) end },
      { "dropout: p must be in [0, 1], got ", function() return F.dropout(x, 0 / 0) end },  -- a NaN too
      { "scaled_dot_product_attention: dropout_p must be in [0, 1], got -0.5",
        function() return F.scaled_dot_product_attention(x, x, x, { dropout_p = -0.5 }) end },
      { "randperm: n must be non-negative, got -1", function() return ddp.randperm(-1) end },
      { "eye: n must be non-negative, got -2", function() return ddp.eye(-2) end },
    } do
      local e = err(case[2])
      assert.truthy(e:find(case[1], 1, true), e)
      assert.matches("^[^:]*nn_spec%.lua:%d+: ", e)
    end
    -- what C never sees stays Lua's: types, and the buffer Lua fills
    assert.matches("dropout: p must be a number, got \"half\"", err(F.dropout, x, "half"))
    assert.matches("layer_norm: 9 dims given, at most 8 are supported",
                   err(F.layer_norm, x, { 1, 1, 1, 1, 1, 1, 1, 1, 1 }))
    assert.matches("layer_norm: invalid size 2.5 at dim 0", err(F.layer_norm, x, { 2.5 }))
    assert.matches("layer_norm: normalized_shape must be an integer or a table of integers, got \"3\"",
                   err(F.layer_norm, x, "3"))
    assert.matches("randperm: n must be an integer, got 1.5", err(ddp.randperm, 1.5))
    assert.equal(3, F.layer_norm(x, 3):size(1))
    assert.equal(3, F.layer_norm(x, { 2, 3 }):size(1))
  end)

  it("cross_entropy options reach the kernel", function()
    local logits = ddp.randn(4, 5):requires_grad_()
    local y = ddp.tensor({ 0, 1, -100, 3 })
    local l = F.cross_entropy(logits, y, { label_smoothing = 0.1 })
    l:backward()
    assert.same({ 0, 0, 0, 0, 0 }, logits.grad:select(0, 2):totable())  -- ignored row
    local none = F.cross_entropy(logits, ddp.tensor({ 0, 1, 2, 3 }), { reduction = "none" })
    assert.same({ 4 }, none:shape())
    local ok, err = pcall(function() F.cross_entropy(logits, y, { reduction = "avg" }) end)
    assert.is_false(ok)
    assert.matches('reduction must be "mean", "sum" or "none"', err)
  end)
end)

describe("fast paths", function()
  -- float32 2x2/stride-2 max pooling and relu's backward have their own
  -- loops; float64 (and other windows) take the general ones, which must
  -- agree on values, indices (ties: the first tap; NaN: the last NaN) and
  -- gradients
  local function specials(shape)
    local n, v, seed = 1, {}, 7
    for _, d in ipairs(shape) do n = n * d end
    for i = 0, n - 1 do
      seed = (seed * 1103515245 + 12345) % 2147483648
      v[i + 1] = i % 13 == 0 and 0 / 0 or i % 17 == 5 and -math.huge or i % 29 == 3 and math.huge
                 or seed % 5 - 2  -- few distinct values make ties
    end
    return ddp.tensor(v, { dtype = "float32" }):view(table.unpack(shape))
  end

  it("max_pool2d 2x2 stride 2 equals the general loop, odd sizes, NaN, inf and ties", function()
    for _, shape in ipairs({ { 2, 3, 8, 8 }, { 1, 2, 7, 9 }, { 3, 5, 6 } }) do
      local x = specials(shape)
      for _, ceil in ipairs({ false, true }) do
        local y32, i32 = F.max_pool2d(x, 2, 2, 0, 1, ceil, true)
        local y64, i64 = F.max_pool2d(x:double(), 2, 2, 0, 1, ceil, true)
        assert.is_true(i32:equal(i64), "indices differ for " .. table.concat(shape, "x"))
        local nan = y64:isnan()
        assert.is_true(y32:isnan():equal(nan))
        assert.is_true(y32:double():masked_fill(nan, 0):equal(y64:masked_fill(nan, 0)))
      end
    end
  end)

  it("cross_entropy on float32 rows (vectorised) agrees with float64, weights, smoothing, NaN and inf", function()
    ddp.manual_seed(3)
    for _, C in ipairs({ 3, 8, 13, 256 }) do
      for _, opts in ipairs({ {}, { label_smoothing = 0.1 }, { weight = ddp.rand(C) + 0.5, ignore_index = 1 } }) do
        local z = (ddp.randn(7, C) * 4):requires_grad_()
        local y = ddp.randint(0, C, { 7 })
        local z64 = z:detach():double():requires_grad_()
        local o64 = {}
        for k, v in pairs(opts) do o64[k] = k == "weight" and v:double() or v end
        local l32, l64 = F.cross_entropy(z, y, opts), F.cross_entropy(z64, y, o64)
        l32:backward()
        l64:backward()
        assert.near(l64:item(), l32:item(), 1e-5 * math.abs(l64:item()))
        local err = (z.grad:double() - z64.grad):abs():max():item()
        assert.is_true(err < 1e-6, ("C = %d: grad differs by %g"):format(C, err))
      end
      -- logits far below the row's largest: probabilities that underflow
      -- through the subnormals to 0 in the gradient (z - lse near -745)
      local far = {}
      for i = 1, C do far[i] = (i == 1) and 0 or -(700 + 7 * i) end
      local zf = ddp.tensor(far, { dtype = "float32" }):view(1, C):requires_grad_()
      local zf64 = zf:detach():double():requires_grad_()
      F.cross_entropy(zf, ddp.tensor({ C - 1 })):backward()
      F.cross_entropy(zf64, ddp.tensor({ C - 1 })):backward()
      assert.is_true(zf.grad:double():equal(zf64.grad:float():double()), "far logits, C = " .. C)
      -- a NaN logit makes its row's loss NaN; +inf too (inf - inf), as PyTorch
      for _, bad in ipairs({ 0 / 0, math.huge }) do
        local v = {}
        for i = 1, 2 * C do v[i] = (i % 5) * 0.25 end
        v[C + 1 + (C > 4 and 4 or 0)] = bad
        local z = ddp.tensor(v, { dtype = "float32" }):view(2, C)
        local l = F.cross_entropy(z, ddp.tensor({ 0, 0 }), { reduction = "none" })
        local l64 = F.cross_entropy(z:double(), ddp.tensor({ 0, 0 }), { reduction = "none" })
        assert.is_true(l:isnan():equal(l64:isnan()))
        assert.same({ false, true }, l:isnan():tolist())
      end
    end
  end)

  it("linear with a bias on 1-D, 3-D and non-contiguous inputs equals x @ w^T + b, gradients too", function()
    ddp.manual_seed(5)
    local w, b = ddp.randn(6, 4):requires_grad_(), ddp.randn(6):requires_grad_()
    for _, x0 in ipairs({ ddp.randn(4), ddp.randn(2, 3, 4), ddp.randn(4, 3, 2):permute(2, 1, 0) }) do
      local x = x0:detach():requires_grad_()
      local y = F.linear(x, w, b)
      local shape = x:shape()
      shape[#shape] = 6
      assert.same(shape, y:shape())
      local g = ddp.randn(table.unpack(shape))
      y:backward(g)
      local gx, gw, gb = x.grad, w.grad, b.grad
      x.grad, w.grad, b.grad = nil, nil, nil
      local r = x:matmul(w:t()) + b
      assert.is_true(r:allclose(y, 1e-5, 1e-6))
      r:backward(g)
      assert.is_true(gx:allclose(x.grad, 1e-5, 1e-6))
      assert.is_true(gw:allclose(w.grad, 1e-5, 1e-6))
      assert.is_true(gb:allclose(b.grad, 1e-5, 1e-6))
      w.grad, b.grad = nil, nil
    end
  end)

  it("relu's backward passes the gradient where the output is > 0 or NaN, contiguous or not", function()
    local x = specials({ 4, 6 })
    for _, t in ipairs({ x, x:t() }) do
      local a = t:clone():requires_grad_()
      local g = ddp.randn(table.unpack(a:shape()))
      F.relu(a):backward(g)
      local b = t:double():requires_grad_()
      F.relu(b):backward(g:double())
      assert.is_true(a.grad:double():equal(b.grad))
      local keep = t:gt(0):logical_or(t:isnan())
      assert.is_true(a.grad:equal(ddp.where(keep, g, ddp.zeros_like(g))))
    end
  end)
end)

describe("functional arguments", function()
  local function fails(f, msg)
    local ok, err = pcall(f)
    assert.is_false(ok)
    assert.truthy(tostring(err):find(msg, 1, true), err)
  end

  it("take PyTorch's positional options, keywords in a table, or both", function()
    ddp.manual_seed(1)
    local x, w, b = ddp.randn(1, 2, 7, 7), ddp.randn(4, 2, 3, 3), ddp.randn(4)
    local kw = F.conv2d(x, w, b, { stride = 2, padding = 1 })
    assert.same({ 1, 4, 4, 4 }, kw:shape())
    assert.is_true(F.conv2d(x, w, b, 2, 1):equal(kw))
    assert.is_true(F.conv2d(x, w, b, 2, { padding = 1 }):equal(kw))
    assert.is_true(F.conv2d(x, w, b, { 2, 2 }, { 1, 1 }):equal(kw))  -- a pair is a value, not keywords
    local wg = ddp.randn(4, 1, 3, 3)
    assert.is_true(F.conv2d(x, wg, nil, 1, 0, 2, 2):equal(F.conv2d(x, wg, nil, { dilation = 2, groups = 2 })))
    assert.is_true(F.max_pool2d(x, 3, 2, 1, 1, true):equal(F.max_pool2d(x, 3, { stride = 2, padding = 1, ceil_mode = true })))
    local _, idx = F.max_pool2d(x, 2, 2, 0, 1, false, true)
    assert.equal("int64", idx:dtype())
    assert.is_true(F.avg_pool2d(x, 2, 1, 1, false, false)
                   :equal(F.avg_pool2d(x, 2, { stride = 1, padding = 1, count_include_pad = false })))
    local bx, rm, rv, bw, bb = ddp.randn(4, 3), ddp.zeros(3), ddp.ones(3), ddp.randn(3), ddp.randn(3)
    assert.is_true(F.batch_norm(bx, rm, rv, bw, bb, false, 0.1, 1e-3)
                   :equal(F.batch_norm(bx, rm, rv, { weight = bw, bias = bb, eps = 1e-3 })))
    local logits, y = ddp.randn(3, 4), ddp.tensor({ 0, 1, -100 })
    local cw = ddp.tensor({ 1, 2, 3, 4 }, { dtype = "float32" })
    assert.equal(F.cross_entropy(logits, y, { weight = cw }):item(), F.cross_entropy(logits, y, cw):item())
    assert.equal(F.cross_entropy(logits, y, { reduction = "sum" }):item(),
                 F.cross_entropy(logits, y, nil, nil, -100, nil, "sum"):item())
    local lp = logits:log_softmax(1)
    assert.equal(F.nll_loss(lp, y, { weight = cw }):item(), F.nll_loss(lp, y, cw):item())
    assert.equal(F.mse_loss(logits, logits * 2, { reduction = "sum" }):item(),
                 F.mse_loss(logits, logits * 2, nil, nil, "sum"):item())
    local ew = ddp.randn(5, 2)
    assert.is_true(F.embedding(ddp.tensor({ 1, 3 }), ew, 3):equal(F.embedding(ddp.tensor({ 1, 3 }), ew, { padding_idx = 3 })))
  end)

  it("name the option that is unknown, given twice or one too many", function()
    local x, w = ddp.randn(1, 1, 4, 4), ddp.randn(1, 1, 3, 3)
    fails(function() F.conv2d(x, w, nil, 1, { stride = 2 }) end, "conv2d: stride given both by position and by name")
    fails(function() F.conv2d(x, w, nil, { strides = 2 }) end,
          'conv2d: unknown option "strides" (options: stride, padding, dilation, groups)')
    fails(function() F.conv2d(x, w, nil, 1, 0, 1, 1, 1) end,
          "conv2d: takes at most 4 optional arguments (stride, padding, dilation, groups), got 5")
    fails(function() F.conv2d(x, w, nil, 1, "same") end, "conv2d: padding must be an integer or a table {h, w} of integers, got string")
    fails(function() F.conv2d(x, w, nil, 1, 0, 1, 1.5) end, "conv2d: groups must be an integer, got 1.5")
    fails(function() F.max_pool2d(x, 2, { kernel = 2 }) end, 'max_pool2d: unknown option "kernel"')
    fails(function() F.cross_entropy(ddp.randn(2, 3), ddp.tensor({ 0, 1 }), nil, true) end,
          "cross_entropy: size_average is deprecated in PyTorch and not supported; use reduction")
    fails(function() F.embedding(ddp.tensor({ 0 }), w:view(3, 3), "x") end, 'embedding: padding_idx must be an integer, got "x"')
  end)
end)

describe("optimizers", function()
  local function quadratic(opt_fn)
    ddp.manual_seed(0)
    local w = ddp.randn(5):requires_grad_()
    local opt = opt_fn({ w })
    for _ = 1, 200 do
      opt:zero_grad()
      ;(w * w):sum():backward()
      opt:step()
    end
    return w:abs():amax():item()
  end

  it("minimise a quadratic", function()
    assert.is_true(quadratic(function(p) return optim.SGD(p, { lr = 0.1 }) end) < 1e-3)
    assert.is_true(quadratic(function(p) return optim.SGD(p, { lr = 0.05, momentum = 0.9, nesterov = true }) end) < 1e-3)
    assert.is_true(quadratic(function(p) return optim.Adam(p, { lr = 0.05 }) end) < 0.05)
    assert.is_true(quadratic(function(p) return optim.AdamW(p, { lr = 0.05, amsgrad = true }) end) < 0.05)
  end)

  it("one SGD step with momentum and weight decay matches the formula", function()
    local p = ddp.tensor({ 1, 2 }, { dtype = "float64" }):requires_grad_()
    local opt = optim.SGD({ p }, { lr = 0.1, momentum = 0.9, weight_decay = 0.5 })
    ;(p * 3):sum():backward()
    opt:step()  -- d = 3 + 0.5 p; buf = d; p -= 0.1 d
    assert.is_true(p:allclose(ddp.tensor({ 1 - 0.1 * 3.5, 2 - 0.1 * 4 }, { dtype = "float64" })))
  end)

  it("state_dict round-trips and resumes the same trajectory", function()
    local function run(steps, opt, w)
      for _ = 1, steps do
        opt:zero_grad()
        ;(w * w * w):sum():backward()
        opt:step()
      end
    end
    ddp.manual_seed(3)
    local w1 = ddp.rand(4):requires_grad_()
    local w2 = w1:detach():clone():requires_grad_()
    local o1 = optim.Adam({ w1 }, { lr = 0.01 })
    run(6, o1, w1)
    local o2 = optim.Adam({ w2 }, { lr = 0.01 })
    run(3, o2, w2)
    local sd = o2:state_dict()
    assert.equal(3, sd.state[0].step)
    assert.same({ 0 }, sd.param_groups[1].params)
    local o3 = optim.Adam({ w2 }, { lr = 0.01 })
    o3:load_state_dict(sd)
    run(3, o3, w2)
    assert.is_true(w1:equal(w2))
  end)

  it("load_state_dict refuses a corrupt state, naming the key, before changing anything", function()
    local p = ddp.ones(4):requires_grad_()
    local function state_of(opt)
      (p * p):sum():backward()
      opt:step()
      return opt:state_dict()
    end
    local function copy(sd)  -- one level deeper than the tables broken below
      local r = { state = { [0] = {} }, param_groups = { {} } }
      for k, v in pairs(sd.state[0]) do r.state[0][k] = v end
      for k, v in pairs(sd.param_groups[1]) do r.param_groups[1][k] = v end
      return r
    end
    local good = state_of(optim.Adam({ p }, { amsgrad = true }))
    for _, case in ipairs {
      { function(sd) sd.state[0].exp_avg = "x" end, 'state 0.exp_avg must be a tensor of the parameter\'s 4 elements, got "x"' },
      { function(sd) sd.state[0].exp_avg_sq = ddp.ones(3) end, "state 0.exp_avg_sq has 3 elements, the parameter 4" },
      { function(sd) sd.state[0].step = "1" end, 'state 0.step must be a non-negative integer, got "1"' },
      { function(sd) sd.state[0].step = -1 end, "state 0.step must be a non-negative integer, got -1" },
      { function(sd) sd.state[0].max_exp_avg_sq = nil end,
        "state 0 has no max_exp_avg_sq (Adam's state needs step, exp_avg, exp_avg_sq, max_exp_avg_sq)" },
      { function(sd) sd.state[0] = 5 end, "state 0 must be a table of the parameter's state, got 5" },
      { function(sd) sd.param_groups[1].lr = "0.1" end, 'param_groups[1].lr must be a number, got "0.1"' },
      { function(sd) sd.param_groups[1].amsgrad = 1 end, "param_groups[1].amsgrad must be a boolean, got 1" },
    } do
      local sd = copy(good)
      case[1](sd)
      local opt = optim.Adam({ p }, { amsgrad = true })
      local ok, err = pcall(function() opt:load_state_dict(sd) end)
      assert.is_false(ok)
      assert.truthy(err:find("Adam.load_state_dict: " .. case[2], 1, true), err)
      assert.same({}, opt.state)  -- nothing was loaded
      opt:step()  -- and the optimizer still works
    end
    local sgd = state_of(optim.SGD({ p }, { momentum = 0.9 }))
    sgd.state[0].momentum_buffer = {}
    local ok, err = pcall(function() optim.SGD({ p }, { momentum = 0.9 }):load_state_dict(sgd) end)
    assert.is_false(ok)
    assert.truthy(err:find("SGD.load_state_dict: state 0.momentum_buffer must be a tensor of the parameter's 4 elements, got a table", 1, true), err)
    -- PyTorch 1.13 keeps step as a one-element tensor: read as the count
    local sd = copy(good)
    sd.state[0].step = ddp.tensor(1.0)
    local opt = optim.Adam({ p }, { amsgrad = true })
    opt:load_state_dict(sd)
    assert.equal(1, opt.state[0].step)
    opt:step()
    assert.equal(2, opt.state[0].step)
  end)

  it("reject bad options with clear errors", function()
    local p = ddp.ones(2):requires_grad_()
    assert.has_error(function() optim.SGD({ p }, { lr = 0.1, momentun = 0.9 }) end)
    local ok, err = pcall(function() optim.SGD({ p }, { lr = 0.1, momentun = 0.9 }) end)
    assert.matches('unknown option "momentun"', err)
    ok, err = pcall(function() optim.Adam({ p, p }) end)
    assert.matches("appears twice", err)
    ok, err = pcall(function() optim.SGD({ p }, { lr = 0.1, nesterov = true }) end)
    assert.matches("nesterov needs momentum", err)
  end)
end)

describe("schedulers", function()
  local function lrs(sched_fn, n)
    local p = ddp.ones(1):requires_grad_()
    local opt = optim.SGD({ p }, { lr = 1.0 })
    local s = sched_fn(opt)
    local r = {}
    for i = 1, n do
      r[i] = s:get_last_lr()[1]
      s:step()
    end
    return r
  end

  it("StepLR multiplies by gamma every step_size steps", function()
    assert.same({ 1, 1, 0.5, 0.5, 0.25 }, lrs(function(o) return optim.lr_scheduler.StepLR(o, { step_size = 2, gamma = 0.5 }) end, 5))
  end)

  it("CosineWithWarmup warms up linearly, peaks once, then follows the cosine", function()
    local r = lrs(function(o) return optim.lr_scheduler.CosineWithWarmup(o, { warmup_steps = 2, total_steps = 6 }) end, 8)
    -- base * f(e), f(e) = (e + 1) / 2 before the peak at e = 1, then
    -- 0.5 * (1 + cos(pi * (e - 1) / 5)) to total_steps = 6, held after
    local want = {}
    for e = 0, 7 do
      want[e + 1] = e < 1 and (e + 1) / 2 or 0.5 * (1 + math.cos(math.pi * math.min(1, (e - 1) / 5)))
    end
    for i = 1, 8 do assert(math.abs(r[i] - want[i]) < 1e-12, ("step %d: lr %g, expected %g"):format(i - 1, r[i], want[i])) end
    assert.equal(1, r[2])                               -- the peak, once
    assert.is_true(r[3] < 1)
    assert.is_true(math.abs(r[7]) < 1e-12 and math.abs(r[8]) < 1e-12)  -- min_lr at total_steps and after
    -- without warm-up it starts at the peak
    local c = lrs(function(o) return optim.lr_scheduler.CosineWithWarmup(o, { total_steps = 4 }) end, 3)
    assert.equal(1, c[1])
    assert.is_true(math.abs(c[3] - 0.5) < 1e-12)
  end)

  it("LinearDecay goes to end_factor and the state round-trips", function()
    local p = ddp.ones(1):requires_grad_()
    local opt = optim.SGD({ p }, { lr = 2.0 })
    local s = optim.lr_scheduler.LinearDecay(opt, { total_steps = 4 })
    s:step(); s:step()
    assert.equal(1.0, opt.param_groups[1].lr)
    local st = s:state_dict()
    local opt2 = optim.SGD({ p }, { lr = 2.0 })
    local s2 = optim.lr_scheduler.LinearDecay(opt2, { total_steps = 4 })
    s2:load_state_dict(st)
    assert.equal(1.0, opt2.param_groups[1].lr)
  end)
end)

describe("F.pad", function()
  local function err(f)
    local ok, e = pcall(f)
    assert.is_false(ok)
    return e
  end

  it("takes mode and value by position or by name, and crops with negative padding", function()
    local x = ddp.arange(6):view(1, 2, 3):to("float32")
    assert.same({ { { 7, 7, 7, 7 }, { 1, 2, 7, 7 }, { 4, 5, 7, 7 } } },
                F.pad(x, { -1, 2, 1, 0 }, "constant", 7):totable())
    assert.same(F.pad(x, { 2, 2 }, "circular"):totable(), F.pad(x, { 2, 2 }, { mode = "circular" }):totable())
    assert.same({ { { 1, 2, 1, 2 }, { 4, 5, 4, 5 } } }, F.pad(x, { -1, 2 }, { mode = "circular" }):totable())
    assert.same({ 3 }, F.pad(ddp.ones(5), { -1, -1 }):shape())
  end)

  it("refuses what PyTorch refuses, naming the problem at the caller's line", function()
    local x = ddp.zeros(1, 2, 3)
    assert.matches("nn_spec.lua:%d+: pad: padding length must be divisible by 2", err(function() F.pad(x, { 1 }) end))
    assert.matches("padding length too large", err(function() F.pad(x, { 1, 1, 1, 1, 1, 1, 1, 1 }) end))
    assert.matches('unrecognised padding mode "foo"', err(function() F.pad(x, { 1, 1 }, "foo") end))
    assert.matches('padding mode "reflect" doesn\'t take in value argument',
                   err(function() F.pad(x, { 1, 1 }, { mode = "reflect", value = 2 }) end))
    assert.matches("padding size should be less than the corresponding input dimension, but got: padding %(3, 3%) at dimension 2 of input %[1, 2, 3%]",
                   err(function() F.pad(x, { 3, 3 }, "reflect") end))
    assert.matches("reflect padding of 1 dims needs a 2%-D or 3%-D input, got 1%-D",
                   err(function() F.pad(ddp.zeros(6), { 1, 1 }, "reflect") end))
    assert.matches("replicate padding of 3 dims needs a 4%-D or 5%-D input, got 3%-D",
                   err(function() F.pad(x, { 1, 1, 1, 1, 1, 1 }, "replicate") end))
    assert.matches("wrapping around more than once", err(function() F.pad(x, { 4, 1 }, "circular") end))
    assert.matches("the input size 3, plus negative padding %-4 and 0 resulted in a negative output size",
                   err(function() F.pad(x, { -4, 0 }) end))
    assert.matches("pad%[2%] must be an integer, got 1.5", err(function() F.pad(x, { 1, 1.5 }) end))
  end)

  it("gradients pass through every mode (gradcheck)", function()
    local x = ddp.randn(2, 3, 4, { dtype = "float64" }):requires_grad_()
    for _, mode in ipairs { "constant", "reflect", "replicate", "circular" } do
      assert.is_true(ddp.autograd.gradcheck(function(t) return F.pad(t, { 2, -1, 1, 2 }, mode) end, { x }))
    end
  end)
end)
