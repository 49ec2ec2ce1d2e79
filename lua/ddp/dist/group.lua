-- ddp.dist.group: joining and leaving the process group (ddp.init,
-- ddp.shutdown) through the launcher's rendezvous store, and what the
-- collectives and the object exchange share: the group's state, waits on
-- store keys that name the ranks missing or ended, the C group of the
-- tensor collectives, and per-call timeouts.
--
-- Store keys: "ddp/node/<node>" (each node's layout, checked alike on
-- every node), "ddp/init/<rank>" (check-in), and "ddp/<seq>/..." for every
-- later call, seq counting the calls, which every rank makes in the same
-- order (as with PyTorch's collectives).
local core = require "ddp.core"
local store = require "ddp.dist.store"
local env_mod = require "ddp.dist.env"
local steps = require "ddp.core.steps"
local raise, show = core.raise, core.show
local env, int_env = env_mod._env, env_mod._int_env
local type, tostring, tonumber, pairs, pcall = type, tostring, tonumber, pairs, pcall
local concat, floor, huge = table.concat, math.floor, math.huge

core.add_lib_file(debug.getinfo(1, "S").source)

local M = {}
local C, ffi = core.C, core.ffi

local backends = { auto = true, cpu = true, shm = true, gloo = true, hier = true, nccl = true }
local state = nil   -- {store=, timeout=, backend=, pg=} once initialized
local seq = 0       -- calls through the store since init (ddp.dist.objects')

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
local leave_store

-- "auto" means NCCL when this node has a real GPU for each of its ranks
-- (the device of a rank: ddp.device()), or each task sees a GPU of its
-- own (CUDA_VISIBLE_DEVICES narrowed per task), which then becomes the current
-- device; otherwise (or when NCCL cannot start: no libnccl.so.2) a CPU
-- transport, which stages CUDA tensors through host memory.
local function pick_backend(st, e)
  if st.backend ~= "auto" then return st.backend end
  local n = env_mod._real_cuda_devices()
  if n >= e.local_world_size then return "nccl" end
  -- one GPU per task, as SLURM's --gpus-per-task=1 narrows
  -- CUDA_VISIBLE_DEVICES for each (NCCL refuses two ranks on one GPU)
  local vis = os.getenv("CUDA_VISIBLE_DEVICES")
  if n == 1 and e.kind ~= "ddplua" and vis and vis ~= "" then return "nccl" end
  return st.backend
end

-- The id that names this job's shared-memory files (dist/pg_shm.c): the job
-- id and the launcher's id of this launch on this node, so that two
-- launches with one job id (SLURM job steps of one allocation) never share
-- a name, and one ending never removes the other's files.
local function shm_job_id()
  local id, launch = os.getenv("DDP_JOB_ID"), os.getenv("DDP_LAUNCH_ID")
  if launch and launch ~= "" then return (id or "") .. "-" .. launch end
  -- no launcher: the job's id as every rank reads it (dist/launch_env.c)
  local e = env()
  if e.job_id ~= "" then return e.job_id end
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

-- -- Joining the store ---------------------------------------------------------

local function strip(err) return (tostring(err):gsub("^[^:]*:%d+: ", "")) end

local function is_loopback(host)
  return host == "localhost" or host:match("^127%.") ~= nil or host == "::1"
end

-- Where no launcher serves the store, rank 0 serves it itself (a thread of
-- this process, as node 0's launcher would: same limits, token and bounded
-- waits).  A port that is taken is told apart: this job's store already
-- (two rank 0s), another ddplua job's, or another program's.
local function serve_store(e, timeout)
  -- every interface unless every rank is on this node: rank 0 may be
  -- told "localhost" while the others reach it by name (a PyTorchJob)
  local bind = (e.nnodes == 1 and is_loopback(e.master_addr)) and "127.0.0.1" or "0.0.0.0"
  local ok, srv = pcall(store.server, { host = bind, port = e.master_port, token = e.token, timeout = timeout })
  if ok then return srv end
  local why = strip(srv)
  local where = ("rank 0 cannot serve the store on %s:%d (port %s)"):format(bind, e.master_port, e.port_from)
  if not why:find("in use", 1, true) then raise("ddp.init: " .. where .. ": " .. why) end
  local pok, other = pcall(store.connect, "127.0.0.1", e.master_port, { token = e.token, timeout = 1 })
  if pok then
    other:close()
    raise(("ddp.init: %s: this job's own store is already served there -- two processes are rank 0 of "
           .. "this %s launch (%s): was the job step started twice, or do two launches share one port?")
          :format(where, e.kind, e.vars))
  end
  local msg = strip(other)
  if msg:find("belongs to another job", 1, true) then
    raise(("ddp.init: %s: another ddplua job's store holds the port; set MASTER_PORT to a free port for this job")
          :format(where))
  elseif msg:find("is not a ddplua store", 1, true) then
    raise(("ddp.init: %s: another program holds the port (%s); set MASTER_PORT to a free port")
          :format(where, msg:match("%((.-)%)") or "not a ddplua store"))
  end
  raise("ddp.init: " .. where .. ": " .. why)
end

local RESOLVE = { "not known", "name resolution", "No address associated", "nodename nor servname" }

-- Connects to the store, waiting up to timeout where waiting can succeed
-- (its server is not up yet; its host's name does not resolve yet, as a
-- Kubernetes service's before its pod runs), and saying so within a few
-- seconds; a port held by something that is not this job's ddplua store
-- fails at once (store.c's handshake tells them apart).
local function connect_store(e, timeout)
  local host, port = e.master_addr, e.master_port
  local token = e.token ~= "" and e.token or nil
  local t0 = core.clock()
  local deadline, next_say, last = t0 + timeout, t0 + 3, nil
  while true do
    local left = deadline - core.clock()
    local ok, s = pcall(store.connect, host, port, { token = token, timeout = math.max(math.min(2, left), 0.05) })
    if ok then
      s:set_timeout(timeout)
      return s
    end
    local msg = strip(s)
    if not msg:find("could not connect to", 1, true) then raise("ddp.init: " .. msg) end
    last = msg:match("within [%d.]+ s: (.*)$") or msg
    local unresolved = false
    for _, p in ipairs(RESOLVE) do unresolved = unresolved or last:find(p, 1, true) ~= nil end
    local what
    if unresolved then
      what = ("MASTER_ADDR=%s does not resolve (%s)"):format(host, last)
    elseif e.serves_store then
      what = ("rank 0 has not served the store at %s:%d (%s launch: rank 0 serves it; port %s)")
             :format(host, port, e.kind, e.port_from)
    else
      what = ("the launcher's store at %s:%d does not answer (%s)"):format(host, port, last)
    end
    if core.clock() >= deadline then
      raise(("ddp.init: cannot reach the store at %s:%d within %s: %s"):format(host, port, fmt_s(timeout), what))
    end
    if core.clock() >= next_say then
      io.stderr:write(("ddp.init: rank %d waits: %s; retrying until DDP_TIMEOUT (%s, %s left)\n")
                      :format(e.rank, what, fmt_s(timeout), fmt_s(math.floor(deadline - core.clock() + 0.5))))
      io.stderr:flush()
      next_say = core.clock() + 60
    end
  end
end

-- The store of a world > 1: the launcher's, or the one rank 0 serves.
local function join_store(e, timeout)
  if e.serves_store and e.rank == 0 then
    local s = serve_store(e, timeout)
    return s, true
  end
  return connect_store(e, timeout), false
end

-- Where ranks serve the store themselves, each says it ended (as the
-- launcher does for its workers: "ddp/exit/<rank>", counted in
-- "ddp/exits"), and rank 0, whose process holds the store, keeps it up
-- until every rank has (bounded): a rank still finishing must not lose it.
leave_store = function(st, e)
  if not st or st.left or not e.serves_store or not st.store then return end
  st.left = true
  local s = st.store
  pcall(function()
    s:set_timeout(2)
    s:set("ddp/exit/" .. e.rank, "ended")
    if s:add(EXITS, 1) >= e.world_size then s:set("ddp/all_left", "1") end
  end)
  if e.rank == 0 then
    local wait = math.min(st.timeout, 30)
    local ok = pcall(s.wait, s, { "ddp/all_left" }, 3)
    if not ok then
      io.stderr:write(("ddp: rank 0 keeps the store up for the ranks still running (up to %s)\n"):format(fmt_s(wait)))
      pcall(s.wait, s, { "ddp/all_left" }, wait)
    end
  end
end

-- While the prompt runs a chunk on some ranks only (@0 ...; the stopped
-- rank of ddp.breakpoint), a collective would wait for ranks that never
-- join it: the prompt puts up a fence (dl_pg_set_fence) and every
-- collective, store-based ones included, fails at once naming why.
local function fence_check(op)
  local why = C.dl_pg_fence()
  if why ~= nil then raise(op .. ": " .. ffi.string(why)) end
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
  if e.world_size > 1 then fence_check("ddp.init") end
  -- the flight recorder: the launcher reads the ring of a rank from the
  -- file it named, hung or dead (cli/flight.c); elsewhere a private ring
  local fr = os.getenv("DDP_FLIGHT_FILE") or ""
  local entries = os.getenv("DDP_FLIGHT_ENTRIES") or ""
  local cap = tonumber(entries)
  if entries ~= "" and not (cap and cap % 1 == 0 and (cap == 0 or cap >= 16) and cap <= 1048576) then
    error(("ddp.init: DDP_FLIGHT_ENTRIES=%q is not a whole number from 16 to 1048576, or 0 for off (the flight "
      .. "recorder's ring length; default 2048)"):format(entries), 2)
  end
  cap = cap == 0 and -1 or cap or 0  -- 0: off (-1 to dl_flight_open); unset: its default
  if C.dl_flight_open(fr, e.rank, e.world_size, e.local_rank, e.job_id, cap) ~= 0 then
    io.stderr:write("ddplua: warning: " .. core.last_error() .. "; the flight recorder keeps its ring in memory\n")
    C.dl_flight_open("", e.rank, e.world_size, e.local_rank, e.job_id, cap)
  end
  local st = { store = nil, timeout = timeout, backend = backend or "auto" }
  if e.world_size > 1 then
    if e.problem ~= "" then raise("ddp.init: " .. e.problem) end
    local s = join_store(e, timeout)
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
    -- the step breakdown, for the launcher's straggler lines and its
    -- end-of-job table (cli/steps.c), and the memory peaks (cli/memory.c)
    steps.publish = function(kind, line)
      if line and st.store then st.store:set("ddp/" .. kind .. "/" .. e.rank, line) end
    end
    if not sentinel then
      sentinel = newproxy(true)
      getmetatable(sentinel).__gc = function()
        if state and state.store then
          steps.flush()
          steps.publish = nil
          leave_store(state, e)
          state.store:close()
        end
      end
    end
  end
  state = st
  seq = 0
  local n = C.dl_cuda_device_count()
  if n > 0 then core.set_current_cuda(e.local_rank % n) end
  for _, f in ipairs(M._after_init) do f() end
end

-- Run at the end of ddp.init, the group ready (ddp.trace starts the
-- launcher's --trace there).
M._after_init = {}

-- The current CUDA device index: ddp.cuda.set_device's, else this rank's
-- (ddp.init sets it), else 0.
function M.current_device()
  if core.current_cuda() then return core.current_cuda() end
  local n = C.dl_cuda_device_count()
  return n > 0 and env().local_rank % n or 0
end

function M.is_initialized() return state ~= nil end

-- The job's store, where ranks leave notes for the launcher (the
-- DataLoader's data wait, cli/launcher.c), or nil outside a group of
-- several ranks.
function M._store() return state and state.store end

-- The backend in use ("shm", "gloo", "hier" or "nccl"; in a world of one
-- the one its first collective will use), nil before init.
function M.backend()
  if not state then return nil end
  if state.pg then return ffi.string(C.dl_pg_backend(state.pg)) end
  return pick_backend(state, env()) == "nccl" and "nccl" or "shm"
end

-- Run before the group goes (ddp.DDP lets go of its reducers there).
M._on_shutdown = {}

-- ddp.shutdown(): leaves the process group; safe to repeat.  The store
-- connection is also closed when the program ends.

function M.shutdown()
  if not state then return end
  local s, pg = state.store, state.pg
  for _, f in ipairs(M._on_shutdown) do f() end
  local st = state
  state = nil
  if pg then
    ffi.gc(pg, nil)
    C.dl_pg_free(pg)
  end
  if s then
    steps.flush()
    steps.publish = nil
    leave_store(st, env())
    s:close()
  end
end

-- -- For the collectives and objects ------------------------------------------

-- The state of the group joined ({store=, timeout=, backend=, pg=}), or an
-- error under op's name (or the prompt's fence's).
local function need_init(op)
  fence_check(op)
  if not state then
    raise(op .. ": call ddp.init() first")
  end
  return state
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

-- After a collective failed: a rank the launcher does not watch (started by
-- srun or mpirun itself) writes its own flight recorder ring, and the
-- message says where; under the launcher, it reads every ring itself.
local function flight_dump()
  if C.dl_last_error_code() ~= C.DL_ESTATE then return "" end  -- a bad argument: nothing to compare
  local e = env()
  if (os.getenv("DDP_FLIGHT_FILE") or "") ~= "" or e.world_size <= 1 then return "" end
  local dir = ("ddplua-logs/%s/flight"):format(e.job_id ~= "" and e.job_id or "job")
  local path = ("%s/rank%d.bin"):format(dir, e.rank)
  if C.dl_flight_dump(path) ~= 0 then return "" end
  return ("; this rank's flight recorder ring is in %s (ddplua analyze %s, with every rank's)"):format(path, dir)
end

-- Internal to ddp.dist (and ddp.nn.parallel, whose reducers use the
-- group): the names ddp.dist itself does not give out start with _.
M._need_init, M._group, M._timed, M._timeout_arg = need_init, group, timed, timeout_arg
M._wait_keys, M._wait_all, M._flight_dump = wait_keys, wait_all, flight_dump
M._fence_check = fence_check
-- The number of the next call through the store (every rank counts alike).
function M._next_seq()
  seq = seq + 1
  return seq
end

return M
