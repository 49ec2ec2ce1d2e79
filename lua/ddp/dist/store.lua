-- ddp.dist.store (also ddp.store): the rendezvous store
-- (runtime/dist/store.c) from Lua -- a TCP key-value store as PyTorch's
-- TCPStore, for processes to find each other.
--
--   local srv = store.server{ port = 0 }          -- srv.port, srv.token
--   local c = store.connect("127.0.0.1", srv.port, { token = srv.token })
--   c:set("rank0/addr", "10.0.0.1:4000"); c:get("rank0/addr") --> string
--
-- A server handle is a client of its own server too.  Values are strings
-- (bytes); counters made by add are decimal text, as in PyTorch.
local core = require "ddp.core"
local C, ffi = core.C, core.ffi
local raise, raise_c, show = core.raise, core.raise_c, core.show
local type, tostring, tonumber = type, tostring, tonumber

core.add_lib_file(debug.getinfo(1, "S").source)

local store = {}
local Store = core.class("ddp.store")

local len_out = ffi.new("int64_t[1]")
local int_out = ffi.new("int64_t[1]")

-- A token from the kernel's random source: a server made without one must
-- still refuse stray processes.
local function random_token()
  local f = io.open("/dev/urandom", "rb")
  if not f then raise("store.server: cannot read /dev/urandom for a token; pass token=") end
  local bytes = f:read(16)
  f:close()
  return (bytes:gsub(".", function(c) return ("%02x"):format(c:byte()) end))
end

-- Store(h, host, port, token): a handle that owns h.
function Store:init(h, host, port, token)
  self.h, self.host, self.port, self.token = ffi.gc(h, C.dl_store_close), host, port, token
end

local function check_opts(op, opts)
  if opts ~= nil and type(opts) ~= "table" then
    raise(op .. ": options must be a table, got " .. show(opts))
  end
  return opts or {}
end

local function check_timeout(op, t)
  if t ~= nil and (type(t) ~= "number" or not (t > 0)) then
    raise(op .. ": timeout must be a positive number of seconds, got " .. show(t))
  end
  return t or -1
end

local function check_port(op, port, min)
  if not core.is_integer(port) or port < min or port > 65535 then
    raise(op .. ": port must be an integer in " .. min .. "..65535, got " .. show(port))
  end
end

-- store.server{host=, port=, token=}: listens (port 0 or nil: a free port,
-- read back as srv.port; token nil: a random one, read back as srv.token).
function store.server(opts)
  opts = check_opts("store.server", opts)
  local host, port, token = opts.host or "127.0.0.1", opts.port or 0, opts.token
  if type(host) ~= "string" then raise("store.server: host must be a string, got " .. show(host)) end
  check_port("store.server", port, 0)
  if token == nil then token = random_token() end
  if type(token) ~= "string" then raise("store.server: token must be a string, got " .. show(token)) end
  local h = C.dl_store_server(host, port, token)
  if h == nil then raise_c() end
  local s = Store(h, host, C.dl_store_port(h), token)
  if opts.timeout then s:set_timeout(opts.timeout) end
  return s
end

-- store.connect(host, port, {token=, timeout=}): retries until timeout
-- (default 300 s), which then bounds every operation of the handle.
function store.connect(host, port, opts)
  opts = check_opts("store.connect", opts)
  host = host or "127.0.0.1"
  if type(host) ~= "string" then raise("store.connect: host must be a string, got " .. show(host)) end
  check_port("store.connect", port, 1)
  local token = opts.token
  if token ~= nil and type(token) ~= "string" then
    raise("store.connect: token must be a string, got " .. show(token))
  end
  local h = C.dl_store_connect(host, port, token, check_timeout("store.connect", opts.timeout))
  if h == nil then raise_c() end
  return Store(h, host, port, token)
end

local function handle(self, op)
  if not core.is_instance(self, Store) then raise(op .. ": call it as a method, s:" .. op:match("%.(.*)") .. "(...)") end
  local h = self.h
  if h == nil then raise(op .. ": the store was closed with s:close()") end
  return h
