-- ddp.ffi: loads the C runtime and declares its one public header.
-- Under the ddplua program the runtime is already linked in (ffi.C); under a
-- plain luajit (busted, embedding) it is loaded from DDPLUA_LIB, the build
-- tree or the install prefix, in that order.
local ffi = require "ffi"

ffi.cdef(require "ddp.cdef")

local function here()
  local src = debug.getinfo(1, "S").source
  return src:sub(1, 1) == "@" and src:sub(2):match("^(.*)/[^/]*$") or "."
end

local function load_runtime()
  if pcall(function() return ffi.C.dl_version end) then return ffi.C end
  local dir = here()
  local candidates = {
    dir .. "/../../build/libddplua.so",          -- bindings/ddp/ in a checkout
    dir .. "/../../../../lib/libddplua.so",      -- PREFIX/share/ddplua/lua/ddp/
    "libddplua.so",
  }
  local env = os.getenv("DDPLUA_LIB")
  if env and env ~= "" then table.insert(candidates, 1, env) end
  local errors = {}
  for _, path in ipairs(candidates) do
    local ok, lib = pcall(ffi.load, path, true)
    if ok then return lib end
    errors[#errors + 1] = "  " .. tostring(lib)
  end
  error("ddp: cannot load the ddplua runtime (libddplua.so); run `make` or set DDPLUA_LIB\n"
        .. table.concat(errors, "\n"), 2)
end

return { C = load_runtime(), ffi = ffi, source = debug.getinfo(1, "S").source }
