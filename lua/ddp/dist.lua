-- ddp.dist: the process group -- who am I, how many are we, the tensor
-- collectives (all_reduce, broadcast, all_gather, reduce_scatter, and
-- barrier: runtime/dist/pg.c over its shm, gloo, hier and nccl transports)
-- and the objects through
-- the launcher's rendezvous store.  Its functions are also on ddp itself
-- (ddp.init, ddp.rank, ddp.barrier, ...).
--
-- A script not started by the launcher (no WORLD_SIZE/RANK) is a world of
-- one and never touches a store, so the same script runs alone and under
-- `ddplua --nproc N`.  A world of one under the launcher needs no store
-- either.
--
-- Store keys: "ddp/node/<node>" (each node's layout, checked alike on
-- every node), "ddp/init/<rank>" (check-in), and "ddp/<seq>/..." for every
-- later call, seq counting the calls, which every rank makes in the same
-- order (as with PyTorch's collectives).
local core = require "ddp.core"
local store = require "ddp.store"
local serialize_value = require "ddp.serialize"
local raise, show = core.raise, core.show
local type, tostring, tonumber, pairs, pcall = type, tostring, tonumber, pairs, pcall
local concat, floor, huge = table.concat, math.floor, math.huge

core.add_lib_file(debug.getinfo(1, "S").source)

local M = {}
local C, ffi = core.C, core.ffi

-- -- The environment ----------------------------------------------------------

local env_cache

local function int_env(name, dflt, min)
  local s = os.getenv(name)
  if s == nil or s == "" then return dflt end
  local n = tonumber(s)
  if not core.is_integer(n) or n < min then
    raise(("ddp: environment variable %s=%q is not an integer >= %d"):format(name, s, min))
  end
  return n
end

-- Reads (once) and checks the launcher's variables.
local function env()
  if env_cache then return env_cache end
  local ws_s, rank_s = os.getenv("WORLD_SIZE"), os.getenv("RANK")
  local e
  if (ws_s == nil or ws_s == "") and (rank_s == nil or rank_s == "") then
    e = { rank = 0, world_size = 1, local_rank = 0, local_world_size = 1, node_rank = 0, launched = false }
  else
    if ws_s == nil or ws_s == "" or rank_s == nil or rank_s == "" then
      raise(("ddp: RANK and WORLD_SIZE must be set together (RANK=%s, WORLD_SIZE=%s); "
             .. "start the script with `ddplua --nproc N script.lua`, or unset both for a world of one")
            :format(show(rank_s), show(ws_s)))
    end
    local ws = int_env("WORLD_SIZE", nil, 1)
    local rank = int_env("RANK", nil, 0)
    if rank >= ws then
      raise(("ddp: RANK=%d is out of range for WORLD_SIZE=%d (ranks are 0..%d)"):format(rank, ws, ws - 1))
    end
    local lws = int_env("LOCAL_WORLD_SIZE", ws, 1)
    local lr = int_env("LOCAL_RANK", rank % lws, 0)
    if lr >= lws then
      raise(("ddp: LOCAL_RANK=%d is out of range for LOCAL_WORLD_SIZE=%d"):format(lr, lws))
    end
    if lws > ws then
      raise(("ddp: LOCAL_WORLD_SIZE=%d is larger than WORLD_SIZE=%d"):format(lws, ws))
    end
    e = { rank = rank, world_size = ws, local_rank = lr, local_world_size = lws,
          node_rank = int_env("NODE_RANK", int_env("GROUP_RANK", 0, 0), 0), launched = true }
  end
  env_cache = e
  return e
end

function M.rank() return env().rank end
function M.world_size() return env().world_size end
function M.local_rank() return env().local_rank end
function M.local_world_size() return env().local_world_size end
function M.node_rank() return env().node_rank end
function M.is_main() return env().rank == 0 end
-- torch.distributed's names, for the fingers of PyTorch users
M.get_rank, M.get_world_size = M.rank, M.world_size

-- Real (not emulated) CUDA devices, for the choice of NCCL.
local function real_cuda_devices()
  local n = C.dl_cuda_device_count()
  if n <= 0 then return 0 end
  if ffi.string(C.dl_cuda_status()):find("emulat", 1, true) then return 0 end
  return n
end

-- ddp.device() / ddp.local_device(): this rank's device, "cuda:<k>" with
-- k = LOCAL_RANK mod the number of devices where CUDA is available (one
-- rank per GPU, as torchrun), else "cpu".
function M.device()
  local n = C.dl_cuda_device_count()
  if n > 0 then return "cuda:" .. (env().local_rank % n) end
  return "cpu"
end
M.local_device = M.device

-- ddp.print(...): as print, on rank 0 only.
function M.print(...)
  if env().rank == 0 then print(...) end
end

-- ddp.log(...): as print, on every rank.  The launcher already prefixes each
-- worker's lines with "[rank] " (unless --no-prefix), so nothing is added.
function M.log(...)
  print(...)
end

-- -- Init and shutdown ------------------------------------------------------

local backends = { auto = true, cpu = true, shm = true, gloo = true, hier = true, nccl = true }
local state = nil   -- {store=, timeout=, backend=, pg=} once initialized
local seq = 0       -- calls through the store since init

local function timeout_arg(op, t)
  if t ~= nil then
    if type(t) ~= "number" or not (t > 0) or t == huge then
      raise(op .. ": timeout must be a positive number of seconds, got " .. show(t))
    end
    return t
  end
  local s = os.getenv("DDP_TIMEOUT")
  if s == nil or s == "" then return 600 end
  local n = tonumber(s)
  if not n or not (n > 0) or n == huge then
    raise(op .. ": DDP_TIMEOUT=" .. ("%q"):format(s) .. " is not a positive number of seconds")
  end
  return n
end

local function fmt_s(t)
  if t == floor(t) then return ("%d s"):format(t) end
  return ("%g s"):format(t)
end

-- The ranks whose key is missing (a list), or nil when the store cannot
-- say (gone: the caller's own error tells why).
local function missing_list(s, keys)
  local missing = {}
  for r = 0, #keys - 1 do
    local ok, present = pcall(s.check, s, { keys[r + 1] })
    if not ok then return nil end
    if not present then missing[#missing + 1] = r end
  end
  return missing
end

local function ranks_text(list)
  return (#list == 1 and "rank " or "ranks ") .. concat(list, ", ")
end

-- The launcher records in the store each worker that ends, whatever its
-- exit code (cli/workers.c): "ddp/exits" counts them, "ddp/exit/<rank>"
-- says how.  A wait checks them between slices, so a rank that ended early
-- -- even with exit code 0 -- is named within about a second, not after
-- the whole timeout.
local EXITS, SLICE = "ddp/exits", 1

-- "rank 1 (exit code 0)", for those of `ranks` that ended; nil if none.
local function ended(s, ranks)
  local ok, n = pcall(s.add, s, EXITS, 0)
  if not ok or n == 0 then return nil end
  local out = {}
  for _, r in ipairs(ranks) do
    local key = "ddp/exit/" .. r
    local ok2, present = pcall(s.check, s, { key })
    if ok2 and present then
      local ok3, how = pcall(s.get, s, key, 1)
      out[#out + 1] = ("rank %d (%s)"):format(r, ok3 and how or "ended")
    end
  end
  return #out > 0 and concat(out, ", ") or nil
end

-- Waits for every rank's key (or, with src, for src's alone) in slices of
-- SLICE seconds: between them, a rank that ended is named at once; on the
-- timeout, the ranks that never set theirs.  A store that is gone ends it
-- with its own error.
local function wait_keys(op, keys, what, src, left)
  local s, t = state.store, left or state.timeout
  local slices = math.max(1, math.ceil(t / SLICE))
  for i = 1, slices do
    local slice = i < slices and SLICE or (t - SLICE * (slices - 1))
    local ok, err
    if src then ok, err = pcall(s.get, s, keys[1], slice) else ok, err = pcall(s.wait, s, keys, slice) end
    if ok then return err end
    err = tostring(err):gsub("^[^:]*:%d+: ", "")
    if not err:find("timed out", 1, true) then raise(op .. ": " .. err) end
    local missing = src and { src } or missing_list(s, keys)
    if missing and #missing > 0 then
      local gone = ended(s, missing)
      if gone then raise(("%s: %s ended before %s"):format(op, gone, what == "arrive" and "arriving" or what)) end
    end
    if i == slices then
      if missing and #missing > 0 then
        raise(("%s: timed out after %s; %s of %d did not %s"):format(op, fmt_s(state.timeout), ranks_text(missing),
                                                                       src and env().world_size or #keys, what))
      end
      raise(op .. ": " .. err)
    end
  end
end

-- Every node must run as many workers as every other (the launcher's
-- --nproc, and be started for as many nodes, --nnodes): ranks are numbered
-- node by node (rank = node * nproc + local rank), so a node started with
-- another --nproc shares rank numbers with its neighbours and waits for
-- ranks that never come.  Each rank publishes its node's layout under the
-- node's key and compares every node's with its own, node by node, so the
-- ranks of both sides refuse a mismatch as soon as they meet it, naming
-- both values.  Node 0 serves the store and takes it away when it fails:
-- so a mismatched node can still read node 0's layout, its first rank to
-- have read it says so ("ddp/node/<n>/read0"; that rank fails at once, and
-- its launcher stops the others), and node 0's ranks wait for that before
-- failing.  deadline: on core.clock.
local function check_layout(s, e, deadline)
  local lws, ws = e.local_world_size, e.world_size
  if ws % lws ~= 0 then
    raise(("ddp.init: every node must run the same number of ranks (LOCAL_WORLD_SIZE=%d must divide WORLD_SIZE=%d)")
          :format(lws, ws))
  end
  local nnodes, node = ws / lws, floor(e.rank / lws)
  local mine = ("%d %d"):format(lws, ws)
  local function left() return math.max(deadline - core.clock(), 1e-3) end
  s:set("ddp/node/" .. node, mine)
  for n = 0, nnodes - 1 do
    local key = "ddp/node/" .. n
    local ok, err = pcall(s.wait, s, { key }, left())
    if not ok then
      local there, present = pcall(s.check, s, { key })
      if there and not present then
        raise(("ddp.init: timed out after %s; node %d of %d (ranks %d to %d) did not arrive")
              :format(fmt_s(state.timeout), n, nnodes, n * lws, (n + 1) * lws - 1))
      end
      raise("ddp.init: " .. tostring(err):gsub("^[^:]*:%d+: ", ""))
    end
    local theirs = s:get(key)
    if n == 0 and node ~= 0 then s:set(("ddp/node/%d/read0"):format(node), "1") end
    if theirs ~= mine then
      local tl, tw = theirs:match("^(%d+) (%d+)$")
      tl, tw = tonumber(tl), tonumber(tw)
      if node == 0 then  -- bounded by the deadline; fails the same way after it
        pcall(s.wait, s, { ("ddp/node/%d/read0"):format(n) }, left())
      end
      if tl ~= lws then
        raise(("ddp.init: the nodes were started with different --nproc: node %d runs %d worker%s, node %d runs %d; "
               .. "start every node with the same --nproc"):format(node, lws, lws == 1 and "" or "s", n, tl))
      end
      raise(("ddp.init: the nodes were started with different --nnodes: node %d counts %d nodes, node %d counts %d; "
             .. "start every node with the same --nnodes"):format(node, nnodes, n, tw / tl))
    end
  end
end

-- left: what remains of the timeout (ddp.init's layout check took some).
local function wait_all(op, keys, what, left) wait_keys(op, keys, what, nil, left) end

local sentinel  -- closes the store when the Lua state is closed

-- "auto" means NCCL when this node has a real GPU for each of its ranks
-- (the device of a rank: ddp.device()), which then becomes the current
-- device; otherwise (or when NCCL cannot start: no libnccl.so.2) a CPU
-- transport, which stages CUDA tensors through host memory.
local function pick_backend(st, e)
  if st.backend == "auto" and real_cuda_devices() >= e.local_world_size then return "nccl" end
  return st.backend
end

-- The id that names this job's shared-memory files (dist/pg_shm.c): the job
-- id and the launcher's id of this launch on this node, so that two
-- launches with one job id (SLURM job steps of one allocation) never share
-- a name, and one ending never removes the other's files.
local function shm_job_id()
  local id, launch = os.getenv("DDP_JOB_ID"), os.getenv("DDP_LAUNCH_ID")
  if launch and launch ~= "" then return (id or "") .. "-" .. launch end
  return id
end

local function new_group(st, store_h, e, timeout)
  local b = pick_backend(st, e)
  -- a world of one has no store: shared memory with itself, or NCCL
  if store_h == nil and b ~= "nccl" then b = "auto" end
  local pg = C.dl_pg_new(store_h, e.rank, e.world_size, e.local_world_size, b,
                         shm_job_id(), timeout)
  if pg == nil and b ~= st.backend then
    -- every rank meets the same failure (rank 0 publishes its reason)
    if e.rank == 0 then
      io.stderr:write("ddp.init: NCCL unavailable (" .. core.last_error() .. "); using the CPU transport\n")
    end
    b = st.backend
    pg = C.dl_pg_new(store_h, e.rank, e.world_size, e.local_world_size, b,
                     shm_job_id(), timeout)
  end
  return pg
end

-- ddp.init([{backend=, timeout=}]): joins the process group.
function M.init(opts)
  if opts ~= nil and type(opts) ~= "table" then
    raise("ddp.init: options must be a table such as {backend = \"auto\"}, got " .. show(opts))
  end
  opts = opts or {}
  local backend, from = opts.backend, ""
  if backend == nil and os.getenv("DDP_BACKEND") and os.getenv("DDP_BACKEND") ~= "" then
    backend, from = os.getenv("DDP_BACKEND"), " (from DDP_BACKEND)"
  end
  if backend ~= nil and (type(backend) ~= "string" or not backends[backend]) then
    raise("ddp.init: unknown backend " .. show(backend) .. from
          .. "; expected \"auto\", \"cpu\", \"shm\", \"gloo\", \"hier\" or \"nccl\"")
  end
  if state then return end
  local timeout = timeout_arg("ddp.init", opts.timeout)
  local e = env()
  local st = { store = nil, timeout = timeout, backend = backend or "auto" }
  if e.world_size > 1 then
    local host = os.getenv("MASTER_ADDR")
    if host == nil or host == "" then host = "127.0.0.1" end
    local port = int_env("MASTER_PORT", nil, 1)
    if port == nil or port > 65535 then
      raise("ddp.init: MASTER_PORT must be set to the store's port (1..65535), got " .. show(os.getenv("MASTER_PORT")))
    end
    local token = os.getenv("DDP_STORE_TOKEN")
    if token == "" then token = nil end
    local ok, s = pcall(store.connect, host, port, { token = token, timeout = timeout })
    if not ok then
      raise(("ddp.init: cannot reach the store at %s:%d: %s"):format(host, port, tostring(s):gsub("^[^:]*:%d+: ", "")))
    end
    -- The sentinel below closes it: at lua_close LuaJIT runs cdata
    -- finalizers before userdata ones, so the handle's own finalizer would
    -- free it first and the sentinel then close it a second time.
    ffi.gc(s.h, nil)
    st.store = s
    state = st
    local keys = {}
    for r = 0, e.world_size - 1 do keys[r + 1] = "ddp/init/" .. r end
    local ok2, err = pcall(function()
      local deadline = core.clock() + timeout
      check_layout(s, e, deadline)
      s:set(keys[e.rank + 1], "1")
      wait_all("ddp.init", keys, "arrive", math.max(deadline - core.clock(), 1e-3))
    end)
    if not ok2 then
      state = nil
      s:close()
      error(err, 0)
    end
    -- Tensor collectives: NCCL with one rank per GPU, else shared memory
    -- within a node and Gloo across (pg.c picks from the node layout).
    local pg = new_group(st, s.h, e, timeout)
    if pg == nil then
      local msg = core.last_error()
      state = nil
      s:close()
      raise("ddp.init: cannot set up the process group (backend " .. st.backend .. "): " .. msg)
    end
    st.pg = ffi.gc(pg, C.dl_pg_free)
    if not sentinel then
      sentinel = newproxy(true)
      getmetatable(sentinel).__gc = function() if state and state.store then state.store:close() end end
    end
  end
  state = st
  seq = 0
  local n = C.dl_cuda_device_count()
  if n > 0 then core.set_current_cuda(e.local_rank % n) end
end

-- The current CUDA device index: ddp.cuda.set_device's, else this rank's
-- (ddp.init sets it), else 0.
function M.current_device()
  if core.current_cuda() then return core.current_cuda() end
  local n = C.dl_cuda_device_count()
  return n > 0 and env().local_rank % n or 0
end

function M.is_initialized() return state ~= nil end

-- The backend in use ("shm", "gloo", "hier" or "nccl"; in a world of one
-- the one its first collective will use), nil before init.
function M.backend()
  if not state then return nil end
  if state.pg then return ffi.string(C.dl_pg_backend(state.pg)) end
  return pick_backend(state, env()) == "nccl" and "nccl" or "shm"
end

-- ddp.shutdown(): leaves the process group; safe to repeat.  The store
-- connection is also closed when the program ends.
-- Run before the group goes (ddp.DDP lets go of its reducers there).
M._on_shutdown = {}

function M.shutdown()
  if not state then return end
  local s, pg = state.store, state.pg
  for _, f in ipairs(M._on_shutdown) do f() end
  state = nil
  if pg then
    ffi.gc(pg, nil)
    C.dl_pg_free(pg)
  end
  if s then s:close() end
end

local function need_init(op)
  if not state then
    raise(op .. ": call ddp.init() first")
  end
  return state
end

-- -- Barrier ----------------------------------------------------------------

local function check_name(op, name)
  if name ~= nil and type(name) ~= "string" then
    raise(op .. ": name must be a string, got " .. show(name))
  end
  return name or "barrier"
end

-- ddp.barrier([name][, {timeout=}]): returns once every rank called it.
function M.barrier(name, opts)
  if type(name) == "table" and opts == nil then name, opts = nil, name end
  name = check_name("ddp.barrier", name)
  local st = need_init("ddp.barrier")
  if not st.store then return end
  if M._timed(st.pg, "ddp.barrier", opts, C.dl_pg_barrier, st.pg) ~= 0 then
    raise(("ddp.barrier(%q): %s"):format(name, core.last_error()))
  end
end

-- -- Objects ----------------------------------------------------------------

-- Objects travel as ddp.serialize's text (never load()ed on arrival);
-- tables with a metatable are refused: they would arrive without their
-- class.
local function serialize(op, v)
  return serialize_value.encode(v, { op = op, root = "value", verb = "sent", plain = true })
end

local function deserialize(op, s)
  local v, err = serialize_value.decode(s)
  if err then raise(("%s: malformed object data %s"):format(op, err)) end
  return v
end

local function get(op, st, key, src)
  return wait_keys(op, { key }, "send it", src)
end

-- ddp.broadcast_object(v, src): src's v on every rank (a copy).
function M.broadcast_object(v, src)
  local op = "ddp.broadcast_object"
  local e = env()
  if src == nil then src = 0 end
  if not core.is_integer(src) or src < 0 or src >= e.world_size then
    raise(("%s: src must be a rank in 0..%d, got %s"):format(op, e.world_size - 1, show(src)))
  end
  local st = need_init(op)
  if not st.store then return deserialize(op, serialize(op, v)) end
  seq = seq + 1
  local key = ("ddp/%d/bcast"):format(seq)
  if e.rank == src then
    local data = serialize(op, v)
    st.store:set(key, data)
    return deserialize(op, data)
  end
  local data = get(op, st, key, src)
  -- the last rank to read it deletes it
  if st.store:add(key .. "/read", 1) == e.world_size - 1 then
    st.store:delete(key)
    st.store:delete(key .. "/read")
  end
  return deserialize(op, data)
end

-- ddp.all_gather_object(v): every rank's v, rank r's at [r + 1].
function M.all_gather_object(v)
  local op = "ddp.all_gather_object"
  local st = need_init(op)
  local data = serialize(op, v)
  if not st.store then return { deserialize(op, data) } end
  local e = env()
  seq = seq + 1
  local keys = {}
  for r = 0, e.world_size - 1 do keys[r + 1] = ("ddp/%d/ag/%d"):format(seq, r) end
  st.store:set(keys[e.rank + 1], data)
  wait_all(op, keys, "arrive")
  local res = {}
  for r = 0, e.world_size - 1 do
    res[r + 1] = deserialize(op, r == e.rank and data or st.store:get(keys[r + 1], st.timeout))
  end
  local done = ("ddp/%d/ag/done"):format(seq)
  if st.store:add(done, 1) == e.world_size then
    for r = 1, #keys do st.store:delete(keys[r]) end
    st.store:delete(done)
  end
  return res
end

-- -- Tensor collectives -------------------------------------------------------
--
-- Blocking, as PyTorch's; every rank must make the same calls in the same
-- order.  Errors (a timeout names the call, its number and the ranks that
-- had not arrived) leave the group unusable.

local red_ops = { sum = C.DL_PG_SUM, avg = C.DL_PG_AVG, max = C.DL_PG_MAX,
                  min = C.DL_PG_MIN, prod = C.DL_PG_PROD }

local function red_arg(op, r)
  if r == nil then return C.DL_PG_SUM end
  local v = type(r) == "string" and red_ops[r]
  if not v then
    raise(op .. ": op must be \"sum\", \"avg\", \"max\", \"min\" or \"prod\", got " .. show(r))
  end
  return v
end

local function tensor_in(op, t)
  if not core.is_tensor(t) then raise(op .. ": expected a tensor, got " .. core.describe(t)) end
  return t
end

-- The group for a collective: world > 1 made it at init; a world of one
-- makes its own (no store) on first use, so the same checks and results
-- hold there.
local function group(op)
  local st = need_init(op)
  if st.pg then return st.pg end
  local pg = new_group(st, nil, env(), st.timeout)
  if pg == nil then raise(op .. ": " .. core.last_error()) end
  st.pg = ffi.gc(pg, C.dl_pg_free)
  return st.pg
end

M._group = group

-- Per-call options {timeout = seconds}: sets the group's timeout for this
-- call and returns the one to restore (nil when unchanged).
local function push_timeout(pg, op, opts)
  if opts == nil then return nil end
  if type(opts) ~= "table" then
    raise(op .. ": options must be a table such as {timeout = 30}, got " .. show(opts))
  end
  for k in pairs(opts) do
    if k ~= "timeout" then raise(op .. ": unknown option " .. show(k) .. " (expected timeout)") end
  end
  if opts.timeout == nil then return nil end
  local t = timeout_arg(op, opts.timeout)
  local old = C.dl_pg_timeout(pg)
  C.dl_pg_set_timeout(pg, t)
  return old
end

-- f(...) under opts' timeout; the group's own timeout comes back after.
local function timed(pg, op, opts, f, ...)
  local old = push_timeout(pg, op, opts)
  local r = f(...)
  if old then C.dl_pg_set_timeout(pg, old) end
  return r
end
M._timed = timed  -- for ddp.barrier, defined above

-- A C call returning 0 or an error, under opts' timeout.
local function call(pg, op, opts, f, ...)
  if timed(pg, op, opts, f, ...) ~= 0 then raise("ddp." .. core.last_error()) end
end

-- As call, for C calls returning a new tensor.
local function call_new(pg, op, opts, f, ...)
  local p = timed(pg, op, opts, f, ...)
  if p == nil then raise("ddp." .. core.last_error()) end
  return core.own(p)
end

local function rank_arg(op, what, r, dflt)
  if r == nil and dflt ~= nil then return dflt end
  if not core.is_integer(r) then raise(op .. ": " .. what .. " must be a rank number, got " .. show(r)) end
  return r
end

-- ddp.all_reduce(t[, op][, {timeout=}]): t reduced over all ranks, in
-- place; returns t.
function M.all_reduce(t, op, opts)
  local name = "ddp.all_reduce"
  tensor_in(name, t)
  if type(op) == "table" and opts == nil then op, opts = nil, op end
  local o = red_arg(name, op)
  local pg = group(name)
  call(pg, name, opts, C.dl_pg_all_reduce, pg, t, o)
  return t
end

-- ddp.dist.differentiable_all_reduce(t[, op][, {timeout=}]): a new tensor,
-- t reduced over all ranks ("sum" or "avg"), recorded by autograd: its
-- backward all-reduces the gradient the same way, as
-- torch.distributed.nn.functional.all_reduce (SyncBatchNorm's statistics).
-- Every rank must run the same backward.
function M.differentiable_all_reduce(t, op, opts)
  local name = "ddp.differentiable_all_reduce"
  tensor_in(name, t)
  if type(op) == "table" and opts == nil then op, opts = nil, op end
  local o = red_arg(name, op)
  if o ~= C.DL_PG_SUM and o ~= C.DL_PG_AVG then
    raise(name .. ': op must be "sum" or "avg" (the differentiable ones), got ' .. show(op))
  end
  local pg = group(name)
  return call_new(pg, name, opts, C.dl_pg_all_reduce_grad, pg, t, o)
end

-- ddp.broadcast(t, src[, {timeout=}]): src's t on every rank, in place;
-- returns t.
function M.broadcast(t, src, opts)
  local name = "ddp.broadcast"
  tensor_in(name, t)
  src = rank_arg(name, "src", src, 0)
  local pg = group(name)
  call(pg, name, opts, C.dl_pg_broadcast, pg, t, src)
  return t
end

-- ddp.all_gather(t[, {timeout=}]): a new tensor, the ranks' t
-- concatenated along dim 0.
function M.all_gather(t, opts)
  local name = "ddp.all_gather"
  tensor_in(name, t)
  local pg = group(name)
  return call_new(pg, name, opts, C.dl_pg_all_gather, pg, t)
end

-- ddp.reduce_scatter(t[, op][, {timeout=}]): a new tensor, this rank's
-- 1/world slice (along dim 0) of t reduced over all ranks.
function M.reduce_scatter(t, op, opts)
  local name = "ddp.reduce_scatter"
  tensor_in(name, t)
  if type(op) == "table" and opts == nil then op, opts = nil, op end
  local o = red_arg(name, op)
  local pg = group(name)
  return call_new(pg, name, opts, C.dl_pg_reduce_scatter, pg, t, o)
end

-- ddp.send(t, dst[, {timeout=}]): t's data to rank dst, which receives it
-- with ddp.recv (blocking until it did, for messages over 1 MiB).
function M.send(t, dst, opts)
  local name = "ddp.send"
  tensor_in(name, t)
  dst = rank_arg(name, "dst", dst)
  local pg = group(name)
  call(pg, name, opts, C.dl_pg_send, pg, t, dst)
end

-- ddp.recv(t, src[, {timeout=}]): fills t, in place, with what rank src
-- sent; returns t.  Size and dtype must match the send's.
function M.recv(t, src, opts)
  local name = "ddp.recv"
  tensor_in(name, t)
  src = rank_arg(name, "src", src)
  local pg = group(name)
  call(pg, name, opts, C.dl_pg_recv, pg, t, src)
  return t
end

-- Handles of ddp.all_reduce_async: Work(w, t) owns w, the C handle of
-- the all-reduce of t.
local Work = core.class("ddp.Work")

function Work:init(w, t)
  self.w, self.t = ffi.gc(w, C.dl_work_free), t
end

-- h:wait(): blocks until the all-reduce finished; returns its tensor, or
-- raises its error.
function Work:wait()
  if C.dl_work_wait(self.w) ~= 0 then raise("ddp." .. core.last_error()) end
  return self.t
end

-- h:done(): true once the all-reduce finished (successfully or not).
function Work:done() return C.dl_work_done(self.w) ~= 0 end

Work.is_completed = Work.done
Work.__tostring = function(h)
  return ("ddp.Work(all_reduce, %s)"):format(h:done() and "done" or "running")
end

-- ddp.all_reduce_async(t[, op][, {timeout=}]): starts an in-place
-- all-reduce of t on the group's own thread and returns a handle with
-- :wait() and :done(); leave t alone until it is done.  Asynchronous
-- calls run in call order; a blocking collective waits for them first.
function M.all_reduce_async(t, op, opts)
  local name = "ddp.all_reduce_async"
  tensor_in(name, t)
  if type(op) == "table" and opts == nil then op, opts = nil, op end
  local o = red_arg(name, op)
  local pg = group(name)
  local w = timed(pg, name, opts, C.dl_pg_all_reduce_async, pg, t, o)
  if w == nil then raise("ddp." .. core.last_error()) end
  return Work(w, t)
end

return M
