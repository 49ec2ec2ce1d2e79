-- The trace on CUDA, in real jobs of `ddplua --nproc 2` (on a GPU, or on
-- the emulator that scripts/run-tests.sh turns on): each op's device work
-- is a span on its device's stream row, timed by CUDA events, named by the
-- op with its launcher, in stream order, on the host's clock (a kernel
-- never starts before the module that launched it; on the emulator, where
-- kernels run inside their launch, it lies within it); pinned copies on
-- the copy stream's row; with NCCL, its collectives on the NCCL stream's
-- row; ddp.trace.start/stop keeps exactly the window's kernels, and
-- max_events bounds them with a warning.
local H = require "helpers.cuda"
local jobs = require "helpers.jobs"
local shell = require "helpers.shell"
local json = require "ddp.data.json"
local q = jobs.q

local function env() return H.emulated and "DDPLUA_CUDA_EMU=1" or "" end

local function read_trace(path)
  local t = json.decode(jobs.slurp(path), path)
  local spans, rows = {}, {}
  for _, e in ipairs(t.traceEvents) do
    if e.ph == "X" then
      spans[#spans + 1] = e
    elseif e.name == "thread_name" then
      rows[e.pid .. ":" .. e.tid] = e.args.name
    end
  end
  table.sort(spans, function(a, b) return a.ts < b.ts end)
  return spans, rows
end

local function where(spans, f)
  local out = {}
  for _, e in ipairs(spans) do if f(e) then out[#out + 1] = e end end
  return out
end

local function count(spans, pid, name, kernel)
  return #where(spans, function(e)
    return e.pid == pid and e.cat == "cuda" and e.name == name and e.args.kernel == kernel
  end)
end

-- a DDP model of 2 Linear layers on the rank's device, STEPS steps
local MODEL = [[
local nn = ddp.nn
ddp.init()
local dev = ddp.device()
ddp.manual_seed(0)
local net = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)):to(dev)
local model = ddp.DDP(net)
local opt = ddp.optim.SGD(model:parameters(), {lr = 0.01})
local function step()
  local x = ddp.randn(32, 64):pin_memory():to(dev, {non_blocking = true})
  local y = ddp.randint(0, 10, {32}):to(dev)
  opt:zero_grad()
  nn.functional.cross_entropy(model(x), y):backward()
  opt:step()
end
print("backend " .. ddp.backend())
]]

