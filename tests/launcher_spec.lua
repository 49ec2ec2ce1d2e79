-- The launcher, `ddplua --nproc N script.lua`, as a user runs it: worker
-- environment, output, failures, signals, restarts, threads and the store.
-- Every run is bounded by `timeout`, and every test ends by checking that no
-- process of its scripts is left.
local store = require "ddp.store"

local shell = require "helpers.shell"
local jobs = require "helpers.jobs"
local root, ddplua, q, sh, slurp = shell.root, shell.ddplua, shell.q, shell.sh, shell.slurp
local tempname, tempdir = shell.tempname, shell.tempdir

-- sleep(s) inside the worker itself, so no child process of it lingers.
local PRELUDE = [[
local ffi = require "ffi"
pcall(ffi.cdef, "int poll(void *fds, unsigned long n, int timeout);")
local function sleep(s) ffi.C.poll(nil, 0, math.floor(s * 1000)) end
local rank = tonumber(os.getenv("RANK"))
local function pid() return tonumber(io.open("/proc/self/stat"):read("*a"):match("^(%d+)")) end
]]

local function script(body) return jobs.script(body, "launch", PRELUDE) end

-- Runs `ddplua <args>` under `timeout 60`; returns stdout, stderr, exit code.
local function run(args, env) return jobs.run(args, env, 60) end

