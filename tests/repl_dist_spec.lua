-- The prompt over every rank of a job (`ddplua --nproc N`, `-i` after a
-- script, ddp.breakpoint) driven through a pseudo-terminal, and a job's
-- script from stdin or -e.  Every run is a real job bounded by a timeout.
local shell = require "helpers.shell"
local jobs = require "helpers.jobs"
local prompt = require "helpers.prompt"
local q = shell.q
local has, hasnt = prompt.has, prompt.hasnt

describe("a job's script from stdin and -e", function()
  after_each(jobs.no_strays)
  teardown(shell.cleanup)

  local function piped(text, args)
    local input = shell.tempfile(text)
    local out, err = shell.tempname(), shell.tempname()
    local rc = shell.sh(jobs.CLEAN .. "timeout 60 " .. q(shell.ddplua) .. " " .. args .. " <" .. q(input)
      .. " >" .. q(out) .. " 2>" .. q(err) .. "; echo $?")
    return shell.slurp(out), shell.slurp(err), tonumber(rc:match("(%d+)%s*$"))
  end

  it("runs piped stdin on every rank, with '-' or without", function()
    local code = 'print("rank " .. os.getenv("RANK") .. " of " .. os.getenv("WORLD_SIZE"))\n'
    for _, args in ipairs { "--nproc 2 -", "--nproc 2" } do
      local out, err, rc = piped(code, args)
      assert.equals(0, rc, err)
      assert.truthy(out:find("[0] rank 0 of 2\n", 1, true), out)
      assert.truthy(out:find("[1] rank 1 of 2\n", 1, true), out)
    end
  end)

  it("names stdin in an error, and fails the job", function()
    local _, err, rc = piped('local x = 1\nerror("rank " .. os.getenv("RANK") .. " broke")\n', "--nproc 2 -")
    assert.equals(1, rc, err)
    assert.truthy(err:find("stdin:2: rank %d broke"), err)
  end)

  it("runs -e chunks on every rank", function()
    local out, err, rc = jobs.run([[--nproc 2 -e 'print("e on " .. os.getenv("RANK"))']])
    assert.equals(0, rc, err)
    assert.truthy(out:find("[0] e on 0", 1, true), out)
    assert.truthy(out:find("[1] e on 1", 1, true), out)
  end)
end)

if not prompt.available() then
  pending("no " .. prompt.python .. " here: tests/helpers/pty.py drives the prompt")
  return
end

