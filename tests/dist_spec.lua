-- The process group (ddp.dist, on ddp itself): a world of one without the
-- launcher, then `ddplua --nproc 3`: ranks, printing, barriers, objects,
-- an init timeout naming the late rank, nodes started with different
-- --nproc or --nnodes, a bad environment.  Every run is
-- bounded by `timeout`, and every test ends by checking that no process of
-- its scripts is left.
local dist = require "ddp.dist"

local jobs = require "helpers.jobs"
local err_of = require("helpers.fails").message
local q = jobs.q
local ddplua, run = jobs.ddplua, jobs.run
local function script(body) return jobs.script(body, "dist") end

local function count(s, pat)
  local n = 0
  for _ in s:gmatch(pat) do n = n + 1 end
  return n
end

describe("ddp process group", function()
  after_each(jobs.no_strays)
  teardown(jobs.cleanup)

  it("is a world of one without the launcher, with no store", function()
    local s = script([[
print("BEFORE", ddp.rank(), ddp.world_size(), ddp.local_rank(), ddp.local_world_size(),
      ddp.node_rank(), ddp.is_main(), ddp.is_initialized())
assert(ddp.device() == (ddp.cuda.is_available() and "cuda:0" or "cpu"))
ddp.init({ backend = "gloo" })
ddp.init()
print("INIT", ddp.is_initialized(), ddp.backend(), open_sockets())
for _ = 1, 3 do ddp.barrier() end
ddp.barrier("named")
ddp.print("P", 1, nil, true)
ddp.log("L", 2)
local b = ddp.broadcast_object({ a = { 1, 2, { x = "y" } }, s = "a\0b", [2.5] = false }, 0)
print("B", b.a[3].x, #b.s, b[2.5])
local g = ddp.all_gather_object({ rank = ddp.rank(), name = "solo" })
print("G", #g, g[1].rank, g[1].name)
-- ddp.log and ddp.device keep their tensor meaning for a tensor
print("T", ddp.log(ddp.ones(2)):sum():item(), ddp.device(ddp.zeros(1)))
ddp.shutdown()
ddp.shutdown()
print("DOWN", ddp.is_initialized())
]])
    local out, err, rc = run(q(s))
    assert.equals(0, rc, err)
    assert.truthy(out:find("BEFORE\t0\t1\t0\t1\t0\ttrue\tfalse\n", 1, true), out)
    assert.truthy(out:find("INIT\ttrue\tshm\t0\n", 1, true), out)
    assert.truthy(out:find("P\t1\tnil\ttrue\n", 1, true), out)
    assert.truthy(out:find("L\t2\n", 1, true), out)
    assert.truthy(out:find("B\ty\t3\tfalse\n", 1, true), out)
    assert.truthy(out:find("G\t1\t0\tsolo\n", 1, true), out)
    assert.truthy(out:find("T\t0\tcpu\n", 1, true), out)
    assert.truthy(out:find("DOWN\tfalse\n", 1, true), out)
  end)

  it("refuses unsupported values, naming the path, and unknown backends", function()
    dist.init()
    local send = dist.broadcast_object
    assert.truthy(err_of(send, { a = { f = print } }):find("ddp.broadcast_object: value.a.f is a function", 1, true))
    local t = {}
    t.self = { t }
    assert.truthy(err_of(send, t):find("value.self[1] contains itself (a cycle)", 1, true))
    assert.truthy(err_of(dist.all_gather_object, { ["a b"] = { require("ddp").zeros(1) } })
      :find('ddp.all_gather_object: value["a b"][1] is a tensor', 1, true))
    assert.truthy(err_of(send, { [{}] = 1 }):find("value has a table key", 1, true))
    assert.truthy(err_of(send, setmetatable({}, {})):find("with a metatable", 1, true))
    assert.truthy(err_of(dist.init, { backend = "mpi" }):find('unknown backend "mpi"', 1, true))
    -- shared subtables are copied; odd numbers, bytes and boolean keys survive
    local shared = { 1 }
    local back = send({ shared, shared, 0 / 0, 1 / 0, -1 / 0, 0.1, 2 ^ 53, "x\0y", [true] = false })
    assert.same({ 1 }, back[1])
    assert.same({ 1 }, back[2])
    assert.is_true(back[3] ~= back[3])
    assert.same({ 1 / 0, -1 / 0, 0.1, 2 ^ 53, "x\0y" }, { back[4], back[5], back[6], back[7], back[8] })
    assert.is_false(back[true])
    assert.is_nil(send(nil))
    dist.shutdown()
  end)

  it("gives 3 workers their ranks, barriers and objects through the store", function()
    local s = script([[
ddp.init()
print("R", ddp.rank(), ddp.world_size(), ddp.local_rank(), ddp.local_world_size(), ddp.node_rank(),
      ddp.is_main(), ddp.is_initialized())
ddp.print("once")
ddp.log("every")
for i = 1, 20 do
  if ddp.rank() == i % 3 then sleep(0.01) end
  ddp.barrier()
end
local store, n1 = job_store()
for round = 1, 10 do
  local b = ddp.broadcast_object(ddp.rank() == 1 and { cfg = { lr = 0.5, layers = { 3, 4, { n = "x" } } }, round = round }
                                 or "ignored", 1)
  assert(b.cfg.lr == 0.5 and b.cfg.layers[2] == 4 and b.cfg.layers[3].n == "x" and b.round == round)
  local g = ddp.all_gather_object({ rank = ddp.rank(), name = "w" .. ddp.rank() })
  assert(#g == 3)
  for r = 0, 2 do assert(g[r + 1].rank == r and g[r + 1].name == "w" .. r, "rank order") end
  ddp.barrier("round")
  if round == 1 then n1 = store:num_keys() end
end
-- keys are deleted as the calls finish: no growth with the rounds (the
-- other ranks may still be deleting the last round's: a moment for them)
local left = store:num_keys()
for _ = 1, 40 do
  if left <= n1 + 3 then break end
  sleep(0.05)
  left = store:num_keys()
end
assert(left <= n1 + 3, "keys left: " .. left .. " vs " .. n1)
print("DONE", ddp.rank())
ddp.shutdown()
]])
    local out, err, rc = run("--nproc 3 " .. q(s))
    assert.equals(0, rc, err)
    for r = 0, 2 do
      assert.truthy(out:find(("[%d] R\t%d\t3\t%d\t3\t0\t%s\ttrue\n"):format(r, r, r, tostring(r == 0)), 1, true), out)
      assert.truthy(out:find(("[%d] every\n"):format(r), 1, true), out)
      assert.truthy(out:find(("[%d] DONE\t%d\n"):format(r, r), 1, true), out)
    end
    assert.equals(1, count(out, "once"))
    assert.truthy(out:find("[0] once\n", 1, true), out)
  end)

  it("names the rank that never reached init when it times out", function()
    local s = script([[
if ddp.rank() == 2 then sleep(20) end
ddp.init()
print("passed init")
]])
    local t0 = os.time()
    local out, err, rc = run("--nproc 3 " .. q(s), "DDP_TIMEOUT=2")
    assert.is_true(os.time() - t0 < 15)
    assert.are_not.equal(0, rc)
    assert.falsy(out:find("passed init", 1, true), out)
    assert.truthy(err:find("ddp.init: timed out after 2 s; rank 2 of 3 did not arrive", 1, true), err)
  end)

  -- a rank that ends early, even with exit code 0, is named within about a
  -- second by the ranks waiting for it (the launcher records exits in the
  -- store), not after DDP_TIMEOUT
  for _, case in ipairs {
    { "ddp.init", "if ddp.rank() == 1 then os.exit(0) end\nddp.init()" },
    { "ddp.all_gather_object", "ddp.init()\nif ddp.rank() == 1 then os.exit(0) end\nddp.all_gather_object(1)" },
    { "ddp.broadcast_object", "ddp.init()\nif ddp.rank() == 1 then os.exit(0) end\nddp.broadcast_object(nil, 1)" },
  } do
    it("names a rank that exited with code 0 before " .. case[1] .. " within seconds", function()
      local s = script(case[2] .. "\nprint('passed')\n")
      local t0 = os.time()
      local out, err, rc = run("--nproc 2 " .. q(s), "DDP_TIMEOUT=30")
      assert.is_true(os.time() - t0 < 10, err)
      assert.are_not.equal(0, rc)
      assert.falsy(out:find("passed", 1, true), out)
      assert.truthy(err:find(case[1] .. ": rank 1 (exit code 0) ended before", 1, true), err)
    end)
  end

  it("says the store is gone, within seconds, when node 0's launcher dies", function()
    local store = require "ddp.store"
    local srv = store.server {}
    local port = srv.port
    srv:close()
    local idle = jobs.script("sleep(60)\n", "node0")
    local waiter = script([[
local ok, err = pcall(ddp.init)
io.stderr:write("RESULT " .. tostring(ok) .. " " .. tostring(err) .. "\n")
os.exit(ok and 0 or 1)
]])
    local base = jobs.CLEAN .. "DDP_TIMEOUT=30 DDP_STORE_TOKEN=gone DDP_JOB_ID=gone" .. port .. " "
    local pidfile, err1, rc1 = jobs.tempname(), jobs.tempname(), jobs.tempname()
    local node = " --nproc 2 --nnodes 2 --master-addr 127.0.0.1 --master-port " .. port
    jobs.sh(base .. q(ddplua) .. node .. " --node-rank 0 " .. q(idle) .. " >/dev/null 2>&1 & echo $! >" .. q(pidfile))
    local t0 = os.time()
    jobs.sh("( " .. base .. "timeout 60 " .. q(ddplua) .. node .. " --node-rank 1 " .. q(waiter)
            .. " </dev/null >/dev/null 2>" .. q(err1) .. "; echo $? >" .. q(rc1) .. " ) & sleep 2; kill -9 "
            .. jobs.slurp(pidfile):match("%d+") .. "; wait")
    local err = jobs.slurp(err1)
    assert.is_true(os.time() - t0 < 15, err)     -- was 40 s: a full timeout per rank
    assert.are_not.equal(0, tonumber(jobs.slurp(rc1)), err)
    assert.truthy(err:find("RESULT false", 1, true), err)
    assert.truthy(err:find("the store at 127.0.0.1:" .. port .. " is gone", 1, true), err)
    assert.falsy(err:find("wrong token", 1, true), err)
  end)

  it("refuses nodes started with different --nproc or --nnodes, on both nodes, naming both values", function()
    local s = script([[
ddp.init()
print("passed init")
]])
    local srv = require("ddp.store").server {}
    local port = srv.port
    srv:close()
    -- two launchers of one job at once; node 0's and node 1's own options
    local function two_nodes(opts0, opts1)
      local res, cmd = {}, {}
      for node, opts in pairs { [0] = opts0, [1] = opts1 } do
        local out, err, rc = jobs.tempname(), jobs.tempname(), jobs.tempname()
        res[node] = { out = out, err = err, rc = rc }
        cmd[#cmd + 1] = ("( %sDDP_JOB_ID=nproc%d DDP_STORE_TOKEN=nptoken DDP_TIMEOUT=30 timeout 60 %s %s --node-rank %d "
          .. "--master-addr 127.0.0.1 --master-port %d %s </dev/null >%s 2>%s; echo $? >%s ) &")
          :format(jobs.CLEAN, port, q(ddplua), opts, node, port, q(s), q(out), q(err), q(rc))
      end
      jobs.sh(table.concat(cmd, " ") .. " wait")
      for node = 0, 1 do
        local r = res[node]
        r.out, r.err, r.rc = jobs.slurp(r.out), jobs.slurp(r.err), tonumber(jobs.slurp(r.rc))
      end
      return res
    end
    local t0 = os.time()
    local res = two_nodes("--nnodes 2 --nproc 2", "--nnodes 2 --nproc 1")
    assert.is_true(os.time() - t0 < 20)  -- refused at once, not at the timeout
    local msg = "ddp.init: the nodes were started with different --nproc: node %d runs %d worker%s, node %d runs %d; "
      .. "start every node with the same --nproc"
    -- both nodes say it, with both values (the first rank to, as its
    -- launcher then stops the others); node 1's rank is 1 (1 * --nproc 1),
    -- a number node 0 has too: that is why nothing else could work
    for node, ranks in pairs { [0] = "[01]", [1] = "1" } do
      local r = res[node]
      assert.are_not.equal(0, r.rc)
      assert.falsy(r.out:find("passed init", 1, true), r.out)
      local want = node == 0 and msg:format(0, 2, "s", 1, 1) or msg:format(1, 1, "", 0, 2)
      assert.truthy(r.err:find("%[" .. ranks .. "%] [^\n]*" .. want:gsub("%p", "%%%0")), r.err)
    end
    res = two_nodes("--nnodes 2 --nproc 1", "--nnodes 3 --nproc 1")
    assert.truthy(res[0].err:find("ddp.init: the nodes were started with different --nnodes: node 0 counts 2 nodes, "
                                  .. "node 1 counts 3; start every node with the same --nnodes", 1, true), res[0].err)
    assert.truthy(res[1].err:find("node 1 counts 3 nodes, node 0 counts 2", 1, true), res[1].err)
    -- (nodes that agree pass: collectives_spec's 2-node jobs)
  end)

  it("says what is wrong with a bad environment", function()
    local s = script([[print(ddp.rank())]])
    local _, err, rc = run(q(s), "RANK=3 WORLD_SIZE=2")
    assert.are_not.equal(0, rc)
    assert.truthy(err:find("RANK=3 is out of range for WORLD_SIZE=2", 1, true), err)
    _, err, rc = run(q(s), "RANK=0")
    assert.are_not.equal(0, rc)
    assert.truthy(err:find("RANK and WORLD_SIZE must be set together", 1, true), err)
    _, err, rc = run(q(s), "RANK=0 WORLD_SIZE=two")
    assert.are_not.equal(0, rc)
    assert.truthy(err:find('WORLD_SIZE="two" is not an integer', 1, true), err)
    local s2 = script([[ddp.init()]])
    _, err, rc = run("--nproc 2 " .. q(s2), "DDP_TIMEOUT=soon")
    assert.are_not.equal(0, rc)
    assert.truthy(err:find('ddp.init: DDP_TIMEOUT="soon" is not a positive number', 1, true), err)
  end)
end)
