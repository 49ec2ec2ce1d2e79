-- tests/helpers/prompt.lua: drives a ddplua prompt (one process or a
-- job's) through a pseudo-terminal with tests/helpers/pty.py.
local shell = require "helpers.shell"
local jobs = require "helpers.jobs"
local root, q, tempname = shell.root, shell.q, shell.tempname

local M = { python = "/usr/bin/python3" }

function M.available() return shell.exists(M.python) end

-- Types `inputs` (pty.py's input lines) into `ddplua <args>` with a fresh
-- HOME, outside any outer job's environment; returns the transcript (its
-- last line "EXIT ...") and HOME.  opts: timeout (s), env (a table),
-- program (another ddplua than the one under test).
function M.run(inputs, args, opts)
  opts = opts or {}
  local input = tempname()
  local f = assert(io.open(input, "w"))
  f:write(table.concat(inputs, "\n"), "\n")
  f:close()
  local home = tempname()
  os.remove(home)
  assert(os.execute("mkdir -p " .. q(home)))
  local env = ""
  for k, v in pairs(opts.env or {}) do env = env .. " --env " .. q(k .. "=" .. v) end
  local p = assert(io.popen(jobs.CLEAN .. M.python .. " " .. q(root .. "/tests/helpers/pty.py")
    .. " --timeout " .. (opts.timeout or 40) .. " --env HOME=" .. q(home) .. env .. " -- "
    .. q(opts.program or shell.ddplua) .. " " .. (args or "") .. " <" .. q(input) .. " 2>&1"))
  local out = p:read("*a")
  p:close()
  return out, home
end

-- Asserts text is in out, showing out when it is not.
function M.has(out, text)
  assert(out:find(text, 1, true), "expected " .. text .. " in:\n" .. out)
end

function M.hasnt(out, text)
  assert(not out:find(text, 1, true), "did not expect " .. text .. " in:\n" .. out)
end

return M
