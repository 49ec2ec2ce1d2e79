-- Tensor collectives over shared memory (runtime/dist/pg_shm.c through ddp.dist):
-- real jobs of `ddplua --nproc N` (N = 2, 3, 4), every op and dtype over
-- several sizes (one larger than a slot) checked against what each rank
-- computes itself from all ranks' inputs; broadcast from every src,
-- all_gather, reduce_scatter, back-to-back calls, DDP_DEBUG's mismatch
-- check, a timeout naming the missing rank, and no arena left in /dev/shm
-- (also after a rank is killed).  Every run is bounded by `timeout` and
-- every test checks that no process of its scripts is left.
local jobs = require "helpers.jobs"
local q, sh, tempname, slurp = jobs.q, jobs.sh, jobs.tempname, jobs.slurp
local ddplua, CLEAN = jobs.ddplua, jobs.CLEAN
local function script(body) return jobs.script(body, "coll") end

local job_n = 0
-- Runs `ddplua <args>` under `timeout 120` with a job id of its own;
-- returns stdout, stderr, exit code and the job id.
local function run(args, env)
  job_n = job_n + 1
  local id = ("colltest%d-%d"):format(math.random(1, 1e9), job_n)
  local out, err = tempname(), tempname()
  local rc = sh(CLEAN .. "DDP_JOB_ID=" .. id .. " " .. (env or "") .. " timeout 120 " .. q(ddplua) .. " " .. args
    .. " </dev/null >" .. q(out) .. " 2>" .. q(err) .. "; echo $?")
  return slurp(out), slurp(err), tonumber(rc:match("(%d+)%s*$")), id
end

local function arenas_left(id)
  return sh("ls /dev/shm 2>/dev/null | grep -F " .. q("ddplua-" .. id) .. " || true")
end

