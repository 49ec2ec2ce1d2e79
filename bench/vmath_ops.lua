-- vmath_ops.lua: float32 ops that use core/vmath.h, at a GPT step's shapes
-- (batch 32 x context 64 = 2048 positions, n_embd 176, 4 heads, 65
-- classes), for before/after comparisons of the vectorised exp/erf/tanh.
--   ddplua bench/vmath_ops.lua [THREADS]
-- Prints one line per op: "name<TAB>milliseconds (median)".
local ddp = require "ddp"
local F = require("ddp.nn").functional
ddp.set_num_threads(tonumber(arg[1]) or 1)
ddp.manual_seed(0)
local now = dofile((arg[0]:match("^(.*)/") or ".") .. "/clock.lua")

local function report(name, t) print(("%s\t%.3f"):format(name, t * 1e3)) end

local h = ddp.randn(2048, 704)                 -- the MLP's hidden layer
local hg = ddp.randn(2048, 704):requires_grad_()
local g = ddp.randn(2048, 704)
local att = ddp.randn(32 * 4, 64, 64)          -- attention scores
local logits, y = ddp.randn(2048, 65), ddp.randint(0, 65, {2048})
report("gelu 2048x704", now.median(21, function() return h:gelu() end))
report("gelu tanh 2048x704", now.median(21, function() return h:gelu("tanh") end))
report("gelu fwd+bwd 2048x704", now.median(21, function() hg.grad = nil; hg:gelu():backward(g) end))
report("sigmoid 2048x704", now.median(21, function() return h:sigmoid() end))
report("tanh 2048x704", now.median(21, function() return h:tanh() end))
report("exp 2048x704", now.median(21, function() return h:exp() end))
report("softmax 128x64x64 (-1)", now.median(21, function() return att:softmax(-1) end))
report("softmax 128x64x64 (dim 1)", now.median(21, function() return att:softmax(1) end))
report("log_softmax 2048x65", now.median(21, function() return logits:log_softmax(1) end))
report("cross_entropy 2048x65", now.median(21, function() return F.cross_entropy(logits, y) end))
