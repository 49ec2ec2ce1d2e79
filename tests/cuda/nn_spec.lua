-- The nn functional ops, random numbers and optimizer steps on CUDA tensors
-- equal the CPU's: losses (cross_entropy with its options, nll_loss,
-- mse_loss), layer_norm, batch_norm, embedding, dropout, forward and
-- backward; the same seed giving the same numbers on both devices; SGD
-- and AdamW trajectories; and index errors.
local ddp = require "ddp"
local H = require "helpers.cuda"
local F = ddp.nn.functional
local optim = ddp.optim

local FLOATS = {"float32", "float64", "bfloat16"}

local function randn(shape, dtype, seed)
  ddp.manual_seed(seed or 1)
  return ddp.randn(shape):to(dtype or "float32")
end

local function leaf(t) return t:detach():requires_grad_(true) end

local fwd_bwd = H.fwd_bwd

-- Half types: compared with float32-ish tolerance of their own.
local TOL = {bfloat16 = {2e-2, 2e-2}}

H.describe("nn losses on CUDA", function()
  it("cross_entropy: every reduction, weights, ignore_index, label smoothing", function()
    for _, dt in ipairs(FLOATS) do
      for _, red in ipairs {"mean", "sum", "none"} do
        local x = leaf(randn({6, 75}, dt, 2) * 3)  -- rows wider than two warps
        local t = ddp.tensor({0, 74, 5, 3, 5, 40}, {dtype = "int64"})
        local w = randn({75}, dt, 3):abs()
        fwd_bwd("ce " .. dt .. " " .. red, function(a, b)
          return F.cross_entropy(a, b, {reduction = red}) end, {leaf(x), t}, TOL[dt])
        fwd_bwd("ce w/ignore/ls " .. dt .. " " .. red, function(a, b, c)
          return F.cross_entropy(a, b, {reduction = red, weight = c, ignore_index = 5,
                                        label_smoothing = 0.1}) end, {leaf(x), t, w}, TOL[dt])
      end
    end
  end)

  it("cross_entropy over [N, C, d] with int32 targets, and a 1-D input", function()
    local x = leaf(randn({3, 5, 4}, "float64", 4))
    local t = ddp.tensor({{0, 1, 2, 3}, {4, 4, 0, -100}, {1, 1, 1, 1}}, {dtype = "int32"})
    fwd_bwd("ce 3d", function(a, b) return F.cross_entropy(a, b, {label_smoothing = 0.2}) end, {x, t})
    local x1 = leaf(randn({7}, "float32", 5))
    fwd_bwd("ce 1d", function(a) return F.cross_entropy(a, ddp.tensor(3, {dtype = "int64"})) end, {x1})
  end)

  it("nll_loss with weights and ignore_index; an empty batch", function()
    for _, dt in ipairs {"float32", "float64"} do
      local x = leaf(randn({5, 40}, dt, 6):log_softmax(1))
      local t = ddp.tensor({1, 39, 0, 7, 7}, {dtype = "int64"})
      local w = randn({40}, dt, 8):abs()
      for _, red in ipairs {"mean", "sum", "none"} do
        fwd_bwd("nll " .. dt .. " " .. red, function(a, b, c)
          return F.nll_loss(a, b, {weight = c, ignore_index = 7, reduction = red}) end, {leaf(x), t, w})
      end
    end
    local e = randn({0, 4}, "float32", 1)
    local te = ddp.zeros({0}, {dtype = "int64"})
    for _, red in ipairs {"mean", "sum", "none"} do
      H.check("ce empty " .. red, function(a, b) return F.cross_entropy(a, b, {reduction = red}) end, {e, te})
      H.check("mse empty " .. red, function(a, b) return F.mse_loss(a, b, {reduction = red}) end, {e, e})
    end
    H.check("layer_norm empty", function(a) return F.layer_norm(a, 4) end, {e})
  end)

  it("refuses a target out of range as the CPU does", function()
    local x = randn({3, 4}, "float32", 1):cuda()
    local t = ddp.tensor({0, 4, 1}, {dtype = "int64"}):cuda()
    local ok, err = pcall(F.cross_entropy, x, t)
    assert.is_false(ok)
    assert.truthy(tostring(err):find("target 4 out of range for 4 classes (at position 1)", 1, true), tostring(err))
    -- the first of several bad ones is named; nll_loss checks too
    local tb = ddp.tensor({0, 1, 7, -2}, {dtype = "int32"}):cuda()
    ok, err = pcall(F.nll_loss, randn({4, 4}, "float64", 2):cuda(), tb)
    assert.is_false(ok)
    assert.truthy(tostring(err):find("target 7 out of range for 4 classes (at position 2)", 1, true), tostring(err))
    -- the ignored value passes, the next call works
    local t2 = ddp.tensor({0, -100, 1}, {dtype = "int64"}):cuda()
    H.same(F.cross_entropy(x:cpu(), t2:cpu()), F.cross_entropy(x, t2), "after an error")
  end)

  it("mse_loss: every reduction, both arguments' gradients", function()
    for _, dt in ipairs(FLOATS) do
      for _, red in ipairs {"mean", "sum", "none"} do
        fwd_bwd("mse " .. dt .. " " .. red, function(a, b) return F.mse_loss(a, b, {reduction = red}) end,
          {leaf(randn({33, 70}, dt, 9)), leaf(randn({33, 70}, dt, 10))}, TOL[dt])
      end
    end
  end)
end)

