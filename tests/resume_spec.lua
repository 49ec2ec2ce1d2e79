-- Exact resume, as real 2-rank jobs of tests/scripts/resume_train.lua: a run
-- stopped after saving a checkpoint (mid-epoch, or at an epoch boundary)
-- and resumed from it gives, step by step and on every rank, the losses of
-- the uninterrupted run -- the loader's position, its sampler's epoch and
-- seed, dropout's random stream, model, AdamW and the schedule all restored.
-- A checkpoint saved mid-epoch is refused in a world of another size; one
-- saved at an epoch boundary is taken.
local jobs = require "helpers.jobs"
local q, run = jobs.q, jobs.run

local SCRIPT = "tests/scripts/resume_train.lua"
local STEPS = 20  -- 7 batches an epoch per rank: about three epochs

-- Runs the script under `ddplua <launch>`; returns losses[rank][step] and
-- the output, failing on a non-zero exit.
local function train(launch, flags)
  local out, err, rc = run(launch .. " " .. SCRIPT .. " --steps " .. STEPS .. " " .. flags, nil, 120)
  assert.are.equal(0, rc, err .. out)
  local losses = {}
  for line in out:gmatch("[^\n]+") do
    -- "[r] step ..." (one worker prints no prefix: rank 0)
    local r, step, loss = line:match("^%[(%d+)%] step (%d+) epoch %d+ loss (%S+)$")
    if not r then r, step, loss = "0", line:match("^step (%d+) epoch %d+ loss (%S+)$") end
    if step then
      r, step = tonumber(r), tonumber(step)
      losses[r] = losses[r] or {}
      assert.is_nil(losses[r][step], "step " .. step .. " twice on rank " .. r)
      losses[r][step] = tonumber(loss)
    end
  end
  return losses, out
end

-- The largest difference between two runs' losses over every step of
-- both ranks (each run must have all of them).
local function max_diff(a, b)
  local worst = 0
  for r = 0, 1 do
    for step = 1, STEPS do
      local x, y = a[r] and a[r][step], b[r] and b[r][step]
      assert(x and y, ("rank %d has no loss for step %d"):format(r, step))
      worst = math.max(worst, math.abs(x - y))
    end
  end
  return worst
end

-- The losses of a stopped run and of its resumed rest, together.
local function joined(stopped, resumed)
  local out = {}
  for r = 0, 1 do
    out[r] = {}
    for step, l in pairs(stopped[r] or {}) do out[r][step] = l end
    for step, l in pairs(resumed[r] or {}) do
      assert.is_nil(out[r][step], "the resumed run repeats step " .. step)
      out[r][step] = l
    end
  end
  return out
end

describe("resume #dist", function()
  after_each(jobs.no_strays)
  teardown(jobs.cleanup)
  local ckpt = jobs.tempname()

  -- flags: the run's own; stop: where run 2 stops
  local function interrupted(flags, stop)
    local f = flags .. " --checkpoint " .. q(ckpt)
    local stopped, out = train("--nproc 2", f .. " " .. stop)
    assert.truthy(out:find("[1] stopped after step", 1, true), out)
    local resumed = train("--nproc 2", f .. " --resume")
    return joined(stopped, resumed), stopped
  end

  it("gives the uninterrupted losses on both ranks after a stop mid-epoch", function()
    local whole = train("--nproc 2", "--checkpoint " .. q(ckpt))
    local again, stopped = interrupted("", "--stop-at 9")  -- epoch 1, after its 2nd batch
    assert.are.equal(9, #stopped[0])
    assert.is_true(max_diff(whole, again) <= 1e-6, "resumed losses differ by " .. max_diff(whole, again))
  end)

  it("gives them at an epoch boundary too", function()
    local whole = train("--nproc 2", "--checkpoint " .. q(ckpt))
    local again, stopped = interrupted("", "--stop-after-epoch 0")
    assert.are.equal(7, #stopped[1])
    assert.is_true(max_diff(whole, again) <= 1e-6, "resumed losses differ by " .. max_diff(whole, again))
  end)

  it("keeps each rank's own random stream with all_ranks when the ranks are seeded apart", function()
    local whole = train("--nproc 2", "--rank-seeds --checkpoint " .. q(ckpt))
    local again = interrupted("--rank-seeds --all-ranks", "--stop-at 9")
    assert.is_true(max_diff(whole, again) <= 1e-6, "resumed losses differ by " .. max_diff(whole, again))
    -- saved by rank 0 alone, rank 1 resumes on rank 0's stream: dropout
    -- matters here, and the rank-0 save cannot keep it
    local rank0 = interrupted("--rank-seeds", "--stop-at 9")
    assert.is_true(max_diff(whole, rank0) > 1e-3, "a rank-0 save resumed rank 1's stream")
  end)

  it("raises on every rank when rank 0 cannot write an all_ranks checkpoint", function()
    local s = jobs.script([[
ddp.init()
local ok, err = pcall(ddp.save_checkpoint, "/nonexistent-dir/ckpt", { step = 1 }, { all_ranks = true })
ddp.log("raised", not ok, err)
]], "all_ranks")
    local out, err, rc = run("--nproc 2 " .. q(s), nil, 60)
    assert.are.equal(0, rc, err .. out)
    assert.truthy(out:find("%[0%] raised\ttrue\t[^\n]*_all_ranks.lua:%d+: save: /nonexistent%-dir/ckpt: cannot create"), out)
    assert.truthy(out:find("%[1%] raised\ttrue\t[^\n]*_all_ranks.lua:%d+: save_checkpoint: rank 0 failed to write "
                           .. "/nonexistent%-dir/ckpt: save: /nonexistent%-dir/ckpt: cannot create"), out)
  end)

  it("refuses a mid-epoch checkpoint in a world of another size, and takes a boundary one", function()
    local f = " --checkpoint " .. q(ckpt)
    train("--nproc 2", f .. " --stop-at 9")
    local out, err, rc = run("--nproc 3 " .. SCRIPT .. f .. " --resume", nil, 120)
    assert.are_not.equal(0, rc, out)
    assert.truthy(err:find("DataLoader:load_state_dict: the state was saved 2 batches into epoch 1 by a world "
                           .. "of 2 ranks, and this sampler has num_replicas = 3", 1, true), err)
    train("--nproc 2", f .. " --stop-after-epoch 0")
    -- one rank: its own cut of epoch 1 on (13 batches an epoch), from step 8
    local losses = train("--nproc 1", f .. " --resume")
    assert.is_nil(losses[1])
    assert.is_nil(losses[0][7])
    for step = 8, STEPS do assert.is_number(losses[0][step], "step " .. step) end
  end)
end)
