-- Pre-emption that saves, as real jobs of tests/scripts/preempt_train.lua
-- (a 2-rank training run that asks ddp.should_stop() after every step and
-- saves, then exits 0, when it says true): a "save and stop" signal to the
-- launcher, to one worker, or to the launcher and every worker twice (as
-- SLURM's --signal and the launcher's own passing-on give it), SIGTERM as
-- well as SIGUSR1; exact resume from ddp.latest_checkpoint; a script that
-- never asks still dies of SIGTERM; a worker that ignores the request is
-- killed after --save-grace; bad --signals; and one process without a
-- launcher.  Also ddp.latest_checkpoint's rule and ddp.requeue.
local shell = require "helpers.shell"
local jobs = require "helpers.jobs"
local clock = require("ddp.core").clock
local q, sh, slurp, tempname, tempdir = shell.q, shell.sh, shell.slurp, shell.tempname, shell.tempdir

local SCRIPT = shell.root .. "/tests/scripts/preempt_train.lua"
local CLEAN = jobs.CLEAN .. "-u SLURM_JOB_ID "

local dirs = {}  -- this test's checkpoint directories: its processes carry one in their arguments

-- Starts `ddplua <args>` in the background (no `timeout` between: it would
-- take the signals meant for the launcher); returns a handle with its pid.
local function start(args)
  local res = tempname()
  sh("(" .. CLEAN .. q(jobs.ddplua) .. " " .. args .. " </dev/null >" .. q(res .. ".out") .. " 2>" .. q(res .. ".err")
    .. " & echo $! >" .. q(res .. ".pid") .. "; wait $!; echo $? >" .. q(res .. ".rc") .. ") >/dev/null 2>&1 &")
  for _ = 1, 100 do
    local p = slurp(res .. ".pid")
    if p and p:match("%d+\n") then return { res = res, pid = tonumber(p:match("%d+")) } end
    os.execute("sleep 0.05")
  end
  error("the job did not start")
end

-- Waits (at most secs) for the job to end: its exit code, stdout, stderr.
local function finish(job, secs)
  local t0 = clock()
  while clock() - t0 < (secs or 30) do
    local rc = slurp(job.res .. ".rc")
    if rc and rc:match("%d+") then
      return tonumber(rc:match("%d+")), slurp(job.res .. ".out") or "", slurp(job.res .. ".err") or ""
    end
    os.execute("sleep 0.05")
  end
  error("the job did not end within " .. (secs or 30) .. " s: " .. (slurp(job.res .. ".err") or ""))
end