H.describe("nn norms, embedding and dropout on CUDA", function()
  it("layer_norm: affine or not, eps, narrow and wide rows", function()
    for _, dt in ipairs(FLOATS) do
      for _, n in ipairs {7, 300, 1500} do
        local x = leaf(randn({5, n}, dt, 11) * 2 + 1)
        local w, b = leaf(randn({n}, dt, 12)), leaf(randn({n}, dt, 13))
        fwd_bwd("ln " .. dt .. " " .. n, function(a, c, d) return F.layer_norm(a, {n}, c, d, 1e-3) end,
          {leaf(x), w, b}, TOL[dt])
        fwd_bwd("ln plain " .. dt .. " " .. n, function(a) return F.layer_norm(a, n) end, {leaf(x)}, TOL[dt])
      end
    end
    fwd_bwd("ln 2 dims", function(a, c) return F.layer_norm(a, {3, 4}, c) end,
      {leaf(randn({2, 3, 4}, "float64", 14)), leaf(randn({3, 4}, "float64", 15))})
  end)

  it("batch_norm: training with running stats, eval, [N, C] and [N, C, H, W]", function()
    for _, dt in ipairs(FLOATS) do
      for _, shape in ipairs {{8, 3}, {4, 3, 5, 2}} do
        local x = leaf(randn(shape, dt, 16) * 3 + 2)
        local w, b = leaf(randn({3}, dt, 17)), leaf(randn({3}, dt, 18))
        for _, training in ipairs {true, false} do
          local rm, rv = randn({3}, dt, 19), randn({3}, dt, 20):abs()
          local rmc, rvc = rm:clone(), rv:clone()
          local rmd, rvd = rm:cuda(), rv:cuda()
          local what = "bn " .. dt .. " " .. #shape .. "d " .. tostring(training)
          local calls = 0
          fwd_bwd(what, function(a, c, d)
            calls = calls + 1
            local m, v = calls == 1 and rmc or rmd, calls == 1 and rvc or rvd
            return F.batch_norm(a, m, v, {weight = c, bias = d, training = training, momentum = 0.2, eps = 1e-4})
          end, {leaf(x), leaf(w), leaf(b)}, TOL[dt])
          H.same(rmc, rmd, what .. " running_mean", TOL[dt])
          H.same(rvc, rvd, what .. " running_var", TOL[dt])
        end
        fwd_bwd("bn no affine " .. dt, function(a)
          return F.batch_norm(a, nil, nil, {training = true}) end, {leaf(x)}, TOL[dt])
      end
    end
  end)

  it("embedding: any weight dtype forward, gradient with padding_idx and repeats", function()
    for _, dt in ipairs(FLOATS) do
      local w = leaf(randn({10, 37}, dt, 21))
      local idx = ddp.tensor({{1, 3, 3}, {0, 9, 3}}, {dtype = "int64"})
      fwd_bwd("emb " .. dt, function(a, i) return F.embedding(i, a) end, {w, idx}, TOL[dt])
      fwd_bwd("emb pad " .. dt, function(a, i) return F.embedding(i, a, {padding_idx = 3}) end,
        {leaf(w), idx:to("int32")}, TOL[dt])
      fwd_bwd("emb freq " .. dt, function(a, i) return F.embedding(i, a, {scale_grad_by_freq = true}) end,
        {leaf(w), idx}, TOL[dt])
    end
    H.check("emb int64 weight", function(a, i) return F.embedding(i, a) end,
      {ddp.arange(0, 12):view(4, 3), ddp.tensor({3, 0}, {dtype = "int64"})})
    local ok, err = pcall(F.embedding, ddp.tensor({1, 10}, {dtype = "int64"}):cuda(), randn({10, 2}):cuda())
    assert.is_false(ok)
    assert.truthy(tostring(err):find("index 10 out of range for a weight of 10 rows (at position 1)", 1, true), tostring(err))
  end)

  it("dropout: the CPU's mask for the same seed, and its gradient", function()
    for _, dt in ipairs(FLOATS) do
      local x = randn({13, 31}, dt, 22)
      for _, p in ipairs {0.3, 1} do
        ddp.manual_seed(5)
        local xc = leaf(x)
        local oc = F.dropout(xc, p, true)
        ddp.manual_seed(5)
        local xd = leaf(x:cuda())
        local od = F.dropout(xd, p, true)
        H.same(oc:detach(), od:detach(), "dropout " .. dt .. " " .. p, TOL[dt])
        local up = randn({13, 31}, dt, 23)
        oc:backward(up)
        od:backward(up:cuda())
        H.same(xc.grad, xd.grad, "dropout grad " .. dt .. " " .. p, TOL[dt])
      end
    end
    -- the offset advances as on the CPU: the next draw matches too
    ddp.manual_seed(9)
    F.dropout(randn({5}, "float32"), 0.5, true)
    local c = ddp.rand(6)
    ddp.manual_seed(9)
    F.dropout(randn({5}, "float32"):cuda(), 0.5, true)
    H.same(c, ddp.empty(6):cuda():uniform_(0, 1), "after dropout")
  end)
end)

