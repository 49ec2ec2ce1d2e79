-- ddp.testing, busted for users' code: the tensor assertions it registers
-- with luassert (passing and failing, and what a failure says), same() on
-- tensors, and testing.run -- real jobs of `ddplua --nproc N` whose ranks'
-- values, errors, crashes and timeouts come back named by rank, leaving no
-- process and no temporary file behind.
local ddp = require "ddp"
local testing = require "ddp.testing"
local shell = require "helpers.shell"
local fails = require "helpers.fails"
local ffi = require "ffi"

pcall(ffi.cdef, [[
int setenv(const char *name, const char *value, int overwrite);
int unsetenv(const char *name);
int kill(int pid, int sig);
]])

local has_all = fails.has_all
-- the message of a failing call, which must point at a line of this file
local located = fails.located("testing_spec.lua")

-- The message of a failing assertion.
local function failure(f)
  local ok, err = pcall(f)
  assert(not ok, "expected the assertion to fail")
  return tostring(err)
end

describe("assert.tensor_equal", function()
  it("passes on the same shape, dtype and values, views and graphs included", function()
    assert.tensor_equal(ddp.tensor({ { 1, 2 }, { 3, 4 } }), ddp.tensor({ { 1, 2 }, { 3, 4 } }))
    assert.tensor_equal(ddp.arange(6):view(2, 3):t():contiguous(), ddp.arange(6):view(2, 3):t())
    assert.tensor_equal(ddp.ones(2, 3, { dtype = "float32" }), ddp.ones(2, 3):requires_grad_())
    assert.tensor_equal(ddp.tensor({ true, false }), ddp.tensor({ 1, 0 }):to("bool"))
    assert.tensor_equal(ddp.zeros(0, 3), ddp.zeros(0, 3))
    assert.tensor_equal(ddp.tensor(7), ddp.tensor(7))
    assert.tensor_equal(ddp.tensor({ 1 / 0, -1 / 0 }), ddp.tensor({ 1 / 0, -1 / 0 }))
    assert.tensor_equal(ddp.tensor({ 0 / 0, 1 }), ddp.tensor({ 0 / 0, 1 }), { equal_nan = true })
    assert.is_not.tensor_equal(ddp.ones(2), ddp.zeros(2))
  end)

  it("takes Lua numbers and nested tables as the expected tensor", function()
    assert.tensor_equal({ { 1, 2 }, { 3, 4 } }, ddp.tensor({ { 1, 2 }, { 3, 4 } }))
    assert.tensor_equal({ 0.1, 0.2 }, ddp.tensor({ 0.1, 0.2 }, { dtype = "float64" }))  -- in actual's dtype
    assert.tensor_equal(3, ddp.tensor(3))
    has_all(failure(function() assert.tensor_equal({ 1.5, 2 }, ddp.tensor({ 1, 2 })) end),
            "Tensors are not equal: 1 of 2 elements differ", "expected 1.5, actual 1")
  end)

  it("compares int64 exactly, beyond 2^53", function()
    local big = ddp.tensor({ 2 ^ 53 }, { dtype = "int64" })
    assert.is_not.tensor_equal(big, big + 1)
  end)

  it("fails on shapes, dtypes and values, saying which and where", function()
    has_all(failure(function() assert.tensor_equal(ddp.zeros(2, 3), ddp.zeros(3, 2)) end),
            "testing_spec.lua:", "Tensors differ in shape: expected float32 [2, 3], actual float32 [3, 2]")
    has_all(failure(function() assert.tensor_equal(ddp.zeros(2), ddp.zeros(2):double()) end),
            "Tensors differ in dtype: expected float32 [2], actual float64 [2]", "check_dtype = false")
    assert.tensor_equal(ddp.zeros(2), ddp.zeros(2):double(), { check_dtype = false })
    local a = ddp.arange(12):view(3, 4):float()
    local b = a:clone()
    b:set(2, 1, 100)
    b:set(0, 0, 0.5)
    local msg = failure(function() assert.tensor_equal(a, b) end)
    has_all(msg, "Tensors are not equal: 2 of 12 elements differ (16.7%)",
            "float32 [3, 4], expected and actual",
            "worst at index [2, 1]: expected 9, actual 100 (abs diff 91, rel diff 10.1)",
            "greatest rel diff inf at index [0, 0]: expected 0, actual 0.5 (abs diff 0.5)",
            "Expected tensors to be equal.", "Passed in:")
    assert.truthy(msg:find("^[^\n]*testing_spec%.lua:%d+: Tensors are not equal"), msg)  -- at the spec's line
  end)

  it("counts NaN as unequal unless equal_nan", function()
    has_all(failure(function() assert.tensor_equal(ddp.tensor({ 0 / 0, 1 }), ddp.tensor({ 0 / 0, 1 })) end),
            "1 of 2 elements differ", "worst at index [0]: expected nan, actual nan")
  end)

  it("compares tables of tensors key by key, naming the key", function()
    local sd = { ["fc.weight"] = ddp.ones(2, 2), ["fc.bias"] = ddp.zeros(2), step = 3 }
    assert.tensor_equal(sd, { ["fc.weight"] = ddp.ones(2, 2), ["fc.bias"] = ddp.zeros(2), step = 3 })
    has_all(failure(function()
      assert.tensor_equal(sd, { ["fc.weight"] = ddp.ones(2, 2), ["fc.bias"] = ddp.ones(2), step = 3 })
    end), 'at ["fc.bias"]: Tensors are not equal: 2 of 2 elements differ')
    has_all(failure(function() assert.tensor_equal(sd, { ["fc.weight"] = ddp.ones(2, 2), step = 3 }) end),
            'at ["fc.bias"]: missing in actual')
  end)

  it("adds a message given last", function()
    has_all(failure(function() assert.tensor_equal(ddp.ones(1), ddp.zeros(1), "after step 3") end),
            "after step 3\nTensors are not equal")
  end)

  it("refuses unknown options at the spec's line", function()
    has_all(located(function() assert.tensor_equal(ddp.ones(1), ddp.ones(1), { rtol = 0 }) end),
            "tensor_equal: unknown option \"rtol\"")
  end)
end)