local CHECKS = [[
ddp.init()
local r, w = ddp.rank(), ddp.world_size()
local dtypes = { "float32", "float64", "int64", "int32", "uint8", "bool", "bfloat16", "float16" }
local floats = { float32 = true, float64 = true, bfloat16 = true, float16 = true }
local ops = { "sum", "avg", "max", "min", "prod" }
local checked = 0

-- rank q's input as float64 values: small integers, exact in every dtype
local function input64(q, n, op, dtype)
  local v = ((ddp.arange(n, { dtype = "float64" }) * (q + 3) + q * 5) % 7)
  if op == "prod" then v = v % 3 + 1 end
  if dtype == "bool" then v = v % 2 end
  return v
end
local function combine(op, a, b)
  if op == "sum" or op == "avg" then return a + b end
  if op == "prod" then return a * b end
  if op == "max" then return ddp.maximum(a, b) end
  return ddp.minimum(a, b)
end
local function same(what, got, want64, dtype, tol)
  assert(got:numel() == want64:numel(), what .. ": numel " .. got:numel() .. " ~= " .. want64:numel())
  assert(got:dtype() == dtype, what .. ": dtype " .. got:dtype())
  checked = checked + 1
  if got:numel() == 0 then return end
  local want = want64:to(dtype):to("float64")
  local d = (got:to("float64"):reshape(-1) - want:reshape(-1)):abs():max():item()
  assert(d <= (tol or 0), what .. ": off by " .. d)
end

local sizes = { 0, 1, 7, 1000 }
for _, dt in ipairs(dtypes) do
  for _, op in ipairs(ops) do
    if op ~= "avg" or floats[dt] then
      for _, n in ipairs(sizes) do
        local t = input64(r, n, op, dt):to(dt)
        ddp.all_reduce(t, op)
        local e = input64(0, n, op, dt)
        local eop = op
        if dt == "bool" then eop = (op == "sum" or op == "max") and "max" or "min" end
        for q = 1, w - 1 do e = combine(eop, e, input64(q, n, op, dt)) end
        if op == "avg" then e = e / w end
        same(("all_reduce %s %s n=%d"):format(op, dt, n), t, e, dt, op == "avg" and 0.02 or 0)
      end
    end
  end
  local ok, err = pcall(ddp.all_reduce, ddp.ones(2, { dtype = dt }), floats[dt] and "mean" or "avg")
  assert(not ok and err:find(floats[dt] and "op must be" or "avg needs a floating dtype", 1, true), err)
end
-- larger than a slot: chunked
local BIG = 5 * 1000 * 1000 + 3
for _, c in ipairs { { "float32", "sum" }, { "int64", "max" }, { "bfloat16", "min" } } do
  local dt, op = c[1], c[2]
  local t = input64(r, BIG, op, dt):to(dt)
  ddp.all_reduce(t, op)
  local e = input64(0, BIG, op, dt)
  for q = 1, w - 1 do e = combine(op, e, input64(q, BIG, op, dt)) end
  same("big all_reduce " .. dt .. " " .. op, t, e, dt)
end
-- non-contiguous: through a contiguous copy
local nc = (ddp.arange(12, { dtype = "float64" }):reshape(3, 4) * (r + 1)):t()
ddp.all_reduce(nc)
same("non-contiguous", nc, ddp.arange(12, { dtype = "float64" }):reshape(3, 4):t() * (w * (w + 1) / 2), "float64")

-- broadcast from every src
for src = 0, w - 1 do
  for _, dt in ipairs(dtypes) do
    for _, n in ipairs { 0, 7, 1000 } do
      local t = input64(r, n, "sum", dt):to(dt)
      assert(ddp.broadcast(t, src) == t)
      same(("broadcast src=%d %s n=%d"):format(src, dt, n), t, input64(src, n, "sum", dt), dt)
    end
  end
end
local bt = input64(r, BIG, "sum", "float32"):to("float32")
ddp.broadcast(bt, w - 1)
same("big broadcast", bt, input64(w - 1, BIG, "sum", "float32"), "float32")

-- all_gather: the ranks' tensors along dim 0
for _, dt in ipairs(dtypes) do
  for _, n in ipairs(sizes) do
    local g = ddp.all_gather(input64(r, n, "sum", dt):to(dt))
    local parts = {}
    for q = 0, w - 1 do parts[q + 1] = input64(q, n, "sum", dt) end
    same(("all_gather %s n=%d"):format(dt, n), g, ddp.cat(parts, 0), dt)
  end
end
local g2 = ddp.all_gather(ddp.full({ 2, 3 }, r, { dtype = "int32" }))
assert(g2:shape()[1] == 2 * w and g2:shape()[2] == 3, "all_gather 2-d shape")
assert(g2:get(2 * w - 1, 2) == w - 1, "all_gather 2-d value")
local gb = ddp.all_gather(input64(r, BIG, "sum", "float32"):to("float32"))
assert(gb:numel() == BIG * w and gb:narrow(0, BIG * (w - 1), BIG):equal(input64(w - 1, BIG, "sum", "float32"):to("float32")))

-- reduce_scatter: this rank's slice of the reduction
for _, op in ipairs { "sum", "max", "prod" } do
  for _, k in ipairs { 0, 1, 5 } do
    local n = w * k
    local rs = ddp.reduce_scatter(input64(r, n, op, "int64"):to("int64"), op)
    local e = input64(0, n, op, "int64")
    for q = 1, w - 1 do e = combine(op, e, input64(q, n, op, "int64")) end
    same(("reduce_scatter %s n=%d"):format(op, n), rs, e:narrow(0, r * k, k), "int64")
  end
end
local rs2 = ddp.reduce_scatter(ddp.ones(w * 2, 3), "sum")
assert(rs2:shape()[1] == 2 and rs2:shape()[2] == 3 and rs2:sum():item() == 6 * w, "reduce_scatter 2-d")
if w > 1 then
  local ok, err = pcall(ddp.reduce_scatter, ddp.ones(w * 2 + 1))
  assert(not ok and err:find("is not divisible by the world size " .. w, 1, true), err)
end
local ok0, err0 = pcall(ddp.reduce_scatter, ddp.tensor(1))
assert(not ok0 and err0:find("0-dim", 1, true), tostring(err0))

-- reduce_scatter over every dtype and op, and larger than a slot
for _, dt in ipairs(dtypes) do
  for _, op in ipairs(ops) do
    if op ~= "avg" or floats[dt] then
      for _, k in ipairs { 0, 3 } do
        local n = w * k
        local rs = ddp.reduce_scatter(input64(r, n, op, dt):to(dt), op)
        local eop = op
        if dt == "bool" then eop = (op == "sum" or op == "max") and "max" or "min" end
        local e = input64(0, n, op, dt)
        for q = 1, w - 1 do e = combine(eop, e, input64(q, n, op, dt)) end
        if op == "avg" then e = e / w end
        same(("reduce_scatter %s %s n=%d"):format(op, dt, n), rs, e:narrow(0, r * k, k), dt,
             op == "avg" and 0.02 or 0)
      end
    end
  end
end
do
  local k = 1500001
  local rs = ddp.reduce_scatter(input64(r, w * k, "sum", "float32"):to("float32"))
  local e = input64(0, w * k, "sum", "float32")
  for q = 1, w - 1 do e = e + input64(q, w * k, "sum", "float32") end
  same("big reduce_scatter", rs, e:narrow(0, r * k, k), "float32")
end

-- send/recv around a ring, every dtype, up to several chunks
if w > 1 then
  local nxt, prv = (r + 1) % w, (r - 1) % w
  for _, dt in ipairs(dtypes) do
    for _, n in ipairs { 0, 7, 1000, dt == "float32" and BIG or 3 } do
      local out = input64(r, n, "sum", dt):to(dt)
      local inb = ddp.zeros(n, { dtype = dt })
      if r % 2 == 0 then ddp.send(out, nxt) ddp.recv(inb, prv)
      else ddp.recv(inb, prv) ddp.send(out, nxt) end
      same(("recv %s n=%d"):format(dt, n), inb, input64(prv, n, "sum", dt), dt)
    end
  end
  -- many small messages in a row, both directions between 0 and 1
  if r < 2 then
    local other = 1 - r
    local got = ddp.zeros(3, { dtype = "int64" })
    for i = 1, 50 do
      -- (as with torch.distributed, a send may wait for its recv: one side first)
      local mine = ddp.full({ 3 }, 100 * i + r, { dtype = "int64" })
      if r == 0 then ddp.send(mine, other) ddp.recv(got, other)
      else ddp.recv(got, other) ddp.send(mine, other) end
      assert(got:get(1) == 100 * i + other, "ping-pong #" .. i)
    end
  end
  local ok, err = pcall(ddp.send, ddp.ones(2), r)
  assert(not ok and err:find("dst must be another rank in 0..", 1, true), err)
  ok, err = pcall(ddp.recv, ddp.ones(2), w)
  assert(not ok and err:find("src must be another rank in 0..", 1, true), err)
  checked = checked + 1
end

-- asynchronous all-reduce: queued in order, waited in any order
do
  local hs, ts = {}, {}
  for i = 1, 6 do
    ts[i] = ddp.full({ i == 6 and BIG or 1000 }, i + r, { dtype = "float32" })
    hs[i] = ddp.all_reduce_async(ts[i], i % 2 == 0 and "max" or "sum")
  end
  local nc = (ddp.arange(12, { dtype = "float64" }):reshape(3, 4) * (r + 1)):t()
  local hnc = ddp.all_reduce_async(nc, { timeout = 60 })
  for i = 6, 1, -1 do
    assert(hs[i]:wait() == ts[i])
    assert(hs[i]:done() == true)
    local want = i % 2 == 0 and i + w - 1 or w * i + w * (w - 1) / 2
    same("async #" .. i, ts[i], ddp.full({ ts[i]:numel() }, want, { dtype = "float64" }), "float32")
  end
  hnc:wait()
  same("async non-contiguous", nc, ddp.arange(12, { dtype = "float64" }):reshape(3, 4):t() * (w * (w + 1) / 2), "float64")
  -- a blocking call waits for the queue first
  local a = ddp.full({ 10 }, 1)
  local h = ddp.all_reduce_async(a)
  local b = ddp.full({ 10 }, 2)
  ddp.all_reduce(b)
  assert(h:done() and a:get(0) == w and b:get(0) == 2 * w, "async before sync")
  assert(tostring(h):find("done", 1, true))
  local ok, err = pcall(ddp.all_reduce_async, ddp.ones(2, { dtype = "int64" }), "avg")
  assert(not ok and err:find("avg needs a floating dtype", 1, true), err)
end

-- all_gather_into_tensor: into a buffer of world blocks, from a tensor of
-- its own or from this rank's block in place (uneven sizes, other dtypes)
do
  for _, n in ipairs { 1, 7, 1000 } do
    for _, dt in ipairs { "float32", "int64", "bfloat16" } do
      local want = {}
      for q = 0, w - 1 do for i = 0, n - 1 do want[#want + 1] = q * 10 + i % 7 end end
      local out = ddp.zeros(w * n, { dtype = dt })
      local input = (ddp.arange(n, { dtype = "float64" }) % 7 + r * 10):to(dt)
      assert(ddp.all_gather_into_tensor(out, input) == out)
      same("all_gather_into_tensor " .. dt .. " x" .. n, out, ddp.tensor(want, { dtype = "float64" }), dt)
      local buf = ddp.full({ w * n }, -1, { dtype = dt })
      buf:narrow(0, r * n, n):copy_(input)
      ddp.all_gather_into_tensor(buf, buf:narrow(0, r * n, n))
      same("all_gather_into_tensor in place " .. dt .. " x" .. n, buf, ddp.tensor(want, { dtype = "float64" }), dt)
      checked = checked + 2
    end
  end
  local ok, err = pcall(ddp.all_gather_into_tensor, ddp.zeros(w * 3 + 1), ddp.zeros(3))
  assert(not ok and err:find(("out has %d elements; it must hold the %d ranks' 3 each"):format(w * 3 + 1, w), 1, true), err)
  ok, err = pcall(ddp.all_gather_into_tensor, ddp.zeros(w * 3), ddp.zeros(3, { dtype = "float64" }))
  assert(not ok and err:find("out is float32, input float64", 1, true), err)
  ok, err = pcall(ddp.all_gather_into_tensor, ddp.zeros(w, 3), ddp.zeros(3))
  assert(not ok and err:find("out must be a contiguous 1-D tensor", 1, true), err)
end

-- per-call options
do
  local t = ddp.ones(5)
  ddp.all_reduce(t, "sum", { timeout = 30 })
  ddp.all_reduce(t, { timeout = 30 })
  assert(t:get(0) == w * w, "per-call timeout")
  ddp.broadcast(t, 0, { timeout = 30 })
  ddp.barrier({ timeout = 30 })
  ddp.barrier("named", { timeout = 30 })
  local ok, err = pcall(ddp.all_reduce, t, "sum", { timeout = -1 })
  assert(not ok and err:find("timeout must be a positive number of seconds", 1, true), err)
  ok, err = pcall(ddp.all_gather, t, { tmeout = 1 })
  assert(not ok and err:find("unknown option \"tmeout\"", 1, true), err)
  checked = checked + 1
end

-- back to back
local t = ddp.ones(4)
for i = 1, 100 do
  t:fill_(i + r)
  ddp.all_reduce(t)
  assert(t:get(3) == w * i + w * (w - 1) / 2, "back-to-back #" .. i)
end
ddp.barrier()
print("CHECKED " .. checked .. " " .. ddp.backend())
]]

describe("ddp tensor collectives (shm)", function()
  after_each(jobs.no_strays)
  teardown(jobs.cleanup)

  for _, n in ipairs { 1, 2, 3, 4 } do
    it("computes every op and dtype on " .. n .. " rank(s)", function()
      local s = script(CHECKS)
      local out, err, rc, id = run((n > 1 and "--nproc " .. n .. " " or "") .. q(s))
      assert.equals(0, rc, err)
      local seen = 0
      for c in out:gmatch("CHECKED (%d+)") do
        seen = seen + 1
        assert.is_true(tonumber(c) > 150, out)
      end
      assert.equals(n, seen, out)
      assert.equals("", arenas_left(id))
    end)
  end

  it("names the rank that skipped a collective, and leaves no arena", function()
    local s = script([[
ddp.init()
local t = ddp.ones(3)
ddp.all_reduce(t)
if ddp.rank() == 1 then sleep(6) os.exit(0) end
ddp.all_reduce(t)
]])
    local _, err, rc, id = run("--nproc 3 " .. q(s), "DDP_TIMEOUT=1")
    assert.is_not.equals(0, rc)
    assert.truthy(err:find("all_reduce #2: timed out after 1 s waiting for rank 1", 1, true), err)
    assert.equals("", arenas_left(id))
  end)

  it("leaves no arena when a rank is killed", function()
    local s = script([[
ddp.init()
ddp.all_reduce(ddp.ones(3))
-- as if a rank had died before rank 0 unlinked an arena: the launcher
-- removes what is left of the job's arenas
if ddp.rank() == 0 then
  assert(io.open("/dev/shm/ddplua-" .. os.getenv("DDP_JOB_ID") .. "-" .. os.getenv("DDP_LAUNCH_ID") .. "-99", "w")):close()
end
ddp.barrier()
if ddp.rank() == 1 then ffi.C.kill(ffi.C.getpid(), 9) end
ddp.all_reduce(ddp.ones(3))
]])
    local _, err, rc, id = run("--nproc 2 " .. q(s), "DDP_TIMEOUT=5")
    assert.is_not.equals(0, rc)
    assert.truthy(err:find("SIGKILL", 1, true), err)
    assert.equals("", arenas_left(id))
  end)

  it("keeps two launches with one job id apart: one ending never removes the other's arena", function()
    -- two job steps of one SLURM allocation share SLURM_JOB_ID (and so the
    -- job id): A ends while B's rank 0 has made a send/recv link (a file in
    -- /dev/shm until rank 1 maps it) and rank 1 has not mapped it yet
    local dir = require("helpers.shell").tempdir()
    local id = "twojobs" .. dir:match("[%w_]+$")  -- unique: the temporary directory's name
    local a = script(([[
local dir = %q
ddp.init()
ddp.all_reduce(ddp.ones(3))
if ddp.rank() == 0 then io.open(dir .. "/a_ready", "w"):close() end
while not io.open(dir .. "/a_go") do sleep(0.02) end
ddp.all_reduce(ddp.ones(3))
]]):format(dir))
    local b = script(([[
local dir = %q
ddp.init()
local t
for _ = 1, 100 do t = ddp.all_reduce(ddp.ones(1000)) end
if ddp.rank() == 0 then
  ddp.send(t * 2, 1)  -- buffered: returns before rank 1 receives
  io.open(dir .. "/b_linked", "w"):close()
else
  while not io.open(dir .. "/a_done") do sleep(0.02) end
  ddp.recv(t, 0)
end
for _ = 1, 100 do ddp.all_reduce(ddp.ones(10)) end
print("B ok " .. t:max():item())
]]):format(dir))
    local function start(s, tag)
      local f = dir .. "/" .. tag
      sh("(" .. CLEAN .. "SLURM_JOB_ID=" .. id .. " DDP_TIMEOUT=30 timeout 60 " .. q(ddplua) .. " --nproc 2 " .. q(s)
        .. " </dev/null >" .. q(f .. ".out") .. " 2>" .. q(f .. ".err") .. "; echo $? >" .. q(f .. ".rc")
        .. ") >/dev/null 2>&1 &")
      return f
    end
    local function wait_for(cond, what)
      for _ = 1, 400 do
        if cond() then return end
        os.execute("sleep 0.05")
      end
      error("timed out waiting for " .. what)
    end
    local function exists(p) local f = io.open(p) if f then f:close() end return f ~= nil end
    local fa = start(a, "a")
    wait_for(function() return exists(dir .. "/a_ready") end, "job A")
    local fb = start(b, "b")
    wait_for(function() return exists(dir .. "/b_linked") end, "job B's link")
    assert.is_not.equals("", arenas_left(id))  -- B's link, not mapped by rank 1 yet
    io.open(dir .. "/a_go", "w"):close()
    wait_for(function() return exists(fa .. ".rc") end, "job A's end")
    assert.equals("0", slurp(fa .. ".rc"):match("%d+"), slurp(fa .. ".err"))
    io.open(dir .. "/a_done", "w"):close()
    wait_for(function() return exists(fb .. ".rc") end, "job B's end")
    assert.equals("0", slurp(fb .. ".rc"):match("%d+"), slurp(fb .. ".err"))
    assert.equals("[1] B ok 4", slurp(fb .. ".out"):match("%[1%] B ok %d+"))
    assert.equals("", arenas_left(id))
  end)

  it("reports mismatched collectives, with or without DDP_DEBUG=1", function()
    local s = script([[
ddp.init()
ddp.all_reduce(ddp.ones(4))
if ddp.rank() == 0 then ddp.all_reduce(ddp.ones(4), "max") else ddp.broadcast(ddp.ones(5, { dtype = "int64" }), 0) end
]])
    for _, env in ipairs { "DDP_DEBUG=1 DDP_TIMEOUT=10", "DDP_TIMEOUT=10" } do
      local _, err, rc = run("--nproc 2 " .. q(s), env)
      assert.is_not.equals(0, rc)
      assert.truthy(err:find("#2: mismatched collectives: rank 0 called all_reduce(max) #2 float32 x4; "
        .. "rank 1 called broadcast(src 0) #2 int64 x5", 1, true), err)
    end
  end)

  it("prints all_reduce bandwidth on 2 ranks", function()
    local s = script([[
ddp.init()
local ffi = require "ffi"
pcall(ffi.cdef, "typedef struct { long s, ns; } ts_t; int clock_gettime(int, ts_t *);")
local ts = ffi.new("ts_t")
local function now() ffi.C.clock_gettime(1, ts) return tonumber(ts.s) + tonumber(ts.ns) * 1e-9 end
for _, bytes in ipairs { 4096, 2 ^ 20, 16 * 2 ^ 20, 64 * 2 ^ 20 } do
  local t = ddp.ones(bytes / 4)
  ddp.all_reduce(t)
  local iters = bytes <= 4096 and 2000 or bytes <= 2 ^ 20 and 100 or 10
  ddp.barrier()
  local t0 = now()
  for _ = 1, iters do ddp.all_reduce(t) end
  local dt = (now() - t0) / iters
  local w = ddp.world_size()
  ddp.print(("BW all_reduce float32 %9d B: %9.1f us/op, bus %6.2f GB/s"):format(
    bytes, dt * 1e6, 2 * (w - 1) / w * bytes / dt / 1e9))
end
]])
    local out, err, rc = run("--nproc 2 " .. q(s))
    assert.equals(0, rc, err)
    io.stderr:write("\n" .. out:gsub("%[0%] ", ""))
    assert.equals(4, select(2, out:gsub("BW all_reduce", "")))
  end)
end)

