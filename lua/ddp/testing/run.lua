-- ddp.testing: busted for users' own training code -- tensor assertions
-- for luassert (assert.tensor_equal, assert.tensor_close, assert.are.same
-- on tensors) and testing.run, which runs a chunk as a real N-rank job of
-- `ddplua --nproc N` and hands back what each rank returned.
--
--   local testing = require "ddp.testing"   -- registers the assertions under busted
--   assert.tensor_close(expected, actual)   -- PyTorch's assert_close tolerances per dtype
--   local res = testing.run(2, function() ddp.init(); return ddp.rank() end)  -- res[1], res[2]: 0, 1
--
-- Above the top module: it requires ddp's lower modules (never "ddp"), and
-- nothing in the library requires it, so `require "ddp"` does not load it.
local core = require "ddp.core"
local tensor = require "ddp.tensor"
local factory = require "ddp.tensor.factory"
local serialize = require "ddp.serialize"
local checkpoint = require "ddp.checkpoint"
local ffi = core.ffi
local is_tensor, describe, raise = core.is_tensor, core.describe, core.raise
local fmt_shape, shape_of = core.fmt_shape, core.shape_of
local T = tensor.methods
local type, pairs, next, tostring = type, pairs, next, tostring
local floor, huge, abs = math.floor, math.huge, math.abs
local concat, unpack = table.concat, unpack

core.add_lib_file(debug.getinfo(1, "S").source)

local M = {}

-- -- Tolerances ----------------------------------------------------------------

-- torch.testing.assert_close's defaults: {rtol, atol} per dtype; exact for
-- integers and bool.  Lua numbers compare as float64.
local TOLERANCES = {
  float16 = { 1e-3, 1e-5 }, bfloat16 = { 1.6e-2, 1e-5 },
  float32 = { 1.3e-6, 1e-5 }, float64 = { 1e-7, 1e-7 },
}

-- default_tolerances(dtype[, other]) -> rtol, atol: the larger of the two
-- dtypes' defaults, as assert_close does for mixed dtypes.
function M.default_tolerances(d1, d2)
  local a, b = TOLERANCES[d1] or { 0, 0 }, TOLERANCES[d2 or d1] or { 0, 0 }
  return math.max(a[1], b[1]), math.max(a[2], b[2])
end

-- -- Comparing two tensors -------------------------------------------------------

local function fmt_value(x, dtype)
  if type(x) ~= "number" then return tostring(x) end
  if x ~= x then return "nan" end
  if x == huge then return "inf" elseif x == -huge then return "-inf" end
  if dtype == "float64" then return ("%.17g"):format(x) end
  if dtype == "int64" or dtype == "int32" or dtype == "uint8" then return ("%.0f"):format(x) end
  return ("%.9g"):format(x)
end

local function fmt_diff(x)
  if x ~= x then return "nan" end
  if x == huge then return "inf" end
  return ("%.3g"):format(x)
end

-- The 0-based multi-index of element `linear` of a tensor of shape s.
local function unravel(linear, s)
  local ix = {}
  for d = #s, 1, -1 do
    ix[d] = linear % s[d]
    linear = floor(linear / s[d])
  end
  return fmt_shape(ix)
end

local function meta(t)
  return T.dtype(t) .. " " .. fmt_shape(shape_of(t))
end

-- The values of both tensors at element `linear` (row-major), and that
-- element's absolute and relative difference.
local function element(e, a, linear)
  local ev, av = T.get(T.reshape(e, -1), linear), T.get(T.reshape(a, -1), linear)
  local en = type(ev) == "boolean" and (ev and 1 or 0) or ev
  local an = type(av) == "boolean" and (av and 1 or 0) or av
  local d = abs(an - en)
  local rel = d == 0 and 0 or d / abs(en)
  return ev, av, d, rel
end

