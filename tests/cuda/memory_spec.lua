-- CUDA memory seen from Lua: garbage device tensors are collected before
-- the device fills up (device bytes count towards Lua's collections),
-- and running out of memory gives an error naming the size and the
-- allocator's statistics after one collect-and-retry -- never a crash.
-- Each case runs in a child process: the emulator's memory limit
-- (DDPLUA_CUDA_EMU_MEM) must be set before the library loads.
local H = require "helpers.cuda"
local jobs = require "helpers.jobs"

local function child(body, env)
  local s = jobs.script(body, "cudamem")
  local emu = H.emulated and "DDPLUA_CUDA_EMU=1 " or ""
  return jobs.run(jobs.q(s), emu .. (env or ""), 120)
end

H.describe("CUDA memory", function()
  teardown(jobs.cleanup)

  it("a loop making device garbage never runs out", function()
    -- 64 MiB of device memory (emulator) and 300 tensors of 4 MiB made
    -- and dropped: only collections between them keep it going
    local out, err, rc = child([[
      for i = 1, 300 do
        local t = ddp.zeros({1024, 1024}, {device = "cuda"})
        t = t + 1
      end
      local s = ddp.cuda.memory_stats()
      print("OK", s.ooms, s.peak_reserved)
    ]], "DDPLUA_CUDA_EMU_MEM=67108864")
    assert.equal(0, rc, err .. out)
    -- collected in time: not once did an allocation fail and need the
    -- collect-and-retry fallback
    assert.truthy(out:match("OK%s+0%s"), out)
  end)

  it("running out of device memory is a clear error, and the next op works", function()
    local out, err, rc = child([[
      local keep = ddp.zeros({1024, 1024}, {device = "cuda"})
      -- 300 x 4 MiB of output for 64 MiB of device memory
      local ok, e = pcall(function() return keep:view(1, -1):expand(300, 1024 * 1024) + 1 end)
      print(ok, e)
      local again = (keep + 1):cpu()
      print("AFTER", again:get(0, 0))
    ]], "DDPLUA_CUDA_EMU_MEM=67108864")
    assert.equal(0, rc, err .. out)
    assert.truthy(out:match("false"), out)
    assert.truthy(out:match("out of memory") or out:match("out of CUDA memory"), out)
    assert.truthy(out:match("in use") and out:match("reserved"), out)
    assert.truthy(out:match("AFTER%s+1"), out)
  end)
  it("ddp.memory_summary counts a model, its gradients and AdamW's state on the device", function()
    local out, err, rc = child([[
      local nn = ddp.nn
      ddp.manual_seed(1)
      local m = nn.Sequential(nn.Linear(32, 512), nn.ReLU(), nn.Linear(512, 8)):to("cuda")
      local opt = ddp.optim.AdamW(m:parameters(), { lr = 1e-3 })
      for i = 1, 3 do
        local x, y = ddp.randn(256, 32, { device = "cuda" }), ddp.randint(0, 8, { 256 }, { device = "cuda" })
        opt:zero_grad()
        nn.functional.cross_entropy(m(x), y):backward()
        opt:step()
      end
      local b = ddp.memory_breakdown()
      local d = b["cuda:0"]
      print("cuda", d.parameters, d.gradients, d.optimizer_state, d.activations, d.allocated, d.reserved,
            b.cpu.parameters, b.devices[2])
      print(ddp.memory_summary())
    ]])
    assert.equal(0, rc, err .. out)
    local n = (32 * 512 + 512 + 512 * 8 + 8) * 4
    local p, g, s, a, al, rs, cp, dev = out:match("cuda\t(%d+)\t(%d+)\t(%d+)\t(%d+)\t(%d+)\t(%d+)\t(%d+)\t(%S+)")
    assert(p, out)
    assert.equal(n, tonumber(p))
    assert.equal(n, tonumber(g))
    assert.equal(2 * n, tonumber(s))
    assert.equal(0, tonumber(cp), "nothing of the model on the CPU")
    assert.equal("cuda:0", dev)
    -- a [256, 512] float32 hidden layer is 512 KiB, saved twice or more
    assert(tonumber(a) >= 512 * 1024, "activations on the device: " .. a)
    assert(tonumber(rs) >= tonumber(al))
    assert.truthy(out:find("cpu%s+cuda:0"), out)
  end)
end)
