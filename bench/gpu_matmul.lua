-- gpu_matmul.lua: bfloat16 matmul throughput on cuda:0 at n^3 (default
-- 8192), twin of gpu_matmul.py.  Prints one line:
--   RESULT gpu_matmul impl=ddplua dtype=bfloat16 n=8192 tflops=<TFLOP/s>
-- or "RESULT gpu_matmul impl=ddplua skip=<why>" without CUDA (exit 0).
--   ddplua bench/gpu_matmul.lua [N] [ITERS]
local ddp = require "ddp"
local now = dofile((arg[0]:match("^(.*)/") or ".") .. "/clock.lua")

local n, iters = tonumber(arg[1]) or 8192, tonumber(arg[2]) or 50

local function skip(why)
  print(("RESULT gpu_matmul impl=ddplua skip=%q"):format(tostring(why):gsub("\n.*", "")))
  os.exit(0)
end
if not ddp.cuda.is_available() then skip(ddp.cuda.status()) end

local ok, err = pcall(function()
  ddp.manual_seed(0)
  local a = ddp.randn(n, n):bfloat16():cuda()
  local b = ddp.randn(n, n):bfloat16():cuda()
  local c
  for _ = 1, 3 do c = a:matmul(b) end  -- warm-up (cuBLAS heuristics, allocator)
  ddp.cuda.synchronize()
  local t0 = now()
  for _ = 1, iters do c = a:matmul(b) end
  ddp.cuda.synchronize()
  local dt = now() - t0
  assert(c:dtype() == "bfloat16")
  print(("RESULT gpu_matmul impl=ddplua dtype=bfloat16 n=%d tflops=%.1f"):format(n, 2 * n ^ 3 * iters / dt / 1e12))
end)
if not ok then skip(err) end
