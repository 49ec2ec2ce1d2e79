-- cuda_tensors.lua: CUDA tensors where a GPU exists (run by
-- tests/gpu/check.sh through build/ddplua): moving to and from the device,
-- creation with {device=}, printing, memory statistics, clear errors for
-- the ops that have no CUDA kernel yet.  Last line: "cuda_tensors: N
-- passed, M failed"; a "SKIP:" line where there is no GPU.
local ddp = require "ddp"
local tally = dofile((arg[0]:match("^(.*)/") or ".") .. "/tally.lua")("cuda_tensors")
local check, try = tally.check, tally.try

if not ddp.cuda.is_available() then
  print("SKIP: CUDA tensors: " .. ddp.cuda.status())
else
  local x = ddp.arange(12, { dtype = "float32" }):reshape(3, 4)
  try("round trip", function()
    local g = x:cuda()
    check(g:device() == "cuda:0", "device of x:cuda()")
    check(g:cpu():equal(x), "x:cuda():cpu() == x")
    check(g:to("cuda:0") == g, "to the device it is on is itself")
    check(x:t():cuda():cpu():equal(x:t()), "a non-contiguous source is made contiguous first")
  end)
  try("creation", function()
    check(ddp.zeros(5, { device = "cuda" }):device() == "cuda:0", "zeros on cuda")
    check(ddp.tensor({ 1, 2, 3 }, { device = "cuda:0" }):cpu():totable()[3] == 3, "tensor on cuda")
    check(ddp.zeros_like(x:cuda()):device() == "cuda:0", "zeros_like keeps the device")
    local h = x:to("cuda", { dtype = "bfloat16" })
    check(h:dtype() == "bfloat16" and h:cpu():float():equal(x), "dtype and device in one to()")
  end)
  try("big", function()
    ddp.manual_seed(1)
    local b = ddp.randn(1000, 1000)
    check(b:cuda():cpu():equal(b), "4 MB round trip")
  end)
  try("printing", function()
    local s = tostring(ddp.tensor({ 1, 2 }, { dtype = "float32" }):cuda())
    check(s == "tensor([1., 2.], device='cuda:0')", s)
  end)
  try("memory", function()
    local before = ddp.cuda.memory_stats().allocated
    local g = ddp.zeros(1000, { device = "cuda" })
    check(ddp.cuda.memory_stats().allocated >= before + 4000, "allocated counts the tensor")
    g = nil
    collectgarbage() collectgarbage()
    check(ddp.cuda.memory_stats().allocated <= before, "released when collected")
    ddp.cuda.synchronize()
    ddp.cuda.empty_cache()
  end)
  try("no kernel yet", function()
    local g = x:cuda()
    local ok, err = pcall(function() return g + 1 end)
    check(not ok and tostring(err):find("cuda:0", 1, true), "g + 1 refused: " .. tostring(err))
    ok, err = pcall(function() return g:t():cpu() end)
    check(not ok and tostring(err):find("non-contiguous", 1, true), "non-contiguous copy refused")
  end)
  try("load onto the device", function()
    local path = os.tmpname()
    ddp.save({ x = x }, path)
    local got = ddp.load(path, { device = "cuda" })
    check(got.x:device() == "cuda:0" and got.x:cpu():equal(x), "load {device = cuda}")
    os.remove(path)
  end)
  try("modules", function()
    local m = ddp.nn.Linear(4, 2):to("cuda")
    check(m.weight:device() == "cuda:0" and m.weight.requires_grad and m.weight.is_leaf, "Linear:to(cuda)")
    m:to("cpu")
    check(m.weight:device() == "cpu", "and back")
  end)
end
os.exit(tally.report() == 0 and 0 or 1)
