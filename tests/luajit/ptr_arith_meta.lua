-- A LuaJIT bug behind ddplua's jit.off on add/sub, without ddplua:
--   luajit tests/luajit/ptr_arith_meta.lua   -> "OK", or a segfault
-- `p + 1` where p points to an incomplete struct (ddplua's dl_tensor *)
-- cannot be pointer arithmetic, so the interpreter calls the metatype's
-- __add.  The trace recorder (crec_arith_ptr in lj_crecord.c) misses that
-- check for pointer +/- number (it passes the struct's invalid size on)
-- and records pointer arithmetic instead, while the interpreter has gone
-- into __add; from a function called in a hot loop the recorder then reads
-- the wrong stack slots and crashes.  Seen on Debian bookworm's luajit
-- (2.1.0-beta3), its luajit2 (OpenResty 2.1-20230119) and LuaJIT's v2.1
-- branch at commit 1ee778a4; a one-line check
--   if (sz == CTSIZE_INVALID) return 0;
-- after `CTSize sz = lj_ctype_size(...)` in crec_arith_ptr fixes it.
local ffi = require "ffi"
ffi.cdef "typedef struct lj_opaque lj_opaque; typedef struct { double v; } lj_box;"
ffi.metatype("lj_opaque", {
  __add = function(a, b)
    local box = ffi.new("lj_box")  -- any allocation in the metamethod
    box.v = b
    return box
  end,
})
local x = ffi.cast("lj_opaque *", 16)  -- never dereferenced
local function f(t) return t + 1 end
for _ = 1, 400 do
  local y = f(x)
  if y.v ~= 1 then print("WRONG: " .. tostring(y)); os.exit(1) end
end
print("OK")
