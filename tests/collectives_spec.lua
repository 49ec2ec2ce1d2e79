-- Tensor collectives over shared memory (runtime/shm.c through ddp.dist):
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
local dtypes = { "float32", "float64", "int64", "int32", "uint8", "bool", "bfloat16" }
local floats = { float32 = true, float64 = true, bfloat16 = true }
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

-- back to back
local t = ddp.ones(4)
for i = 1, 100 do
  t:fill_(i + r)
  ddp.all_reduce(t)
  assert(t:get(3) == w * i + w * (w - 1) / 2, "back-to-back #" .. i)
end
ddp.barrier()
print("CHECKED " .. checked)
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
if ddp.rank() == 0 then assert(io.open("/dev/shm/ddplua-" .. os.getenv("DDP_JOB_ID") .. "-99", "w")):close() end
ddp.barrier()
if ddp.rank() == 1 then ffi.C.kill(ffi.C.getpid(), 9) end
ddp.all_reduce(ddp.ones(3))
]])
    local _, err, rc, id = run("--nproc 2 " .. q(s), "DDP_TIMEOUT=5")
    assert.is_not.equals(0, rc)
    assert.truthy(err:find("SIGKILL", 1, true), err)
    assert.equals("", arenas_left(id))
  end)

  it("reports mismatched collectives under DDP_DEBUG=1", function()
    local s = script([[
ddp.init()
ddp.all_reduce(ddp.ones(4))
if ddp.rank() == 0 then ddp.all_reduce(ddp.ones(4), "max") else ddp.broadcast(ddp.ones(5, { dtype = "int64" }), 0) end
]])
    local _, err, rc = run("--nproc 2 " .. q(s), "DDP_DEBUG=1 DDP_TIMEOUT=10")
    assert.is_not.equals(0, rc)
    assert.truthy(err:find("#2: mismatched collectives: rank 0 called all_reduce(max) #2 float32 x4; "
      .. "rank 1 called broadcast(src 0) #2 int64 x5", 1, true), err)
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
