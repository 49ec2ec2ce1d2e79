-- tests/chaos/run.lua: the fault matrix (`make chaos`) and its short form
-- (`make test`).  Run by ddplua from the repository root:
--
--   build/ddplua tests/chaos/run.lua            every fault x transport
--   build/ddplua tests/chaos/run.lua --short    the few rows of `make test`
--   build/ddplua tests/chaos/run.lua --only sigkill-ar   rows whose fault matches
--
-- Each row starts a real job (every launcher under `timeout 60`, a job id
-- of its own, DDP_TIMEOUT=5), makes one rank (or a launcher) fail, and
-- measures: seconds from launch to the job's end, whether the output names
-- the failing rank, the exit code(s), processes of the job left 3 s after
-- its end, and /dev/shm entries left (ddplua-<job id>*).  A row fails when
-- the time exceeds its bound, the rank is not named, an exit code is 0, or
-- anything is left behind.  Ends with "chaos: N passed, M failed".
local ffi = require "ffi"
pcall(ffi.cdef, [[
int poll(void *fds, unsigned long n, int timeout);
int getpid(void);
typedef struct { long tv_sec; long tv_usec; } chaos_timeval;
int gettimeofday(chaos_timeval *tv, void *tz);
]])
local function sleep(s) ffi.C.poll(nil, 0, math.floor(s * 1000)) end
local tv = ffi.new("chaos_timeval")
local function now() ffi.C.gettimeofday(tv, nil) return tonumber(tv.tv_sec) + tonumber(tv.tv_usec) * 1e-6 end

-- the specs' shell helpers (quoting, commands, files, the program under test)
package.path = "tests/?.lua;" .. package.path
local shell = require "helpers.shell"
local q, sh, slurp, writefile = shell.q, shell.sh, shell.slurp, shell.writefile
local DDPLUA = shell.ddplua
local TIMEOUT = 5   -- DDP_TIMEOUT of every job
local GRACE = 5     -- the launcher's default --grace (SIGTERM to SIGKILL)
local MARGIN = 5    -- for a loaded 2-core machine

local CLEAN = "env -u RANK -u WORLD_SIZE -u LOCAL_RANK -u LOCAL_WORLD_SIZE -u NODE_RANK -u GROUP_RANK "
  .. "-u MASTER_ADDR -u MASTER_PORT -u DDP_STORE_TOKEN -u DDP_TIMEOUT -u DDP_DEBUG -u DDP_JOB_ID -u DDP_LAUNCH_ID "
  .. "-u DDP_BACKEND -u DDP_GLOO_HOST "

-- What every worker runs first: ready() writes this rank's pid and its
-- launcher's pid (the parent) once the job has done one all_reduce, so the
-- runner can signal it from outside.
local PRELUDE = [[
local ffi = require "ffi"
pcall(ffi.cdef, "int poll(void *fds, unsigned long n, int timeout); int getpid(void); int getppid(void);")
local function sleep(s) ffi.C.poll(nil, 0, math.floor(s * 1000)) end
local ddp = require "ddp"
local DIR, F = os.getenv("CHAOS_DIR"), tonumber(os.getenv("CHAOS_RANK"))
ddp.init()
local R = ddp.rank()
ddp.all_reduce(ddp.ones(4))
local function ready()
  local f = io.open(DIR .. "/pid." .. R .. ".tmp", "w")
  f:write(ffi.C.getpid(), " ", ffi.C.getppid(), "\n")
  f:close()
  os.rename(DIR .. "/pid." .. R .. ".tmp", DIR .. "/pid." .. R)
end
ready()
local function loop(fault)  -- all_reduces until the job ends; fault(i) on the failing rank
  local t = ddp.ones(1024)
  for i = 1, 1e9 do
    if R == F and fault then fault(i) end
    ddp.all_reduce(t)
    t:fill_(1)
  end
end
]]

