-- LambdaLR and OneCycleLR against PyTorch 1.13's sequences
-- (tests/golden/make_sched.py writes tests/golden/sched_cases.lua): lr and
-- momentum (SGD) or beta1 (Adam) per group after each step, state_dict
-- round trips mid-schedule, and the errors.
local ddp = require "ddp"
local optim = require "ddp.optim"
local sched = optim.lr_scheduler

local cases = dofile("tests/golden/sched_cases.lua")

local function make_opt(kind, groups)
  local ps = {}
  for i = 1, groups do ps[i] = { params = { ddp.zeros(2):requires_grad_() } } end
  if kind == "sgd" then return optim.SGD(ps, { lr = 0.1, momentum = 0.9 }) end
  return optim.Adam(ps, { lr = 1e-3 })
end

local function momentum_of(opt, kind, i)
  local g = opt.param_groups[i]
  return kind == "sgd" and g.momentum or g.betas[1]
end

local function build(c, opt)
  local o = assert(loadstring("return " .. c.lua))()
  if c.name:match("^onecycle") then return sched.OneCycleLR(opt, o) end
  return sched.LambdaLR(opt, o)
end

local function close(a, b) return math.abs(a - b) <= 1e-12 + 1e-12 * math.abs(b) end

local function check_at(c, opt, k)
  for i = 1, c.groups do
    local want = c.lrs[k + 1][i]
    local got = opt.param_groups[i].lr
    assert(close(got, want), ("%s: step %d, group %d: lr %.17g, PyTorch %.17g"):format(c.name, k, i, got, want))
    if c.momenta then
      local wm, gm = c.momenta[k + 1][i], momentum_of(opt, c.opt, i)
      assert(close(gm, wm), ("%s: step %d, group %d: momentum %.17g, PyTorch %.17g"):format(c.name, k, i, gm, wm))
    end
  end
end

describe("LambdaLR and OneCycleLR match PyTorch", function()
  for _, c in ipairs(cases) do
    it(c.name, function()
      local opt = make_opt(c.opt, c.groups)
      local s = build(c, opt)
      check_at(c, opt, 0)
      for k = 1, c.steps do
        opt:step()
        s:step()
        check_at(c, opt, k)
      end
      assert.same(s:get_last_lr()[1], c.lrs[c.steps + 1][1])
    end)

    it(c.name .. ": state_dict mid-way resumes the sequence", function()
      local opt = make_opt(c.opt, c.groups)
      local s = build(c, opt)
      local half = math.floor(c.steps / 2)
      for _ = 1, half do s:step() end
      local sd = s:state_dict()
      for _, v in pairs(sd) do assert.is_not.equal("function", type(v)) end
      local opt2 = make_opt(c.opt, c.groups)
      local s2 = build(c, opt2)
      s2:load_state_dict(sd)
      check_at(c, opt2, half)
      for k = half + 1, c.steps do
        s2:step()
        check_at(c, opt2, k)
      end
    end)
  end
end)

describe("OneCycleLR and LambdaLR errors", function()
  local function err(f)
    local ok, e = pcall(f)
    assert.is_false(ok)
    return e
  end

  it("stepping past total_steps fails as PyTorch's, at the caller's line", function()
    local s = sched.OneCycleLR(make_opt("sgd", 1), { max_lr = 0.1, total_steps = 3 })
    for _ = 1, 3 do s:step() end
    local e = err(function() s:step() end)
    assert.matches("sched_spec.lua:%d+: OneCycleLR: tried to step 5 times. The specified number of total steps is 3", e)
    -- the scheduler stays at its last step
    assert.equal(3, s.last_epoch)
  end)

  it("refuses bad options", function()
    local opt = make_opt("sgd", 1)
    assert.matches("you must define either total_steps OR %(epochs AND steps_per_epoch%)",
                   err(function() sched.OneCycleLR(opt, { max_lr = 0.1 }) end))
    assert.matches("expected positive integer total_steps, but got 0",
                   err(function() sched.OneCycleLR(opt, { max_lr = 0.1, total_steps = 0 }) end))
    assert.matches("expected positive integer steps_per_epoch",
                   err(function() sched.OneCycleLR(opt, { max_lr = 0.1, epochs = 2 }) end))
    assert.matches("expected float between 0 and 1 pct_start, but got 1.5",
                   err(function() sched.OneCycleLR(opt, { max_lr = 0.1, total_steps = 5, pct_start = 1.5 }) end))
    assert.matches("anneal_strategy must be one of 'cos' or 'linear', instead got cosine",
                   err(function() sched.OneCycleLR(opt, { max_lr = 0.1, total_steps = 5, anneal_strategy = "cosine" }) end))
    assert.matches("expected 1 values for max_lr, got 2",
                   err(function() sched.OneCycleLR(opt, { max_lr = { 0.1, 0.2 }, total_steps = 5 }) end))
    assert.matches('unknown option "max_lrs"',
                   err(function() sched.OneCycleLR(opt, { max_lrs = 0.1, total_steps = 5 }) end))
    assert.matches("expected 1 lr_lambdas, but got 2",
                   err(function() sched.LambdaLR(opt, { function() return 1 end, function() return 1 end }) end))
    assert.matches("lr_lambda must be a function or a list of functions",
                   err(function() sched.LambdaLR(opt, 0.5) end))
    assert.matches("lr_lambda 1 returned nil for epoch 0, not a number",
                   err(function() sched.LambdaLR(opt, function() end) end))
  end)

  it("OneCycleLR without momentum to cycle asks for cycle_momentum = false", function()
    local p = ddp.zeros(2):requires_grad_()
    local fake = optim.SGD({ p }, { lr = 0.1 })
    fake.defaults = { lr = 0.1 }  -- an optimizer with neither momentum nor betas
    assert.matches("optimizer must support momentum with `cycle_momentum` option enabled",
                   err(function() sched.OneCycleLR(fake, { max_lr = 0.1, total_steps = 5 }) end))
    sched.OneCycleLR(fake, { max_lr = 0.1, total_steps = 5, cycle_momentum = false })
  end)

  it("cycling Adam's beta1 leaves the groups' betas tables unshared and beta2 alone", function()
    local opt = make_opt("adam", 2)
    local s = sched.OneCycleLR(opt, { max_lr = 0.01, total_steps = 10 })
    s:step()
    local g1, g2 = opt.param_groups[1], opt.param_groups[2]
    assert.equal(0.999, g1.betas[2])
    assert.is_not.equal(g1.betas, g2.betas)
    assert.equal(0.9, opt.defaults.betas[1])
  end)
end)
