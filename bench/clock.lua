-- bench/clock.lua: a monotonic clock in seconds for the benchmarks
-- (os.clock is CPU time, which hides waiting and counts every thread).
local ffi = require "ffi"
ffi.cdef [[
  typedef struct { long tv_sec; long tv_nsec; } bench_ts;
  int clock_gettime(int clk, bench_ts *ts);
]]
local ts = ffi.new("bench_ts")
return function()
  ffi.C.clock_gettime(1, ts)  -- CLOCK_MONOTONIC
  return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) * 1e-9
end
