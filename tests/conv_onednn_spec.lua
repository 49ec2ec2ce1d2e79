-- conv2d on the CPU through oneDNN (runtime/nn/conv_onednn.c): float32
-- convolutions with one group and 16 or more input channels.  Its output
-- and its three gradients against our own im2col kernels in float64 (which
-- never take oneDNN), proof from oneDNN's own log (ONEDNN_VERBOSE, in a
-- ddplua process) that it ran them, and the convolutions it leaves to ours
-- still right.
local ddp = require "ddp"
local F = require("ddp.nn").functional
local shell = require "helpers.shell"

-- float32 with 16+ channels: stride 2, padding, dilation, non-square
-- inputs and kernels, bias or none, batch 1, an unbatched input, a 1x1,
-- and a stride that leaves the input's last rows unread (oneDNN's
-- right padding negative).
local cases = {
  { "stride 2, padding 1, bias", { 2, 16, 9, 9 }, { 8, 16, 3, 3 }, true, { stride = 2, padding = 1 } },
  { "batch 1, non-square, dilation 2, no bias", { 1, 24, 7, 11 }, { 5, 24, 3, 2 }, false,
    { padding = { 1, 0 }, dilation = 2 } },
  { "unbatched [C, H, W], 1x1", { 16, 6, 5 }, { 7, 16, 1, 1 }, true, {} },
  { "stride {2, 1}, padding 2, dilation {1, 3}", { 3, 32, 10, 13 }, { 16, 32, 3, 3 }, true,
    { stride = { 2, 1 }, padding = 2, dilation = { 1, 3 } } },
  { "stride 4 past the last rows", { 2, 16, 10, 10 }, { 4, 16, 3, 3 }, true, { stride = 4 } },
  { "the CNN's second layer", { 4, 32, 14, 14 }, { 64, 32, 3, 3 }, true, { padding = 1 } },
}

-- y = conv(x, w, b) and the gradients of sum(y * gy), in dtype.
local function run(dtype, x, w, b, opts, gy)
  local function leaf(t) return t and t:to(dtype):detach():requires_grad_() end
  local lx, lw, lb = leaf(x), leaf(w), leaf(b)
  local y = F.conv2d(lx, lw, lb, opts)
  local g = gy or ddp.randn(unpack(y:size()))
  ;(y * g:to(dtype)):sum():backward()
  return { y = y:detach(), gx = lx.grad, gw = lw.grad, gb = lb and lb.grad }, g
end

-- |a - ref| <= rtol * max|ref| everywhere (float32 sums of a few hundred
-- products: about 1e-6 of the largest value).
local function close(name, a, ref, rtol)
  local scale = ref:abs():max():item()
  local err = (a:double() - ref):abs():max():item()
  assert(err <= rtol * scale + 1e-12,
         string.format("%s: max error %.3g, %.3g of the largest value %.3g", name, err, err / scale, scale))
end

local function check(x, w, b, opts)
  local r32, gy = run("float32", x, w, b, opts)
  local r64 = run("float64", x, w, b, opts, gy)
  assert.equal("float32", r32.y:dtype())
  close("output", r32.y, r64.y, 1e-4)
  close("grad_x", r32.gx, r64.gx, 1e-4)
  close("grad_w", r32.gw, r64.gw, 1e-4)
  if b then close("grad_b", r32.gb, r64.gb, 1e-4) end
end

