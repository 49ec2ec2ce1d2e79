-- Checkpoints: ddp.save / ddp.load in the safetensors format (round trips of
-- every dtype and layout, zero-copy loading, files from an independent
-- Python writer and ours read by it), hostile files that must fail with a
-- clear message and never crash, atomic saves under SIGKILL, and
-- ddp.save_checkpoint / ddp.load_checkpoint of whole training states.
local has_all = require("helpers.fails").has_all
local err = require("helpers.fails").message
local ddp = require "ddp"
local ffi = require "ffi"

local shell = require "helpers.shell"
local root, ddplua, q = shell.root, shell.ddplua, shell.q
local readfile, writefile = shell.slurp, shell.writefile
local golden = root .. "/tests/golden/"

-- The output of cmd, stderr too.
local function sh(cmd) return shell.sh(cmd .. " 2>&1") end

local dir = sh("mktemp -d /tmp/ddplua_st.XXXXXX"):match("[^\n]+")
teardown(function() os.execute("rm -rf " .. q(dir)) end)

local function listdir()
  local names = {}
  for name in sh("ls -A " .. q(dir)):gmatch("[^\n]+") do names[#names + 1] = name end
  table.sort(names)
  return names
end

-- A tensor's bytes, row-major: compares NaN, -0 and every dtype exactly.
local function bytes(t)
  local c = t:contiguous()
  return ffi.string(c:data_ptr(), c:numel() * c:element_size())
end

local function assert_same_tensor(want, got, name)
  assert.equal(want:dtype(), got:dtype(), name)
  assert.same(want:shape(), got:shape(), name)
  assert(bytes(want) == bytes(got), "values differ for " .. tostring(name))
end

local function count(t)
  local n = 0
  for _ in pairs(t) do n = n + 1 end
  return n
end

-- -- Round trips -----------------------------------------------------------

describe("ddp.save / ddp.load", function()
  local path = dir .. "/round.safetensors"

  it("round-trips every dtype, 0-dim, empty and non-contiguous tensors", function()
    ddp.manual_seed(1)
    local base = ddp.randn(4, 6, { dtype = "float64" })
    local tensors = {
      f32 = ddp.randn(3, 5),
      f64 = base,
      i32 = ddp.randint(-1000, 1000, { 7 }, { dtype = "int32" }),
      i64 = ddp.tensor({ -2 ^ 53, 2 ^ 53, 0, -1 }, { dtype = "int64" }),
      u8 = ddp.randint(0, 256, { 2, 2, 2 }, { dtype = "uint8" }),
      flags = ddp.tensor({ true, false, false, true }),
      bf16 = ddp.randn(9):to("bfloat16"),
      f16 = ddp.randn(2, 3):to("float16"),
      scalar = ddp.tensor(3.5, { dtype = "float32" }),
      empty = ddp.zeros(0, 4),
      empty_i64 = ddp.zeros({ 3, 0 }, { dtype = "int64" }),
      transposed = base:t(),
      narrowed = base:narrow(1, 2, 3),
      expanded = ddp.arange(3, { dtype = "float32" }):unsqueeze(0):expand(4, 3),
      special = ddp.tensor({ 0 / 0, math.huge, -math.huge, -0.0, 1e-40 }, { dtype = "float32" }),
    }
    assert.is_false(tensors.transposed:is_contiguous())
    assert.is_false(tensors.expanded:is_contiguous())
    ddp.save(tensors, path, { framework = "ddplua", note = "ünï \"q\" \\ \n\t", [""] = "" })
    local got, meta = ddp.load(path)
    assert.equal(count(tensors), count(got))
    for name, t in pairs(tensors) do assert_same_tensor(t, got[name], name) end
    assert.same({ framework = "ddplua", note = "ünï \"q\" \\ \n\t", [""] = "" }, meta)
  end)

  it("saves and loads an empty table, and names with any UTF-8", function()
    ddp.save({}, path)
    local got, meta = ddp.load(path)
    assert.same({}, got)
    assert.same({}, meta)
    local names = { ["a.b.c"] = 1, ["名前"] = 2, [""] = 3, ["tab\there"] = 4, ['q"\\'] = 5 }
    local ts = {}
    for k, v in pairs(names) do ts[k] = ddp.full({ 1 }, v) end
    ddp.save(ts, path)
    got = ddp.load(path)
    for k, v in pairs(names) do assert.equal(v, got[k]:item()) end
  end)

  it("writes the reference layout: length, compact JSON padded to 8, tensors by alignment then name", function()
    ddp.save({ b = ddp.zeros(2, { dtype = "uint8" }), a = ddp.zeros(1, { dtype = "float64" }),
               c = ddp.zeros(1, { dtype = "float64" }) }, path, { k = "v" })
    local s = readfile(path)
    local n = 0
    for i = 8, 1, -1 do n = n * 256 + s:byte(i) end
    assert.equal(0, n % 8)
    assert.equal([[{"__metadata__":{"k":"v"},"a":{"dtype":"F64","shape":[1],"data_offsets":[0,8]},]]
                 .. [["c":{"dtype":"F64","shape":[1],"data_offsets":[8,16]},]]
                 .. [["b":{"dtype":"U8","shape":[2],"data_offsets":[16,18]}}]], s:sub(9, 8 + n):match("^(.-) *$"))
    assert.equal(8 + n + 18, #s)
  end)

  it("loads tensors as zero-copy views of a private mapping", function()
    local w = ddp.arange(1000, { dtype = "float32" })
    ddp.save({ w = w, v = ddp.ones(8, { dtype = "float64" }) }, path)
    local before = readfile(path)
    local got = ddp.load(path)
    -- the data pointer lies inside the file's mapping in this process
    local addr = tonumber(ffi.cast("uintptr_t", got.w:data_ptr()))
    local inside = false
    for line in io.lines("/proc/self/maps") do
      local a, b, file = line:match("^(%x+)%-(%x+) .- (/%S+)$")
      if file == path and addr >= tonumber(a, 16) and addr < tonumber(b, 16) then inside = true end
    end
    assert.is_true(inside, "w's data is not inside the mapping of " .. path)
    -- both tensors share the one mapping: their distance is their file distance
    local dv = tonumber(ffi.cast("uintptr_t", got.w:data_ptr())) - tonumber(ffi.cast("uintptr_t", got.v:data_ptr()))
    assert.equal(64, dv)  -- v (F64, 8 elements) comes first
    -- writes go to private pages, never to the file
    got.w:fill_(7)
    assert.equal(7, got.w:get(999))
    assert.equal(before, readfile(path))
    assert.is_true(ddp.load(path).w:equal(w))
    -- the mapping outlives the file's name and goes with the last tensor
    os.remove(path)
    assert.equal(7, got.w:get(0))
    got.w:free(); got.v:free()
    got = nil
    collectgarbage(); collectgarbage()
    assert.is_nil(readfile("/proc/self/maps"):find(path, 1, true))
  end)

  it("rejects bad arguments, naming the key", function()
    assert.matches("save: value of \"w\" is a number, expected a tensor", err(function() ddp.save({ w = 3 }, path) end))
    assert.matches("save: key 1 is a number; tensor names must be strings", err(function() ddp.save({ ddp.ones(1) }, path) end))
    assert.matches("save: metadata must map strings to strings, got \"k\" = 1",
                   err(function() ddp.save({}, path, { k = 1 }) end), nil, true)
    assert.matches("save: path must be a string", err(function() ddp.save({}, nil) end))
    assert.matches("reserved", err(function() ddp.save({ __metadata__ = ddp.ones(1) }, path) end))
    assert.matches("not valid UTF%-8", err(function() ddp.save({ ["\255"] = ddp.ones(1) }, path) end))
    local freed = ddp.ones(2)
    freed:free()
    assert.matches("save: tensor was freed", err(function() ddp.save({ x = freed }, path) end))
    local e = err(function() ddp.save({ x = ddp.ones(1) }, dir .. "/no/such/dir/x.safetensors") end)
    assert.matches("safetensors_spec.lua:%d+: save: .*/no/such/dir/x.safetensors: cannot create a temporary file beside it: No such file or directory", e)
    if ddp.cuda.is_available() then
      assert.matches("load: no CUDA device 99", err(function() ddp.load(path, { device = "cuda:99" }) end))
    else
      assert.matches("load: device cuda:0: CUDA is not available", err(function() ddp.load(path, { device = "cuda:0" }) end))
    end
    assert.matches("load: unknown option \"dev\"", err(function() ddp.load(path, { dev = "cpu" }) end), nil, true)
    assert.matches("load: .*/missing: cannot open: No such file or directory", err(function() ddp.load(dir .. "/missing") end))
  end)
end)

-- -- An independent writer and reader --------------------------------------

describe("files of the Python writer", function()
  local cases = dofile(golden .. "safetensors_cases.lua")

  local function check_file(fname)
    local case = cases[fname]
    local got, meta = ddp.load(golden .. fname)
    assert.same(case.metadata, meta)
    assert.equal(count(case.tensors), count(got))
    for name, want in pairs(case.tensors) do
      local t = got[name]
      assert(t, "missing tensor " .. name)
      assert.equal(want.dtype, t:dtype(), name)
      assert.same(want.shape, t:shape(), name)
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
      assert.equal(0, tonumber(ffi.cast("uintptr_t", t:data_ptr())) % t:element_size(), name .. " is misaligned")
    end
    return got, meta
  end

  it("reads every dtype with exact values", function() check_file("st_dtypes.safetensors") end)
  it("reads a file with no tensors", function() check_file("st_empty.safetensors") end)
  it("copies tensors whose data is not aligned (an unpadded header)", function()
    check_file("st_unaligned.safetensors")
  end)

  it("writes byte for byte what the reference layout gives", function()
    for _, fname in ipairs { "st_dtypes.safetensors", "st_empty.safetensors" } do
      local got, meta = ddp.load(golden .. fname)
      local out = dir .. "/again.safetensors"
      ddp.save(got, out, next(meta) and meta or nil)
      assert(readfile(golden .. fname) == readfile(out), fname .. " differs from the Python writer's file")
    end
  end)

  local python = os.execute("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1")
  python = python == 0 or python == true
  -- a missing external program is the one reason to skip, and it is said
  local function pit(name, fn)
    if python then return it(name, fn) end
    pending(name .. ": no /usr/bin/python3 with torch here")
  end
  pit("reads ddplua's files back (/usr/bin/python3 with torch)", function()
    ddp.manual_seed(7)
    local tensors = {
      a = ddp.randn(3, 4):t(), b = ddp.randn(5, { dtype = "float64" }),
      c = ddp.randint(-9, 9, { 2, 2 }, { dtype = "int32" }), d = ddp.tensor({ 2 ^ 53 + 2, -3 }, { dtype = "int64" }),
      e = ddp.tensor({ 0, 200 }, { dtype = "uint8" }), f = ddp.tensor({ true, false }),
      g = ddp.randn(4):to("bfloat16"), h = ddp.randn(4):to("float16"), s = ddp.tensor(1.25, { dtype = "float32" }),
      z = ddp.zeros(0, 2),
    }
    local out = dir .. "/for_python.safetensors"
    ddp.save(tensors, out, { hello = "wörld" })
    local text = sh("timeout 120 /usr/bin/python3 " .. q(golden .. "make_safetensors.py") .. " --read " .. q(out))
    local seen = 0
    for line in text:gmatch("[^\n]+") do
      local key, hex = line:match("^meta\t([^\t]*)\t(%x*)$")
      local name, dtype, shape, values = line:match("^([^\t]*)\t([^\t]*)\t([^\t]*)\t([^\t]*)$")
      assert(key or name, "unexpected output from the Python reader: " .. text)
      if key then
        assert.equal("hello", key)
        assert.equal((("wörld"):gsub(".", function(c) return ("%02x"):format(c:byte()) end)), hex)
      else
        seen = seen + 1
        local t = tensors[name]
        assert.equal(t:dtype(), dtype, name)
        assert.equal(table.concat(t:shape(), ","), shape, name)
        local flat, i = t:contiguous():reshape(-1), 0
        for v in values:gmatch("[^,]+") do
          if dtype == "int64" then
            assert.equal((tostring(ffi.cast("int64_t *", flat:data_ptr())[i]):gsub("LL$", "")), v)
          elseif dtype == "bool" then
            assert.equal(flat:get(i) and "True" or "False", v)
          else
            assert.equal(flat:get(i), tonumber(v), name .. " element " .. i)
          end
          i = i + 1
        end
        assert.equal(t:numel(), i, name)
      end
    end
    assert.equal(count(tensors), seen)
  end)
end)

-- -- Hostile files -----------------------------------------------------------

local function le64(n)
  local x, b = ffi.new("uint64_t", n), {}
  for i = 1, 8 do
    b[i] = string.char(tonumber(x % 256))
    x = x / 256
  end
  return table.concat(b)
end

-- A file from header text and data; len overrides the header length.
local function st(header, data, len)
  return le64(len or #header) .. header .. (data or "")
end

local F32x2 = [=["dtype":"F32","shape":[2],"data_offsets":[0,8]]=]
local VALID = st('{"__metadata__":{"k":"v"},"a":{' .. F32x2 .. '}}', ("\0"):rep(8))

describe("hostile files", function()
  local path = dir .. "/hostile.safetensors"

  -- Loads content; it must fail with "load: <path>: " at this spec's line
  -- and a message holding every needle.  Returns the message.
  local function refused(content, ...)
    writefile(path, content)
    local ok, err = pcall(ddp.load, path)
    assert(not ok, "loaded a hostile file: " .. ("%q"):format(content:sub(1, 200)))
    err = tostring(err)
    local prefix = "safetensors_spec.lua:%d+: load: " .. path:gsub("%p", "%%%0") .. ": "
    assert(err:find(prefix), "the message does not start with the spec's line and the path: " .. err)
    return has_all(err, ...)
  end

  local function tensor_file(entry, data) return st('{"a":{' .. entry .. '}}', data or ("\0"):rep(8)) end

  local cases = {
    { "an empty file", "", "file has 0 bytes, too short" },
    { "a 5-byte file", "abcde", "file has 5 bytes" },
    { "a header length past the end", st("{}", "", 100), "header length 100 runs past the end of the file (2 bytes" },
    { "an absurd header length", st("{}", "", -1ULL), "header length 18446744073709551615 exceeds the limit of 100000000 bytes" },
    { "a header length of 0", st("", "{}"), "invalid header at byte 0: expected '{', found the end of the header" },
    { "text that is not JSON", st("hello world!"), "invalid header at byte 0: expected '{', found 'h'" },
    { "a header that is an array", st("[1, 2]"), "the header must be a JSON object, found an array" },
    { "JSON cut short", st('{"a":{"dtype":"F32"'), "expected ',' or '}', found the end of the header" },
    { "an unknown dtype", tensor_file([=["dtype":"I8","shape":[8],"data_offsets":[0,8]]=]),
      'tensor "a": dtype "I8" is not supported (expected F32, F64, I32, I64, U8, BOOL, BF16 or F16)' },
    { "a dtype that is a number", tensor_file([=["dtype":5,"shape":[2],"data_offsets":[0,8]]=]),
      'tensor "a": dtype must be a string such as "F32", found a number' },
    { "a negative size", tensor_file([=["dtype":"F32","shape":[-2],"data_offsets":[0,8]]=]),
      'tensor "a": shape must hold non-negative integers below 2^63, found -2' },
    { "a fractional size", tensor_file([=["dtype":"F32","shape":[2.0],"data_offsets":[0,8]]=]), "found 2.0" },
    { "an exponent", tensor_file([=["dtype":"F32","shape":[2e0],"data_offsets":[0,8]]=]), "found 2e0" },
    { "a leading zero", tensor_file([=["dtype":"F32","shape":[02],"data_offsets":[0,8]]=]), "found 02" },
    { "a size beyond 64 bits", tensor_file([=["dtype":"F32","shape":[18446744073709551616],"data_offsets":[0,8]]=]),
      "found 18446744073709551616" },
    { "sizes whose product overflows", tensor_file([=["dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]]=]),
      'tensor "a": shape [4294967296, 4294967296] has too many elements' },
    { "huge sizes beside a zero", tensor_file([=["dtype":"F32","shape":[0,4611686018427387904,4611686018427387904],"data_offsets":[0,0]]=]),
      "has too many elements" },
    { "9 dims", tensor_file([=["dtype":"U8","shape":[1,1,1,1,1,1,1,1,8],"data_offsets":[0,8]]=]), "shape has more than 8 dims" },
    { "a shape that is a string", tensor_file([=["dtype":"F32","shape":"2","data_offsets":[0,8]]=]),
      'tensor "a": shape must be an array of non-negative integers, found a string' },
    { "data_offsets past the end", tensor_file([=["dtype":"F32","shape":[4],"data_offsets":[0,16]]=]),
      'tensor "a": data_offsets [0, 16] reach past the end of the data (8 bytes after the header' },
    { "data_offsets that end before they begin", tensor_file([=["dtype":"F32","shape":[0],"data_offsets":[8,0]]=]),
      "data_offsets [8, 0] end before they begin" },
    { "data_offsets that do not match the shape",
      st('{"fc.weight":{"dtype":"F32","shape":[10,10],"data_offsets":[0,100]}}', ("\0"):rep(100)),
      'tensor "fc.weight": data_offsets [0, 100] do not match shape [10, 10] of F32 (400 bytes)' },
    { "3 data_offsets", tensor_file([=["dtype":"F32","shape":[2],"data_offsets":[0,8,8]]=]),
      "data_offsets must be an array of 2 integers [begin, end], found a longer array" },
    { "1 data_offset", tensor_file([=["dtype":"F32","shape":[2],"data_offsets":[8]]=]), "found a shorter array" },
    { "overlapping tensors",
      st('{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}', ("\0"):rep(12)),
      'tensors "a" [0, 8] and "b" [4, 12] overlap' },
    { "a gap between tensors",
      st('{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}', ("\0"):rep(12)),
      "data bytes [4, 8) belong to no tensor" },
    { "data after the last tensor", tensor_file(F32x2, ("\0"):rep(12)), "data bytes [8, 12) belong to no tensor" },
    { "a duplicate name",
      st('{"a":{' .. F32x2 .. '},"a":{"dtype":"F32","shape":[0],"data_offsets":[8,8]}}', ("\0"):rep(8)),
      'tensor "a" appears twice' },
    { "a duplicate key", tensor_file([=["dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]]=]),
      'tensor "a": key "dtype" appears twice' },
    { "an unknown key", tensor_file(F32x2 .. ',"foo":1'), 'tensor "a": unexpected key "foo" (expected dtype, shape and data_offsets)' },
    { "a missing key", tensor_file([=["dtype":"F32","shape":[2]]=]), 'tensor "a": missing "data_offsets"' },
    { "garbage after the header's JSON", st('{"a":{' .. F32x2 .. '}}  x', ("\0"):rep(8)),
      "unexpected data after the header's closing '}'" },
    { "deep nesting", st('{"a":' .. ("["):rep(100000) .. ("]"):rep(100000) .. '}'),
      'tensor "a" must be an object with dtype, shape and data_offsets, found an array' },
    { "deep nesting in the metadata", st('{"__metadata__":{"k":' .. ("{"):rep(5000) .. '}}'),
      '__metadata__ value of "k" must be a string, found an object' },
    { "metadata that is not an object", st('{"__metadata__":["k","v"]}'), "__metadata__ must be an object of strings, found an array" },
    { "metadata given twice", st('{"__metadata__":{},"__metadata__":{}}'), 'key "__metadata__" appears twice' },
    { "a metadata key given twice", st('{"__metadata__":{"k":"1","k":"2"}}'), '__metadata__ key "k" appears twice' },
    { "a name that is not UTF-8", st('{"a\255":{' .. F32x2 .. '}}', ("\0"):rep(8)), "invalid UTF-8 in a string" },
    { "an overlong UTF-8 form", st('{"\192\175":{' .. F32x2 .. '}}', ("\0"):rep(8)), "invalid UTF-8 in a string" },
    { "a UTF-8 surrogate", st('{"\237\160\128":{' .. F32x2 .. '}}', ("\0"):rep(8)), "invalid UTF-8 in a string" },
    { "a lone surrogate escape", st('{"\\ud800":{' .. F32x2 .. '}}', ("\0"):rep(8)), "unpaired surrogate in a \\u escape" },
    { "a low surrogate first", st('{"\\udc00\\ud800":{' .. F32x2 .. '}}', ("\0"):rep(8)), "unpaired surrogate" },
    { "an escaped NUL", st('{"a\\u0000b":{' .. F32x2 .. '}}', ("\0"):rep(8)), "NUL character (\\u0000) in a string" },
    { "a raw NUL in a name", st('{"a\0b":{' .. F32x2 .. '}}', ("\0"):rep(8)), "NUL byte in a string" },
    { "a raw NUL between tokens", st('{"a":\0{' .. F32x2 .. '}}', ("\0"):rep(8)), "found byte 0x00" },
    { "a control character in a string", st('{"a\nb":{' .. F32x2 .. '}}', ("\0"):rep(8)), "control character in a string" },
    { "an invalid escape", st('{"a\\qb":{' .. F32x2 .. '}}', ("\0"):rep(8)), "invalid escape in a string" },
    { "a short \\u escape", st('{"a\\u12":{' .. F32x2 .. '}}', ("\0"):rep(8)), "invalid escape in a string" },
    { "an unterminated string", st('{"abc'), "unterminated string" },
    { "a metadata value that is a number", st('{"__metadata__":{"k":1}}'), '__metadata__ value of "k" must be a string, found a number' },
    { "a trailing comma", st('{"a":{' .. F32x2 .. '},}', ("\0"):rep(8)), "expected a key string, found '}'" },
    { "a missing colon", st('{"a" {' .. F32x2 .. '}}', ("\0"):rep(8)), "expected ':', found an object" },
  }

  for _, case in ipairs(cases) do
    it("refuses " .. case[1], function() refused(case[2], case[3]) end)
  end

  it("has at least 25 hostile cases", function() assert(#cases >= 25) end)

  it("refuses every truncation of a valid file", function()
    local ok = pcall(ddp.load, golden .. "st_dtypes.safetensors")
    assert.is_true(ok)
    local full = readfile(golden .. "st_dtypes.safetensors")
    for n = 0, #full - 1 do refused(full:sub(1, n)) end
  end)

  it("loads or refuses, never crashes, on every byte of a header changed", function()
    local full = VALID
    local hlen = #full - 8 - 8
    local loaded = 0
    for i = 1, 8 + hlen do
      for _, b in ipairs { 0, 0x22, 0x30, 0x7b, 0x7d, 0xff } do
        writefile(path, full:sub(1, i - 1) .. string.char(b) .. full:sub(i + 1))
        local ok, err = pcall(ddp.load, path)
        if ok then loaded = loaded + 1 else assert.matches("load: ", err) end
      end
    end
    assert(loaded > 0)
  end)

  it("refuses directories and FIFOs without hanging", function()
    local ok, err = pcall(ddp.load, dir)
    assert.is_false(ok)
    assert.matches("not a regular file", err)
    local fifo = dir .. "/fifo"
    os.execute("mkfifo " .. q(fifo))
    ok, err = pcall(ddp.load, fifo)
    assert.is_false(ok)
    assert.matches("load: .*/fifo: not a regular file", err)
    os.remove(fifo)
  end)

  it("accepts what the format allows: whitespace, escapes, metadata anywhere", function()
    writefile(path, st(' \n{ "a" : {"shape" : [ 2 ] , "data_offsets":[0, 8],"dtype":"F32" } ,\t"__metadata__":{"\\u00e9\\ud83d\\ude00":"\\"\\\\\\/\\b\\f\\n\\r\\t"}}\r\n', ("\0"):rep(8)))
    local got, meta = ddp.load(path)
    assert.same({ 2 }, got.a:shape())
    assert.equal("\"\\/\b\f\n\r\t", meta["é😀"])
  end)
end)

-- -- Atomic saves -----------------------------------------------------------

describe("atomic saves", function()
  local path = dir .. "/atomic.safetensors"
  local good = ddp.arange(1000, { dtype = "float32" })

  local function tmp_files()
    local t = {}
    for _, name in ipairs(listdir()) do
      if name:find("^atomic%.safetensors%.tmp%.") then t[#t + 1] = name end
    end
    return t
  end

  it("leaves the old file whole when the writer is killed mid-write (SIGKILL)", function()
    local child = dir .. "/writer.lua"
    writefile(child, [[
      local ddp = require "ddp"
      local big = ddp.full({50 * 1024 * 1024}, 2, {dtype = "float32"})  -- 200 MB
      ddp.save({big = big}, arg[1])
    ]])
    -- The child's first save writes <path>.tmp.<pid>.0: once it holds data,
    -- the write is under way (the rename comes after 200 MB and an fsync);
    -- then a short, varied wait and SIGKILL.  Bounded: the wait for the temp
    -- file gives up after 30 s, the whole after 120 s.
    local delays = { 0, 0.01, 0, 0.03, 0, 0.005, 0 }
    local hit, dead_tmp
    for _, delay in ipairs(delays) do
      ddp.save({ good = good }, path)
      local out = sh(("timeout 120 sh -c %s"):format(q(([[
        (exec %s %s %s) & pid=$!
        t=%s.tmp.$pid.0; i=0
        while [ ! -s "$t" ] && [ $i -lt 300000 ] && kill -0 $pid 2>/dev/null; do i=$((i+1)); done
        sleep %s; kill -9 $pid; wait $pid; echo "exit $?"]]):format(q(ddplua), q(child), q(path), q(path), delay))))
      assert.matches("exit 137", out)  -- SIGKILL, not an error of its own
      local tmps = tmp_files()
      if #tmps > 0 then
        hit, dead_tmp = true, tmps
        break
      end
      -- the kill came too late: the new file is already in place; again
    end
    assert(hit, "no kill landed during the write in " .. #delays .. " tries")
    assert.equal(1, #dead_tmp)
    local got = ddp.load(path)
    assert.is_true(got.good:equal(good))
    assert.is_nil(got.big)
    -- the next save of the same path removes the dead writer's temp file
    ddp.save({ good = good * 2 }, path)
    assert.same({}, tmp_files())
    assert.is_true(ddp.load(path).good:equal(good * 2))
  end)

  it("keeps temp files of live writers and removes those of dead ones", function()
    local dead_pid = sh("sh -c 'echo $$'"):match("%d+")
    writefile(path .. ".tmp.1.0", "live")          -- pid 1 is alive
    writefile(path .. ".tmp." .. dead_pid .. ".3", "dead")
    writefile(path .. ".tmp.x.3", "not ours")
    ddp.save({ good = good }, path)
    assert.same({ "atomic.safetensors.tmp.1.0", "atomic.safetensors.tmp.x.3" }, tmp_files())
    os.remove(path .. ".tmp.1.0")
    os.remove(path .. ".tmp.x.3")
  end)

  it("reports a failed write with the reason, removes its temp file and keeps the old file", function()
    ddp.save({ good = good }, path)
    local child = dir .. "/toolarge.lua"
    writefile(child, [[
      local ddp = require "ddp"
      local ok, err = pcall(ddp.save, {big = ddp.zeros(4 * 1024 * 1024)}, arg[1])
      print(ok, err)
    ]])
    -- a file size limit makes write() fail with EFBIG (SIGXFSZ ignored)
    local out = sh(("timeout 60 sh -c %s"):format(q(("ulimit -f 200; trap '' XFSZ; exec %s %s %s")
                                                 :format(q(ddplua), q(child), q(path)))))
    assert.matches("false\t.*save: .*atomic%.safetensors: write failed: File too large", out)
    assert.same({}, tmp_files())
    assert.is_true(ddp.load(path).good:equal(good))
  end)

  it("fails a save larger than ulimit -f with File too large, not SIGXFSZ, and leaves no temp file", function()
    ddp.save({ good = good }, path)
    local child = dir .. "/ulimit.lua"
    writefile(child, [[
      local ddp = require "ddp"
      local ok, err = pcall(ddp.save, {big = ddp.zeros(5 * 1024 * 1024)}, arg[1])  -- 20 MB
      print(ok, err)
    ]])
    -- no trap: the program itself must keep SIGXFSZ from killing it (exit 153)
    local out = sh(("timeout 60 sh -c %s; echo \"exit $?\""):format(q(("ulimit -f 2048; exec %s %s %s")
                                                 :format(q(ddplua), q(child), q(path)))))
    assert.matches("false\t.*save: .*atomic%.safetensors: write failed: File too large", out)
    assert.matches("exit 0", out)
    assert.same({}, tmp_files())
    assert.is_true(ddp.load(path).good:equal(good))
    -- an embedder that leaves SIGXFSZ alone (plain luajit): the library checks
    -- the limit before writing, so the save fails the same way
    out = sh(("timeout 60 sh -c %s; echo \"exit $?\""):format(q(("ulimit -f 2048; LUA_PATH=%s exec luajit %s %s")
      :format(q(root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;" .. root .. "/bindings/?.lua;" .. root .. "/build/lua/?.lua;;"),
              q(child), q(path)))))
    assert.matches("false\t.*save: .*atomic%.safetensors: write failed: File too large", out)
    assert.matches("exit 0", out)
    assert.same({}, tmp_files())
    -- and any other write past the limit is an error too (SIGXFSZ is ignored)
    out = sh(("timeout 60 sh -c %s; echo \"exit $?\""):format(q(("ulimit -f 8; exec %s -e %s")
      :format(q(ddplua), q(("local f = assert(io.open(%q, 'w')) local ok, e = f:write(('x'):rep(65536)) "
                           .. "if ok then ok, e = f:flush() end print(ok, e)")
                           :format(dir .. "/big.txt"))))))
    os.remove(dir .. "/big.txt")
    assert.matches("nil\t.*File too large", out)
    assert.matches("exit 0", out)
  end)
end)

-- -- What a save replaces -----------------------------------------------------

describe("saving over a file", function()
  local sub = dir .. "/sub"
  os.execute("mkdir -p " .. q(sub))
  local t = ddp.arange(10, { dtype = "float32" })
  local function mode(p) return sh("stat -c %a " .. q(p)):match("%d+") end
  local function is_link(p)
    local r = os.execute("test -L " .. q(p))
    return r == 0 or r == true
  end
  local function leftovers(d)  -- temporary files of this describe's saves
    return (sh("ls -A " .. q(d) .. " | grep -E '^(secret|target|link2?|loop_[ab])[.a-z]*\\.tmp\\.' || true"))
  end

  it("keeps the old file's mode", function()
    local p = dir .. "/secret.safetensors"
    for _, m in ipairs { "600", "640", "666", "444" } do
      ddp.save({ t = t }, p)
      os.execute("chmod " .. m .. " " .. q(p))
      ddp.save({ t = t * 2 }, p)
      assert.equals(m, mode(p))
      assert.is_true(ddp.load(p).t:equal(t * 2))
    end
    os.remove(p)
    ddp.save({ t = t }, p)  -- a new file: 0666 less the umask, as open() makes it
    local umask = tonumber(sh("umask"):match("%d+"), 8)
    assert.equals(("%o"):format(bit.band(tonumber("666", 8), bit.bnot(umask))), mode(p))
    os.remove(p)
  end)

  it("writes through a symbolic link to its target, in the target's directory", function()
    local target, link = sub .. "/target.safetensors", dir .. "/link.safetensors"
    ddp.save({ t = t }, target)
    os.execute("chmod 600 " .. q(target))
    os.execute("ln -sfn sub/target.safetensors " .. q(link))  -- relative, as ln -s makes it
    ddp.save({ t = t * 3 }, link)
    assert.is_true(is_link(link))
    assert.equals("sub/target.safetensors", sh("readlink " .. q(link)):match("[^\n]+"))
    assert.is_true(ddp.load(target).t:equal(t * 3))
    assert.equals("600", mode(target))
    assert.equals("", leftovers(dir) .. leftovers(sub))
    -- a chain of links, and a link whose target does not exist yet
    local link2 = dir .. "/link2.safetensors"
    os.execute("ln -sfn " .. q(link) .. " " .. q(link2))
    ddp.save({ t = t * 4 }, link2)
    assert.is_true(is_link(link2) and is_link(link))
    assert.is_true(ddp.load(target).t:equal(t * 4))
    os.remove(target)
    ddp.save({ t = t * 5 }, link2)
    assert.is_true(is_link(link2) and is_link(link))
    assert.is_true(ddp.load(target).t:equal(t * 5))
    -- a loop is an error naming the path
    local a, b = dir .. "/loop_a", dir .. "/loop_b"
    os.execute("ln -sfn loop_b " .. q(a) .. "; ln -sfn loop_a " .. q(b))
    assert.matches("save: .*loop_a: .*[Ss]ymbolic links", err(function() ddp.save({ t = t }, a) end))
    assert.is_true(is_link(a) and is_link(b))
    for _, p in ipairs { link, link2, target, a, b } do os.remove(p) end
    assert.equals("", leftovers(dir) .. leftovers(sub))
  end)
end)

-- -- Checkpoints -------------------------------------------------------------

-- Stand-ins for nn modules, optimizers and schedulers: anything with
-- state_dict / load_state_dict.
local function model(seed)
  ddp.manual_seed(seed)
  local m = { params = { ["fc.weight"] = ddp.randn(3, 2), ["fc.bias"] = ddp.randn(3) } }
  function m:state_dict()
    local s = {}
    for k, v in pairs(self.params) do s[k] = v end
    return s
  end
  function m:load_state_dict(s)
    for k, v in pairs(s) do self.params[k]:copy_(v) end
  end
  return m
end

local function optimizer()
  local o = {
    state = { [1] = { step = 3, exp_avg = ddp.randn(3, 2), exp_avg_sq = ddp.rand(3, 2) },
              [2] = { step = 3, exp_avg = ddp.randn(3), exp_avg_sq = ddp.rand(3) } },
    param_groups = { { lr = 0.1, betas = { 0.9, 0.999 }, eps = 1e-8, params = { 1, 2 },
                       amsgrad = false, name = "g \"1\"\n\0\255", weird = { [true] = -0.0, [1.5] = 1 / 3 } } },
  }
  function o:state_dict() return { state = self.state, param_groups = self.param_groups } end
  function o:load_state_dict(s) self.loaded = s end
  return o
end

describe("ddp.save_checkpoint / ddp.load_checkpoint", function()
  local path = dir .. "/ckpt.safetensors"

  it("saves state dicts as prefixed tensors plus the structure", function()
    local m, o = model(1), optimizer()
    ddp.save_checkpoint(path, { model = m, optimizer = o, epoch = 5, extra = { best = math.huge, note = "x" } })
    local tensors, meta = ddp.load(path)
    assert.is_truthy(tensors["model.fc.weight"])
    assert.is_truthy(tensors["optimizer.state.1.exp_avg"])
    assert.is_truthy(tensors["optimizer.state.2.exp_avg_sq"])
    assert.equal("checkpoint 1", meta["ddplua.format"])
    assert.is_nil(meta["ddplua.state"]:find("\n"))
  end)

  it("round-trips every value exactly and resumes the RNG", function()
    local m, o = model(2), optimizer()
    local shared = ddp.ones(2)
    local sched = { last_epoch = 4, base_lrs = { 0.1, 0.01 } }
    function sched:state_dict() return { last_epoch = self.last_epoch, base_lrs = self.base_lrs } end
    function sched:load_state_dict(s) self.restored = s end
    ddp.manual_seed(99)
    local _ = ddp.randn(10)
    ddp.save_checkpoint(path, { model = m, optimizer = o, scheduler = sched, epoch = 7,
                                extra = { tied = { shared, shared }, code = "os.exit(1)", t = ddp.tensor(2 ^ 53, { dtype = "int64" }) } })
    local after_save = ddp.randn(5)

    ddp.manual_seed(12345)  -- a fresh process would start elsewhere
    local m2, o2 = model(3), optimizer()
    local sched2 = { state_dict = sched.state_dict, load_state_dict = sched.load_state_dict }
    local state = ddp.load_checkpoint(path, { model = m2, optimizer = o2, scheduler = sched2 })
    assert.is_true(ddp.randn(5):equal(after_save))
    for k, v in pairs(m.params) do assert.is_true(m2.params[k]:equal(v), k) end
    assert.equal(7, state.epoch)
    assert.same({ last_epoch = 4, base_lrs = { 0.1, 0.01 } }, sched2.restored)
    local pg = o2.loaded.param_groups[1]
    assert.same(o.param_groups[1].betas, pg.betas)
    assert.equal(1e-8, pg.eps)
    assert.equal(false, pg.amsgrad)
    assert.equal("g \"1\"\n\0\255", pg.name)
    assert.equal(1 / 3, pg.weird[1.5])
    assert.equal(-math.huge, 1 / pg.weird[true])  -- -0.0 stays negative
    assert.equal(3, o2.loaded.state[1].step)
    assert.is_true(o2.loaded.state[2].exp_avg:equal(o.state[2].exp_avg))
    assert.equal("os.exit(1)", state.extra.code)
    assert.is_true(ddp.is_tensor(state.extra.tied[1]))
    assert.is_true(state.extra.tied[1]:is_shared(state.extra.tied[2]))  -- stored once, shared again
    assert.equal(2 ^ 53, state.extra.t:item())
    assert.is_table(state.rng)
  end)

  it("resumes real training exactly: nn modules, Adam, StepLR, dropout and the RNG", function()
    local nn, optim = require "ddp.nn", require "ddp.optim"
    local function build()
      local m = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Dropout(0.5), nn.Linear(8, 3))
      local o = optim.Adam(m:parameters(), { lr = 0.01 })
      return m, o, optim.lr_scheduler.StepLR(o, { step_size = 2, gamma = 0.5 })
    end
    local function steps(m, o, s, k)
      local losses = {}
      for i = 1, k do
        local x, y = ddp.randn(5, 4), ddp.randint(0, 3, { 5 })
        o:zero_grad()
        local loss = nn.functional.cross_entropy(m(x), y)
        loss:backward()
        o:step()
        s:step()
        losses[i] = loss:item()
      end
      return losses
    end
    ddp.manual_seed(0)
    local m, o, s = build()
    steps(m, o, s, 3)
    ddp.save_checkpoint(path, { model = m, optimizer = o, scheduler = s, epoch = 3 })
    local names = ddp.load(path)
    assert.is_truthy(names["model.0.weight"])
    assert.is_truthy(names["optimizer.state.0.exp_avg"])
    local want = steps(m, o, s, 4)

    ddp.manual_seed(1)  -- another start: different weights and random numbers
    local m2, o2, s2 = build()
    assert.equal(3, ddp.load_checkpoint(path, { model = m2, optimizer = o2, scheduler = s2 }).epoch)
    assert.same(want, steps(m2, o2, s2, 4))
    for k, v in pairs(m:state_dict()) do assert.is_true(m2:state_dict()[k]:equal(v), k) end
  end)

  it("saves a data loader where it stands and puts it back there (loader = ...)", function()
    local data = require "ddp.data"
    local function make()
      local ds = data.TensorDataset(ddp.arange(30))
      return data.DataLoader(ds, { batch_size = 4, shuffle = true }), ds
    end
    local function rest(l)
      local out = {}
      while l:epoch() < 3 do
        for i, x in l:iter() do out[#out + 1] = l:epoch() .. ":" .. i .. ":" .. table.concat(x:totable(), ",") end
      end
      return out
    end
    ddp.manual_seed(4)
    local want = rest(make())
    ddp.manual_seed(4)
    local l = make()
    for _ in l:iter() do end
    for i in l:iter() do if i == 2 then break end end
    ddp.save_checkpoint(path, { loader = l, epoch = 1 })
    ddp.manual_seed(5)  -- another drawn seed: the checkpoint's wins
    local l2 = make()
    local state = ddp.load_checkpoint(path, { loader = l2 })
    assert.same({ 1, 3 }, { state.loader.epoch, state.loader.batches })
    -- the rest of epoch 1 (batches 3 to 7 of 8), then epoch 2
    assert.same({ unpack(want, 8 + 4) }, rest(l2))
    -- a sampler goes the same way
    local s = data.DistributedSampler(30, { num_replicas = 2, rank = 1, seed = 3 })
    s:set_epoch(4)
    ddp.save_checkpoint(path, { sampler = s })
    local s2 = data.DistributedSampler(30, { num_replicas = 2, rank = 1 })
    ddp.load_checkpoint(path, { sampler = s2 })
    assert.same({ 4, 3 }, { s2:epoch(), s2.seed })
  end)

  it("leaves a loader as it is when the file holds none (one written before loaders were saved)", function()
    local data = require "ddp.data"
    ddp.save_checkpoint(path, { model = model(1), epoch = 2 })
    local l = data.DataLoader(data.TensorDataset(ddp.arange(8)), { batch_size = 2, shuffle = true, seed = 6 })
    local state = ddp.load_checkpoint(path, { model = model(2), loader = l })
    assert.equal(2, state.epoch)
    assert.is_nil(state.loader)
    assert.same({ 0, 0, 6 }, { l:epoch(), l:state_dict().batches, l.sampler.seed })
  end)

  it("restores this rank's own RNG stream when the file holds every rank's", function()
    -- a world of one is rank 0 of 1: it takes ranks[1] of a one-rank file,
    -- and the saving rank's state from a file of another world size
    ddp.save_checkpoint(path, { rng = { seed = 1, offset = 2, ranks = { { seed = 7, offset = 9 } } } })
    ddp.load_checkpoint(path, {})
    assert.same({ seed = 7, offset = 9 }, ddp.get_rng_state())
    ddp.save_checkpoint(path, { rng = { seed = 1, offset = 2, ranks = { { seed = 7, offset = 9 }, { seed = 8, offset = 9 } } } })
    ddp.load_checkpoint(path, {})
    assert.same({ seed = 1, offset = 2 }, ddp.get_rng_state())
    -- all_ranks in a world of one is a plain save
    ddp.manual_seed(3)
    ddp.save_checkpoint(path, { epoch = 1 }, { all_ranks = true })
    assert.same({ seed = 3, offset = 0 }, ddp.load_checkpoint(path).rng)
    assert.matches("save_checkpoint: unknown option \"ranks\" %(expected all_ranks%)",
                   err(function() ddp.save_checkpoint(path, { epoch = 1 }, { ranks = true }) end))
    assert.matches("save_checkpoint: all_ranks must be true or false, got 1",
                   err(function() ddp.save_checkpoint(path, { epoch = 1 }, { all_ranks = 1 }) end))
  end)

  it("returns the state without targets and leaves the RNG alone", function()
    ddp.save_checkpoint(path, { model = model(4), epoch = 1 })
    ddp.manual_seed(5)
    local want = ddp.randn(3)
    ddp.manual_seed(5)
    local state = ddp.load_checkpoint(path)
    assert.is_true(ddp.randn(3):equal(want))
    assert.equal(1, state.epoch)
    assert.is_true(ddp.is_tensor(state.model["fc.weight"]))
    ddp.save_checkpoint(path, { epoch = 2, rng = false })
    assert.is_nil(ddp.load_checkpoint(path).rng)
  end)

  it("explains mistakes", function()
    local cyc = {}
    cyc.self = cyc
    assert.matches("save_checkpoint: extra.self contains itself", err(function() ddp.save_checkpoint(path, { extra = cyc }) end))
    assert.matches("save_checkpoint: extra.f is a function", err(function() ddp.save_checkpoint(path, { extra = { f = print } }) end))
    assert.matches("save_checkpoint: extra has a table key", err(function() ddp.save_checkpoint(path, { extra = { [{}] = 1 } }) end))
    local deep = {}
    for _ = 1, 200 do deep = { deep } end
    assert.matches("nested too deep", err(function() ddp.save_checkpoint(path, { extra = deep }) end))
    ddp.save({ w = ddp.ones(1) }, path)
    assert.matches("load_checkpoint: .*ckpt.safetensors: not a ddplua checkpoint", err(function() ddp.load_checkpoint(path) end))
    ddp.save_checkpoint(path, { epoch = 1 })
    assert.matches("load_checkpoint: .* holds no \"model\" %(it holds epoch, rng%)",
                   err(function() ddp.load_checkpoint(path, { model = model(1) }) end))
    assert.matches("target \"model\" has no load_state_dict method", err(function() ddp.load_checkpoint(path, { model = {} }) end))
    local function corrupt(state)
      ddp.save({ w = ddp.ones(1) }, path, { ["ddplua.format"] = "checkpoint 1", ["ddplua.state"] = state })
      return err(function() ddp.load_checkpoint(path) end)
    end
    assert.matches("corrupt checkpoint state at byte %d+: refers to tensor \"nope\", which the file does not hold", corrupt('{"a"=@"nope"}'))
    assert.matches("corrupt checkpoint state at byte %d+: unterminated string", corrupt('{"a"="x}'))
    assert.matches("corrupt checkpoint state .*nested too deep", corrupt(('{"a"='):rep(500)))
    assert.matches("corrupt checkpoint state .*unexpected data after the end", corrupt("{} {}"))
    assert.matches("corrupt checkpoint state .*given twice", corrupt('{"a"=1,"a"=2}'))
    assert.matches("not a table", corrupt("1"))
    assert.matches("unsupported checkpoint format \"checkpoint 9\"", (function()
      ddp.save({}, path, { ["ddplua.format"] = "checkpoint 9", ["ddplua.state"] = "{}" })
      return err(function() ddp.load_checkpoint(path) end)
    end)())
  end)
end)
