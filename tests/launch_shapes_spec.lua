-- Launch shapes without ddplua's launcher (docs/clusters.md): env:// as a
-- Kubernetes PyTorchJob starts ranks (rank 0 serves the store), torchrun's
-- variables, OpenMPI's mpirun, and the rendezvous failures each names
-- within seconds: a rank 0 that is not up yet, a MASTER_ADDR that does not
-- resolve, a port some other program holds, another job's store, two rank
-- 0s.  The SLURM shapes are in slurm_spec.lua.
local jobs = require "helpers.jobs"
local q, sh, slurp, tempname = jobs.q, jobs.sh, jobs.slurp, jobs.tempname
local ddplua = jobs.ddplua

local EQ = jobs.root .. "/tests/scripts/ddp_equal.lua"
-- every launcher's variables unset, so the specs see only their own
local CLEAN = jobs.CLEAN

local free_port, ranks = jobs.free_port, jobs.ranks

local function check_eq(r, world, kind)
  assert.equals(0, r.rc, r.err .. r.out)
  local w, k, s, rel = r.out:match("DDPEQ rank %d+ world (%d+) kind (%S+) allreduce (%S+) maxrel (%S+)")
  assert.equals(world, tonumber(w), r.out .. r.err)
  assert.equals(kind, k)
  assert.equals(world, tonumber(s))
  assert.is_true(tonumber(rel) < 1e-5, r.out)
end

describe("env:// launches (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)", function()
  after_each(jobs.no_strays)
  teardown(jobs.cleanup)

  it("makes one world in which rank 0 serves the store, DDP equal to one process", function()
    local p = free_port()
    local base = "MASTER_ADDR=127.0.0.1 MASTER_PORT=" .. p .. " WORLD_SIZE=2 "
    local res = ranks({ base .. "RANK=0", base .. "RANK=1" }, EQ)
    for _, r in ipairs(res) do check_eq(r, 2, "env") end
    -- without LOCAL_WORLD_SIZE each rank is taken as its own node (a pod);
    -- with it, ranks of one node share memory
    assert.truthy(res[1].out:find("backend hier", 1, true), res[1].out)
    base = base .. "LOCAL_WORLD_SIZE=2 "
    res = ranks({ base .. "RANK=1 LOCAL_RANK=1", base .. "RANK=0 LOCAL_RANK=0" }, EQ)
    for _, r in ipairs(res) do check_eq(r, 2, "env") end
    assert.truthy(res[1].out:find("backend shm", 1, true), res[1].out)
  end)

  it("says within seconds that a rank waits for rank 0, and ends at the timeout with that cause", function()
    local p = free_port()
    local res, took = ranks({ "DDP_TIMEOUT=6 MASTER_ADDR=127.0.0.1 MASTER_PORT=" .. p .. " WORLD_SIZE=2 RANK=1" }, EQ)
    local err = res[1].err
    assert.equals(1, res[1].rc, err)
    assert.is_true(took <= 10, err)
    assert.truthy(err:find("ddp.init: rank 1 waits: rank 0 has not served the store at 127.0.0.1:" .. p
      .. " (env launch: rank 0 serves it; port MASTER_PORT); retrying until DDP_TIMEOUT (6 s", 1, true), err)
    assert.truthy(err:find("cannot reach the store at 127.0.0.1:" .. p .. " within 6 s: rank 0 has not served", 1, true), err)
  end)

  it("keeps waiting for a rank 0 that comes late, as pods start at different times", function()
    local p = free_port()
    local base = "MASTER_ADDR=127.0.0.1 MASTER_PORT=" .. p .. " WORLD_SIZE=2 "
    local res = ranks({ base .. "RANK=1", "sleep 6; " .. CLEAN .. base .. "RANK=0" }, EQ)
    check_eq(res[1], 2, "env")
    assert.truthy(res[1].err:find("rank 1 waits: rank 0 has not served", 1, true), res[1].err)
  end)

  it("names a MASTER_ADDR that does not resolve (yet) within seconds", function()
    local res, took = ranks({ "DDP_TIMEOUT=5 MASTER_ADDR=no-such-host.invalid MASTER_PORT=29999 WORLD_SIZE=2 RANK=1" }, EQ)
    local err = res[1].err
    assert.equals(1, res[1].rc, err)
    assert.is_true(took <= 10, err)
    assert.truthy(err:find("rank 1 waits: MASTER_ADDR=no-such-host.invalid does not resolve", 1, true), err)
    assert.truthy(err:find("within 5 s: MASTER_ADDR=no-such-host.invalid does not resolve", 1, true), err)
  end)

  it("says at once that two processes are rank 0 of one job", function()
    local p = free_port()
    local base = "MASTER_ADDR=127.0.0.1 MASTER_PORT=" .. p .. " WORLD_SIZE=2 DDP_TIMEOUT=8 "
    local res, took = ranks({ base .. "RANK=0", "sleep 1; " .. CLEAN .. base .. "RANK=0" }, EQ, 30)
    local err = res[2].err
    assert.equals(1, res[2].rc, err)
    assert.truthy(err:find("this job's own store is already served there -- two processes are rank 0", 1, true), err)
    assert.is_true(took <= 12, err)
  end)

  it("tells another job's store on the port from this job's", function()
    local p = free_port()
    -- another job (another MASTER_ADDR spelling: another derived token)
    local other = jobs.script([[
local srv = require("ddp.store").server { host = "127.0.0.1", port = tonumber(os.getenv("P")), token = "other-job" }
io.write("UP\n"); io.flush()
local ffi = require "ffi"
ffi.C.poll(nil, 0, 6000)
srv:close()
]], "other")
    local res = ranks({ "P=" .. p, { "sleep 1; " .. CLEAN .. "DDP_TIMEOUT=5 MASTER_ADDR=127.0.0.1 MASTER_PORT=" .. p
      .. " WORLD_SIZE=2 RANK=0", EQ } }, other, 30)
    local err = res[2].err
    assert.equals(1, res[2].rc, err)
    assert.truthy(err:find("another ddplua job's store holds the port; set MASTER_PORT", 1, true), err)
    -- and a rank > 0 meeting it: refused within seconds, not waiting
    res = ranks({ "P=" .. p, { "sleep 1; " .. CLEAN .. "DDP_TIMEOUT=30 MASTER_ADDR=127.0.0.1 MASTER_PORT=" .. p
      .. " WORLD_SIZE=2 RANK=1", EQ } }, other, 30)
    err = res[2].err
    assert.equals(1, res[2].rc, err)
    assert.truthy(err:find("belongs to another job (it refused this job's token)", 1, true), err)
  end)
end)