-- name: the fault; body: the worker script after PRELUDE; kill: what the
-- runner does from outside (nil: the rank fails by itself); bound: seconds
-- the job may take; names: the output must name the failing rank (false:
-- no rank fails, "-" in the table); transports: where the row makes sense.
local FAULTS = {
  { name = "exit-3", desc = "a rank exits with code 3",
    body = "loop(function(i) if i == 50 then os.exit(3) end end)" },
  { name = "segfault", desc = "a rank segfaults (a write through NULL)",
    body = "loop(function(i) if i == 50 then ffi.cast('int *', 0)[0] = 1 end end)" },
  { name = "lua-error", desc = "a Lua error on one rank",
    body = "loop(function(i) if i == 50 then error('chaos: boom') end end)" },
  { name = "endless-loop", desc = "an endless loop on one rank, the others in all_reduce",
    body = "loop(function(i) if i == 50 then while true do end end end)", timeout_bound = true },
  { name = "sigstop", desc = "SIGSTOP of one rank mid-job",
    body = "loop()", kill = "STOP", timeout_bound = true },
  { name = "sigkill-ar", desc = "SIGKILL of one rank in a loop of all_reduces",
    body = "loop()", kill = "KILL" },
  { name = "sigkill-ddp", desc = "SIGKILL of one rank mid DDP backward",
    body = [[
local nn = ddp.nn
ddp.manual_seed(0)
local model = ddp.DDP(nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10)))
local opt = ddp.optim.SGD(model:parameters(), { lr = 0.01 })
local x, y = ddp.randn(32, 64), ddp.randint(0, 10, { 32 })
while true do
  opt:zero_grad()
  local loss = nn.functional.cross_entropy(model(x), y)
  loss:backward()
  opt:step()
end
]], kill = "KILL" },
  { name = "launcher-kill9", desc = "kill -9 of the launcher (of node 1 under hier)",
    body = "loop()", kill = "KILL", target = "launcher", names = false },
  { name = "store-host-death", desc = "kill -9 of node 0's launcher (the store's host) while node 1 loops all_gather_object",
    body = "while true do ddp.all_gather_object({ R }) end", kill = "KILL", target = "store", names = "is gone",
    transports = { hier = true } },
}

-- transport: its DDP_BACKEND, launchers and ranks per launcher; the
-- failing rank is the last (on node 1 under hier).
local TRANSPORTS = {
  { name = "shm", backend = "shm", nodes = 1, nproc = 2 },
  { name = "gloo", backend = "gloo", nodes = 1, nproc = 2 },
  { name = "hier", backend = "hier", nodes = 2, nproc = 2 },
}

local SHORT = {
  ["exit-3/shm"] = true, ["segfault/shm"] = true, ["sigkill-ar/shm"] = true,
  ["sigkill-ar/gloo"] = true, ["launcher-kill9/shm"] = true, ["endless-loop/shm"] = true,
  ["sigkill-ddp/shm"] = true,
}

local short, only = false, nil
local i = 1
while arg[i] do
  if arg[i] == "--short" then short = true
  elseif arg[i] == "--only" then i = i + 1; only = arg[i]
  else io.stderr:write("usage: ddplua tests/chaos/run.lua [--short] [--only FAULT[/TRANSPORT]]\n") os.exit(2) end
  i = i + 1
end

local function free_port()
  for _ = 1, 50 do
    local p = math.random(20000, 60000)
    if sh("ss -Htln 'sport = :" .. p .. "' 2>/dev/null") == "" then return p end
  end
  return math.random(20000, 60000)
end

