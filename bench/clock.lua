-- bench/clock.lua: what the benchmarks share -- a monotonic clock in
-- seconds (os.clock is CPU time, which hides waiting and counts every
-- thread), the median time of a few runs, and the peak resident memory.
--   local now = dofile(dir .. "/clock.lua")
--   now()  now.median(reps, f)  now.peak_rss_mb()
local ffi = require "ffi"
ffi.cdef [[
  typedef struct { long tv_sec; long tv_nsec; } bench_ts;
  int clock_gettime(int clk, bench_ts *ts);
]]
local ts = ffi.new("bench_ts")
local function now()
  ffi.C.clock_gettime(1, ts)  -- CLOCK_MONOTONIC
  return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) * 1e-9
end

local M = setmetatable({}, { __call = function() return now() end })

-- The median seconds of reps runs of f after one warm-up run, each after a
-- collection (the best of a few runs rewards lucky outliers on a shared
-- machine).
function M.median(reps, f)
  f()
  local t = {}
  for i = 1, reps do
    collectgarbage()
    local t0 = now()
    f()
    t[i] = now() - t0
  end
  table.sort(t)
  return t[math.floor((reps + 1) / 2)]
end

-- This process's peak resident memory (VmHWM) in MiB.
function M.peak_rss_mb()
  for line in io.lines("/proc/self/status") do
    local kb = line:match("^VmHWM:%s+(%d+)")
    if kb then return tonumber(kb) / 1024 end
  end
end

return M
