-- The launch's preflight (cli/preflight.c): `ddplua doctor [launcher options]`
-- prints every check, and `ddplua --nproc N` says its warnings (on stdout too
-- in a batch job) and ends on an error before any worker starts.
local ffi = require "ffi"
local shell = require "helpers.shell"
local jobs = require "helpers.jobs"
local q, slurp = shell.q, shell.slurp

pcall(ffi.cdef, "typedef struct { long s, ns; } doctor_ts; int clock_gettime(int, doctor_ts *);")
local ts = ffi.new("doctor_ts")
local function now() ffi.C.clock_gettime(1, ts) return tonumber(ts.s) + tonumber(ts.ns) * 1e-9 end

-- No outer job's SLURM variables or thread counts may change what is checked.
local CLEAN = "env -u SLURM_JOB_ID -u SLURM_CPUS_PER_TASK -u SLURM_CPUS_ON_NODE -u SLURM_JOB_CPUS_PER_NODE "
  .. "-u SLURM_JOB_NUM_NODES -u SLURM_NNODES -u SLURM_NODEID -u SLURM_JOB_NODELIST -u SLURM_NODELIST "
  .. "-u SLURM_PROCID -u SLURM_NTASKS -u SLURM_STEP_NUM_TASKS -u SLURM_LOCALID "
  .. "-u OMP_NUM_THREADS -u OPENBLAS_NUM_THREADS -u DDPLUA_NUM_THREADS "

-- `ddplua <args>` with env before it; stdout, stderr, exit code, seconds.
local function run(args, env)
  local t0 = now()
  local out, err, rc = jobs.run(args, CLEAN .. (env or ""), 30)
  return out, err, rc, now() - t0
end

-- The line of check `name` in doctor's output.
local function line(out, name)
  for l in out:gmatch("[^\n]+") do
    if l:match("^%a+%s+" .. name .. " ") then return l end
  end
  error("no " .. name .. " line in:\n" .. out)
end

