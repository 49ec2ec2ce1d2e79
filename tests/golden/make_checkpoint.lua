-- Writes tests/golden/checkpoint_v1.safetensors, a checkpoint in the
-- "checkpoint 1" format as ddplua wrote it before ddp.serialize existed
-- (the file in the repository was written by commit b415c26's
-- lua/ddp/checkpoint.lua).  tests/serialize_spec.lua checks it still loads:
-- checkpoints users have saved must keep loading.
--
--   build/ddplua tests/golden/make_checkpoint.lua tests/golden/checkpoint_v1.safetensors
local ddp = require "ddp"
local nn, optim = require "ddp.nn", require "ddp.optim"
ddp.manual_seed(5)
local m = nn.Linear(3, 2)
ddp.no_grad(function()
  m.weight:copy_(ddp.arange(6, { dtype = "float32" }):view(2, 3))
  m.bias:copy_(ddp.tensor({ 0.5, -0.5 }, { dtype = "float32" }))
end)
local opt = optim.SGD(m:parameters(), { lr = 0.1, momentum = 0.9 })
m(ddp.ones(4, 3)):sum():backward()
opt:step()
ddp.save_checkpoint(arg[1], { model = m, optimizer = opt, epoch = 3,
  extra = { name = "run \"1\"\n\0\255", flags = { [true] = 1, [false] = 0 }, odd = { 0 / 0, 1 / 0, -1 / 0, 2 ^ 53, 0.1, -0.0 },
            [2.5] = "two and a half", list = { 1, { 2, { 3 } } } } })