end

local function check_key(op, k, what)
  if type(k) ~= "string" then raise(op .. ": " .. (what or "key") .. " must be a string, got " .. show(k)) end
  return k
end

local function take(p)
  if p == nil then raise_c() end
  local s = ffi.string(p, len_out[0])
  C.dl_store_value_free(p)
  return s
end

local function key_array(op, keys)
  if type(keys) == "string" then keys = { keys } end
  if type(keys) ~= "table" then raise(op .. ": keys must be a table of strings, got " .. show(keys)) end
  local arr = ffi.new("const char *[?]", #keys + 1)
  for i = 1, #keys do arr[i - 1] = check_key(op, keys[i], "keys[" .. i .. "]") end
  return arr, #keys, keys  -- the table anchors the strings the array points into
end

function Store:set(k, v)
  local h = handle(self, "store.set")
  check_key("store.set", k)
  if type(v) ~= "string" then raise("store.set: value must be a string, got " .. show(v)) end
  if C.dl_store_set(h, k, v, #v) ~= 0 then raise_c() end
end

function Store:get(k, timeout)
  local h = handle(self, "store.get")
  check_key("store.get", k)
  return take(C.dl_store_get(h, k, check_timeout("store.get", timeout), len_out))
end

function Store:add(k, n)
  local h = handle(self, "store.add")
  check_key("store.add", k)
  if n == nil then n = 1 end
  if not core.is_integer(n) then raise("store.add: amount must be an integer, got " .. show(n)) end
  if C.dl_store_add(h, k, n, int_out) ~= 0 then raise_c() end
  return tonumber(int_out[0])
end

function Store:compare_set(k, expected, desired)
  local h = handle(self, "store.compare_set")
  check_key("store.compare_set", k)
  check_key("store.compare_set", expected, "expected")
  check_key("store.compare_set", desired, "desired")
  return take(C.dl_store_compare_set(h, k, expected, #expected, desired, #desired, len_out))
end

function Store:wait(keys, timeout)
  local h = handle(self, "store.wait")
  local arr, n, anchor = key_array("store.wait", keys)
  local rc = C.dl_store_wait(h, arr, n, check_timeout("store.wait", timeout))
  local _ = anchor
  if rc ~= 0 then raise_c() end
end

function Store:check(keys)
  local h = handle(self, "store.check")
  local arr, n, anchor = key_array("store.check", keys)
  local rc = C.dl_store_check(h, arr, n)
  local _ = anchor
  if rc < 0 then raise_c() end
  return rc == 1
end

function Store:delete(k)
  local h = handle(self, "store.delete")
  check_key("store.delete", k)
  local rc = C.dl_store_delete(h, k)
  if rc < 0 then raise_c() end
  return rc == 1
end

function Store:num_keys()
  local n = C.dl_store_num_keys(handle(self, "store.num_keys"))
  if n < 0 then raise_c() end
  return tonumber(n)
end

-- Returns once n callers reached the barrier called name; reusable.
function Store:barrier(name, n, timeout)
  local h = handle(self, "store.barrier")
  check_key("store.barrier", name, "name")
  if not core.is_integer(n) or n < 1 then
    raise("store.barrier: world size must be a positive integer, got " .. show(n))
  end
  if C.dl_store_barrier(h, name, n, check_timeout("store.barrier", timeout)) ~= 0 then raise_c() end
end

function Store:set_timeout(t)
  local h = handle(self, "store.set_timeout")
  if C.dl_store_set_timeout(h, check_timeout("store.set_timeout", t)) ~= 0 then raise_c() end
  return self
end

-- Closes the connection (a server also stops serving); safe to repeat.
function Store:close()
  local h = self.h
  if h == nil then return end
  self.h = nil
  ffi.gc(h, nil)
  C.dl_store_close(h)
end

function Store:__tostring()
  return ("ddp.store(%s:%d%s)"):format(self.host, self.port, self.h == nil and ", closed" or "")
end

return store
