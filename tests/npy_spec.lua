-- NumPy's files: data.load_npy / save_npy (ddp.load_npy, ddp.save_npy),
-- load_npz / save_npz and NpyDataset.  Files numpy wrote (every dtype, C
-- and Fortran order, 0-d, empty, big-endian, format 2.0 and 3.0, savez,
-- savez_compressed, Zip64: tests/golden/make_npy.py) read with exact
-- values and strides; save_npy writes np.save's bytes exactly; the files
-- ddplua wrote that numpy checked (tests/golden/check_npy_roundtrip.py)
-- are still what it writes; round trips; bad files refused naming the file
-- and the problem (never a crash); memory-mapped loads that read only what
-- is touched.
local ddp = require "ddp"
local data = require "ddp.data"
local ffi = require "ffi"
local shell = require "helpers.shell"
local has_all = require("helpers.fails").has_all
local fails = require("helpers.fails").located("npy_spec.lua")

local clock = require("ddp.core").clock
local root, q = shell.root, shell.q
local readfile, writefile = shell.slurp, shell.writefile
local golden = root .. "/tests/golden/npy/"
local cases = dofile(golden .. "cases.lua")

local dir = shell.sh("mktemp -d /tmp/ddplua_npy.XXXXXX"):match("[^\n]+")
teardown(function() os.execute("rm -rf " .. q(dir)) end)
local function path(name) return dir .. "/" .. name end

-- A tensor's bytes, row-major: compares NaN, -0 and every dtype exactly.
local function bytes(t)
  local c = t:contiguous()
  return ffi.string(c:data_ptr(), c:numel() * c:element_size())
end

local function assert_same(want, got, name)
  assert.equal(want:dtype(), got:dtype(), name)
  assert.same(want:shape(), got:shape(), name)
  assert(bytes(want) == bytes(got), "values differ for " .. tostring(name))
end

-- t against a case of cases.lua: dtype, shape, strides, values.
local function check_case(t, want, name)
  assert.equal(want.dtype, t:dtype(), name)
  assert.same(want.shape, t:shape(), name)
  if #want.values > 0 then assert.same(want.strides, t:stride(), name .. " strides") end
  local c = t:contiguous()
  for i, v in ipairs(want.values) do
    if want.dtype == "int64" then
      assert(ffi.cast("int64_t *", c:data_ptr())[i - 1] == v, name .. " element " .. i)
    else
      local x = c:reshape(-1):get(i - 1)
      if v ~= v then
        assert(x ~= x, name .. " element " .. i .. " should be NaN")
      else
        assert(x == v, ("%s element %d: %s, expected %s"):format(name, i, tostring(x), tostring(v)))
      end
    end
  end
  if t:numel() > 0 then
    assert.equal(0, tonumber(ffi.cast("uintptr_t", t:data_ptr())) % t:element_size(), name .. " is misaligned")
  end
end