-- Runs its command with `ulimit -n n` (soft and hard) first.
local function ulimit(n) return "sh -c 'ulimit -n " .. n .. [[ && exec "$@"' sh ]] end

-- A worker script that leaves a file per rank: proof that a worker ran.
local function marking_script()
  local dir = shell.tempdir()
  local s = jobs.script([[io.open(]] .. ("%q"):format(dir) .. [[ .. "/ran" .. os.getenv("RANK"), "w"):close()
print("ran")]], "doctor", "")
  return s, dir
end

describe("ddplua doctor", function()
  after_each(jobs.no_strays)
  teardown(shell.cleanup)

  it("prints every check on a line, fast, and exits 0 without an error", function()
    local out, err, rc, secs = run("doctor --nproc 2")
    assert.equals(0, rc, err)
    for _, name in ipairs { "launch", "cpus", "gpus", "shm", "files", "store" } do
      assert.truthy(line(out, name):match("^%a+ "), out)
    end
    assert.truthy(out:find("ddplua doctor: 2 workers x 1 node: 0 errors", 1, true), out)
    assert.is_true(secs < 2, ("doctor took %.2f s"):format(secs))
    -- no script: doctor checks a launch, it runs none
    local _, err2, rc2 = run("doctor --nproc 2 x.lua")
    assert.equals(1, rc2)
    assert.truthy(err2:find("doctor takes launcher options, not a script", 1, true), err2)
    -- and the usage names it
    local usage = run("-h")
    assert.truthy(usage:find("ddplua doctor [launcher options]", 1, true), usage)
  end)

  it("names the oversubscription of the affinity mask and the fix", function()
    local out, err, rc = run("doctor --nproc 2", "taskset -c 0")
    assert.equals(0, rc, err)
    local l = line(out, "cpus")
    assert.truthy(l:find("^warning cpus   2 workers on 1 CPU %(this process may use only those"), l)
    assert.truthy(l:find("fix: use --nproc 1 or fewer", 1, true), l)
    -- the user's threads: workers x threads
    out = run("doctor --nproc 2", "OMP_NUM_THREADS=3 taskset -c 0")
    l = line(out, "cpus")
    assert.truthy(l:find("2 workers x 3 threads (OMP_NUM_THREADS=3) = 6 threads on 1 CPU: the cores are "
                         .. "oversubscribed", 1, true), l)
    assert.truthy(l:find("unset OMP_NUM_THREADS", 1, true), l)
  end)

  it("names SLURM's 1-CPU allocation, which the mask does not show, and the fix", function()
    local out, err, rc = run("doctor --nproc 2", "SLURM_CPUS_PER_TASK=1")
    assert.equals(0, rc, err)
    local l = line(out, "cpus")
    assert.truthy(l:find("warning cpus   2 workers on 1 CPU (SLURM's 1-CPU allocation: SLURM_CPUS_PER_TASK=1)",
                         1, true), l)
    assert.truthy(l:find("#SBATCH --cpus-per-task=2", 1, true), l)
    -- this node's entry of SLURM_JOB_CPUS_PER_NODE when nothing else says
    out = run("doctor --nproc 2", "SLURM_JOB_CPUS_PER_NODE='4(x2),1' SLURM_NODEID=2")
    assert.truthy(line(out, "cpus"):find("SLURM's 1-CPU allocation: SLURM_JOB_CPUS_PER_NODE=4(x2),1", 1, true), out)
    -- and the launcher's thread budget follows the allocation
    local s = marking_script()
    local _, err2, rc2 = run("--nproc 2 " .. q(s), "SLURM_CPUS_PER_TASK=1")
    assert.equals(0, rc2, err2)
    assert.truthy(err2:find("ddplua: 2 workers, 1 thread each (1 core)", 1, true), err2)
    assert.truthy(err2:find("ddplua: warning: 2 workers on 1 CPU (SLURM's 1-CPU allocation", 1, true), err2)
  end)

  it("warns when more workers than GPUs share them (GPUs emulated)", function()
    local out, err, rc = run("doctor --nproc 2", "DDPLUA_CUDA_EMU=1")
    assert.equals(0, rc, err)
    local l = line(out, "gpus")
    assert.truthy(l:find("warning gpus   2 workers on 1 GPU: ranks share GPUs", 1, true), l)
    assert.truthy(l:find("fix: --nproc auto starts one worker per GPU (here 1)", 1, true), l)
    -- --nproc auto, or as many as there are: ok
    assert.truthy(line(run("doctor", "DDPLUA_CUDA_EMU=2"), "gpus"):find("^ok      gpus   2 GPUs visible for 2 workers"))
    assert.truthy(line(run("doctor --nproc 1", "DDPLUA_CUDA_EMU=2"), "gpus"):find("^ok      gpus   2 GPUs visible for 1 worker "))
  end)

  it("warns on a small /dev/shm, and stops a launch on an unusable one (in a mount namespace)", function()
    local why = jobs.sh("unshare -m sh -c 'mount -t tmpfs -o size=1m tmpfs /dev/shm' 2>&1; echo rc=$?")
    if not why:find("rc=0", 1, true) then
      pending("SKIP: cannot mount a tmpfs in a mount namespace here (needs root): " .. why:gsub("\n", " "))
      return
    end
    -- its own /dev/shm of opts for the command after it
    local function shm(opts) return "unshare -m sh -c 'mount -t tmpfs -o " .. opts .. [[ tmpfs /dev/shm && exec "$@"' sh ]] end
    -- Docker's default: a warning, and the job still runs its collectives
    local out, err, rc = run("doctor --nproc 2", shm("size=64m"))
    assert.equals(0, rc, err)
    local l = line(out, "shm")
    assert.truthy(l:find("warning shm    /dev/shm has 64 MiB free of 64 MiB; 2 local ranks want 102 MiB", 1, true), l)
    assert.truthy(l:find("docker run --shm-size=1g (or --ipc=host)", 1, true), l)
    local s = jobs.script([[ddp.init(); local t = ddp.ones(1000); ddp.all_reduce(t); print(t:sum():item())]], "doctor")
    out, err, rc = run("--nproc 2 --no-prefix " .. q(s), shm("size=64m"))
    assert.equals(0, rc, err)
    assert.equals("2000\n2000\n", out)
    assert.truthy(err:find("ddplua: warning: /dev/shm has 64 MiB free", 1, true), err)
    -- too small for 8 ranks' smallest arena, or read-only: an error, no worker
    assert.truthy(line(run("doctor --nproc 8", shm("size=1m")), "shm"):find("^error   shm    /dev/shm has 1.0 MiB free"))
    local m, dir = marking_script()
    out, err, rc = run("--nproc 2 " .. q(m), shm("size=1m,ro"))
    assert.equals(1, rc, err)
    assert.truthy(err:find("ddplua: error: /dev/shm (1.0 MiB free of 1.0 MiB) refuses a new segment (Read-only file system)",
                           1, true), err)
    for r = 0, 1 do assert.is_nil(slurp(dir .. "/ran" .. r), "rank " .. r .. " ran") end
  end)

  it("warns when the hard limit of open files is below what the job needs", function()
    local out, err, rc = run("doctor --nproc 2", ulimit(64))
    assert.equals(0, rc, err)
    local l = line(out, "files")
    assert.truthy(l:find("^warning files  ulimit %-n: the hard limit is 64, the job wants about %d+"), l)
    assert.truthy(l:find("fix: raise the hard limit", 1, true), l)
    assert.truthy(line(run("doctor --nproc 2"), "files"):find("^ok"))
  end)

  it("names a store address that does not resolve, within a bounded time", function()
    local out, err, rc, secs = run("doctor --nproc 1 --nnodes 2 --master-addr no-such-host.invalid")
    assert.equals(0, rc, err)
    local l = line(out, "store")
    assert.truthy(l:find("^warning store  %-%-master%-addr no%-such%-host%.invalid "), l)
    assert.truthy(l:find("getent hosts no-such-host.invalid", 1, true), l)
    assert.is_true(secs < 2, ("doctor took %.2f s"):format(secs))
    -- one that resolves: the address, the interface that reaches it
    out = run("doctor --nproc 1 --nnodes 2 --node-rank 1 --master-addr 127.0.0.1")
    assert.truthy(line(out, "store"):find("ok      store  --master-addr 127.0.0.1 is 127.0.0.1 (this host), "
                                          .. "reached through lo (127.0.0.1), port 29500", 1, true), out)
  end)

  it("ends the launch before any worker starts on an error, and exits 1", function()
    local s, dir = marking_script()
    local out, err, rc = run("--nproc 8 " .. q(s), ulimit(20))
    assert.equals(1, rc, err)
    assert.truthy(err:find("ddplua: error: ulimit -n: the hard limit is 20, and the launcher alone needs about", 1, true), err)
    assert.truthy(err:find("no worker started", 1, true), err)
    assert.equals("", out)
    for r = 0, 7 do assert.is_nil(slurp(dir .. "/ran" .. r), "rank " .. r .. " ran") end
    -- doctor says the same and exits 1
    local dout, _, drc = run("doctor --nproc 8", ulimit(20))
    assert.equals(1, drc, dout)
    assert.truthy(line(dout, "files"):find("^error   files "), dout)
  end)

  it("says a launch's warnings on stdout too in a batch job, and nothing more when all is well", function()
    local s = marking_script()
    -- SLURM_JOB_ID set and stdout a file: the job's .out gets the warning
    local out, err, rc = run("--nproc 2 --no-prefix " .. q(s), "SLURM_JOB_ID=77 taskset -c 0")
    assert.equals(0, rc, err)
    local want = "ddplua: warning: 2 workers on 1 CPU"
    assert.truthy(out:find(want, 1, true), out)
    assert.truthy(err:find(want, 1, true), err)
    assert.truthy(out:find("ran\nran\n", 1, true), out)
    -- outside a batch job only stderr has it
    out, err = run("--nproc 2 --no-prefix " .. q(s), "taskset -c 0")
    assert.falsy(out:find("warning", 1, true), out)
    assert.truthy(err:find(want, 1, true), err)
    -- all well: the one line about threads, in a batch job too
    out, err, rc = run("--nproc 1 " .. q(s), "SLURM_JOB_ID=77 taskset -c 0")
    assert.equals(0, rc, err)
    assert.equals("ran\n", out)
    assert.equals("ddplua: 1 worker, 1 thread each (1 core)\n", err)
  end)
end)