local function lines(s)
  local t = {}
  for l in s:gmatch("[^\n]+") do t[#t + 1] = l end
  return t
end

-- A process that is gone, or a zombie nobody reaped yet, is not alive.
local function alive(pid)
  local stat = slurp("/proc/" .. pid .. "/stat")
  return stat ~= nil and not stat:match("^%d+ %b() Z")
end

-- Waits (at most 10 s) for n pid files in dir; returns the pids.
local function wait_pids(dir, n)
  for _ = 1, 100 do
    local pids = {}
    for i = 0, n - 1 do
      local s = slurp(dir .. "/pid" .. i)
      if s and s:match("%d+\n") then pids[#pids + 1] = tonumber(s:match("%d+")) end
    end
    if #pids == n then return pids end
    os.execute("sleep 0.1")
  end
  error("the workers did not write their pid files")
end

describe("ddplua --nproc", function()
  after_each(jobs.no_strays)  -- no launcher or worker of this test's scripts may remain
  teardown(shell.cleanup)

  it("delivers the lines a rank printed before the launcher stopped it (another rank failed)", function()
    -- stdout into a pipe is block buffered: these lines used to die with rank 0
    local s = script([[
if rank == 0 then
  print("rank 0 was here")
  io.write("and here\n")
  sleep(30)
else
  sleep(1)
  error("rank 1 fails")
end
]])
    local out, err, rc = run("--nproc 2 " .. q(s))
    assert.equals(1, rc, out .. err)
    assert.truthy(out:find("[0] rank 0 was here\n[0] and here\n", 1, true), out .. err)
    assert.truthy(err:find("stopped the other 1 worker", 1, true), err)
  end)

  it("gives each worker torchrun's environment and prefixes its lines", function()
    local s = script([[
print(("ENV %s %s %s %s %s %s %s %s %s %d %s %s"):format(os.getenv("RANK"), os.getenv("LOCAL_RANK"),
  os.getenv("WORLD_SIZE"), os.getenv("LOCAL_WORLD_SIZE"), os.getenv("NODE_RANK"),
  os.getenv("GROUP_RANK"), os.getenv("MASTER_ADDR"), os.getenv("MASTER_PORT"),
  os.getenv("DDP_JOB_ID"), #os.getenv("DDP_STORE_TOKEN"), os.getenv("DDP_RESTART_COUNT"),
  os.getenv("DDP_LAUNCH_ID")))
print("args", ...)
]])
    local out, err, rc = run("--nproc 3 " .. q(s) .. " a 'b c'")
    assert.equals(0, rc, err)
    local ranks, ports, ids = {}, {}, {}
    for _, l in ipairs(lines(out)) do
      local p, r, lr, ws, lws, nr, gr, addr, port, id, tok, rs, launch =
        l:match("^%[(%d)%] ENV (%d) (%d) (%d) (%d) (%d) (%d) (%S+) (%d+) (%x+) (%d+) (%d+) (%x+)$")
      if p then
        assert.equals(p, r)
        assert.equals(r, lr)
        assert.same({ "3", "3", "0", "0", "127.0.0.1", "32", "0" }, { ws, lws, nr, gr, addr, tok, rs })
        ranks[#ranks + 1] = tonumber(r)
        ports[port] = true
        ids[id .. " " .. launch] = true  -- one job id and one launch id for all
        assert.equals(16, #launch)
      else
        assert.truthy(l:match("^%[%d%] args\ta\tb c$"), l)
      end
    end
    table.sort(ranks)
    assert.same({ 0, 1, 2 }, ranks)
    assert.equals(1, #(function() local t = {} for k in pairs(ports) do t[#t + 1] = k end return t end)())
    assert.equals(1, #(function() local t = {} for k in pairs(ids) do t[#t + 1] = k end return t end)())
    assert.equals(6, #lines(out))
  end)

  it("passes lines through whole, without a prefix under --no-prefix", function()
    local s = script([[
io.write("part one, ") io.flush() sleep(0.05) io.write("part two\n")
io.stderr:write("to stderr " .. rank .. "\n")
io.write("no newline at the end")
]])
    local out, err, rc = run("--nproc 2 --no-prefix " .. q(s))
    assert.equals(0, rc, err)
    local l = lines(out)
    table.sort(l)
    assert.same({ "no newline at the end", "no newline at the end", "part one, part two",
                  "part one, part two" }, l)
    assert.truthy(err:find("\nto stderr 0\n", 1, true) or err:find("^to stderr 0\n"), err)
    assert.truthy(err:find("to stderr 1\n", 1, true), err)
  end)

  it("passes carriage-return redraws on to the terminal only, and says no terminal with DDP_TTY", function()
    local s = script([[
if rank == 0 then
  io.write("tty=" .. os.getenv("DDP_TTY") .. "\n")
  io.write("10%\r") io.flush() sleep(0.05) io.write("100%\r") io.flush() sleep(0.05)
  io.write("done\r\n")
end
]])
    local dir = tempname() .. "_logs"
    local out, err, rc = run("--nproc 2 --log-dir " .. q(dir) .. " " .. q(s))
    assert.equals(0, rc, err)
    assert.truthy(out:find("[0] tty=0\n[0] 10%\r[0] 100%\r[0] done\r\n", 1, true), out)
    local log = slurp(dir .. "/rank0.log")
    assert.equals("tty=0\ndone\r\n", log)
    os.execute("rm -rf " .. q(dir))
  end)

  it("gives two concurrent jobs different ports", function()
    local s = script([[print("PORT " .. os.getenv("MASTER_PORT")) sleep(1)]])
    local a, b = tempname(), tempname()
    sh("timeout 60 " .. q(ddplua) .. " --nproc 1 " .. q(s) .. " >" .. q(a) .. " 2>/dev/null & "
      .. "timeout 60 " .. q(ddplua) .. " --nproc 1 " .. q(s) .. " >" .. q(b) .. " 2>/dev/null & wait")
    local pa, pb = slurp(a):match("PORT (%d+)"), slurp(b):match("PORT (%d+)")
    assert.truthy(pa and pb)
    assert.are_not.equal(pa, pb)
  end)

  it("writes --log-dir files and shows only rank 0 under --quiet-ranks", function()
    local s = script([[print("out of " .. rank) io.stderr:write("err of " .. rank .. "\n")]])
    local dir = tempdir() .. "/logs"
    local out, err, rc = run("--nproc 2 --quiet-ranks --log-dir " .. q(dir) .. " " .. q(s))
    assert.equals(0, rc, err)
    assert.equals("[0] out of 0\n", out)
    assert.truthy(err:find("[0] err of 0\n", 1, true), err)
    assert.falsy(err:find("of 1", 1, true), err)
    for r = 0, 1 do
      local log = slurp(dir .. "/rank" .. r .. ".log")
      assert.truthy(log, "no rank" .. r .. ".log")
      assert.truthy(log:find("out of " .. r .. "\n", 1, true), log)
      assert.truthy(log:find("err of " .. r .. "\n", 1, true), log)
    end
  end)

  it("stops the others when a worker exits 3, exits 3 and names the rank", function()
    local s = script([[
if rank == 1 then
  io.stderr:write("first words\n")
  for i = 1, 12 do io.stderr:write("line " .. i .. "\n") end
  sleep(0.2)
  os.exit(3)
end
sleep(30)
]])
    local t0 = os.time()
    local _, err, rc = run("--nproc 3 --grace 5 " .. q(s))
    assert.equals(3, rc, err)
    assert.truthy(os.time() - t0 < 10, "the sleeping workers were not stopped quickly")
    assert.truthy(err:find("rank 1 (local rank 1) failed with exit code 3", 1, true), err)
    -- its last lines are the terminal's last ones: not said twice
    assert.truthy(err:find("[1] line 12\nddplua: rank 1 (local rank 1) failed", 1, true), err)
    assert.falsy(err:find("the last lines rank 1 wrote", 1, true), err)
  end)

  it("repeats the failed rank's last stderr lines when others wrote after them", function()
    local flag = shell.tempname()
    os.remove(flag)
    local s = script(([[
local flag = %q
if rank == 1 then
  io.stderr:write("first words\n")
  for i = 1, 12 do io.stderr:write("line " .. i .. "\n") end
  io.open(flag, "w"):close()
  sleep(1)
  os.exit(3)
end
if rank == 0 then
  for _ = 1, 100 do if io.open(flag) then break end sleep(0.1) end
  sleep(0.3)  -- the launcher reads the pipes in any order: rank 1's lines first
  io.stderr:write("rank 0 goes on talking\n")
end
sleep(30)
]]):format(flag))
    local _, err, rc = run("--nproc 3 --grace 5 " .. q(s))
    os.remove(flag)
    assert.equals(3, rc, err)
    assert.truthy(err:find("[0] rank 0 goes on talking", 1, true), err)
    assert.truthy(err:find("the last lines rank 1 wrote to stderr:", 1, true), err)
    assert.truthy(err:find("  [1] line 12\n", 1, true), err)
    assert.truthy(err:find("  [1] line 3\n", 1, true), err)
    assert.falsy(err:find("  [1] first words", 1, true), err) -- only the last 10 lines
  end)

  it("stops a stopped (SIGSTOP) worker at once, not after the grace period", function()
    local s = script([[
if rank == 1 then os.execute("kill -STOP " .. pid()) end
sleep(0.5)
os.exit(3)
]])
    local t0 = os.time()
    local _, err, rc = run("--nproc 2 --grace 20 " .. q(s))
    assert.equals(3, rc, err)
    assert.is_true(os.time() - t0 < 10, "took " .. (os.time() - t0) .. " s: " .. err)
    assert.falsy(err:find("still running after", 1, true), err)
  end)

  it("blames the rank with the error, not a peer that only saw it go", function()
    -- rank 1 says its error and is slow to exit; rank 0, which only saw
    -- its peer go, fails first (as a Gloo peer does) and is reaped first
    local flag = shell.tempname()
    os.remove(flag)
    local s = script(([[
local flag = %q
if rank == 1 then
  io.stderr:write("ddplua: worker.lua:3: the real error\n")
  io.stderr:flush()
  io.open(flag, "w"):close()
  sleep(30)
end
for _ = 1, 100 do if io.open(flag) then break end sleep(0.1) end
sleep(0.3)
io.stderr:write("ddplua: ddp.all_reduce: a rank exited or lost its connection (gloo: Connection closed by peer)\n")
os.exit(1)
]]):format(flag))
    local _, err, rc = run("--nproc 2 " .. q(s))
    os.remove(flag)
    assert.equals(1, rc, err)
    assert.truthy(err:find("ddplua: rank 1 (local rank 1) failed: it wrote the error below and was stopped "
                           .. "(signal SIGTERM) while exiting; rank 0 only lost its connection to it", 1, true), err)
    assert.falsy(err:find("rank 0 (local rank 0) failed", 1, true), err)
  end)

  it("names the signal that killed a worker", function()
    local s = script([[
if rank == 0 then os.execute("kill -KILL " .. pid()) end
sleep(30)
]])
    local _, err, rc = run("--nproc 2 " .. q(s))
    assert.equals(128 + 9, rc, err)
    assert.truthy(err:find("rank 0 (local rank 0) failed with signal SIGKILL", 1, true), err)
  end)

  local function pid_script(dir)
    return script(([[
local f = io.open(%q .. "/pid" .. rank, "w") f:write(pid(), "\n") f:close()
sleep(30)
]]):format(dir))
  end

  it("forwards SIGTERM to every worker", function()
    local dir = tempdir()
    local s = pid_script(dir)
    local res = tempname()
    sh("(timeout 60 " .. q(ddplua) .. " --nproc 2 " .. q(s) .. " >/dev/null 2>" .. q(res .. ".err")
      .. " & echo $! >" .. q(res) .. "; wait $!; echo $? >" .. q(res .. ".rc")
      .. ") >/dev/null 2>&1 &")
    local pids = wait_pids(dir, 2)
    local timeout_pid = tonumber(slurp(res))
    -- timeout's child is the launcher
    local launcher = tonumber(sh("pgrep -P " .. timeout_pid):match("%d+"))
    assert.truthy(launcher)
    os.execute("kill -TERM " .. launcher)
    for _ = 1, 100 do
      if slurp(res .. ".rc") then break end
      os.execute("sleep 0.1")
    end
    assert.equals("143", (slurp(res .. ".rc") or ""):match("%d+"), slurp(res .. ".err"))
    assert.truthy(slurp(res .. ".err"):find("got SIGTERM", 1, true))
    for _, p in ipairs(pids) do assert.is_false(alive(p), "worker " .. p .. " survived") end
  end)

  it("leaves no worker alive after kill -9 of the launcher", function()
    local dir = tempdir()
    local s = pid_script(dir)
    local res = tempname()
    sh("(" .. q(ddplua) .. " --nproc 2 " .. q(s) .. " >/dev/null 2>&1 & echo $! >" .. q(res)
      .. "; wait) >/dev/null 2>&1 &")
    local pids = wait_pids(dir, 2)
    local launcher = tonumber(slurp(res))
    os.execute("kill -9 " .. launcher)
    local any
    for _ = 1, 50 do
      any = false
      for _, p in ipairs(pids) do any = any or alive(p) end
      if not any then break end
      os.execute("sleep 0.1")
    end
    assert.is_false(any, "a worker outlived its launcher")
  end)

  it("leaves nothing behind after kill -9 of the launcher: the workers' children, a half-made link", function()
    local dir = tempdir()
    local id = "kill9" .. dir:match("[%w_]+$")  -- unique: the temporary directory's name
    local s = script(([[
local ddp = require "ddp"
local dir = %q
-- a child of the worker, as os.execute("cmd &") makes one: in the worker's process group
os.execute("sleep 300 </dev/null >/dev/null 2>&1 & echo $! >" .. dir .. "/child" .. rank)
ddp.init()
-- rank 1 never receives: the link rank 0 made stays in /dev/shm, half made
if rank == 0 then ddp.send(ddp.ones(4), 1) io.open(dir .. "/linked", "w"):close() end
local f = io.open(dir .. "/pid" .. rank, "w") f:write(pid(), "\n") f:close()
sleep(60)
]]):format(dir))
    local res = tempname()
    sh("(" .. jobs.CLEAN .. "DDP_JOB_ID=" .. id .. " " .. q(ddplua) .. " --nproc 2 " .. q(s)
      .. " >/dev/null 2>&1 & echo $! >" .. q(res) .. "; wait) >/dev/null 2>&1 &")
    local pids = wait_pids(dir, 2)
    for i = 0, 1 do pids[#pids + 1] = tonumber(slurp(dir .. "/child" .. i):match("%d+")) end
    local function shm_files() return sh("ls /dev/shm | grep -F " .. q("ddplua-" .. id) .. " || true") end
    for _ = 1, 100 do
      if slurp(dir .. "/linked") then break end
      os.execute("sleep 0.1")
    end
    assert.is_not.equals("", shm_files())  -- the link, mapped by rank 0 only
    os.execute("kill -9 " .. tonumber(slurp(res)))
    local left, files
    for _ = 1, 50 do
      left = {}
      for _, p in ipairs(pids) do if alive(p) then left[#left + 1] = p end end
      files = shm_files()
      if #left == 0 and files == "" then break end
      os.execute("sleep 0.1")
    end
    for _, p in ipairs(pids) do os.execute("kill -9 " .. p .. " 2>/dev/null") end
    assert.same({}, left, "processes of the job outlived its launcher")
    assert.equals("", files, "files of the job are left in /dev/shm")
  end)

  it("pins workers to their share of the CPUs with --bind-cores", function()
    local s = script([[print(io.open("/proc/self/status"):read("*a"):match("Cpus_allowed_list:%s*(%S+)"))]])
    local out, err, rc = run("--nproc 2 --no-prefix --bind-cores " .. q(s))
    assert.equals(0, rc, err)
    local l = lines(out)
    assert.equals(2, #l)
    if tonumber(sh("nproc"):match("%d+")) >= 2 then assert.are_not.equal(l[1], l[2]) end
  end)

  it("reads the nodes from SLURM and numbers ranks by node", function()
    local s = script([[print(("%s %s %s %s %s"):format(os.getenv("RANK"), os.getenv("WORLD_SIZE"),
      os.getenv("NODE_RANK"), os.getenv("MASTER_ADDR"), os.getenv("MASTER_PORT")))]])
    local out, err, rc = run("--nproc 2 --no-prefix " .. q(s),
      "SLURM_JOB_NUM_NODES=2 SLURM_NODEID=1 SLURM_JOB_NODELIST='gpu[007-008],cpu1'")
    assert.equals(0, rc, err)
    local l = lines(out)
    table.sort(l)
    assert.same({ "2 4 1 gpu007 29500", "3 4 1 gpu007 29500" }, l)
    _, err, rc = run("--nproc 1 --nnodes 2 " .. q(s))
    assert.equals(1, rc)
    assert.truthy(err:find("needs --master-addr", 1, true), err)
  end)

  it("forwards Ctrl-C (SIGINT) to every worker", function()
    local dir = tempdir()
    local s = pid_script(dir)
    local res = tempname()
    sh("(timeout 60 " .. q(ddplua) .. " --nproc 2 " .. q(s) .. " >/dev/null 2>/dev/null"
      .. " & echo $! >" .. q(res) .. "; wait $!; echo $? >" .. q(res .. ".rc")
      .. ") >/dev/null 2>&1 &")
    local pids = wait_pids(dir, 2)
    local launcher = tonumber(sh("pgrep -P " .. tonumber(slurp(res))):match("%d+"))
    os.execute("kill -INT " .. launcher)
    for _ = 1, 100 do
      if slurp(res .. ".rc") then break end
      os.execute("sleep 0.1")
    end
    assert.equals("130", (slurp(res .. ".rc") or ""):match("%d+"))
    for _, p in ipairs(pids) do assert.is_false(alive(p), "worker " .. p .. " survived") end
  end)

  it("restarts the group up to --max-restarts times", function()
    local s = script([[
local n = tonumber(os.getenv("DDP_RESTART_COUNT"))
print("attempt " .. n .. " max " .. os.getenv("DDP_MAX_RESTARTS"))
if rank == 1 and n < 2 then os.exit(5) end
]])
    local out, err, rc = run("--nproc 2 --max-restarts 2 " .. q(s))
    assert.equals(0, rc, err)
    assert.truthy(err:find("rank 1 failed with exit code 5; restarting all workers (restart 1 of 2)", 1, true), err)
    assert.truthy(err:find("(restart 2 of 2)", 1, true), err)
    assert.truthy(out:find("[1] attempt 2 max 2", 1, true), out)
    assert.truthy(out:find("[0] attempt 2 max 2", 1, true), out) -- earlier ones may be cut short
    -- and one restart too few fails with the worker's code
    local _, err2, rc2 = run("--nproc 2 --max-restarts 1 " .. q(s))
    assert.equals(5, rc2, err2)
  end)

  it("divides the cores into a thread budget, unless the user set one", function()
    local s = script([[print(os.getenv("OMP_NUM_THREADS"), os.getenv("OPENBLAS_NUM_THREADS"),
      os.getenv("DDPLUA_NUM_THREADS"), os.getenv("OPENBLAS_THREAD_TIMEOUT"))]])
    local cores = tonumber(sh("nproc"):match("%d+"))
    local per = math.max(1, math.floor(cores / 2))
    local out, err, rc = run("--nproc 2 --no-prefix " .. q(s),
                             "env -u OMP_NUM_THREADS -u OPENBLAS_NUM_THREADS -u DDPLUA_NUM_THREADS")
    assert.equals(0, rc, err)
    local want = ("%d\t%d\t%d\t"):format(per, per, per)
    for _, l in ipairs(lines(out)) do assert.equals(want, l:sub(1, #want)) end
    assert.truthy(err:find(("ddplua: 2 workers, %d thread%s each (%d core"):format(
      per, per == 1 and "" or "s", cores), 1, true), err)
    out, err, rc = run("--nproc 2 --no-prefix " .. q(s), "OMP_NUM_THREADS=3 env -u DDPLUA_NUM_THREADS -u OPENBLAS_NUM_THREADS")
    assert.equals(0, rc, err)
    assert.same({ "3\t3\t3\t4", "3\t3\t3\t4" }, lines(out))
    assert.falsy(err:find("workers, ", 1, true), err)  -- the user's budget: no line of ours
    -- ... but a warning when 2 x 3 threads oversubscribe the cores
    assert.equals(2 * 3 > cores, err:find("oversubscribed", 1, true) ~= nil, err)
  end)

  it("warns once, with the numbers and the fix, when workers x threads exceed the CPUs", function()
    local s = script([[print(os.getenv("OMP_NUM_THREADS"))]])
    -- the user's OMP_NUM_THREADS, two workers on one CPU of the affinity mask
    local out, err, rc = run("--nproc 2 --no-prefix " .. q(s),
                             "OMP_NUM_THREADS=8 env -u DDPLUA_NUM_THREADS -u OPENBLAS_NUM_THREADS taskset -c 0")
    assert.equals(0, rc, err)
    assert.same({ "8", "8" }, lines(out))
    local _, n = err:gsub("warning: 2 workers", "")  -- (a GPU machine may add one about GPUs)
    assert.equals(1, n, err)
    assert.truthy(err:find("ddplua: warning: 2 workers x 8 threads (OMP_NUM_THREADS=8) = 16 threads on 1 CPU: "
                           .. "the cores are oversubscribed", 1, true), err)
    assert.truthy(err:find("unset OMP_NUM_THREADS", 1, true), err)
    -- more workers than CPUs, with the launcher's own budget
    out, err, rc = run("--nproc 3 --no-prefix " .. q(s),
                       "env -u OMP_NUM_THREADS -u DDPLUA_NUM_THREADS -u OPENBLAS_NUM_THREADS taskset -c 0")
    assert.equals(0, rc, err)
    assert.same({ "1", "1", "1" }, lines(out))
    assert.truthy(err:find("ddplua: warning: 3 workers on 1 CPU", 1, true), err)
    assert.truthy(err:find("use --nproc 1 or fewer", 1, true), err)
    -- within the CPUs: no warning
    _, err, rc = run("--nproc 1 --no-prefix " .. q(s), "OMP_NUM_THREADS=1 taskset -c 0")
    assert.equals(0, rc, err)
    assert.falsy(err:find("warning", 1, true), err)
  end)

  it("runs one worker per GPU with --nproc auto (one without)", function()
    local s = script([[print("WS " .. os.getenv("WORLD_SIZE"))]])
    local ndev = tonumber(sh(q(ddplua) .. [[ -e 'print(require("ddp.core").C.dl_cuda_device_count())']]):match("%d+"))
    local out, err, rc = run("--nproc auto " .. q(s))
    assert.equals(0, rc, err)
    assert.truthy(out:find("WS " .. math.max(1, ndev), 1, true), out)
  end)

  it("hosts a store the workers reach", function()
    local s = script([[
local ddp = require "ddp"
local st = ddp.store.connect(os.getenv("MASTER_ADDR"), tonumber(os.getenv("MASTER_PORT")),
                             { token = os.getenv("DDP_STORE_TOKEN"), timeout = 30 })
st:add("count", 1)
st:barrier("all", tonumber(os.getenv("WORLD_SIZE")), 30)
if rank == 0 then print("count=" .. st:get("count")) end
]])
    local out, err, rc = run("--nproc 3 " .. q(s))
    assert.equals(0, rc, err)
    assert.equals("[0] count=3\n", out)
  end)

  it("raises its soft open-file limit to the hard one, so the store fits a big job", function()
    local s = script([[
pcall(ffi.cdef, "struct dl_rl { unsigned long cur, max; }; int getrlimit(int, struct dl_rl *);")
local r = ffi.new("struct dl_rl")
ffi.C.getrlimit(7, r)  -- RLIMIT_NOFILE
print("nofile " .. tostring(r.cur == r.max))
]])
    local out = sh("ulimit -Sn 1024 && timeout 60 " .. q(ddplua) .. " --nproc 1 " .. q(s)
      .. " 2>/dev/null </dev/null")
    assert.equals("nofile true\n", out)
  end)

  it("says so when --master-port is in use", function()
    local s = script([[print("ran")]])
    local srv = store.server{}
    local out, err, rc = run("--nproc 2 --master-port " .. srv.port .. " " .. q(s))
    srv:close()
    assert.equals(1, rc, err)
    assert.equals("", out)
    -- the store holding it (a random token: another job's) is named
    assert.truthy(err:find("cannot serve the rendezvous store on 127.0.0.1:" .. srv.port
      .. ": another ddplua job's store holds the port", 1, true), err)
  end)

  it("rejects bad counts, and launcher options without --nproc", function()
    local _, err, rc = run("--nproc 0 x.lua")
    assert.equals(1, rc)
    assert.truthy(err:find("--nproc expects an integer", 1, true), err)
    _, err, rc = run("--log-dir /tmp x.lua")
    assert.equals(1, rc)
    assert.truthy(err:find("need --nproc", 1, true), err)
  end)
end)
