-- gpu_elementwise.lua: elementwise bandwidth on cuda:0 against a
-- device-to-device copy, float32, 2^26 elements (256 MiB a tensor), twin
-- of gpu_elementwise.py.  Bytes moved: copy 2 tensors, add 3, mul by a
-- scalar 2, relu 2.  Prints one line:
--   RESULT gpu_elementwise impl=ddplua copy_gbps=.. add_gbps=.. mul_gbps=.. relu_gbps=.. add_vs_copy=..
--   ddplua bench/gpu_elementwise.lua [LOG2_N] [ITERS]
local ddp = require "ddp"
local now = dofile((arg[0]:match("^(.*)/") or ".") .. "/clock.lua")

local n, iters = 2 ^ (tonumber(arg[1]) or 26), tonumber(arg[2]) or 50

local function skip(why)
  print(("RESULT gpu_elementwise impl=ddplua skip=%q"):format(tostring(why):gsub("\n.*", "")))
  os.exit(0)
end
if not ddp.cuda.is_available() then skip(ddp.cuda.status()) end

local ok, err = pcall(function()
  local a = ddp.full({ n }, 1.5):cuda()
  local b = ddp.full({ n }, -0.5):cuda()
  local out = ddp.empty(n):cuda()
  local bytes = n * 4
  local function gbps(tensors, f)
    for _ = 1, 3 do f() end
    ddp.cuda.synchronize()
    local t0 = now()
    for _ = 1, iters do f() end
    ddp.cuda.synchronize()
    return tensors * bytes * iters / (now() - t0) / 1e9
  end
  local copy = gbps(2, function() out:copy_(a) end)
  local add = gbps(3, function() local _ = a + b end)
  local mul = gbps(2, function() local _ = a * 3 end)
  local relu = gbps(2, function() local _ = b:relu() end)
  print(("RESULT gpu_elementwise impl=ddplua copy_gbps=%.0f add_gbps=%.0f mul_gbps=%.0f relu_gbps=%.0f add_vs_copy=%.2f")
        :format(copy, add, mul, relu, add / copy))
end)
if not ok then skip(err) end
