-- The rendezvous store from Lua (ddp.store): every operation, errors at the
-- user's line, and a second ddplua process joining through the token.
local ddp = require "ddp"
local store = require "ddp.store"

local ddplua = os.getenv("DDPLUA") or "build/ddplua"

describe("ddp.store", function()
  local srv, c
  before_each(function()
    srv = store.server{ timeout = 10 }
    c = store.connect("127.0.0.1", srv.port, { token = srv.token, timeout = 10 })
  end)
  after_each(function()
    c:close()
    srv:close()
  end)

  it("is ddp.store, lazily", function()
    assert.are.equal(store, ddp.store)
  end)

  it("picks a free port and a random token", function()
    assert.is_true(srv.port > 0)
    assert.are.equal(32, #srv.token)
    local other = store.server{}
    assert.are_not.equal(srv.port, other.port)
    assert.are_not.equal(srv.token, other.token)
    other:close()
  end)

  it("sets, gets, checks, deletes and counts keys", function()
    c:set("a", "x\0y")
    assert.are.equal("x\0y", c:get("a"))
    assert.are.equal("x\0y", srv:get("a"))
    assert.is_true(c:check({ "a" }))
    assert.is_false(c:check({ "a", "b" }))
    assert.are.equal(1, c:num_keys())
    assert.is_true(c:delete("a"))
    assert.is_false(c:delete("a"))
    assert.are.equal(0, c:num_keys())
  end)

  it("adds atomically and stores decimal text", function()
    assert.are.equal(3, c:add("n", 3))
    assert.are.equal(1, srv:add("n", -2))
    assert.are.equal(2, c:add("n"))
    assert.are.equal("2", c:get("n"))
  end)

  it("compares and sets", function()
    assert.are.equal("one", c:compare_set("k", "", "one"))
    assert.are.equal("one", c:compare_set("k", "nope", "two"))
    assert.are.equal("two", c:compare_set("k", "one", "two"))
  end)

  it("waits for keys and names the missing one on timeout", function()
    c:set("here", "1")
    c:wait({ "here" }, 1)
    c:wait("here")
    local ok, err = pcall(function() c:wait({ "here", "rank3/addr" }, 0.2) end)
    assert.is_false(ok)
    assert.matches('store.wait: timed out after 0.2 s waiting for key "rank3/addr"', err, 1, true)
    ok, err = pcall(function() c:get("missing", 0.1) end)
    assert.is_false(ok)
    assert.matches('store_spec.lua:%d+: store.get: timed out after 0.1 s waiting for key "missing"', err)
    c:set("after", "fine")  -- the handle reconnects after a timeout
    assert.are.equal("fine", c:get("after"))
  end)

  it("raises argument errors at the user's line", function()
    local ok, err = pcall(function() c:set("k", 3) end)
    assert.is_false(ok)
    assert.matches("store_spec.lua:%d+: store.set: value must be a string, got 3", err)
    ok, err = pcall(function() c:add("k", 1.5) end)
    assert.matches("store.add: amount must be an integer", err)
    ok, err = pcall(function() store.connect("127.0.0.1", 0) end)
    assert.matches("store.connect: port must be an integer in 1..65535", err)
    c:set("text", "abc")
    ok, err = pcall(function() c:add("text", 1) end)
    assert.matches('store_spec.lua:%d+: store.add: the value of key "text" is not an integer', err)
  end)

  it("refuses the wrong token", function()
    local ok, err = pcall(function()
      store.connect("127.0.0.1", srv.port, { token = "wrong", timeout = 1 })
    end)
    assert.is_false(ok)
    assert.matches("belongs to another job (it refused this job's token)", err, 1, true)
  end)

  it("says the store is gone, in seconds, when its server closes under a client", function()
    local srv = store.server { timeout = 30 }
    local c = store.connect("127.0.0.1", srv.port, { token = srv.token, timeout = 30 })
    c:set("k", "v")
    srv:close()
    local t0 = os.time()
    local ok, err = pcall(c.get, c, "never", 30)
    assert.is_false(ok)
    assert.is_true(os.time() - t0 <= 5, "took " .. (os.time() - t0) .. " s")
    assert.truthy(tostring(err):find("the store at 127.0.0.1:" .. srv.port .. " is gone", 1, true), err)
    c:close()
  end)

  it("raises after close", function()
    local d = store.connect("127.0.0.1", srv.port, { token = srv.token })
    d:close()
    d:close()
    local ok, err = pcall(function() d:get("a") end)
    assert.is_false(ok)
    assert.matches("store.get: the store was closed", err, 1, true)
  end)

  it("serves another process, which adds and meets us at a barrier", function()
    local chunk = ([[
      local s = require("ddp.store").connect("127.0.0.1", %d, { token = %q, timeout = 10 })
      print("added", s:add("procs", 10))
      s:set("child", "hello")
      s:barrier("meet", 2, 10)
      s:close()
    ]]):format(srv.port, srv.token)
    assert.is_nil(chunk:find("'", 1, true))  -- it goes to the shell in single quotes
    local p = assert(io.popen(ddplua .. " -e '" .. chunk .. "' 2>&1"))
    c:barrier("meet", 2, 10)
    assert.are.equal("hello", c:get("child", 10))
    local out = p:read("*a")
    p:close()
    assert.matches("added\t10", out, 1, true)
    assert.are.equal(11, c:add("procs", 1))
  end)

  it("is reusable as a barrier within one process", function()
    for _ = 1, 3 do c:barrier("solo", 1, 1) end
    assert.are.equal("3", c:get("solo/arrived"))
  end)

  -- The launcher's store held whatever its clients set, until the kernel
  -- killed it; past its bound a set is refused by name, and the job goes on.
  it("refuses keys past its bound (DDP_STORE_MAX_MB) and goes on", function()
    local jobs = require "helpers.jobs"
    local script = jobs.script([[
ddp.init()
local st = ddp._store and ddp._store() or require("ddp.dist.group")._store()
if ddp.rank() == 0 then
  local big = string.rep("x", 1024 * 1024)
  local ok, err
  for i = 1, 8 do
    ok, err = pcall(st.set, st, "mine/" .. i, big)
    if not ok then print("refused at " .. i .. ": " .. tostring(err)) break end
  end
  for i = 1, 8 do pcall(st.delete, st, "mine/" .. i) end
end
ddp.barrier()
print("rank " .. ddp.rank() .. " after the barrier")
]], "store_bound")
    local out, err, rc = jobs.run("--nproc 2 " .. jobs.q(script), "DDP_STORE_MAX_MB=4")
    assert.equal(0, rc, err)
    assert.matches("refused at 4: [^\n]*the store refused key \"mine/4\" %(a value of 1048576 bytes%): "
                   .. "it would hold 4%.%d MiB in %d+ keys, past its bound of 4 MiB %(DDP_STORE_MAX_MB%)", out)
    assert.matches("rank 0 after the barrier", out)
    assert.matches("rank 1 after the barrier", out)
  end)
end)
