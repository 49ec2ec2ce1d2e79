-- The library's modules as a strict hierarchy: each loads on its own
-- without the top module ddp (none requires "ddp" back), leaves no
-- globals, and the tensor type is the same whichever module loads first.
-- Each check runs in a fresh `ddplua -e`, so nothing is loaded before.
local jobs = require "helpers.jobs"
local q, sh = jobs.q, jobs.sh

local function lua(code)
  return sh(q(jobs.ddplua) .. " -e " .. q(code) .. " 2>&1")
end

-- In the order of the hierarchy lua/ddp/init.lua writes down: each may
-- require only those before it.  The top module ddp sits between the
-- console and ddp.testing.
local LAYERS = {
  { "ddp.cdef", "ddp.ffi" },
  { "ddp.core.errors", "ddp.core.handles", "ddp.core.args", "ddp.core.values", "ddp.core.class", "ddp.core",
    "ddp.core.trace", "ddp.core.memory", "ddp.core.steps" },
  { "ddp.serialize", "ddp.autocast" },
  { "ddp.tensor.info", "ddp.tensor.views", "ddp.tensor.math", "ddp.tensor.grad", "ddp.tensor.sampling",
    "ddp.tensor.print", "ddp.tensor" },
  { "ddp.tensor.factory", "ddp.autograd" },
  { "ddp.nn.functional", "ddp.functional" },
  { "ddp.dist.store", "ddp.store", "ddp.dist.env", "ddp.dist.group", "ddp.dist.collectives", "ddp.dist.objects",
    "ddp.dist.preempt", "ddp.dist" },
  { "ddp.nn.checkpoint", "ddp.nn.module", "ddp.nn.weight_init", "ddp.nn.layers", "ddp.nn.containers", "ddp.nn.utils", "ddp.nn.attention",
    "ddp.nn.sync_bn", "ddp.nn.parallel", "ddp.nn" },
  { "ddp.optim.shards", "ddp.optim.optimizer", "ddp.optim.foreach", "ddp.optim.lr_scheduler", "ddp.optim.zero", "ddp.optim.grad_scaler", "ddp.optim" },
  { "ddp.data.files", "ddp.checkpoint", "ddp.data.checks", "ddp.data.sample_rng", "ddp.data.worker_codec", "ddp.data.collate",
    "ddp.data.worker_main", "ddp.data.workers", "ddp.data.dataset", "ddp.data.idx", "ddp.data.samplers",
    "ddp.data.loader", "ddp.data.metrics", "ddp.data.npy", "ddp.data.json", "ddp.data.image",
    "ddp.data.image_folder", "ddp.data.webdataset",
    "ddp.data.shard_sampler", "ddp.data.shard_writer", "ddp.data.transforms_functional", "ddp.data.transforms",
    "ddp.data.tokens", "ddp.tokens", "ddp.data", "ddp.progress", "ddp.trace",
    "ddp.summary.tfevents", "ddp.summary.histogram", "ddp.summary", "ddp.argparse" },
  { "ddp.hf.parts", "ddp.hf.files", "ddp.hf.gpt2", "ddp.hf.llama", "ddp.hf" },
  { "ddp.console.chunk", "ddp.console.format", "ddp.console.complete", "ddp.console" },
  { "ddp.testing.compare", "ddp.testing.assertions", "ddp.testing.run", "ddp.testing" },
}
local MODULES = {}
for _, layer in ipairs(LAYERS) do
  for _, name in ipairs(layer) do MODULES[#MODULES + 1] = name end
end

describe("the Lua modules", function()
  it("each load without the top module ddp, only the modules before them, and add no globals", function()
    local code = [[
local allowed = {%s}
local before, loaded = {}, {}
for k in pairs(_G) do before[k] = true end
for k in pairs(package.loaded) do loaded[k] = true end
require(%q)
assert(package.loaded.ddp == nil, "loaded the top module ddp")
for k in pairs(_G) do assert(before[k], "added the global " .. tostring(k)) end
for k in pairs(package.loaded) do
  assert(loaded[k] or allowed[k] or not k:match("^ddp"), "loaded " .. k .. ", which comes after it")
end
print("fine")]]
    local allowed = {}
    for _, name in ipairs(MODULES) do
      allowed[#allowed + 1] = ("[%q] = true"):format(name)
      assert.equal("fine\n", lua(code:format(table.concat(allowed, ", "), name)), name)
    end
  end)

  it("are every file of lua/ddp (so each is checked here)", function()
    local listed = { ddp = true }
    for _, name in ipairs(MODULES) do listed[name] = true end
    local n = 0
    for path in sh("cd lua && find ddp -name '*.lua'"):gmatch("[^\n]+") do
      local name = path:gsub("%.lua$", ""):gsub("/init$", ""):gsub("/", ".")
      assert.truthy(listed[name], path .. " is not in LAYERS")
      n = n + 1
    end
    assert.equal(#MODULES - 2 + 1, n)  -- ddp.cdef and ddp.ffi live elsewhere; ddp is init.lua
  end)

  it("give the same tensor type whatever loads first", function()
    local show = [[
local ddp = require "ddp"
local names = {}
for k in pairs(ddp.Tensor) do names[#names + 1] = k end
table.sort(names)
local t = ddp.ones(2)
print(#names, table.concat(names, " "), tostring(t + 1), t.requires_grad, t.is_leaf, #t)]]
    local plain = lua(show)
    assert.truthy(plain:match("^%d+\tabs "), plain)
    for _, first in ipairs { "ddp.nn", "ddp.data", "ddp.autograd", "ddp.tensor.math", "ddp.tensor.grad", "ddp.checkpoint" } do
      assert.equal(plain, lua(("require %q\n"):format(first) .. show), first)
    end
  end)

  it("give all of nn through require \"ddp.nn\" alone, and ddp adds nothing to it", function()
    local out = lua([[
local nn = require "ddp.nn"
assert(nn.SyncBatchNorm and nn.convert_sync_batchnorm and nn.MultiheadAttention and nn.Linear and nn.Sequential,
       "nn lacks a layer")
assert(nn.functional == require "ddp.functional" and nn.parallel.DDP and nn.init.xavier_uniform_ and nn.utils.clip_grad_norm)
local before = {}
for k, v in pairs(nn) do before[k] = v end
local ddp = require "ddp"
for k, v in pairs(nn) do assert(before[k] == v, "ddp changed nn." .. k) end
assert(ddp.nn == nn and ddp.DDP == nn.parallel.DDP)
print("fine")]])
    assert.equal("fine\n", out)
  end)

  it("give the submodules on ddp itself, the same tables as require", function()
    local out = lua([[
local ddp = require "ddp"
for _, k in ipairs { "nn", "optim", "data", "dist", "store", "argparse" } do
  assert(ddp[k] == require("ddp." .. k), k)
end
assert(ddp.nn.functional == require "ddp.functional")
assert(getmetatable(ddp) == nil, "ddp has a metatable")
print("fine")]])
    assert.equal("fine\n", out)
  end)
end)

describe("core.gather, how a folder's module is made of its parts", function()
  local core = require "ddp.core"

  it("takes each part's names but its _ ones, and refuses a name given twice", function()
    package.preload["spec_part_a"] = function() return { x = 1, _shared = 2 } end
    package.preload["spec_part_b"] = function() return { y = 3 } end
    package.preload["spec_part_c"] = function() return { x = 4 } end
    local m = core.gather({ z = 0 }, "spec", { "spec_part_a", "spec_part_b" })
    assert.same({ x = 1, y = 3, z = 0 }, m)
    local ok, err = pcall(core.gather, {}, "spec", { "spec_part_a", "spec_part_c" })
    assert.is_false(ok)
    assert.truthy(err:find("spec: x is given twice (again by spec_part_c)", 1, true), err)
    for _, k in ipairs { "a", "b", "c" } do
      package.preload["spec_part_" .. k], package.loaded["spec_part_" .. k] = nil, nil
    end
  end)
end)

describe("core.class, the one class idiom", function()
  local core = require "ddp.core"

  it("makes callable classes with init, inheritance and metamethods", function()
    local Animal = core.class("Animal")
    function Animal:init(name) self.name = name end
    function Animal:speak() return self.name .. " makes a sound" end
    Animal.__tostring = function(self) return "Animal " .. self.name end
    local Dog = core.class("Dog", Animal)
    function Dog:speak() return self.name .. " barks" end
    local a, d = Animal("cat"), Dog("rex")
    assert.equal("cat makes a sound", a:speak())
    assert.equal("rex barks", d:speak())
    assert.equal("Animal rex", tostring(d))  -- metamethods come down to subclasses
    assert.equal("Dog", tostring(Dog))
    assert.is_true(core.is_instance(d, Animal) and core.is_instance(d, Dog))
    assert.is_false(core.is_instance(a, Dog))
    assert.is_false(core.is_instance({}, Animal) or core.is_instance("x", Animal) or core.is_instance(nil, Animal))
    assert.equal(Dog, core.class_of(d))
  end)

  it("makes userdata instances with a length where asked (LuaJIT ignores __len on tables)", function()
    local Bag = core.class("Bag", nil, { proxy = true })
    function Bag:init(n) self.n = n end
    function Bag:__len() return self.n end
    local b = Bag(3)
    assert.equal("userdata", type(b))
    assert.equal(3, #b)
    b.n = 5
    assert.equal(5, #b)
    assert.equal("Bag", getmetatable(b))
    assert.is_true(core.is_instance(b, Bag))
  end)

  it("is what the library's classes are", function()
    local ddp = require "ddp"
    local nn, optim, data = ddp.nn, ddp.optim, ddp.data
    local m = nn.Linear(2, 3)
    assert.is_true(core.is_instance(m, nn.Module) and nn.is_module(m))
    assert.is_false(nn.is_module({ _fields = {} }))
    local opt = optim.SGD(m:parameters(), { lr = 0.1 })
    assert.is_true(core.is_instance(opt, optim.Optimizer))
    assert.is_true(core.is_instance(optim.SGD.new(m:parameters(), { lr = 0.1 }), optim.SGD))
    local ds = data.TensorDataset(ddp.arange(4))
    assert.is_true(core.is_instance(ds, data.TensorDataset))
    assert.equal(4, #ds)
    assert.equal(2, #data.DataLoader(ds, { batch_size = 2 }))
  end)
end)
