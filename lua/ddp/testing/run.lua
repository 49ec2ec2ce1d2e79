-- ddp.testing.run: testing.run, which runs a chunk as a real N-rank job of
-- `ddplua --nproc N` and hands back what each rank returned, and the
-- worker each rank of such a job runs.
local core = require "ddp.core"
local tensor = require "ddp.tensor"
local serialize = require "ddp.serialize"
local checkpoint = require "ddp.checkpoint"
local assertions = require "ddp.testing.assertions"
local ffi = core.ffi
local is_tensor, describe, raise = core.is_tensor, core.describe, core.raise
local T = tensor.methods
local type, pairs, tostring = type, pairs, tostring
local huge = math.huge
local concat, unpack = table.concat, unpack

core.add_lib_file(debug.getinfo(1, "S").source)

local M = {}

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
local function collect(dir, n, rc, secs, elapsed)
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
  -- the launcher names a rank that died: "ddplua: rank 1 (local rank 1) failed with signal SIGKILL";
  -- timeout's 124 (or 137 after its -k) only once the time is up: a rank
  -- SIGKILLed early (the out-of-memory killer) is a death, not a timeout
  local dead, how = output:match("ddplua: rank (%d+) %(local rank %d+%) failed with ([^\n]+)")
  if #missing > 0 and dead and not (elapsed >= secs) then
    local t = tail(results.output[tonumber(dead) + 1], 5, "  [" .. dead .. "] ")
    local why = how:find("SIGKILL", 1, true) and " (SIGKILL: the out-of-memory killer's signal, or a kill -9)" or ""
    raise(("rank %s: failed with %s%s before returning%s"):format(dead, how, why, t ~= "" and "\n" .. t or ""))
  end
  if (rc == 124 or rc == 137) and elapsed >= secs then
    local lines = { ("testing.run: timed out after %g s; %s of %d did not finish"):format(secs, ranks_text(missing), n) }
    for _, r in ipairs(missing) do
      local t = tail(results.output[r + 1], 5, ("  [%d] "):format(r))
      if t ~= "" then lines[#lines + 1] = t end
    end
    raise(concat(lines, "\n"))
  end
  if #missing > 0 then
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
    local t0 = core.clock()
    local p = assert(io.popen(cmd))
    local rc = tonumber(p:read("*a"):match("(%d+)%s*$"))
    p:close()
    local elapsed = core.clock() - t0
    if rc == 127 and not (slurp(dir .. "/output") or ""):find("ddplua", 1, true) then
      raise("testing.run: cannot run " .. program .. " under `timeout` (coreutils):\n"
            .. tail(slurp(dir .. "/output"), 5, "  "))
    end
    return collect(dir, n, rc, secs, elapsed)
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
      assertions.register(luassert)
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
