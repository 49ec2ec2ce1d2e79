-- tests/gpu/mini_busted.lua -- a small stand-in for busted, for the GPU
-- machine (which has none): enough of describe / it / pending / hooks and
-- luassert's assert.* for our specs.
--
--   build/ddplua tests/gpu/mini_busted.lua tests/cuda/*_spec.lua
--
-- Runs from the repository root (the paths of .busted); prints each
-- failure, then busted's summary line "N successes / N failures / N errors
-- / N pending : S seconds"; exits 1 when anything failed.
package.path = "tests/?.lua;lua/?.lua;lua/?/init.lua;build/lua/?.lua;bindings/?.lua;" .. package.path

-- busted runs specs with Lua 5.2's table.unpack / table.pack too
table.unpack = table.unpack or unpack
table.pack = table.pack or function(...) return { n = select("#", ...), ... } end
local clock = os.clock
local PENDING = {}  -- the error value of pending() inside a test

-- -- Assertions ----------------------------------------------------------------

local function fmt(v)
  if type(v) == "string" then return ("%q"):format(v) end
  return tostring(v)
end

local function deep_eq(a, b, seen)
  if a == b then return true end
  if type(a) ~= "table" or type(b) ~= "table" then return false end
  seen = seen or {}
  if seen[a] == b then return true end
  seen[a] = b
  for k, v in pairs(a) do if not deep_eq(v, b[k], seen) then return false end end
  for k in pairs(b) do if a[k] == nil then return false end end
  return true
end

local function raises(f, want, plain)
  local ok, err = pcall(f)
  if ok then return false, "expected an error, got none" end
  if want == nil then return true, "expected no error, got " .. fmt(err) end
  local s = tostring(err)
  local hit
  if plain then hit = s == want or s:sub(-#want) == want else hit = s:find(want) ~= nil end
  return hit, ("expected error %s, got %s"):format(fmt(want), fmt(s))
end

-- name -> {arity, check(...) -> ok, message}
local checks = {
  equal = { 2, function(e, a) return e == a, ("expected %s, got %s"):format(fmt(e), fmt(a)) end },
  same = { 2, function(e, a) return deep_eq(e, a), ("expected the same as %s, got %s"):format(fmt(e), fmt(a)) end },
  truthy = { 1, function(v) return v ~= nil and v ~= false, "expected a truthy value, got " .. fmt(v) end },
  falsy = { 1, function(v) return v == nil or v == false, "expected a falsy value, got " .. fmt(v) end },
  ["true"] = { 1, function(v) return v == true, "expected true, got " .. fmt(v) end },
  ["false"] = { 1, function(v) return v == false, "expected false, got " .. fmt(v) end },
  ["nil"] = { 1, function(v) return v == nil, "expected nil, got " .. fmt(v) end },
  near = { 3, function(e, a, tol)
    return type(a) == "number" and math.abs(e - a) <= tol, ("expected %s +- %s, got %s"):format(fmt(e), fmt(tol), fmt(a))
  end },
  matches = { 2, function(p, s)
    return type(s) == "string" and s:find(p) ~= nil, ("expected %s to match %s"):format(fmt(s), fmt(p))
  end },
  error = { 2, function(f, want) return raises(f, want, true) end },
  error_matches = { 2, function(f, pat) return raises(f, pat, false) end },
}
for _, t in ipairs { "number", "string", "table", "function", "boolean", "userdata", "cdata" } do
  checks[t] = { 1, function(v) return type(v) == t, "expected a " .. t .. ", got " .. type(v) end }
end
local aliases = { equals = "equal", errors = "error", truthy = "truthy", unique = nil }
local filler = { is = true, are = true, has = true, was = true, ["does"] = true }

local function apply(words, ...)
  local neg, parts = false, {}
  for _, w in ipairs(words) do
    if w == "not" or w == "no" then neg = not neg
    elseif not filler[w] then parts[#parts + 1] = w end
  end
  local name = table.concat(parts, "_")
  name = aliases[name] or name
  local c = checks[name]
  if not c then error("mini_busted: unknown assertion assert." .. table.concat(words, "."), 2) end
  local args = { ... }
  local ok, msg = c[2](...)
  if neg then ok, msg = not ok, "expected the opposite: " .. tostring(msg) end
  if not ok then
    local extra = args[c[1] + 1]
    error(extra ~= nil and tostring(extra) .. "\n" .. tostring(msg) or msg, 3)
  end
  return ...
end

local function chain(words)
  return setmetatable({}, {
    __index = function(_, k)
      local w = { unpack(words) }
      for part in k:gmatch("[^_]+") do w[#w + 1] = part end
      return chain(w)
    end,
    __call = function(_, ...)
      if #words == 0 then  -- plain assert(v, msg)
        local v, msg = ...
        if not v then error(msg == nil and "assertion failed!" or msg, 2) end
        return ...
      end
      return apply(words, ...)
    end,
  })
end
assert = chain({})  -- luacheck: ignore (the specs' global, as busted's)

-- -- The tree --------------------------------------------------------------------

local function node(name)
  return { name = name, kids = {}, before = {}, after = {}, setup = {}, teardown = {} }
end
local root = node("")
local current = root
local finals  -- finally() handlers of the running test

function describe(name, fn)
  local n = node(name)
  current.kids[#current.kids + 1] = { kind = "describe", node = n }
  local parent = current
  current = n
  fn()
  current = parent
end
context = describe

function it(name, fn)
  current.kids[#current.kids + 1] = { kind = "it", name = name, fn = fn }
end

function pending(name, _)
  if finals then error(setmetatable({ msg = name }, PENDING), 2) end  -- inside a running test
  current.kids[#current.kids + 1] = { kind = "pending", name = name }
end

function before_each(fn) current.before[#current.before + 1] = fn end
function after_each(fn) current.after[#current.after + 1] = fn end
function setup(fn) current.setup[#current.setup + 1] = fn end
function teardown(fn) current.teardown[#current.teardown + 1] = fn end
lazy_setup, strict_setup, lazy_teardown, strict_teardown = setup, setup, teardown, teardown
function finally(fn) finals[#finals + 1] = fn end

-- -- Running ---------------------------------------------------------------------

local count = { ok = 0, fail = 0, err = 0, pending = 0 }
local report = {}

local function trace(e)
  if getmetatable(e) == PENDING then return e end
  return debug.traceback(tostring(e), 2)
end

local function run(n, path, befores, afters)
  for _, f in ipairs(n.setup) do f() end
  local bs, as = { unpack(befores) }, { unpack(afters) }
  for _, f in ipairs(n.before) do bs[#bs + 1] = f end
  for i = #n.after, 1, -1 do table.insert(as, 1, n.after[i]) end
  for _, k in ipairs(n.kids) do
    local full = (path == "" and "" or path .. " ") .. (k.name or k.node.name)
    if k.kind == "describe" then
      run(k.node, full, bs, as)
    elseif k.kind == "pending" then
      count.pending = count.pending + 1
      report[#report + 1] = "Pending -> " .. full
    else
      finals = {}
      local ok, e = xpcall(function()
        for _, f in ipairs(bs) do f() end
        k.fn()
      end, trace)
      for _, f in ipairs(as) do
        local ok2, e2 = xpcall(f, trace)
        if ok and not ok2 then ok, e = false, e2 end
      end
      for _, f in ipairs(finals) do pcall(f) end
      finals = nil
      if ok then
        count.ok = count.ok + 1
        io.write("+")
      elseif getmetatable(e) == PENDING then
        count.pending = count.pending + 1
        io.write(".")
        report[#report + 1] = "Pending -> " .. full .. "\n" .. tostring(e.msg)
      else
        count.fail = count.fail + 1
        io.write("-")
        report[#report + 1] = "Failure -> " .. full .. "\n" .. tostring(e)
      end
      io.flush()
    end
  end
  for _, f in ipairs(n.teardown) do f() end
end

local t0 = clock()
local files = { ... }
if #files == 0 then files = arg or {} end
for _, file in ipairs(files) do
  local chunk, why = loadfile(file)
  if not chunk then
    count.err = count.err + 1
    report[#report + 1] = "Error -> " .. file .. "\n" .. tostring(why)
  else
    local top = node(file)
    root.kids[#root.kids + 1] = { kind = "describe", node = top }
    current = top
    local ok, e = xpcall(chunk, trace)
    current = root
    if not ok then
      count.err = count.err + 1
      report[#report + 1] = "Error -> " .. file .. "\n" .. tostring(e)
    end
  end
end
local ok, e = xpcall(run, trace, root, "", {}, {})
if not ok then
  count.err = count.err + 1
  report[#report + 1] = "Error -> (setup/teardown)\n" .. tostring(e)
end
print()
print(("%d successes / %d failures / %d errors / %d pending : %f seconds")
      :format(count.ok, count.fail, count.err, count.pending, clock() - t0))
for _, r in ipairs(report) do print("\n" .. r) end
os.exit((count.fail + count.err) == 0 and 0 or 1)
