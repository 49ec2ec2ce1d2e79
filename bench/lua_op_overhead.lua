-- lua_op_overhead.lua: the fixed cost of one tensor op called from Lua --
-- argument checks, the FFI call, the new tensor's handle and its GC -- on
-- 4-element float32 tensors, where the arithmetic itself is negligible.
-- Each op runs ITERS times in a hot loop (so LuaJIT compiles the loop where
-- it can); prints the median over RUNS loops in microseconds per op.
--
--   build/ddplua bench/lua_op_overhead.lua [ITERS [RUNS]] [--jit-add-sub] [--no-jit]
--
-- --jit-add-sub re-enables the trace compiler on add/sub's alpha wrappers,
-- which lua/ddp/tensor/math.lua kept interpreted (jit.off) because of a LuaJIT
-- recorder bug (docs/luajit.md): this measures what that workaround costs.
-- It may crash a LuaJIT with the bug, which is why it is opt-in.
-- --no-jit turns the trace compiler off altogether (the interpreter's cost).
-- Prints one line per op: "name<TAB>us/op", after a "# ..." header.
local ddp = require "ddp"

local iters, runs, jit_add_sub, no_jit = 200000, 7, false, false
local nums = {}
for _, a in ipairs(arg) do
  if a == "--jit-add-sub" then jit_add_sub = true
  elseif a == "--no-jit" then no_jit = true
  else nums[#nums + 1] = assert(tonumber(a), "usage: lua_op_overhead.lua [ITERS [RUNS]] [--jit-add-sub] [--no-jit]") end
end
iters, runs = nums[1] or iters, nums[2] or runs

local now = dofile((arg[0]:match("^(.*)/") or ".") .. "/clock.lua")

ddp.set_num_threads(1)
local a = ddp.tensor({ 1, 2, 3, 4 }, { dtype = "float32" })
local b = ddp.tensor({ 0.5, 0.25, 0.125, 0.0625 }, { dtype = "float32" })

-- The methods may sit behind init.lua's self-check wrapper (an upvalue f
-- holds the inner function): jit.on both levels.
local function jit_on(fn)
  jit.on(fn)
  for i = 1, math.huge do
    local name, v = debug.getupvalue(fn, i)
    if not name then break end
    if name == "f" and type(v) == "function" then jit_on(v) end
  end
end
if jit_add_sub then
  for _, name in ipairs { "add", "sub", "add_", "sub_" } do jit_on(a[name]) end
end
if no_jit then jit.off() end

-- Each loop is its own function, so each gets its own trace.
local ops = {
  { "c = a + 1", function(n) local c for _ = 1, n do c = a + 1 end return c end },
  { "c = a + b", function(n) local c for _ = 1, n do c = a + b end return c end },
  { "c = a:add(b)", function(n) local c for _ = 1, n do c = a:add(b) end return c end },
  { "a:add_(b)", function(n) for _ = 1, n do a:add_(b) end return a end },
  { "c = a:mul(2)", function(n) local c for _ = 1, n do c = a:mul(2) end return c end },
}

local openresty = pcall(require, "table.clone")  -- OpenResty's LuaJIT adds it
print(("# %s (%s), %d iterations, median of %d runs, %s"):format(
  jit.version, openresty and "OpenResty luajit2" or "not OpenResty", iters, runs,
  no_jit and "trace compiler off (--no-jit)"
    or jit_add_sub and "add/sub wrappers JIT-compiled (--jit-add-sub)"
    or "add/sub wrappers as the library leaves them"))

for _, op in ipairs(ops) do
  local name, loop = op[1], op[2]
  loop(iters)  -- warm-up: traces compiled, allocator caches filled
  local ts = {}
  for i = 1, runs do
    collectgarbage()
    local t0 = now()
    loop(iters)
    ts[i] = now() - t0
  end
  table.sort(ts)
  print(("%s\t%.3f"):format(name, ts[math.floor((runs + 1) / 2)] * 1e6 / iters))
end