describe("assert.tensor_close", function()
  it("uses PyTorch's assert_close tolerances per dtype", function()
    assert.same({ 1.3e-6, 1e-5 }, { testing.default_tolerances("float32") })
    assert.same({ 1e-7, 1e-7 }, { testing.default_tolerances("float64") })
    assert.same({ 1.6e-2, 1e-5 }, { testing.default_tolerances("bfloat16") })
    assert.same({ 1e-3, 1e-5 }, { testing.default_tolerances("float16") })
    assert.same({ 0, 0 }, { testing.default_tolerances("int64") })
    assert.same({ 1.3e-6, 1e-5 }, { testing.default_tolerances("float64", "float32") })  -- the larger
    local x = ddp.tensor({ 1, 100, -3 }, { dtype = "float64" })
    assert.tensor_close(x:float(), (x * (1 + 1e-6)):float())
    assert.is_not.tensor_close(x:float(), (x * (1 + 1e-5)):float())
    assert.tensor_close(x, x * (1 + 5e-8))
    assert.is_not.tensor_close(x, x * (1 + 1e-6))
    assert.tensor_close(x:to("bfloat16"), (x * 1.01):to("bfloat16"))
    assert.is_not.tensor_close(ddp.tensor({ 5 }), ddp.tensor({ 6 }))  -- integers: exact
    assert.tensor_close(x, x:float(), { check_dtype = false })  -- float32's tolerances
  end)

  it("takes rtol and atol together", function()
    local a, b = ddp.tensor({ 1, 2 }, { dtype = "float64" }), ddp.tensor({ 1.05, 2 }, { dtype = "float64" })
    assert.tensor_close(a, b, { rtol = 0.1, atol = 0 })
    assert.tensor_close(a, b, { rtol = 0, atol = 0.06 })
    assert.is_not.tensor_close(a, b, { rtol = 0.01, atol = 0.01 })
    has_all(located(function() assert.tensor_close(a, b, { rtol = 0.1 }) end),
            "tensor_close: give both rtol and atol, or neither (got rtol only)")
    has_all(located(function() assert.tensor_close(a, b, { rtol = -1, atol = 0 }) end),
            "tensor_close: rtol must be a number >= 0, got -1")
  end)

  it("matches equal infinities, never NaN unless equal_nan", function()
    local inf = 1 / 0
    assert.tensor_close(ddp.tensor({ inf, -inf, 1 }), ddp.tensor({ inf, -inf, 1 }))
    assert.is_not.tensor_close(ddp.tensor({ inf }), ddp.tensor({ -inf }))
    assert.is_not.tensor_close(ddp.tensor({ inf }), ddp.tensor({ 1 }))
    assert.is_not.tensor_close(ddp.tensor({ 1 }), ddp.tensor({ inf }), { rtol = 1, atol = 1 })
    assert.is_not.tensor_close(ddp.tensor({ 1 }), ddp.tensor({ 0 / 0 }))
    assert.is_not.tensor_close(ddp.tensor({ 0 / 0 }), ddp.tensor({ 0 / 0 }))
    assert.tensor_close(ddp.tensor({ 0 / 0 }), ddp.tensor({ 0 / 0 }), { equal_nan = true })
  end)

  it("shows the tolerances, the count and the worst element", function()
    local e = ddp.tensor({ { 1, 2 }, { 3, 4 } }, { dtype = "float64" })
    local a = ddp.tensor({ { 1, 2.5 }, { 3, 4.000001 } }, { dtype = "float64" })
    local msg = failure(function() assert.tensor_close(e, a) end)
    has_all(msg, "Tensors are not close: 2 of 4 elements differ (50%); rtol 1e-07, atol 1e-07",
            "float64 [2, 2], expected and actual",
            "worst at index [0, 1]: expected 2, actual 2.5 (abs diff 0.5, rel diff 0.25)",
            "Expected tensors to be close.")
    assert.truthy(msg:find("^[^\n]*testing_spec%.lua:%d+: Tensors are not close"), msg)
    has_all(failure(function() assert.is_not.tensor_close(e, e) end), "Expected tensors not to be close.")
  end)

  it("compares Lua numbers in tables as float64", function()
    assert.tensor_close({ loss = 0.5, w = ddp.ones(2) }, { loss = 0.5 + 1e-9, w = ddp.ones(2) })
    has_all(failure(function() assert.tensor_close({ loss = 0.5 }, { loss = 0.6 }) end),
            "at loss: expected 0.5, actual 0.59999999999999998")
  end)

  it("is there without luassert, returning the reason", function()
    assert.is_true(testing.tensor_close(ddp.ones(2), ddp.ones(2)))
    local ok, why = testing.tensor_equal(ddp.ones(2), ddp.zeros(2))
    assert.is_false(ok)
    has_all(why, "Tensors are not equal: 2 of 2 elements differ")
  end)
end)