H.describe("the trace on CUDA", function()
  after_each(jobs.no_strays)
  teardown(jobs.cleanup)

  it("puts each op's device work on its stream's row, in order, on the host's clock", function()
    local s = jobs.script(MODEL .. "for i = 1, 4 do step() end\n", "cudatrace")
    local dir = shell.tempdir()
    local out, err, rc = jobs.run("--nproc 2 --trace " .. q(dir) .. " " .. q(s), env(), 180)
    assert(rc == 0, "job failed (exit " .. tostring(rc) .. "):\n" .. err .. out)
    local nccl = out:find("backend nccl", 1, true) ~= nil
    local spans, rows = read_trace(dir .. "/trace.json")
    for pid = 0, 1 do
      local cuda = where(spans, function(e) return e.pid == pid and e.cat == "cuda" end)
      assert.truthy(#cuda > 0, "rank " .. pid .. ": no CUDA spans")
      local dev = cuda[1].args.device
      assert.truthy(dev:match("^cuda:%d$"), dev)
      local compute = 16 + 4 * tonumber(dev:match("%d"))
      assert.equals(dev .. " compute stream", rows[pid .. ":" .. compute])
      -- named by the op, with the launcher that ran: 2 Linear forwards a
      -- step (addmm through cuBLAS), the loss forward and backward, SGD on
      -- 4 parameters in one launch (the group at once: ddp.optim.foreach)
      assert.equals(8, count(spans, pid, "addmm", "gemm"))
      assert.equals(4, count(spans, pid, "cross_entropy", "cls_forward"))
      assert.equals(4, count(spans, pid, "cross_entropy_backward", "cls_backward"))
      assert.equals(4, count(spans, pid, "sgd", "sgd"))
      -- pinned batches on the copy stream's row
      assert.equals(4, count(spans, pid, "to", "memcpy_async"))
      assert.equals(dev .. " copy stream", rows[pid .. ":" .. (compute + 1)])
      -- one stream runs its work in order: no two spans of a row overlap
      local by_row = {}
      for _, e in ipairs(cuda) do
        assert.truthy(e.dur >= 0, e.name)
        by_row[e.tid] = by_row[e.tid] or {}
        table.insert(by_row[e.tid], e)
      end
      for tid, list in pairs(by_row) do
        for k = 2, #list do
          local a, b = list[k - 1], list[k]
          assert.truthy(a.ts + a.dur <= b.ts + 2, ("rank %d row %d: %s [%.1f, +%.1f] overlaps %s at %.1f")
            :format(pid, tid, a.name, a.ts, a.dur, b.name, b.ts))
        end
      end
      -- the host's clock: the k-th Linear forward on the host launched the
      -- k-th addmm, which cannot start before it (less the anchor's
      -- error); on the emulator the kernel runs inside the launch
      local fwd = where(spans, function(e)
        return e.pid == pid and e.cat == "forward" and (e.name == "0: Linear" or e.name == "2: Linear")
      end)
      local mm = where(cuda, function(e) return e.name == "addmm" end)
      assert.equals(#fwd, #mm)
      for k = 1, #mm do
        assert.truthy(mm[k].ts >= fwd[k].ts - 50, ("rank %d: addmm %d at %.1f before its module's forward at %.1f")
          :format(pid, k, mm[k].ts, fwd[k].ts))
        if H.emulated then
          assert.truthy(mm[k].ts + mm[k].dur <= fwd[k].ts + fwd[k].dur + 50,
                        ("rank %d: addmm %d ends after its module's forward"):format(pid, k))
        end
      end
      -- NCCL's all-reduces on their own stream's row (on a GPU per rank)
      if nccl then
        assert.equals(dev .. " NCCL stream", rows[pid .. ":" .. (compute + 2)])
        assert.truthy(#where(cuda, function(e) return e.args.stream == "NCCL" end) >= 4)
      end
    end
  end)

  it("keeps exactly the kernels of a ddp.trace.start/stop window", function()
    local s = jobs.script(MODEL .. [[
for i = 1, 5 do
  if i == 2 then ddp.trace.start(os.getenv("TRACE_DIR")) end
  step()
  if i == 3 then ddp.trace.stop() end
end
]], "cudawindow")
    local dir = shell.tempdir()
    local out, err, rc = jobs.run("--nproc 2 " .. q(s), env() .. " TRACE_DIR=" .. q(dir), 180)
    assert(rc == 0, "job failed (exit " .. tostring(rc) .. "):\n" .. err .. out)
    local spans = read_trace(dir .. "/trace.json")
    for pid = 0, 1 do
      assert.equals(2, count(spans, pid, "cross_entropy", "cls_forward"))
      assert.equals(2, count(spans, pid, "sgd", "sgd"))
      assert.equals(2, count(spans, pid, "to", "memcpy_async"))
    end
  end)

  it("bounds the device spans by max_events and says how many it dropped", function()
    local s = jobs.script(MODEL .. [[
ddp.trace.start(os.getenv("TRACE_DIR"), {max_events = 30})
for i = 1, 3 do step() end
ddp.trace.stop()
]], "cudabound")
    local dir = shell.tempdir()
    local out, err, rc = jobs.run("--nproc 2 " .. q(s), env() .. " TRACE_DIR=" .. q(dir), 180)
    assert(rc == 0, "job failed (exit " .. tostring(rc) .. "):\n" .. err .. out)
    for r = 0, 1 do
      local n = err:match("rank " .. r .. "'s trace dropped (%d+) events past max_events")
      assert.truthy(n and tonumber(n) > 0, "no warning of rank " .. r .. " in:\n" .. err)
    end
    local spans = read_trace(dir .. "/trace.json")
    for pid = 0, 1 do
      local cuda = where(spans, function(e) return e.pid == pid and e.cat == "cuda" end)
      assert.truthy(#cuda > 0 and #cuda <= 30, #cuda .. " device spans kept")
    end
  end)
end)
