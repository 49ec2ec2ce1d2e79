-- LuaJIT's own profiler (jit.p) over products and convolutions that run
-- in oneDNN: its SIGPROF samples landing inside oneDNN's kernels aborted
-- the process ("corrupted size vs. prev_size") or crashed it in free, 3
-- runs of 3, before SIGPROF was held around oneDNN's calls (issue 26).
-- Each run is a fresh process: a crash must fail the test, not busted.
local jobs = require "helpers.jobs"
local q, run = jobs.q, jobs.run

local function profiled(body, threads)
  local s = jobs.script(([[
local prof = require "jit.p"
ddp.set_num_threads(%d)
prof.start("f", "/dev/null")
%s
prof.stop()
print("ok")
]]):format(threads, body), "jitp")
  return run(q(s), nil, 120)
end

describe("LuaJIT's profiler (jit.p)", function()
  after_each(jobs.no_strays)

  for _, threads in ipairs { 1, 2 } do
    it(("runs over 300 float32 products in oneDNN's sgemm at %d thread(s)"):format(threads), function()
      for _ = 1, 2 do
        local out, err, rc = profiled([[
for i = 1, 300 do local y = ddp.randn(512, 512):matmul(ddp.randn(512, 512)) end
]], threads)
        assert(rc == 0 and out:find("ok"), ("exit %s:\n%s%s"):format(tostring(rc), out, err))
      end
    end)
  end

  it("runs over convolutions and their backward in oneDNN", function()
    local out, err, rc = profiled([[
local w = ddp.randn(32, 32, 3, 3):requires_grad_(true)
for i = 1, 60 do
  ddp.nn.functional.conv2d(ddp.randn(16, 32, 28, 28), w, nil, 1, 1):sum():backward()
end
]], 2)
    assert(rc == 0 and out:find("ok"), ("exit %s:\n%s%s"):format(tostring(rc), out, err))
  end)
end)