describe("the launcher's own store port (node 0 of several)", function()
  after_each(jobs.no_strays)
  teardown(jobs.cleanup)

  -- a store holding port p with token tok for a few seconds
  local function holder(p, tok)
    return jobs.script(([[
local srv = require("ddp.store").server { host = "0.0.0.0", port = %d, token = %q }
require("ffi").C.poll(nil, 0, 5000)
srv:close()
]]):format(p, tok), "holder")
  end

  it("tells this job's own store (a second node 0) from another job's", function()
    local p = free_port()
    -- a launcher as node 0 of two nodes on port p, while the holder has it
    local function one(tok)
      local h = holder(p, tok)
      local e = tempname()
      sh("( " .. CLEAN .. "timeout 20 " .. q(ddplua) .. " " .. q(h) .. " >/dev/null 2>&1 & ) ; sleep 1; " .. CLEAN
         .. "DDP_STORE_TOKEN=abc timeout 20 " .. q(ddplua) .. " --nnodes 2 --node-rank 0 --master-addr 127.0.0.1 --master-port "
         .. p .. " --nproc 1 " .. q(EQ) .. " >/dev/null 2>" .. q(e) .. "; sleep 4")
      return slurp(e) or ""
    end
    local err = one("abc")
    assert.truthy(err:find("a launcher of this same job already serves it on this node", 1, true), err)
    err = one("other")
    assert.truthy(err:find("another ddplua job's store holds the port", 1, true), err)
    assert.falsy(err:find("DDPEQ", 1, true), err)
  end)
end)

describe("a port some other program holds", function()
  after_each(jobs.no_strays)
  teardown(jobs.cleanup)

  -- A listener that accepts and then: stays silent, closes, or answers
  -- in its own protocol (as PyTorch's TCPStore would).
  local function foreign(mode, p)
    local py = tempname() .. ".py"
    jobs.sh("cat > " .. q(py) .. [[ <<'EOF'
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[2]))); s.listen(8)
t0 = time.time()
s.settimeout(1)
while time.time() - t0 < 25:
    try: c, _ = s.accept()
    except socket.timeout: continue
    if sys.argv[1] == "close": c.close()
    elif sys.argv[1] == "garbage": c.sendall(b"\xff" * 64); time.sleep(0.5); c.close()
    else: time.sleep(8); c.close()
EOF]])
    return "python3 " .. q(py) .. " " .. mode .. " " .. p
  end

  for _, mode in ipairs { "silent", "close", "garbage" } do
    it("fails within seconds naming it (" .. mode .. "), never after the whole timeout", function()
      local p = free_port()
      local pid_file = tempname()
      sh(foreign(mode, p) .. " >/dev/null 2>&1 & echo $! > " .. q(pid_file) .. "; sleep 0.5")
      local res, took = ranks({ "DDP_TIMEOUT=60 MASTER_ADDR=127.0.0.1 MASTER_PORT=" .. p .. " WORLD_SIZE=2 RANK=1" }, EQ)
      sh("kill " .. (slurp(pid_file) or ""):match("%d+") .. " 2>/dev/null")
      local err = res[1].err
      assert.equals(1, res[1].rc, err)
      assert.is_true(took <= 10, took .. " s: " .. err)
      assert.truthy(err:find("127.0.0.1:" .. p .. " is not a ddplua store", 1, true), err)
      assert.truthy(err:find("torchrun's own store", 1, true), err)
      assert.falsy(err:find("wrong token", 1, true), err)
    end)
  end
end)

