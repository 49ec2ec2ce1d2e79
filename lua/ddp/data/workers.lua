-- ddp.data.workers: a DataLoader's worker threads (num_workers > 0), each
-- with a LuaJIT state of its own, as Torch7's threads library ran them:
-- the dataset is copied into every state once (ddp.data.worker_codec:
-- tensors shared, a script's own classes by value), jobs go out through
-- the C batch queue (runtime/core/batch_queue.c) and batches come back as
-- C tensors -- no fork, no pickling, no /dev/shm.  The pool keeps at most
-- `capacity` batches queued, in the making or done (prefetch_factor x
-- num_workers), hands them out in batch order, names a worker that takes
-- longer than the timeout, and ends every thread when it closes (at the end
-- of a pass, on an error, on Ctrl-C, or when the loader is collected).
--
-- A worker state loads the standard libraries and package.path/cpath of
-- the main state, then requires ddp.data.worker_main; whatever a dataset
-- refers to by module (require "mymodule") the worker must be able to
-- require too.
local core = require "ddp.core"
local codec = require "ddp.data.worker_codec"
local C, ffi = core.C, core.ffi
local raise, own = core.raise, core.own
local tonumber, tostring, concat = tonumber, tostring, table.concat

core.add_lib_file(debug.getinfo(1, "S").source)

pcall(ffi.cdef, [[
typedef struct lua_State lua_State;
lua_State *luaL_newstate(void);
void luaL_openlibs(lua_State *L);
int luaL_loadbuffer(lua_State *L, const char *buff, size_t sz, const char *name);
int lua_pcall(lua_State *L, int nargs, int nresults, int errfunc);
const char *lua_tolstring(lua_State *L, int idx, size_t *len);
void lua_pushlstring(lua_State *L, const char *s, size_t l);
void lua_pushnumber(lua_State *L, double n);
void lua_settop(lua_State *L, int idx);
void lua_close(lua_State *L);
int sched_getaffinity(int pid, size_t size, void *mask);
]])

-- The Lua API of the process (the ddplua program's LuaJIT or luajit's own),
-- where the runtime may be a library loaded beside it.
local LC = ffi.C

local M = {}

-- Jobs are keyed pass * 2^32 + batch number.
local PASS_SPAN = 2 ^ 32
M.PASS_SPAN = PASS_SPAN
local WAIT_MS = 100    -- the loop's wait slices: Ctrl-C is seen between them
local JOIN_MS = 5000   -- how long close waits for each worker to end

-- Run in the new state by the main thread, before its thread starts: it
-- returns the address of the FFI callback the thread will run.
local BOOT = [[
local path, cpath, q, w, payload, addrs = ...
package.path, package.cpath = path, cpath
local ffi = require "ffi"
local t = {}
for a in addrs:gmatch("%d+") do t[#t + 1] = tonumber(a) end
local entry = require("ddp.data.worker_main").entry(tonumber(q), tonumber(w), payload, t)
-- a global of this state alone: it keeps the callback alive as long as the state
WORKER_CALLBACK = ffi.cast("void *(*)(void *)", entry)
return ("%.0f"):format(tonumber(ffi.cast("uintptr_t", WORKER_CALLBACK)))
]]

-- The cores this process may run on (its affinity mask: a SLURM step's
-- share, taskset's), or nil when unknown.
local function usable_cores()
  local mask = ffi.new("uint64_t[16]")
  if LC.sched_getaffinity(0, ffi.sizeof(mask), mask) ~= 0 then return nil end
  local n = 0
  for i = 0, 15 do
    local w = mask[i]
    while w ~= 0 do
      n = n + 1
      w = bit.band(w, w - 1)
    end
  end
  return n > 0 and n or nil
end

-- Worker threads spend cores as the loop's threads do: when the node's
-- ranks x (compute threads + workers) exceed its cores, every step slows
-- down, as the launcher's own oversubscription check says.  Said once per
-- node (its local rank 0).
local warned = false
local function check_budget(nw)
  if warned or (tonumber(os.getenv("LOCAL_RANK")) or 0) ~= 0 then return end
  local cores = usable_cores()
  local ranks = tonumber(os.getenv("LOCAL_WORLD_SIZE")) or 1
  local threads = C.dl_get_num_threads()
  if not cores then return end
  -- a rank pinned to its share of the cores (ddplua --bind-cores) sees
  -- only that share; otherwise it sees the node's
  local busy, have = ranks * (threads + nw), cores
  if cores < ranks * threads then busy = threads + nw end
  if busy > have then
    warned = true
    io.stderr:write(("DataLoader: num_workers = %d beside %d compute thread%s in each of %d rank%s: %d busy threads "
      .. "for %d cores, so every step gets slower; keep ranks x (threads + num_workers) within the cores "
      .. "(fewer workers, or fewer threads: DDPLUA_NUM_THREADS=N)\n"):format(nw, threads, threads == 1 and "" or "s",
      ranks, ranks == 1 and "" or "s", busy, have))
  end
end

local Pool = {}
Pool.__index = Pool

local function state_error(L)
  local s = LC.lua_tolstring(L, -1, nil)
  return s ~= nil and ffi.string(s) or "(no message)"
end

-- workers.start(dataset, {num_workers =, capacity =, timeout =, init_fn =, pin =, what =}):
-- (pin: the workers put their batches in page-locked memory themselves)
-- a pool whose threads run; errors when the dataset cannot travel.
function M.start(ds, opts)
  local n = opts.num_workers
  check_budget(n)
  local payload, tensors = codec.encode({ dataset = ds, init_fn = opts.init_fn, pin = opts.pin,
                                          num_workers = opts.num_workers }, "")
  if not payload then
    raise(("DataLoader: num_workers = %d needs the dataset in each worker thread, and %s"):format(n, tensors))
  end
  local q = C.dl_batchq_new(n, opts.capacity)
  if q == nil then core.raise_c() end
  local self = setmetatable({ q = q, n = n, capacity = opts.capacity, timeout = opts.timeout or 0,
                              threads = {}, states = {}, tensors = tensors, pending = {}, npending = 0,
                              what = opts.what or "DataLoader" }, Pool)
  local addrs = {}
  for i, t in ipairs(tensors) do addrs[i] = ("%.0f"):format(tonumber(ffi.cast("uintptr_t", ffi.cast("void *", t)))) end
  addrs = concat(addrs, " ")
  local qaddr = ("%.0f"):format(tonumber(ffi.cast("uintptr_t", q)))
  for w = 0, n - 1 do
    local L = LC.luaL_newstate()
    if L == nil then self:close(); raise("DataLoader: cannot make a Lua state for a worker (out of memory)") end
    self.states[w + 1] = L
    LC.luaL_openlibs(L)
    local rc = LC.luaL_loadbuffer(L, BOOT, #BOOT, "=ddp.data.workers")
    if rc == 0 then
      for _, s in ipairs { package.path, package.cpath, qaddr, tostring(w), payload, addrs } do
        LC.lua_pushlstring(L, s, #s)
      end
      rc = LC.lua_pcall(L, 6, 1, 0)
    end
    if rc ~= 0 then
      local msg = state_error(L)
      self:close()
      raise(("DataLoader: worker %d could not start: %s"):format(w, msg))
    end
    local cb = ffi.cast("void *(*)(void *)", ffi.cast("uintptr_t", tonumber(ffi.string(LC.lua_tolstring(L, -1, nil)))))
    LC.lua_settop(L, 0)
    local th = C.dl_thread_start(cb, nil)
    if th == nil then
      local msg = core.last_error()
      self:close()
      raise("DataLoader: " .. msg)
    end
    self.threads[w + 1] = th
  end
  -- the threads end when the pool is collected (a loop left by an error)
  self.anchor = ffi.gc(ffi.new("char[1]"), function() self:close() end)
  return self
end

-- Room for another job (the prefetch bound).
function Pool:room()
  return not self.closed and self.npending < self.capacity
end

-- pool:submit(key, job): job is the int64 tensor [seed, epoch, indices...].
function Pool:submit(key, job)
  if C.dl_batchq_submit(self.q, key, job) ~= 0 then core.raise_c() end
  self.pending[key] = true
  self.npending = self.npending + 1
end

-- What worker w is doing, for messages.
local wb, ws, wt = ffi.new("int64_t[1]"), ffi.new("int64_t[1]"), ffi.new("double[1]")
local function doing(self, w)
  C.dl_batchq_worker(self.q, w, wb, ws, wt)
  return tonumber(wb[0]), tonumber(ws[0]), tonumber(wt[0])
end

-- The worker holding the job `key`, or nil.
local function holder(self, key)
  for w = 0, self.n - 1 do
    local b, s, t = doing(self, w)
    if b == key then return w, s, t end
  end
end

local ninfo, einfo, winfo, xinfo = ffi.new("int[1]"), ffi.new("int[1]"), ffi.new("int[1]"), ffi.new("int64_t[1]")
local fields = ffi.new("dl_tensor *[?]", C.DL_BQ_MAX_FIELDS)

-- Takes a result out of the queue: its decoded value, whether it is an
-- error report, the worker.
local function take(self, key)
  if C.dl_batchq_result_info(self.q, key, ninfo, einfo, winfo, xinfo) ~= 0 then core.raise_c() end
  local nx = tonumber(xinfo[0])
  local buf = ffi.new("char[?]", nx > 0 and nx or 1)
  if C.dl_batchq_take_result(self.q, key, fields, buf) ~= 0 then core.raise_c() end
  local ts = {}
  for i = 1, ninfo[0] do ts[i] = own(fields[i - 1]) end
  if einfo[0] ~= 0 then return ffi.string(buf, nx), true, winfo[0] end
  return codec.decode(buf, ts), false, winfo[0]
end

-- pool:get(key, label): the fields of job key's batch, a list and its
-- length, waiting for it; a worker's error, a worker that failed to
-- start, or a timeout stop the pool and raise.  label names the batch
-- ("batch 17 of epoch 2").
function Pool:get(key, label)
  if self.closed then raise(self.what .. ": the workers were stopped") end
  local t0 = core.clock()
  local q = self.q
  while true do
    -- a worker that could not start (a setup error) reports under key -1
    if C.dl_batchq_wait(q, -1, 0) == C.DL_BQ_READY then
      local msg, _, w = take(self, -1)
      self:close()
      raise(("%s worker %d (of %d): %s"):format(self.what, w, self.n, msg))
    end
    local st = C.dl_batchq_wait(q, key, WAIT_MS)
    if st == C.DL_BQ_READY then break end
    if st == C.DL_BQ_CLOSED then raise(self.what .. ": the workers were stopped") end
    if self.timeout > 0 and core.clock() - t0 > self.timeout then
      local w, s, secs = holder(self, key)
      self:close()
      if w then
        raise(("%s: worker %d (of %d) has been making %s for %.1f s%s, more than timeout = %g s")
              :format(self.what, w, self.n, label, secs, s >= 0 and (", now at sample " .. s) or "", self.timeout))
      end
      raise(("%s: no worker took %s within timeout = %g s"):format(self.what, label, self.timeout))
    end
  end
  local v, is_error, w = take(self, key)
  self.pending[key] = nil
  self.npending = self.npending - 1
  if is_error then
    self:close()
    raise(("%s worker %d (of %d), %s, %s"):format(self.what, w, self.n, label, v))
  end
  return v, v.n
end

-- Drops every job of earlier passes (a loop left with break): waits for
-- them, so they no longer count against the prefetch bound.
function Pool:drain()
  for key in pairs(self.pending) do
    while not self.closed do
      local st = C.dl_batchq_wait(self.q, key, WAIT_MS)
      if st ~= C.DL_BQ_TIMEOUT then break end
    end
    if self.closed then return end
    take(self, key)  -- an error in a batch nobody will take is dropped with it
    self.pending[key] = nil
    self.npending = self.npending - 1
  end
end

-- pool:close(): every worker told to stop and waited for; their states
-- closed.  A worker still inside a long get() after JOIN_MS is left to run
-- on (detached; its state and the queue are then not freed).
function Pool:close()
  if self.closed then return end
  self.closed = true
  C.dl_batchq_close(self.q)
  local all = true
  for w = 1, self.n do
    local th = self.threads[w]
    if th ~= nil then
      if C.dl_thread_join(th, JOIN_MS) == 0 then
        if self.states[w] ~= nil then LC.lua_close(self.states[w]) end
      else
        all = false
        C.dl_thread_detach(th)
        io.stderr:write(("%s: worker %d did not stop within %d s; left running\n"):format(
          self.what, w - 1, JOIN_MS / 1000))
      end
    elseif self.states[w] ~= nil then
      LC.lua_close(self.states[w])
    end
    self.threads[w], self.states[w] = nil, nil
  end
  if all then C.dl_batchq_free(self.q) end
  self.q, self.tensors = nil, nil
  self.pending, self.npending = {}, 0
end

return M
