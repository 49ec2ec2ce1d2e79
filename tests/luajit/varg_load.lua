-- A LuaJIT bug behind one of ddplua's old workarounds, without ddplua:
--   luajit tests/luajit/varg_load.lua   -> "OK" or "WRONG ..." (exit 1)
-- The shape of ddplua's old core.shape_args.  In GC64 builds (x86-64's
-- default) a trace that starts inside a vararg function loaded `...` with a
-- fixed number of results (`local dims = ...`) one slot off, so after a few
-- iterations ones(4, {dtype = ...}) counted 0 dims.  Fixed upstream by
-- LuaJIT commit 6bda30d8 (July 2022, "LJ_GC64: Fix IR_VARG offset for fixed
-- number of results"); Debian bookworm's luajit (2.1.0-beta3, March 2022
-- snapshot) has the bug, its luajit2 (OpenResty, 2.1-20230119) does not.
-- Reading the count with select(n, ...) is not what goes wrong: with
-- `local dims = ...` replaced by a table of the arguments it passes.
local function is_opts(t)
  if type(t) ~= "table" then return false end
  for k in pairs(t) do
    if type(k) ~= "number" then return true end
  end
  return false
end

local function shape_args(...)
  local n = select("#", ...)
  if n > 0 then
    local last = select(n, ...)
    if type(last) == "table" and is_opts(last) then n = n - 1 end
  end
  local dims = ...  -- the load that comes out wrong
  if n == 1 and type(dims) == "table" then
    n = #dims
  else
    dims = { ... }
  end
  return n
end

local bad, first = 0, nil
for i = 1, 2000 do
  local a = shape_args(2, 3)
  local b = shape_args({ 2, 3 })
  local c = shape_args({ 0 }, { dtype = "int64" })
  local d = shape_args(4, { dtype = "int32" })
  if a ~= 2 or b ~= 2 or c ~= 1 or d ~= 1 then
    bad = bad + 1
    first = first or ("iteration %d: dims %d %d %d %d, expected 2 2 1 1"):format(i, a, b, c, d)
  end
end
if bad == 0 then print("OK") else print(("WRONG in %d of 2000 iterations, first at %s"):format(bad, first)); os.exit(1) end