local free_port = jobs.free_port

-- Runs the launchers of a 2-node job at once, node 1's command prefixed
-- by wrap1 (say, `ip netns exec ...`); returns both outputs and codes.
local function two_nodes(args, addr, wrap1, env)
  local port = free_port()
  local res = {}
  local cmd = {}
  for node = 0, 1 do
    local out, err, rc = tempname(), tempname(), tempname()
    res[node] = { out = out, err = err, rc = rc, id = ("mnode%d-%d"):format(math.random(1, 1e9), node) }
    cmd[#cmd + 1] = ("( %s %sDDP_JOB_ID=%s DDP_STORE_TOKEN=mntoken %s timeout 120 %s --nnodes 2 --node-rank %d "
      .. "--master-addr %s --master-port %d %s </dev/null >%s 2>%s; echo $? >%s ) &")
      :format(node == 1 and (wrap1 or "") or "", CLEAN, res[node].id, env or "", q(ddplua), node, addr, port,
              args, q(out), q(err), q(rc))
  end
  sh(table.concat(cmd, " ") .. " wait")
  for node = 0, 1 do
    local r = res[node]
    r.out, r.err, r.rc = slurp(r.out), slurp(r.err), tonumber(slurp(r.rc))
  end
  return res
end

local function checks_passed(res, per_node, backend)
  for node = 0, 1 do
    local r = res[node]
    assert.equals(0, r.rc, r.err .. r.out)
    local seen = 0
    for c, b in r.out:gmatch("CHECKED (%d+) (%a+)") do
      seen = seen + 1
      assert.is_true(tonumber(c) > 150, r.out)
      assert.equals(backend, b)
    end
    assert.equals(per_node, seen, r.out)
    assert.equals("", arenas_left(r.id))
  end
