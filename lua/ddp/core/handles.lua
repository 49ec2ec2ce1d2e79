-- ddp.core.handles: tensor handles -- the C tensor behind a Lua value,
-- owned by the garbage collector -- and the calls that return new ones,
-- raising the runtime's error when they fail.
local B = require "ddp.ffi"
local errors = require "ddp.core.errors"
local ffi, C = B.ffi, B.C
local raise_c, raise = errors.raise_c, errors.raise
local select = select

errors.add_lib_file(debug.getinfo(1, "S").source)

local M = {}

-- A tensor handle is a reference to the C tensor (dl_tensor &), not a
-- pointer: LuaJIT compares two pointers itself, as addresses, and never
-- asks the metatable, so `a < b` on two tensors would silently compare
-- handles; for references it calls __lt/__le/__eq (ddp.tensor.math).  C
-- functions taking dl_tensor * accept a reference (its address is passed).
local tensor_ct = ffi.typeof("dl_tensor &")
M.tensor_ct = tensor_ct
local voidp = ffi.typeof("void *")

function M.is_tensor(x)
  return ffi.istype(tensor_ct, x)
end

-- The C tensor's address (a void * cdata): identity of a tensor, whatever
-- handle holds it (tensors of equal values are different tensors).
function M.address(t) return ffi.cast(voidp, t) end
-- Whether a and b are handles of the same C tensor.
function M.same(a, b) return ffi.cast(voidp, a) == ffi.cast(voidp, b) end

local anchors, anchor_next = {}, 0
local anchor_ids = ffi.new("int64_t[64]")

-- Owners of memory wrapped with from_blob stay referenced here until C
-- reports that the last view of their storage died.
-- The ids are the process's, one registry in C for every Lua state: a
-- DataLoader worker's state (M.in_worker) would take the main state's
-- releases for its own, so wrapping memory is refused there.
function M.anchor(obj)
  if M.in_worker then
    raise("from_blob: memory of a Lua object cannot be wrapped in a DataLoader worker thread; "
          .. "make a tensor (ddp.tensor, ddp.empty) and copy into it")
  end
  anchor_next = anchor_next + 1
  anchors[anchor_next] = obj
  return anchor_next
end

local function drain_anchors()
  repeat
    local n = C.dl_released_anchors(anchor_ids, 64)
    for i = 0, n - 1 do anchors[tonumber(anchor_ids[i])] = nil end
  until n < 64
end

local release = C.dl_tensor_release

-- Takes ownership of a new reference returned by C.
local gc_epoch = 0  -- this Lua state's: each state collects once an epoch
local function own(p)
  local e = C.dl_gc_epoch()
  if e ~= gc_epoch then
    gc_epoch = e
    collectgarbage()
    C.dl_gc_done()
  end
  if C.dl_anchors_pending() ~= 0 then drain_anchors() end
  return ffi.gc(ffi.cast(tensor_ct, p), release)
end
M.own = own

-- Calls a C function returning a new tensor; on out-of-memory collects
-- garbage (Lua cannot see the bytes behind its handles) and retries once.
local function new_untraced(f, ...)
  local p = f(...)
  if p == nil then
    if C.dl_last_error_code() == C.DL_ENOMEM then
      collectgarbage()
      collectgarbage()
      C.dl_gc_done()
      p = f(...)
    end
    if p == nil then raise_c() end
  end
  return own(p)
end
M._new_untraced = new_untraced

-- While a trace records C ops (ddp.core.trace, level ops), each call
-- goes through its hook, which times it; otherwise one branch.
local op_hook = nil
function M._set_op_hook(h) op_hook = h end
function M.new(f, ...)
  if op_hook ~= nil then return op_hook(f, ...) end
  return new_untraced(f, ...)
end

function M.check(rc)
  if rc ~= 0 then raise_c() end
end

-- Two tensors out of one call (max with dim, sort, topk).  (f(..., x)
-- would pass only the first vararg: Lua truncates ... before a comma.)
local out2 = ffi.new("dl_tensor *[2]")
function M.new2(f, ...)
  local n = select("#", ...)
  local args = { ... }
  args[n + 1], args[n + 2] = out2, out2 + 1
  out2[0], out2[1] = nil, nil
  if f(unpack(args, 1, n + 2)) ~= 0 then raise_c() end
  local a, b = out2[0], out2[1]
  out2[0], out2[1] = nil, nil
  return own(a), own(b)
end

return M
