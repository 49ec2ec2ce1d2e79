-- tests/helpers/jobs.lua: what the multi-process specs share -- writing
-- worker scripts, running `ddplua` jobs bounded by `timeout` outside any
-- outer job's environment, and making sure no process of a test is left.
local shell = require "helpers.shell"

local M = {}

-- The shell helpers, here too for the specs that only require this.
M.ddplua, M.q, M.sh, M.slurp, M.tempname = shell.ddplua, shell.q, shell.sh, shell.slurp, shell.tempname
M.root = shell.root
local q = M.q

local scripts = {}  -- the scripts of the current test, for no_strays

-- Every worker script starts with this: ddp, sleep/getpid/kill,
-- job_store() (a client of the job's store, as the launcher describes it
-- to the workers) and open_sockets() (how many sockets this process has).
M.PRELUDE = [[
local ffi = require "ffi"
pcall(ffi.cdef, "int poll(void *fds, unsigned long n, int timeout); int getpid(void); int kill(int pid, int sig);")
local function sleep(s) ffi.C.poll(nil, 0, math.floor(s * 1000)) end
local ddp = require "ddp"
local function job_store()
  local token = os.getenv("DDP_STORE_TOKEN")
  return require("ddp.store").connect(os.getenv("MASTER_ADDR") or "127.0.0.1", tonumber(os.getenv("MASTER_PORT")),
                                      { token = token ~= "" and token or nil, timeout = 30 })
end
local function open_sockets()
  local p = io.popen("ls -l /proc/" .. ffi.C.getpid() .. "/fd")
  local n = 0
  for _ in p:read("*a"):gmatch("socket:") do n = n + 1 end
  p:close()
  return n
end
]]

-- A worker script file holding PRELUDE (or prelude) .. body; tag names it
-- in `ps`.
function M.script(body, tag, prelude)
  local name = shell.track(M.tempname() .. "_" .. (tag or "job") .. ".lua")
  local f = assert(io.open(name, "w"))
  f:write(prelude or M.PRELUDE, body)
  f:close()
  scripts[#scripts + 1] = name
  return name
end

-- Clears the variables of any job the tests themselves run under.
M.CLEAN = "env -u RANK -u WORLD_SIZE -u LOCAL_RANK -u LOCAL_WORLD_SIZE -u NODE_RANK -u GROUP_RANK "
  .. "-u MASTER_ADDR -u MASTER_PORT -u DDP_STORE_TOKEN -u DDP_TIMEOUT -u DDP_DEBUG -u DDP_JOB_ID -u DDP_LAUNCH_ID -u DDP_BACKEND -u DDP_GLOO_HOST -u DDP_PREEMPT_SIGNALS "
  -- the task variables of SLURM steps, MPI and torchrun (dist/launch_env.c reads them)
  .. "-u SLURM_STEP_NUM_TASKS -u SLURM_PROCID -u OMPI_COMM_WORLD_SIZE -u OMPI_COMM_WORLD_RANK -u PMI_SIZE "
  .. "-u PMI_RANK -u TORCHELASTIC_RUN_ID -u DDP_STORE_PORT "

-- Runs `ddplua <args>` under `timeout <secs>`; env: extra assignments.
-- Returns stdout, stderr and the exit code.
function M.run(args, env, secs)
  local out, err = M.tempname(), M.tempname()
  local rc = M.sh(M.CLEAN .. (env or "") .. " timeout " .. (secs or 60) .. " " .. q(M.ddplua) .. " " .. args
    .. " </dev/null >" .. q(out) .. " 2>" .. q(err) .. "; echo $?")
  return M.slurp(out), M.slurp(err), tonumber(rc:match("(%d+)%s*$"))
end

-- For after_each: fails (after killing them) if processes of this test's
-- scripts are still alive a few seconds on.
function M.no_strays()
  for _, s in ipairs(scripts) do
    local pat = q("[" .. s:sub(1, 1) .. "]" .. s:sub(2))
    local left
    for _ = 1, 30 do
      left = M.sh("pgrep -f " .. pat .. " || true")
      if left == "" then break end
      os.execute("sleep 0.1")
    end
    if left ~= "" then
      os.execute("pkill -KILL -f " .. pat)
      scripts = {}
      error("stray processes of " .. s .. ": " .. left)
    end
  end
  scripts = {}
end

-- A free TCP port (bound and released by the kernel's choice).
function M.free_port()
  return tonumber(M.sh([[python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])']]))
end

-- Starts each rank's command in the background with its env (a launch
-- without ddplua's launcher), in folder dir if given, and waits for all
-- (bounded); returns {out=, err=, rc=} per rank and the seconds taken.
function M.ranks(envs, script, secs, dir)
  local res, cmds = {}, {}
  for i, env in ipairs(envs) do
    local o, e, c = M.tempname(), M.tempname(), M.tempname()
    res[i] = { o = o, e = e, c = c }
    local this = script
    if type(env) == "table" then env, this = env[1], env[2] end  -- {env, script of its own}
    cmds[#cmds + 1] = "( " .. (dir and "cd " .. q(dir) .. " && " or "") .. M.CLEAN .. env .. " timeout " .. (secs or 60) .. " " .. q(M.ddplua) .. " " .. q(this)
      .. " </dev/null >" .. q(o) .. " 2>" .. q(e) .. "; echo $? >" .. q(c) .. " ) &"
  end
  local t0 = os.time()
  M.sh(table.concat(cmds, " ") .. " wait")
  for _, r in ipairs(res) do
    r.out, r.err, r.rc = M.slurp(r.o) or "", M.slurp(r.e) or "", tonumber((M.slurp(r.c) or ""):match("%d+"))
  end
  return res, os.time() - t0
end

-- For teardown: removes every temporary file made.
M.cleanup = shell.cleanup

return M
