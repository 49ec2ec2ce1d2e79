-- The ddplua REPL, driven through a pseudo-terminal by tests/helpers/pty.py.

local shell = require "helpers.shell"
local prompt = require "helpers.prompt"
local root, ddplua, q, exists, tempname = shell.root, shell.ddplua, shell.q, shell.exists, shell.tempname
local python = "/usr/bin/python3"

-- Types `inputs` (pty.py's input lines) into a fresh REPL (HOME a new
-- directory); returns the transcript (ending in "EXIT ...") and HOME.
-- program: another ddplua binary than the one under test.
local function repl(inputs, program)
  return prompt.run(inputs, "", { timeout = 20, program = program })
end

local function has(out, text)
  assert.truthy(out:find(text, 1, true), "expected " .. text .. " in:\n" .. out)
end

if not exists(python) then
  pending("no " .. python .. " here: tests/helpers/pty.py needs it to drive the REPL")
  return
end

describe("ddplua REPL", function()
  teardown(shell.cleanup)

  it("prints the banner and evaluates expressions", function()
    local out = repl { "1+1", "^D" }
    assert.truthy(out:match("^ddplua %S+ %-%- LuaJIT data%-parallel training%."), out)
    has(out, "Ctrl-D to exit.")
    has(out, "\n> 1+1\n2\n> ")
  end)

  it("prints every returned value, tab separated", function()
    local out = repl { "return 1, nil, 'x'", "=2*3", "^D" }
    has(out, "\n1\tnil\tx\n")
    has(out, "\n6\n")
  end)

  it("continues incomplete chunks with the >> prompt", function()
    local out = repl { "for i=1,2 do", "print(i)", "end", "^D" }
    has(out, "> for i=1,2 do\n>> print(i)\n>> end\n1\n2\n> ")
  end)

  it("keeps running after an error", function()
    local out = repl { "error('boom')", "local = 1", "print('still here')", "^D" }
    has(out, "ddplua: stdin:1: boom")  -- error() names the line, as in lua.c
    has(out, "ddplua: stdin:1:")
    has(out, "\nstill here\n")
    has(out, "EXIT 0")
  end)

  it("names stdin:LINE for errors of ops called at the prompt", function()
    -- an expression line is evaluated as a return: its call must not be a
    -- tail call, which would leave no frame of the line for the error
    local out = repl { "ddp.ones(2):view(5)", "x = ddp.ones(2) + ddp.ones(3)", "ddp.ones(2):add(ddp.ones(3)), 1",
                       "1 + 1 -- a comment", "ddp.ones(2):max(0)", "^D" }
    has(out, "ddplua: stdin:1: view: shape [5] is invalid")
    local _, n = out:gsub("ddplua: stdin:1: add: shapes %[2%] and %[3%]", "")
    assert.equal(2, n, out)
    assert.falsy(out:find("ddplua: /", 1, true), out)
    has(out, "> 1 + 1 -- a comment\n2\n")
    has(out, "\ntensor(1.)\ttensor(0)\n")  -- both values of max(dim)
  end)

  it("has ddp loaded", function()
    local out = repl { "type(ddp)", "^D" }
    has(out, "ddp is loaded;")
    has(out, "> type(ddp)\ntable\n")
  end)

  it("warns and keeps working when ddp cannot be loaded", function()
    -- a copy of the program with no Lua dirs next to it
    local dir = tempname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. q(dir) .. " && cp " .. q(ddplua) .. " "
                      .. q(root .. "/build/libddplua.so") .. " " .. q(dir)))
    local out = repl({ "type(ddp)", "1+1", "^D" }, dir .. "/ddplua")
    has(out, "ddplua: warning: cannot load ddp: module 'ddp' not found")
    assert.falsy(out:find("ddp is loaded", 1, true), out)
    has(out, "> type(ddp)\nnil\n")
    has(out, "> 1+1\n2\n")
    assert.truthy(out:match("\nEXIT 0\n$"), out)
  end)

  it("exits 0 on Ctrl-D", function()
    local out = repl { "x = 1", "^D" }
    assert.truthy(out:match("\nEXIT 0\n$"), out)
  end)

  it("interrupts running code on Ctrl-C and returns to the prompt", function()
    local out = repl {
      "while true do end", "@sleep 0.5", "^C",
      "function spin() local n = 0 while true do n = n + 1 end end",
      "spin()", "@sleep 0.5", "^C",
      "print('alive')", "^D",
    }
    local _, count = out:gsub("interrupted!", "")
    assert.equals(2, count, out)
    has(out, "\nalive\n")
    assert.truthy(out:match("\nEXIT 0\n$"), out)
  end)

  it("clears the line on Ctrl-C at the prompt", function()
    local out = repl { "@type 1+", "@sleep 0.3", "^C", "2+3",
                       "for i = 1, 3 do", "@sleep 0.3", "^C", "print('fresh')", "^D" }
    has(out, "\n5\n")
    has(out, "\nfresh\n")
    assert.falsy(out:find("ddplua:", 1, true), out)
    assert.truthy(out:match("\nEXIT 0\n$"), out)
  end)

  it("keeps a local typed at the prompt for the next lines", function()
    local out = repl { "local a, b = 2, 3", "a * b", "local function sq(x) return x * x end", "sq(a)",
                       "do local hidden = 1 end", "hidden", "^D" }
    has(out, "> a * b\n6\n")
    has(out, "> sq(a)\n4\n")
    has(out, "> hidden\nnil\n")  -- a block's local stays in its block
  end)

  it("prints tables nested and depth-limited, and tensors as PyTorch does", function()
    local out = repl { "{1, 'two', {x = 1, y = {z = {w = {1}}}}, name = 'n'}",
                       "x = ddp.ones(2):requires_grad_()", "x", "x * 2", "(x * 2):sum()", "^D" }
    has(out, '\n{1, "two", {x = 1, y = {z = {w = {...}}}}, name = "n"}\n')
    has(out, "> x\ntensor([1., 1.], requires_grad=True)\n")
    has(out, "\ntensor([2., 2.], grad_fn=<MulBackward0>)\n")
    has(out, "\ntensor(4., grad_fn=<SumBackward0>)\n")
  end)

  it("names stdin:LINE in errors, also of a ddp op", function()
    local out = repl { "for i = 1, 2 do", "if i == 2 then error('second') end", "end",
                       "ddp.ones(2) + ddp.ones(3)", "^D" }
    has(out, "ddplua: stdin:2: second")
    assert.truthy(out:find("ddplua: stdin:1: [^\n]*shape", 1) or out:find("ddplua: stdin:1: [^\n]*broadcast", 1), out)
  end)

  it("completes globals, fields and methods with Tab", function()
    local out = repl { "@type string.for\t", "@sleep 0.3", "", "t = ddp.ones(1)", "@type t:add_\t", "@sleep 0.3",
                       "(1)", "@type ddp.nn.Line\t", "@sleep 0.3", "", "^D" }
    has(out, "string.format\nfunction: builtin")
    has(out, "t:add_(1)\ntensor([2.])")
    has(out, "ddp.nn.Linear\n")
  end)

  it("keeps a history file", function()
    local _, home = repl { "1+1", "^D" }
    local f = io.open(home .. "/.ddplua_history")
    assert.truthy(f, "no history file")
    local text = f:read("*a")
    f:close()
    has(text, "1+1")
  end)
end)
