-- tests/trace_spec.lua: one timeline of every rank, through real jobs --
-- `ddplua --trace DIR` on a 2-rank DDP run (both rows, module spans by
-- path, bucket all-reduces overlapping backward, the ranks' steps on one
-- clock, a checkpoint save), ddp.trace.start/stop around a few steps with
-- C ops, its errors, and `ddplua trace DIR` on copied files.
local jobs = require "helpers.jobs"
local shell = require "helpers.shell"
local json = require "ddp.data.json"
local q, slurp = jobs.q, jobs.slurp

local function has(s, text) assert.truthy(s:find(text, 1, true), "no «" .. text .. "» in:\n" .. s) end

-- the complete spans ("X") of a merged trace, and its metadata
local function read_trace(path)
  local t = json.decode(slurp(path), path)
  local spans, meta = {}, {}
  for _, e in ipairs(t.traceEvents) do
    if e.ph == "X" then spans[#spans + 1] = e else meta[#meta + 1] = e end
  end
  return spans, meta
end

local function where(spans, f)
  local out = {}
  for _, e in ipairs(spans) do if f(e) then out[#out + 1] = e end end
  return out
end

local function overlap(a, b) return a.ts < b.ts + b.dur and b.ts < a.ts + a.dur end
local function ends(e) return e.ts + e.dur end

-- a DDP model of 4 Linear layers in 4 buckets of 0.5 MB
local MODEL = [[
local nn, data = ddp.nn, ddp.data
ddp.init()
ddp.manual_seed(0)
local net = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 512),
                          nn.ReLU(), nn.Linear(512, 10))
local model = ddp.DDP(net, {bucket_cap_mb = 0.5, first_bucket_mb = 0.5})
local opt = ddp.optim.SGD(model:parameters(), {lr = 0.01})
-- batches of 512, so the backward after bucket 1's launch lasts several
-- milliseconds: on 2 cores a communication thread may wait that long for a CPU
local x, y = ddp.randn(8192, 256), ddp.randint(0, 10, {8192})
local ds = data.TensorDataset(x, y)
local loader = data.DataLoader(ds, {batch_size = 512, sampler = data.DistributedSampler(ds)})
]]

