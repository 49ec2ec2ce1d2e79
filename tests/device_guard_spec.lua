-- Every op refuses a tensor it cannot handle -- one marked as lying on a
-- CUDA device (its memory stays host memory: a test hook of tests/c/hooks.c),
-- with an error naming the device, and one freed with t:free(), with an
-- error -- never a crash or a result read from memory it may not read;
-- views of a device tensor stay allowed (they only make metadata).  This
-- is the guard the CUDA tensors rely on: an op without a CUDA kernel
-- refuses device tensors (check_tensor), and one with a kernel goes to
-- CUDA, which says it is not there (this spec runs without a device).
-- The ops run in a child process, so a crash fails the spec instead of
-- ending busted.
local jobs = require "helpers.jobs"
local q, run = jobs.q, jobs.run

local SCRIPT = [[
local ffi = require "ffi"
local core = require "ddp.core"
pcall(ffi.cdef, "int dl_test_set_device(dl_tensor *t, int device);")
local hooks = ffi.load(os.getenv("T_HOOKS"))
local nn, F, optim = ddp.nn, ddp.nn.functional, ddp.optim
local MODE = os.getenv("T_MODE")
ddp.init()

local made = {}
local function bad(...)
  local t = ddp.randn(...)
  if MODE == "device" then
    assert(hooks.dl_test_set_device(t, 0) == 0)
    made[#made + 1] = t
  else
    t:free()
  end
  return t
end
local function ok_t(...) return ddp.randn(...) end

local ops = {
  add = function() return bad(3) + ok_t(3) end,
  radd = function() return ok_t(3) + bad(3) end,
  mul_scalar = function() return bad(3) * 2 end,
  add_ = function() local a = ok_t(3) a:add_(bad(3)) end,
  exp = function() return bad(3):exp() end,
  relu = function() return bad(3):relu() end,
  clamp = function() return bad(3):clamp(0, 1) end,
  where = function() return ddp.where(ok_t(3):gt(0), bad(3), ok_t(3)) end,
  masked_fill_ = function() bad(3):masked_fill_(ok_t(3):gt(0), 1) end,
  fill_ = function() bad(3):fill_(1) end,
  copy_ = function() ok_t(3):copy_(bad(3)) end,
  copy_into = function() bad(3):copy_(ok_t(3)) end,
  clone = function() return bad(3):clone() end,
  contiguous = function() return bad(3, 4):t():contiguous() end,
  to_dtype = function() return bad(3):to("float64") end,
  item = function() return bad(1):item() end,
  totable = function() return bad(3):totable() end,
  equal = function() return bad(3):equal(ok_t(3)) end,
  sum = function() return bad(3, 4):sum() end,
  sum_dim = function() return bad(3, 4):sum(1) end,
  mean = function() return bad(3):mean() end,
  max_dim = function() return bad(3, 4):max(1) end,
  argmax = function() return bad(3, 4):argmax(1) end,
  std = function() return bad(5):std() end,
  softmax = function() return bad(3, 4):softmax(1) end,
  log_softmax = function() return bad(3, 4):log_softmax(1) end,
  cumsum = function() return bad(5):cumsum(0) end,
  sort = function() return bad(5):sort() end,
  topk = function() return bad(5):topk(2) end,
  matmul = function() return bad(3, 4):matmul(ok_t(4, 2)) end,
  matmul_rhs = function() return ok_t(3, 4):matmul(bad(4, 2)) end,
  bmm = function() return ddp.bmm(bad(2, 3, 4), ok_t(2, 4, 2)) end,
  index_select = function() return bad(5, 2):index_select(0, ddp.tensor({ 0, 1 })) end,
  gather = function() return bad(3, 4):gather(1, ddp.zeros(3, 1, { dtype = "int64" })) end,
  cat = function() return ddp.cat({ ok_t(2), bad(2) }, 0) end,
  stack = function() return ddp.stack({ bad(2), ok_t(2) }, 0) end,
  uniform_ = function() bad(3):uniform_() end,
  linear = function() return F.linear(bad(2, 3), ok_t(4, 3), ok_t(4)) end,
  linear_weight = function() return F.linear(ok_t(2, 3), bad(4, 3), ok_t(4)) end,
  conv2d = function() return F.conv2d(bad(1, 1, 5, 5), ok_t(2, 1, 3, 3)) end,
  max_pool2d = function() return F.max_pool2d(bad(1, 1, 4, 4), 2) end,
  avg_pool2d = function() return F.avg_pool2d(bad(1, 1, 4, 4), 2) end,
  layer_norm = function() return F.layer_norm(bad(2, 4), { 4 }) end,
  batch_norm = function() return F.batch_norm(bad(4, 3), ok_t(3), ok_t(3):abs(), nil, nil, true) end,
  embedding = function() return F.embedding(ddp.tensor({ 0, 1 }), bad(4, 3)) end,
  cross_entropy = function() return F.cross_entropy(bad(2, 3), ddp.tensor({ 0, 2 })) end,
  mse_loss = function() return F.mse_loss(bad(3), ok_t(3)) end,
  dropout = function() return F.dropout(bad(10), 0.5, true) end,
  backward = function()
    local w = bad(3)
    w:requires_grad_()
    return (w * 2):sum():backward()
  end,
  sgd_step = function()
    local p = ok_t(3):requires_grad_()
    local o = optim.SGD({ p }, { lr = 0.1 })
    p.grad = bad(3)
    o:step()
  end,
  all_reduce = function() return ddp.all_reduce(bad(3)) end,
  save = function() return ddp.save({ w = bad(3) }, os.tmpname()) end,
}

local names = {}
for k in pairs(ops) do names[#names + 1] = k end
table.sort(names)
for _, name in ipairs(names) do
  local ok, err = pcall(ops[name])
  -- a freed tensor has no elements left: an op may also refuse it for its
  -- shape, and equal() may answer false
  if ok and not (MODE == "freed" and name == "equal") then print("LEAK " .. name)
  elseif ok then print("REFUSED " .. name)
  elseif MODE == "device" and not (tostring(err):find("cuda:0", 1, true)
                                   or tostring(err):find("CUDA is not available", 1, true)) then
    print("OTHER " .. name .. ": " .. tostring(err))
  else print("REFUSED " .. name) end
end
-- views of a device tensor are fine, and so is the metadata
if MODE == "device" then
  local t = bad(2, 3)
  local v = t:view(6):narrow(0, 1, 2):unsqueeze(0)
  assert(v:shape()[2] == 2 and t:t():shape()[1] == 3 and t:device() == "cuda:0", "views and metadata")
  assert(tostring(t) == "tensor(<float32 [2, 3]>, device='cuda:0')", tostring(t))
  print("VIEWS fine")
else
  assert(tostring(bad(2)) == "tensor(<freed>)")
end
for _, t in ipairs(made) do hooks.dl_test_set_device(t, -1) end
print("DONE " .. #names)
]]

describe("every op refuses a tensor it cannot handle", function()
  teardown(jobs.cleanup)
  for _, mode in ipairs { "device", "freed" } do
    it("a " .. mode .. " tensor, with a clear error", function()
      local out, err, rc = run(q(jobs.script(SCRIPT, "guard")), "T_MODE=" .. mode .. " T_HOOKS=" .. q(jobs.root .. "/build/tests/libddplua_testhooks.so"), 120)
      assert.equals(0, rc, err .. out)
      local problems = {}
      for line in out:gmatch("[^\n]+") do
        if line:find("^LEAK") or line:find("^OTHER") then problems[#problems + 1] = line end
      end
      assert.same({}, problems, out)
      assert.truthy(out:find("DONE %d+"), out)
      if mode == "device" then assert.truthy(out:find("VIEWS fine", 1, true), out) end
    end)
  end
end)
