-- Scaled dot product attention and nn.MultiheadAttention against PyTorch
-- 1.13 (tests/golden/make_sdpa.py writes tests/golden/sdpa_cases.lua): the
-- attention formula's outputs and q, k, v gradients, MultiheadAttention
-- from PyTorch's own state dict; then finite differences in float64,
-- dropout's determinism, and the errors.
local ddp = require "ddp"
local nn = require "ddp.nn"
local F = nn.functional

local cases = dofile("tests/golden/sdpa_cases.lua")
local golden = require "helpers.golden"
local build, compare = golden.build, golden.compare

local function check(got, want, rtol, atol, what)
  local e = compare(got, want, rtol, atol)
  assert(not e, ("%s: %s"):format(what, e or ""))
end

describe("scaled_dot_product_attention matches PyTorch's formula", function()
  for _, c in ipairs(cases.sdpa) do
    it(c.name, function()
      local env = setmetatable({ F = F, ddp = ddp }, { __index = _G })
      for k, v in pairs(c.inputs) do env[k] = build(v) end
      for k in pairs(c.grads) do env[k]:requires_grad_(true) end
      local chunk = assert(loadstring("return " .. c.lua))
      setfenv(chunk, env)
      local out = chunk()
      check(out, c.output, c.rtol, c.atol, c.lua)
      out:backward(build(c.grad_out))
      for k, w in pairs(c.grads) do check(env[k].grad, w, c.rtol, c.atol, "gradient of " .. k) end
    end)
  end
end)

describe("nn.MultiheadAttention matches PyTorch", function()
  for _, c in ipairs(cases.mha) do
    it(c.name, function()
      local opts = assert(loadstring("return " .. c.opts))()
      local m = nn.MultiheadAttention(c.embed_dim, c.num_heads, opts)
      local sd = {}
      for k, v in pairs(c.state) do sd[k] = build(v) end
      local r = m:load_state_dict(sd)
      assert.same({}, r.missing_keys)
      assert.same({}, r.unexpected_keys)
      local x = {}
      for k, v in pairs(c.inputs) do x[k] = build(v) end
      for _, k in ipairs { "query", "key", "value" } do x[k]:requires_grad_(true) end
      local env = setmetatable(x, { __index = _G })
      local fwd = setfenv(assert(loadstring("return " .. c.forward)), env)()
      local out, w = m(x.query, x.key, x.value, fwd)
      check(out, c.outputs[1], 1e-10, 1e-12, "attn_output")
      if c.outputs[2] then check(w, c.outputs[2], 1e-10, 1e-12, "attn_weights") else assert.is_nil(w) end
      out:backward(build(c.grad_out))
      local params = {}
      for _, pr in ipairs(m:named_parameters()) do params[pr[1]] = pr[2] end
      for k, want in pairs(c.grads) do
        local t = x[k] or params[k]
        assert(t, "no tensor named " .. k)
        check(t.grad, want, 1e-9, 1e-11, "gradient of " .. k)
      end
    end)
  end
end)