local seq = 0
local function run_row(fault, tr)
  seq = seq + 1
  local dir = sh("mktemp -d /tmp/ddplua-chaos.XXXXXX"):gsub("%s+$", "")
  local script = dir .. "/worker.lua"
  writefile(script, PRELUDE .. fault.body .. "\n")
  local id = ("chaos%d%d"):format(ffi.C.getpid(), seq)
  local world = tr.nodes * tr.nproc
  local frank = world - 1
  local port = free_port()
  local t0 = now()
  for node = 0, tr.nodes - 1 do
    local nodeargs = tr.nodes > 1 and ("--nnodes %d --node-rank %d --master-addr 127.0.0.1 --master-port %d ")
      :format(tr.nodes, node, port) or ""
    -- from a file, so that only the job's own processes name worker.lua
    writefile(dir .. "/launch" .. node .. ".sh", ("%sDDP_JOB_ID=%s DDP_STORE_TOKEN=chaostok DDP_TIMEOUT=%d "
      .. "DDP_BACKEND=%s CHAOS_DIR=%s CHAOS_RANK=%d timeout 60 %s --nproc %d %s%s </dev/null >%s 2>&1\n"
      .. "echo $? >%s.tmp && mv %s.tmp %s\n")
      :format(CLEAN, id, TIMEOUT, tr.backend, q(dir), frank, q(DDPLUA), tr.nproc, nodeargs, q(script),
              q(dir .. "/out" .. node), q(dir .. "/rc" .. node), q(dir .. "/rc" .. node), q(dir .. "/rc" .. node)))
    os.execute("sh " .. q(dir .. "/launch" .. node .. ".sh") .. " &")
  end
  local function ended()
    for node = 0, tr.nodes - 1 do
      if not slurp(dir .. "/rc" .. node) then return false end
    end
    return true
  end
  local note = ""
  if fault.kill then
    -- the target: the failing rank, the launcher of its node, or node 0's launcher
    local prank = fault.target == "store" and 0 or frank
    local pid, ppid
    local deadline = now() + 30
    while now() < deadline and not ended() do
      local s = slurp(dir .. "/pid." .. prank)
      if s then pid, ppid = s:match("(%d+) (%d+)") break end
      sleep(0.02)
    end
    if pid then
      sleep(0.5)  -- mid-job
      os.execute("kill -" .. fault.kill .. " " .. (fault.target and ppid or pid) .. " 2>/dev/null")
    else
      note = " (never ready)"
    end
  end
  while not ended() and now() - t0 < 70 do sleep(0.05) end
  local secs = now() - t0
  local out, rcs = {}, {}
  for node = 0, tr.nodes - 1 do
    out[#out + 1] = slurp(dir .. "/out" .. node) or ""
    rcs[#rcs + 1] = tonumber(slurp(dir .. "/rc" .. node) or "") or -1
  end
  out = table.concat(out, "\n")
  -- processes of the job (launchers, guardians, workers) still there 3 s on
  local pat = q("[" .. script:sub(1, 1) .. "]" .. script:sub(2))
  local left
  for _ = 1, 30 do
    left = sh("pgrep -f " .. pat .. " || true")
    if left == "" then break end
    sleep(0.1)
  end
  local nleft = 0
  for p in left:gmatch("%d+") do
    nleft = nleft + 1
    os.execute("kill -KILL " .. p .. " 2>/dev/null")
  end
  local shm = sh("ls /dev/shm 2>/dev/null | grep -F " .. q("ddplua-" .. id) .. " || true")
  local nshm = 0
  for f in shm:gmatch("[^\n]+") do
    nshm = nshm + 1
    os.remove("/dev/shm/" .. f)
  end
  -- named: the failing rank (or the store) in the output
  local named
  if fault.names == false then
    named = "-"
  elseif fault.names then
    named = out:find(fault.names, 1, true) and "yes" or "NO"
  else
    named = (out:find("rank " .. frank .. "[^%d]") or out:find("rank " .. frank .. "$")) and "yes" or "NO"
  end
  -- under store-host-death, node 1 is what must end by itself and say so
  if fault.target == "store" then
    named = ((slurp(dir .. "/out1") or ""):find("is gone", 1, true)) and "yes" or "NO"
  end
  local bound = (fault.timeout_bound and TIMEOUT + GRACE or 5) + MARGIN
  local zero = false
  for _, rc in ipairs(rcs) do if rc == 0 then zero = true end end
  local ok = secs <= bound and named ~= "NO" and not zero and nleft == 0 and nshm == 0
  if not ok or os.getenv("CHAOS_VERBOSE") then
    io.write(("---- %s / %s: output (%s)%s\n%s\n----\n"):format(fault.name, tr.name, dir, note,
      out:gsub("\n+$", "")))
  end
  os.execute("rm -rf " .. q(dir))
  return { fault = fault.name, transport = tr.name, secs = secs, bound = bound, named = named,
           rc = table.concat(rcs, "/"), left = nleft, shm = nshm, ok = ok }
end

local function fmt_row(c) return ("%-17s %-6s %8s %6s %-6s %-7s %5s %5s  %s\n"):format(unpack(c)) end
io.write(fmt_row { "fault", "trans", "seconds", "bound", "named", "exit", "procs", "shm", "result" })
io.flush()
local passed, failed = 0, 0
for _, fault in ipairs(FAULTS) do
  for _, tr in ipairs(TRANSPORTS) do
    local key = fault.name .. "/" .. tr.name
    local wanted = (not short or SHORT[key]) and (not only or key:find(only, 1, true))
    if wanted then
      if fault.transports and not fault.transports[tr.name] then
        if not short then io.write(fmt_row { fault.name, tr.name, "-", "-", "-", "-", "-", "-", "-" }) end
      else
        local r = run_row(fault, tr)
        io.write(fmt_row { r.fault, r.transport, ("%.1f"):format(r.secs), r.bound, r.named, r.rc, r.left, r.shm,
                           r.ok and "ok" or "FAIL" })
        if r.ok then passed = passed + 1 else failed = failed + 1 end
      end
      io.flush()
    end
  end
end
io.write(("chaos: %d passed, %d failed\n"):format(passed, failed))
os.exit(failed == 0 and 0 or 1)
