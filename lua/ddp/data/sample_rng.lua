-- ddp.data.sample_rng: the random numbers of one sample's augmentation,
-- a pure function of (seed, epoch, sample index) -- so a sample is
-- transformed the same whatever the number of loader workers or ranks, and
-- after a resume.  The DataLoader (and each of its worker threads, which
-- have a Lua state each and so a copy of this module) calls begin() before
-- it asks the dataset for a sample; random transforms (ddp.data.transforms)
-- draw with uniform()/randint()/bernoulli().  Outside a loader (a
-- transform called by hand) the draws come from a stream seeded once from
-- the global generator, so ddp.manual_seed fixes them too.
local core = require "ddp.core"
local C, ffi = core.C, core.ffi
local raise, show, is_integer = core.raise, core.show, core.is_integer
local floor = math.floor

core.add_lib_file(debug.getinfo(1, "S").source)

local M = {}

local buf = ffi.new("double[1]")
-- The current stream: seed, the stream number (epoch and index folded
-- together), the next draw, and what it was made from (for context()).
local cur = { seed = nil, stream = 0, k = 0, epoch = nil, index = nil }
-- Draws outside a loader: one stream per Lua state, seeded at first use.
local loose_k = 0

-- Streams of one seed: epoch e, index i -> e * 2^40 + i (indices below
-- 2^40, epochs below 2^23 keep them distinct, as doubles represent them).
local INDEX_SPAN = 2 ^ 40

-- sample_rng.begin(seed, epoch, index): the draws that follow are those of
-- sample `index` (0-based) of epoch `epoch` under `seed`.
function M.begin(seed, epoch, index)
  if not is_integer(seed) or not is_integer(epoch) or not is_integer(index) or epoch < 0 or index < 0
     or index >= INDEX_SPAN then
    raise(("sample_rng.begin: expected integer seed, epoch >= 0 and index in [0, 2^40), got %s, %s, %s")
          :format(show(seed), show(epoch), show(index)))
  end
  cur.seed, cur.stream, cur.k, cur.epoch, cur.index = seed, epoch * INDEX_SPAN + index, 0, epoch, index
end

-- sample_rng.finish(): later draws are loose again (outside any sample).
function M.finish()
  cur.seed, cur.epoch, cur.index = nil, nil, nil
end

-- The (seed, epoch, index) of the sample being made, or nil outside one.
function M.context()
  if cur.seed == nil then return nil end
  return cur.seed, cur.epoch, cur.index
end

local function draw()
  local rc
  if cur.seed ~= nil then
    rc = C.dl_rng_uniforms(cur.seed, cur.stream, cur.k, 1, buf)
    cur.k = cur.k + 1
  else
    if cur.loose_seed == nil then
      -- a fixed stream number far from any sample's
      cur.loose_seed = C.dl_rng_seed() + C.dl_rng_offset()
    end
    rc = C.dl_rng_uniforms(cur.loose_seed, 2 ^ 63, loose_k, 1, buf)
    loose_k = loose_k + 1
  end
  if rc ~= 0 then core.raise_c() end
  return buf[0]
end

-- A uniform number in [lo, hi) (default [0, 1)).
function M.uniform(lo, hi)
  local u = draw()
  if lo == nil then return u end
  return lo + (hi - lo) * u
end

-- An integer in [lo, hi) (hi exclusive, as torch.randint).
function M.randint(lo, hi)
  if not is_integer(lo) or not is_integer(hi) or hi <= lo then
    raise(("sample_rng.randint: expected integers lo < hi, got %s, %s"):format(show(lo), show(hi)))
  end
  return lo + floor(draw() * (hi - lo))
end

-- true with probability p.
function M.bernoulli(p)
  return draw() < p
end

return M
