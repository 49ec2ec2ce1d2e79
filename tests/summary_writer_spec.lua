-- ddp.SummaryWriter (lua/ddp/summary/): the event file format against the
-- tensorboard package's own bytes (tests/golden/make_summary.py), the
-- histogram buckets against PyTorch's make_histogram, metrics.jsonl, and
-- real jobs of 2 ranks whose files TensorBoard's reader reads back
-- (tests/helpers/tb_read.py, in the venv of scripts/tb-venv.sh).
local ddp = require "ddp"
local jobs = require "helpers.jobs"
local shell = require "helpers.shell"
local json = require "ddp.data.json"
local tfevents = require "ddp.summary.tfevents"
local histogram = require "ddp.summary.histogram"
local summary = require "ddp.summary"
local cases = require "golden.summary_cases"
local ffi = require "ffi"
local q, sh, slurp = jobs.q, jobs.sh, jobs.slurp

local function unhex(h) return (h:gsub("%x%x", function(x) return string.char(tonumber(x, 16)) end)) end
local function hex(s) return (s:gsub(".", function(c) return ("%02x"):format(c:byte()) end)) end

-- The files of a directory matching a Lua pattern, sorted.
local function ls(dir, pat)
  local out = {}
  for name in sh("ls -1 " .. q(dir) .. " 2>/dev/null"):gmatch("[^\n]+") do
    if not pat or name:match(pat) then out[#out + 1] = name end
  end
  return out
end

local function jsonl(path)
  local out = {}
  for line in (slurp(path) or ""):gmatch("[^\n]+") do out[#out + 1] = json.decode(line) end
  return out
end

-- The tensorboard venv's python, or nil and why not (python3 missing is
-- the one reason to skip; a failing venv is a failure).
local tb_python, tb_why
local function tensorboard_python()
  if tb_python or tb_why then return tb_python, tb_why end
  if sh("command -v python3 >/dev/null 2>&1 && echo yes") == "" then
    tb_why = "SKIP: python3 is missing here, so tensorboard's reader cannot run"
    return nil, tb_why
  end
  local out = sh("bash scripts/tb-venv.sh 2>&1")
  tb_python = out:match("([^\n]*/bin/python)%s*$")
  assert(tb_python, "scripts/tb-venv.sh failed:\n" .. out)
  return tb_python
end

-- What TensorBoard's reader sees in logdir (tests/helpers/tb_read.py).
local function tb_read(logdir)
  local py = tensorboard_python()
  local errf = shell.tempname()
  local out = sh(q(py) .. " tests/helpers/tb_read.py " .. q(logdir) .. " 2>" .. q(errf))
  local ok, v = pcall(json.decode, out)
  assert(ok, "tb_read.py: " .. out .. (slurp(errf) or ""))
  return v, slurp(errf)  -- stderr: the reader's warnings (its purges)
end

local function steps_of(points)
  local s = {}
  for i, p in ipairs(points) do s[i] = p[1] end
  return s
end

local function range(a, b)
  local r = {}
  for i = a, b do r[#r + 1] = i end
  return r
end

local function f32(x) return tonumber(ffi.cast("float", x)) end

describe("ddp.summary.tfevents", function()
  it("computes CRC32C and its masked form as tensorboard does", function()
    assert.equal(0xE3069283, tfevents.crc32c("123456789"))
    for _, c in ipairs(cases.crc) do
      local s = unhex(c.hex)
      assert.equal(c.crc, tfevents.crc32c(s), c.hex)
      assert.equal(c.masked, tfevents.masked_crc32c(s), c.hex)
    end
  end)

  it("frames a record as tensorboard's RecordWriter", function()
    assert.equal(cases.record.framed, hex(tfevents.record(unhex(cases.record.data))))
    assert.equal(8 + 4 + 0 + 4, #tfevents.record(""))
  end)

  it("encodes each Event as the protobuf classes serialize it", function()
    local env = setmetatable({ tfevents = tfevents }, { __index = _G })
    assert.truthy(#cases.events >= 10)
    for _, c in ipairs(cases.events) do
      local f = assert(loadstring("return " .. c.lua))
      setfenv(f, env)
      assert.equal(c.bytes, hex(f()), c.name)
    end
  end)

  it("writes varints as protobuf does, negative ones in ten bytes", function()
    assert.equal("00", hex(tfevents.varint(0)))
    assert.equal("7f", hex(tfevents.varint(127)))
    assert.equal("8001", hex(tfevents.varint(128)))
    assert.equal("ac02", hex(tfevents.varint(300)))
    assert.equal("ffffffffffffffffff01", hex(tfevents.varint(-1)))
    assert.equal("fdffffffffffffffff01", hex(tfevents.varint(-3)))
    assert.equal("94b4e4f4cb03", hex(tfevents.varint(123456789012)))
  end)
end)

describe("ddp.summary.histogram", function()
  it("makes PyTorch's buckets (tensorflow edges, n equal bins, given edges)", function()
    assert.truthy(#cases.histograms >= 7)
    for _, c in ipairs(cases.histograms) do
      local t = ddp.tensor(c.values, { dtype = "float64" })
      local h = histogram.make(ffi.cast("double *", t:data_ptr()), #c.values, c.bins)
      for _, k in ipairs { "min", "max", "num", "sum", "sum_squares" } do
        assert.equal(c[k], h[k], c.name .. " " .. k)
      end
      assert.same(c.bucket_limit, h.bucket_limit, c.name)
      assert.same(c.bucket, h.bucket, c.name)
      local n = 0
      for _, k in ipairs(h.bucket) do n = n + k end
      if c.bins == "tensorflow" or type(c.bins) == "number" then assert.equal(#c.values, n, c.name) end
    end
  end)

  it("refuses an empty tensor, NaN and bad bins, naming the problem", function()
    local function make(vals, bins)
      local t = ddp.tensor(vals, { dtype = "float64" })
      return histogram.make(ffi.cast("double *", t:data_ptr()), t:numel(), bins)
    end
    assert.error_matches(function() histogram.make(nil, 0) end, "add_histogram: the tensor has no element")
    assert.error_matches(function() make({ 1, 0 / 0 }) end, "add_histogram: the values must be finite, element 2 is nan")
    assert.error_matches(function() make({ 1, 2 }, 0) end, "bins must be \"tensorflow\", a number of bins")
    assert.error_matches(function() make({ 1, 2 }, { 3, 1 }) end, "bins must be increasing numbers, got 1 at 2")
    assert.error_matches(function() make({ 1, 2 }, { 5, 6 }) end, "no value lies within the bins")
  end)
end)

describe("metrics.jsonl helpers", function()
  it("write numbers that read back exactly, and NaN as Python's json does", function()
    local jn = summary._json_num
    assert.equal("3", jn(3))
    assert.equal("0.1", jn(0.1))
    assert.equal(1 / 3, tonumber(jn(1 / 3)))
    assert.equal("NaN", jn(0 / 0))
    assert.equal("Infinity", jn(math.huge))
    assert.equal("-Infinity", jn(-math.huge))
  end)

  it("keep the lines before purge_step and drop a torn last line", function()
    local kept = summary._jsonl_kept
    local text = '{"tag":"a","step":1,"value":1}\n{"tag":"a","step":5,"value":2}\n{"tag":"a","step":9,"value":3}\n'
    assert.is_nil(kept(text, nil))
    assert.is_nil(kept(text, 10))
    assert.equal('{"tag":"a","step":1,"value":1}\n', kept(text, 5))
    assert.equal(text, kept(text .. '{"tag":"a","st', nil))
    assert.equal("", kept(text, 0))
  end)
end)

describe("ddp.SummaryWriter in one process", function()
  teardown(shell.cleanup)

  it("writes an event file and metrics.jsonl in logdir, and ddp.clock/ddp.time tell the time", function()
    local dir = shell.tempdir() .. "/logs/exp"
    local t0, c0 = ddp.time(), ddp.clock()
    local w = ddp.SummaryWriter(dir, { flush_secs = 1000 })
    assert.equal(dir, w:get_logdir())
    w:add_scalar("loss", 0.25, 3)
    w:add_scalar("loss", ddp.tensor({ 0.125 }), 4, { walltime = 1700000000.5 })
    w:add_scalar("lr", 1e-3, 4, { reduce = "mean" })  -- a world of one: no collective
    w:close()
    w:close()
    local names = ls(dir, "^events")
    assert.equal(1, #names)
    assert.truthy(names[1]:match("^events%.out%.tfevents%.%d%d%d%d%d%d%d%d%d%d%.[^.]+%.%d+%.%d+$"), names[1])
    local pts = jsonl(dir .. "/metrics.jsonl")
    assert.equal(3, #pts)
    assert.same({ "loss", 3, 0.25 }, { pts[1].tag, pts[1].step, pts[1].value })
    assert.same({ "loss", 4, 0.125, 1700000000.5 }, { pts[2].tag, pts[2].step, pts[2].value, pts[2].wall_time })
    assert.same({ "lr", 4, 1e-3 }, { pts[3].tag, pts[3].step, pts[3].value })
    assert.truthy(pts[1].wall_time >= t0 - 1 and pts[1].wall_time <= ddp.time() + 1, tostring(pts[1].wall_time))
    assert.truthy(math.abs(ddp.time() - os.time()) < 2)
    assert.truthy(ddp.clock() >= c0)
    -- the file opens with brain.Event:2, framed records all the way
    local bytes = slurp(dir .. "/" .. names[1])
    local pos, n = 1, 0
    while pos <= #bytes do
      local len = tonumber(ffi.cast("uint64_t *", ffi.cast("const char *", bytes) + pos - 1)[0])
      local data = bytes:sub(pos + 12, pos + 11 + len)
      assert.equal(tfevents.record(data), bytes:sub(pos, pos + 15 + len))
      if n == 0 then assert.truthy(data:find("brain.Event:2", 1, true)) end
      pos, n = pos + 16 + len, n + 1
    end
    assert.equal(4, n)
    assert.error_matches(function() w:add_scalar("x", 1, 1) end, "add_scalar: the writer is closed")
  end)

  it("flushes at flush_secs, at max_queue, and when collected", function()
    local dir = shell.tempdir()
    local w = ddp.SummaryWriter(dir, { max_queue = 3 })
    w:add_scalar("a", 1, 1)
    w:add_scalar("a", 2, 2)
    assert.equal(0, #jsonl(dir .. "/metrics.jsonl"))
    w:add_scalar("a", 3, 3)
    assert.equal(3, #jsonl(dir .. "/metrics.jsonl"))
    w:add_scalar("a", 4, 4)
    w = nil  -- luacheck: ignore
    collectgarbage()
    collectgarbage()
    assert.equal(4, #jsonl(dir .. "/metrics.jsonl"))
    local dir2 = shell.tempdir()
    local w2 = ddp.SummaryWriter(dir2, { flush_secs = 0.05 })
    w2:add_scalar("b", 1, 1)
    assert.equal(0, #jsonl(dir2 .. "/metrics.jsonl"))
    os.execute("sleep 0.1")
    w2:add_scalar("b", 2, 2)
    assert.equal(2, #jsonl(dir2 .. "/metrics.jsonl"))
    w2:close()
  end)

  it("flushes at the end of the program without close()", function()
    local dir = shell.tempdir()
    local s = jobs.script(("local w = ddp.SummaryWriter(%q)\nfor i = 1, 5 do w:add_scalar('x', i, i) end\n"):format(dir),
                          "summary_exit")
    local _, err, rc = jobs.run(q(s))
    assert.equal(0, rc, err)
    assert.equal(5, #jsonl(dir .. "/metrics.jsonl"))
  end)

  it("refuses bad arguments, naming them", function()
    local dir = shell.tempdir()
    assert.error_matches(function() ddp.SummaryWriter(42) end, "SummaryWriter: logdir must be a non%-empty string, got 42")
    assert.error_matches(function() ddp.SummaryWriter(dir, { flush = 1 }) end,
                         "SummaryWriter: unknown option \"flush\" %(expected filename_suffix, flush_secs, max_queue, purge_step%)")
    assert.error_matches(function() ddp.SummaryWriter(dir, { purge_step = -1 }) end, "purge_step must be an integer >= 0")
    assert.error_matches(function() ddp.SummaryWriter(dir, { flush_secs = 0 }) end, "flush_secs must be a number of seconds > 0")
    local w = ddp.SummaryWriter(dir)
    assert.error_matches(function() w:add_scalar("", 1, 1) end, "add_scalar: tag must be a non%-empty string")
    assert.error_matches(function() w:add_scalar("a", "x", 1) end, "add_scalar: value must be a number or a one%-element tensor")
    assert.error_matches(function() w:add_scalar("a", ddp.ones(2), 1) end, "value is a tensor of 2 elements")
    assert.error_matches(function() w:add_scalar("a", 1, 1.5) end, "add_scalar: step must be an integer, got 1.5")
    assert.error_matches(function() w:add_scalar("a", 1, 1, { reduce = "avg" }) end,
                         'add_scalar: reduce must be "mean", "sum", "max" or "min", got "avg"')
    assert.error_matches(function() w:add_scalars("a", {}, 1) end, "add_scalars: the table of values is empty")
    assert.error_matches(function() w:add_histogram("h", "x", 1) end, "add_histogram: values must be a tensor or a list")
    assert.error_matches(function() w:add_text("t", 5, 1) end, "add_text: text must be a string, got 5")
    w:close()
  end)

  it("drops a torn last line of metrics.jsonl, and tensorboard still reads every whole record", function()
    local py, why = tensorboard_python()
    if not py then pending(why) return end
    local dir = shell.tempdir()
    local w = ddp.SummaryWriter(dir)
    for i = 1, 3 do w:add_scalar("x", i, i) end
    w:close()
    -- a crash mid-write: half a record and half a line at the ends
    local ev = dir .. "/" .. ls(dir, "^events")[1]
    local f = assert(io.open(ev, "ab"))
    f:write(tfevents.record(tfevents.event { wall_time = 1, step = 4 }):sub(1, 10))
    f:close()
    f = assert(io.open(dir .. "/metrics.jsonl", "ab"))
    f:write('{"tag":"x","st')
    f:close()
    os.execute("sleep 1")  -- a new second: a new file name for sure
    w = ddp.SummaryWriter(dir)
    w:add_scalar("x", 4, 4)
    w:close()
    local pts = jsonl(dir .. "/metrics.jsonl")
    assert.equal(4, #pts)
    assert.same({ 1, 2, 3, 4 }, { pts[1].step, pts[2].step, pts[3].step, pts[4].step })
    local tb = tb_read(dir)
    assert.same({ { 1, 1 }, { 2, 2 }, { 3, 3 }, { 4, 4 } }, tb[""].scalars.x)
  end)
end)

-- The job: every rank logs; rank r's own value at step s is (r + 1) * s
-- (+ 100 in the resumed run), so rank 0's, the mean, the sum, the max
-- and the min are all different numbers.
local JOB = [[
local dir, phase = arg[1], arg[2]
local resumed = phase == "resume"
ddp.init()
local r = ddp.rank()
local w = ddp.SummaryWriter(dir, { purge_step = resumed and 5 or nil, max_queue = resumed and 4 or 1000 })
local off = resumed and 100 or 0
for step = resumed and 5 or 0, resumed and 9 or 7 do
  local v = (r + 1) * step + off
  w:add_scalar("plain", v + 0.5, step)
  w:add_scalar("mean", v, step, { reduce = "mean" })
  w:add_scalar("sum", ddp.tensor({ v }), step, { reduce = "sum" })
  w:add_scalar("max", r + step, step, { reduce = "max" })
  w:add_scalar("min", r + step, step, { reduce = "min" })
  w:add_scalars("loss", { train = v, val = -v }, step, { reduce = "mean" })
end
if resumed then
  w:add_text("notes", "resumed on rank " .. r, 6)
  w:close()
else
  w:add_histogram("weights", ddp.arange(100):float() * (r + 1) - 20, 1)
  w:add_histogram("equal", ddp.arange(10), 1, { bins = 4 })
  w:add_text("notes", "rank " .. r .. " says h\u{e9}llo *markdown*", 2)
  -- no close: the end of the program writes what is pending
end
print("done " .. r)
]]

describe("ddp.SummaryWriter in a job of 2 ranks", function()
  after_each(jobs.no_strays)
  teardown(shell.cleanup)

  local function job(dir, phase)
    local s = jobs.script(JOB, "summary_job")
    local out, err, rc = jobs.run("--nproc 2 " .. q(s) .. " " .. q(dir) .. " " .. phase, "", 90)
    assert.equal(0, rc, out .. err)
    return out
  end

  it("writes once, on rank 0; reduced values; TensorBoard reads them back; a resume supersedes", function()
    local py, why = tensorboard_python()
    local dir = shell.tempdir() .. "/run"
    job(dir, "first")
    -- one event file (rank 0's) in logdir and in each add_scalars run
    assert.equal(1, #ls(dir, "^events"))
    assert.same({ "loss_train", "loss_val" }, ls(dir, "^loss_"))
    assert.equal(1, #ls(dir .. "/loss_train", "^events"))
    local pts = jsonl(dir .. "/metrics.jsonl")
    assert.equal(8 * 7, #pts)  -- 8 steps x (5 tags + 2 runs)
    local function check_points(got, lo, hi, off)
      local by = {}
      for _, p in ipairs(got) do
        local key = p.tag .. (p.run and ("/" .. p.run) or "")
        by[key] = by[key] or {}
        by[key][#by[key] + 1] = p
      end
      for step = lo, hi do
        local o = (step >= 5 and off or 0)
        local want = { plain = step + o + 0.5, mean = 1.5 * step + o, sum = 3 * step + 2 * o, max = step + 1, min = step,
                       ["loss/loss_train"] = 1.5 * step + o, ["loss/loss_val"] = -(1.5 * step + o) }
        for key, v in pairs(want) do
          local p = by[key][step - lo + 1]
          assert.same({ step, v }, { p.step, p.value }, key)
        end
      end
      for _, list in pairs(by) do assert.equal(hi - lo + 1, #list) end
    end
    check_points(pts, 0, 7, 0)
    if not py then pending(why) return end
    local tb = tb_read(dir)
    local function check_tb(run, tag, lo, hi, f)
      local got = tb[run].scalars[tag]
      assert.same(range(lo, hi), steps_of(got), run .. " " .. tag)  -- each step once
      for i, p in ipairs(got) do assert.equal(f32(f(p[1])), p[2], run .. " " .. tag .. " at " .. p[1]) end
    end
    check_tb("", "plain", 0, 7, function(s) return s + 0.5 end)
    check_tb("", "mean", 0, 7, function(s) return 1.5 * s end)
    check_tb("", "sum", 0, 7, function(s) return 3 * s end)
    check_tb("", "max", 0, 7, function(s) return s + 1 end)
    check_tb("", "min", 0, 7, function(s) return s end)
    check_tb("loss_train", "loss", 0, 7, function(s) return 1.5 * s end)
    check_tb("loss_val", "loss", 0, 7, function(s) return -1.5 * s end)
    -- rank 0's histograms: counts sum to numel; rank 0's text, the text plugin's
    local h = tb[""].histograms.weights[1]
    assert.same({ 1, -20, 79, 100, 2950 }, { h.step, h.min, h.max, h.num, h.sum })
    local n = 0
    for _, c in ipairs(h.bucket) do n = n + c end
    assert.equal(100, n)
    assert.equal(#h.bucket, #h.bucket_limit)
    local e = tb[""].histograms.equal[1]
    assert.same({ 0, 9, 10 }, { e.min, e.max, e.num })
    assert.same({ 0, 2.25, 4.5, 6.75, 9 }, e.bucket_limit)
    assert.same({ 0, 3, 2, 2, 3 }, e.bucket)
    assert.same({ { 2, "rank 0 says h\u{e9}llo *markdown*", "text" } }, tb[""].texts["notes/text_summary"])

    -- the resume from step 5: TensorBoard drops the first run's 5..7
    os.execute("sleep 1")
    job(dir, "resume")
    assert.equal(2, #ls(dir, "^events"))
    check_points(jsonl(dir .. "/metrics.jsonl"), 0, 9, 100)  -- rewritten: each point once
    local warnings
    tb, warnings = tb_read(dir)
    -- the reader says it purged the first run's steps 5..7 (15 scalars of the main run)
    assert.truthy(warnings:find("Removing 15 scalars", 1, true), warnings)
    check_tb("", "plain", 0, 9, function(s) return s + 0.5 + (s >= 5 and 100 or 0) end)
    check_tb("", "mean", 0, 9, function(s) return 1.5 * s + (s >= 5 and 100 or 0) end)
    check_tb("", "sum", 0, 9, function(s) return 3 * s + (s >= 5 and 200 or 0) end)
    check_tb("loss_train", "loss", 0, 9, function(s) return 1.5 * s + (s >= 5 and 100 or 0) end)
    check_tb("loss_val", "loss", 0, 9, function(s) return -(1.5 * s + (s >= 5 and 100 or 0)) end)
    assert.same({ { 2, "rank 0 says h\u{e9}llo *markdown*", "text" }, { 6, "resumed on rank 0", "text" } },
                tb[""].texts["notes/text_summary"])
    assert.equal(1, #tb[""].histograms.weights)
    -- the raw records still hold the first run's 5..7, and the START event
    -- at step 5 that supersedes them (PyTorch's purge_step events)
    local raw_plain, starts = 0, {}
    for _, ev in ipairs(tb[""].raw) do
      if ev.kind == "summary" and ev.tags[1] == "plain" then raw_plain = raw_plain + 1 end
      if ev.kind == "session_log" then starts[#starts + 1] = { ev.step, ev.status } end
    end
    assert.equal(8 + 5, raw_plain)
    assert.same({ { 5, 1 } }, starts)
  end)

  it("raises on every rank when the ranks reduce different points", function()
    local s = jobs.script([[
ddp.init()
local w = ddp.SummaryWriter(arg[1])
w:add_scalar("loss", 1, 1, { reduce = "mean" })
w:add_scalar("loss", 1, 2 + ddp.rank(), { reduce = "max" })
print("not reached")
]], "summary_mismatch")
    local out, err, rc = jobs.run("--nproc 2 " .. q(s) .. " " .. q(shell.tempdir()), "", 60)
    assert.are_not.equal(0, rc)
    assert.falsy(out:find("not reached", 1, true), out)
    assert.truthy(err:find("add_scalar: the ranks logged different points in one reduction (rank 0: \"loss\" at step 2)", 1, true)
                  or err:find("add_scalar: the ranks logged different points in one reduction (rank 1: \"loss\" at step 3)", 1, true),
                  err)
  end)
end)