end

describe("ddp tensor collectives (gloo, hier)", function()
  after_each(jobs.no_strays)
  teardown(jobs.cleanup)

  for _, c in ipairs { { "gloo", 2 }, { "gloo", 3 }, { "hier", 3 } } do
    it(("computes every op and dtype with DDP_BACKEND=%s on %d ranks"):format(c[1], c[2]), function()
      local out, err, rc, id = run("--nproc " .. c[2] .. " " .. q(script(CHECKS)), "DDP_BACKEND=" .. c[1])
      assert.equals(0, rc, err)
      local seen = 0
      for _, b in out:gmatch("CHECKED (%d+) (%a+)") do
        seen = seen + 1
        assert.equals(c[1], b)
      end
      assert.equals(c[2], seen, out)
      assert.equals("", arenas_left(id))
    end)
  end

  it("runs a 2-node job of two launchers on this machine (shm within, Gloo across)", function()
    checks_passed(two_nodes("--nproc 2 " .. q(script(CHECKS)), "127.0.0.1"), 2, "hier")
  end)

  it("runs a 2-node job across two network namespaces", function()
    -- names and a subnet of this process's own (math.random is unseeded,
    -- so two runs at once would pick the same and one would skip)
    local ffi = require "ffi"
    pcall(ffi.cdef, "int getpid(void);")
    local pid = ffi.C.getpid()
    local tag = ("dl%d"):format(pid % 100000)
    local net = ("10.%d.%d"):format(100 + pid % 150, math.floor(pid / 150) % 250)
    local setup = table.concat({
      "ip netns add " .. tag,
      "ip link add " .. tag .. "a type veth peer name " .. tag .. "b",
      "ip link set " .. tag .. "b netns " .. tag,
      "ip addr add " .. net .. ".1/24 dev " .. tag .. "a",
      "ip link set " .. tag .. "a up",
      "ip netns exec " .. tag .. " ip addr add " .. net .. ".2/24 dev " .. tag .. "b",
      "ip netns exec " .. tag .. " ip link set " .. tag .. "b up",
      "ip netns exec " .. tag .. " ip link set lo up",
    }, " && ")
    local why = sh("{ " .. setup .. " ; } 2>&1 >/dev/null; echo rc=$?")
    if not why:find("rc=0", 1, true) then
      sh("ip netns del " .. tag .. " 2>/dev/null; ip link del " .. tag .. "a 2>/dev/null")
      pending("SKIP: cannot create network namespaces here (needs root and CAP_NET_ADMIN): "
        .. why:gsub("%s*rc=%d+%s*$", ""):gsub("\n", " "))
      return
    end
    local ok, res = pcall(two_nodes, "--nproc 2 " .. q(script(CHECKS)), net .. ".1",
                          "ip netns exec " .. tag .. " ")
    sh("ip netns del " .. tag .. " 2>/dev/null; ip link del " .. tag .. "a 2>/dev/null")
    assert(ok, res)
    checks_passed(res, 2, "hier")
  end)

  it("makes the other node fail within seconds when a rank exits", function()
    local s = script([[
ddp.init()
ddp.all_reduce(ddp.ones(3))
if ddp.rank() == 3 then os.exit(0) end
local ok, err = pcall(ddp.all_reduce, ddp.ones(3))
io.stderr:write("RESULT ", tostring(ok), " ", tostring(err), "\n")
os.exit(ok and 0 or 1)
]])
    local t0 = os.time()
    local res = two_nodes("--nproc 2 " .. q(s), "127.0.0.1")
    assert.is_true(os.time() - t0 < 30)
    assert.is_not.equals(0, res[0].rc)
    assert.truthy(res[0].err:find("RESULT false", 1, true), res[0].err)
    -- global ranks and the user's call, not node-local ranks and the
    -- node-local broadcast that ends a hier all_reduce
    local all = res[0].err .. res[1].err
    assert.truthy(res[1].err:find("all_reduce #2: rank 3 (pid ", 1, true), all)
    assert.falsy(all:find("rank 1 (pid ", 1, true), all)
    assert.falsy(all:find("broadcast", 1, true), all)
  end)
