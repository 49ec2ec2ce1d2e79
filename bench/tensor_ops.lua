-- tensor_ops.lua: tensor op throughput, twin of tensor_ops.py (PyTorch).
--   ddplua bench/tensor_ops.lua THREADS
-- Prints one line per measurement: "name<TAB>value<TAB>unit".
local ddp = require "ddp"
local threads = tonumber(arg[1]) or 1
ddp.set_num_threads(threads)
ddp.manual_seed(0)

local now = dofile((arg[0]:match("^(.*)/") or ".") .. "/clock.lua")

-- median time of 2 reps + 1 runs after one warm-up (bench/clock.lua)
local function best(reps, f) return now.median(reps * 2 + 1, f) end

local function report(name, value, unit)
  print(("%s\t%.3f\t%s"):format(name, value, unit))
end

for _, n in ipairs { 512, 1024, 2048 } do
  local a, b = ddp.randn(n, n), ddp.randn(n, n)
  local t = best(n >= 2048 and 3 or 5, function() return a:matmul(b) end)
  report("matmul " .. n, 2 * n ^ 3 / t / 1e9, "GFLOP/s")
end

local N = 16 * 1024 * 1024
local x, y = ddp.randn(N), ddp.randn(N)
report("add 16M", 3 * 4 * N / best(5, function() return x + y end) / 1e9, "GB/s")
report("mul 16M", 3 * 4 * N / best(5, function() return x * y end) / 1e9, "GB/s")
report("add_ 16M (in place)", 3 * 4 * N / best(5, function() return x:add_(y) end) / 1e9, "GB/s")
report("sum 16M", 4 * N / best(5, function() return x:sum() end) / 1e9, "GB/s")
local rows = ddp.randn(4096, 1024)
report("softmax 4096x1024", 4096 / best(5, function() return rows:softmax(1) end), "rows/s")
