-- examples/gpt.lua in a tiny configuration (1 layer, n_embd 32, context
-- 16, 8 steps on one license text), as real jobs on 1 and 2 ranks: the
-- loss falls, a run stopped after a checkpoint and resumed with --resume
-- gives the uninterrupted run's losses digit for digit, and sampling
-- prints bytes after the prompt.  Also the model's pieces: the explicit
-- attention is causal, and the sampler draws from the distribution.
local ddp = require "ddp"
local jobs = require "helpers.jobs"
local run = jobs.run

local gpt = dofile("examples/gpt_model.lua")

local tmpdir = os.tmpname()
os.remove(tmpdir)
os.execute("mkdir -p " .. tmpdir)

local TINY = "examples/gpt.lua --text /usr/share/common-licenses/GPL-3 --n-layer 1 --n-head 2 --n-embd 32"
  .. " --block-size 16 --batch-size 8 --steps 8 --warmup 2 --lr 1e-2 --log-every 1 --eval-every 4"
  .. " --ckpt-every 4"

-- Runs the example; returns {step = loss} (as printed) and the output.
local function train(launch, flags)
  local out, err, rc = run(launch .. TINY .. " " .. flags, nil, 120)
  assert.are.equal(0, rc, err .. out)
  local losses = {}
  for line in out:gmatch("[^\n]+") do
    local step, loss = line:match("step%s+(%d+)  loss (%S+)")
    if step then losses[tonumber(step)] = loss end
  end
  return losses, out
end

describe("examples/gpt.lua", function()
  teardown(function() os.execute("rm -rf " .. tmpdir) end)

  for _, case in ipairs { { "1 rank", "", 3 }, { "2 ranks", "--nproc 2 ", 5 } } do
    local name, launch, stop = case[1], case[2], case[3]
    it(name .. ": the loss falls, resume is exact, sampling gives bytes", function()
      local out_prefix = tmpdir .. "/" .. name:gsub(" ", "_")
      local full, out = train(launch, "--out " .. out_prefix .. "_a --sample 40")
      assert.is_truthy(full[1] and full[8], out)
      assert.is_true(tonumber(full[8]) < tonumber(full[1]) - 0.5, out)
      assert.is_truthy(out:match("val loss %d"), out)
      local sample = out:match("%-%-%-%- sample %-%-%-%-\n[^\n]-(This License[^\n]*)")
      assert.is_truthy(sample, out)
      assert.is_true(#sample > #"This License" + 10, out)
      -- stopped after a checkpoint, then resumed: the same losses
      local first = train(launch, "--out " .. out_prefix .. "_b --sample 0 --stop-at " .. stop)
      local rest, rout = train(launch, "--out " .. out_prefix .. "_b --sample 0 --resume")
      assert.is_truthy(rout:match("resumed from .* at step " .. stop), rout)
      for s = 1, 8 do
        local got = s <= stop and first[s] or rest[s]
        assert.are.equal(full[s], got, "step " .. s)
        if s <= stop then assert.is_nil(rest[s], "the resumed run repeats step " .. s) end
      end
    end)
  end

  it("attention is causal: changing a later token leaves earlier outputs alone", function()
    ddp.manual_seed(0)
    local mask = ddp.ones(6, 6):triu(1):bool()
    local q, k, v = ddp.randn(1, 2, 6, 4), ddp.randn(1, 2, 6, 4), ddp.randn(1, 2, 6, 4)
    local a = gpt.explicit_attention(q, k, v, mask)
    local k2, v2 = k:clone(), v:clone()
    k2:narrow(2, 5, 1):fill_(3)
    v2:narrow(2, 5, 1):fill_(-3)
    local b = gpt.explicit_attention(q, k2, v2, mask)
    assert.is_true(a:narrow(2, 0, 5):equal(b:narrow(2, 0, 5)))
    assert.is_false(a:narrow(2, 5, 1):equal(b:narrow(2, 5, 1)))
  end)

  it("samples from the distribution", function()
    ddp.manual_seed(1)
    local probs = ddp.tensor({ { 0.1, 0.0, 0.6, 0.3 } }, { dtype = "float32" }):expand(4000, 4):contiguous()
    local s = gpt.sample(probs)
    assert.are.same({ 4000, 1 }, s:shape())
    local counts = {}
    for i = 0, 3 do counts[i + 1] = s:eq(i):sum():item() / 4000 end
    assert.are.equal(0, counts[2])
    assert.is_true(math.abs(counts[1] - 0.1) < 0.03 and math.abs(counts[3] - 0.6) < 0.03, table.concat(counts, " "))
  end)
end)