describe("the trace", function()
  after_each(jobs.no_strays)
  teardown(jobs.cleanup)

  it("merges a 2-rank DDP run into one timeline whose bucket all-reduces overlap backward", function()
    local s = jobs.script(MODEL .. [[
for _, xb, yb in loader:iter() do
  opt:zero_grad()
  nn.functional.cross_entropy(model(xb), yb):backward()
  opt:step()
end
ddp.save_checkpoint(os.getenv("CKPT"), {model = model, optimizer = opt})
]], "traced")
    local dir = shell.tempdir()
    -- an earlier run's file in the same folder is left out
    jobs.sh("mkdir " .. q(dir .. "/tr") .. " && echo '[]' > " .. q(dir .. "/tr/rank5.json")
            .. " && touch -d 2020-01-01 " .. q(dir .. "/tr/rank5.json"))
    local _, err, rc = jobs.run("--nproc 2 --trace " .. q(dir .. "/tr") .. " " .. q(s), "CKPT=" .. dir .. "/c.safetensors", 120)
    assert.equals(0, rc, err)
    has(err, "ddplua: trace: left out 1 rank file in " .. dir .. "/tr from an earlier run")
    has(err, "ddplua: trace of 2 ranks: " .. dir .. "/tr/trace.json (open it in https://ui.perfetto.dev")
    local spans, meta = read_trace(dir .. "/tr/trace.json")
    -- one process row per rank, named
    local names = {}
    for _, e in ipairs(meta) do
      if e.name == "process_name" then names[e.pid] = e.args.name end
    end
    assert.truthy(names[0] and names[0]:find("^rank 0 %("), tostring(names[0]))
    assert.truthy(names[1] and names[1]:find("^rank 1 %("), tostring(names[1]))
    for pid = 0, 1 do
      local mine = where(spans, function(e) return e.pid == pid end)
      -- forward and backward per module, by path
      for _, m in ipairs({ "0: Linear", "1: ReLU", "6: Linear" }) do
        assert.truthy(#where(mine, function(e) return e.name == m and e.cat == "forward" end) >= 8, m)
        assert.truthy(#where(mine, function(e) return e.name == m and e.cat == "backward" end) >= 8, m)
      end
      assert.equals(8, #where(mine, function(e) return e.cat == "step" end))
      assert.truthy(#where(mine, function(e) return e.cat == "data" end) >= 8)
      assert.truthy(#where(mine, function(e) return e.cat == "optimizer" end) >= 8)
      assert.equals(1, #where(mine, function(e) return e.cat == "checkpoint" end))
      -- the all-reduce of bucket 1 (the last layers' gradients) runs while
      -- the first layers' backward still does: it starts before module 0's
      -- backward ends, inside the whole model's backward
      local b1 = where(mine, function(e)
        return e.cat == "communication" and e.args.note and e.args.note:find("^DDP bucket 1 of") ~= nil
      end)
      local root = where(mine, function(e) return e.cat == "backward" and e.name == "Sequential" end)
      local m0 = where(mine, function(e) return e.cat == "backward" and e.name == "0: Linear" end)
      assert.equals(8, #b1)
      assert.equals(8, #root)
      -- (most steps, not all: on 2 cores, 2 ranks' main threads can keep a
      -- communication thread off the CPU until a backward ends)
      local overlapped, inside = 0, 0
      for k = 1, 8 do
        assert.truthy(b1[k].ts >= root[k].ts, "bucket 1's all-reduce before backward, step " .. k)
        if overlap(b1[k], root[k]) then inside = inside + 1 end
        if b1[k].ts < ends(m0[k]) then overlapped = overlapped + 1 end
      end
      assert.truthy(inside >= 6, ("rank %d: bucket 1's all-reduce started inside backward in %d of 8 steps")
        :format(pid, inside))
      assert.truthy(overlapped >= 6, ("rank %d: bucket 1 started before module 0's backward ended in %d of 8 steps")
        :format(pid, overlapped))
    end
    -- one clock: step k of rank 0 and step k of rank 1 overlap (each ends
    -- with the same all-reduce)
    local st0 = where(spans, function(e) return e.pid == 0 and e.cat == "step" end)
    local st1 = where(spans, function(e) return e.pid == 1 and e.cat == "step" end)
    for k = 2, 8 do assert.truthy(overlap(st0[k], st1[k]), "step " .. k .. " of the two ranks apart") end
  end)

  it("records a few steps between ddp.trace.start and stop, with C ops, and refuses misuse", function()
    local s = jobs.script(MODEL .. [[
local dir = os.getenv("TRACE_DIR")
local function refused(f, ...)
  local ok, e = pcall(f, ...)
  assert(not ok, "accepted")
  return tostring(e)
end
print("stop first: " .. refused(ddp.trace.stop))
print("bad option: " .. refused(ddp.trace.start, dir, {opss = true}))
print("bad dir: " .. refused(ddp.trace.start, os.getenv("A_FILE") .. "/sub"))
local step = 0
for _, xb, yb in loader:iter() do
  step = step + 1
  if step == 5 then ddp.trace.start(dir, {ops = true}) end
  if step == 6 and ddp.rank() == 0 then print("twice: " .. refused(ddp.trace.start, dir)) end
  opt:zero_grad()
  nn.functional.cross_entropy(model(xb), yb):backward()
  opt:step()
  if step == 7 then print("wrote " .. ddp.trace.stop()) end
end
]], "window")
    local dir = shell.tempdir()
    local file = dir .. "/a_file"
    assert(io.open(file, "w")):close()
    local out, err, rc = jobs.run("--nproc 2 " .. q(s), "TRACE_DIR=" .. dir .. "/win A_FILE=" .. file, 120)
    assert.equals(0, rc, err)
    has(out, "stop first: ")
    has(out, "ddp.trace.stop: no trace is on (ddp.trace.start(dir) starts one)")
    has(out, "ddp.trace.start: unknown option \"opss\" (expected ops or max_events)")
    has(out, "ddp.trace.start: cannot make the trace folder " .. file .. ": exists and is not a folder")
    has(out, "twice: ")
    has(out, "ddp.trace.start: a trace is on already (into " .. dir .. "/win); call ddp.trace.stop() first")
    has(out, "wrote " .. dir .. "/win/rank0.json")
    -- the launcher merged the folder the ranks named
    has(err, "ddplua: trace of 2 ranks: " .. dir .. "/win/trace.json")
    local spans = read_trace(dir .. "/win/trace.json")
    local steps = where(spans, function(e) return e.cat == "step" end)
    local seen = {}
    for _, e in ipairs(steps) do seen[#seen + 1] = e.pid .. ":" .. e.name end
    table.sort(seen)
    assert.same({ "0:step 5", "0:step 6", "0:step 7", "1:step 5", "1:step 6", "1:step 7" }, seen)
    assert.truthy(#where(spans, function(e) return e.cat == "op" and e.name == "f_linear" end) >= 2 * 3 * 4)
    assert.truthy(#where(spans, function(e) return e.cat == "autograd" and e.name == "LinearBackward" end) >= 2 * 3 * 4)
  end)

  it("merges rank files copied from a cluster with `ddplua trace DIR`", function()
    local dir = shell.tempdir()
    local function put(name, text)
      local f = assert(io.open(dir .. "/" .. name, "w"))
      f:write(text)
      f:close()
    end
    put("rank0.json", '[\n{"name":"step 1","cat":"step","ph":"X","ts":1,"dur":2,"pid":0,"tid":0}\n]\n')
    put("rank1.json", '[\n{"name":"step 1","cat":"step","ph":"X","ts":1.5,"dur":2,"pid":1,"tid":0}\n]\n')
    put("rank3.json", '[\n{"name":"step 1","cat":"step","ph":"X","ts":1')  -- cut short
    local out = jobs.sh(q(jobs.ddplua) .. " trace " .. q(dir) .. " --world 4 2>&1; echo rc=$?")
    has(out, dir .. "/rank3.json is not a JSON array of events (cut short?); left out")
    has(out, "trace of 2 ranks: " .. dir .. "/trace.json (open it in https://ui.perfetto.dev or chrome://tracing); "
             .. "no file from rank 2, 3")
    has(out, "rc=0")
    local spans = read_trace(dir .. "/trace.json")
    assert.equals(2, #spans)
    local empty = shell.tempdir()
    out = jobs.sh(q(jobs.ddplua) .. " trace " .. q(empty) .. " 2>&1; echo rc=$?")
    has(out, "trace: no rank files (rank<N>.json) in " .. empty)
    has(out, "rc=1")
  end)
end)
