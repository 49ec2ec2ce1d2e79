-- tests/helpers/shell.lua: what specs that run programs and write files
-- share -- the repository root, the ddplua program under test, shell
-- quoting and commands, reading and writing files, and temporary files
-- removed by cleanup().
--
--   local shell = require "helpers.shell"
--   local out = shell.sh(shell.q(shell.ddplua) .. " -e 'print(1)'")
--   teardown(shell.cleanup)
local M = {}

M.root = assert(io.popen("pwd")):read("*l")
-- build/ddplua, or $DDPLUA, as an absolute path
M.ddplua = os.getenv("DDPLUA") or "build/ddplua"
if M.ddplua:sub(1, 1) ~= "/" then M.ddplua = M.root .. "/" .. M.ddplua end

-- s as one single-quoted shell word.
function M.q(s)
  return "'" .. (tostring(s):gsub("'", [['\'']])) .. "'"
end

-- The standard output of cmd (add " 2>&1" for stderr too).
function M.sh(cmd)
  local p = assert(io.popen(cmd))
  local s = p:read("*a")
  p:close()
  return s
end

-- A file's bytes, or nil if it cannot be opened.
function M.slurp(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

function M.writefile(path, s)
  local f = assert(io.open(path, "wb"))
  f:write(s)
  f:close()
end

function M.exists(path)
  local f = io.open(path)
  if f then f:close() end
  return f ~= nil
end

local temps = {}

-- A fresh temporary name (os.tmpname creates the file), removed by cleanup.
function M.tempname()
  local name = os.tmpname()
  temps[#temps + 1] = name
  return name
end

-- A temporary file holding text.
function M.tempfile(text)
  local name = M.tempname()
  M.writefile(name, text or "")
  return name
end

-- A temporary directory.
function M.tempdir()
  local name = M.tempname()
  os.remove(name)
  assert(os.execute("mkdir -p " .. M.q(name)))
  return name
end

-- busted run from the repository root (so with its .busted) over spec
-- files holding the given sources, in order; returns its TAP output.
function M.busted(sources)
  local dir = M.tempdir()
  for i, src in ipairs(sources) do M.writefile(("%s/%d_spec.lua"):format(dir, i), src) end
  return M.sh("busted -o TAP " .. M.q(dir) .. " 2>&1")
end

-- Registers a path made some other way (name .. "_x.lua") for cleanup.
function M.track(name)
  temps[#temps + 1] = name
  return name
end

-- For teardown: removes every temporary file and directory made.
function M.cleanup()
  for _, name in ipairs(temps) do os.execute("rm -rf " .. M.q(name)) end
  temps = {}
end

return M
