-- ddp.argparse: types from the defaults, booleans as people mean them,
-- mistakes reported as Python's argparse does (usage, error, exit 2).
local ddp = require "ddp"
local jobs = require "helpers.jobs"
local q = jobs.q

local defaults = { epochs = 3, lr = 1e-3, model = "mlp", resume = false, use_bn = true }

-- Parses with mistakes raised, not printed with an exit (which would end busted).
local function parse(argv, opts)
  opts = opts or {}
  opts.exit_on_error = false
  return ddp.argparse(defaults, argv, opts)
end

local function fails(argv, opts)
  local ok, err = pcall(parse, argv, opts)
  assert.is_false(ok, "expected an error for " .. table.concat(argv, " "))
  return err
end

describe("argparse", function()
  teardown(jobs.cleanup)

  it("keeps defaults and parses every form", function()
    local a = parse({})
    assert.equal(3, a.epochs)
    assert.is_false(a.resume)
    a = parse({ "--epochs", "5", "--lr=0.1", "--model", "cnn", "--resume", "--no-use-bn", "x.txt" },
              { positional = { "file" } })
    assert.equal(5, a.epochs)
    assert.equal(0.1, a.lr)
    assert.equal("cnn", a.model)
    assert.is_true(a.resume)
    assert.is_false(a.use_bn)
    assert.equal("x.txt", a.file)
    assert.same({ "x.txt" }, a._positional)
  end)

  it("parses --flag=False as false (Python's type=bool trap)", function()
    for _, v in ipairs { "False", "false", "0", "no", "off" } do
      assert.is_false(parse({ "--use-bn=" .. v }).use_bn)
    end
    for _, v in ipairs { "True", "1", "yes" } do
      assert.is_true(parse({ "--resume=" .. v }).resume)
    end
  end)

  it("takes a boolean word after a boolean flag as its value", function()
    for _, v in ipairs { "False", "false", "FALSE", "0", "no", "Off" } do
      local a = parse({ "--use-bn", v })
      assert.is_false(a.use_bn, v)
      assert.same({}, a._positional)
    end
    for _, v in ipairs { "True", "1", "YES", "on" } do
      assert.is_true(parse({ "--resume", v }).resume, v)
    end
    -- any other word is not the flag's: the flag alone means true
    local a = parse({ "--resume", "--epochs", "2" })
    assert.is_true(a.resume)
    assert.equal(2, a.epochs)
    a = parse({ "--resume", "data.txt" }, { positional = { "file" } })
    assert.is_true(a.resume)
    assert.equal("data.txt", a.file)
    assert.is_true(parse({ "--resume" }).resume)
  end)

  it("refuses a positional argument the script did not declare", function()
    local err = fails({ "--resume", "maybe" })
    assert.matches("unrecognized arguments: maybe %(this script takes no positional arguments%)", err)
    assert.matches("usage: ddplua script.lua %[%-h%]", err)
    err = fails({ "a", "b" }, { positional = { "file" } })
    assert.matches("unrecognized arguments: b$", err:match("^[^\n]*"))
    err = fails({}, { positional = { "src", "dst" } })
    assert.matches("the following arguments are required: src, dst", err)
    -- opting in to any number of them
    local a = parse({ "a", "--epochs", "4", "b" }, { allow_positional = true })
    assert.same({ "a", "b" }, a._positional)
    assert.equal(4, a.epochs)
    -- after "--" everything is positional, even what looks like a flag
    a = parse({ "--", "--epochs", "-x" }, { allow_positional = true })
    assert.same({ "--epochs", "-x" }, a._positional)
    assert.equal(3, a.epochs)
    -- a negative number is a value, not an option
    assert.same({ "-5" }, parse({ "-5" }, { allow_positional = true })._positional)
  end)

  it("rejects unknown flags and bad values with the usage", function()
    local err = fails({ "--epoch", "4" })
    assert.matches("unknown option %-%-epoch", err)
    assert.matches("%[%-%-epochs NUMBER%]", err)
    assert.matches("unknown option %-x", fails({ "-x" }))
    assert.matches('%-%-epochs expects a number, got "many"', fails({ "--epochs", "many" }))
    assert.matches('expects true or false, got "maybe"', fails({ "--resume=maybe" }))
    assert.matches("%-%-lr expects a number value", fails({ "--lr" }))
    assert.matches("%-%-no%-use%-bn takes no value", fails({ "--no-use-bn=1" }))
  end)

  it("checks its own arguments at the caller's line", function()
    local ok, err = pcall(ddp.argparse, defaults, {}, { positional = { "epochs" } })
    assert.is_false(ok)
    assert.matches("positional name \"epochs\" must be a string and not also a flag", err)
  end)

  it("accepts underscores and dashes alike", function()
    assert.is_false(parse({ "--use_bn=false" }).use_bn)
  end)

  describe("in a script", function()
    local script = jobs.script([[
local args = ddp.argparse({ epochs = 3, is_multi_gpu = false }, arg, { help = { epochs = "passes" } })
print("epochs=" .. args.epochs .. " multi=" .. tostring(args.is_multi_gpu))
]], "argparse")

    it("prints the usage and the error on stderr and exits 2, without a traceback", function()
      for _, bad in ipairs { "--is-multi-gpu maybe", "--epoch 2", "stray", "-x" } do
        local out, err, rc = jobs.run(q(script) .. " " .. bad)
        assert.equal(2, rc, bad)
        assert.equal("", out)
        assert.matches("^usage: ddplua " .. script:gsub("%p", "%%%0") .. " %[%-h%] %[%-%-epochs NUMBER%]", err)
        assert.matches("\nddplua [^\n]*: error: [^\n]+\n$", err)
        assert.falsy(err:find("traceback", 1, true), err)
      end
      local out, _, rc = jobs.run(q(script) .. " --is-multi-gpu False")
      assert.equal(0, rc)
      assert.equal("epochs=3 multi=false\n", out)
    end)

    it("prints --help on rank 0 only; every rank exits 0", function()
      local out, err, rc = jobs.run(q(script) .. " --help")
      assert.equal(0, rc)
      assert.equal("", err)
      assert.matches("^usage: ", out)
      assert.matches("%-h, %-%-help +show this help and exit", out)
      assert.matches("%-%-epochs NUMBER +passes %(default: 3%)", out)
      out, err, rc = jobs.run(q(script) .. " -h", "RANK=1")
      assert.equal(0, rc)
      assert.equal("", out .. err)
      out, err, rc = jobs.run(q(script) .. " --bogus", "RANK=1")
      assert.equal(2, rc)
      assert.equal("", out .. err)
    end)

    it("reports a bad flag once in a 2-rank job, which exits 2", function()
      local out, err, rc = jobs.run("--nproc 2 " .. q(script) .. " --bogus")
      assert.equal(2, rc)
      assert.equal("", out)
      local _, n0 = err:gsub("\n%[0%] [^\n]*: error: unknown option %-%-bogus", "")
      assert.equal(1, n0, err)
      assert.falsy(err:find("[1]", 1, true), err)
      assert.matches("rank 0 %(local rank 0%) failed with exit code 2", err)
      assert.falsy(err:find("traceback", 1, true), err)

      out, err, rc = jobs.run("--nproc 2 " .. q(script) .. " --help")
      assert.equal(0, rc)
      local _, n = out:gsub("usage: ", "")
      assert.equal(1, n, out)
      assert.falsy(out:find("[1]", 1, true), out)
    end)
  end)
end)