-- Waits for pid files pid0..pid<n-1> in dir (the ranks armed and ready).
local function pids(dir, n)
  for _ = 1, 400 do
    local out = {}
    for i = 0, n - 1 do
      local s = slurp(dir .. "/pid" .. i)
      if s and s:match("%d+\n") then out[#out + 1] = tonumber(s:match("%d+")) end
    end
    if #out == n then return out end
    os.execute("sleep 0.05")
  end
  error("the workers did not write their pid files")
end

local function count(s, pat)
  local n = 0
  for _ in s:gmatch(pat) do n = n + 1 end
  return n
end

-- A training job of the script: its checkpoint dir, its pid dir, the handle.
local function train(launch, flags)
  local dir, ready = tempdir(), tempdir()
  dirs[#dirs + 1] = dir
  local job = start(launch .. " " .. q(SCRIPT) .. " --dir " .. q(dir) .. " --ready " .. q(ready) .. " " .. (flags or ""))
  return job, dir, ready
end

-- losses[rank][step] = the printed text (bit for bit), from a job's output.
local function losses(out, into)
  into = into or {}
  for line in out:gmatch("[^\n]+") do
    local r, step, loss = line:match("^%[(%d+)%] step (%d+) epoch %d+ loss (%S+)$")
    if not r then r, step, loss = "0", line:match("^step (%d+) epoch %d+ loss (%S+)$") end
    if step then
      r, step = tonumber(r), tonumber(step)
      into[r] = into[r] or {}
      assert.is_nil(into[r][step], "step " .. step .. " twice on rank " .. r)
      into[r][step] = loss
    end
  end
  return into
end

-- Kills what is left of this test's jobs (and fails the test).
local function no_strays()
  for _, d in ipairs(dirs) do
    local pat = q("[" .. d:sub(1, 1) .. "]" .. d:sub(2))
    local left
    for _ = 1, 30 do
      left = sh("pgrep -f " .. pat .. " || true")
      if left == "" then break end
      os.execute("sleep 0.1")
    end
    if left ~= "" then
      os.execute("pkill -KILL -f " .. pat)
      dirs = {}
      error("stray processes of a job in " .. d .. ": " .. left)
    end
  end
  dirs = {}
  jobs.no_strays()
end

describe("pre-emption #dist", function()
  after_each(no_strays)
  teardown(shell.cleanup)

  local function saved_once(out, err, sig)
    for r = 0, 1 do
      assert.equals(1, count(out, "%[" .. r .. "%] saved step"), out)
      assert.truthy(out:find("[" .. r .. "] saved step 4 after " .. sig .. "\n", 1, true), out)
      assert.truthy(out:find("[" .. r .. "] final line of rank " .. r .. "\n", 1, true), out)
    end
    assert.equals(1, count(err, "got " .. sig .. ": asking every worker to save and stop %(%-%-save%-grace 30 s%)"), err)
    assert.falsy(err:find("SIGKILL", 1, true), err)
  end

  it("saves on every rank at the same step when the launcher alone gets SIGUSR1, and exits 0 at once", function()
    local job, dir, ready = train("--nproc 2", "--wait-at 4")
    pids(ready, 2)
    local t0 = clock()
    os.execute("kill -USR1 " .. job.pid)
    local rc, out, err = finish(job)
    local took = clock() - t0
    assert.equals(0, rc, err .. out)
    assert.is_true(took < 5, ("the launcher took %.1f s to end"):format(took))
    saved_once(out, err, "SIGUSR1")
    assert.truthy(err:find("every worker exited 0 after SIGUSR1", 1, true), err)
    assert.truthy(slurp(dir .. "/step_4.safetensors"), "no checkpoint")
  end)

  it("stops every rank at the same step when one worker alone gets the signal", function()
    -- free-running steps: the ranks learn of rank 1's request through should_stop's all-reduce
    local job, _, ready = train("--nproc 2", "--ready-at 2 --pace 0.05 --steps 200")
    local w = pids(ready, 2)
    os.execute("kill -USR1 " .. w[2])
    local rc, out, err = finish(job)
    assert.equals(0, rc, err .. out)
    local s0 = out:match("%[0%] saved step (%d+) after SIGUSR1")
    local s1 = out:match("%[1%] saved step (%d+) after SIGUSR1")  -- rank 0 was not signalled: it learns which
    assert.truthy(s0, out)
    assert.equals(s0, s1, out)
    assert.equals(tonumber(s0), #losses(out)[0], "rank 0 stepped past the save")
    assert.equals(tonumber(s0), #losses(out)[1], "rank 1 stepped past the save")
  end)

  for _, sig in ipairs { "USR1", "TERM" } do
    it("absorbs SIG" .. sig .. " sent to the launcher and every worker, twice: one save per rank, nobody killed", function()
      local job, _, ready = train("--nproc 2", "--wait-at 4")
      local w = pids(ready, 2)
      local all = job.pid .. " " .. w[1] .. " " .. w[2]
      os.execute("kill -" .. sig .. " " .. all .. "; kill -" .. sig .. " " .. all)
      local rc, out, err = finish(job)
      assert.equals(0, rc, err .. out)
      saved_once(out, err, "SIG" .. sig)
    end)
  end

  it("resumes from ddp.latest_checkpoint with the uninterrupted losses, bit for bit", function()
    local job = train("--nproc 2", "--save-every 4")
    local rc, out, err = finish(job, 60)
    assert.equals(0, rc, err .. out)
    local whole = losses(out)
    assert.equals(20, #whole[0])
    -- stopped by SIGTERM (scancel's) after step 10, with step_4 and step_8 saved before:
    -- step_10 must win (natural order: not "step_8" > "step_10")
    local stopped, dir, ready = train("--nproc 2", "--save-every 4 --wait-at 10")
    pids(ready, 2)
    os.execute("kill -TERM " .. stopped.pid)
    rc, out, err = finish(stopped)
    assert.equals(0, rc, err .. out)
    local again = losses(out)
    assert.equals(10, #again[1])
    local resumed = start("--nproc 2 " .. q(SCRIPT) .. " --dir " .. q(dir) .. " --resume")
    rc, out, err = finish(resumed, 60)
    assert.equals(0, rc, err .. out)
    assert.truthy(out:find("[0] resumed from " .. dir .. "/step_10.safetensors", 1, true), out)
    losses(out, again)
    for r = 0, 1 do
      for step = 1, 20 do
        assert.equals(whole[r][step], again[r][step], ("rank %d step %d"):format(r, step))
      end
    end
  end)

  it("leaves a script that never calls should_stop to die of SIGTERM, as before", function()
    local ready = tempdir()
    local s = jobs.script(([[
local f = io.open(%q .. "/pid" .. ddp.rank(), "w") f:write(ffi.C.getpid(), "\n") f:close()
sleep(30)
]]):format(ready), "never_asks")
    local job = start("--nproc 2 " .. q(s))
    pids(ready, 2)
    local t0 = clock()
    os.execute("kill -TERM " .. job.pid)
    local rc, _, err = finish(job)
    assert.equals(143, rc, err)
    assert.is_true(clock() - t0 < 3, "the launcher waited for workers that had no reason to live")
    assert.truthy(err:find("rank %d %(local rank %d%) ended with signal SIGTERM"), err)
  end)

  it("still stops armed workers at once when another rank fails (SIGTERM marked stop-now)", function()
    local s = jobs.script([[
ddp.init()
ddp.should_stop()
if ddp.rank() == 1 then sleep(0.3) os.exit(3) end
for _ = 1, 300 do sleep(0.1) end  -- a signal cuts one sleep short, not all
]], "peer_fails")
    local t0 = clock()
    local job = start("--nproc 2 --grace 10 " .. q(s))
    local rc, _, err = finish(job)
    assert.equals(3, rc, err)
    assert.is_true(clock() - t0 < 6, ("rank 0 absorbed the stop: %.1f s"):format(clock() - t0))
    assert.truthy(err:find("rank 1 (local rank 1) failed with exit code 3", 1, true), err)
    assert.falsy(err:find("still running", 1, true), err)
  end)

  it("kills a worker that ignores the request after --save-grace, naming it", function()
    local job, _, ready = train("--nproc 2 --save-grace 1", "--wait-at 3 --ignore-rank 1")
    local w = pids(ready, 2)
    local guard = tonumber(sh("pgrep -P " .. job.pid .. " -x ddplua-guard"):match("%d+"))
    assert.truthy(guard, "no guardian")
    local t0 = clock()
    -- SLURM signals every process of the step: the guardian too, which must live on
    os.execute("kill -USR1 " .. job.pid .. " " .. guard)
    os.execute("sleep 0.3")
    local stat = slurp("/proc/" .. guard .. "/stat")
    assert.truthy(stat and not stat:match("^%d+ %b() Z"), "the guardian died of SIGUSR1")
    local rc, out, err = finish(job)
    local took = clock() - t0
    assert.equals(137, rc, err .. out)
    assert.is_true(took >= 1 and took < 5, ("took %.1f s"):format(took))
    assert.truthy(err:find("got SIGUSR1: asking every worker to save and stop (--save-grace 1 s)", 1, true), err)
    assert.truthy(err:find(("rank 1 (local rank 1, pid %d) did not exit within --save-grace 1 s of SIGUSR1: "
                            .. "sending SIGKILL"):format(w[2]), 1, true), err)
    assert.truthy(err:find("after SIGUSR1, rank 1 (local rank 1) ended with signal SIGKILL", 1, true), err)
    assert.truthy(out:find("[0] final line of rank 0", 1, true), out)
    assert.truthy(out:find("[1] ignoring it", 1, true), out)
  end)

  it("refuses bad --signals and --save-grace at once, naming the value", function()
    local started = tempname() .. "_started"
    local s = jobs.script(("io.open(%q, 'w'):close()\n"):format(started), "never_runs")
    local cases = {
      { "--signals USR2", [[--signals "USR2": USR2 cannot mean save and stop: it is reserved for the flight recorder's dump]] },
      { "--signals TERM,INT", [[--signals "TERM,INT": INT cannot mean save and stop: Ctrl-C (SIGINT) keeps its meaning, stop now]] },
      { "--signals KILL", [[--signals "KILL": KILL cannot mean save and stop: it cannot be caught]] },
      { "--signals STOP", [[--signals "STOP": STOP cannot mean save and stop: it cannot be caught]] },
      { "--signals TERM,BOGUS", [[--signals "TERM,BOGUS": unknown signal BOGUS (expected names such as TERM,USR1]] },
      { "--signals ''", [[--signals "": no signal named]] },
      { "--save-grace -1", [[--save-grace expects seconds (0..86400), got '-1']] },
    }
    for _, c in ipairs(cases) do
      local _, err, rc = jobs.run("--nproc 2 " .. c[1] .. " " .. q(s), "", 10)
      assert.equals(1, rc, c[1] .. ": " .. err)
      assert.truthy(err:find(c[2], 1, true), c[1] .. ": " .. err)
      assert.is_nil(slurp(started), c[1] .. " started the workers")
    end
    local _, err, rc = jobs.run("--signals TERM " .. q(s), "", 10)
    assert.equals(1, rc)
    assert.truthy(err:find("launcher options need --nproc N", 1, true), err)
    -- the workers' own arming refuses a bad DDP_PREEMPT_SIGNALS at the script's line
    local out
    out, err, rc = jobs.run("-e 'print(pcall(require(\"ddp\").should_stop))'", "DDP_PREEMPT_SIGNALS=USR2", 10)
    assert.equals(0, rc, err)
    assert.truthy(out:find([[ddp.should_stop: DDP_PREEMPT_SIGNALS "USR2": USR2 cannot mean save and stop]], 1, true), out)
  end)

  it("works without a launcher: kill -USR1 the process and it saves", function()
    local dir, ready = tempdir(), tempdir()
    dirs[#dirs + 1] = dir
    local job = start(q(SCRIPT) .. " --dir " .. q(dir) .. " --ready " .. q(ready) .. " --wait-at 3")
    local w = pids(ready, 1)
    assert.equals(job.pid, w[1])
    os.execute("kill -USR1 " .. job.pid .. "; kill -USR1 " .. job.pid)
    local rc, out, err = finish(job)
    assert.equals(0, rc, err .. out)
    assert.truthy(out:find("saved step 3 after SIGUSR1\nfinal line of rank 0\n", 1, true), out)
    assert.truthy(slurp(dir .. "/step_3.safetensors"), "no checkpoint")
  end)
end)

describe("ddp.latest_checkpoint", function()
  teardown(shell.cleanup)

  it("takes the last whole checkpoint in natural order, skipping temporaries and other files", function()
    local dir = tempdir()
    local out = sh(CLEAN .. q(jobs.ddplua) .. " -e " .. q(([[
local ddp = require "ddp"
local dir = %q
print(ddp.latest_checkpoint(dir))
for _, s in ipairs { 9, 10, 100, 20 } do ddp.save_checkpoint(("%%s/step_%%d.safetensors"):format(dir, s), { step = s }) end
ddp.save({ x = ddp.ones(1) }, dir .. "/step_500.safetensors")  -- tensors only: not a checkpoint
io.open(dir .. "/step_900.safetensors.tmp.4242.0", "w"):close()  -- a save killed midway
local f = io.open(dir .. "/step_1000.log", "w") f:write("a log") f:close()
print(ddp.latest_checkpoint(dir))
print(ddp.latest_checkpoint(dir .. "/", "^step_%%d+%%.safetensors$"))
print(ddp.latest_checkpoint(dir, "^step_%%d%%d%%."))  -- two digits: 10 and 20
print(ddp.latest_checkpoint(dir, "^none"))
print(pcall(ddp.latest_checkpoint, dir .. "/missing"))
print(pcall(ddp.latest_checkpoint, dir .. "/step_9.safetensors"))
print(pcall(ddp.latest_checkpoint, dir, "[x"))
print(pcall(ddp.latest_checkpoint, 3))
]]):format(dir)) .. " 2>&1")
    local l = {}
    for line in out:gmatch("[^\n]*\n") do l[#l + 1] = line:sub(1, -2) end
    assert.equals("nil", l[1], out)
    assert.equals(dir .. "/step_100.safetensors", l[2], out)
    assert.equals(dir .. "/step_100.safetensors", l[3], out)
    assert.equals(dir .. "/step_20.safetensors", l[4], out)
    assert.equals("nil", l[5], out)
    assert.truthy(l[6]:find("latest_checkpoint: " .. dir .. "/missing: no such directory", 1, true), out)
    assert.truthy(l[7]:find("latest_checkpoint: " .. dir .. "/step_9.safetensors: Not a directory", 1, true), out)
    assert.truthy(l[8]:find([[latest_checkpoint: bad pattern "[x": malformed pattern]], 1, true), out)
    assert.truthy(l[9]:find("latest_checkpoint: dir must be a directory's path, got 3", 1, true), out)
  end)
end)

describe("ddp.requeue", function()
  teardown(shell.cleanup)

  local function requeue(env, code)
    return sh(CLEAN .. env .. " " .. q(jobs.ddplua) .. " -e " .. q(code or "print(pcall(require('ddp').requeue))") .. " 2>&1")
  end

  it("runs scontrol requeue $SLURM_JOB_ID on rank 0, and names the command when it fails", function()
    local bin = tempdir()
    shell.writefile(bin .. "/scontrol", "#!/bin/sh\necho \"$*\" >>" .. q(bin .. "/calls")
      .. "\n[ \"$2\" = 7 ] && { echo 'slurm_requeue error: Requested operation is presently disabled'; exit 1; }\nexit 0\n")
    os.execute("chmod +x " .. q(bin .. "/scontrol"))
    local path = "PATH=" .. q(bin .. ":" .. os.getenv("PATH"))
    assert.equals("true\ttrue\n", requeue("SLURM_JOB_ID=42 " .. path))
    assert.equals("true\tfalse\n", requeue("SLURM_JOB_ID=42 RANK=1 WORLD_SIZE=2 " .. path))  -- not rank 0: nothing
    assert.equals("requeue 42\n", slurp(bin .. "/calls"))
    local out = requeue("SLURM_JOB_ID=7 " .. path)
    assert.truthy(out:find("ddp.requeue: `scontrol requeue 7` failed (exit code 1): slurm_requeue error: "
                           .. "Requested operation is presently disabled", 1, true), out)
    out = requeue("SLURM_JOB_ID=42 PATH=/nonexistent")
    assert.truthy(out:find("ddp.requeue: `scontrol requeue 42`: scontrol not found", 1, true), out)
    out = requeue("")
    assert.truthy(out:find("ddp.requeue: not under SLURM (SLURM_JOB_ID is not set)", 1, true), out)
  end)
end)