describe("assert.are.same with tensors", function()
  it("compares tensors by value, alone and inside tables", function()
    assert.are.same(ddp.ones(2), ddp.ones(2))
    assert.are.same({ w = ddp.ones(2, 3), list = { ddp.arange(3), 1 } }, { w = ddp.ones(2, 3), list = { ddp.arange(3), 1 } })
    assert.are_not.same(ddp.ones(2), ddp.ones(3))
    assert.are_not.same(ddp.ones(2), ddp.ones(2):double())  -- dtypes too, as tensor_equal
    assert.are_not.same({ w = ddp.ones(2) }, { w = { 1, 1 } })
    local nan, freed = ddp.tensor({ 0 / 0 }), ddp.ones(2)
    freed:free()
    assert.are.same({ nan, freed }, { nan, freed })  -- a tensor is the same as itself
    assert.are_not.same(nan, nan:clone())              -- NaN equals nothing else
  end)

  it("says which key differs and why", function()
    local msg = failure(function()
      assert.are.same({ a = { w = ddp.ones(2) } }, { a = { w = ddp.tensor({ 1, 5 }, { dtype = "float32" }) } })
    end)
    has_all(msg, "at a.w: Tensors are not equal: 1 of 2 elements differ",
            "worst at index [1]: expected 1, actual 5", "Expected objects to be the same.")
  end)

  it("leaves tables without tensors to luassert", function()
    assert.are.same({ 1, { 2 } }, { 1, { 2 } })
    local msg = failure(function() assert.are.same({ 1, { 2 } }, { 1, { 3 } }) end)
    assert.falsy(msg:find("Tensors", 1, true), msg)
    has_all(msg, "Expected objects to be the same.")
  end)
end)

