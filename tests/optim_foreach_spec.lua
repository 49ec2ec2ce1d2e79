-- The optimizers' group-at-once steps (ddp.optim.foreach, PyTorch's
-- foreach=True, the default) against the step per parameter
-- (foreach = false): the same bits over 20 steps for every option of SGD,
-- Adam and AdamW, with parameters of several sizes, a float64 one among
-- float32, one that gets no gradient on odd steps, a transposed
-- (non-contiguous) gradient, two groups of which one steps per parameter,
-- and a state loaded halfway; no per-parameter update runs; errors name
-- the optimizer's parameter index.
local ddp = require "ddp"
local nn, optim = ddp.nn, ddp.optim

-- Parameters of a small model: sizes 1 to 4096, one float64.
local function params()
  ddp.manual_seed(11)
  local ps = {
    ddp.randn(64, 64):requires_grad_(true), ddp.randn(64):requires_grad_(true),
    ddp.randn(1):requires_grad_(true), ddp.randn(7, 3):requires_grad_(true),
    ddp.randn(5, 5, { dtype = "float64" }):requires_grad_(true), ddp.randn(33):requires_grad_(true),
  }
  return ps
end

-- Gradients of step i, the same for both runs: parameter 6 has none on odd
-- steps; parameter 4's is a transposed view.
local function set_grads(ps, i)
  ddp.manual_seed(100 + i)
  for k, p in ipairs(ps) do
    if k == 6 and i % 2 == 1 then
      p.grad = nil
    elseif k == 4 then
      p.grad = ddp.randn(3, 7):t()
    else
      p.grad = ddp.randn(p:shape(), { dtype = p:dtype() })
    end
  end
end

local function groups(ps, second)
  return { { params = { ps[1], ps[2], ps[3], ps[4], ps[5] } }, { params = { ps[6] }, foreach = second } }
end

local function run(cls, opts, foreach, steps, second_foreach, reload)
  local ps = params()
  local o = {}
  for k, v in pairs(opts) do o[k] = v end
  o.foreach = foreach
  local opt = cls(groups(ps, second_foreach), o)
  for i = 1, steps do
    set_grads(ps, i)
    opt:step()
    if reload and i == math.floor(steps / 2) then
      local sd = opt:state_dict()
      opt = cls(groups(ps, second_foreach), o)
      opt:load_state_dict(sd)
    end
  end
  return ps, opt
end

local function same_bits(a, b, what)
  assert.same(a:shape(), b:shape())
  local d = (a - b):abs():max():item()
  assert(d == 0, what .. " differs by " .. d)
end

local CASES = {
  { "SGD", optim.SGD, { lr = 0.1 } },
  { "SGD momentum, weight decay", optim.SGD, { lr = 0.1, momentum = 0.9, weight_decay = 0.01 } },
  { "SGD dampening, maximize", optim.SGD, { lr = 0.1, momentum = 0.9, dampening = 0.3, maximize = true } },
  { "SGD nesterov", optim.SGD, { lr = 0.1, momentum = 0.9, nesterov = true } },
  { "Adam", optim.Adam, { lr = 1e-2 } },
  { "Adam weight decay, maximize", optim.Adam, { lr = 1e-2, weight_decay = 0.1, maximize = true } },
  { "AdamW", optim.AdamW, { lr = 1e-2, weight_decay = 0.1 } },
  { "AdamW amsgrad", optim.AdamW, { lr = 1e-2, amsgrad = true, betas = { 0.8, 0.99 }, eps = 1e-6 } },
}

describe("optimizers' foreach steps", function()
  for _, c in ipairs(CASES) do
    it(c[1] .. ": the same bits as a step per parameter over 20 steps", function()
      for _, second in ipairs { true, false } do
        for _, reload in ipairs { false, true } do
          local pa, oa = run(c[2], c[3], true, 20, second, reload)
          local pb, ob = run(c[2], c[3], false, 20, false, reload)
          for k = 1, #pa do same_bits(pa[k], pb[k], ("parameter %d"):format(k)) end
          local sa, sb = oa:state_dict().state, ob:state_dict().state
          for idx, st in pairs(sb) do
            for f, v in pairs(st) do
              if ddp.is_tensor(v) then same_bits(sa[idx][f], v, ("state %d.%s"):format(idx, f))
              else assert.equal(v, sa[idx][f], ("state %d.%s"):format(idx, f)) end
            end
          end
          if c[2] ~= optim.SGD then assert.equal(10, sa[5].step, "parameter 6 stepped on even steps only") end
        end
      end
    end)
  end

  it("is the default, and never runs the per-parameter update", function()
    for _, cls in ipairs { optim.SGD, optim.Adam, optim.AdamW } do
      local ps = params()
      local opt = cls(ps, { lr = 1e-2 })
      assert.equal(true, opt.param_groups[1].foreach)
      opt.update = function() error("the per-parameter update ran") end
      set_grads(ps, 2)
      opt:step()
      local off = cls(ps, { lr = 1e-2, foreach = false })
      local ran = 0
      off.update = function() ran = ran + 1 end
      off:step()
      assert.equal(6, ran)
    end
  end)

  it("trains a model as the per-parameter step does (a Sequential with AdamW)", function()
    local function train(foreach)
      ddp.manual_seed(3)
      local m = nn.Sequential(nn.Linear(10, 32), nn.LayerNorm(32), nn.GELU(), nn.Linear(32, 3))
      local opt = optim.AdamW(m:parameters(), { lr = 1e-2, foreach = foreach })
      for i = 1, 15 do
        ddp.manual_seed(i)
        opt:zero_grad()
        nn.functional.cross_entropy(m(ddp.randn(16, 10)), ddp.randint(0, 3, { 16 })):backward()
        opt:step()
      end
      return m:state_dict()
    end
    local a, b = train(true), train(false)
    for k, v in pairs(b) do same_bits(a[k], v, k) end
  end)

  it("names the optimizer's parameter index on a bad state", function()
    local ps = params()
    local opt = optim.AdamW(groups(ps, true), { lr = 1e-2 })
    set_grads(ps, 2)
    opt:step()
    opt.state[5].exp_avg = ddp.zeros(4)  -- parameter 5 (0-based) is the second group's first
    local ok, err = pcall(opt.step, opt)
    assert.is_false(ok)
    assert.truthy(err:find("adamw: parameter 5: exp_avg is float32 [4] but the parameter is float32 [33]", 1, true), err)
    assert.truthy(err:find("optim_foreach_spec.lua:%d+:"), "raised at the caller's line: " .. err)
    local one = { ddp.zeros({ 3 }):requires_grad_(true) }
    local sgd = optim.SGD(one, { lr = 0.1, momentum = 0.9 })
    one[1].grad = ddp.ones(3)
    sgd:step()
    sgd.state[0].momentum_buffer = ddp.zeros(2)
    ok, err = pcall(sgd.step, sgd)
    assert.is_false(ok)
    assert.truthy(err:find("sgd: parameter 0: momentum_buffer is float32 [2] but the parameter is float32 [3]", 1, true), err)
  end)
end)
