-- ddp.checkpoint: tensors to and from safetensors files (ddp.save,
-- ddp.load), whole training states on top of them (ddp.save_checkpoint,
-- ddp.load_checkpoint) and the latest of a directory (ddp.latest_checkpoint).
--
-- A checkpoint is a plain safetensors file: every tensor of every state_dict
-- under a prefixed name ("model.fc.weight", "optimizer.state.1.exp_avg"),
-- and in the metadata the rest of the structure as ddp.serialize's text, in
-- which tensors are references @"name" to those names.  Reading it back is
-- that module's parser: nothing from a file is ever run with load().
--
-- One file per job, written by one rank (rank 0, or whoever calls).  What
-- differs between ranks is only the random stream: a rank-0 save holds rank
-- 0's, which every rank takes back on load -- exact when the ranks draw the
-- same numbers (one seed, the same ops: ddplua's default).  Saved with
-- {all_ranks = true} (every rank calls), the file also holds each rank's
-- stream, and each rank takes back its own.
local core = require "ddp.core"
local factory = require "ddp.tensor.factory"
local serialize = require "ddp.serialize"
local dist = require "ddp.dist"
local files = require "ddp.data.files"
local trace = require "ddp.core.trace"
local C, ffi = core.C, core.ffi
local raise, check = core.raise, core.check
local type, pairs, tostring = type, pairs, tostring

core.add_lib_file(debug.getinfo(1, "S").source)

local M = {}

local FORMAT_KEY, STATE_KEY, FORMAT = "ddplua.format", "ddplua.state", "checkpoint 1"

-- -- save / load ------------------------------------------------------------

-- ddp.save(tensors, path[, metadata]): tensors maps names to tensors,
-- metadata maps strings to strings.  Atomic (dl_st_save): a new file renamed
-- over the old one, which keeps the old one's mode; a symbolic link is
-- written through to its target.
function M.save(tensors, path, metadata)
  if type(tensors) ~= "table" or core.is_tensor(tensors) then
    raise("save: expected a table mapping names to tensors, got " .. core.describe(tensors))
  end
  if type(path) ~= "string" then raise("save: path must be a string, got " .. core.show(path)) end
  if metadata ~= nil and (type(metadata) ~= "table" or core.is_tensor(metadata)) then
    raise("save: metadata must be a table of strings, got " .. core.describe(metadata))
  end
  local names, list = {}, {}
  for k, v in pairs(tensors) do
    if type(k) ~= "string" then
      raise(("save: key %s is a %s; tensor names must be strings"):format(core.show(k), type(k)))
    end
    if not core.is_tensor(v) then
      raise(("save: value of \"%s\" is a %s, expected a tensor"):format(k, core.describe(v)))
    end
    -- the file holds host bytes: CUDA tensors are copied to the CPU first
    -- (they load as CPU tensors; load_state_dict copies them to the device)
    if v:device() ~= "cpu" then v = v:cpu() end
    names[#names + 1], list[#list + 1] = k, v
  end
  local keys, values = {}, {}
  for k, v in pairs(metadata or {}) do
    if type(k) ~= "string" or type(v) ~= "string" then
      raise(("save: metadata must map strings to strings, got %s = %s")
            :format(core.show(k), core.show(v)))
    end
    keys[#keys + 1], values[#values + 1] = k, v
  end
  local n, nm = #names, #keys
  -- the strings stay referenced by the tables above during the call
  local cn, ct = ffi.new("const char *[?]", n + 1), ffi.new("dl_tensor *[?]", n + 1)
  local ck, cv = ffi.new("const char *[?]", nm + 1), ffi.new("const char *[?]", nm + 1)
  for i = 1, n do cn[i - 1], ct[i - 1] = names[i], list[i] end
  for i = 1, nm do ck[i - 1], cv[i - 1] = keys[i], values[i] end
  check(C.dl_st_save(path, cn, ct, n, ck, cv, nm))
  local _ = { names, list, keys, values }
end

-- ddp.load(path[, {device=}]) -> {name = tensor}, {key = value}.  Tensors
-- view the file's pages (mapped copy-on-write): loading is instant and
-- changing a tensor never changes the file.
function M.load(path, opts)
  if type(path) ~= "string" then raise("load: path must be a string, got " .. core.show(path)) end
  if opts ~= nil then
    if type(opts) ~= "table" or core.is_tensor(opts) then
      raise("load: options must be a table such as {device = \"cpu\"}, got " .. core.describe(opts))
    end
    for k in pairs(opts) do
      if k ~= "device" then raise(("load: unknown option %s (expected device)"):format(core.show(k))) end
    end
  end
  -- every rank reads into its own memory: the CPU unless {device=} says
  -- (never all of them onto GPU 0)
  local dev = core.device_arg(opts and opts.device, "load")
  local f = C.dl_st_open(path)
  if f == nil then core.raise_c() end
  f = ffi.gc(f, C.dl_st_close)
  local tensors, meta = {}, {}
  for i = 0, C.dl_st_count(f) - 1 do
    local t = core.new(C.dl_st_tensor, f, i)
    if dev >= 0 then t = core.new(C.dl_to_device, t, dev) end
    tensors[ffi.string(C.dl_st_name(f, i))] = t
  end
  for i = 0, C.dl_st_meta_count(f) - 1 do
    meta[ffi.string(C.dl_st_meta_key(f, i))] = ffi.string(C.dl_st_meta_value(f, i))
  end
  C.dl_st_close(ffi.gc(f, nil))
  return tensors, meta
end

-- -- The state as text --------------------------------------------------------

-- A tensor's name in the file: its path joined with dots
-- ("optimizer.state.1.exp_avg"), numbers as ddp.serialize writes them.
local function dotted(keys)
  local parts = {}
  for i = 1, #keys do
    local k = keys[i]
    parts[i] = type(k) == "number" and serialize.number(k) or tostring(k)
  end
  return table.concat(parts, ".")
end

-- -- Checkpoints -------------------------------------------------------------

-- x[name], for tables and for the userdata proxies of core.class (the
-- data loaders and samplers); nil for anything else or what cannot be
-- indexed.
local function member(x, name)
  local t = type(x)
  if t == "table" then return x[name] end
  if t ~= "userdata" then return nil end
  local ok, v = pcall(function() return x[name] end)
  if ok then return v end
  return nil
end

local function has_method(x, name)
  return type(member(x, name)) == "function"
end

-- Writes parts (see save_checkpoint) to path; rngs: every rank's RNG state,
-- by rank, or nil.
local function write(path, parts, rngs)
  local state = {}
  for k, v in pairs(parts) do
    if type(k) ~= "string" then
      raise(("save_checkpoint: key %s is a %s; expected names such as model or epoch")
            :format(core.show(k), type(k)))
    end
    if has_method(v, "state_dict") then v = v:state_dict() end
    state[k] = v
  end
  if state.rng == nil then
    state.rng = factory.get_rng_state()
    state.rng.ranks = rngs
  end
  if state.rng == false then state.rng = nil end

  local tensors, by_handle = {}, {}
  local function tensor(t, keys)
    -- one tensor reachable twice (tied weights) is stored once and comes
    -- back shared
    local id = tostring(core.address(t))
    if by_handle[id] then return by_handle[id] end
    local base = dotted(keys)
    local name, n = base, 1
    while tensors[name] do n = n + 1; name = base .. "#" .. n end
    tensors[name], by_handle[id] = t, name
    return name
  end
  local text = serialize.encode(state, { op = "save_checkpoint", root = "", verb = "saved", tensor = tensor })
  M.save(tensors, path, { [FORMAT_KEY] = FORMAT, [STATE_KEY] = text })
end

-- -- Sharded parts ------------------------------------------------------------

-- A part whose state is sharded over the ranks (ZeroRedundancyOptimizer)
-- saves through part:save_shards(write, id).  The set is atomic: each
-- rank writes its shard as <path>.shards/<id>.<part>.rank<r>-of-<W>.safetensors
-- under a name new to this save, then rank 0 writes <path>, whose index
-- names them, and only then removes the shards of earlier saves of <path>;
-- a save cut short anywhere leaves the previous checkpoint whole.
local function shard_dir(path) return path .. ".shards" end

pcall(ffi.cdef, [[int dl_ckpt_getpid(void) __asm__("getpid");]])
local saves = 0

local function sharded_parts(parts)
  local keys = {}
  for k, v in pairs(parts) do
    if type(k) == "string" and has_method(v, "save_shards") then keys[#keys + 1] = k end
  end
  table.sort(keys)
  return keys
end

-- Removes from dir the shard files of saves other than id.
local function remove_old_shards(dir, id)
  local names = files.list_dir(dir) or {}
  for _, name in ipairs(names) do
    local other = name:match("^([%x]+%-[%x]+)%..+%.rank%d+%-of%-%d+%.safetensors$")
    if other and other ~= id then os.remove(dir .. "/" .. name) end
  end
end

local function save_sharded(path, parts, keys)
  local world, rank = dist.world_size(), dist.rank()
  if world > 1 and not dist.is_initialized() then
    raise(("save_checkpoint: a sharded optimizer saves through the process group of the %d ranks: call ddp.init() first"):format(world))
  end
  local dir = shard_dir(path)
  if world > 1 then
    -- a collective: a rank that never comes (a save under `if ddp.is_main()`)
    -- times out here, and the message says why every rank must call
    local ok, err = pcall(dist.barrier, "save_checkpoint")
    if not ok then
      raise(("save_checkpoint: %s holds a sharded optimizer, so every rank must call save_checkpoint "
             .. "(each writes its own shard; no `if ddp.is_main()` around it): %s")
            :format(path, (tostring(err):gsub("^[^\n]-:%d+: ", "", 1))))
    end
  end
  -- rank 0 makes the folder and names this save
  local plan = { err = false }
  if rank == 0 then
    local ok, why = files.make_dirs(dir)
    if not ok then plan.err = ("save_checkpoint: %s: cannot make the shard folder: %s"):format(dir, why) end
    -- new to every save: microseconds, this process and its count of saves
    saves = saves + 1
    plan.id = ("%x-%x%04x"):format(math.floor(core.time() * 1e6), ffi.C.dl_ckpt_getpid(), saves % 65536)
  end
  if world > 1 then plan = dist.broadcast_object(plan, 0) end
  if plan.err then raise(plan.err) end
  local state = {}
  for k, v in pairs(parts) do state[k] = v end
  for _, k in ipairs(keys) do
    local tag = k:gsub("[^%w_-]", "_")
    state[k] = parts[k]:save_shards(function(tensors, meta)
      local name = ("%s.%s.rank%05d-of-%05d.safetensors"):format(plan.id, tag, rank, world)
      M.save(tensors, dir .. "/" .. name, meta)
      return name
    end, plan.id)
  end
  local rngs = world > 1 and dist.all_gather_object(factory.get_rng_state()) or nil
  local err = false
  if rank == 0 then
    local ok, e = pcall(write, path, state, rngs)
    if not ok then err = tostring(e) end
    if ok then remove_old_shards(dir, plan.id) end
  end
  if world > 1 then err = dist.broadcast_object(err, 0) end
  if err then
    if rank == 0 then error(err, 0) end
    raise(("save_checkpoint: rank 0 failed to write %s: %s"):format(path, (err:gsub("^[^\n]-:%d+: ", "", 1))))
  end
end

-- ddp.save_checkpoint(path, {model=, optimizer=, scheduler=, loader=, epoch=,
-- extra=, ...}[, {all_ranks = false}]): each value with a :state_dict()
-- method is saved as what it returns (a DataLoader's is its position), any
-- other value (a number, a table, a tensor) as it is.  The RNG state goes
-- along as `rng` ({seed =, offset =}) unless the table gives rng = false.
--
-- all_ranks = true: a collective -- every rank calls it, rank 0 writes
-- the file, whose rng also holds every rank's stream (rng.ranks[r + 1]),
-- and every rank returns once the file is in place (or raises rank 0's
-- error), so no rank can resume from a file still being written.
local function save_checkpoint(path, parts, opts)
  if type(path) ~= "string" then raise("save_checkpoint: path must be a string, got " .. core.show(path)) end
  if type(parts) ~= "table" or core.is_tensor(parts) then
    raise("save_checkpoint: expected a table such as {model = m, optimizer = opt, epoch = n}, got "
          .. core.describe(parts))
  end
  local all_ranks = false
  if opts ~= nil then
    if type(opts) ~= "table" or core.is_tensor(opts) then
      raise("save_checkpoint: options must be a table such as {all_ranks = true}, got " .. core.describe(opts))
    end
    for k, v in pairs(opts) do
      if k ~= "all_ranks" then
        raise(("save_checkpoint: unknown option %s (expected all_ranks)"):format(core.show(k)))
      end
      if type(v) ~= "boolean" then raise("save_checkpoint: all_ranks must be true or false, got " .. core.show(v)) end
    end
    all_ranks = opts.all_ranks
  end
  local keys = sharded_parts(parts)
  if #keys > 0 then return save_sharded(path, parts, keys) end
  if all_ranks and dist.world_size() > 1 then
    if not dist.is_initialized() then
      raise(("save_checkpoint: all_ranks = true gathers from the %d ranks through the process group: "
             .. "call ddp.init() first"):format(dist.world_size()))
    end
    local rngs = dist.all_gather_object(factory.get_rng_state())
    local err = false
    if dist.rank() == 0 then
      local ok, e = pcall(write, path, parts, rngs)
      if not ok then err = tostring(e) end
    end
    -- rank 0's outcome, to every rank: done, or the error it raised (its
    -- message already names the caller's line)
    err = dist.broadcast_object(err, 0)
    if err then
      if dist.rank() == 0 then error(err, 0) end
      -- rank 0's location is its own line: this rank's goes in front
      raise(("save_checkpoint: rank 0 failed to write %s: %s"):format(path, (err:gsub("^[^\n]-:%d+: ", "", 1))))
    end
    return
  end
  write(path, parts, nil)
end

-- While a trace is on, each save is a span of it (every rank's: the others
-- wait for rank 0's write when all_ranks gathers).
function M.save_checkpoint(path, parts, opts)
  if not trace.on then return save_checkpoint(path, parts, opts) end
  local t0 = core.clock()
  save_checkpoint(path, parts, opts)
  trace.span("save_checkpoint", "checkpoint", trace.T_PHASE, t0, core.clock(), { path = tostring(path) })
end

local load_order = { model = 1, optimizer = 2, scheduler = 3 }

-- The RNG state this rank takes back: its own when the file holds every
-- rank's stream of a world of this size, else the saving rank's (every
-- rank's stream, when they drew alike; with another world size there is
-- no rank-to-rank match, so all take rank 0's as after a rank-0 save).
local function rank_rng(rng)
  local ranks = rng.ranks
  if type(ranks) == "table" and #ranks == dist.world_size() and type(ranks[dist.rank() + 1]) == "table" then
    return ranks[dist.rank() + 1]
  end
  return rng
end

-- ddp.load_checkpoint(path[, targets]) -> {model=, optimizer=, ..., epoch=,
-- rng=}.  With targets ({model = m, optimizer = opt, loader = l, ...}) it
-- also calls each target's :load_state_dict with its part (model first,
-- then the optimizer and the scheduler, the rest by name) and restores the
-- RNG (this rank's own stream when saved with all_ranks), so training
-- resumes exactly; targets.rng = false leaves the RNG alone.  A part the
-- file lacks is an error, except for a data loader or sampler (a file
-- written before loaders were saved), which then stays as it is: the
-- returned state has no such part, and the script may set_epoch itself.
function M.load_checkpoint(path, targets)
  if type(path) ~= "string" then raise("load_checkpoint: path must be a string, got " .. core.show(path)) end
  if targets ~= nil and (type(targets) ~= "table" or core.is_tensor(targets)) then
    raise("load_checkpoint: targets must be a table such as {model = m, optimizer = opt}, got "
          .. core.describe(targets))
  end
  local tensors, meta = M.load(path)
  if meta[FORMAT_KEY] == nil or meta[STATE_KEY] == nil then
    raise(("load_checkpoint: %s: not a ddplua checkpoint (its metadata has no %s); ddp.load reads any safetensors file")
          :format(path, FORMAT_KEY))
  end
  if meta[FORMAT_KEY] ~= FORMAT then
    raise(("load_checkpoint: %s: unsupported checkpoint format \"%s\" (this version reads \"%s\")")
          :format(path, meta[FORMAT_KEY], FORMAT))
  end
  local state, err = serialize.decode(meta[STATE_KEY], { tensors = tensors })
  if err then raise(("load_checkpoint: %s: corrupt checkpoint state %s"):format(path, err)) end
  if type(state) ~= "table" then
    raise(("load_checkpoint: %s: corrupt checkpoint state (a %s, not a table)"):format(path, type(state)))
  end
  -- a sharded part's index finds its shard files beside the checkpoint
  for _, v in pairs(state) do
    if type(v) == "table" and type(v.zero) == "table" then v.zero.dir = shard_dir(path) end
  end
  if targets == nil then return state end

  local names = {}
  for k, obj in pairs(targets) do
    if k ~= "rng" then
      if not has_method(obj, "load_state_dict") then
        raise(("load_checkpoint: target %s has no load_state_dict method"):format(core.show(k)))
      end
      if state[k] ~= nil then
        names[#names + 1] = k
      elseif member(obj, "checkpoint_optional") ~= true then  -- a loader stays as it is (see above)
        local have = {}
        for s in pairs(state) do have[#have + 1] = tostring(s) end
        table.sort(have)
        raise(("load_checkpoint: %s holds no \"%s\" (it holds %s)")
              :format(path, tostring(k), table.concat(have, ", ")))
      end
    elseif obj ~= false then
      raise("load_checkpoint: targets.rng may only be false (to leave the RNG alone)")
    end
  end
  table.sort(names, function(a, b)
    local oa, ob = load_order[a] or 4, load_order[b] or 4
    if oa ~= ob then return oa < ob end
    return tostring(a) < tostring(b)
  end)
  for _, k in ipairs(names) do targets[k]:load_state_dict(state[k]) end
  if targets.rng ~= false and state.rng ~= nil then
    if type(state.rng) ~= "table" then
      raise(("load_checkpoint: %s: its rng must be a table {seed =, offset =}, got %s (a corrupt or "
             .. "tampered checkpoint; targets.rng = false leaves the RNG alone)"):format(path, core.show(state.rng)))
    end
    local ok, err = pcall(factory.set_rng_state, rank_rng(state.rng))
    if not ok then
      raise(("load_checkpoint: %s: its rng: %s"):format(path, tostring(err):gsub("^[^:]*:%d+: ", "")))
    end
  end
  return state
end

-- -- The latest checkpoint of a directory ----------------------------------------

-- Natural order: names cut into runs of digits and of other bytes, runs
-- compared in turn, digits as numbers (step_900 before step_1000) and
-- before other text; equal values, the shorter run (fewer leading zeros)
-- first.
local function chunks(name)
  local out = {}
  for digits, other in name:gmatch("(%d*)(%D*)") do
    if digits ~= "" then out[#out + 1] = digits end
    if other ~= "" then out[#out + 1] = other end
  end
  return out
end

local function natural_less(a, b)
  local ca, cb = chunks(a), chunks(b)
  for i = 1, math.min(#ca, #cb) do
    local x, y = ca[i], cb[i]
    if x ~= y then
      local nx, ny = x:match("^%d"), y:match("^%d")
      if nx and ny then
        local vx, vy = x:gsub("^0+", ""), y:gsub("^0+", "")
        if #vx ~= #vy then return #vx < #vy end
        if vx ~= vy then return vx < vy end
        return #x < #y
      end
      if nx or ny then return nx ~= nil end
      return x < y
    end
  end
  return #ca < #cb
end

-- Whether path is a file load_checkpoint takes: safetensors with ddplua's
-- checkpoint metadata (ddp.save's plain tensor files and other files are not).
local function is_checkpoint(path)
  local f = C.dl_st_open(path)
  if f == nil then
    C.dl_clear_error()
    return false
  end
  local keys = {}
  for i = 0, C.dl_st_meta_count(f) - 1 do keys[ffi.string(C.dl_st_meta_key(f, i))] = true end
  C.dl_st_close(f)
  return keys[FORMAT_KEY] == true and keys[STATE_KEY] == true
end

-- ddp.latest_checkpoint(dir[, pattern]) -> the path of dir's latest
-- checkpoint, or nil when it holds none.  The rule: of the names in dir
-- (only those pattern, a Lua pattern, finds), the last in natural order --
-- numbers compared as numbers, so step_900 comes before step_1000 and the
-- highest step wins -- that is a whole checkpoint; temporary files of a
-- save (<name>.tmp.<pid>.<n>, left by a writer killed mid-save) never are,
-- nor files that are not ddplua checkpoints (a ddp.save file, a log).
-- Every rank may call it (it only reads).  A dir that does not exist or is
-- not a directory is an error: a mistyped dir must not start training
-- afresh over old checkpoints.
function M.latest_checkpoint(dir, pattern)
  if type(dir) ~= "string" or dir == "" then
    raise("latest_checkpoint: dir must be a directory's path, got " .. core.show(dir))
  end
  if pattern ~= nil and type(pattern) ~= "string" then
    raise("latest_checkpoint: pattern must be a Lua pattern (a string), got " .. core.show(pattern))
  end
  if pattern then
    local ok, err = pcall(string.find, "", pattern)
    if not ok then
      raise(("latest_checkpoint: bad pattern %s: %s"):format(core.show(pattern), (tostring(err):gsub("^[^:]*:%d+: ", ""))))
    end
  end
  local all, reason, errno = files.list_dir(dir)
  if not all then
    if errno == 2 then  -- ENOENT
      raise(("latest_checkpoint: %s: no such directory (make it before the first run; the checkpoints go there)")
            :format(dir))
    end
    raise(("latest_checkpoint: %s: %s"):format(dir, reason))
  end
  local names = {}
  for _, name in ipairs(all) do
    if not name:find("%.tmp%.%d+%.%d+$") and (pattern == nil or name:find(pattern)) then
      names[#names + 1] = name
    end
  end
  table.sort(names, natural_less)
  local base = dir:sub(-1) == "/" and dir or dir .. "/"
  for i = #names, 1, -1 do
    local path = base .. names[i]
    if is_checkpoint(path) then return path end
  end
  return nil
end

return M
