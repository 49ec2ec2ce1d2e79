-- ddp.GradScaler (ddp.amp.GradScaler) against PyTorch 2.15's
-- torch.amp.GradScaler (tests/golden/make_grad_scaler.py writes
-- grad_scaler_cases.lua): the scale, its growth tracker and the parameter
-- after each of 9 steps, an inf and a NaN among them (skipped steps, the
-- scale backing off and growing again); unscale_ before clipping; the
-- errors of a misused scaler; a disabled one passing through; its
-- state_dict; float16 training under autocast; and DDP ranks skipping
-- the same step when one rank's gradient overflows.
local ddp = require "ddp"
local nn, optim, F = ddp.nn, ddp.optim, ddp.nn.functional
local golden = require "helpers.golden"
local jobs = require "helpers.jobs"

local G = dofile("tests/golden/grad_scaler_cases.lua")

local function err_of(f, ...)
  local ok, e = pcall(f, ...)
  assert.is_false(ok)
  return tostring(e)
end

describe("GradScaler", function()
  it("scales, skips and grows as PyTorch's, step by step", function()
    local p = ddp.tensor({ 1, 2, 3, 4 }, { dtype = "float32" }):requires_grad_()
    local opt = optim.SGD({ p }, { lr = G.lr })
    local sc = ddp.amp.GradScaler({ init_scale = G.init_scale, growth_interval = G.growth_interval })
    local base = ddp.tensor(G.base, { dtype = "float32" })
    for k, want in ipairs(G.steps) do
      opt:zero_grad()
      sc:scale((p * (base * k)):sum()):backward()
      ddp.no_grad(function()
        if k == 3 then p.grad:narrow(0, 1, 1):fill_(math.huge) end
        if k == 6 then p.grad:narrow(0, 2, 1):fill_(0 / 0) end
      end)
      local r = sc:step(opt)
      sc:update()
      assert.equal(want.scale, sc:get_scale(), "scale after step " .. k)
      assert.equal(want.tracker, sc:state_dict()._growth_tracker, "growth tracker after step " .. k)
      assert.is_true(p:detach():equal(golden.build(want.p)), "parameter after step " .. k)
      if k == 3 or k == 6 then assert.is_nil(r) end
    end
  end)

  it("unscale_ lets clip_grad_norm_ see true gradients; names misuse as PyTorch does", function()
    local m = nn.Linear(3, 2)
    local opt = optim.SGD(m:parameters(), { lr = 0.1 })
    local sc = ddp.GradScaler({ init_scale = 1024 })
    sc:scale(m(ddp.ones(4, 3)):sum()):backward()
    local scaled = m.bias.grad:clone()
    sc:unscale_(opt)
    assert.is_true(m.bias.grad:equal(scaled / 1024))
    assert.matches("unscale_%(%) has already been called on this optimizer since the last update%(%)",
                   err_of(sc.unscale_, sc, opt))
    sc:step(opt)  -- no second unscale
    assert.matches("step%(%) has already been called since the last update%(%)", err_of(sc.step, sc, opt))
    assert.matches("unscale_%(%) is being called after step%(%)", err_of(sc.unscale_, sc, opt))
    sc:update()
    assert.matches("no inf checks were recorded", err_of(sc.update, sc))
    assert.matches("a closure is not supported", err_of(sc.step, sc, opt, function() end))
    assert.matches("unknown option \"init\"", err_of(ddp.GradScaler, { init = 2 }))
    assert.matches("growth_factor should be > 1", err_of(ddp.GradScaler, { growth_factor = 0.5 }))
    -- float16 gradients: refused as PyTorch refuses them
    local h = nn.Linear(3, 2):to("float16")
    local hopt = optim.SGD(h:parameters(), { lr = 0.1 })
    sc:scale(h(ddp.ones(4, 3):half()):float():sum()):backward()
    assert.matches("parameter 0 has a float16 gradient, which PyTorch's GradScaler refuses",
                   err_of(sc.unscale_, sc, hopt))
  end)

  it("passes through when disabled, and carries its state in state_dict", function()
    local p = ddp.ones(2):requires_grad_()
    local opt = optim.SGD({ p }, { lr = 1 })
    local off = ddp.GradScaler({ enabled = false })
    local loss = p:sum()
    assert.equal(loss, off:scale(loss))
    loss:backward()
    off:step(opt)
    off:update()
    assert.is_true(p:detach():equal(ddp.zeros(2)))
    assert.equal(1.0, off:get_scale())
    assert.same({}, off:state_dict())
    local a = ddp.GradScaler({ init_scale = 4, growth_interval = 3 })
    a:scale(p:sum()):backward()
    a:step(opt)
    a:update()
    local b = ddp.GradScaler()
    b:load_state_dict(a:state_dict())
    assert.same(a:state_dict(), b:state_dict())
    assert.same({ scale = 4, growth_factor = 2, backoff_factor = 0.5, growth_interval = 3, _growth_tracker = 1 },
                b:state_dict())
    assert.matches("empty, possibly because it was saved from a disabled GradScaler", err_of(b.load_state_dict, b, {}))
    -- a table of outputs is scaled whole
    local t = a:scale({ ddp.ones(1), { ddp.ones(2) } })
    assert.equal(4, t[1]:item())
    assert.equal(4, t[2][1]:sum():item() / 2)
  end)

  it("trains a float32 model under autocast float16 with loss scaling", function()
    ddp.manual_seed(0)
    local m = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 2))
    local opt = optim.AdamW(m:parameters(), { lr = 1e-2 })
    local sc = ddp.GradScaler()
    local x = ddp.randn(64, 8)
    local y = x:narrow(1, 0, 1):view(-1):gt(0):long()
    local first, last
    for step = 1, 60 do
      opt:zero_grad()
      local loss
      ddp.autocast("fp16", function() loss = F.cross_entropy(m(x), y) end)
      sc:scale(loss):backward()
      sc:step(opt)
      sc:update()
      first = first or loss:item()
      last = loss:item()
    end
    assert(last < first * 0.5, ("loss %g -> %g"):format(first, last))
    assert.equal("float32", m:parameters()[1]:dtype())
  end)

  it("makes every DDP rank skip the step one rank's overflow spoils", function()
    local s = jobs.script([[
ddp.init()
ddp.manual_seed(1)
local model = ddp.DDP(ddp.nn.Linear(4, 1))
local opt = ddp.optim.SGD(model:parameters(), { lr = 0.1 })
local sc = ddp.GradScaler({ init_scale = 2 ^ 10 })
for step = 1, 3 do
  opt:zero_grad()
  local x = ddp.ones(2, 4)
  if step == 2 and ddp.rank() == 1 then x = x * math.huge end  -- this rank's gradient overflows
  sc:scale(model(x):sum()):backward()
  sc:step(opt)
  sc:update()
  print(("rank %d step %d scale %g w %.6f"):format(ddp.rank(), step, sc:get_scale(),
        model:parameters()[1]:sum():item()))
end
]], "scaler")
    local out, err, rc = jobs.run("--nproc 2 " .. jobs.q(s))
    assert.equal(0, rc, err)
    local w = {}
    for r, k, scale, v in out:gmatch("rank (%d) step (%d) scale (%S+) w (%S+)") do
      w[r .. ":" .. k] = v
      if k == "2" or k == "3" then assert.equal("512", scale, out) end
    end
    assert(w["0:1"] and w["0:3"] and w["1:1"] and w["1:3"], "every rank's three lines:\n" .. out)
    for _, r in ipairs { "0", "1" } do
      assert.equal(w[r .. ":1"], w[r .. ":2"], "step 2 skipped on rank " .. r .. ":\n" .. out)
      assert.are_not.equal(w[r .. ":2"], w[r .. ":3"], "step 3 taken on rank " .. r)
    end
    assert.equal(w["0:3"], w["1:3"], "the ranks' weights agree")
  end)
end)