-- Why tensor `a` (actual) does not match `e` (expected) under opts
-- (rtol, atol, equal_nan, check_dtype, check_device), or nil when it does.
-- `what` is "equal" or "close", for the message.
local function mismatch(e, a, opts, what)
  local se, sa = shape_of(e), shape_of(a)
  local same_shape = #se == #sa
  for i = 1, #se do same_shape = same_shape and se[i] == sa[i] end
  if not same_shape then
    return ("Tensors differ in shape: expected %s, actual %s"):format(meta(e), meta(a))
  end
  local de, da = T.dtype(e), T.dtype(a)
  if de ~= da and opts.check_dtype ~= false then
    return ("Tensors differ in dtype: expected %s, actual %s ({check_dtype = false} compares the values)")
           :format(meta(e), meta(a))
  end
  local ve, va = T.device(e), T.device(a)
  if ve ~= va and opts.check_device ~= false then
    return ("Tensors differ in device: expected %s, actual %s ({check_device = false} compares the values)")
           :format(ve, va)
  end
  local n = T.numel(a)
  if n == 0 then return nil end
  -- on the CPU, out of any autograd graph
  e, a = T.detach(e), T.detach(a)
  if ve ~= "cpu" then e = T.cpu(e) end
  if va ~= "cpu" then a = T.cpu(a) end
  local rtol, atol = opts.rtol, opts.atol
  -- `ne` compares in the promoted dtype, so int64 stays exact; NaN differs
  -- from everything, equal infinities match
  local bad = T.ne(a, e)
  local e64, a64 = T.to(e, "float64"), T.to(a, "float64")
  local diff = T.abs(T.sub(a64, e64))
  if rtol ~= 0 or atol ~= 0 then
    -- not "diff > tol": a NaN difference is never within it, nor an
    -- infinite one (inf against -inf; an infinite expected value would
    -- allow it), as torch.isclose
    local within = T.logical_and(T.le(diff, T.add(T.mul(T.abs(e64), rtol), atol)), T.isfinite(diff))
    bad = T.logical_and(bad, T.logical_not(within))
  end
  if opts.equal_nan then
    bad = T.logical_and(bad, T.logical_not(T.logical_and(T.isnan(a64), T.isnan(e64))))
  end
  local count = T.item(T.sum(bad))
  if count == 0 then return nil end

  -- the worst element: the greatest absolute difference among those that
  -- differ (a NaN counts as infinite)
  local nan_inf = function(t) return T.masked_fill(t, T.isnan(t), huge) end
  local not_bad = T.logical_not(bad)
  local worst = T.item(T.argmax(T.reshape(T.masked_fill(nan_inf(diff), not_bad, -1), -1)))
  local rel = nan_inf(T.div(diff, T.abs(e64)))
  rel = T.masked_fill(T.masked_fill(rel, T.eq(diff, 0), 0), not_bad, -1)
  local worst_rel = T.item(T.argmax(T.reshape(rel, -1)))

  local lines = {}
  if what == "equal" then
    lines[1] = ("Tensors are not equal: %d of %d elements differ (%.3g%%)"):format(count, n, 100 * count / n)
  else
    lines[1] = ("Tensors are not close: %d of %d elements differ (%.3g%%); rtol %g, atol %g")
               :format(count, n, 100 * count / n, rtol, atol)
  end
  lines[2] = de == da and ("  %s, expected and actual"):format(meta(a))
             or ("  expected %s, actual %s"):format(meta(e), meta(a))
  local ev, av, d, r = element(e, a, worst)
  lines[3] = ("  worst at index %s: expected %s, actual %s (abs diff %s, rel diff %s)")
             :format(unravel(worst, sa), fmt_value(ev, de), fmt_value(av, da), fmt_diff(d), fmt_diff(r))
  if worst_rel ~= worst then
    ev, av, d, r = element(e, a, worst_rel)
    lines[4] = ("  greatest rel diff %s at index %s: expected %s, actual %s (abs diff %s)")
               :format(fmt_diff(r), unravel(worst_rel, sa), fmt_value(ev, de), fmt_value(av, da), fmt_diff(d))
  end
  return concat(lines, "\n")
end

-- Options of tensor_equal / tensor_close, checked: the opts table to use,
-- or nil and what is wrong.
local KNOWN = { rtol = true, atol = true, equal_nan = true, check_dtype = true, check_device = true }

