-- startup_job.lua: the smallest distributed job (join, barrier, leave),
-- twin of startup_job.py; bench/startup.sh times its whole launch.
local ddp = require "ddp"
ddp.init()
ddp.barrier()
ddp.shutdown()
