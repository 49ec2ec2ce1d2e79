-- ddp.dist: the process group -- who am I, how many are we
-- (ddp.dist.env), joining and leaving it (ddp.dist.group), the tensor
-- collectives and barrier (ddp.dist.collectives), and Lua values across
-- ranks (ddp.dist.objects), over the launcher's rendezvous store
-- (ddp.dist.store).  Its functions are also on ddp itself (ddp.init,
-- ddp.rank, ddp.barrier, ...).
--
-- A script not started by the launcher (no WORLD_SIZE/RANK) is a world of
-- one and never touches a store, so the same script runs alone and under
-- `ddplua --nproc N`.  A world of one under the launcher needs no store
-- either.
local core = require "ddp.core"

core.add_lib_file(debug.getinfo(1, "S").source)

local M = {}

-- Each part's functions, a name given twice being an error; names that
-- start with _ are the parts' own, for each other (ddp.dist.group's).
for _, part in ipairs { "ddp.dist.env", "ddp.dist.group", "ddp.dist.collectives", "ddp.dist.objects" } do
  for name, v in pairs(require(part)) do
    if name:sub(1, 1) ~= "_" then
      if M[name] ~= nil then error(("ddp.dist: %s is given twice (again by %s)"):format(name, part)) end
      M[name] = v
    end
  end
end

return M