describe("the prompt over ranks", function()
  after_each(jobs.no_strays)
  teardown(shell.cleanup)

  it("runs each chunk on every rank: collectives work, equal outputs show once", function()
    local out = prompt.run({
      "ddp.init()",
      "x = ddp.ones(2) * (ddp.rank() + 1)",
      "x",
      "ddp.all_reduce(x)",
      "x",
      "local y = ddp.rank() * 10",
      "y + 1",
      "for i = 1, 2 do",
      "print('line', i)",
      "end",
      "^D",
    }, "--nproc 2")
    has(out, "one prompt for ranks 0-1")
    has(out, "[0-1]> x\n[0] tensor([1., 1.])\n[1] tensor([2., 2.])\n")
    has(out, "[0-1]> ddp.all_reduce(x)\n[0-1] tensor([3., 3.])\n")
    has(out, "[0-1]> x\n[0-1] tensor([3., 3.])\n")
    -- a local typed at the prompt is there on the next line
    has(out, "[0-1]> y + 1\n[0] 1\n[1] 11\n")
    -- an incomplete chunk goes on after >>, and what it prints comes grouped
    has(out, "[0-1]> for i = 1, 2 do\n>> print('line', i)\n>> end\n[0-1] line\t1\n[0-1] line\t2\n")
    assert.truthy(out:match("EXIT 0%s*$"), out)
  end)

  it("shows a rank's error and goes on; runs chunks on chosen ranks", function()
    local out = prompt.run({
      "if ddp.rank() == 1 then error('only rank 1 fails') end",
      "@1 print('just one')",
      "@0,1 ddp.rank()",
      "@7 print('no')",
      "print('still here')",
      "^D",
    }, "--nproc 2")
    has(out, "[1] stdin:1: only rank 1 fails\n")
    hasnt(out, "[0] stdin:1: only rank 1 fails")
    has(out, "@1 print('just one')\n[1] just one\n[0-1]> ")
    has(out, "@0,1 ddp.rank()\n[0] 0\n[1] 1\n")
    has(out, "@7-7: no such rank here (this node has ranks 0 to 1)")
    has(out, "[0-1] still here")
    assert.truthy(out:match("EXIT 0%s*$"), out)
  end)

  -- A collective typed for some ranks used to wait for the others until
  -- its timeout (600 s) and leave the group unusable; the ranks it runs on
  -- now refuse it at once, naming why, and the group goes on.
  it("refuses a collective typed for some ranks at once; the group stays usable", function()
    local out = prompt.run({
      "ddp.init()",
      "x = ddp.ones(2)",
      "@0 ddp.all_reduce(x)",
      "@1 ddp.barrier()",
      "@1 ddp.all_gather_object(1)",
      "@0 m = ddp.DDP(ddp.nn.Linear(2, 2))",
      "ddp.all_reduce(x)",
      "@0,1 ddp.barrier(); print('all')",
      "^D",
    }, "--nproc 2")
    has(out, "[0] stdin:1: ddp.all_reduce: this chunk runs on rank 0 of 2 (@0), and a collective "
          .. "waits for every rank; type it without @ to run it on all of them")
    has(out, "[1] stdin:1: ddp.barrier: this chunk runs on rank 1 of 2 (@1)")
    has(out, "[1] stdin:1: ddp.all_gather_object: this chunk runs on rank 1 of 2 (@1)")
    has(out, "[0] stdin:1: ddp.DDP: this chunk runs on rank 0 of 2 (@0)")
    has(out, "[0-1]> ddp.all_reduce(x)\n[0-1] tensor([2., 2.])\n")
    has(out, "[0-1] all")
    assert.truthy(out:match("EXIT 0%s*$"), out)
  end)

  -- The launcher passes on each Ctrl-C and says a third kills a rank stuck
  -- in a C call; the second used to kill it already (SIGINT's default
  -- action).  A collective every rank was sent but one skipped times out,
  -- and ddp.shutdown(); ddp.init() makes the group anew in place.
  it("a rank stuck in a collective lives through a second Ctrl-C; shutdown and init recover", function()
    local out = prompt.run({ "ddp.init({timeout = 4})", "x = ddp.ones(2)",
                             "if ddp.rank() == 0 then ddp.all_reduce(x) end",
                             "@sleep 1", "^C", "@sleep 0.5", "^C",
                             "print('after two')", "ddp.shutdown(); ddp.init()", "ddp.all_reduce(x)", "^D" },
                           "--nproc 2", { timeout = 60 })
    has(out, "a third Ctrl-C kills the ranks still running")
    -- the wait ends at the timeout (4 s), and the Ctrl-C hook stops the chunk after it
    has(out, "[0] ")
    has(out, "interrupted!")
    has(out, "[0-1] after two")
    has(out, "[0-1]> ddp.all_reduce(x)\n[0-1] tensor([2., 2.])\n")
    hasnt(out, "exited (")
    assert.truthy(out:match("EXIT 0%s*$"), out)
  end)

  -- A result past what a control frame carries (1 GiB; lowered here) used
  -- to kill its rank ("garbled control frame", then SIGPIPE); it is
  -- refused by name, and the rank and its prompt go on.
  it("refuses a result too big to carry, by name, and goes on", function()
    local out = prompt.run({ "@1 string.rep('x', 5000)", "@1 print('next')", "^D" }, "--nproc 2",
                           { env = { DDPLUA_PROMPT_REPLY_MAX = "1000" } })
    has(out, "[1] the result is 4.9 KiB of text, more than the prompt carries (1000 bytes); show a part of it")
    has(out, "[1] next")
    hasnt(out, "garbled")
    assert.truthy(out:match("EXIT 0%s*$"), out)
  end)

  -- A rank that writes a frame's header and never its payload used to hang
  -- the prompt until the third Ctrl-C; the wait for the rest is bounded
  -- (10 s; 1 s here), the rank's prompt turns off, the others go on.
  it("bounds the wait for a frame a rank began and never finished", function()
    -- the control pipe's write end: write-only and close-on-exec (link_open
    -- marks it), unlike anything a test harness lets the job inherit
    local stall = table.concat({
      "local ffi = require('ffi');",
      "pcall(ffi.cdef, 'int fcntl(int, int, ...); long write(int, const void *, unsigned long);');",
      "for fd = 3, 255 do",
      "  local fl, fdf = ffi.C.fcntl(fd, 3), ffi.C.fcntl(fd, 1)",  -- F_GETFL, F_GETFD
      "  if fl >= 0 and fl % 4 == 1 and fdf % 2 == 1 then ffi.C.write(fd, 'ok 99 100\\nabc', 13) end",
      "end;",
      "os.execute('sleep 3')" }, " ")
    local out = prompt.run({ "@1 " .. stall, "@sleep 0.5", "print('others')", "^D" }, "--nproc 2",
                           { env = { DDPLUA_CTL_STALL_S = "1" } })
    has(out, "rank 1: it sent part of a control frame and nothing more for 1 s; its prompt is off")
    has(out, "[1] this rank's prompt is off: it sent part of a control frame")
    has(out, "rank 1's prompt is off (its control channel failed); the chunk runs without it")
    has(out, "[0] others")
    hasnt(out, "exited (")
  end)

  it("interrupts every rank with Ctrl-C, and the session goes on", function()
    local out = prompt.run({ "while true do end", "@sleep 1", "^C", "print('after')", "^D" }, "--nproc 2")
    has(out, "[0-1] stdin:1: interrupted!")
    has(out, "[0-1] after")
    assert.truthy(out:match("EXIT 0%s*$"), out)
  end)

  it("names a rank that dies, and goes on with the others", function()
    local out = prompt.run({ "@1 os.exit(3)", "print('left')", "@1 print(1)", "^D" }, "--nproc 2")
    has(out, "ddplua: rank 1 exited (exit code 3); the prompt goes on without it")
    has(out, "[0]> print('left')\n[0] left\n")
    has(out, "ddplua: rank 1 has exited")
    assert.truthy(out:match("EXIT 0%s*$"), out)
  end)

  it("trains a DDP model typed at the prompt: the gradients agree", function()
    local out = prompt.run({
      "ddp.init(); ddp.manual_seed(0)",
      "model = ddp.DDP(ddp.nn.Linear(4, 2))",
      "loss = model(ddp.randn(8, 4) * (ddp.rank() + 1)):pow(2):mean()",
      "loss:backward()",
      "model.module.weight.grad:sum():item() == model.module.weight.grad:sum():item()",
      "ddp.all_gather_object(model.module.weight.grad:sum():item())",
      "^D",
    }, "--nproc 2")
    -- one line for both ranks: every rank holds the same reduced gradient
    local g = out:match("%[0%-1%] {(%S+), %S+}\n")
    assert.truthy(g, out)
    assert.truthy(out:find("[0-1] {" .. g .. ", " .. g .. "}", 1, true), out)
  end)

  it("completes names with Tab from the ranks' state", function()
    local out = prompt.run({ "@type ddp.zer\t", "@sleep 0.5", "", "v = ddp.ones(1)", "@type v:add_\t", "@sleep 0.5", "(2)", "^D" },
                           "--nproc 2")
    has(out, "ddp.zero")
    has(out, "[0-1] tensor([3.])")
  end)

  it("opens after a script with -i, which sees the script's globals", function()
    local s = jobs.script('answer = 40 + tonumber(os.getenv("RANK"))\n', "repl")
    local out = prompt.run({ "answer", "^D" }, "--nproc 2 -i " .. q(s))
    has(out, "[0-1]> answer\n[0] 40\n[1] 41\n")
  end)