describe("testing.run", function()
  local tmp
  before_each(function() tmp = shell.tempdir() end)
  teardown(shell.cleanup)

  -- Every process of the job is gone and its temporary directory too:
  -- the job's files live in tmp, which names every process it started.
  local function no_strays()
    local left
    for _ = 1, 30 do
      -- "[/]tmp/...": the pattern must not match this shell's own command line
      left = shell.sh("pgrep -f " .. shell.q("[/]" .. tmp:sub(2) .. "/ddplua-run") .. " || true")
      if left == "" then break end
      os.execute("sleep 0.1")
    end
    if left ~= "" then os.execute("pkill -KILL -f " .. shell.q("[/]" .. tmp:sub(2) .. "/ddplua-run")) end
    assert.equals("", left, "stray processes")
    assert.equals("", shell.sh("ls -A " .. shell.q(tmp)), "files left in " .. tmp)
  end

  it("returns each rank's value, tensors included", function()
    local res = testing.run(2, function(scale)
      ddp.init()  -- ddp: an upvalue that is a module, required on the ranks
      local t = ddp.ones(3) * (ddp.rank() + 1) * scale
      return { rank = ddp.rank(), world = ddp.world_size(), t = t, sum = ddp.all_reduce(t:clone()) }
    end, { args = { 2 }, tmpdir = tmp })
    assert.equals(2, res.n)
    for r = 0, 1 do
      assert.equals(r, res[r + 1].rank)
      assert.equals(2, res[r + 1].world)
      assert.tensor_equal(ddp.full({ 3 }, 2 * (r + 1), { dtype = "float32" }), res[r + 1].t)
      assert.tensor_equal({ 6, 6, 6 }, res[r + 1].sum)
    end
    no_strays()
  end)

  it("runs code and files, gives opts.args as ..., keeps what ranks print", function()
    local res = testing.run(3, "local a, b, c = ...; print('rank', os.getenv('RANK')); return {a, b, c}",
                            { args = { 1, nil, "x", n = 3 }, tmpdir = tmp, env = { T_FLAG = "on" } })
    assert.same({ 1, nil, "x" }, res[3])
    assert.equals("rank\t2\n", res.output[3])
    local file = shell.tempfile("return os.getenv('T_FLAG') .. os.getenv('RANK')")
    os.rename(file, file .. ".lua")
    shell.track(file .. ".lua")
    res = testing.run(2, file .. ".lua", { env = { T_FLAG = "on" }, tmpdir = tmp })
    assert.same({ "on0", "on1", n = 2, output = { "", "" } }, res)
    no_strays()
  end)

  it("copies plain upvalues in and requires modules and their fields", function()
    local cfg, floor, nn = { k = 3 }, math.floor, ddp.nn
    local res = testing.run(1, function() return { cfg.k, floor(2.5), nn.Linear ~= nil } end, { tmpdir = tmp })
    assert.same({ 3, 2, true }, res[1])
    local f = function() end
    has_all(located(function() testing.run(1, function() return f() end, { tmpdir = tmp }) end),
            "testing.run: the function's upvalue 'f' is a function the ranks cannot get")
    no_strays()
  end)

  it("raises an error on one rank as 'rank r: message' at the spec's line", function()
    local msg = located(function()
      testing.run(2, function()
        if ddp.rank() == 1 then error("the loss is NaN") end
        return 1
      end, { tmpdir = tmp })
    end)
    assert.truthy(msg:find("^[^\n]*testing_spec%.lua:%d+: rank 1: [^\n]*testing_spec%.lua:%d+: the loss is NaN$"), msg)
    -- luassert's assert works on the ranks, and its failure comes back
    msg = located(function()
      testing.run(2, function() assert.tensor_equal(ddp.zeros(2), ddp.ones(2) * ddp.rank()) end, { tmpdir = tmp })
    end)
    has_all(msg, "rank 1: ", "Tensors are not equal: 2 of 2 elements differ")
    no_strays()
  end)

  it("names a rank that dies without an error", function()
    has_all(located(function()
      testing.run(2, "io.stderr:write('going\\n'); if os.getenv('RANK') == '1' then os.exit(3) end; return 1", { tmpdir = tmp })
    end), "rank 1: failed with exit code 3 before returning", "[1] going")
    has_all(located(function()
      testing.run(2, "if os.getenv('RANK') == '0' then os.exit(0) end; return 1", { tmpdir = tmp })
    end), "testing.run: rank 0 of 2 exited without returning (os.exit?)")
    no_strays()
  end)

  -- A rank SIGKILLed at once (what the out-of-memory killer sends) was told
  -- as "timed out after 30 s": the launcher's exit code 137 read as
  -- timeout's.  It is a death, named with its signal.
  it("names a rank killed by SIGKILL as such, not as a timeout", function()
    local t0 = os.time()
    local msg = located(function()
      testing.run(2, "io.stderr:write('before\\n'); if os.getenv('RANK') == '1' then "
                     .. "os.execute('kill -9 $PPID') end; return 1", { timeout = 30, tmpdir = tmp })
    end)
    has_all(msg, "rank 1: failed with signal SIGKILL (SIGKILL: the out-of-memory killer's signal, or a kill -9) "
                 .. "before returning", "[1] before")
    assert.falsy(msg:find("timed out", 1, true), msg)
    assert.truthy(os.time() - t0 <= 10, "took " .. (os.time() - t0) .. " s")
    no_strays()
  end)

  -- The docs promise every process of the job has ended when run returns;
  -- one that left its worker's process group (setsid) used to stay.
  it("leaves no process behind, a setsid one included", function()
    local mark = tmp .. "/setsid_mark"
    local res = testing.run(2, ("os.execute('setsid sh -c \"sleep 60; touch %s\" >/dev/null 2>&1 &'); "
                                .. "return 1"):format(mark), { tmpdir = tmp })
    assert.equal(1, res[1])
    local left = ""
    for _ = 1, 20 do
      left = shell.sh("pgrep -f " .. shell.q("[s]leep 60; touch " .. mark) .. " || true")
      if left == "" then break end
      os.execute("sleep 0.1")
    end
    if left ~= "" then os.execute("pkill -KILL -f " .. shell.q("[s]leep 60; touch " .. mark)) end
    assert.equal("", left, "the setsid child outlived the job")
    no_strays()
  end)

  it("stops at the timeout, naming the ranks that did not finish", function()
    local t0 = os.time()
    local msg = located(function()
      testing.run(3, function()
        io.stderr:write("waiting\n")
        if ddp.rank() == 1 then while true do end end
        return 1
      end, { timeout = 2, tmpdir = tmp })
    end)
    has_all(msg, "testing.run: timed out after 2 s; rank 1 of 3 did not finish", "[1] waiting")
    assert.truthy(os.time() - t0 <= 6, "took " .. (os.time() - t0) .. " s")
    no_strays()
  end)

  it("runs its own job inside another job's or SLURM's variables", function()
    for k, v in pairs { RANK = "3", WORLD_SIZE = "8", MASTER_PORT = "1", SLURM_JOB_NUM_NODES = "2", SLURM_JOB_ID = "77" } do
      ffi.C.setenv(k, v, 1)
    end
    local ok, res = pcall(testing.run, 2, "return os.getenv('RANK') .. '/' .. os.getenv('WORLD_SIZE')", { tmpdir = tmp })
    for _, k in ipairs { "RANK", "WORLD_SIZE", "MASTER_PORT", "SLURM_JOB_NUM_NODES", "SLURM_JOB_ID" } do ffi.C.unsetenv(k) end
    assert(ok, res)
    assert.same({ "0/2", "1/2" }, { res[1], res[2] })
    no_strays()
  end)

  it("finds the program: $DDPLUA first", function()
    assert.truthy(testing.program():match("ddplua$"))
    ffi.C.setenv("DDPLUA", "/nonexistent/ddplua", 1)
    local program = testing.program()
    local ok, err = pcall(testing.run, 1, "return 1", { tmpdir = tmp })
    ffi.C.unsetenv("DDPLUA")
    assert.equals("/nonexistent/ddplua", program)
    assert.is_false(ok)
    has_all(err, "/nonexistent/ddplua")
    no_strays()
  end)

  it("refuses bad arguments at the spec's line", function()
    has_all(located(function() testing.run(0, "return 1") end), "testing.run: the number of ranks must be a whole number >= 1, got 0")
    has_all(located(function() testing.run(1, "return 1", { timeout = "5" }) end), "testing.run: timeout must be a number")
    has_all(located(function() testing.run(1, "return 1", { nproc = 2 }) end), "testing.run: unknown option \"nproc\"")
    has_all(located(function() testing.run(1, "return (") end), "testing.run: the chunk does not compile")
    has_all(located(function() testing.run(1, "missing.lua") end), "testing.run: cannot open missing.lua")
  end)
end)