-- Debian's torch (python3-torch, 1.13) for its elastic agent and TCPStore:
-- installed on first use as make test installs its packages; nil and why
-- where it cannot be.
local torch_ok, torch_why
local function have_torch()
  if torch_ok ~= nil then return torch_ok, torch_why end
  local probe = "/usr/bin/python3 -c 'import torch.distributed.launcher.api' >/dev/null 2>&1 && echo yes"
  if sh(probe) == "" then
    if sh("id -u"):match("^0") or sh("command -v sudo || true") ~= "" then
      sh("bash scripts/install-deps.sh python3-torch >/dev/null 2>&1")
    end
  end
  torch_ok = sh(probe) ~= ""
  torch_why = not torch_ok and "Debian's python3-torch is not installed and could not be (needs root or sudo)" or nil
  return torch_ok, torch_why
end

describe("torchrun", function()
  after_each(jobs.no_strays)
  teardown(jobs.cleanup)

  it("(its elastic agent, starting ddplua as the program) gives one world, DDP equal to one process", function()
    local ok, why = have_torch()
    if not ok then pending(why) return end
    local out = sh(CLEAN .. "timeout 90 /usr/bin/python3 tests/scripts/torchrun_launch.py 2 " .. q(ddplua) .. " " .. q(EQ)
      .. " 2>&1")
    local seen = 0
    for line in out:gmatch("DDPEQ[^\n]*") do
      seen = seen + 1
      check_eq({ rc = 0, out = line, err = out }, 2, "torchrun")
    end
    assert.equals(2, seen, out)
  end)

  it("'s own store (a real PyTorch TCPStore) on MASTER_PORT is named within seconds", function()
    local ok, why = have_torch()
    if not ok then pending(why) return end
    local p = free_port()
    local py = tempname() .. ".py"
    jobs.sh("cat > " .. q(py) .. [[ <<'EOF'
import sys, time
from torch.distributed import TCPStore
s = TCPStore("127.0.0.1", int(sys.argv[1]), 1, True)
time.sleep(20)
EOF]])
    local pid_file = tempname()
    sh("/usr/bin/python3 " .. q(py) .. " " .. p .. " >/dev/null 2>&1 & echo $! > " .. q(pid_file) .. "; sleep 2")
    local res, took = ranks({ "DDP_TIMEOUT=60 MASTER_ADDR=127.0.0.1 MASTER_PORT=" .. p .. " WORLD_SIZE=2 RANK=1" }, EQ)
    sh("kill " .. (slurp(pid_file) or ""):match("%d+") .. " 2>/dev/null")
    local err = res[1].err
    assert.equals(1, res[1].rc, err)
    assert.is_true(took <= 10, took .. " s: " .. err)
    assert.truthy(err:find("127.0.0.1:" .. p .. " is not a ddplua store", 1, true), err)
  end)
end)

describe("torchrun's variables", function()
  after_each(jobs.no_strays)
  teardown(jobs.cleanup)

  it("run one world with rank 0 serving the store next to torchrun's own (MASTER_PORT + 1)", function()
    local p = free_port()
    local base = "TORCHELASTIC_RUN_ID=r1 TORCHELASTIC_RESTART_COUNT=0 TORCHELASTIC_USE_AGENT_STORE=True "
      .. "MASTER_ADDR=127.0.0.1 MASTER_PORT=" .. p .. " WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 GROUP_RANK=0 "
    local res = ranks({ base .. "RANK=0 LOCAL_RANK=0", base .. "RANK=1 LOCAL_RANK=1" }, EQ)
    for _, r in ipairs(res) do check_eq(r, 2, "torchrun") end
  end)
end)

describe("OpenMPI's mpirun", function()
  after_each(jobs.no_strays)
  teardown(jobs.cleanup)
  local have = sh("command -v mpirun || true") ~= ""
  local MPIRUN = CLEAN .. "timeout 60 mpirun --allow-run-as-root --oversubscribe "

  it("gives one world of -np ranks, DDP equal to one process", function()
    if not have then pending("mpirun is not installed (Debian's openmpi-bin)") return end
    local out = sh(MPIRUN .. "-np 2 " .. q(ddplua) .. " " .. q(EQ) .. " 2>&1")
    local seen = 0
    for line in out:gmatch("DDPEQ[^\n]*") do
      seen = seen + 1
      check_eq({ rc = 0, out = line, err = out }, 2, "mpi")
    end
    assert.equals(2, seen, out)
  end)

  it("refuses a launcher started once per rank (mpirun -np 2 ddplua --nproc 2)", function()
    if not have then pending("mpirun is not installed (Debian's openmpi-bin)") return end
    local t0 = os.time()
    local out = sh(MPIRUN .. "-np 2 " .. q(ddplua) .. " --nproc 2 " .. q(EQ) .. " 2>&1; echo rc=$?")
    assert.truthy(out:find("mpirun started 2 copies of the launcher on this node", 1, true), out)
    assert.falsy(out:find("DDPEQ", 1, true), out)
    assert.falsy(out:find("rc=0", 1, true), out)
    assert.is_true(os.time() - t0 <= 10, out)
  end)
end)