end)

describe("ddp.breakpoint", function()
  after_each(jobs.no_strays)
  teardown(shell.cleanup)

  local BODY = [[
ddp.init()
local step, loss = 7, ddp.tensor({0.5})
local function f()
  local inner = step * 2
  ddp.breakpoint(1)
  return inner
end
local inner = f()
print(("rank %d: step %d inner %d"):format(ddp.rank(), step, inner))
ddp.barrier()
]]

  it("opens the prompt on that rank with the frame's locals; Ctrl-D continues every rank", function()
    local s = jobs.script(BODY, "bp")
    local out = prompt.run({ "inner", "step", "inner + step", "inner = 99", "^D" }, "--nproc 2 " .. q(s))
    has(out, "rank 1 stopped at ddp.breakpoint() in ")
    has(out, "the other ranks wait")
    has(out, "[1]> inner\n[1] 14\n")
    has(out, "[1]> step\n[1] 7\n")          -- an upvalue of the frame
    has(out, "[1]> inner + step\n[1] 21\n")
    -- the assignment went back into the frame; rank 0 waited and went on
    has(out, "[1] rank 1: step 7 inner 99")
    has(out, "[0] rank 0: step 7 inner 14")
    -- rank 0 waited for the prompt to end
    assert.truthy(out:find("[0] rank 0:", 1, true) > out:find("^D", 1, true), out)
    assert.truthy(out:match("EXIT 0%s*$"), out)
  end)

  it("refuses a collective typed at the breakpoint, where the other ranks wait", function()
    local s = jobs.script(BODY, "bp_coll")
    local out = prompt.run({ "ddp.all_reduce(ddp.ones(1))", "inner", "^D" }, "--nproc 2 " .. q(s))
    has(out, "[1] stdin:1: ddp.all_reduce: at ddp.breakpoint() chunks run on rank 1 alone while the "
          .. "other ranks wait in it, so a collective here would never complete; Ctrl-D lets every rank go on")
    has(out, "[1]> inner\n[1] 14\n")
    -- the job's own collectives after it still run (ddp.barrier at its end)
    has(out, "[0] rank 0: step 7 inner 14")
    assert.truthy(out:match("EXIT 0%s*$"), out)
  end)

  it("opens the terminal's prompt in a single process", function()
    local s = jobs.script("local ddp = require 'ddp'\nlocal n = 3\nddp.breakpoint()\nprint('n is ' .. n)\n", "bp1")
    local out = prompt.run({ "n * 2", "n = 5", "^D" }, q(s))
    has(out, "breakpoint at ")
    has(out, "> n * 2\n6\n")
    has(out, "n is 5")
    assert.truthy(out:match("EXIT 0%s*$"), out)
  end)

  -- `timeout` without --foreground puts ddplua in a process group of its
  -- own: reading the terminal from there stops the process (SIGTTIN), so a
  -- prompt used to hang with keys ignored
  local function backgrounded(args)
    local bin = shell.ddplua:sub(1, 1) == "/" and shell.ddplua or shell.root .. "/" .. shell.ddplua
    return prompt.run({ "@sleep 1" }, "-c " .. q("timeout 60 " .. q(bin) .. " " .. args
                                             .. "; echo rc $?"), { program = "bash" })
  end

  it("says so and goes on when the launcher is not the terminal's foreground process", function()
    local s = jobs.script(BODY, "bp_bg")
    local out = backgrounded("--nproc 2 " .. q(s))
    has(out, "rank 1 stopped at ddp.breakpoint() in ")
    has(out, "but ddplua is not the terminal's foreground process (run under `timeout` without --foreground")
    has(out, "`timeout --foreground` or `fg` keeps the terminal; the ranks go on")
    has(out, "[1] rank 1: step 7 inner 14")
    has(out, "[0] rank 0: step 7 inner 14")
    has(out, "rc 0")
    local one = jobs.script("local ddp = require 'ddp'\nddp.breakpoint()\nprint('went on')\n", "bp_bg1")
    out = backgrounded(q(one))
    has(out, "breakpoint at " .. one .. ":")
    has(out, " passed: ddplua is not the terminal's foreground process")
    has(out, "went on")
    has(out, "rc 0")
    out = backgrounded("--nproc 2")
    has(out, "the prompt over ranks does not open: ddplua is not the terminal's foreground process")
    has(out, "rc 0")
  end)

  it("refuses a rank outside the job", function()
    local out, err, rc = jobs.run("-e 'require(\"ddp\").breakpoint(3)'")
    assert.equals(1, rc, out)
    assert.truthy(err:find("breakpoint: rank 3 is not in this job (ranks 0 to 0)", 1, true), err)
  end)
end)