local function options(opts, what)
  if opts == nil then return {} end
  if type(opts) ~= "table" or is_tensor(opts) then
    return nil, ("tensor_%s: options must be a table such as {rtol = 1e-5, atol = 1e-8}, got %s")
                :format(what, core.show(opts))
  end
  for k in pairs(opts) do
    if not KNOWN[k] or (what == "equal" and (k == "rtol" or k == "atol")) then
      return nil, ("tensor_%s: unknown option %s (expected %s)"):format(what, core.show(k),
        what == "equal" and "equal_nan, check_dtype, check_device"
        or "rtol, atol, equal_nan, check_dtype, check_device")
    end
  end
  -- as assert_close: one tolerance without the other is a mistake
  if (opts.rtol == nil) ~= (opts.atol == nil) then
    return nil, ("tensor_close: give both rtol and atol, or neither (got %s)")
                :format(opts.rtol ~= nil and "rtol only" or "atol only")
  end
  for _, k in ipairs { "rtol", "atol" } do
    local v = opts[k]
    if v ~= nil and (type(v) ~= "number" or v < 0 or v ~= v) then
      return nil, ("tensor_close: %s must be a number >= 0, got %s"):format(k, core.show(v))
    end
  end
  return opts
end

-- A leaf pair: tensors (expected may be a number or nested table, made a
-- tensor like actual), or Lua numbers, or any other values compared with
-- ==.  Returns the reason they differ, or nil.
local function compare_leaf(e, a, opts, what)
  if is_tensor(a) then
    if not is_tensor(e) then
      if type(e) ~= "number" and type(e) ~= "boolean" and type(e) ~= "table" then
        return ("expected %s, got a tensor"):format(core.show(e))
      end
      -- floating actuals take the expected numbers in their own dtype (0.1
      -- in float64 is not 0.1 in float32); integer ones compare the values
      local dt = T.is_floating_point(a) and T.dtype(a) or nil
      local ok, t = pcall(factory.tensor, e, { dtype = dt })
      if not ok then return "expected values that make no tensor: " .. tostring(t):gsub("^[^\n]-:%d+: ", "") end
      e = t
      if not dt then opts = setmetatable({ check_dtype = false }, { __index = opts }) end
      if T.device(a) ~= "cpu" then e = T.to(e, T.device(a)) end
    end
    local o = opts
    if o.rtol == nil then
      local rtol, atol = 0, 0
      if what == "close" then rtol, atol = M.default_tolerances(T.dtype(e), T.dtype(a)) end
      o = setmetatable({ rtol = rtol, atol = atol }, { __index = opts })
    end
    return mismatch(e, a, o, what)
  end
  if is_tensor(e) then return ("expected a tensor, got %s"):format(core.show(a)) end
  if type(e) == "number" and type(a) == "number" then
    local rtol, atol = opts.rtol, opts.atol
    if rtol == nil then rtol, atol = what == "close" and 1e-7 or 0, what == "close" and 1e-7 or 0 end
    if a == e or (opts.equal_nan and a ~= a and e ~= e) then return nil end
    local d = abs(a - e)
    if d < huge and d <= atol + rtol * abs(e) then return nil end
    return ("expected %s, actual %s (abs diff %s)"):format(fmt_value(e, "float64"), fmt_value(a, "float64"),
                                                         fmt_diff(abs(a - e)))
  end
  if e == a then return nil end
  return ("expected %s, actual %s"):format(core.show(e), core.show(a))
end

-- Walks tables of tensors (state dicts, lists of results) key by key,
-- actual driving: a tensor in actual is a leaf; a table in actual is
-- matched key by key.  Returns nil, or the reason and the path (keys).
local function compare_tree(e, a, opts, what, keys, seen)
  if type(a) ~= "table" or is_tensor(a) then
    local why = compare_leaf(e, a, opts, what)
    return why
  end
  if type(e) ~= "table" or is_tensor(e) then
    return ("expected %s, got a table"):format(is_tensor(e) and "a tensor" or core.show(e))
  end
  if seen[a] == e then return nil end
  seen[a] = e
  local depth = #keys + 1
  for k, v in pairs(e) do
    keys[depth] = k
    if a[k] == nil then return "missing in actual" end
    local why = compare_tree(v, a[k], opts, what, keys, seen)
    if why then return why end
  end
  for k in pairs(a) do
    keys[depth] = k
    if e[k] == nil then return "not expected (actual has it)" end
  end
  keys[depth] = nil
  return nil
end

-- The reason expected and actual differ, with the path ("at fc.weight: ...").
local function check(e, a, opts, what)
  local keys = {}
  local why = compare_tree(e, a, opts, what, keys, {})
  if why and #keys > 0 then why = "at " .. serialize.path("", keys) .. ": " .. why end
  return why
end

