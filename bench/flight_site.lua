-- flight_site.lua: the Lua side of the flight recorder's cost per
-- collective -- finding the user's line (ddp.core's user_site, one frame
-- of the library above it, as in ddp.all_reduce) and handing it to the
-- runtime -- timed over 10^6 calls in one process.
--   ddplua bench/flight_site.lua
local ffi = require "ffi"
local core = require "ddp.core"
local now = dofile((arg[0]:match("^(.*)/") or ".") .. "/clock.lua")
local C, user_site = ffi.C, core.user_site
local function site() C.dl_flight_site(user_site(4)) end  -- as collectives.lua's call()
local function library_call() site() end                    -- the library frame above it
local N = 1000000
for _ = 1, 1000 do library_call() end
local t0 = now()
for _ = 1, N do library_call() end
print(("flight site per call\t%.3f\tus"):format((now() - t0) / N * 1e6))
