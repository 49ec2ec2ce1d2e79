-- ddp.dist.preempt: saving before the scheduler kills the job.
-- ddp.should_stop() tells every rank, at the same call, that some rank was
-- asked to stop (SLURM's --signal=USR1@T, SIGTERM at the time limit or on
-- scancel: runtime/dist/preempt.c turns them into a flag);
-- ddp.preempt_signal() names the signal; ddp.requeue() puts a SLURM job
-- back in the queue (scontrol requeue).
local core = require "ddp.core"
local factory = require "ddp.tensor.factory"
local env_mod = require "ddp.dist.env"
local group_mod = require "ddp.dist.group"
local raise, show = core.raise, core.show

core.add_lib_file(debug.getinfo(1, "S").source)

local M = {}
local C, ffi = core.C, core.ffi

local armed = false
local agreed = 0  -- the signal the last collective should_stop agreed on (the largest number)
local flag        -- the one-element tensor it all-reduces

-- ddp.should_stop() -> true once any rank got a request to save and stop.
-- The first call arms this process: from then on the signals of
-- DDP_PREEMPT_SIGNALS (the launcher's --signals; TERM,USR1 by default) are
-- requests, never fatal; before it they keep their default actions.
-- Collective in a world of several ranks (after ddp.init): every rank calls
-- it at the same steps, and all get the same answer -- the ranks' flags
-- all-reduced with max over the process group; alone, no collective.
function M.should_stop()
  if not armed then
    if C.dl_preempt_arm(nil) ~= 0 then raise("ddp.should_stop: " .. core.last_error()) end
    armed = true
  end
  local mine = C.dl_preempt_requested()
  if env_mod.world_size() > 1 then
    local pg = group_mod._group("ddp.should_stop")
    flag = flag or factory.zeros(1, { dtype = "int32" })
    flag:fill_(mine)
    if C.dl_pg_all_reduce(pg, flag, C.DL_PG_MAX) ~= 0 then
      raise("ddp.should_stop: " .. core.last_error())
    end
    if agreed == 0 then agreed = flag:item() end
    return agreed ~= 0
  end
  if agreed == 0 then agreed = mine end
  return agreed ~= 0
end

-- ddp.preempt_signal() -> "SIGTERM", "SIGUSR1", ... or nil: the signal
-- this process got first, else the one should_stop learnt from another
-- rank (a rank whose node was not signalled still learns why).
function M.preempt_signal()
  local s = C.dl_preempt_requested()
  if s == 0 then s = agreed end
  if s == 0 then return nil end
  local name = C.dl_preempt_signal_name(s)
  return name ~= nil and ffi.string(name) or ("signal " .. s)
end

-- ddp.requeue(): on rank 0, `scontrol requeue $SLURM_JOB_ID` -- SLURM
-- then ends this run of the job (SIGTERM to its processes, which a loop
-- that called should_stop absorbs) and queues it again from the start of
-- its batch script.  Call it after the checkpoint is saved.  Other ranks
-- do nothing.  Returns true on the rank that requeued; raises, naming the
-- command and what it said, when not under SLURM, when scontrol is missing
-- or when it fails.
function M.requeue()
  local id = os.getenv("SLURM_JOB_ID")
  if id == nil or id == "" then
    raise("ddp.requeue: not under SLURM (SLURM_JOB_ID is not set): requeue needs `scontrol requeue <job id>`")
  end
  if not id:match("^[%w_]+$") then raise("ddp.requeue: SLURM_JOB_ID=" .. show(id) .. " is not a job id") end
  if env_mod.rank() ~= 0 then return false end
  local cmd = "scontrol requeue " .. id
  local p = io.popen(cmd .. " 2>&1 </dev/null; echo \"rc=$?\"")
  if not p then raise("ddp.requeue: cannot run `" .. cmd .. "`") end
  local out = p:read("*a") or ""
  p:close()
  local rc = tonumber(out:match("rc=(%d+)%s*$"))
  out = out:gsub("rc=%d+%s*$", ""):gsub("%s+$", "")
  if rc == 127 then
    raise(("ddp.requeue: `%s`: scontrol not found (%s); is this a SLURM node?"):format(cmd, out))
  elseif rc ~= 0 then
    raise(("ddp.requeue: `%s` failed (exit code %s): %s"):format(cmd, tostring(rc), out ~= "" and out or "no output"))
  end
  return true
end

return M
