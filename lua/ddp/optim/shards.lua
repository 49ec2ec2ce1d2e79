-- ddp.optim.shards: reading the optimizer state a ZeroRedundancyOptimizer
-- saved in shards (ddp.save_checkpoint): the index the checkpoint holds and
-- each rank's shard file, from which any range of any parameter's state is
-- read where it lies -- so a state saved by W ranks loads into any number
-- of ranks, or into a plain optimizer, with no gather on one rank: every
-- rank maps the files and touches only the pages it needs.
--
-- The index (the checkpoint's optimizer part):
--   {zero = {format = FORMAT, id =, world_size = W, optimizer = "AdamW",
--            files = {name of rank 0's shard, ...}, dir = (set at load),
--            segments = {{numel = N, params = {{idx, numel}, ...},
--                          fields = {exp_avg = "float32", ...}}, ...}},
--    param_groups = {...}, state = {[idx] = {step = 5, tensors = {"exp_avg", ...}}}}
-- Parameter idx lies in segment k at an offset; rank q of W holds elements
-- [q S, min(N, (q + 1) S)) of each segment, S = ceil(N / W), as tensors
-- "seg<k>.<field>" of its shard file.
local core = require "ddp.core"
local C, ffi = core.C, core.ffi
local raise = core.raise

core.add_lib_file(debug.getinfo(1, "S").source)

local M = {}

M.FORMAT, M.SHARD_FORMAT = "ddplua zero 1", "ddplua zero shard 1"
M.FORMAT_KEY = "ddplua.format"

-- Rank q's range [lo, hi) of a segment of n elements among w ranks: block
-- q of ceil(n / w) elements (the last ones shorter or empty), so the
-- segment's buffer of w blocks all-gathers in place.
function M.range(n, q, w)
  local s = math.ceil(n / w)
  return math.min(n, q * s), math.min(n, (q + 1) * s)
end

-- The tensor name of a segment's field in a shard file.
function M.tensor_name(k, field) return ("seg%d.%s"):format(k, field) end

local function is_name(s)
  return type(s) == "string" and s ~= "" and not s:find("/", 1, true) and s ~= "." and s ~= ".."
end

-- Checks an index's layout (a tampered or truncated one is refused here,
-- naming the field) and returns where each parameter lies: idx ->
-- {seg = k, off = element offset, numel = n}.
function M.locate(index, op)
  local z = index.zero
  local function bad(what) raise(("%s: the sharded optimizer state's %s"):format(op, what)) end
  if type(z) ~= "table" then bad("index is missing (zero)") end
  if z.format ~= M.FORMAT then
    bad(("format is %s (this version reads %q)"):format(core.show(z.format), M.FORMAT))
  end
  if not (core.is_integer(z.world_size) and z.world_size >= 1) then
    bad("world_size must be a positive integer, got " .. core.show(z.world_size))
  end
  if type(z.files) ~= "table" or #z.files ~= z.world_size then
    bad(("files must name one shard per rank (%d), got %s"):format(z.world_size, core.show(z.files)))
  end
  for q, f in ipairs(z.files) do
    if not is_name(f) then bad(("files[%d] must be a file name in the shard folder, got %s"):format(q, core.show(f))) end
  end
  if type(z.segments) ~= "table" then bad("segments must be a list, got " .. core.show(z.segments)) end
  local where = {}
  for k, s in ipairs(z.segments) do
    if type(s) ~= "table" or type(s.params) ~= "table" or not core.is_integer(s.numel) or s.numel < 0 then
      bad(("segments[%d] must be {numel =, params =, fields =}, got %s"):format(k, core.show(s)))
    end
    local off = 0
    for j, pe in ipairs(s.params) do
      local idx, n = type(pe) == "table" and pe[1], type(pe) == "table" and pe[2]
      if not (core.is_integer(idx) and idx >= 0 and core.is_integer(n) and n >= 0) then
        bad(("segments[%d].params[%d] must be {index, numel}, got %s"):format(k, j, core.show(pe)))
      end
      if where[idx] then bad(("parameter %d appears twice"):format(idx)) end
      where[idx] = { seg = k, off = off, numel = n }
      off = off + n
    end
    if off ~= s.numel then bad(("segments[%d] holds %d elements, its numel says %d"):format(k, off, s.numel)) end
  end
  return where
end

-- A reader of an index's shards: reader:read(idx, field, a, len, dst)
-- copies elements [a, a + len) of parameter idx's field into the 1-D dst;
-- reader.where is M.locate's answer.  Each file is opened (mapped) on
-- first use and checked against the index.
function M.reader(index, op)
  local z = index.zero
  local where = M.locate(index, op)
  if type(z.dir) ~= "string" then
    raise(op .. ": a sharded optimizer state loads through ddp.load_checkpoint, which finds its shard files")
  end
  local files = {}
  local function open(q)
    if files[q] then return files[q] end
    local path = z.dir .. "/" .. z.files[q + 1]
    local f = C.dl_st_open(path)
    if f == nil then
      raise(("%s: shard %d of %d: %s (the shard folder must travel with the checkpoint)")
            :format(op, q, z.world_size, core.last_error()))
    end
    local meta, tensors = {}, {}
    for i = 0, C.dl_st_meta_count(f) - 1 do
      meta[ffi.string(C.dl_st_meta_key(f, i))] = ffi.string(C.dl_st_meta_value(f, i))
    end
    local ok, err = pcall(function()
      for i = 0, C.dl_st_count(f) - 1 do tensors[ffi.string(C.dl_st_name(f, i))] = core.new(C.dl_st_tensor, f, i) end
    end)
    C.dl_st_close(f)
    if not ok then raise(("%s: %s: %s"):format(op, path, tostring(err))) end
    local want = { [M.FORMAT_KEY] = M.SHARD_FORMAT, ["ddplua.zero.id"] = tostring(z.id),
                   ["ddplua.zero.rank"] = tostring(q), ["ddplua.zero.world_size"] = tostring(z.world_size) }
    for key, v in pairs(want) do
      if meta[key] ~= v then
        raise(("%s: %s is not shard %d of this checkpoint (its %s is %s, expected %s)")
              :format(op, path, q, key, core.show(meta[key]), core.show(v)))
      end
    end
    files[q] = { path = path, tensors = tensors }
    return files[q]
  end
  local r = { where = where }
  function r:read(idx, field, a, len, dst)
    local w = where[idx]
    if not w then raise(("%s: the sharded state has no parameter %d"):format(op, idx)) end
    if a < 0 or a + len > w.numel then
      raise(("%s: parameter %d has %d elements in the sharded state, %d needed"):format(op, idx, w.numel, a + len))
    end
    local n, W = z.segments[w.seg].numel, z.world_size
    local g0, g1 = w.off + a, w.off + a + len
    for q = 0, W - 1 do
      local lo, hi = M.range(n, q, W)
      local s, e = math.max(g0, lo), math.min(g1, hi)
      if e > s then
        local f = open(q)
        local name = M.tensor_name(w.seg, field)
        local src = f.tensors[name]
        if not src then raise(("%s: %s holds no %s (parameter %d's %s)"):format(op, f.path, name, idx, field)) end
        if src:dim() ~= 1 or src:numel() ~= hi - lo then
          raise(("%s: %s: %s has %d elements, rank %d's share of segment %d is %d"):format(
            op, f.path, name, src:numel(), q, w.seg, hi - lo))
        end
        dst:narrow(0, s - g0, e - s):copy_(src:narrow(0, s - lo, e - s))
      end
    end
  end
  return r
end

-- The whole state of every parameter, as a plain optimizer's state_dict
-- holds it ({state = {[idx] = {step =, exp_avg = <tensor>}}, param_groups}):
-- each rank reads it from the shard files (a sharded checkpoint loaded
-- into an optimizer that is not sharded).  shape_of(idx): the parameter's
-- shape; zeros(n, dtype): a new zeroed 1-D tensor.
function M.consolidate(index, op, shape_of, zeros)
  local rd = M.reader(index, op)
  local where = rd.where
  local state = {}
  if type(index.state) ~= "table" then raise(op .. ": the sharded optimizer state's state must be a table") end
  for idx, s in pairs(index.state) do
    if type(s) ~= "table" then raise(("%s: state %s must be a table, got %s"):format(op, tostring(idx), core.show(s))) end
    local w = where[idx]
    if not w then raise(("%s: state for parameter %s, which the sharded layout does not have"):format(op, tostring(idx))) end
    local st = {}
    for k, v in pairs(s) do
      if k ~= "tensors" then st[k] = v end
    end
    for _, field in ipairs(type(s.tensors) == "table" and s.tensors or {}) do
      local dt = type(index.zero.segments[w.seg].fields) == "table" and index.zero.segments[w.seg].fields[field]
      if type(dt) ~= "string" then
        raise(("%s: segment %d of the sharded state does not say the dtype of its %s"):format(op, w.seg, tostring(field)))
      end
      local t = zeros(w.numel, dt)
      rd:read(idx, field, 0, w.numel, t)
      st[field] = t:view(shape_of(idx))
    end
    state[idx] = st
  end
  return { state = state, param_groups = index.param_groups }
end

return M
