-- ddp.argparse: types from the defaults, booleans as people mean them.
local ddp = require "ddp"

local defaults = { epochs = 3, lr = 1e-3, model = "mlp", resume = false, use_bn = true }

describe("argparse", function()
  it("keeps defaults and parses every form", function()
    local a = ddp.argparse(defaults, {})
    assert.equal(3, a.epochs)
    assert.is_false(a.resume)
    a = ddp.argparse(defaults, { "--epochs", "5", "--lr=0.1", "--model", "cnn", "--resume", "--no-use-bn", "x.txt" })
    assert.equal(5, a.epochs)
    assert.equal(0.1, a.lr)
    assert.equal("cnn", a.model)
    assert.is_true(a.resume)
    assert.is_false(a.use_bn)
    assert.same({ "x.txt" }, a._positional)
  end)

  it("parses --flag=False as false (Python's type=bool trap)", function()
    for _, v in ipairs { "False", "false", "0", "no", "off" } do
      assert.is_false(ddp.argparse(defaults, { "--use-bn=" .. v }).use_bn)
    end
    for _, v in ipairs { "True", "1", "yes" } do
      assert.is_true(ddp.argparse(defaults, { "--resume=" .. v }).resume)
    end
  end)

  it("rejects unknown flags and bad values with the usage", function()
    local ok, err = pcall(ddp.argparse, defaults, { "--epoch", "4" })
    assert.is_false(ok)
    assert.matches("unknown option %-%-epoch", err)
    assert.matches("%-%-epochs NUMBER", err)
    ok, err = pcall(ddp.argparse, defaults, { "--epochs", "many" })
    assert.matches('%-%-epochs expects a number, got "many"', err)
    ok, err = pcall(ddp.argparse, defaults, { "--resume=maybe" })
    assert.matches('expects true or false, got "maybe"', err)
    ok, err = pcall(ddp.argparse, defaults, { "--lr" })
    assert.matches("%-%-lr expects a number value", err)
  end)

  it("accepts underscores and dashes alike", function()
    assert.is_false(ddp.argparse(defaults, { "--use_bn=false" }).use_bn)
  end)
end)
