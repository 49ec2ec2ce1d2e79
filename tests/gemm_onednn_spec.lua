-- float32 matrix products on the CPU through oneDNN's sgemm
-- (runtime/ops/linalg.c: products of 2^20+ multiply-adds at one thread;
-- at two, those of 512+ rows or a reduction of 2048+, on OpenMP threads
-- that a forked child must not wait for),
-- against float64 and against OpenBLAS (DDPLUA_GEMM=openblas, in a ddplua
-- process): every transposition, strided operands, addmm's alpha and beta,
-- batched and broadcast products, an output block full of NaN garbage,
-- and the choice named by ddplua -v.
local ddp = require "ddp"
local shell = require "helpers.shell"

-- |a - ref| <= rtol * max|ref| (float32 sums of a few hundred products)
local function close(a, ref, what)
  local scale = ref:abs():max():item()
  local err = (a:double() - ref:double()):abs():max():item()
  assert(err <= 2e-5 * scale, ("%s: off by %g of %g"):format(what, err, scale))
end

describe("float32 matmul through oneDNN's sgemm at one thread", function()
  local threads
  setup(function() threads = ddp.get_num_threads(); ddp.set_num_threads(1) end)
  teardown(function() ddp.set_num_threads(threads) end)

  it("agrees with float64 for every transposition and strided operands", function()
    ddp.manual_seed(21)
    local M, K, N = 160, 96, 112  -- 1.7M multiply-adds: oneDNN's
    for _, ta in ipairs({ false, true }) do
      for _, tb in ipairs({ false, true }) do
        local a = ta and ddp.randn(K, M):t() or ddp.randn(M, K)
        local b = tb and ddp.randn(N, K):t() or ddp.randn(K, N)
        close(a:matmul(b), a:double():matmul(b:double()), ("ta=%s tb=%s"):format(ta, tb))
      end
    end
    -- row strides beyond the row (a narrow of a wider matrix)
    local a, b = ddp.randn(M, K + 9):narrow(1, 3, K), ddp.randn(K, N + 5):narrow(1, 0, N)
    close(a:matmul(b), a:double():matmul(b:double()), "strided")
  end)

  it("adds beta * input in addmm, broadcasts a bias row and batches", function()
    ddp.manual_seed(22)
    local a, b, c = ddp.randn(128, 96), ddp.randn(96, 100), ddp.randn(128, 100)
    close(ddp.addmm(c, a, b, { beta = 0.5, alpha = 2 }),
          ddp.addmm(c:double(), a:double(), b:double(), { beta = 0.5, alpha = 2 }), "addmm")
    local bias = ddp.randn(100)
    close(ddp.addmm(bias, a, b), ddp.addmm(bias:double(), a:double(), b:double()), "bias")
    local x, w = ddp.randn(3, 128, 96), ddp.randn(96, 100)
    close(x:matmul(w), x:double():matmul(w:double()), "folded batch")
    local y = ddp.randn(3, 96, 100)
    close(x:matmul(y), x:double():matmul(y:double()), "batched")
  end)

  it("writes the whole output when beta is 0, whatever the block held", function()
    -- a freed block of NaNs comes back from the allocator's cache for the
    -- next output of its size; beta = 0 must not read it
    for _ = 1, 3 do
      ddp.full({ 200, 120 }, 0 / 0):free()
      local a, b = ddp.randn(200, 80), ddp.randn(80, 120)
      local r = a:matmul(b)
      assert.is_false(r:isnan():any())
      close(r, a:double():matmul(b:double()), "after NaN garbage")
    end
  end)

  it("gives OpenBLAS's results within float32 rounding (DDPLUA_GEMM=openblas)", function()
    local script = [[
      local ddp = require "ddp"
      ddp.set_num_threads(1)
      ddp.manual_seed(5)
      local a, b = ddp.randn(300, 200), ddp.randn(200, 150)
      io.write(string.format("%.9g %.9g\n", a:matmul(b):sum():item(), a:t():matmul(a):abs():sum():item()))]]
    local file = shell.q(shell.tempfile(script))
    local one = shell.sh("env -u DDPLUA_GEMM " .. shell.q(shell.ddplua) .. " " .. file)
    local two = shell.sh("DDPLUA_GEMM=openblas " .. shell.q(shell.ddplua) .. " " .. file)
    local s1, t1 = one:match("(%S+) (%S+)")
    local s2, t2 = two:match("(%S+) (%S+)")
    assert.truthy(s1 and s2, one .. two)
    assert.near(tonumber(s2), tonumber(s1), 1e-3 * math.abs(tonumber(s2)) + 1e-2)
    assert.near(tonumber(t2), tonumber(t1), 1e-5 * math.abs(tonumber(t2)))
  end)

  it("is named by ddplua -v, or OpenBLAS under DDPLUA_GEMM=openblas", function()
    local q = shell.q(shell.ddplua)
    assert.matches("\ngemm: oneDNN %d+%.%d+%.%d+ for float32 products", shell.sh("env -u DDPLUA_GEMM " .. q .. " -v"))
    assert.matches("\ngemm: OpenBLAS %(DDPLUA_GEMM=openblas%)", shell.sh("DDPLUA_GEMM=openblas " .. q .. " -v"))
  end)
end)

describe("float32 matmul through oneDNN's sgemm at two threads", function()
  local threads
  setup(function() threads = ddp.get_num_threads(); ddp.set_num_threads(2) end)
  teardown(function() ddp.set_num_threads(threads) end)

  it("agrees with float64 on a GPT's shapes: many rows, long reductions, transposed", function()
    ddp.manual_seed(7)
    for _, c in ipairs { { 2048, 176, 528, false, true }, { 176, 2048, 528, true, false },
                         { 700, 300, 90, false, false }, { 64, 2048, 100, false, true } } do
      local m, k, n, ta, tb = c[1], c[2], c[3], c[4], c[5]
      local a = ta and ddp.randn(k, m):t() or ddp.randn(m, k)
      local b = tb and ddp.randn(n, k):t() or ddp.randn(k, n)
      close(a:matmul(b), a:double():matmul(b:double()), ("%dx%dx%d"):format(m, k, n))
    end
  end)

  it("leaves a forked child able to multiply (the parent's OpenMP team is gone there)", function()
    local script = [[
      local ffi = require "ffi"
      ffi.cdef "int fork(void); int waitpid(int, int *, int); void _exit(int);"
      local ddp = require "ddp"
      ddp.set_num_threads(2)
      local a = ddp.randn(1024, 512)
      local s = a:matmul(a:t()):sum():item()  -- 1024 rows: oneDNN on a team of 2
      local pid = ffi.C.fork()
      if pid == 0 then
        local z = a:matmul(a:t()):sum():item()
        io.write(z == s and "child same\n" or "child differs\n")
        io.flush()
        ffi.C._exit(0)
      end
      local st = ffi.new("int[1]")
      ffi.C.waitpid(pid, st, 0)
      io.write("parent done\n")]]
    local file = shell.q(shell.tempfile(script))
    local out = shell.sh("env -u DDPLUA_GEMM timeout 60 " .. shell.q(shell.ddplua) .. " " .. file .. " 2>&1; echo rc $?")
    assert.truthy(out:find("child", 1, true), "the child hung or died: " .. out)
    assert.truthy(out:find("parent done", 1, true) and out:find("rc 0", 1, true), out)
  end)
end)
