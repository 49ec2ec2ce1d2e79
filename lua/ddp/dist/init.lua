-- ddp.dist: the process group -- who am I, how many are we
-- (ddp.dist.env), joining and leaving it (ddp.dist.group), the tensor
-- collectives and barrier (ddp.dist.collectives), and Lua values across
-- ranks (ddp.dist.objects) and pre-emption (ddp.dist.preempt: should_stop),
-- over the launcher's rendezvous store (ddp.dist.store).  Its functions are also on ddp itself (ddp.init,
-- ddp.rank, ddp.barrier, ...).
--
-- A script not started by the launcher (no WORLD_SIZE/RANK) is a world of
-- one and never touches a store, so the same script runs alone and under
-- `ddplua --nproc N`.  A world of one under the launcher needs no store
-- either.
local core = require "ddp.core"

core.add_lib_file(debug.getinfo(1, "S").source)

-- Each part's functions (core.gather: not ddp.dist.group's _-names, which
-- the parts share).
return core.gather({}, "ddp.dist", { "ddp.dist.env", "ddp.dist.group", "ddp.dist.collectives",
                                     "ddp.dist.objects", "ddp.dist.preempt" })
