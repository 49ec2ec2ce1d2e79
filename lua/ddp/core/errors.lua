-- ddp.core.errors: errors raised at the user's line, however deep in the
-- library they happen -- the library's own messages and the runtime's
-- (dl_last_error, whose texts are runtime/core/errmsg.h's).
local B = require "ddp.ffi"
local ffi, C = B.ffi, B.C

local M = {}

-- Our own files: an error is reported at the first frame outside them, so
-- the message points at the user's line however deep the library went.
local lib_prefixes = {}
local frame_src  -- user_site's verdicts, made once per function (below)

-- Every ddp module file registers its directory (lua/ddp/ and its
-- folders, bindings/ddp/).
function M.add_lib_file(source)
  local dir = source:match("^(@.*/)[^/]*$")
  if not dir then return end
  for _, p in ipairs(lib_prefixes) do
    if p == dir then return end
  end
  lib_prefixes[#lib_prefixes + 1] = dir
  if frame_src then frame_src = setmetatable({}, { __mode = "k" }) end  -- verdicts made before may change
end
M.add_lib_file(debug.getinfo(1, "S").source)
M.add_lib_file(B.source)

local function is_lib(source)
  for i = 1, #lib_prefixes do
    local p = lib_prefixes[i]
    if source:sub(1, #p) == p then return true end
  end
  return false
end

-- Whether a chunk's source (as debug.getinfo gives it) is ddp's own.
M.is_lib_source = is_lib

-- The level for error() that names the user's line, or 0 (no location)
-- when no frame of the user's is left: a chunk that tail-called the
-- library (`return t:view(5)` typed at the REPL, or run by ddplua -e) is
-- gone from the stack, and the first frame below ours would be a wrong
-- place to name -- before, this fell back to the library's own file.
local function user_level()
  local level = 3
  while true do
    local info = debug.getinfo(level, "S")
    if not info then return 0 end
    if info.what ~= "C" and not is_lib(info.source) then return level - 1 end
    level = level + 1
  end
end

-- "train.lua:88": the user's line that called into the library (the first
-- frame outside it, from level on; default: the caller's caller), for the
-- flight recorder's entries; "" when none is left.  It runs before every
-- collective, so each function's verdict is kept: a frame then costs one
-- getinfo "fl" (~0.3 us) instead of an "S" and an "l".
local getinfo = debug.getinfo
frame_src = setmetatable({}, { __mode = "k" })  -- func -> short_src (the user's) or false
function M.user_site(level)
  level = level or 3
  while true do
    local info = getinfo(level, "fl")
    if not info then return "" end
    local fn = info.func
    local src = frame_src[fn]
    if src == nil then
      local s = getinfo(level, "S")
      src = s.what ~= "C" and not is_lib(s.source) and s.short_src
      frame_src[fn] = src
    end
    if src then return src .. ":" .. info.currentline end
    level = level + 1
  end
end

-- Raises msg at the user's line.
function M.raise(msg)
  error(msg, user_level())
end
local raise = M.raise

function M.last_error()
  return ffi.string(C.dl_last_error())
end

-- Raises the runtime's message for the call that just failed: C checks an
-- op's arguments once, in its own words, and Lua passes them on.
-- Where an int64 tensor reaches an op that needs floats, the likely cause
-- is Lua's: ddp.tensor({1.0, 2.0}) holds integers (Lua has no 1.0 apart
-- from 1), where torch.tensor([1.0, 2.0]) is float32.
local INT_HINT = " (ddp.tensor({1, 2}) and ddp.tensor({1.0, 2.0}) are int64 alike: Lua cannot tell 1.0 from 1; "
  .. "give {dtype = \"float32\"} or call t:float())"
function M.raise_c()
  local msg = ffi.string(C.dl_last_error())
  if msg:find("floating point tensor, got int64$") or msg:find("floating point tensors can require gradients, got int64$") then
    msg = msg .. INT_HINT
  end
  raise(msg)
end

return M
