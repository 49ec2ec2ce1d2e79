-- ddp.serialize, the one writer and parser of Lua values that leave the
-- process (object collectives, checkpoint states): round trips of every
-- supported value, errors naming the path of what cannot be written, a
-- parser that refuses junk and every truncation without a Lua error, and a
-- checkpoint written before the module existed that still loads.
local ddp = require "ddp"
local nn, optim = require "ddp.nn", require "ddp.optim"
local serialize = require "ddp.serialize"

local root = assert(io.popen("pwd")):read("*l")

local err_of = require("helpers.fails").message

local function round(v, opts)
  local text = serialize.encode(v, opts)
  local back, err = serialize.decode(text, opts and { tensors = opts.tensors })
  assert.is_nil(err)
  return back, text
end

describe("ddp.serialize", function()
  it("round-trips nested tables, exact numbers, any bytes and every key type", function()
    local v = {
      a = { 1, 2, { x = "y" } }, s = "a\0b\255\"\\\n", [2.5] = false, [true] = "yes", [false] = 0,
      n = { 0 / 0, 1 / 0, -1 / 0, 0.1, 2 ^ 53, 2 ^ 53 + 2, -2 ^ 60, 1e-300, 5e-324, -0.0 }, [1 / 0] = "inf key",
    }
    local back = round(v)
    assert.same(v.a, back.a)
    assert.equal(v.s, back.s)
    assert.is_false(back[2.5])
    assert.equal("yes", back[true])
    assert.equal(0, back[false])
    assert.equal("inf key", back[1 / 0])
    assert.is_true(back.n[1] ~= back.n[1])
    for i = 2, #v.n do assert.equal(v.n[i], back.n[i]) end
    assert.equal(-math.huge, 1 / back.n[10])  -- -0 stays -0
    -- a whole value may be a scalar or nil
    for _, x in ipairs { 3, "x", true, false } do assert.equal(x, (round(x))) end
    local none, err = serialize.decode(serialize.encode(nil))
    assert.is_nil(none)
    assert.is_nil(err)
  end)

  it("writes sorted keys, so a value always gives the same text", function()
    local text = serialize.encode({ a = { 1, 2.5, "x\"y", true, { [false] = -1e300 } }, b = 0 / 0, c = -math.huge })
    assert.equal('{"a"={1=1,2=2.5,3="x\\x22y",4=true,5={false=-1.0000000000000001e+300}},"b"=nan,"c"=-inf}', text)
    assert.equal(text, serialize.encode({ c = -math.huge, b = 0 / 0, a = { 1, 2.5, "x\"y", true, { [false] = -1e300 } } }))
  end)

  it("copies a table reached twice, and refuses cycles, naming the path", function()
    local shared = { 1 }
    local back = round({ shared, shared })
    assert.same({ 1 }, back[1])
    assert.are_not.equal(back[1], back[2])
    local t = {}
    t.self = { t }
    assert.truthy(err_of(serialize.encode, t, { op = "op" }):find("op: value.self[1] contains itself (a cycle)", 1, true))
  end)

  it("names the path of every value it cannot write", function()
    local function e(v, opts)
      opts = opts or {}
      opts.op = "op"
      return err_of(serialize.encode, v, opts)
    end
    assert.truthy(e({ a = { f = print } }):find("op: value.a.f is a function", 1, true))
    assert.truthy(e({ ["a b"] = { ddp.zeros(1) } }):find('op: value["a b"][1] is a tensor', 1, true))
    assert.truthy(e({ [{}] = 1 }):find("op: value has a table key; keys must be numbers, strings or booleans", 1, true))
    assert.truthy(e({ x = { [2] = setmetatable({}, {}) } }, { plain = true, verb = "sent" })
      :find("op: value.x[2] is a table with a metatable; only plain tables can be sent", 1, true))
    assert.truthy(e({ extra = { f = print } }, { root = "" }):find("op: extra.f is a function", 1, true))
    local deep = {}
    for _ = 1, serialize.MAX_DEPTH do deep = { deep } end
    assert.truthy(e(deep):find("is nested too deep", 1, true))
    assert.same({}, round({}))
    local ok_deep = {}
    for _ = 1, serialize.MAX_DEPTH - 1 do ok_deep = { ok_deep } end
    assert.equal("table", type(round(ok_deep)))
  end)

  it("writes tensors as references where the caller names them", function()
    local t = ddp.ones(2)
    local text = serialize.encode({ w = { t } }, {
      tensor = function(x, keys)
        assert.equal(t, x)
        assert.same({ "w", 1 }, keys)
        return "w.1"
      end,
    })
    assert.equal('{"w"={1=@"w.1"}}', text)
    assert.equal(t, serialize.decode(text, { tensors = { ["w.1"] = t } }).w[1])
    local _, err = serialize.decode(text)
    assert.truthy(err:find('a tensor reference @"w.1", which is not allowed here', 1, true), err)
  end)

  it("refuses junk and every truncated text with a message, never a Lua error", function()
    for _, junk in ipairs { "", "s5:ab", "{d1;", "t t", "x", "{t1}", "d1e;", "s-1:", "return 1", "{1=nil}",
                            "{1=2", '"\\q"', "{1=1,1=2}", ("{1="):rep(serialize.MAX_DEPTH + 1) } do
      local v, err = serialize.decode(junk)
      assert(v == nil and err and err:match("^at byte %d+: "), ("%q gave %s"):format(junk, tostring(err)))
    end
    local text = serialize.encode({ a = { 1, 2.5, "x\"y", true, { [false] = -1e300 } }, b = 0 / 0, c = -math.huge })
    for n = 0, #text - 1 do
      local r, e = serialize.decode(text:sub(1, n))
      assert(r == nil and e:match("^at byte %d+: "), "prefix " .. n .. " gave " .. tostring(r))
    end
  end)

  it("loads a checkpoint written before it existed (tests/golden/checkpoint_v1.safetensors)", function()
    local path = root .. "/tests/golden/checkpoint_v1.safetensors"
    local m = nn.Linear(3, 2)
    local opt = optim.SGD(m:parameters(), { lr = 0.5, momentum = 0.9 })
    -- a loader target too: the file has none, so the loader stays as it is
    local loader = require("ddp.data").DataLoader(require("helpers.loaders").index_dataset(6), { shuffle = true, seed = 1 })
    local state = ddp.load_checkpoint(path, { model = m, optimizer = opt, loader = loader, rng = false })
    assert.equal(3, state.epoch)
    assert.is_nil(state.loader)
    assert.same({ 0, 0, 1 }, { loader:state_dict().epoch, loader:state_dict().batches, loader.sampler.seed })
    assert.is_true(m.weight:allclose(ddp.tensor({ { -0.4, 0.6, 1.6 }, { 2.6, 3.6, 4.6 } }, { dtype = "float32" })))
    assert.is_true(m.bias:allclose(ddp.tensor({ 0.1, -0.9 }, { dtype = "float32" })))
    assert.equal(0.1, opt.param_groups[1].lr)
    assert.is_true(opt.state[0].momentum_buffer:equal(ddp.full({ 2, 3 }, 4, { dtype = "float32" })))
    local x = state.extra
    assert.equal("run \"1\"\n\0\255", x.name)
    assert.same({ [true] = 1, [false] = 0 }, x.flags)
    assert.equal("two and a half", x[2.5])
    assert.same({ 1, { 2, { 3 } } }, x.list)
    assert.is_true(x.odd[1] ~= x.odd[1])
    assert.same({ 1 / 0, -1 / 0, 2 ^ 53, 0.1 }, { x.odd[2], x.odd[3], x.odd[4], x.odd[5] })
    assert.same({ seed = 5, offset = 3 }, state.rng)
    -- and saving it again writes the very same state text
    local again = os.tmpname()
    ddp.save_checkpoint(again, state)
    local _, meta_old = ddp.load(path)
    local _, meta_new = ddp.load(again)
    os.remove(again)
    assert.equal(meta_old["ddplua.state"], meta_new["ddplua.state"])
  end)
end)