describe("scaled_dot_product_attention", function()
  it("has the gradients of finite differences in float64 (masks, causal, broadcast, tiles)", function()
    ddp.manual_seed(3)
    local q = ddp.randn(2, 1, 70, 3, { dtype = "float64" }):requires_grad_()
    local k = ddp.randn(1, 2, 66, 3, { dtype = "float64" }):requires_grad_()
    local v = ddp.randn(2, 2, 66, 2, { dtype = "float64" }):requires_grad_()
    local fm = ddp.randn(70, 66, { dtype = "float64" })
    for _, o in ipairs { { is_causal = true }, { attn_mask = fm, scale = 0.7 } } do
      local f = function(a, b, c) return F.scaled_dot_product_attention(a, b, c, o) end
      assert.is_true(ddp.autograd.gradcheck(f, { q, k, v }, { eps = 1e-6, atol = 1e-5, rtol = 1e-4 }))
    end
  end)

  -- A GPT's heads: views of one [B, T, 3C] projection, [B, H, T, D] at
  -- strides [T*3C, D, 3C, 1].  They are read where they lie, and the
  -- results (out, and dQ, dK, dV) are laid out as the heads' memory, so the
  -- transpose back to [B, T, H, D] is contiguous and nothing is copied.
  it("reads heads in place from a fused projection and lays out its results as their memory", function()
    local B, T, Hn, D = 3, 70, 4, 11
    local C = Hn * D
    local function heads(t) return t:view(B, T, Hn, D):transpose(1, 2) end
    for _, dt in ipairs { "float32", "float64" } do
      ddp.manual_seed(5)
      local x = ddp.randn(B, T, 3 * C, { dtype = dt })
      local g = ddp.randn(B, T, Hn, D, { dtype = dt })
      local function run(copy, opts)
        local qkv = x:clone():requires_grad_()
        local p = qkv:split(C, 2)
        local q, k, v = heads(p[1]), heads(p[2]), heads(p[3])
        if copy then q, k, v = q:contiguous(), k:contiguous(), v:contiguous() end
        local y = F.scaled_dot_product_attention(q, k, v, opts)
        y:backward(copy and g:transpose(1, 2):contiguous() or g:transpose(1, 2))
        return y, qkv.grad
      end
      for _, opts in ipairs { { is_causal = true }, { attn_mask = ddp.randn(T, T, { dtype = dt }) } } do
        local y, gx = run(false, opts)
        local y0, gx0 = run(true, opts)
        assert.is_true(y:transpose(1, 2):is_contiguous(), "out in [B, T, H, D] memory")
        assert.is_true(y:equal(y0), dt .. ": out equals the contiguous operands' bit for bit")
        assert.is_true(gx:equal(gx0), dt .. ": the projection's gradient likewise")
      end
    end
    -- in float64 a strided head, a transposed one (rows not at a stride:
    -- copied) and a broadcast one have the gradients of finite differences
    local qkv = ddp.randn(2, 9, 3 * 6, { dtype = "float64" })
    local p = qkv:split(6, 2)
    local q = p[1]:view(2, 9, 2, 3):transpose(1, 2):detach():requires_grad_()
    local k = ddp.randn(2, 2, 3, 9, { dtype = "float64" }):transpose(-2, -1):detach():requires_grad_()
    local v = p[3]:narrow(0, 0, 1):view(1, 9, 2, 3):transpose(1, 2):detach():requires_grad_()
    local f = function(a, b, c) return F.scaled_dot_product_attention(a, b, c, { is_causal = true }) end
    assert.is_true(ddp.autograd.gradcheck(f, { q, k, v }, { eps = 1e-6, atol = 1e-5, rtol = 1e-4 }))
  end)

  it("drops with the Philox stream: the same seed gives the same mask, dropout_p = 0 is exact", function()
    local q, k, v = ddp.randn(2, 2, 9, 4), ddp.randn(2, 2, 11, 4), ddp.randn(2, 2, 11, 5)
    local plain = F.scaled_dot_product_attention(q, k, v)
    assert.is_true(F.scaled_dot_product_attention(q, k, v, { dropout_p = 0 }):equal(plain))
    ddp.manual_seed(7)
    local a = F.scaled_dot_product_attention(q, k, v, { dropout_p = 0.4 })
    ddp.manual_seed(7)
    local b = F.scaled_dot_product_attention(q, k, v, { dropout_p = 0.4 })
    local c = F.scaled_dot_product_attention(q, k, v, { dropout_p = 0.4 })
    assert.is_true(a:equal(b))
    assert.is_false(a:equal(c))
    assert.is_false(a:equal(plain))
    assert.is_true(F.scaled_dot_product_attention(q, k, v, { dropout_p = 1 }):eq(0):all())
  end)

  it("with dropout has the gradients of its own mask (float64 finite differences)", function()
    local q = ddp.randn(1, 2, 6, 3, { dtype = "float64" }):requires_grad_()
    local k = ddp.randn(1, 2, 7, 3, { dtype = "float64" }):requires_grad_()
    local v = ddp.randn(1, 2, 7, 2, { dtype = "float64" }):requires_grad_()
    -- the same mask at every call: reseed before each
    local f = function(a, b, c)
      ddp.manual_seed(11)
      return F.scaled_dot_product_attention(a, b, c, { dropout_p = 0.3 })
    end
    assert.is_true(ddp.autograd.gradcheck(f, { q, k, v }, { eps = 1e-6, atol = 1e-5, rtol = 1e-4 }))
  end)

  it("names shapes, dtypes and masks in its errors", function()
    local q, k, v = ddp.randn(2, 5, 64), ddp.randn(2, 7, 32), ddp.randn(2, 7, 8)
    local function err(...)
      local ok, e = pcall(F.scaled_dot_product_attention, ...)
      assert.is_false(ok)
      return e
    end
    assert.matches("q has E=64 but k has E=32", err(q, k, v), 1, true)
    assert.matches("k has S=7 but v has S=6", err(q, ddp.randn(2, 7, 64), ddp.randn(2, 6, 8)), 1, true)
    assert.matches("q is float32 but k is float64", err(q, ddp.randn(2, 7, 64, { dtype = "float64" }), v), 1, true)
    assert.matches("attn_mask must be bool", err(q, ddp.randn(2, 7, 64), v, { attn_mask = ddp.ones(5, 7, { dtype = "int64" }) }), 1, true)
    assert.matches("attn_mask of shape [4, 7] cannot be broadcast to the scores' shape [2, 5, 7]",
                   err(q, ddp.randn(2, 7, 64), v, { attn_mask = ddp.ones(4, 7):bool() }), 1, true)
    assert.matches("give attn_mask or is_causal", err(q, ddp.randn(2, 7, 64), v, ddp.ones(5, 7):bool(), 0, true), 1, true)
    assert.matches("q must have at least 2 dims", err(ddp.randn(4), k, v), 1, true)
    assert.matches("cannot be broadcast", err(ddp.randn(3, 5, 4), ddp.randn(2, 7, 4), ddp.randn(2, 7, 4)), 1, true)
    assert.matches("dropout_p must be", err(q, ddp.randn(2, 7, 64), v, { dropout_p = 2 }), 1, true)
  end)
end)
