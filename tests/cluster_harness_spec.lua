-- tests/cluster_harness_spec.lua: the SLURM test cluster of
-- tests/helpers/slurm_cluster.sh works with real programs -- srun on one and
-- on two nodes, sbatch with its output file, mpirun, scancel, requeue --
-- so that the launch-shape specs built on helpers/slurm.lua test ddplua,
-- not the harness.  Skips (with the reason) where no cluster can run.
local slurm = require "helpers.slurm"

local ok, why = slurm.up()
if not ok then
  pending("no SLURM cluster: " .. tostring(why))
  return
end

local function lines(s)
  local t = {}
  for l in s:gmatch("[^\n]+") do t[#t + 1] = l end
  table.sort(t)
  return t
end

describe("the SLURM test cluster", function()
  after_each(function() assert(slurm.drain()) end)
  teardown(slurm.cleanup)

  it("srun -N1 -n2 runs two tasks on one node", function()
    local ran, out, err = slurm.srun("-N1 -n2 bash -c 'echo $SLURM_PROCID $SLURMD_NODENAME'", 30)
    assert.is_true(ran, err)
    local l = lines(out)
    assert.equals(2, #l, out)
    assert.equals("0", l[1]:match("^(%d+)"), out)
    assert.equals("1", l[2]:match("^(%d+)"), out)
    assert.equals(l[1]:match("%S+$"), l[2]:match("%S+$"), out)
  end)

  it("srun -N1 -n2 hostname prints two lines", function()
    local ran, out, err = slurm.srun("-N1 -n2 hostname", 30)
    assert.is_true(ran, err)
    assert.equals(2, #lines(out), out)
  end)

  it("srun -N2 -n2 puts one task on n1 and one on n2", function()
    local ran, out, err = slurm.srun("-N2 -n2 bash -c 'echo $SLURM_PROCID $SLURMD_NODENAME $SLURM_STEP_NUM_TASKS'", 30)
    assert.is_true(ran, err)
    assert.same({ "0 n1 2", "1 n2 2" }, lines(out))
  end)

  it("runs an sbatch job to COMPLETED with its output file and this build's ddplua", function()
    local job = slurm.sbatch([[
echo "ntasks=$SLURM_NTASKS"
srun -n2 bash -c 'echo "task $SLURM_PROCID"'
"$DDPLUA" -e 'print("ddplua " .. require("ddp.program").root)'
exit 3
]], { nodes = 1, ntasks = 2 })
    local info = slurm.wait(job, 60)
    local out = slurm.output(job) or ""
    assert.equals("FAILED", info.state, info.raw .. "\n" .. out)
    assert.equals(3, info.exit_code)
    assert.truthy(out:find("ntasks=2", 1, true), out)
    assert.truthy(out:find("task 0", 1, true), out)
    assert.truthy(out:find("task 1", 1, true), out)
    assert.truthy(out:find("ddplua " .. slurm.root, 1, true), out .. (slurm.output(job, "err") or ""))
  end)

  it("mpirun -np 2 runs ranks 0 and 1", function()
    local ran, out, err = slurm.mpirun("-np 2 bash -c 'echo $OMPI_COMM_WORLD_RANK $OMPI_COMM_WORLD_SIZE'", 60)
    assert.is_true(ran, err)
    assert.same({ "0 2", "1 2" }, lines(out))
  end)

  it("scancel ends a sleeping job, signalling its tasks first", function()
    local job = slurm.sbatch([[
srun -n1 bash -c 'trap "echo got-USR1" USR1; echo started; while true; do sleep 0.1; done'
]], { nodes = 1, ntasks = 1 })
    assert(slurm.wait_output(job, "started", 30), "the job did not start: " .. (slurm.output(job, "err") or ""))
    assert.is_true((slurm.cancel(job, "USR1")))
    assert(slurm.wait_output(job, "got%-USR1", 15), "USR1 did not reach the task: " .. (slurm.output(job) or ""))
    assert.equals("RUNNING", slurm.job(job).state)
    assert.is_true((slurm.cancel(job)))
    local info = slurm.wait(job, 30)
    assert.equals("CANCELLED", info.state, info.raw)
  end)

  it("requeue runs the job again with SLURM_RESTART_COUNT=1", function()
    local job = slurm.sbatch([[
echo "run ${SLURM_RESTART_COUNT:-0}"
sleep 300
]], { nodes = 1, ntasks = 1, requeue = true })
    assert(slurm.wait_output(job, "run 0", 30), "the job did not start")
    assert.is_true((slurm.requeue(job)))
    assert(slurm.wait_output(job, "run 1", 60), "the job did not run again: " .. (slurm.output(job) or ""))
    assert.equals(1, slurm.job(job).restarts)
    slurm.cancel(job)
    assert.equals("CANCELLED", slurm.wait(job, 30).state)
  end)
end)
