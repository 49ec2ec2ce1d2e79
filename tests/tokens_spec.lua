-- ddp.tokens: TokenDataset over flat token files (headerless uint16 and
-- uint32, llm.c's header detected or required), windows x/y shifted by one
-- token, the DataLoader + DistributedSampler over it (the ranks' windows
-- partition an epoch; a loader state saved mid-epoch resumes on the very
-- next batch), splits, and errors for a missing file, a wrong dtype, a file
-- shorter than one window and a byte count that is not whole tokens.
local ddp = require "ddp"
local data = require "ddp.data"
local tokens = require "ddp.tokens"

local fails = require("helpers.fails").located("tokens_spec.lua")

local tmpdir = os.tmpname()
os.remove(tmpdir)
os.execute("mkdir -p " .. tmpdir)
local function path(name) return tmpdir .. "/" .. name end

local function write_raw(name, s)
  local f = assert(io.open(path(name), "wb"))
  f:write(s)
  f:close()
  return path(name)
end

-- ids 0..n-1 (times mul, so uint32 values exceed 16 bits)
local function ids(n, mul)
  local t = {}
  for i = 1, n do t[i] = (i - 1) * (mul or 1) end
  return t
end

describe("TokenDataset", function()
  teardown(function() os.execute("rm -rf " .. tmpdir) end)

  it("reads headerless uint16 files as nanoGPT writes them: x and y shifted by one", function()
    assert.are.equal(100, tokens.write(path("a.bin"), ids(100)))
    local f = assert(io.open(path("a.bin"), "rb"))
    assert.are.equal(200, #f:read("*a"))
    f:close()
    local ds = data.TokenDataset(path("a.bin"), { block_size = 8 })
    assert.are.equal("uint16", ds.dtype)
    assert.are.equal("none", ds.header)
    assert.are.equal(12, #ds)  -- floor((100 - 9) / 8) + 1
    local x, y = ds:get(2)
    assert.are.same(ids(8, 1), (x - 16):tolist())
    assert.are.same((x + 1):tolist(), y:tolist())
    assert.are.equal("int64", x:dtype())
    local xb, yb = ds:getitems(ddp.tensor({ 0, 11 }, { dtype = "int64" }))
    assert.are.same({ 2, 8 }, xb:shape())
    assert.are.equal(88, xb:get(1, 0))
    assert.are.equal(96, yb:get(1, 7))
  end)

  it("takes llm.c's header (detected, or required) and uint32 tokens", function()
    tokens.write(path("l16.bin"), ids(50), { header = "llmc" })
    tokens.write(path("l32.bin"), ids(50, 100000), { dtype = "uint32", header = "llmc" })
    tokens.write(path("r32.bin"), ids(50, 100000), { dtype = "uint32" })
    local a = data.TokenDataset(path("l16.bin"), { block_size = 4 })
    assert.are.same({ "uint16", "llmc", 50 }, { a.dtype, a.header, a.ntokens })
    assert.are.same(ids(4, 1), a:get(0):tolist())
    local b = data.TokenDataset(path("l32.bin"), { block_size = 4, header = "llmc" })
    assert.are.same({ "uint32", "llmc" }, { b.dtype, b.header })
    assert.are.equal(4700000, b:get(-1):get(3))  -- window 11: tokens 44 to 48
    local c = data.TokenDataset(path("r32.bin"), { block_size = 4, dtype = "uint32", header = "none" })
    assert.are.equal(300000, c:get(0):get(3))
    assert.are.equal(50, #c:tokens())
  end)

  it("splits one file into train and validation windows that do not overlap", function()
    tokens.write(path("s.bin"), ids(1000))
    local train, val = data.TokenDataset(path("s.bin"), { block_size = 10, stride = 1 }):split(0.9, { stride = 10 })
    assert.are.same({ 0, 900, 900, 1000 }, { train.start, train.stop, val.start, val.stop })
    assert.are.equal(900 - 11 + 1, #train)
    assert.are.equal(9, #val)
    local _, y = train:get(-1)
    assert.are.equal(899, y:get(9))
    assert.are.equal(900, val:get(0):get(0))
  end)

  it("plugs into DataLoader + DistributedSampler: the ranks partition an epoch, resume is exact", function()
    tokens.write(path("d.bin"), ids(2000))
    local ds = data.TokenDataset(path("d.bin"), { block_size = 16, stride = 4 })
    local function loader(rank)
      local s = data.DistributedSampler(ds, { num_replicas = 2, rank = rank, seed = 3, drop_last = true })
      return data.DataLoader(ds, { batch_size = 5, sampler = s, drop_last = true })
    end
    local seen, count = {}, 0
    for r = 0, 1 do
      for _, x, y in loader(r):iter() do
        assert.are.same({ 5, 16 }, x:shape())
        assert.is_true(y:sub(x):eq(1):all())
        for b = 0, 4 do
          local first = x:get(b, 0)
          assert.are.equal(0, first % 4)
          assert.is_nil(seen[first])
          seen[first], count = true, count + 1
        end
      end
    end
    assert.are.equal(#loader(0) * 10, count)
    -- stop after 3 batches of epoch 1, save, resume in a fresh loader
    local a = loader(1)
    for _ in a:iter() do end
    local it, want = a:iter(), {}
    for _ = 1, 3 do it() end
    local sd = a:state_dict()
    for _, x in it do want[#want + 1] = x:get(0, 0) end
    local b = loader(1)
    b:load_state_dict(sd)
    local got = {}
    for _, x in b:iter() do got[#got + 1] = x:get(0, 0) end
    assert.are.same(want, got)
    assert.are.equal(2, b:epoch())
  end)

  it("writes bytes and reads them back (encode_bytes, decode_bytes)", function()
    local txt = write_raw("t.txt", "hello, tokens\n\0\255")
    assert.are.equal(16, tokens.encode_bytes(txt, path("t.bin")))
    local ds = data.TokenDataset(path("t.bin"), { block_size = 15 })
    assert.are.equal("hello, tokens\n\0\255", tokens.decode_bytes(ds:tokens()))
  end)

  it("names the problem: missing file, wrong dtype, too short, odd size, header", function()
    tokens.write(path("short.bin"), ids(8))
    write_raw("odd.bin", "abc")
    tokens.write(path("w32.bin"), ids(8), { dtype = "uint32", header = "llmc" })
    fails(function() data.TokenDataset(path("none.bin"), { block_size = 4 }) end,
          "TokenDataset: cannot open", "none.bin", "No such file")
    fails(function() data.TokenDataset(path("short.bin"), { block_size = 4, dtype = "int64" }) end,
          'dtype must be one of "auto", "uint16", "uint32", got "int64"')
    fails(function() data.TokenDataset(path("short.bin"), { block_size = 8 }) end,
          "holds 8 tokens, shorter than one window of block_size + 1 = 9 tokens")
    fails(function() data.TokenDataset(path("odd.bin"), { block_size = 1 }) end,
          "3 bytes of tokens", "not a whole number of 2-byte tokens")
    fails(function() data.TokenDataset(path("short.bin"), { block_size = 2, header = "llmc" }) end,
          "no llm.c header")
    fails(function() data.TokenDataset(path("w32.bin"), { block_size = 2, dtype = "uint16" }) end,
          "says uint32 tokens, but uint16 was asked for")
    fails(function() data.TokenDataset(path("short.bin")) end, "block_size")
    fails(function() data.TokenDataset(path("short.bin"), { block_size = 2, blocksize = 3 }) end,
          "unknown option \"blocksize\"")
    fails(function() tokens.write(path("x.bin"), { 1, 70000 }) end, "token 70000 does not fit in uint16")
    local ds = data.TokenDataset(path("short.bin"), { block_size = 2 })
    fails(function() ds:get(7) end, "index 7 out of range for 3 windows")
  end)
end)

-- tokens.write goes through the runtime's atomic writer (dl_file_*), as
-- ddp.save does: the old file's mode and symbolic links survive, and a write
-- that fails (here a file size limit) keeps the old file and no temporary.
describe("tokens.write", function()
  local shell = require "helpers.shell"
  local q = shell.q
  local dir = shell.sh("mktemp -d /tmp/ddplua_tokw.XXXXXX"):match("[^\n]+")
  teardown(function() os.execute("rm -rf " .. q(dir)) end)
  local function mode(p) return shell.sh("stat -c %a " .. q(p)):match("%d+") end
  local function leftovers() return shell.sh("ls -A " .. q(dir) .. " | grep '\\.tmp' || true") end
  local function read_ids(p) return tokens.decode_bytes(data.TokenDataset(p, { block_size = 1 }):tokens()) end

  it("keeps an existing file's mode and writes through a symbolic link", function()
    local p = dir .. "/private.bin"
    tokens.write(p, ids(4))
    os.execute("chmod 600 " .. q(p))
    tokens.write(p, ids(6))
    assert.are.equal("600", mode(p))
    assert.are.equal(6, data.TokenDataset(p, { block_size = 1 }):tokens():numel())
    local link = dir .. "/link.bin"
    os.execute("ln -s private.bin " .. q(link))
    tokens.write(link, tokens.bytes("via link"))
    assert.are.equal("private.bin", shell.sh("readlink " .. q(link)):match("[^\n]+"))
    assert.are.equal("via link", read_ids(p))
    assert.are.equal("600", mode(p))
    assert.are.equal("", leftovers())
  end)

  it("keeps the old file and leaves no temporary when a write fails, naming the path", function()
    local p = dir .. "/big.bin"
    tokens.write(p, tokens.bytes("old tokens"))
    local child = dir .. "/child.lua"
    shell.writefile(child, [[
      local tokens = require "ddp.tokens"
      local ok, err = pcall(tokens.write, arg[1], require("ddp").zeros(100000, { dtype = "int64" }))
      print(ok, err)
    ]])
    -- 200 kB of uint16 tokens over a 100 kB limit (the ddplua program ignores SIGXFSZ)
    local out = shell.sh(("ulimit -f 100; exec %s %s %s 2>&1"):format(q(shell.ddplua), q(child), q(p)))
    assert.truthy(out:find("^false\t"), out)
    assert.truthy(out:find("child.lua:2: tokens.write: " .. p .. ": write failed: File too large", 1, true), out)
    assert.are.equal("old tokens", read_ids(p))
    assert.are.equal("", leftovers())
    fails(function() tokens.write(dir .. "/no/such/dir/x.bin", ids(3)) end,
          "tokens.write: " .. dir .. "/no/such/dir/x.bin: cannot create a temporary file beside it: No such file")
  end)
end)
