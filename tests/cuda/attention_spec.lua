-- scaled_dot_product_attention and nn.MultiheadAttention on CUDA tensors
-- equal the CPU's fused kernel, forward and backward: both dtypes, batch and
-- head dims broadcast, L != S, E != Ev, causal, boolean and additive masks
-- (one for every head, or per batch), heads as strided views of one
-- projection; dropout and head dims over 128 are
-- refused by name.  On the emulator the flash-attention kernels run with the
-- race checker on (make test).
local ddp = require "ddp"
local H = require "helpers.cuda"
local nn = ddp.nn
local F = nn.functional

local function randn(shape, dtype, seed)
  ddp.manual_seed(seed)
  return ddp.randn(shape):to(dtype)
end
local function leaf(t) return t:detach():requires_grad_(true) end

local TOL = {float32 = {2e-5, 2e-5}, float64 = {1e-11, 1e-11}}

H.describe("attention on CUDA", function()
  it("scaled_dot_product_attention: shapes, broadcasting, causal, both dtypes", function()
    for _, dt in ipairs {"float32", "float64"} do
      local q = leaf(randn({2, 3, 37, 24}, dt, 1))
      local k = leaf(randn({1, 3, 45, 24}, dt, 2))   -- batch broadcast
      local v = leaf(randn({45, 40}, dt, 3))          -- batch and heads broadcast
      H.fwd_bwd("sdpa " .. dt, function(a, b, c) return F.scaled_dot_product_attention(a, b, c) end,
                {q, k, v}, TOL[dt])
      H.fwd_bwd("sdpa causal L > S " .. dt, function(a, b, c)
        return F.scaled_dot_product_attention(a, b, c, {is_causal = true, scale = 0.3}) end,
        {leaf(randn({2, 50, 16}, dt, 4)), leaf(randn({2, 33, 16}, dt, 5)), leaf(randn({2, 33, 8}, dt, 6))},
        TOL[dt])
      H.fwd_bwd("sdpa causal L < S " .. dt, function(a, b, c)
        return F.scaled_dot_product_attention(a, b, c, {is_causal = true}) end,
        {leaf(randn({3, 20, 17}, dt, 7)), leaf(randn({3, 70, 17}, dt, 8)), leaf(randn({3, 70, 9}, dt, 9))},
        TOL[dt])
    end
  end)

  it("boolean and additive masks, one for all heads or per batch", function()
    for _, dt in ipairs {"float32", "float64"} do
      local q, k, v = randn({2, 2, 19, 16}, dt, 11), randn({2, 2, 21, 16}, dt, 12), randn({2, 2, 21, 8}, dt, 13)
      local keep = randn({19, 21}, "float32", 14):gt(-0.5)
      keep:narrow(1, 0, 1):fill_(true)  -- every row keeps a key
      H.fwd_bwd("sdpa bool mask " .. dt, function(a, b, c, m)
        return F.scaled_dot_product_attention(a, b, c, {attn_mask = m}) end,
        {leaf(q), leaf(k), leaf(v), keep}, TOL[dt])
      local add = randn({2, 1, 19, 21}, dt, 15):masked_fill(keep:logical_not(), -1 / 0)
      H.fwd_bwd("sdpa additive mask per batch " .. dt, function(a, b, c, m)
        return F.scaled_dot_product_attention(a, b, c, {attn_mask = m}) end,
        {leaf(q), leaf(k), leaf(v), add}, TOL[dt])
    end
  end)

  it("nn.MultiheadAttention with a key padding mask follows the CPU", function()
    ddp.manual_seed(21)
    local mha = nn.MultiheadAttention(32, 4, {batch_first = true})
    local x = leaf(randn({3, 10, 32}, "float32", 22))
    local pad = ddp.zeros({3, 10}, {dtype = "bool"})
    pad:narrow(1, 7, 3):fill_(true)
    local function run(m, a, p)
      local out = m(a, a, a, {key_padding_mask = p, need_weights = false})
      return out
    end
    local cpu_out = run(mha, x, pad)
    local dmha = nn.MultiheadAttention(32, 4, {batch_first = true})
    dmha:load_state_dict(mha:state_dict())
    dmha:to("cuda")
    local dx = H.todev(x)
    local dev_out = run(dmha, dx, pad:cuda())
    H.same(cpu_out:detach(), dev_out:detach(), "mha out", TOL.float32)
    cpu_out:sum():backward()
    dev_out:sum():backward()
    H.same(x.grad, dx.grad, "mha grad x", TOL.float32)
    H.same(mha.in_proj_weight.grad, dmha.in_proj_weight.grad, "mha grad in_proj_weight", TOL.float32)
  end)

  it("heads read as views of one fused projection (rows at a stride) follow the CPU", function()
    for _, dt in ipairs {"float32", "float64"} do
      local B, T, Hn, D = 2, 40, 3, 8
      local qkv = leaf(randn({B, T, 3 * Hn * D}, dt, 41))
      H.fwd_bwd("sdpa strided heads " .. dt, function(x)
        local p = x:split(Hn * D, 2)
        local function heads(t) return t:view(B, T, Hn, D):transpose(1, 2) end
        return F.scaled_dot_product_attention(heads(p[1]), heads(p[2]), heads(p[3]), {is_causal = true})
      end, {qkv}, TOL[dt])
    end
  end)

  it("refuses dropout and head dims over 128 by name", function()
    local q = randn({2, 4, 8}, "float32", 31):cuda()
    local ok, err = pcall(F.scaled_dot_product_attention, q, q, q, {dropout_p = 0.1})
    assert.is_false(ok)
    assert.truthy(tostring(err):find("dropout_p > 0 is not implemented on cuda", 1, true), tostring(err))
    local w = randn({1, 4, 130}, "float32", 32):cuda()
    ok, err = pcall(F.scaled_dot_product_attention, w, w, w)
    assert.is_false(ok)
    assert.truthy(tostring(err):find("E=130", 1, true), tostring(err))
  end)
end)