H.describe("random numbers on CUDA", function()
  it("uniform_ and normal_ give the CPU's numbers for the same seed", function()
    for _, dt in ipairs {"float32", "float64", "bfloat16"} do
      for _, n in ipairs {1, 7, 1001} do
        ddp.manual_seed(42)
        local c = ddp.empty(n, {dtype = dt}):uniform_(-2, 3)
        local c2 = ddp.empty(n, {dtype = dt}):normal_(1, 2)
        ddp.manual_seed(42)
        local d = ddp.empty(n, {dtype = dt}):cuda():uniform_(-2, 3)
        local d2 = ddp.empty(n, {dtype = dt}):cuda():normal_(1, 2)
        H.same(c, d, "uniform_ " .. dt .. " " .. n, {0, 0})
        H.same(c2, d2, "normal_ " .. dt .. " " .. n, dt == "float64" and {1e-14, 1e-14} or {1e-6, 1e-6})
      end
    end
  end)

  it("rand and randn with device = cuda equal the CPU's; non-contiguous targets", function()
    ddp.manual_seed(3)
    local c, c2 = ddp.rand(4, 5), ddp.randn(3, 3, {dtype = "float64"})
    ddp.manual_seed(3)
    local d, d2 = ddp.rand(4, 5, {device = "cuda"}), ddp.randn(3, 3, {dtype = "float64", device = "cuda"})
    H.same(c, d, "rand", {0, 0})
    H.same(c2, d2, "randn", {1e-14, 1e-14})
    ddp.manual_seed(3)
    local ci = ddp.randint(-5, 10, {9})
    ddp.manual_seed(3)
    H.same(ci, ddp.randint(-5, 10, {9}, {device = "cuda"}), "randint")
    ddp.manual_seed(4)
    local t = ddp.zeros(4, 6)
    t:t():uniform_(0, 1)
    ddp.manual_seed(4)
    local td = ddp.zeros(4, 6):cuda()
    td:t():uniform_(0, 1)
    H.same(t, td, "uniform_ of a transpose", {0, 0})
  end)
end)