-- tensor_equal(expected, actual[, opts]) -> true, or false and why: the
-- same shape, dtype and device and every element equal (NaN equals
-- nothing unless equal_nan) -- torch.equal with the metadata checks of
-- torch.testing.assert_close at rtol = atol = 0.  Tables of tensors (state
-- dicts) compare key by key; an expected number or nested table is taken
-- as a tensor.  opts: equal_nan, check_dtype, check_device.
function M.tensor_equal(expected, actual, opts)
  local o, err = options(opts, "equal")
  if not o then raise(err) end
  local why = check(expected, actual, o, "equal")
  if why then return false, why end
  return true
end

-- tensor_close(expected, actual[, opts]) -> true, or false and why:
-- |actual - expected| <= atol + rtol * |expected| elementwise, as
-- torch.testing.assert_close (defaults per dtype: M.default_tolerances).
-- opts: rtol and atol (both or neither), equal_nan, check_dtype, check_device.
function M.tensor_close(expected, actual, opts)
  local o, err = options(opts, "close")
  if not o then raise(err) end
  local why = check(expected, actual, o, "close")
  if why then return false, why end
  return true
end

-- -- assert.are.same on tensors ---------------------------------------------------

-- Whether v is a tensor or a table holding one.
local function has_tensor(v, seen)
  if is_tensor(v) then return true end
  if type(v) ~= "table" then return false end
  seen = seen or {}
  if seen[v] then return false end
  seen[v] = true
  for k, x in next, v do
    if has_tensor(x, seen) or has_tensor(k, seen) then return true end
  end
  return false
end

-- luassert's deep comparison (util.deepcompare), with tensors compared by
-- value as tensor_equal does rather than by handle.  Returns true, or
-- false, the path (keys) and why.
local function deep_same(e, a, keys, seen, top)
  if is_tensor(e) or is_tensor(a) then
    if not (is_tensor(e) and is_tensor(a)) then
      return false, ("expected %s, got %s"):format(is_tensor(e) and "a tensor" or core.show(e),
                                                    is_tensor(a) and "a tensor" or core.show(a))
    end
    -- one tensor is the same as itself, as a table is in luassert (NaNs and
    -- freed tensors included); compared as addresses, whatever == means
    if core.same(e, a) then return true end
    local why = mismatch(e, a, { rtol = 0, atol = 0 }, "equal")
    return why == nil, why
  end
  if type(e) ~= "table" or type(a) ~= "table" then
    if e == a then return true end
    return false, ("expected %s, got %s"):format(core.show(e), core.show(a))
  end
  -- as luassert: below the top, tables whose shared metatable has __eq use it
  local mt = debug.getmetatable(e)
  if not top and mt and mt == debug.getmetatable(a) and mt.__eq then
    return e == a, "the tables' __eq says they differ"
  end
  if rawequal(e, a) or seen[e] == a then return true end
  seen[e] = a
  local depth = #keys + 1
  for k, v in next, e do
    keys[depth] = k
    local w = a[k]
    if w == nil then return false, "missing in the value passed in" end
    local ok, why = deep_same(v, w, keys, seen, false)
    if not ok then return false, why end
  end
  for k in next, a do
    keys[depth] = k
    if e[k] == nil then return false, "not expected (the value passed in has it)" end
  end
  keys[depth] = nil
  return true
end

-- -- luassert ----------------------------------------------------------------------

local function user_message(arguments, i)
  local m = arguments[i]
  if m ~= nil then return tostring(m) end
end