describe("conv2d through oneDNN (float32, 16+ input channels)", function()
  teardown(shell.cleanup)

  for i, c in ipairs(cases) do
    it("equals im2col in float64: " .. c[1], function()
      ddp.manual_seed(100 + i)
      check(ddp.randn(unpack(c[2])), ddp.randn(unpack(c[3])), c[4] and ddp.randn(c[3][1]) or nil, c[5])
    end)
  end

  it("gives only the gradients asked for, and the bias's alone through ours", function()
    ddp.manual_seed(3)
    local x, w, b = ddp.randn(2, 16, 6, 6), ddp.randn(4, 16, 3, 3), ddp.randn(4)
    local y64 = F.conv2d(x:double(), w:double(), b:double(), { padding = 1 })
    -- frozen weights and input: only the bias learns (oneDNN computes a
    -- bias gradient only beside the weights', so ours runs)
    local lb = b:detach():requires_grad_()
    local y = F.conv2d(x, w, lb, { padding = 1 })
    close("output", y:detach(), y64, 1e-4)
    y:sum():backward()
    close("grad_b", lb.grad, ddp.ones(2, 4, 6, 6, { dtype = "float64" }):sum({ 0, 2, 3 }), 1e-6)
    -- the input's alone
    local lx = x:detach():requires_grad_()
    F.conv2d(lx, w, nil, { padding = 1 }):sum():backward()
    local lx64 = x:double():requires_grad_()
    F.conv2d(lx64, w:double(), nil, { padding = 1 }):sum():backward()
    close("grad_x", lx.grad, lx64.grad, 1e-4)
    -- the weights' alone, and with the bias (a frozen input)
    for _, with_b in ipairs({ false, true }) do
      local lw, lb32 = w:detach():requires_grad_(), with_b and b:detach():requires_grad_() or nil
      local lw64, lb64 = w:double():requires_grad_(), with_b and b:double():requires_grad_() or nil
      F.conv2d(x, lw, lb32, { padding = 1 }):sum():backward()
      F.conv2d(x:double(), lw64, lb64, { padding = 1 }):sum():backward()
      close("grad_w", lw.grad, lw64.grad, 1e-4)
      if with_b then close("grad_b", lb32.grad, lb64.grad, 1e-4) end
    end
  end)

  it("keeps one primitive per geometry: a second batch size, then the first again", function()
    ddp.manual_seed(4)
    local w = ddp.randn(8, 16, 3, 3)
    for _, n in ipairs({ 3, 1, 3 }) do check(ddp.randn(n, 16, 5, 5), w, nil, { padding = 1 }) end
  end)

  it("leaves 1-channel, grouped and float64 convolutions to im2col, still right", function()
    ddp.manual_seed(5)
    -- the CNN's first layer: oneDNN's backward-data is slow for one channel
    check(ddp.randn(2, 1, 8, 8), ddp.randn(4, 1, 3, 3), ddp.randn(4), { padding = 1 })
    -- 15 channels: below the threshold
    check(ddp.randn(2, 15, 6, 6), ddp.randn(3, 15, 3, 3), nil, { stride = 2 })
    -- groups > 1 with 32 channels
    check(ddp.randn(2, 32, 6, 6), ddp.randn(8, 8, 3, 3), ddp.randn(8), { padding = 1, groups = 4 })
  end)

  -- A Lua literal of v (numbers, booleans, strings, tables of them).
  local function literal(v)
    if type(v) ~= "table" then return type(v) == "string" and string.format("%q", v) or tostring(v) end
    local parts = {}
    for k, e in pairs(v) do
      parts[#parts + 1] = (type(k) == "number" and "" or (k .. " = ")) .. literal(e)
    end
    return "{ " .. table.concat(parts, ", ") .. " }"
  end

  -- oneDNN's log lines (ONEDNN_VERBOSE) of a ddplua process that runs
  -- forward and backward for each conv of `convs` ({x shape, w shape, bias,
  -- options, dtype}); env: a prefix of variables (default: DDPLUA_CONV unset).
  local function onednn_log(env, convs)
    local script = {
      'local ddp = require "ddp"',
      'local F = require("ddp.nn").functional',
      'for _, c in ipairs(' .. literal(convs) .. ') do',
      '  local dt = { dtype = c[5] or "float32" }',
      '  local x = ddp.randn(c[1], dt):requires_grad_()',
      '  local w = ddp.randn(c[2], dt):requires_grad_()',
      '  local b = c[3] and ddp.randn(c[2][1], dt):requires_grad_() or nil',
      '  F.conv2d(x, w, b, c[4]):sum():backward()',
      'end',
      'print("done")' }
    local file = shell.tempfile(table.concat(script, "\n"))
    local out = shell.sh((env or "env -u DDPLUA_CONV") .. " ONEDNN_VERBOSE=1 " .. shell.q(shell.ddplua) .. " "
                         .. shell.q(file) .. " 2>&1")
    assert.matches("done", out)
    return out
  end

  -- oneDNN's convolution runs in a log, as "kind shape-string" = count.
  local function conv_runs(out)
    local runs, n = {}, 0
    for line in out:gmatch("[^\n]+") do
      local kind, desc = line:match("^onednn_verbose,exec,cpu,convolution,[^,]*,([%w_]+),.*,(mb[^,]+),[^,]*$")
      if kind then
        runs[kind .. " " .. desc] = (runs[kind .. " " .. desc] or 0) + 1
        n = n + 1
      end
    end
    return runs, n
  end

  it("ran every case above through oneDNN: forward, backward-data, backward-weights (its own log says so)", function()
    local convs = {}
    for i, c in ipairs(cases) do convs[i] = { c[2], c[3], c[4], c[5] } end
    local runs, n = conv_runs(onednn_log(nil, convs))
    assert.equal(3 * #cases, n)
    for _, c in ipairs(cases) do
      local xs = #c[2] == 4 and c[2] or { 1, c[2][1], c[2][2], c[2][3] }
      local prefix = string.format("mb%d_ic%doc%d_ih%d", xs[1], xs[2], c[3][1], xs[3])
      for _, kind in ipairs({ "forward_training", "backward_data", "backward_weights" }) do
        local seen = 0
        for k, v in pairs(runs) do
          if k:find(kind .. " " .. prefix, 1, true) == 1 then seen = seen + v end
        end
        assert.equal(1, seen, c[1] .. ": " .. kind)
      end
    end
  end)

  it("runs no oneDNN kernel under DDPLUA_CONV=im2col, for 1 channel, groups > 1 or float64", function()
    local layer = { { 4, 32, 14, 14 }, { 64, 32, 3, 3 }, true, { padding = 1 } }
    local _, n = conv_runs(onednn_log("DDPLUA_CONV=im2col", { layer }))
    assert.equal(0, n)
    _, n = conv_runs(onednn_log(nil, {
      { { 4, 1, 28, 28 }, { 32, 1, 3, 3 }, true, { padding = 1 } },
      { { 4, 32, 14, 14 }, { 64, 16, 3, 3 }, true, { padding = 1, groups = 2 } },
      { { 4, 32, 14, 14 }, { 64, 32, 3, 3 }, true, { padding = 1 }, "float64" },
    }))
    assert.equal(0, n)
  end)

  it("keeps oneDNN's OpenMP threads within ddp.set_num_threads", function()
    -- a process's threads after three convs, through oneDNN or ours; at 1
    -- thread oneDNN must add none (libgomp would start one per core
    -- unless told), at 3 at most the 2 of its team beside the caller
    local function threads(env, n)
      local script = string.format([[
        local ddp = require "ddp"
        local F = require("ddp.nn").functional
        ddp.set_num_threads(%d)
        local x = ddp.randn(8, 32, 14, 14):requires_grad_()
        local w = ddp.randn(64, 32, 3, 3):requires_grad_()
        for _ = 1, 3 do F.conv2d(x, w, nil, 1, 1):sum():backward() end
        for l in io.lines("/proc/self/status") do
          if l:match("^Threads:") then print(l) end
        end]], n)
      local out = shell.sh(env .. " " .. shell.q(shell.ddplua) .. " " .. shell.q(shell.tempfile(script)) .. " 2>&1")
      return assert(tonumber(out:match("Threads:%s*(%d+)")), out)
    end
    assert.equal(threads("DDPLUA_CONV=im2col", 1), threads("env -u DDPLUA_CONV", 1))
    assert.is_true(threads("env -u DDPLUA_CONV", 3) <= threads("DDPLUA_CONV=im2col", 3) + 2)
  end)

  it("still computes in a child forked after OpenMP ran a team (through ours there)", function()
    -- libgomp's team threads do not survive a fork; its next team in the
    -- child would wait for them forever
    local script = [[
      local ffi = require "ffi"
      ffi.cdef "int fork(void); int waitpid(int, int *, int); void _exit(int);"
      local ddp = require "ddp"
      local F = require("ddp.nn").functional
      ddp.set_num_threads(2)
      local x = ddp.randn(8, 32, 14, 14):requires_grad_()
      local w = ddp.randn(64, 32, 3, 3):requires_grad_()
      local y = F.conv2d(x, w, nil, 1, 1)
      y:sum():backward()
      local pid = ffi.C.fork()
      if pid == 0 then
        local ok = F.conv2d(x, w, nil, 1, 1):allclose(y, 1e-4, 1e-4)
        F.conv2d(x, w, nil, 1, 1):sum():backward()
        io.write(ok and "child ok\n" or "child differs\n")
        io.stdout:flush()
        ffi.C._exit(0)
      end
      local st = ffi.new("int[1]")
      ffi.C.waitpid(pid, st, 0)
      print("parent ok", st[0])]]
    local out = shell.sh("env -u DDPLUA_CONV timeout 60 " .. shell.q(shell.ddplua) .. " "
                         .. shell.q(shell.tempfile(script)) .. " 2>&1")
    assert.matches("child ok\nparent ok\t0", out)
  end)

  it("is named by ddplua -v, with its version, or im2col under DDPLUA_CONV=im2col", function()
    local q = shell.q(shell.ddplua)
    assert.matches("\nconv: oneDNN %d+%.%d+%.%d+ for float32 with 16%+ input channels", shell.sh("env -u DDPLUA_CONV " .. q .. " -v"))
    assert.matches("\nconv: im2col %+ BLAS %(DDPLUA_CONV=im2col%)", shell.sh("DDPLUA_CONV=im2col " .. q .. " -v"))
  end)
end)
