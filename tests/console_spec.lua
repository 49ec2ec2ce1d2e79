-- ddp.console, the prompt's Lua side: which locals a chunk declares at its
-- top level, how chunks run in a session, how values print, what Tab offers.
local console = require "ddp.console"
local ddp = require "ddp"

describe("ddp.console", function()
  it("finds the top-level locals of a chunk, not those in blocks, strings or comments", function()
    local names, ret = console.top_level_locals([==[
local a, b = 1, 2
local function f() local inner = 1 end
do local hidden = 3 end
if a then local h2 = 1 else local h3 = 2 end
for i = 1, 2 do local h4 = i end
repeat local h5 = 1 until true
local s = "local fake = 1" -- local comment_fake
local t = [[local longfake]] --[=[ local long_comment ]=]
local c
return a]==])
    assert.same({ "a", "b", "f", "s", "t", "c" }, names)
    assert.truthy(ret)
  end)

  it("keeps a session's locals and globals across chunks", function()
    local s = console.session()
    assert.same({ true, "" }, { console.run(s, "local x, y = 2, 3") })
    assert.same({ true, "6" }, { console.run(s, "x * y") })
    assert.same({ true, "" }, { console.run(s, "local function sq(v) return v * v end") })
    assert.same({ true, "9" }, { console.run(s, "sq(y)") })
    assert.same({ true, "4" }, { console.run(s, "local z = sq(x) return z") })
    assert.same({ true, "4" }, { console.run(s, "z") })
    assert.same({ true, "1\tnil\tstr" }, { console.run(s, "=1, nil, 'str'") })
    assert.is_nil(rawget(_G, "x"))  -- a prompt local is no global
  end)

  it("reports errors with the typed line, and a traceback only when it says more", function()
    local s = console.session()
    local ok, msg = console.run(s, "error('boom')")
    assert.is_false(ok)
    assert.equals("stdin:1: boom", msg)
    ok, msg = console.run(s, "local function f()\n  error('deep')\nend\nf()")
    assert.is_false(ok)
    assert.truthy(msg:find("^stdin:2: deep\nstack traceback:"), msg)
    assert.truthy(msg:find("in function 'f'", 1, true), msg)
    assert.falsy(msg:find("ddp/console", 1, true), msg)
    ok, msg = console.run(s, "local = 1")
    assert.is_false(ok)
    assert.truthy(msg:find("^stdin:1:"), msg)
    ok, msg = console.run(s, "require('ddp').ones(2) + require('ddp').ones(3)")
    assert.is_false(ok)
    assert.truthy(msg:find("^stdin:1: "), msg)
    assert.falsy(msg:find("ddp/", 1, true), msg)  -- no frame of the library's
  end)

  it("formats tables nested and bounded, tensors and modules as their repr", function()
    assert.equals('{1, "two", {x = 1, y = {z = {w = {...}}}}, ["a b"] = true, name = "n"}',
      console.format({ 1, "two", { x = 1, y = { z = { w = { 1 } } } }, name = "n", ["a b"] = true }))
    local cyc = {}
    cyc.self = cyc
    assert.equals("{self = <cycle>}", console.format(cyc))
    local big = {}
    for i = 1, 100 do big[i] = i end
    assert.truthy(console.format(big):find("... (60 more)", 1, true))
    assert.equals("tensor([1., 1.], requires_grad=True)", console.format(ddp.ones(2):requires_grad_()))
    assert.equals("Linear(in_features=2, out_features=3, bias=True)", console.format(ddp.nn.Linear(2, 3)))
    assert.equals("text\t2", console.format("text", 2))
  end)

  it("completes globals, fields and methods", function()
    local s = console.session()
    assert.same({ true, "" }, { console.run(s, "local t = require('ddp').ones(1)") })
    assert.same({ "string.format" }, console.complete(s, "string.form"))
    local m = console.complete(s, "x = t:add")
    assert.truthy(#m >= 2, table.concat(m, " "))
    for _, c in ipairs(m) do assert.truthy(c:find("^t:add"), c) end
    assert.same({}, console.complete(s, "nothing_here."))
    local g = console.complete(s, "whi")
    assert.same({ "while" }, g)
    local names = table.concat(console.complete(s, "t"), " ")
    assert.truthy((" " .. names .. " "):find(" t ", 1, true), names)  -- the prompt's local
    assert.truthy(names:find("tostring", 1, true), names)
  end)

  it("refuses a breakpoint rank outside the job", function()
    assert.has_error(function() ddp.breakpoint(5) end, "breakpoint: rank 5 is not in this job (ranks 0 to 0)")
    assert.has_error(function() ddp.breakpoint("x") end)
  end)
end)
