-- ddp.console: what the ddplua prompt does with a typed chunk, on one rank
-- or on every rank of a job: compile it (an expression prints its value,
-- `local` stays visible on later lines), run it, format what it returned
-- (tables nested and depth-limited, tensors as PyTorch prints them),
-- complete names for the Tab key, and ddp.breakpoint().  The terminal
-- side (line editing, Ctrl-C, the launcher's prompt over ranks) is the
-- program's (cli/repl.c, cli/repl_dist.c, cli/link.c); this module is the
-- Lua side both share: chunks and sessions (ddp.console.chunk), the
-- printed values (ddp.console.format), completion (ddp.console.complete),
-- running a chunk and ddp.breakpoint (here).
local core = require "ddp.core"
local chunk = require "ddp.console.chunk"

core.add_lib_file(debug.getinfo(1, "S").source)

-- The parts' functions, all given out here (cli/repl.c and cli/link.c
-- call them by name on this module).
local M = core.gather({}, "ddp.console", { "ddp.console.chunk", "ddp.console.format", "ddp.console.complete" })
local type, pairs, tostring, select = type, pairs, tostring, select

-- -- Running -----------------------------------------------------------------

-- The traceback of an error in a typed chunk, cut at the console's own
-- frames (what the user typed is the whole story).
local function traceback(msg)
  if type(msg) ~= "string" and type(msg) ~= "number" then
    local mt = getmetatable(msg)
    msg = (mt and mt.__tostring) and tostring(msg) or ("(error object is a " .. type(msg) .. " value)")
  end
  local tb = debug.traceback(tostring(msg), 2)
  local lines, out = {}, {}
  for line in tb:gmatch("[^\n]+") do lines[#lines + 1] = line end
  local frames = 0
  for _, line in ipairs(lines) do
    if line:find("ddp/console/", 1, true) or line:find("[C]: in function 'xpcall'", 1, true) then break end
    local src = line:match("^%s+(.-):%d+: in ")
    local ours = src and core.is_lib_source("@" .. src)
    if not ours and not line:find("^%s*%[C%]: in ") then
      out[#out + 1] = line
      if line:find("^%s") then frames = frames + 1 end
    end
  end
  -- one frame (the line typed) says nothing the message does not
  if frames <= 1 then return tostring(msg) end
  return table.concat(out, "\n")
end

local function pack(...) return { n = select("#", ...), ... } end
local function pass(...) return ... end

-- Runs text in session s: returns true and what to print ("" when the
-- chunk printed nothing itself), or false and the error with its
-- traceback.  Code typed here runs interpreted (the caller turns the JIT
-- off for it) so Ctrl-C's hook can stop a loop typed at the prompt.
function M.run(s, text)
  local f, expr = M.compile(s, text)
  if not f then return false, expr end
  jit.off(f, true)
  local r = pack(xpcall(f, traceback, expr and pass or chunk._exporter(s)))
  if not r[1] then return false, r[2] end
  if r.n <= 1 then return true, "" end
  return true, M.format(unpack(r, 2, r.n))
end

-- -- ddp.breakpoint -----------------------------------------------------------

-- The caller's frame (level counts as debug.getinfo does) as a session's
-- frame: its locals (the innermost of a name wins) and upvalues, by value.
local function capture(level)
  local info = debug.getinfo(level + 1, "fSl")
  local frame = { has = {}, values = {}, dirty = {}, index = {}, upindex = {},
                  where = info and ("%s:%d"):format(info.short_src, info.currentline or 0) or "?" }
  if info and info.func then
    frame.env = getfenv(info.func)
    local i = 1
    while true do
      local name, v = debug.getupvalue(info.func, i)
      if not name then break end
      frame.has[name], frame.values[name], frame.upindex[name] = true, v, i
      i = i + 1
    end
  end
  local i = 1
  while true do
    local name, v = debug.getlocal(level + 1, i)
    if not name then break end
    if name:sub(1, 1) ~= "(" then
      frame.has[name], frame.values[name], frame.index[name] = true, v, i
      frame.upindex[name] = nil
    end
    i = i + 1
  end
  frame.func = info and info.func
  return frame
end

-- ddp.breakpoint([rank]): stops here and opens the prompt on that rank
-- (default 0) with this frame's locals in scope; the other ranks wait.
-- Ctrl-D at the prompt writes changed locals back and continues every
-- rank.  As torch.distributed.breakpoint, every rank calls it.  Under the
-- ddplua program the prompt is the launcher's (one terminal for the job);
-- elsewhere (plain luajit) it falls back to debug.debug().
function M.breakpoint(rank)
  if rank ~= nil and not core.is_integer(rank) then
    core.raise("breakpoint: rank must be an integer, got " .. core.show(rank))
  end
  rank = rank or 0
  local me = tonumber(os.getenv("RANK")) or 0
  local world = tonumber(os.getenv("WORLD_SIZE")) or 1
  if rank < 0 or rank >= world then
    core.raise(("breakpoint: rank %d is not in this job (ranks 0 to %d)"):format(rank, world - 1))
  end
  local frame = capture(2)
  local session = M.session(frame)
  local program = package.loaded["ddp.program"]
  if type(program) == "table" and program.prompt then
    program.prompt(session, rank, frame.where)
  elseif me == rank then
    io.stderr:write(("ddp.breakpoint at %s: not under the ddplua program, using debug.debug() (cont to go on)\n")
                    :format(frame.where))
    debug.debug()
  end
  for name in pairs(frame.dirty) do
    if frame.index[name] then debug.setlocal(2, frame.index[name], frame.values[name])
    elseif frame.upindex[name] then debug.setupvalue(frame.func, frame.upindex[name], frame.values[name]) end
  end
end

return M
