-- tests/helpers/jobs.lua: what the multi-process specs share -- writing
-- worker scripts, running `ddplua` jobs bounded by `timeout` outside any
-- outer job's environment, and making sure no process of a test is left.
local M = {}

local root = assert(io.popen("pwd")):read("*l")
M.root = root
M.ddplua = os.getenv("DDPLUA") or "build/ddplua"
if M.ddplua:sub(1, 1) ~= "/" then M.ddplua = root .. "/" .. M.ddplua end

function M.q(s)
  return "'" .. (tostring(s):gsub("'", [['\'']])) .. "'"
end
local q = M.q

local temps, scripts = {}, {}

function M.tempname()
  local name = os.tmpname()
  temps[#temps + 1] = name
  return name
end

function M.slurp(name)
  local f = io.open(name)
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

function M.sh(cmd)
  local p = assert(io.popen(cmd))
  local s = p:read("*a")
  p:close()
  return s
end

-- Every worker script starts with this: ddp, and sleep/getpid/kill.
M.PRELUDE = [[
local ffi = require "ffi"
pcall(ffi.cdef, "int poll(void *fds, unsigned long n, int timeout); int getpid(void); int kill(int pid, int sig);")
local function sleep(s) ffi.C.poll(nil, 0, math.floor(s * 1000)) end
local ddp = require "ddp"
]]

-- A worker script file holding PRELUDE .. body; tag names it in `ps`.
function M.script(body, tag)
  local name = M.tempname() .. "_" .. (tag or "job") .. ".lua"
  temps[#temps + 1] = name
  local f = assert(io.open(name, "w"))
  f:write(M.PRELUDE, body)
  f:close()
  scripts[#scripts + 1] = name
  return name
end

-- Clears the variables of any job the tests themselves run under.
M.CLEAN = "env -u RANK -u WORLD_SIZE -u LOCAL_RANK -u LOCAL_WORLD_SIZE -u NODE_RANK -u GROUP_RANK "
  .. "-u MASTER_ADDR -u MASTER_PORT -u DDP_STORE_TOKEN -u DDP_TIMEOUT -u DDP_DEBUG -u DDP_JOB_ID -u DDP_BACKEND -u DDP_GLOO_HOST "

-- Runs `ddplua <args>` under `timeout <secs>`; env: extra assignments.
-- Returns stdout, stderr and the exit code.
function M.run(args, env, secs)
  local out, err = M.tempname(), M.tempname()
  local rc = M.sh(M.CLEAN .. (env or "") .. " timeout " .. (secs or 60) .. " " .. q(M.ddplua) .. " " .. args
    .. " </dev/null >" .. q(out) .. " 2>" .. q(err) .. "; echo $?")
  return M.slurp(out), M.slurp(err), tonumber(rc:match("(%d+)%s*$"))
end

-- For after_each: fails (after killing them) if processes of this test's
-- scripts are still alive a few seconds on.
function M.no_strays()
  for _, s in ipairs(scripts) do
    local pat = q("[" .. s:sub(1, 1) .. "]" .. s:sub(2))
    local left
    for _ = 1, 30 do
      left = M.sh("pgrep -f " .. pat .. " || true")
      if left == "" then break end
      os.execute("sleep 0.1")
    end
    if left ~= "" then
      os.execute("pkill -KILL -f " .. pat)
      scripts = {}
      error("stray processes of " .. s .. ": " .. left)
    end
  end
  scripts = {}
end

-- For teardown: removes every temporary file made.
function M.cleanup()
  for _, name in ipairs(temps) do os.execute("rm -f " .. q(name)) end
  temps = {}
end

return M