local function sorted_keys(t)
  local k = {}
  for name in pairs(t) do k[#k + 1] = name end
  table.sort(k)
  return k
end

-- Resident memory of this process, in bytes (Linux).
local function rss()
  local f = io.open("/proc/self/statm")
  if not f then return nil end
  local pages = f:read("*l"):match("^%d+ (%d+)")
  f:close()
  return tonumber(pages) * 4096
end

describe("load_npy", function()
  it("reads every file numpy wrote with its dtype, shape, strides and exact values", function()
    for _, fname in ipairs(sorted_keys(cases.npy)) do
      check_case(data.load_npy(golden .. fname), cases.npy[fname], fname)
    end
  end)

  it("gives the same tensors memory-mapped, viewing the file without a copy where nothing converts", function()
    for _, fname in ipairs(sorted_keys(cases.npy)) do
      check_case(data.load_npy(golden .. fname, { mmap = true }), cases.npy[fname], fname .. " (mmap)")
    end
    collectgarbage()
    local before = ddp.memory_allocated()
    local kept = {}
    for _, fname in ipairs { "f4.npy", "i8_fortran.npy", "f8.npy", "u1.npy", "scalar_f8.npy" } do
      kept[#kept + 1] = data.load_npy(golden .. fname, { mmap = true })
    end
    assert.equal(before, ddp.memory_allocated(), "a mapped load allocated memory")
    -- big-endian, widened and unaligned data are copied (and aligned)
    for _, fname in ipairs { "be_f4.npy", "i2.npy", "unaligned_f8.npy" } do
      kept[#kept + 1] = data.load_npy(golden .. fname, { mmap = true })
      assert(ddp.memory_allocated() > before, fname .. " should be a copy")
    end
    -- a view outlives nothing it needs: the mapping stays while a view does
    local v = kept[2]:narrow(0, 1, 1)
    kept = nil
    collectgarbage()
    assert.equal(1000003 * 12, v:contiguous():reshape(-1):get(0))
  end)

  it("maps copy-on-write: a tensor written to never changes the file", function()
    local p = path("cow.npy")
    data.save_npy(p, ddp.arange(4, { dtype = "float32" }))
    local before = readfile(p)
    local t = data.load_npy(p, { mmap = true })
    t:fill_(9)
    assert.same({ 9, 9, 9, 9 }, t:tolist())
    assert(readfile(p) == before, "the file changed")
    assert.same({ 0, 1, 2, 3 }, data.load_npy(p):tolist())
  end)

  it("refuses dtypes ddplua has no counterpart for, naming the file and the dtype", function()
    for _, fname in ipairs(sorted_keys(cases.unsupported)) do
      local u = cases.unsupported[fname]
      local e = fails(function() data.load_npy(golden .. fname) end, "load_npy: ", golden .. fname, u.what)
      if u.descr ~= "list" then has_all(e, "'" .. u.descr .. "'", "is not supported") end
    end
    fails(function() ddp.load_npy(golden .. "unsupported_c8.npy") end, "dtype '<c8' (complex64) is not supported")
  end)

  it("checks its arguments", function()
    fails(function() data.load_npy(3) end, "load_npy: path must be a string, got 3")
    fails(function() data.load_npy(golden .. "f4.npy", { map = true }) end, "load_npy: unknown option \"map\"")
    fails(function() data.load_npy(golden .. "f4.npy", { mmap = 1 }) end, "load_npy: mmap must be true or false")
  end)
end)

describe("save_npy", function()
  it("writes np.save's bytes exactly for every array numpy wrote (as ddplua holds it)", function()
    for _, fname in ipairs(sorted_keys(cases.npy)) do
      local t = data.load_npy(golden .. fname, { mmap = true })
      data.save_npy(path(fname), t)
      local want = readfile(golden .. "resaved/" .. fname)
      assert(want, "no resaved file for " .. fname)
      assert(readfile(path(fname)) == want, fname .. ": differs from np.save's bytes:\n"
             .. readfile(path(fname)):sub(1, 128) .. "\n" .. want:sub(1, 128))
    end
  end)

  it("still writes the files numpy read back (tests/golden/check_npy_roundtrip.py)", function()
    local out = path("ddplua")
    os.execute("mkdir -p " .. q(out))
    local names = dofile(root .. "/tests/golden/write_npy.lua")(out)
    names[#names + 1] = "arrays"
    for _, name in ipairs(names) do
      local fname = name .. (name == "arrays" and ".npz" or ".npy")
      local want = readfile(golden .. "ddplua/" .. fname)
      assert(want, "tests/golden/npy/ddplua/" .. fname .. " is missing: run tests/golden/check_npy_roundtrip.py")
      assert(readfile(out .. "/" .. fname) == want, fname .. " differs from the file numpy checked")
    end
  end)

  it("round-trips every dtype but bfloat16, in every layout", function()
    ddp.manual_seed(3)
    local ts = {
      f32 = ddp.randn(3, 4), f64 = ddp.randn(5, { dtype = "float64" }), f16 = ddp.randn(2, 3):to("float16"),
      i32 = ddp.randint(-9, 9, { 2, 2 }, { dtype = "int32" }),
      i64 = ddp.tensor({ 2 ^ 53 + 2, -3, -2 ^ 63 }, { dtype = "int64" }),
      u8 = ddp.tensor({ 0, 200, 255 }, { dtype = "uint8" }), b = ddp.tensor({ true, false, true }),
      s = ddp.tensor(1.25, { dtype = "float32" }), z = ddp.zeros(0, 2), z3 = ddp.zeros(2, 0, 4, { dtype = "int64" }),
      tr = ddp.randn(3, 5):t(), perm = ddp.randn(2, 3, 4):permute(2, 1, 0),
      slice = ddp.randn(4, 6):narrow(1, 2, 3), step = ddp.arange(10):reshape(5, 2):select(1, 1),
      exp = ddp.randn(3, 1):expand(3, 4), unit = ddp.randn(1, 5):t(),
    }
    for _, name in ipairs(sorted_keys(ts)) do
      local t = ts[name]
      data.save_npy(path(name .. ".npy"), t)
      for _, mmap in ipairs { false, true } do
        local back = data.load_npy(path(name .. ".npy"), { mmap = mmap })
        assert_same(t, back, name)
        if name == "tr" or name == "perm" then
          assert.same(t:stride(), back:stride(), name .. ": Fortran order comes back with its strides")
        end
      end
    end
    -- a transposed tensor is written as Fortran order, a slice as C order
    assert(readfile(path("tr.npy")):find("'fortran_order': True", 1, true))
    assert(readfile(path("slice.npy")):find("'fortran_order': False", 1, true))
    -- a (5, 1) view of a (1, 5) tensor is C-contiguous: C order, as numpy says
    assert(readfile(path("unit.npy")):find("'fortran_order': False", 1, true))
  end)

  local function cuda_it(name, fn)
    if ddp.cuda.is_available() then return it(name, fn) end
    pending(name .. ": no CUDA device here")
  end
  cuda_it("writes a CUDA tensor through a host copy, the bytes a CPU tensor gives", function()
    local x = ddp.randn(3, 4)
    for name, t in pairs { c = x, f = x:t() } do
      data.save_npy(path("cpu_" .. name .. ".npy"), t)
      data.save_npy(path("cuda_" .. name .. ".npy"), t:to("cuda"))
      assert(readfile(path("cpu_" .. name .. ".npy")) == readfile(path("cuda_" .. name .. ".npy")), name)
    end
    data.save_npz(path("cuda.npz"), { x = x:to("cuda") })
    assert_same(x, data.load_npz(path("cuda.npz")).x, "npz")
  end)

  it("refuses bfloat16 and keeps the old file; takes the arguments as np.save does", function()
    local p = path("keep.npy")
    data.save_npy(p, ddp.ones(2))
    local before = readfile(p)
    fails(function() data.save_npy(p, ddp.ones(2):to("bfloat16")) end,
          "save_npy: " .. p .. ": bfloat16 has no NumPy dtype")
    assert(readfile(p) == before)
    fails(function() data.save_npy(ddp.ones(2), p) end, "save_npy: expected (path, tensor)")
    fails(function() data.save_npy(p, { 1, 2 }) end, "save_npy: expected a tensor to save")
    fails(function() data.save_npy(path("no/such/dir/x.npy"), ddp.ones(2)) end, "save_npy: ", "no/such/dir/x.npy")
    -- ddp.save_npy and ddp.load_npy are these
    ddp.save_npy(p, ddp.arange(3))
    assert.same({ 0, 1, 2 }, ddp.load_npy(p):tolist())
  end)
end)

describe("load_npz and save_npz", function()
  it("read np.savez, np.savez_compressed and Zip64 archives by numpy's keys, in the file's order", function()
    for _, fname in ipairs(sorted_keys(cases.npz)) do
      local want = cases.npz[fname]
      for _, mmap in ipairs { false, true } do
        local got, names = data.load_npz(golden .. fname, { mmap = mmap })
        assert.same(want.names, names, fname)
        local w = { unpack(want.names) }
        table.sort(w)
        assert.same(w, sorted_keys(got), fname)
        for k, case in pairs(want.arrays) do check_case(got[k], case, fname .. ": " .. k) end
      end
    end
    -- the member that is not a .npy file is left out
    local got, names = data.load_npz(golden .. "extra_member.npz")
    assert.same({ "a" }, names)
    assert.same({ 0, 1, 2 }, got.a:tolist())
  end)

  it("write np.savez's members with their data aligned, so they map without a copy", function()
    ddp.manual_seed(5)
    local ts = {
      ddp.randn(3, 4), ddp.arange(7),
      x = ddp.randn(5, 2):t(), f16 = ddp.randn(3):to("float16"), flags = ddp.tensor({ true, false }),
      s = ddp.tensor(7, { dtype = "int32" }), e = ddp.zeros(0, 3), ["na/me \195\188"] = ddp.randn(2, { dtype = "float64" }),
    }
    local p = path("mine.npz")
    data.save_npz(p, ts)
    for _, mmap in ipairs { false, true } do
      collectgarbage()
      local before = ddp.memory_allocated()
      local got, names = data.load_npz(p, { mmap = mmap })
      assert.same({ "arr_0", "arr_1", "e", "f16", "flags", "na/me \195\188", "s", "x" }, names)
      if mmap then assert.equal(before, ddp.memory_allocated(), "a member was copied") end
      assert_same(ts[1], got.arr_0, "arr_0")
      assert_same(ts[2], got.arr_1, "arr_1")
      for _, k in ipairs { "x", "f16", "flags", "s", "e", "na/me \195\188" } do assert_same(ts[k], got[k], k) end
      assert.same(ts.x:stride(), got.x:stride())
    end
    -- every member's .npy is what save_npy writes
    local z = readfile(p)
    data.save_npy(path("x.npy"), ts.x)
    assert(z:find(readfile(path("x.npy")), 1, true), "the member x.npy differs from save_npy's file")
    data.save_npz(path("none.npz"), {})
    assert.same({}, (data.load_npz(path("none.npz"))))
  end)

  it("check their arguments as np.savez does", function()
    fails(function() data.save_npz(path("c.npz"), { ddp.ones(1), arr_0 = ddp.ones(1) }) end,
          "save_npz: cannot use un-named tensors and the name \"arr_0\" together")
    fails(function() data.save_npz(path("c.npz"), { x = 3 }) end, "save_npz: value of \"x\" is a number")
    fails(function() data.save_npz(path("c.npz"), { [true] = ddp.ones(1) }) end, "save_npz: key true is a boolean")
    fails(function() data.save_npz(path("c.npz"), { [""] = ddp.ones(1) }) end, "save_npz: ", "array name \"\" is empty")
    fails(function() data.save_npz(path("c.npz"), { b = ddp.ones(1):to("bfloat16") }) end,
          "save_npz: ", "array \"b\"", "bfloat16 has no NumPy dtype")
    fails(function() data.save_npz(path("c.npz"), ddp.ones(1)) end, "save_npz: expected a table of tensors")
    fails(function() data.load_npz(golden .. "f4.npy") end, "load_npz: ", "f4.npy is not a .npz file",
          "load it with load_npy")
  end)
end)

describe("bad files", function()
  local f4 = readfile(golden .. "f4.npy")
  local function bad(name, bytes_, ...)
    local p = path(name)
    writefile(p, bytes_)
    for _, mmap in ipairs { false, true } do
      fails(function() data.load_npy(p, { mmap = mmap }) end, "load_npy: " .. p, ...)
    end
  end
  -- f4's header with its dict replaced (the length field fixed)
  local function with_dict(dict, data_)
    local h = dict .. "\n"
    return "\147NUMPY\1\0" .. string.char(#h % 256, math.floor(#h / 256)) .. h .. (data_ or "")
  end

  it("refuse truncated files, saying where they end", function()
    bad("empty.npy", "", "is truncated: it ends inside the .npy preamble (0 of 10 bytes)")
    bad("t5.npy", f4:sub(1, 5), "is truncated: it ends inside the .npy preamble (5 of 10 bytes)")
    bad("t50.npy", f4:sub(1, 50), "is truncated: it ends inside the .npy header (50 of 128 bytes)")
    bad("t130.npy", f4:sub(1, 130), "is truncated: shape [2, 3] of float32 needs 24 bytes of data after the 128-byte header, but the file holds only 2")
    bad("long.npy", f4 .. "xx", "needs 24 bytes of data after the 128-byte header, but the file holds 26: the header disagrees with its length")
  end)

  it("refuse what is not a .npy file", function()
    bad("text.npy", "hello, world\n", "is not a .npy file: it starts with \"hello, w\"")
    bad("zip.npy", readfile(golden .. "savez.npz"), "is not a .npy file", "a .npz? load it with load_npz")
    bad("v4.npy", f4:sub(1, 6) .. "\4\0" .. f4:sub(9), "unknown .npy format version 4.0")
    bad("v2big.npy", "\147NUMPY\2\0\255\255\255\127" .. ("x"):rep(30), "header length 2147483647 exceeds the limit")
    fails(function() data.load_npy(dir) end, "load_npy: " .. dir .. ": not a regular file")
    fails(function() data.load_npy(path("missing.npy")) end, "load_npy: " .. path("missing.npy") .. ": cannot open: No such file")
  end)

  it("refuse headers that are not the dict numpy writes", function()
    local d = string.rep("\0", 24)
    bad("garbage.npy", with_dict("garbage", d), "the header is not a valid dict literal: at byte 0, expected '{'", "(header: garbage")
    bad("nokey.npy", with_dict("{'descr': '<f4', 'shape': (6,)}", d), "exactly the keys 'descr', 'fortran_order' and 'shape', but 'fortran_order' is missing")
    bad("extra.npy", with_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (6,), 'x': 1}", d), "but it has the key 'x'")
    bad("twice.npy", with_dict("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (6,)}", d), "but it gives 'descr' twice")
    bad("list.npy", with_dict("{'descr': '<f4', 'fortran_order': False, 'shape': [6]}", d), "the shape must be a tuple, (3, 4), not a list")
    bad("int.npy", with_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (6)}", d), "a 1-dim shape is written (n,)")
    bad("neg.npy", with_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (-6,)}", d), "a negative size in the shape")
    bad("bool.npy", with_dict("{'descr': '<f4', 'fortran_order': maybe, 'shape': (6,)}", d), "fortran_order must be True or False")
    bad("str.npy", with_dict("{'descr': '<f4, 'fortran_order': False, 'shape': (6,)}", d), "expected ',' or '}' after a value")
    bad("open.npy", with_dict("{'descr': '<f4", d), "a line break in a string")
    bad("unterminated.npy", "\147NUMPY\1\0\14\0{'descr': '<f4", "at byte 14, an unterminated string")
    bad("after.npy", with_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (6,), } x", d), "text after the dict's closing '}'")
    bad("descr.npy", with_dict("{'descr': 4, 'fortran_order': False, 'shape': (6,)}", d), "expected a quoted string")
    bad("struct.npy", with_dict("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (6,)}", d), "a structured dtype")
    bad("weird.npy", with_dict("{'descr': '<q9', 'fortran_order': False, 'shape': (6,)}", d), "dtype '<q9' (not a NumPy dtype) is not supported")
  end)

  it("refuse shapes that overflow or that ddplua cannot hold", function()
    bad("huge.npy", with_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776, 1099511627776), }"),
        "shape [1099511627776, 1099511627776] has too many elements")
    bad("zeroed.npy", with_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (0, 4611686018427387904, 4611686018427387904), }"),
        "too many elements")
    bad("digits.npy", with_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999999,), }"),
        "a size in the shape too large for 64 bits")
    bad("dims.npy", with_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1), }", "\0\0\0\0"),
        "the shape has 9 dims; at most 8 are supported")
    bad("short.npy", with_dict("{'descr': '<f8', 'fortran_order': False, 'shape': (1000000, 1000000), }"),
        "is truncated: shape [1000000, 1000000] of float64 needs 8000000000000 bytes")
  end)

  it("refuse broken archives, naming the file and the member", function()
    local z = readfile(golden .. "savez.npz")
    local function badz(name, bytes_, ...)
      local p = path(name)
      writefile(p, bytes_)
      for _, mmap in ipairs { false, true } do
        fails(function() data.load_npz(p, { mmap = mmap }) end, "load_npz: " .. p, ...)
      end
      return p
    end
    badz("cut.npz", z:sub(1, #z - 30), "is not a .npz file: it has no zip end-of-central-directory record")
    badz("tiny.npz", "PK", "is not a .npz file")
    -- a byte of the first member's data changed: its CRC-32 no longer matches
    local at = z:find("\147NUMPY", 1, true) + 128
    local p = path("crc.npz")
    writefile(p, z:sub(1, at - 1) .. "\255" .. z:sub(at + 1))
    fails(function() data.load_npz(p) end, "load_npz: " .. p, "member \"x.npy\": its CRC-32 is", "(a corrupt file)")
    -- mapped, the member is a view of the file, read only when touched:
    -- its CRC is not checked (as np.load(mmap_mode=) never checks one)
    assert.equal(4, data.load_npz(p, { mmap = true }).x:numel())
    local c = readfile(golden .. "savez_compressed.npz")
    local at2 = c:find("x.npy", 1, true) + 40
    p = path("inflate.npz")
    writefile(p, c:sub(1, at2 - 1) .. "\0\0\0\0\0\0" .. c:sub(at2 + 6))
    local e = fails(function() data.load_npz(p) end, "load_npz: " .. p)
    assert(e:find("member \"x.npy\"", 1, true) or e:find("(member x.npy)", 1, true), e)
    -- a member whose .npy header is bad names the archive and the member
    local i = z:find("'descr': '|b1'", 1, true)
    badz("member.npz", z:sub(1, i - 1) .. "'descr': '|c1'" .. z:sub(i + 14), "(member x.npy): dtype '|c1'")
  end)

  it("never crash on damaged files (random bytes changed, files cut short)", function()
    local originals = { "f4.npy", "i8_fortran.npy", "savez.npz", "savez_compressed.npz", "zip64.npz" }
    local seed = 12345
    local function rand(n)  -- a small LCG: the same cases on every run
      seed = (seed * 1103515245 + 12345) % 2147483648
      return seed % n
    end
    local p = path("fuzz")
    for round = 1, 400 do
      local name = originals[round % #originals + 1]
      local s = readfile(golden .. name)
      if round % 3 == 0 then
        s = s:sub(1, rand(#s))
      else
        for _ = 1, 1 + rand(3) do
          local k = rand(#s) + 1
          s = s:sub(1, k - 1) .. string.char(rand(256)) .. s:sub(k + 1)
        end
      end
      writefile(p, s)
      local load = name:match("npz$") and data.load_npz or data.load_npy
      local ok, e = pcall(load, p, { mmap = round % 2 == 0 })
      assert(ok or tostring(e):find(p, 1, true), "round " .. round .. ": " .. tostring(e))
    end
  end)
end)

describe("memory-mapped arrays", function()
  -- a sparse file of 4 GiB of float32 [2^20, 1024]: holes read as zeros
  local big = path("big.npy")
  local header = "{'descr': '<f4', 'fortran_order': False, 'shape': (1048576, 1024), }"
  local function make_big()
    local h = header .. (" "):rep(118 - #header - 1) .. "\n"
    local f = assert(io.open(big, "wb"))
    f:write("\147NUMPY\1\0" .. string.char(#h, 0) .. h)
    f:close()
    local r = os.execute("truncate -s " .. string.format("%d", 128 + 4 * 2 ^ 30) .. " " .. q(big))
    assert(r == 0 or r == true, "truncate failed")
  end

  it("open a 4 GiB array at once, reading only the rows a batch takes", function()
    make_big()
    collectgarbage()
    local mem, res = ddp.memory_allocated(), rss()
    local t0 = clock()
    local x = data.load_npy(big, { mmap = true })
    local idx = ddp.tensor({ 0, 77, 1048575 }, { dtype = "int64" })
    local rows = x:index_select(0, idx)
    local dt = clock() - t0
    assert.same({ 1048576, 1024 }, x:shape())
    assert.same({ 3, 1024 }, rows:shape())
    assert.equal(0, rows:abs():sum():item())
    assert(dt < 2, ("opening and gathering took %.2f s"):format(dt))
    assert(ddp.memory_allocated() - mem < 2 ^ 20, "more than the batch was allocated")
    if res then
      local grew = rss() - res
      assert(grew < 256 * 2 ^ 20, ("resident memory grew by %d MiB"):format(grew / 2 ^ 20))
    end
  end)

  it("NpyDataset batches memory-mapped arrays through the DataLoader", function()
    make_big()
    local y = ddp.arange(1048576, { dtype = "int64" }):fmod(10)
    data.save_npy(path("y.npy"), y)
    local ds = data.NpyDataset(big, path("y.npy"))
    assert.equal(1048576, #ds)
    assert.equal(("NpyDataset(1048576 samples: float32 [1048576, 1024] %s, int64 [1048576] %s)")
                 :format(big, path("y.npy")), tostring(ds))
    local res = rss()
    local loader = data.DataLoader(ds, { batch_size = 64, shuffle = true, seed = 1 })
    local n = 0
    for i, xb, yb in loader:iter() do
      assert.same({ 64, 1024 }, xb:shape())
      assert.same({ 64 }, yb:shape())
      n = n + 1
      if n == 5 then break end
    end
    assert.equal(5, n)
    if res then assert(rss() - res < 256 * 2 ^ 20, "the loader read much of the file") end
    os.remove(big)
  end)
end)

describe("NpyDataset", function()
  it("pairs arrays and tensors by their first dim, as TensorDataset does", function()
    local x = ddp.arange(12, { dtype = "float32" }):reshape(6, 2)
    data.save_npy(path("x.npy"), x)
    data.save_npy(path("yy.npy"), ddp.arange(6))
    local ds = data.NpyDataset(path("x.npy"), path("yy.npy"), ddp.arange(6):mul(10))
    assert.equal(6, #ds)
    local a, b, c = ds:get(2)
    assert.same({ 4, 5 }, a:tolist())
    assert.same({ 2, 20 }, { b, c })
    local loader = data.DataLoader(ds, { batch_size = 4 })
    local seen = {}
    for _, xb, yb, zb in loader:iter() do
      assert_same(x:index_select(0, yb), xb, "batch")
      for _, v in ipairs(zb:tolist()) do seen[#seen + 1] = v end
    end
    assert.same({ 0, 10, 20, 30, 40, 50 }, seen)
    assert.same({ path("x.npy"), path("yy.npy"), false }, ds.paths)
    -- read into memory on request
    local m = data.NpyDataset(path("x.npy"), { mmap = false })
    assert_same(x, m:tensors()[1], "mmap = false")
  end)

  it("names the file when the arrays do not fit", function()
    data.save_npy(path("five.npy"), ddp.zeros(5))
    data.save_npy(path("six.npy"), ddp.zeros(6))
    data.save_npy(path("zero_d.npy"), ddp.tensor(1.0))
    fails(function() data.NpyDataset(path("six.npy"), path("five.npy")) end,
          "NpyDataset: all arrays need the same size(0), but " .. path("six.npy") .. " has shape [6] and "
          .. path("five.npy") .. " has shape [5]")
    fails(function() data.NpyDataset(path("zero_d.npy")) end, "NpyDataset: " .. path("zero_d.npy") .. " is 0-dim")
    fails(function() data.NpyDataset(3) end, "NpyDataset: argument 1 is a number, expected a .npy path or a tensor")
    fails(function() data.NpyDataset() end, "NpyDataset: expected one or more .npy paths or tensors")
    fails(function() data.NpyDataset(path("nope.npy")) end, "load_npy: " .. path("nope.npy") .. ": cannot open")
    fails(function() data.NpyDataset(path("six.npy"), { mmap = "yes" }) end, "NpyDataset: mmap must be true or false")
  end)
end)
