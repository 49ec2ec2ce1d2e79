-- cuda_trace.lua: the trace's device spans on a GPU (run by
-- tests/gpu/check.sh through build/ddplua): a one-rank DDP job (NCCL where
-- it starts) traces 20 steps of an MLP between ddp.trace.start and stop;
-- the merged trace holds the kernels on the compute stream's row (two
-- matrix products a step forward, in stream order, none before the
-- module that launched it), the pinned batch copies on the copy stream's
-- row and, with NCCL, the bucket all-reduces on the NCCL stream's row.
-- Prints "cuda trace: ..." with the step times untraced / traced / untraced
-- and the spans per row, last "cuda_trace: N passed, M failed"; a "SKIP:"
-- line with no GPU.  Runs on the emulator too (DDPLUA_CUDA_EMU=1: small
-- sizes, the times mean nothing there).
local ddp = require "ddp"
local json = require "ddp.data.json"
local here = arg[0]:match("^(.*)/") or "."
local root = arg[0]:match("^(.*)/tests/gpu/") or "."
local tally = dofile(here .. "/tally.lua")("cuda_trace")
local check, try = tally.check, tally.try
local emulated = (os.getenv("DDPLUA_CUDA_EMU") or "0") ~= "0"
local bin = os.getenv("DDPLUA_BIN") or (root .. "/build/ddplua")

local JOB = [[
local ddp = require "ddp"
local nn = ddp.nn
ddp.init()
local dev = ddp.device()
local D = tonumber(os.getenv("TRACE_D"))
local N = tonumber(os.getenv("TRACE_STEPS"))
ddp.manual_seed(0)
local net = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D)):to(dev)
local model = ddp.DDP(net)
local opt = ddp.optim.AdamW(model:parameters(), {lr = 1e-3})
local host = ddp.randn(64, D):pin_memory()
local function step()
  local x = host:to(dev, {non_blocking = true})
  opt:zero_grad()
  model(x):square():mean():backward()
  opt:step()
end
local function timed(n)
  ddp.cuda.synchronize()
  local t0 = ddp.clock()
  for _ = 1, n do step() end
  ddp.cuda.synchronize()
  return (ddp.clock() - t0) / n * 1e3
end
timed(3)
local off1 = timed(N)
ddp.trace.start(os.getenv("TRACE_DIR"))
local on = timed(N)
ddp.trace.stop()
local off2 = timed(N)
print(("STEPS %.3f %.3f %.3f %s"):format(off1, on, off2, ddp.backend()))
]]

local function slurp(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("*a")
  f:close()
  return s
end

if not ddp.cuda.is_available() then
  print("SKIP: cuda trace: " .. ddp.cuda.status())
else
  try("device spans of a traced DDP job", function()
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p '" .. dir .. "'") == 0)
    local job = dir .. "/job.lua"
    local f = assert(io.open(job, "w"))
    f:write(JOB)
    f:close()
    local N = emulated and 2 or 20
    local cmd = ("TRACE_D=%d TRACE_STEPS=%d TRACE_DIR='%s/trace' '%s' --nproc 1 --no-prefix '%s' 2>&1")
      :format(emulated and 32 or 2048, N, dir, bin, job)
    local p = assert(io.popen(cmd))
    local out = p:read("*a")
    p:close()
    local off1, on, off2, backend = out:match("STEPS (%S+) (%S+) (%S+) (%S+)")
    check(off1 ~= nil, "the job ran: " .. out:sub(-600))
    if not off1 then return end
    local t = json.decode(slurp(dir .. "/trace/trace.json"), "trace.json")
    local rows, spans = {}, {}
    for _, e in ipairs(t.traceEvents) do
      if e.name == "thread_name" then rows[e.tid] = e.args.name end
      if e.ph == "X" then spans[#spans + 1] = e end
    end
    table.sort(spans, function(a, b) return a.ts < b.ts end)
    local per_row, fwd, mm = {}, {}, {}
    for _, e in ipairs(spans) do
      if e.cat == "cuda" then
        per_row[e.tid] = per_row[e.tid] or {}
        table.insert(per_row[e.tid], e)
        if e.name == "addmm" then mm[#mm + 1] = e end
      elseif e.cat == "forward" and e.name:match("^[02]: Linear$") then
        fwd[#fwd + 1] = e
      end
    end
    local counts, overlaps = {}, 0
    for tid, list in pairs(per_row) do
      counts[#counts + 1] = ("%s %d"):format(rows[tid] or ("row " .. tid), #list)
      for k = 2, #list do
        if list[k - 1].ts + list[k - 1].dur > list[k].ts + 2 then overlaps = overlaps + 1 end
      end
    end
    table.sort(counts)
    check(overlaps == 0, "spans of one stream in order (" .. overlaps .. " overlap)")
    check(rows[16] == "cuda:0 compute stream" and #(per_row[16] or {}) > 0, "kernels on the compute stream's row")
    check(#mm == 2 * N and #fwd == 2 * N, ("two matrix products a step: %d kernels, %d forwards"):format(#mm, #fwd))
    local early = 0
    for k = 1, math.min(#mm, #fwd) do
      if mm[k].ts < fwd[k].ts - 50 then early = early + 1 end
    end
    check(early == 0, early .. " kernels start before the module that launched them")
    check(#(per_row[17] or {}) == N, "the batch copies on the copy stream's row")
    if backend == "nccl" then
      check(#(per_row[18] or {}) >= N, "NCCL's all-reduces on the NCCL stream's row")
    end
    print(("cuda trace: step %s ms untraced, %s ms traced, %s ms untraced (%s); spans: %s")
      :format(off1, on, off2, backend, table.concat(counts, ", ")))
    os.execute("rm -rf '" .. dir .. "'")
  end)
end
os.exit(tally.report() == 0 and 0 or 1)
