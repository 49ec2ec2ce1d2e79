-- tests/helpers/slurm.lua: what the specs that run under a real SLURM
-- cluster share -- bringing up the cluster of tests/helpers/slurm_cluster.sh
-- (two nodes n1 and n2 on this host), submitting batch scripts, waiting for
-- jobs, srun and mpirun bounded by `timeout`, scancel and requeue.
--
--   local slurm = require "helpers.slurm"
--   local ok, why = slurm.up()
--   if not ok then pending("no SLURM cluster: " .. why) return end
--   local job = slurm.sbatch("srun $DDPLUA train.lua", { nodes = 1, ntasks = 2 })
--   local info = slurm.wait(job, 60)        -- info.state == "COMPLETED"
--   local text = slurm.output(job)          -- its stdout (and stderr)
--   teardown(slurm.cleanup)
--
-- Every command runs with the cluster's SLURM_CONF and without the SLURM,
-- OpenMPI, PMI and torchrun variables of whatever job the tests run in, so
-- specs behave the same on a laptop and inside a CI job on a real cluster.
-- Batch scripts get DDPLUA (this build's program, an absolute path) and
-- DDPLUA_ROOT (the repository) in their environment and start in the
-- repository root.
local shell = require "helpers.shell"

local M = {}
local q, sh = shell.q, shell.sh

M.dir = os.getenv("DDPLUA_SLURM_DIR") or "/tmp/ddplua-slurm"
M.conf = M.dir .. "/slurm.conf"
M.script_path = shell.root .. "/tests/helpers/slurm_cluster.sh"
M.ddplua, M.root = shell.ddplua, shell.root
M.nodes = { "n1", "n2" }
-- mpirun as root on this host's 2 cores
M.MPIRUN = "mpirun --allow-run-as-root --oversubscribe"

-- env -u for each variable of an outer job, then the cluster's SLURM_CONF.
local function clean_prefix()
  local unset = {}
  local p = assert(io.popen("env"))
  for line in p:lines() do
    local name = line:match("^([%w_]+)=")
    if name and (name:match("^SLURM") or name:match("^OMPI_") or name:match("^PMIX?_")
                 or name:match("^MPI_LOCAL") or name == "RANK" or name == "WORLD_SIZE"
                 or name == "LOCAL_RANK" or name == "LOCAL_WORLD_SIZE" or name == "NODE_RANK"
                 or name == "GROUP_RANK" or name == "MASTER_ADDR" or name == "MASTER_PORT"
                 or name:match("^TORCHELASTIC_") or name:match("^DDP_")) then
      unset[#unset + 1] = "-u " .. name
    end
  end
  p:close()
  return "env " .. table.concat(unset, " ") .. " SLURM_CONF=" .. q(M.conf)
    .. " DDPLUA=" .. q(M.ddplua) .. " DDPLUA_ROOT=" .. q(M.root) .. " "
end
M.ENV = clean_prefix()

-- cmd's stdout, stderr and exit code, under `timeout secs` (TERM, then
-- KILL 5 s later).
local function run(cmd, secs)
  local out, err = shell.tempname(), shell.tempname()
  local rc = sh(M.ENV .. "timeout -k 5 " .. (secs or 60) .. " " .. cmd .. " </dev/null >" .. q(out)
    .. " 2>" .. q(err) .. "; echo $?")
  return shell.slurp(out) or "", shell.slurp(err) or "", tonumber(rc:match("(%d+)%s*$"))
end
M.run = run

local up_result  -- per process: { ok, why }

-- true, or nil and why there is no cluster (DDPLUA_SLURM_SKIP, set by
-- scripts/run-tests.sh when its `up` said skip, or the script's own
-- reason).  Starts the cluster on the first call unless it is up already.
function M.up()
  if up_result then return up_result[1], up_result[2] end
  local skip = os.getenv("DDPLUA_SLURM_SKIP")
  if skip and skip ~= "" then
    up_result = { nil, skip }
  else
    local out, err, code = run("bash " .. q(M.script_path) .. " up", 120)
    if code == 0 then
      up_result = { true }
    else
      local why = (out .. err):match("skip: ([^\n]*)") or ("slurm_cluster.sh up exited " .. tostring(code)
        .. ": " .. (out .. err):gsub("%s+", " "):sub(1, 400))
      up_result = { nil, why }
    end
  end
  return up_result[1], up_result[2]
end

local outputs = {}  -- job id -> { out = path, err = path, dir = dir }

-- Submits a batch script (its text; a "#!/bin/bash" line is added when it
-- has none) and returns the job id and a table { out=, err=, dir=, script= }.
-- opts (all optional):
--   nodes, ntasks, cpus (per task), ntasks_per_node, time (minutes),
--   signal ("USR1@30", "B:USR1@30"), requeue (true), name, nodelist ("n1"),
--   env (table NAME = value, exported at the script's top),
--   args (string: sbatch options verbatim), chdir (default the repository),
--   output/error (paths; default <dir>/slurm-<job>.out and .err; the same
--   path twice merges them), open_mode ("append", the default, keeps a
--   requeued job's first run; or "truncate").
function M.sbatch(text, opts)
  opts = opts or {}
  local dir = shell.tempdir()
  local head = {}
  if not text:match("^#!") then head[#head + 1] = "#!/bin/bash" end
  local body = text
  local env = {}
  for k, v in pairs(opts.env or {}) do env[#env + 1] = "export " .. k .. "=" .. q(v) end
  table.sort(env)
  if #env > 0 then
    -- after the shebang and the #SBATCH lines, which must come first
    local first, rest = body:match("^(#![^\n]*\n)(.*)$")
    if first then
      local sb = rest:match("^((#SBATCH[^\n]*\n)*)") or ""
      body = first .. sb .. table.concat(env, "\n") .. "\n" .. rest:sub(#sb + 1)
    else
      local sb = body:match("^((#SBATCH[^\n]*\n)*)") or ""
      body = sb .. table.concat(env, "\n") .. "\n" .. body:sub(#sb + 1)
    end
  end
  local path = dir .. "/job.sh"
  shell.writefile(path, (#head > 0 and table.concat(head, "\n") .. "\n" or "") .. body)
  os.execute("chmod +x " .. q(path))
  local o = {}
  local function add(flag, v) if v ~= nil and v ~= false then o[#o + 1] = flag .. (v == true and "" or q(v)) end end
  add("--nodes=", opts.nodes)
  add("--ntasks=", opts.ntasks)
  add("--cpus-per-task=", opts.cpus)
  add("--ntasks-per-node=", opts.ntasks_per_node)
  add("--time=", opts.time)
  add("--signal=", opts.signal)
  add("--requeue", opts.requeue)
  add("--job-name=", opts.name or "ddplua-test")
  add("--nodelist=", opts.nodelist)
  add("--chdir=", opts.chdir or M.root)
  add("--open-mode=", opts.open_mode or "append")
  local out = opts.output or (dir .. "/slurm-%j.out")
  local err = opts.error or (dir .. "/slurm-%j.err")
  add("--output=", out)
  add("--error=", err)
  local out_, err_, code = run("sbatch --parsable " .. table.concat(o, " ") .. " " .. (opts.args or "")
    .. " " .. q(path), 30)
  local id = out_:match("^(%d+)")
  if code ~= 0 or not id then
    error("sbatch failed (" .. tostring(code) .. "): " .. err_ .. out_, 2)
  end
  local files = { out = (out:gsub("%%j", id)), err = (err:gsub("%%j", id)), dir = dir, script = path }
  outputs[id] = files
  return id, files
end

-- `scontrol show job -o <id>` as a table: every Key=Value field, plus
-- state ("COMPLETED", "RUNNING", ...), exit_code and signal (from
-- ExitCode=N:S), restarts (a number), reason, node_list, and raw (the
-- line).  nil and scontrol's message when the job is not known.
function M.job(id)
  local out, err, code = run("scontrol show job -o " .. q(id), 15)
  if code ~= 0 or not out:match("JobId=") then return nil, (err .. out):gsub("%s+$", "") end
  local t = { raw = out:gsub("%s+$", "") }
  -- values hold no spaces in -o output except Command/WorkDir paths with
  -- spaces, which the tests do not make
  for k, v in out:gmatch("(%w[%w:/]*)=(%S*)") do
    if t[k] == nil then t[k] = v end
  end
  t.state = t.JobState
  t.reason = t.Reason
  t.restarts = tonumber(t.Restarts)
  t.node_list = t.NodeList
  local e, s = (t.ExitCode or ""):match("^(%d+):(%d+)$")
  t.exit_code, t.signal = tonumber(e), tonumber(s)
  return t
end

local FINAL = { COMPLETED = true, FAILED = true, CANCELLED = true, TIMEOUT = true, NODE_FAIL = true,
                PREEMPTED = true, OUT_OF_MEMORY = true, BOOT_FAIL = true, DEADLINE = true }
M.FINAL = FINAL

local function sleep(s) os.execute("sleep " .. s) end

-- Polls the job until pred(info) is true; returns the info, or nil and the
-- last info (or scontrol's message) after timeout_s (default 60).
function M.wait_for(id, pred, timeout_s)
  local t0 = os.time()
  local info, why
  repeat
    info, why = M.job(id)
    if info and pred(info) then return info end
    sleep(0.2)
  until os.time() - t0 >= (timeout_s or 60)
  return nil, info or why
end

-- Waits until the job has ended (a final state, no longer COMPLETING) and
-- returns its info (M.job).  After timeout_s (default 120) returns the
-- info as it is then with timed_out = true; the job keeps running (cancel
-- it).
function M.wait(id, timeout_s)
  local info, last = M.wait_for(id, function(i) return FINAL[i.state] end, timeout_s or 120)
  if info then return info end
  if type(last) ~= "table" then error("job " .. tostring(id) .. ": " .. tostring(last), 2) end
  last.timed_out = true
  return last
end

-- Waits until the job runs (state RUNNING); returns its info or nil, info.
function M.wait_running(id, timeout_s)
  return M.wait_for(id, function(i) return i.state == "RUNNING" end, timeout_s or 60)
end

-- Waits until the file at path holds the Lua pattern pat; returns the
-- file's text, or nil and what it held after timeout_s (default 60).
-- path may be a job id (its stdout).
function M.wait_output(path, pat, timeout_s)
  local t0 = os.time()
  local text
  repeat
    text = M.output(path) or ""
    if text:find(pat) then return text end
    sleep(0.2)
  until os.time() - t0 >= (timeout_s or 60)
  return nil, text
end

-- A job's stdout (job id; which = "err" for its stderr) or a file's text;
-- nil if there is none yet.
function M.output(id_or_path, which)
  local files = outputs[tostring(id_or_path)]
  if files then return shell.slurp(files[which or "out"]) end
  return shell.slurp(id_or_path)
end

-- The output files of a job sbatch submitted ({ out=, err=, dir=, script= }).
function M.files(id)
  return outputs[tostring(id)]
end

-- `srun <args>` (a shell string) outside any allocation, under `timeout
-- secs` (default 60): ok (exit 0), stdout, stderr, exit code.
function M.srun(args, secs)
  local out, err, code = run("srun " .. args, secs)
  return code == 0, out, err, code
end

-- `mpirun --allow-run-as-root --oversubscribe <args>` outside SLURM, as
-- M.srun.
function M.mpirun(args, secs)
  local out, err, code = run(M.MPIRUN .. " " .. args, secs)
  return code == 0, out, err, code
end

-- scancel: the whole job (SIGTERM to the batch shell and every step, SIGKILL
-- KillWait s later), or signal (a name: "USR1") to its steps' tasks only;
-- flags: "--full" (-f: the batch shell too) or "--batch" (-b: the batch
-- shell only).  Returns ok and scancel's messages.
function M.cancel(id, signal, flags)
  local out, err, code = run("scancel " .. (signal and ("--signal=" .. q(signal) .. " ") or "")
    .. (flags or "") .. " " .. q(id), 15)
  return code == 0, out .. err
end

-- scontrol requeue: the running job is killed (SIGTERM, then SIGKILL) and
-- pends again; it restarts about cred_expire (10 s here) later, with
-- SLURM_RESTART_COUNT set.  Returns ok and scontrol's messages.
function M.requeue(id)
  local out, err, code = run("scontrol requeue " .. q(id), 15)
  return code == 0, out .. err
end

-- The nodes' states: { n1 = "idle", n2 = "allocated" }.
function M.node_states()
  local out = run("sinfo -h -N -o '%N %T'", 15)
  local t = {}
  for n, s in out:gmatch("(%S+) (%S+)") do t[n] = s end
  return t
end

-- Cancels every job the specs left behind and waits (up to timeout_s,
-- default 30) until both nodes are idle again, so the next spec gets the
-- whole cluster.  For after_each.  Returns true, or nil and the states.
function M.drain(timeout_s)
  run("scancel --user=root", 15)
  local t0 = os.time()
  local st
  repeat
    st = M.node_states()
    if st.n1 == "idle" and st.n2 == "idle" then return true end
    sleep(0.2)
  until os.time() - t0 >= (timeout_s or 30)
  return nil, st
end

-- For teardown: removes the temporary files and directories made.
M.cleanup = shell.cleanup

return M