H.describe("optimizer steps on CUDA", function()
  local function trajectory(make, dt, dev)
    ddp.manual_seed(30)
    local p = ddp.randn(37, 5):to(dt):requires_grad_(true)
    if dev then p = H.todev(p) end
    local o = make({p})
    for step = 1, 4 do
      local g = randn({37, 5}, dt, 100 + step)
      p.grad = dev and g:cuda() or g
      o:step()
    end
    return p:detach(), o
  end
  local cases = {
    sgd = function(ps) return optim.SGD(ps, {lr = 0.1}) end,
    sgd_momentum = function(ps) return optim.SGD(ps, {lr = 0.1, momentum = 0.9, dampening = 0.1, weight_decay = 0.01}) end,
    sgd_nesterov = function(ps) return optim.SGD(ps, {lr = 0.05, momentum = 0.8, nesterov = true, maximize = true}) end,
    adamw = function(ps) return optim.AdamW(ps, {lr = 1e-2, weight_decay = 0.1}) end,
    adam_amsgrad = function(ps) return optim.Adam(ps, {lr = 1e-2, weight_decay = 0.05, amsgrad = true}) end,
  }
  for name, make in pairs(cases) do
    it(name .. " over four steps", function()
      for _, dt in ipairs {"float32", "float64"} do
        local pc, oc = trajectory(make, dt, false)
        local pd, od = trajectory(make, dt, true)
        H.same(pc, pd, name .. " " .. dt)
        local sc, sd = oc.state[1] or {}, od.state[1] or {}
        for _, k in ipairs {"momentum_buffer", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"} do
          if ddp.is_tensor(sc[k]) then H.same(sc[k], sd[k], name .. " " .. k) end
        end
      end
    end)
  end
end)

H.describe("nn modules trained on CUDA", function()
  it("Embedding, LayerNorm, BatchNorm1d, Dropout and cross_entropy under AdamW follow the CPU", function()
    local nn = ddp.nn
    local function train(dev)
      ddp.manual_seed(77)
      local m = nn.Sequential(nn.Embedding(20, 8), nn.LayerNorm(8), nn.Dropout(0.2))
      local bn = nn.BatchNorm1d(8)
      if dev then m:to("cuda") bn:to("cuda") end
      local ps = m:parameters()
      for _, p in ipairs(bn:parameters()) do ps[#ps + 1] = p end
      local o = optim.AdamW(ps, {lr = 0.05})
      local loss
      for step = 1, 3 do
        local idx = ddp.tensor({step, 3, 19, 0, 7, 3}, {dtype = "int64"})
        local y = ddp.tensor({1, 0, 7, 2, 2, 5}, {dtype = "int64"})
        if dev then idx, y = idx:cuda(), y:cuda() end
        o:zero_grad()
        loss = F.cross_entropy(bn(m(idx)), y, {label_smoothing = 0.05})
        loss:backward()
        o:step()
      end
      return loss:detach(), ps, bn.running_mean, bn.running_var
    end
    local lc, pc, mc, vc = train(false)
    local ld, pd, md, vd = train(true)
    H.same(lc, ld, "loss")
    for i = 1, #pc do H.same(pc[i]:detach(), pd[i]:detach(), "parameter " .. i, {1e-4, 1e-5}) end
    H.same(mc, md, "running_mean", {1e-4, 1e-5})
    H.same(vc, vd, "running_var", {1e-4, 1e-5})
  end)
end)