end)

describe("ddp collectives that go wrong", function()
  after_each(jobs.no_strays)
  teardown(jobs.cleanup)

  for _, b in ipairs { "shm", "gloo" } do
    it("fails the others within seconds, naming the rank (" .. b .. ")", function()
      local s = script([[
ddp.init()
ddp.all_reduce(ddp.ones(3))
if ddp.rank() == 1 then os.exit(0) end
local t0 = os.time()
local ok, err = pcall(ddp.all_reduce, ddp.ones(3))
assert(not ok)
io.stderr:write("RESULT ", err, "\n")
assert(os.time() - t0 < 10, "took too long")
]])
      local _, err, rc = run("--nproc 2 " .. q(s), "DDP_BACKEND=" .. b)
      assert.equals(0, rc, err)
      assert.truthy(err:find("RESULT", 1, true), err)
      if b == "shm" then
        assert.truthy(err:find("all_reduce #2: rank 1 (pid ", 1, true), err)
        assert.truthy(err:find("has exited", 1, true), err)
      end
    end)
  end

  it("names mismatched calls over Gloo on every rank, with or without DDP_DEBUG=1", function()
    -- op, size (small and large: the data in the descriptor's message, or
    -- after it) and kind; without the check Gloo returned garbage and exit
    -- 0, or crashed; DDP_DEBUG=1 changes nothing over Gloo
    local s = script([[
ddp.init()
ddp.all_reduce(ddp.ones(4))
local n = tonumber(os.getenv("N" .. ddp.rank()))
local op = os.getenv("OP" .. ddp.rank()) or "sum"
if os.getenv("BC" .. ddp.rank()) then ddp.broadcast(ddp.ones(n), 0) else ddp.all_reduce(ddp.ones(n), op) end
]])
    local cases = {
      { "N0=4 N1=100005 OP0=max", "rank 0 called all_reduce(max) #2 float32 x4; rank 1 called all_reduce(sum) #2 float32 x100005" },
      { "N0=1048576 N1=2097152", "rank 0 called all_reduce(sum) #2 float32 x1048576; rank 1 called all_reduce(sum) #2 float32 x2097152" },
      { "N0=1024 N1=1024 OP1=max", "rank 0 called all_reduce(sum) #2 float32 x1024; rank 1 called all_reduce(max) #2 float32 x1024" },
      { "N0=1024 N1=1024 BC1=1", "rank 0 called all_reduce(sum) #2 float32 x1024; rank 1 called broadcast(src 0) #2 float32 x1024" },
    }
    for _, c in ipairs(cases) do
      for _, dbg in ipairs { "DDP_DEBUG=1 ", "" } do
        local _, err, rc = run("--nproc 2 " .. q(s), dbg .. c[1] .. " DDP_BACKEND=gloo DDP_TIMEOUT=10")
        assert.is_not.equals(0, rc)
        local _, n = err:gsub(" #2: mismatched collectives: " .. c[2]:gsub("%p", "%%%0"), "")
        assert.is_true(n >= 2, err)  -- every rank names its own call (the launcher may repeat a line)
        assert.falsy(err:find("SIGABRT", 1, true), err)
      end
    end
  end)

  it("names small Gloo calls of different sizes on every rank, never a fatal exit 70", function()
    -- both under 64 KiB: the smaller rank's buffer used to meet the larger
    -- message inside Gloo, whose network thread then ended the process
    -- ("op.preamble.length <= op.nbytes", exit 70); now every call's first
    -- message carries its descriptor and compares before any data is used
    local s = script([[
ddp.init()
ddp.all_reduce(ddp.ones(4))
local n = tonumber(os.getenv("N" .. ddp.rank()))
local kind = os.getenv("K") or "all_reduce"
if kind == "broadcast" then ddp.broadcast(ddp.ones(n), 0)
elseif kind == "all_gather" then ddp.all_gather(ddp.ones(n))
elseif kind == "reduce_scatter" then ddp.reduce_scatter(ddp.ones(n))
else ddp.all_reduce(ddp.ones(n)) end
]])
    local cases = {
      { "N0=4 N1=4000", "rank 0 called all_reduce(sum) #2 float32 x4; rank 1 called all_reduce(sum) #2 float32 x4000" },
      { "N0=4000 N1=4", "rank 0 called all_reduce(sum) #2 float32 x4000; rank 1 called all_reduce(sum) #2 float32 x4" },
      { "N0=16 N1=16000", "rank 0 called all_reduce(sum) #2 float32 x16; rank 1 called all_reduce(sum) #2 float32 x16000" },
      { "K=broadcast N0=4 N1=4000", "rank 0 called broadcast(src 0) #2 float32 x4; rank 1 called broadcast(src 0) #2 float32 x4000" },
      { "K=all_gather N0=8 N1=800", "rank 0 called all_gather #2 float32 x8; rank 1 called all_gather #2 float32 x800" },
      { "K=reduce_scatter N0=8 N1=800", "rank 0 called reduce_scatter(sum) #2 float32 x8; rank 1 called reduce_scatter(sum) #2 float32 x800" },
    }
    for _, c in ipairs(cases) do
      local _, err, rc = run("--nproc 2 " .. q(s), c[1] .. " DDP_BACKEND=gloo DDP_TIMEOUT=10")
      assert.is_not.equals(0, rc, err)
      assert.is_not.equals(70, rc, err)
      assert.falsy(err:find("fatal: Gloo", 1, true), err)
      local want = " #2: mismatched collectives: " .. c[2]
      for r = 0, 1 do  -- each rank's own line, not the launcher's repeat of one
        assert.truthy(err:find("[" .. r .. "] ddplua: ", 1, true) and err:find("%[" .. r .. "%] [^\n]*"
          .. want:gsub("%p", "%%%0")), err)
      end
    end
  end)

  it("names the size mismatch of a send and a recv", function()
    local s = script([[
ddp.init()
if ddp.rank() == 0 then ddp.send(ddp.ones(4), 1)
else
  local ok, err = pcall(ddp.recv, ddp.zeros(5), 0)
  io.stderr:write("RESULT ", tostring(err), "\n")
end
]])
    for _, b in ipairs { "shm", "gloo" } do
      local _, err = run("--nproc 2 " .. q(s), "DDP_TIMEOUT=5 DDP_BACKEND=" .. b)
      assert.truthy(err:find("ddp.recv: rank 0 sent 16 bytes but this rank receives 20", 1, true), err)
    end
  end)

  it("times out a call with a per-call timeout, naming the late rank", function()
    local s = script([[
ddp.init()
if ddp.rank() == 1 then sleep(4) end
local ok, err = pcall(ddp.all_reduce, ddp.ones(3), "sum", { timeout = 1 })
if ddp.rank() == 0 then io.stderr:write("RESULT ", tostring(err), "\n") end
]])
    local _, err = run("--nproc 2 " .. q(s))
    assert.truthy(err:find("ddp.all_reduce #1: timed out after 1 s waiting for rank 1", 1, true), err)
  end)

  it("names the late rank of a Gloo timeout (through the store)", function()
    local s = script([[
ddp.init()
ddp.barrier()
if ddp.rank() == 2 then sleep(5) os.exit(0) end
local ok, err = pcall(ddp.all_reduce, ddp.ones(3), "sum", { timeout = 1 })
io.stderr:write("RESULT ", tostring(err), "\n")
]])
    local _, err = run("--nproc 3 " .. q(s), "DDP_BACKEND=gloo")
    local _, n = err:gsub("ddp.all_reduce #2: timed out after 1 s waiting for rank 2 to arrive", "")
    assert.equals(2, n, err)
  end)
end)