-- The callback of tensor_equal / tensor_close: (expected, actual[, opts][, message]).
local function assertion(what)
  return function(state, arguments, level)
    level = (level or 1) + 1
    if (arguments.n or #arguments) < 2 then
      error(("tensor_%s: expected two arguments (expected, actual), got %d"):format(what, arguments.n or #arguments), level)
    end
    local e, a, opts, msg = arguments[1], arguments[2], arguments[3], nil
    if type(opts) == "string" then opts, msg = nil, opts else msg = user_message(arguments, 4) end
    local o, err = options(opts, what)
    if not o then error(err, level) end
    local why = check(e, a, o, what)
    -- shown as luassert shows same(): the value passed in, then the expected one
    arguments[1], arguments[2], arguments[3], arguments[4] = a, e, nil, nil
    arguments.n = 2
    if why or msg then rawset(state, "failure_message", (msg and msg .. "\n" or "") .. (why or "")) end
    return why == nil
  end
end

-- same(): tensors and tables holding them by value; the rest as luassert does.
local function make_same(orig)
  return function(state, arguments, level)
    local e, a = arguments[1], arguments[2]
    if (arguments.n or #arguments) < 2 or not (has_tensor(e) or has_tensor(a)) then
      return orig(state, arguments, level)
    end
    local keys = {}
    local ok, why = deep_same(e, a, keys, {}, true)
    local msg = user_message(arguments, 3)
    arguments[1], arguments[2] = a, e
    if type(e) == "table" and type(a) == "table" and not ok then
      local crumbs = {}  -- luassert's order: innermost key first
      for i = #keys, 1, -1 do crumbs[#crumbs + 1] = keys[i] end
      arguments.fmtargs = { { crumbs = crumbs }, { crumbs = crumbs } }
    end
    if not ok then
      if #keys > 0 then why = "at " .. serialize.path("", keys) .. ": " .. why end
      rawset(state, "failure_message", (msg and msg .. "\n" or "") .. why)
    elseif msg then
      rawset(state, "failure_message", msg)
    end
    return ok
  end
end

-- register([luassert]): adds tensor_equal and tensor_close to luassert and
-- makes same() compare tensors by value.  Requiring this module does it
-- when luassert is loaded (under busted it is).  Idempotent: busted loads
-- the module afresh for each spec file.
function M.register(luassert)
  luassert = luassert or require "luassert"
  local say = require "say"
  local namespaces = require "luassert.namespaces"
  for _, what in ipairs { "equal", "close" } do
    say:set("assertion.tensor_" .. what .. ".positive",
            "Expected tensors to be " .. what .. ".\nPassed in:\n%s\nExpected:\n%s")
    say:set("assertion.tensor_" .. what .. ".negative",
            "Expected tensors not to be " .. what .. ".\nPassed in:\n%s\nDid not expect:\n%s")
    luassert:register("assertion", "tensor_" .. what, assertion(what),
                      "assertion.tensor_" .. what .. ".positive", "assertion.tensor_" .. what .. ".negative")
  end
  local same = namespaces.assertion.same
  -- the original callback, kept on luassert's own entry across reloads
  local orig = same.ddp_original or same.callback
  luassert:register("assertion", "same", make_same(orig), same.positive_message, same.negative_message)
  namespaces.assertion.same.ddp_original = orig
  return luassert
end

if package.loaded.luassert then M.register(package.loaded.luassert) end

-- -- testing.run: a chunk as an N-rank job ----------------------------------------

local function q(s) return "'" .. tostring(s):gsub("'", [['\'']]) .. "'" end

local function readable(path)
  local f = io.open(path, "rb")
  if f then f:close() end
  return f ~= nil
end

local function slurp(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

local function write(path, s)
  local f = assert(io.open(path, "wb"))
  f:write(s)
  f:close()
end

-- program() -> the ddplua program jobs are started with: $DDPLUA; else the
-- running program when it is ddplua; else the one of the build tree or
-- install this library belongs to; else `ddplua` on PATH.
function M.program()
  local env = os.getenv("DDPLUA")
  if env and env ~= "" then return env end
  local running = package.loaded["ddp.program"]  -- set by ddplua's main.c
  if type(running) == "table" and running.exe and readable(running.exe) then return running.exe end
  local here = require("ddp.ffi").source:match("^@(.*)/[^/]*$")
  if here then
    for _, rel in ipairs { "/../../build/ddplua", "/../../../../bin/ddplua" } do
      if readable(here .. rel) then return here .. rel end
    end
  end
  for dir in (os.getenv("PATH") or ""):gmatch("[^:]+") do
    if readable(dir .. "/ddplua") then return dir .. "/ddplua" end
  end
  return nil
end

-- Values in and out of a job go through one safetensors file: tensors as
-- tensors, the rest as ddp.serialize's text in its metadata.
local function save_values(path, values, root)
  local tensors, count = {}, 0
  local text = serialize.encode(values, {
    op = "testing.run", root = root, verb = "sent", plain = true,
    tensor = function(t)
      count = count + 1
      local name = "t" .. count
      tensors[name] = T.detach(t)
      return name
    end,
  })
  checkpoint.save(tensors, path, { values = text })
end

local function load_values(path)
  local tensors, meta = checkpoint.load(path)
  local v, err = serialize.decode(meta.values, { tensors = tensors })
  if err then error("testing.run: " .. path .. ": " .. err, 0) end
  return v
end

-- The name under which v is in package.loaded (a module), or a module's
-- field holding it (math.floor, nn.Linear): {module =, field =}, or nil.
local function find_module(v)
  local best
  for name, m in pairs(package.loaded) do
    if rawequal(m, v) and type(name) == "string" and (not best or #name < #best) then best = name end
  end
  if best then return { module = best } end
  for name, m in pairs(package.loaded) do
    if type(m) == "table" and type(name) == "string" and name ~= "_G" then
      for k, x in pairs(m) do
        if rawequal(x, v) and type(k) == "string" then return { module = name, field = k } end
      end
    end
  end
  return nil
end

-- A function's bytecode and its upvalues as the ranks rebuild them:
-- modules by name, plain values copied.
local function function_chunk(f)
  if debug.getinfo(f, "S").what == "C" then raise("testing.run: cannot send a C function to the ranks") end
  local ups = {}
  for i = 1, huge do
    local name, v = debug.getupvalue(f, i)
    if name == nil then break end
    local tv = type(v)
    local up = { name = name }
    if tv == "function" or tv == "userdata" or tv == "thread" or (tv == "table" and getmetatable(v) ~= nil)
       or (tv == "cdata" and not is_tensor(v)) then
      local m = find_module(v)
      if not m then
        raise(("testing.run: the function's upvalue '%s' is a %s the ranks cannot get; "
               .. "require it inside the function, or pass it in {args = {...}}"):format(name, describe(v)))
      end
      up.module, up.field = m.module, m.field
    elseif tv == "table" and find_module(v) then
      local m = find_module(v)
      up.module, up.field = m.module, m.field
    else
      up.value = v
    end
    ups[i] = up
  end
  return string.dump(f), ups
end

-- The variables of an outer job (and of SLURM, which the launcher reads)
-- are not the inner job's.
local CLEAN = "env -u RANK -u WORLD_SIZE -u LOCAL_RANK -u LOCAL_WORLD_SIZE -u NODE_RANK -u GROUP_RANK "
  .. "-u MASTER_ADDR -u MASTER_PORT -u DDP_STORE_TOKEN -u DDP_JOB_ID -u DDP_LAUNCH_ID -u DDP_RESTART_COUNT -u DDP_MAX_RESTARTS "
  .. "-u DDP_TTY -u SLURM_JOB_ID -u SLURM_JOB_NUM_NODES -u SLURM_NNODES -u SLURM_NODEID "
  .. "-u SLURM_JOB_NODELIST -u SLURM_NODELIST "

pcall(ffi.cdef, "char *mkdtemp(char *template); char *strerror(int errnum);")

local function make_dir(parent)
  local template = ffi.new("char[?]", #parent + 32)
  ffi.copy(template, parent .. "/ddplua-run-XXXXXX")
  if ffi.C.mkdtemp(template) == nil then
    raise(("testing.run: cannot make a temporary directory in %s: %s"):format(parent, ffi.string(ffi.C.strerror(ffi.errno()))))
  end
  return ffi.string(template)
end

-- "rank 1" / "ranks 0, 2"
local function ranks_text(list)
  return (#list == 1 and "rank " or "ranks ") .. concat(list, ", ")
end

local function tail(text, n, indent)
  local lines = {}
  for line in (text or ""):gmatch("[^\n]+") do lines[#lines + 1] = line end
  local out = {}
  for i = math.max(1, #lines - n + 1), #lines do out[#out + 1] = indent .. lines[i] end
  return concat(out, "\n")
end

local RUN_OPTS = { args = true, timeout = true, env = true, program = true, tmpdir = true }

-- After the job: each rank's value, or the error naming the ranks.
local function collect(dir, n, rc, secs)
  local results, errors, missing = { n = n }, {}, {}
  local output = slurp(dir .. "/output") or ""
  results.output = {}
  for r = 0, n - 1 do
    results.output[r + 1] = slurp(dir .. "/logs/rank" .. r .. ".log") or ""
    local err = slurp(dir .. "/rank" .. r .. ".err")
    if err then
      errors[#errors + 1] = { rank = r, msg = err }
    elseif readable(dir .. "/rank" .. r .. ".st") then
      results[r + 1] = load_values(dir .. "/rank" .. r .. ".st")
    else
      missing[#missing + 1] = r
    end
  end
  if #errors > 0 then
    -- ranks failing alike say it once
    local lines, by_msg, order = {}, {}, {}
    for _, e in ipairs(errors) do
      if not by_msg[e.msg] then by_msg[e.msg] = {}; order[#order + 1] = e.msg end
      local l = by_msg[e.msg]
      l[#l + 1] = e.rank
    end
    for _, m in ipairs(order) do lines[#lines + 1] = ranks_text(by_msg[m]) .. ": " .. m end
    raise(concat(lines, "\n"))
  end
  if rc == 124 or rc == 137 then
    local lines = { ("testing.run: timed out after %g s; %s of %d did not finish"):format(secs, ranks_text(missing), n) }
    for _, r in ipairs(missing) do
      local t = tail(results.output[r + 1], 5, ("  [%d] "):format(r))
      if t ~= "" then lines[#lines + 1] = t end
    end
    raise(concat(lines, "\n"))
  end
  if #missing > 0 then
    -- the launcher names a rank that died: "ddplua: rank 1 (local rank 1) failed with exit code 3"
    local dead, how = output:match("ddplua: rank (%d+) %(local rank %d+%) failed with ([^\n]+)")
    if dead then
      local t = tail(results.output[tonumber(dead) + 1], 5, "  [" .. dead .. "] ")
      raise(("rank %s: failed with %s before returning%s"):format(dead, how, t ~= "" and "\n" .. t or ""))
    end
    if rc == 0 then
      raise(("testing.run: %s of %d exited without returning (os.exit?)"):format(ranks_text(missing), n))
    end
    raise(("testing.run: the job exited with code %d; %s of %d did not finish\n%s")
          :format(rc, ranks_text(missing), n, tail(output, 10, "  ")))
  end
  if rc ~= 0 then
    raise(("testing.run: every rank returned, but the job exited with code %d\n%s"):format(rc, tail(output, 10, "  ")))
  end
  return results
end

-- run(n, chunk[, opts]) -> results: runs chunk as a real job of `ddplua
-- --nproc n` and returns results[r + 1] = the first value rank r's chunk
-- returned (tables and tensors come back as copies; return a table for
-- several), results.n = n, results.output[r + 1] = rank r's printed output.
--   chunk: a function (sent as bytecode; its upvalues that are modules are
--          required on the ranks, plain values and tensors copied), a file
--          name ending in .lua, or a string of Lua code; it gets opts.args
--          as its arguments (...).
--   opts:  args = {...}, timeout = seconds (60), env = {NAME = "value"},
--          program = path to ddplua (default: M.program()), tmpdir = where
--          the job's temporary directory goes ($TMPDIR or /tmp).
-- An error on a rank raises "rank r: <message>" here; a timeout names the
-- ranks that did not finish.  Every process of the job is gone and its
-- temporary files removed when this returns or raises.
function M.run(n, chunk, opts)
  if not core.is_integer(n) or n < 1 then
    raise("testing.run: the number of ranks must be a whole number >= 1, got " .. core.show(n))
  end
  opts = opts or {}
  if type(opts) ~= "table" then raise("testing.run: options must be a table, got " .. core.show(opts)) end
  for k in pairs(opts) do
    if not RUN_OPTS[k] then
      raise(("testing.run: unknown option %s (expected args, timeout, env, program, tmpdir)"):format(core.show(k)))
    end
  end
  local secs = opts.timeout or 60
  if type(secs) ~= "number" or not (secs > 0) then
    raise("testing.run: timeout must be a number of seconds > 0, got " .. core.show(secs))
  end
  local args = opts.args or {}
  if type(args) ~= "table" or is_tensor(args) then
    raise("testing.run: args must be a list of values, got " .. core.show(args))
  end
  local env = {}
  for k, v in pairs(opts.env or {}) do
    if type(k) ~= "string" or not k:match("^[%a_][%w_]*$") or (type(v) ~= "string" and type(v) ~= "number") then
      raise(("testing.run: env must map variable names to strings, got %s = %s"):format(core.show(k), core.show(v)))
    end
    env[#env + 1] = k .. "=" .. q(v)
  end
  table.sort(env)
  local program = opts.program or M.program()
  if not program then
    raise("testing.run: cannot find the ddplua program (not running under it, none in the build "
          .. "tree or on PATH); set DDPLUA=/path/to/ddplua")
  end

  local job = { path = package.path, cpath = package.cpath, args = { n = args.n or #args, unpack(args, 1, args.n or #args) } }
  if type(chunk) == "function" then
    job.code, job.upvalues = function_chunk(chunk)
  elseif type(chunk) == "string" and not chunk:find("\n") and chunk:match("%.lua$") then
    if not readable(chunk) then raise("testing.run: cannot open " .. chunk) end
    job.file = chunk
  elseif type(chunk) == "string" then
    job.code, job.name = chunk, "=(testing.run chunk)"
    local ok, err = loadstring(chunk, job.name)
    if not ok then raise("testing.run: the chunk does not compile: " .. err) end
  else
    raise("testing.run: expected a function, a file name or Lua code, got " .. core.show(chunk))
  end

  local parent = opts.tmpdir or os.getenv("TMPDIR") or "/tmp"
  local dir = make_dir(parent)
  local ok, res = pcall(function()
    save_values(dir .. "/job.st", job, "the job")
    write(dir .. "/main.lua", ("-- a rank of testing.run\nreturn require(\"ddp.testing\").worker(%q)\n"):format(dir))
    local cmd = CLEAN .. concat(env, " ") .. " timeout -k 5 " .. secs .. " " .. q(program)
      .. " --nproc " .. n .. " --grace 2 --log-dir " .. q(dir .. "/logs") .. " " .. q(dir .. "/main.lua")
      .. " </dev/null >" .. q(dir .. "/output") .. " 2>&1; echo $?"
    local p = assert(io.popen(cmd))
    local rc = tonumber(p:read("*a"):match("(%d+)%s*$"))
    p:close()
    if rc == 127 and not (slurp(dir .. "/output") or ""):find("ddplua", 1, true) then
      raise("testing.run: cannot run " .. program .. " under `timeout` (coreutils):\n"
            .. tail(slurp(dir .. "/output"), 5, "  "))
    end
    return collect(dir, n, rc, secs)
  end)
  os.execute("rm -rf " .. q(dir))
  if not ok then error(res, 0) end
  return res
end

-- -- On each rank ---------------------------------------------------------------------

-- worker(dir): what each rank of testing.run runs (dir/main.lua calls it):
-- the job's chunk, its first value (or its error) written to dir.
function M.worker(dir)
  local rank = tonumber(os.getenv("RANK")) or 0
  local function fail(msg)
    write(dir .. "/rank" .. rank .. ".err.tmp", msg)
    os.rename(dir .. "/rank" .. rank .. ".err.tmp", dir .. "/rank" .. rank .. ".err")
  end
  local traceback
  local ok, err = xpcall(function()
    local job = load_values(dir .. "/job.st")
    package.path, package.cpath = job.path, job.cpath
    local f = assert(job.code and loadstring(job.code, job.name) or loadfile(job.file))
    -- the spec's assert (luassert) where busted is installed
    local has_luassert, luassert = pcall(require, "luassert")
    if has_luassert then
      M.register(luassert)
      setfenv(f, setmetatable({ assert = luassert }, { __index = _G, __newindex = _G }))
    end
    for i, up in pairs(job.upvalues or {}) do
      local v = up.value
      if up.module then
        v = require(up.module)
        if up.field then v = v[up.field] end
      end
      debug.setupvalue(f, i, v)
    end
    local out = { f(unpack(job.args, 1, job.args.n)) }
    local saved, err = pcall(save_values, dir .. "/rank" .. rank .. ".st", out[1], "the returned value")
    -- no line of ours in front: the value is the user's mistake
    if not saved then error((tostring(err):gsub("^[^\n]-:%d+: (testing%.run: )", "%1")), 0) end
  end, function(e)
    local msg = type(e) == "string" and e or (type(e) == "table" and getmetatable(e) and getmetatable(e).__tostring
      and tostring(e)) or ("(error object is a %s value)"):format(describe(e))
    traceback = debug.traceback(msg, 2)
    return msg
  end)
  if ok then return end
  fail(err)
  io.stderr:write("ddplua: ", traceback, "\n")
  io.stderr:flush()
  os.exit(1, true)
end

return M
