-- ddp.dist.objects: Lua values across ranks (ddp.broadcast_object,
-- ddp.all_gather_object) through the rendezvous store.  They travel as
-- ddp.serialize's text, never load()ed on arrival; tables with a metatable
-- are refused: they would arrive without their class.
local core = require "ddp.core"
local serialize_value = require "ddp.serialize"
local env_mod = require "ddp.dist.env"
local group = require "ddp.dist.group"
local raise, show = core.raise, core.show
local env, need_init = env_mod._env, group._need_init
local wait_keys, wait_all = group._wait_keys, group._wait_all

core.add_lib_file(debug.getinfo(1, "S").source)

local M = {}

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
  local key = ("ddp/%d/bcast"):format(group._next_seq())
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
  local seq = group._next_seq()
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

return M
