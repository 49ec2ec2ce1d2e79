-- Launch shapes and pre-emption under a real SLURM 22.05 (the two-node test
-- cluster of tests/helpers/slurm_cluster.sh, shared by every spec of a
-- run): srun with one task per rank on one and two nodes, mpirun inside an
-- allocation, a launcher per task refused, layouts SLURM numbers otherwise
-- refused, scancel and a USR1 warning that save on every rank, a requeue
-- that resumes with the losses of an uninterrupted run, and doctor on a
-- 1-CPU allocation (docs/clusters.md).
local slurm = require "helpers.slurm"
local shell = require "helpers.shell"
local q, tempdir, slurp = shell.q, shell.tempdir, shell.slurp

local EQ = "tests/scripts/ddp_equal.lua"
-- srun's command line is read by this spec's shell: the program's path
-- itself (batch scripts read $DDPLUA)
local DDPLUA = q(slurm.ddplua)
local TRAIN = "tests/scripts/preempt_train.lua"

local function need_cluster()
  local ok, why = slurm.up()
  if not ok then pending("no SLURM cluster: " .. tostring(why)) end
  return ok
end

-- Every DDPEQ line of out: world, all_reduce and maxrel checked.
local function check_eq(out, world, kind, nlines)
  local seen, ranks = 0, {}
  for r, w, k, s, rel in out:gmatch("DDPEQ rank (%d+) world (%d+) kind (%S+) allreduce (%S+) maxrel (%S+)") do
    seen = seen + 1
    ranks[#ranks + 1] = tonumber(r)
    assert.equals(world, tonumber(w), out)
    assert.equals(kind, k, out)
    assert.equals(world, tonumber(s), out)
    assert.is_true(tonumber(rel) < 1e-5, out)
  end
  table.sort(ranks)
  assert.equals(nlines or world, seen, out)
  for i, r in ipairs(ranks) do assert.equals(i - 1, r, out) end
end

describe("srun with one task per rank", function()
  after_each(function() slurm.drain() end)
  teardown(slurm.cleanup)

  it("gives one world on one node (srun -N1 -n2), DDP equal to one process", function()
    if not need_cluster() then return end
    local ok, out, err = slurm.srun("-N1 -n2 " .. DDPLUA .. " " .. EQ, 60)
    assert.is_true(ok, err .. out)
    check_eq(out, 2, "slurm")
  end)

  it("gives one world across two nodes (srun -N2 -n4), shared memory within each", function()
    if not need_cluster() then return end
    local ok, out, err = slurm.srun("-N2 --ntasks-per-node=2 " .. DDPLUA .. " " .. EQ, 60)
    assert.is_true(ok, err .. out)
    check_eq(out, 4, "slurm")
    assert.truthy(out:find("backend hier", 1, true), out)
  end)

  it("gives one world in an sbatch job (--ntasks-per-node=2, srun ddplua train.lua)", function()
    if not need_cluster() then return end
    local id = slurm.sbatch("srun $DDPLUA " .. EQ .. "\n", { nodes = 1, ntasks_per_node = 2 })
    local info = slurm.wait(id, 60)
    assert.equals("COMPLETED", info.state, info.raw .. (slurm.output(id, "err") or ""))
    check_eq(slurm.output(id), 2, "slurm")
  end)

  it("refuses, within seconds, SLURM's cyclic numbering and uneven nodes", function()
    if not need_cluster() then return end
    local t0 = os.time()
    local ok, out, err = slurm.srun("-m cyclic -N2 -n4 " .. DDPLUA .. " " .. EQ, 30)
    assert.is_false(ok)
    assert.truthy(err:find("ranks must be numbered node by node", 1, true), err)
    assert.truthy(err:find("use srun's default block distribution (-m block)", 1, true), err)
    -- every rank refuses, also those numbered in place (0 and 3): none waits
    assert.truthy(err:find("this node runs tasks 0,2", 1, true) or err:find("rank 0 is", 1, true), err)
    assert.truthy(err:find("this node runs tasks 1,3", 1, true), err)
    assert.is_true(os.time() - t0 <= 10, err)
    ok, out, err = slurm.srun("-N2 -n3 " .. DDPLUA .. " " .. EQ, 30)
    assert.is_false(ok)
    assert.truthy(err:find("this step runs a different number of tasks on its nodes (SLURM_STEP_TASKS_PER_NODE=2,1)",
                           1, true), err)
    assert.falsy(out:find("DDPEQ", 1, true), out)
    assert.is_true(os.time() - t0 <= 20, err)
  end)
end)

describe("a launcher per task, where one per node belongs", function()
  after_each(function() slurm.drain() end)
  teardown(slurm.cleanup)

  it("is refused at once with the lines that work (srun -n2 ddplua --nproc 2)", function()
    if not need_cluster() then return end
    local t0 = os.time()
    local ok, out, err = slurm.srun("-N1 -n2 " .. DDPLUA .. " --nproc 2 " .. EQ, 30)
    assert.is_false(ok)
    assert.is_true(os.time() - t0 <= 10, err)
    assert.falsy(out:find("DDPEQ", 1, true), out)
    assert.truthy(err:find("this SLURM step runs 2 tasks on each node", 1, true), err)
    assert.truthy(err:find("srun --ntasks-per-node=1 ddplua --nproc K train.lua", 1, true), err)
    assert.truthy(err:find("srun --ntasks-per-node=K ddplua train.lua", 1, true), err)
  end)

  it("is refused in an sbatch job whose body says srun ddplua --nproc 2 with --ntasks-per-node=2", function()
    if not need_cluster() then return end
    local id = slurm.sbatch("srun $DDPLUA --nproc 2 " .. EQ .. "\n", { nodes = 2, ntasks_per_node = 2 })
    local info = slurm.wait(id, 60)
    local err = slurm.output(id, "err") or ""
    assert.are_not.equal("COMPLETED", info.state, info.raw)
    assert.falsy((slurm.output(id) or ""):find("DDPEQ", 1, true))
    assert.truthy(err:find("each task is a launcher (ddplua --nproc)", 1, true), err)
    assert.falsy(err:find("is the port in use", 1, true), err)
  end)

  it("runs the shape that works: one launcher per node across two nodes", function()
    if not need_cluster() then return end
    local id = slurm.sbatch("srun $DDPLUA --nproc 2 " .. EQ .. "\n", { nodes = 2, ntasks_per_node = 1, cpus = 2 })
    local info = slurm.wait(id, 90)
    assert.equals("COMPLETED", info.state, info.raw .. (slurm.output(id, "err") or ""))
    check_eq(slurm.output(id), 4, "ddplua")
  end)
end)

-- docs/clusters.md's sbatch templates (```sh slurm=NAME), as the page
-- shows them, made to fit the test cluster: 2 CPUs and no GPUs per node,
-- so 8 ranks per node become 2, the CPU counts 2 (or 1 per task), the GPU
-- lines go, and train.lua is ddp_equal.lua.
local function doc_template(name)
  local docs = require "helpers.docs"
  for _, b in ipairs(docs.blocks(slurp("docs/clusters.md"), "docs/clusters.md")) do
    if b.lang == "sh" and b.attrs and b.attrs.slurm == name then
      local t = b.code
      t = t:gsub("#SBATCH %-%-gpus%-per%-[%w]+=%d+\n", "")
      t = t:gsub("%-%-ntasks%-per%-node=8", "--ntasks-per-node=2"):gsub("%-%-nproc 8", "--nproc 2")
      t = t:gsub("%-%-cpus%-per%-task=32", "--cpus-per-task=2"):gsub("%-%-cpus%-per%-task=4", "--cpus-per-task=1")
      t = t:gsub("srun ddplua ", "srun $DDPLUA "):gsub("train%.lua %-%-epochs 3", EQ)
      return t, b.code
    end
  end
  error("docs/clusters.md has no ```sh slurm=" .. name .. " block")
end

describe("docs/clusters.md's sbatch templates", function()
  after_each(function() slurm.drain() end)
  teardown(slurm.cleanup)

  for _, t in ipairs { { "launcher-per-node", "ddplua" }, { "task-per-gpu", "slurm" } } do
    it("run as one world of 4 ranks on 2 nodes: " .. t[1], function()
      if not need_cluster() then return end
      local text, orig = doc_template(t[1])
      assert.truthy(orig:find("#SBATCH --nodes=2", 1, true), orig)
      local id = slurm.sbatch(text, {})
      local info = slurm.wait(id, 90)
      assert.equals("COMPLETED", info.state, info.raw .. text .. (slurm.output(id, "err") or ""))
      check_eq(slurm.output(id), 4, t[2])
    end)
  end

  it("pre-emption's template is one sbatch accepts", function()
    if not need_cluster() then return end
    local text = doc_template("preempt-requeue")
    local path = shell.tempname() .. ".sh"
    shell.writefile(path, text)
    local out, err, code = slurm.run("sbatch --test-only " .. q(path), 30)
    assert.equals(0, code, out .. err .. text)
    assert.truthy((out .. err):find("to start at", 1, true), out .. err)
  end)
end)

describe("mpirun", function()
  after_each(function() slurm.drain() end)
  teardown(slurm.cleanup)

  it("inside an allocation gives one world (OpenMPI's ranks win over its daemons' SLURM step)", function()
    if not need_cluster() then return end
    local id = slurm.sbatch(slurm.MPIRUN .. " -np 2 $DDPLUA " .. EQ .. "\n", { nodes = 1, ntasks = 2 })
    local info = slurm.wait(id, 60)
    assert.equals("COMPLETED", info.state, info.raw .. (slurm.output(id, "err") or ""))
    check_eq(slurm.output(id), 2, "mpi")
  end)
end)

describe("pre-emption under SLURM", function()
  after_each(function() slurm.drain() end)
  teardown(slurm.cleanup)

  -- losses[step] per rank from a job's output ("[r] step N epoch E loss X")
  local function losses(text)
    local t = {}
    for r, step, loss in text:gmatch("%[(%d+)%] step (%d+) epoch %d+ loss (%S+)") do
      t[r .. ":" .. step] = loss
    end
    return t
  end

  local function wait_pids(dir, n, secs)
    local t0 = os.time()
    repeat
      local all = true
      for i = 0, n - 1 do all = all and (slurp(dir .. "/pid" .. i) or ""):match("%d+\n") ~= nil end
      if all then return true end
      os.execute("sleep 0.2")
    until os.time() - t0 > (secs or 60)
    return false
  end

  for _, how in ipairs { { "scancel (SIGTERM)", nil }, { "scancel -s USR1 (the time limit's warning)", "USR1" } } do
    it("saves on every rank on " .. how[1], function()
      if not need_cluster() then return end
      local dir, ready = tempdir(), tempdir()
      local id = slurm.sbatch(("srun $DDPLUA --nproc 2 %s --dir %s --ready %s --wait-at 3\n"):format(TRAIN, q(dir), q(ready)),
                              { nodes = 1, ntasks_per_node = 1, cpus = 2 })
      assert.is_true(wait_pids(ready, 2), slurm.output(id, "err") or "")
      slurm.cancel(id, how[2])
      local info = slurm.wait(id, 60)
      local out, err = slurm.output(id) or "", slurm.output(id, "err") or ""
      assert.truthy(shell.exists(dir .. "/step_3.safetensors"), out .. err)
      for r = 0, 1 do
        assert.truthy(out:find("[" .. r .. "] saved step 3 after SIG" .. (how[2] or "TERM"), 1, true), out .. err)
        assert.truthy(out:find("[" .. r .. "] final line of rank " .. r, 1, true), out .. err)
      end
      if how[2] then assert.equals("COMPLETED", info.state, info.raw .. err) end
    end)
  end

  it("requeues and resumes with the losses of an uninterrupted run", function()
    if not need_cluster() then return end
    -- the reference: the same job, never interrupted
    local ref_dir = tempdir()
    local ref = slurm.sbatch(("srun $DDPLUA --nproc 2 %s --dir %s --steps 10\n"):format(TRAIN, q(ref_dir)),
                             { nodes = 1, ntasks_per_node = 1, cpus = 2 })
    local rinfo = slurm.wait(ref, 60)
    assert.equals("COMPLETED", rinfo.state, rinfo.raw .. (slurm.output(ref, "err") or ""))
    local want = losses(slurm.output(ref))
    -- pre-empted at step 4 (USR1, as --signal=USR1@T sends it), saved,
    -- ddp.requeue(); the second run resumes from ddp.latest_checkpoint
    local dir, ready = tempdir(), tempdir()
    local body = ([[
ARGS="--ready %s --wait-at 4 --requeue"  # the first run
if [ -n "$SLURM_RESTART_COUNT" ]; then ARGS="--resume"; fi
srun $DDPLUA --nproc 2 %s --dir %s --steps 10 $ARGS
]]):format(ready, TRAIN, q(dir))
    local id = slurm.sbatch(body, { nodes = 1, ntasks_per_node = 1, cpus = 2, requeue = true })
    assert.is_true(wait_pids(ready, 2), slurm.output(id, "err") or "")
    slurm.cancel(id, "USR1")
    local info = slurm.wait_for(id, function(i) return (i.restarts or 0) >= 1 and slurm.FINAL[i.state] end, 120)
    local out, err = slurm.output(id) or "", slurm.output(id, "err") or ""
    assert.truthy(info, "the job did not run again to its end: " .. tostring(err) .. out)
    assert.equals("COMPLETED", info.state, info.raw .. err)
    assert.truthy(out:find("saved step 4 after SIGUSR1", 1, true), out .. err)
    assert.truthy(out:find("resumed from " .. dir .. "/step_4.safetensors", 1, true), out .. err)
    local got = losses(out)
    local n = 0
    for k, v in pairs(want) do
      n = n + 1
      assert.equals(v, got[k], k .. "\n" .. out)
    end
    assert.equals(20, n)
    assert.truthy(out:find("[0] done at step 10", 1, true), out)
  end)
end)

describe("ddplua doctor under SLURM", function()
  after_each(function() slurm.drain() end)
  teardown(slurm.cleanup)

  it("names the oversubscription of a 1-CPU allocation, in the job's stdout too", function()
    if not need_cluster() then return end
    local ok, out, err = slurm.srun("-N1 -n1 -c1 " .. DDPLUA .. " doctor --nproc 2", 30)
    local text = out .. err
    assert.truthy(text:find("SLURM_CPUS_PER_TASK=1", 1, true), text)
    assert.truthy(text:find("oversubscribed", 1, true) or text:find("share each core", 1, true), text)
    local id = slurm.sbatch("srun $DDPLUA --nproc 2 " .. EQ .. "\n", { nodes = 1, ntasks = 1, cpus = 1 })
    slurm.wait(id, 60)
    local so = slurm.output(id) or ""
    assert.truthy(so:find("warning", 1, true) and so:find("1 CPU", 1, true), so .. (slurm.output(id, "err") or ""))
    assert.is_boolean(ok)
  end)

  it("checks a task-per-rank step as ranks, a launcher-per-node step as launchers", function()
    if not need_cluster() then return end
    local ok, out, err = slurm.srun("-N1 -n2 " .. DDPLUA .. " doctor", 30)
    assert.is_true(ok, out .. err)
    for r = 0, 1 do
      assert.truthy(out:find("launch one rank of slurm: rank " .. r .. " of 2, local rank " .. r .. " of 2", 1, true), out)
    end
    assert.truthy(out:find("2 local ranks want", 1, true), out)
    ok, out, err = slurm.srun("-N2 -n2 " .. DDPLUA .. " doctor --nproc 2", 30)
    for k = 0, 1 do
      assert.truthy(out:find("slurm, one task per node: this launcher is node " .. k .. " of 2 and starts its 2 workers",
                             1, true), out .. err)
    end
  end)
end)
