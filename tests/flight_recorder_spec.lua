-- tests/flight_recorder_spec.lua: the collective flight recorder through
-- real jobs -- a rank that calls another collective, a rank stuck in Lua,
-- SIGUSR2 while the job goes on, --dump-on-exit and DDP's bucket names,
-- ranks started without the launcher, and `ddplua analyze` on the dumps.
local jobs = require "helpers.jobs"
local shell = require "helpers.shell"
local q, sh, slurp = jobs.q, jobs.sh, jobs.slurp

-- the line of a worker script's body line k (the prelude comes first)
local PRE = select(2, jobs.PRELUDE:gsub("\n", ""))
local function line(k) return PRE + k end

local function has(s, text) assert.truthy(s:find(text, 1, true), "no «" .. text .. "» in:\n" .. s) end

-- the launcher's flight recorder lines, without the ranks' own output
local function launcher_lines(err)
  local t = {}
  for l in err:gmatch("[^\n]+") do
    if l:find("^ddplua: ") then t[#t + 1] = l end
  end
  return table.concat(t, "\n")
end

describe("the flight recorder", function()
  after_each(jobs.no_strays)
  teardown(jobs.cleanup)

  it("names both call sites when one rank of 4 calls another collective at step 50, in one message", function()
    local s = jobs.script([[
ddp.init()
local x = ddp.ones(10)
for step = 1, 100 do
  if step == 50 and ddp.rank() == 3 then
    ddp.broadcast(x, 0)
  else
    ddp.all_reduce(x)
  end
end
]], "desync")
    local logs = shell.tempdir()
    local t0 = os.time()
    local _, err, rc = jobs.run("--nproc 4 --log-dir " .. q(logs) .. " " .. q(s), "DDP_TIMEOUT=30", 60)
    assert.equals(1, rc, err)
    assert.is_true(os.time() - t0 < 30, "diagnosed after the timeout:\n" .. err)
    local say = launcher_lines(err)
    local verdict = table.concat({
      "ddplua:   collective #50 differs between ranks (the ranks must make the same calls in the same order):",
      ("ddplua:   ranks 0-2 called all_reduce(sum) #50 float32 x10 (%s:%d)"):format(s, line(7)),
      ("ddplua:   rank 3 called broadcast(src 0) #50 float32 x10 (%s:%d)"):format(s, line(5)),
    }, "\n")
    has(say, verdict)
    has(say, "flight recorder (rank ")
    has(say, "4 rings written to " .. logs .. "/flight (ddplua analyze " .. logs .. "/flight)")
    for r = 0, 3 do assert.truthy(shell.exists(("%s/flight/rank%d.bin"):format(logs, r))) end
    local report = slurp(logs .. "/flight/report.txt")
    has(report, ("ranks 0-2 called all_reduce(sum) #50 float32 x10 (%s:%d)"):format(s, line(7)))
    -- the dumps read again later (copied off a cluster): the same verdict
    local out = sh(q(jobs.ddplua) .. " analyze " .. q(logs) .. " 2>&1")
    has(out, "4 rings in " .. logs .. "/flight:")
    has(out, verdict:gsub("ddplua: ", ""))
  end)

  it("names a rank stuck in a Lua loop, with its Lua stack, when the others time out", function()
    local s = jobs.script([[
ddp.init()
local x = ddp.ones(10)
local function wait_for_file(p)
  while true do
    local f = io.open(p) if f then f:close() return end
  end
end
for step = 1, 20 do
  if step == 10 and ddp.rank() == 1 then wait_for_file("/nonexistent/ready") end
  ddp.all_reduce(x)
end
]], "stuck")
    local logs = shell.tempdir()
    local _, err, rc = jobs.run("--nproc 2 --log-dir " .. q(logs) .. " " .. q(s), "DDP_TIMEOUT=4", 60)
    assert.equals(1, rc, err)
    local say = launcher_lines(err)
    has(say, ("ddplua:   rank 0 gave up in all_reduce(sum) #10 float32 x10 (%s:%d) after "):format(s, line(10)))
    has(say, ("ddplua:   rank 1 never reached #10: its last was all_reduce(sum) #9 float32 x10 (%s:%d), finished ")
      :format(s, line(10)))
    has(say, "ddplua:   rank 1's Lua stack:\n")
    has(say, ("%s:%d: in function 'wait_for_file'"):format(s, line(5)))
    has(say, ("%s:%d: in main chunk"):format(s, line(9)))
  end)

  it("says honestly that a loop the JIT compiled gives no Lua stack", function()
    local s = jobs.script([[
ddp.init()
local x = ddp.ones(10)
ddp.all_reduce(x)
if ddp.rank() == 1 then
  local n = 0
  while true do n = n + 1 end
end
ddp.all_reduce(x)
]], "spin")
    local logs = shell.tempdir()
    local _, err, rc = jobs.run("--nproc 2 --log-dir " .. q(logs) .. " " .. q(s), "DDP_TIMEOUT=4", 60)
    assert.equals(1, rc, err)
    local say = launcher_lines(err)
    has(say, "rank 1 never reached #2: its last was all_reduce(sum) #1")
    has(say, "rank 1 gave no Lua stack within a second: it is blocked in a C call, or runs a loop the JIT compiled")
  end)

  it("dumps every ring on SIGUSR2 to the launcher while the job goes on", function()
    local logs, ready = shell.tempdir(), shell.tempname()
    os.remove(ready)
    local s = jobs.script(([[
ddp.init()
local x = ddp.ones(10)
local flag = ddp.zeros(1)
local n = 0
repeat
  for _ = 1, 50 do ddp.all_reduce(x); n = n + 1 end
  if ddp.rank() == 0 and n == 50 then io.open(%q, "w"):close() end
  local f = io.open(%q .. ".go")
  flag:fill_(f and 1 or 0)
  if f then f:close() end
  ddp.all_reduce(flag, "max")
until flag:item() == 1
print("CALLS " .. n)
]]):format(ready, ready), "usr2")
    local out, err, code = shell.tempname(), shell.tempname(), shell.tempname()
    local pid = sh(jobs.CLEAN .. "timeout 60 " .. q(jobs.ddplua) .. " --nproc 2 --log-dir " .. q(logs) .. " " .. q(s)
      .. " </dev/null >" .. q(out) .. " 2>" .. q(err) .. " & echo $!"):match("%d+")
    for _ = 1, 300 do if shell.exists(ready) then break end os.execute("sleep 0.05") end
    assert.truthy(shell.exists(ready), slurp(err))
    local launcher = sh("pgrep -P " .. pid):match("%d+")
    os.execute("kill -USR2 " .. launcher)
    for _ = 1, 100 do if shell.exists(logs .. "/flight/report.txt") then break end os.execute("sleep 0.05") end
    assert.truthy(shell.exists(logs .. "/flight/report.txt"), slurp(err))
    os.execute("sleep 0.3")
    assert.truthy(shell.exists(logs .. "/flight/rank0.bin") and shell.exists(logs .. "/flight/rank1.bin"))
    -- the job is still running: it ends only when told to, and ends well
    assert.equals("", sh("kill -0 " .. launcher .. " 2>&1"))
    io.open(ready .. ".go", "w"):close()
    shell.track(ready .. ".go")
    sh("while kill -0 " .. pid .. " 2>/dev/null; do sleep 0.05; done; echo")
    local e = slurp(err)
    has(slurp(out), "CALLS ")
    has(e, "ddplua: flight recorder (SIGUSR2; the job goes on): what every rank did last; 2 rings written to "
      .. logs .. "/flight")
    has(e, "every rank is making progress")
    assert.falsy(e:find("failed", 1, true), e)
    local analyzed = sh(q(jobs.ddplua) .. " analyze " .. q(logs) .. " --entries 1 2>&1")
    has(analyzed, ("all_reduce(sum) #"))
    assert.truthy(analyzed:find(("(%s:%d)  "):format(s, line(6)), 1, true)
      or analyzed:find(("(%s:%d)  "):format(s, line(11)), 1, true), analyzed)
    os.remove(code)
  end)

  it("writes the rings at the end with --dump-on-exit, naming DDP's buckets by parameter", function()
    local s = jobs.script([[
ddp.init()
local nn = ddp.nn
local model = ddp.DDP(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)))
local opt = ddp.optim.SGD(model:parameters(), { lr = 0.1 })
for step = 1, 3 do
  local loss = model(ddp.randn(3, 4)):sum()
  opt:zero_grad()
  loss:backward()
  opt:step()
end
]], "ddp")
    local logs = shell.tempdir()
    local _, err, rc = jobs.run("--nproc 2 --dump-on-exit --log-dir " .. q(logs) .. " " .. q(s), "", 60)
    assert.equals(0, rc, err)
    has(err, "ddplua: flight recorder (--dump-on-exit): what every rank did last; 2 rings written to " .. logs)
    has(err, "no collective diverged: every rank finished ")
    local out = sh(q(jobs.ddplua) .. " analyze " .. q(logs .. "/flight") .. " --entries 4 2>&1")
    has(out, ("all_reduce(avg) #"))
    has(out, ("float32 x58 (%s:%d; DDP bucket 1 of 1: 2.weight .. 0.bias (4))  done, "):format(s, line(8)))
    has(out, "rank 1 (pid ")
  end)

  it("keeps the last DDP_FLIGHT_ENTRIES calls and refuses a bad value", function()
    local s = jobs.script([[
ddp.init()
local x = ddp.ones(3)
for _ = 1, 100 do ddp.all_reduce(x) end
]], "wrap")
    local logs = shell.tempdir()
    local _, err, rc = jobs.run("--nproc 2 --dump-on-exit --log-dir " .. q(logs) .. " " .. q(s), "DDP_FLIGHT_ENTRIES=16", 60)
    assert.equals(0, rc, err)
    local out = sh(q(jobs.ddplua) .. " analyze " .. q(logs) .. " --entries 100 2>&1")
    has(out, "every rank finished all_reduce(sum) #100 float32 x3")
    has(out, "100 collectives recorded, the last 16:")
    assert.truthy(out:find("#85 ", 1, true) and out:find("#100 ", 1, true) and not out:find("#84 ", 1, true), out)
    -- 0: off (for measuring what it costs), and the launcher says so
    local off = shell.tempdir()
    _, err, rc = jobs.run("--nproc 2 --dump-on-exit --log-dir " .. q(off) .. " " .. q(s), "DDP_FLIGHT_ENTRIES=0", 60)
    assert.equals(0, rc, err)
    has(err, "flight recorder (--dump-on-exit): it is off in this job (DDP_FLIGHT_ENTRIES=0)")
    assert.falsy(shell.exists(off .. "/flight/rank0.bin"))
    _, err, rc = jobs.run("--nproc 2 " .. q(s), "DDP_FLIGHT_ENTRIES=lots", 60)
    assert.equals(1, rc, err)
    has(err, 'ddp.init: DDP_FLIGHT_ENTRIES="lots" is not a whole number from 16 to 1048576, or 0 for off')
  end)

  it("lets ranks started without the launcher dump their own rings, which analyze puts together", function()
    local s = jobs.script([[
ddp.init()
local x = ddp.ones(4)
for step = 1, 5 do
  if step == 3 and ddp.rank() == 1 then ddp.broadcast(x, 1) else ddp.all_reduce(x) end
end
]], "nolaunch")
    local dir = shell.tempdir()
    local base = "DDP_TIMEOUT=20 MASTER_ADDR=127.0.0.1 MASTER_PORT=" .. jobs.free_port() .. " WORLD_SIZE=2 "
    local res = jobs.ranks({ base .. "RANK=0", base .. "RANK=1" }, s, 60, dir)
    local logs
    for r, x in ipairs(res) do
      assert.equals(1, x.rc, x.err)
      local at = x.err:match("this rank's flight recorder ring is in (ddplua%-logs/%S+/flight)/rank" .. (r - 1) .. "%.bin")
      assert.truthy(at, x.err)
      logs = dir .. "/" .. at
    end
    local out = sh(q(jobs.ddplua) .. " analyze " .. q(logs) .. " 2>&1")
    has(out, "collective #3 differs between ranks")
    has(out, ("rank 0 called all_reduce(sum) #3 float32 x4 (%s:%d)"):format(s, line(4)))
    has(out, ("rank 1 called broadcast(src 1) #3 float32 x4 (%s:%d)"):format(s, line(4)))
  end)

  it("tells what is wrong with what it is asked to analyze", function()
    local dir = shell.tempdir()
    local function analyze(args)
      local o = sh(q(jobs.ddplua) .. " analyze " .. args .. " 2>&1; echo \"rc=$?\"")
      return o, tonumber(o:match("rc=(%d+)"))
    end
    local out, rc = analyze(q(dir))
    assert.equals(1, rc)
    has(out, "no flight recorder dumps (rank<N>.bin) in " .. dir)
    shell.writefile(dir .. "/rank0.bin", "not a ring")
    out, rc = analyze(q(dir))
    assert.equals(1, rc)
    has(out, dir .. "/rank0.bin: not a flight recorder ring")
    out, rc = analyze(q(dir .. "/none"))
    assert.equals(1, rc)
    has(out, "none: No such file or directory")
    out, rc = analyze(q(dir) .. " --entries many")
    assert.equals(2, rc)
    has(out, "--entries many: not a whole number")
  end)
end)
