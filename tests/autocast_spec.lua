-- ddp.autocast on the CPU (the same Lua wrappers run on CUDA tensors):
-- which ops run in bfloat16 and which in float32, gradients in float32
-- on float32 parameters, nesting, restore on error, argument errors.
local ddp = require "ddp"
local shell = require "helpers.shell"
local nn, F = ddp.nn, ddp.nn.functional

local function mlp()
  ddp.manual_seed(7)
  return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
end

describe("ddp.autocast", function()
  teardown(shell.cleanup)

  it("applies in every spec file of a busted run (the library loads once: .busted's helper)", function()
    -- busted unloads each file's modules; the tensor type keeps the first
    -- load's methods, so a later file's ddp.autocast must be that load's
    local later = [[
describe("a later file", function() it("casts", function()
  local ddp = require "ddp"
  local a = ddp.ones(2, 2)
  assert.equal("bfloat16", ddp.autocast("bf16", function() return a:matmul(a):dtype() end))
end) end)]]
    local out = shell.busted { 'describe("a first file", function() it("loads ddp", function() require "ddp" end) end)', later }
    assert.truthy(out:find("ok 2 - a later file casts", 1, true), out)
    assert.falsy(out:find("not ok", 1, true), out)
  end)

  it("refuses a second load of the library in one process, naming the fix, rather than not applying", function()
    -- a project whose .busted lacks the helper line: the second file
    -- loads ddp again; without the refusal, its ddp.autocast would change
    -- a module the tensor methods never read
    local dir = shell.tempdir()
    shell.writefile(dir .. "/.busted", ("return { default = { lua = %q } }"):format(shell.ddplua))
    for i = 1, 2 do
      shell.writefile(("%s/%d_spec.lua"):format(dir, i), [[
describe("file", function() it("casts", function()
  local ddp = require "ddp"
  local a = ddp.ones(2, 2)
  assert.equal("bfloat16", ddp.autocast("bf16", function() return a:matmul(a):dtype() end))
end) end)]])
    end
    local out = shell.sh("cd " .. shell.q(dir) .. " && busted -o TAP . 2>&1")
    assert.truthy(out:find("ok 1 - file casts", 1, true), out)
    assert.truthy(out:find("the library was loaded a second time in this process", 1, true), out)
    assert.truthy(out:find('add helper = "ddp" to your .busted', 1, true), out)
  end)

  it("runs matmul, linear and conv2d in bfloat16", function()
    local a, b = ddp.randn(3, 8), ddp.randn(8, 2)
    ddp.autocast("bf16", function()
      assert.equal("bfloat16", a:matmul(b):dtype())
      assert.equal("bfloat16", ddp.matmul(a, b):dtype())
      assert.equal("bfloat16", a:mm(b):dtype())
      assert.equal("bfloat16", F.linear(a, ddp.randn(5, 8), ddp.randn(5)):dtype())
      assert.equal("bfloat16", nn.Conv2d(2, 3, 3)(ddp.randn(1, 2, 5, 5)):dtype())
    end)
    assert.equal("float32", a:matmul(b):dtype())
  end)

  it("runs reductions, softmax, losses and norms in float32", function()
    local h = ddp.randn(4, 6):bfloat16()
    local y = ddp.tensor({ 0, 1, 2, 3 }, { dtype = "int64" })
    ddp.autocast("bfloat16", function()
      assert.equal("float32", h:sum():dtype())
      assert.equal("float32", h:mean(1):dtype())
      assert.equal("float32", h:softmax(1):dtype())
      assert.equal("float32", F.log_softmax(h, 1):dtype())
      assert.equal("float32", F.cross_entropy(h, y):dtype())
      assert.equal("float32", F.nll_loss(F.log_softmax(h, 1), y):dtype())
      assert.equal("float32", F.mse_loss(h, ddp.zeros(4, 6)):dtype())
      assert.equal("float32", F.layer_norm(h, { 6 }):dtype())
      -- elementwise ops are left alone
      assert.equal("bfloat16", (h * 2):dtype())
    end)
  end)

  it("gives float32 gradients close to the float32 ones", function()
    -- a fixed draw: the bound held for whatever the random state was when
    -- this file ran first, and not for every draw (seeds 1 and 3 of 1-8
    -- exceed it by a ReLU that bfloat16 rounding flips); before, the test
    -- failed when spec files ran in another order
    ddp.manual_seed(2)
    local x = ddp.randn(16, 8)
    local y = ddp.tensor({ 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3 }, { dtype = "int64" })
    local m = mlp()
    local loss = ddp.autocast("bf16", function() return F.cross_entropy(m(x), y) end)
    assert.equal("float32", loss:dtype())
    loss:backward()
    local got = {}
    for i, p in ipairs(m:parameters()) do
      assert.equal("float32", p.grad:dtype())
      got[i] = p.grad:clone()
    end
    local m32 = mlp()
    local l32 = F.cross_entropy(m32(x), y)
    l32:backward()
    assert.is_true(math.abs(loss:item() - l32:item()) < 0.05)
    for i, p in ipairs(m32:parameters()) do
      local err = (got[i] - p.grad):abs():max():item()
      local scale = p.grad:abs():max():item() + 1e-3
      assert.is_true(err <= 0.05 * scale + 1e-3, ("param %d: off by %g (scale %g)"):format(i, err, scale))
    end
  end)

  it("nests, turns off with false, returns fn's results and restores on error", function()
    assert.is_nil(ddp.autocast_dtype())
    local a, b, c = ddp.autocast("bf16", function(v)
      local inner = ddp.autocast(false, function() return ddp.autocast_dtype() end)
      return ddp.autocast_dtype(), inner, v
    end, 42)
    assert.equal("bfloat16", a)
    assert.is_nil(b)
    assert.equal(42, c)
    local ok, err = pcall(ddp.autocast, "bf16", function() error("boom") end)
    assert.is_false(ok)
    assert.truthy(tostring(err):find("boom", 1, true))
    assert.is_nil(ddp.autocast_dtype())
  end)

  it("rejects unknown dtypes and non-functions", function()
    local ok, err = pcall(ddp.autocast, "int8", function() end)
    assert.is_false(ok)
    assert.truthy(err:find("dtype must be", 1, true))
    ok, err = pcall(ddp.autocast, "bf16", 3)
    assert.is_false(ok)
    assert.truthy(err:find("expected a function", 1, true))
  end)
end)
