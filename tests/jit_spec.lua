-- The API under LuaJIT's trace compiler: hot loops of the same calls must
-- keep giving the interpreter's results.  The shape loops catch Debian's
-- luajit (2.1.0-beta3, 2022) loading `...` one slot off in core.shape_args;
-- the last test catches LuaJIT's recorder taking tensor + number for
-- pointer arithmetic (a crash on every LuaJIT tried while tensor handles
-- were pointers; they are references now).  docs/luajit.md.
local ddp = require "ddp"

local N = 3000  -- well past the hot-loop threshold, so traces are compiled

describe("hot loops", function()
  it("shape arguments followed by options", function()
    local cnt = 0
    for _ = 1, 2000 do
      local a = ddp.zeros(2, 3)
      local b = ddp.zeros({ 2, 3 })
      local c = ddp.zeros({ 0 }, { dtype = "int64" })
      local d = ddp.ones(4, { dtype = "int32" })
      if c:dim() ~= 1 or d:dim() ~= 1 then cnt = cnt + 1 end
      local _ = a and b
    end
    assert.equal(0, cnt)
  end)

  it("shape arguments in every form", function()
    local bad = {}
    for i = 1, N do
      local a = ddp.zeros(2, 3)
      local b = ddp.zeros({ 2, 3 })
      local c = ddp.zeros({ 0 }, { dtype = "int64" })
      local d = ddp.ones(4, { dtype = "int32" })
      local e = ddp.randn(i % 3 + 1, 2)
      local f = ddp.empty({}, { dtype = "float64" })
      if a:dim() ~= 2 or b:dim() ~= 2 or c:dim() ~= 1 or d:dim() ~= 1
        or d:dtype() ~= "int32" or e:size(0) ~= i % 3 + 1 or f:dim() ~= 0 then
        bad[#bad + 1] = i
      end
    end
    assert.same({}, bad)
  end)

  it("views with varargs and tables", function()
    local t = ddp.arange(24)
    local bad = 0
    for i = 1, N do
      local v = i % 2 == 0 and t:view(2, 3, 4) or t:view({ 4, -1 })
      local p = t:view(2, 3, 4):permute(2, 0, 1)
      if (i % 2 == 0 and v:dim() ~= 3) or (i % 2 == 1 and v:size(1) ~= 6) or p:size(0) ~= 4 then
        bad = bad + 1
      end
    end
    assert.equal(0, bad)
  end)

  it("element access with varying index counts", function()
    local t = ddp.arange(24):view(2, 3, 4)
    local m = ddp.zeros(3, 3)
    local bad = 0
    for i = 1, N do
      local a, b, c = i % 2, i % 3, i % 4
      if t:get(a, b, c) ~= a * 12 + b * 4 + c then bad = bad + 1 end
      if t:get(a):get(b, c) ~= a * 12 + b * 4 + c then bad = bad + 1 end
      m:set(b, i % 3, i)
      if m:get(b, i % 3) ~= i then bad = bad + 1 end
    end
    assert.equal(0, bad)
  end)

  it("operators with numbers and tensors", function()
    local x = ddp.tensor({ 1, 2, 3 }, { dtype = "float32" })
    local bad = 0
    for i = 1, N do
      local y = (x + i) * 2 - x / 2
      local expect = (1 + i) * 2 - 0.5
      if math.abs(y:get(0) - expect) > 1e-3 * math.abs(expect) then bad = bad + 1 end
      local s, idx = y:max(0)
      if idx:item() ~= 2 or s:dim() ~= 0 then bad = bad + 1 end
    end
    assert.equal(0, bad)
  end)

  -- LuaJIT crashed (SIGSEGV) in this shape -- a hot loop calling a function
  -- that adds a number to a tensor through the operator -- while handles
  -- were pointers (the recorder bug: tests/luajit/ptr_arith_meta.lua); with
  -- references the recorder calls __add as the interpreter does, and
  -- add/sub need no jit.off.  In a child process, so a crash fails the test
  -- instead of ending busted.
  it("a fresh closure per iteration doing tensor + number (no crash)", function()
    local jobs = require "helpers.jobs"
    local script = jobs.script([[
      for _ = 1, 400 do
        local x = ddp.ones(7)
        local f = function(t) return t + 1 end
        local g = function(t) return t - 0.5 end
        local h = function(t) return 2 + t end
        local y = h(g(f(x)))
        local i64 = ddp.ones(3, { dtype = "int64" })
        local k = function(t) return t + 0.5 end
        local z = k(i64)
        if y:get(0) ~= 3.5 or z:get(0) ~= 1.5 then error("wrong value") end
      end
      print("DONE")
    ]], "jitclosure")
    for _ = 1, 3 do  -- with pointer handles and no jit.off it crashed every run
      local out, err, rc = jobs.run(jobs.q(script), "", 60)
      assert.equal(0, rc, (err or "") .. (out or ""))
      assert.truthy(out:match("DONE"), out)
    end
    jobs.cleanup()
  end)
end)
