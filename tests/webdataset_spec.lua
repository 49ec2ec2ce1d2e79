-- Tar shards in the WebDataset convention (ddp.data.webdataset,
-- ddp.data.shard_writer, runtime/io/tar.c): the member index of tars
-- Python's tarfile wrote (GNU, PAX, ustar, base-256) against tarfile's own
-- listing and webdataset's own samples; grouping by key; fields, decoding
-- and transforms; a missing field, truncated tars and bad checksums named;
-- the index cache used, and ignored once the tar changed; brace and glob
-- patterns; ShardSampler's epochs over ranks (every sample once, the pad
-- rule, shard orders by seed and epoch, resume); the writer; and
-- tools/make_shards.lua over a small folder.
local ddp = require "ddp"
local data = require "ddp.data"
local wds = require "ddp.data.webdataset"
local json = require "ddp.data.json"
local core = require "ddp.core"
local jobs = require "helpers.jobs"
local C, ffi = core.C, core.ffi

local fails = require("helpers.fails").located("webdataset_spec.lua")

local tmpdir = os.tmpname()
os.remove(tmpdir)
os.execute("mkdir -p " .. tmpdir)
local function path(name) return tmpdir .. "/" .. name end
local GOLDEN = "tests/golden/tars/"

local function slurp(p)
  local f = assert(io.open(p, "rb"))
  local s = f:read("*a")
  f:close()
  return s
end
local function spit(p, s)
  local f = assert(io.open(p, "wb"))
  f:write(s)
  f:close()
  return p
end
local function bytes(s) return data.tokens.bytes(s) end
local function str(t) return ffi.string(C.dl_tensor_data(t), t:numel()) end

-- n samples {__key__ = "%06d", jpg = "image i", cls = i % 3, txt = "caption i"}
-- in shards of per samples: dir/s-000.tar ...
local function make_shards(dir, n, per, opts)
  os.execute("mkdir -p " .. path(dir))
  local o = { maxcount = per }
  for k, v in pairs(opts or {}) do o[k] = v end
  local w = data.ShardWriter(path(dir .. "/s-%03d.tar"), o)
  for i = 0, n - 1 do
    w:write({ __key__ = ("%06d"):format(i), jpg = bytes("image " .. i), cls = i % 3, txt = "caption " .. i })
  end
  return w:close()
end

-- A tar's header blocks: offset -> name, as the scan sees them.
local function tar_scan(p)
  local x = C.dl_tar_scan(p)
  if x == nil then return nil, core.last_error() end
  local rows = {}
  for i = 0, tonumber(C.dl_tar_index_count(x)) - 1 do
    rows[#rows + 1] = { ffi.string(C.dl_tar_index_name(x, i)), tonumber(C.dl_tar_index_offset(x, i)),
                        tonumber(C.dl_tar_index_size(x, i)) }
  end
  C.dl_tar_index_free(x)
  return rows
end

teardown(function() os.execute("rm -rf " .. tmpdir) end)

describe("the tar index", function()
  local expected = dofile(GOLDEN .. "expected.lua")

  for _, name in ipairs { "gnu.tar", "pax.tar", "ustar.tar", "base256.tar", "samples.tar" } do
    it("of " .. name .. " (Python's tarfile) is tarfile's listing of its regular members, bytes included", function()
      local want = expected.tarfile[name]
      local rows = assert(tar_scan(GOLDEN .. name))
      assert.are.equal(#want, #rows)
      local r = C.dl_tar_open(GOLDEN .. name, -1, 0, 0)
      assert(r ~= nil, core.last_error())
      for i, w in ipairs(want) do
        assert.are.same({ w[1], w[2], w[3] }, rows[i])
        local t = core.own(C.dl_tar_read(r, w[2], w[3], w[1]))
        assert.are.equal(w[4], str(t))
        assert.are.equal("uint8", t:dtype())
      end
      C.dl_tar_close(r)
    end)

    it("of " .. name .. " groups into webdataset's own samples", function()
      local ds = data.WebDataset(GOLDEN .. name)
      local want = expected.webdataset[name]
      assert.are.equal(#want, #ds)
      for i, w in ipairs(want) do
        local s = ds:get(i - 1)
        assert.are.equal(w[1], s.__key__)
        assert.are.equal(GOLDEN .. name, s.__url__)
        local exts = {}
        for k in pairs(s) do
          if k:sub(1, 2) ~= "__" then exts[#exts + 1] = k end
        end
        table.sort(exts)
        assert.are.same(w[2], exts)
      end
    end)
  end

  it("splits keys and extensions by webdataset's rule (first dot of the basename)", function()
    local cases = {
      { "a/b/x.seg.png", "a/b/x", "seg.png" }, { "x.jpg", "x", "jpg" }, { "v1.2/s0.cls", "v1.2/s0", "cls" },
      { "./s2.jpg", "./s2", "jpg" }, { "a/.hidden.jpg", "a/", "hidden.jpg" }, { "x", nil }, { "dir.v2/x", nil },
      { ".x.jpg", nil }, { "a.b/.x.jpg", nil }, { "x.", "x", "" },
    }
    for _, c in ipairs(cases) do
      local k, e = wds._split_name(c[1])
      assert.are.equal(c[2], k, c[1])
      assert.are.equal(c[3], e, c[1])
    end
  end)
end)

describe("WebDataset", function()
  it("reads samples back as written: fields in order, decoded by extension, shard by shard", function()
    local shards = make_shards("rw", 7, 3)
    assert.are.same({ path("rw/s-000.tar"), path("rw/s-001.tar"), path("rw/s-002.tar") }, shards)
    local ds = data.WebDataset(shards, { fields = { "jpg", "cls", "txt", "__key__", "__url__" } })
    assert.are.equal(7, #ds)
    assert.are.same(shards, ds.shards)
    for i = 0, 6 do
      local img, cls, txt, key, url = ds:get(i)
      assert.are.equal("image " .. i, str(img))
      assert.are.equal(i % 3, cls)
      assert.are.equal("caption " .. i, txt)
      assert.are.equal(("%06d"):format(i), key)
      assert.are.equal(ds.shards[ds:shard_of(i)], url)
      assert.are.equal(math.floor(i / 3) + 1, ds:shard_of(i))
    end
    assert.are.same({ { first = 0, count = 3 }, { first = 3, count = 3 }, { first = 6, count = 1 } },
                    ds:shard_ranges())
    local a = ds:get(-1)
    assert.are.equal("image 6", str(a))
    fails(function() ds:get(7) end, "index 7 out of range for 7 samples")
  end)

  it("hands images to decode, other extensions by webdataset's rules, and transforms the first field", function()
    os.execute("mkdir -p " .. path("dec"))
    local w = data.ShardWriter(path("dec/d-%d.tar"))
    w:write({ __key__ = "a", png = bytes("PNG!"), json = { label = 3, tags = { "x", "y" } }, id = 42,
              ["seg.png"] = bytes("mask"), bin = "\0\1\2" })
    w:write({ __key__ = "b", jpg = bytes("JPG"), json = { label = 4, tags = {} }, id = -1, ["seg.png"] = "m",
              bin = "" })
    w:close()
    local seen = {}
    local function decode(t, ext)
      seen[#seen + 1] = ext
      return "decoded " .. ext .. " of " .. t:numel() .. " bytes"
    end
    local ds = data.WebDataset(path("dec/d-0.tar"), { fields = { "jpg;png", "json", "id", "seg.png", "bin" },
                                                      decode = decode, transform = function(x) return x:upper() end })
    local img, js, id, seg, bin = ds:get(0)
    assert.are.equal("DECODED PNG OF 4 BYTES", img)
    assert.are.same({ label = 3, tags = { "x", "y" } }, js)
    assert.are.equal(42, id)
    assert.are.equal("decoded seg.png of 4 bytes", seg)  -- an image by its last component
    assert.are.equal("\0\1\2", str(bin))                 -- other extensions: the bytes
    img, js, id = ds:get(1)
    assert.are.equal("DECODED JPG OF 3 BYTES", img)
    assert.are.equal(-1, id)
    assert.are.same({ "png", "seg.png", "jpg", "seg.png" }, seen)
    -- no decode: images are their bytes, for the image reader to plug in
    local raw = data.WebDataset(path("dec/d-0.tar"), { fields = { "png", "bin" }, on_bad_sample = "skip" })
    assert.are.equal(1, #raw)
    assert.are.equal("PNG!", str((raw:get(0))))
    -- decode by extension, a list of transforms
    local byext = data.WebDataset(path("dec/d-0.tar"), {
      fields = { "id", "bin" }, decode = { bin = function(t) return t:numel() end },
      transform = { function(v) return v * 2 end, false } })
    assert.are.same({ 84, 3 }, { byext:get(0) })
    -- without fields: every member by extension
    local all = data.WebDataset(path("dec/d-0.tar")):get(1)
    assert.are.equal("b", all.__key__)
    assert.are.equal(4, all.json.label)
    assert.are.equal(json.null ~= nil, true)
    assert.are.equal("JPG", str(all.jpg))
  end)

  it("names the shard, key and field of a sample missing a field; on_bad_sample leaves it out", function()
    os.execute("mkdir -p " .. path("miss"))
    local w = data.ShardWriter(path("miss/m-%d.tar"))
    w:write({ __key__ = "k0", jpg = "a", cls = 0 })
    w:write({ __key__ = "k1", jpg = "b" })
    w:write({ __key__ = "k2", jpg = "c", cls = 2 })
    w:close()
    local p = path("miss/m-0.tar")
    fails(function() data.WebDataset(p, { fields = { "jpg", "cls" } }) end,
          p, 'sample "k1" has no "cls" member (it has jpg)')
    local ds = data.WebDataset(p, { fields = { "jpg", "cls" }, on_bad_sample = "skip" })
    assert.are.equal(2, #ds)
    assert.are.equal(1, ds.index_stats.dropped)
    assert.are.same({ "c", 2 }, { str((ds:get(1))), select(2, ds:get(1)) })
    fails(function() data.WebDataset(p, { on_bad_sample = "maybe" }) end, 'on_bad_sample must be "error"')
  end)

  it("refuses two members with one extension in a sample, and a cls that is no integer", function()
    os.execute("mkdir -p " .. path("dup"))
    local w = C.dl_tar_writer_create(path("dup/d.tar"), 0)
    assert(C.dl_tar_writer_add(w, "x.jpg", "a", 1) == 0)
    assert(C.dl_tar_writer_add(w, "x.JPG", "b", 1) == 0)
    assert(C.dl_tar_writer_add(w, "y.cls", "seven", 5) == 0)
    assert(C.dl_tar_writer_finish(w, nil) == 0)
    fails(function() data.WebDataset(path("dup/d.tar")) end, path("dup/d.tar"),
          'sample "x" has two members with the extension "jpg"')
    local ds = data.WebDataset(path("dup/d.tar"), { on_bad_sample = "skip", fields = { "cls" } })
    assert.are.equal(1, #ds)
    fails(function() ds:get(0) end, path("dup/d.tar"), 'sample "y": cls holds "seven", not an integer')
  end)

  it("names the shard and the member of a truncated tar, a bad checksum, and a file that is no tar", function()
    local p = make_shards("bad", 3, 10, { index = false })[1]
    local good = slurp(p)
    local rows = assert(tar_scan(p))
    -- cut inside the data of the second sample's jpg (each member: a header, then one block)
    local jpg1 = rows[5]
    assert.are.equal("000001.jpg", jpg1[1])
    local cut = spit(path("bad/cut_data.tar"), good:sub(1, jpg1[2] + 3))
    fails(function() data.WebDataset(cut) end, cut, 'is truncated: member "000001.jpg"', "runs past the end")
    local cut2 = spit(path("bad/cut_header.tar"), good:sub(1, jpg1[2] - 100))
    fails(function() data.WebDataset(cut2) end, cut2, "is truncated: it ends inside the header at byte",
          'after member "000001.cls"')
    local last = rows[#rows]
    local cut3 = spit(path("bad/cut_end.tar"), good:sub(1, last[2] + 512))
    fails(function() data.WebDataset(cut3) end, cut3, "without the end-of-archive block",
          'after member "000002.txt"')
    -- a byte of the third header's name changed: its checksum no longer holds
    local h = rows[3][2] - 512
    local bad = spit(path("bad/checksum.tar"), good:sub(1, h + 2) .. "X" .. good:sub(h + 4))
    fails(function() data.WebDataset(bad) end, bad, ("bad header checksum at byte %d"):format(h),
          'member "00X000.txt"')
    local junk = spit(path("bad/junk.tar"), ("not a tar archive\n"):rep(100))
    fails(function() data.WebDataset(junk) end, junk, "bad header checksum at byte 0", "not a tar archive")
    local empty = spit(path("bad/empty.tar"), "")
    fails(function() data.WebDataset(empty) end, empty, "is empty, not a tar archive")
    fails(function() data.WebDataset({ p, path("bad/nothere.tar") }) end, "nothere.tar", "No such file")
    -- on_bad_sample = "skip" leaves a bad shard out
    local ds = data.WebDataset({ p, bad }, { on_bad_sample = "skip" })
    assert.are.equal(3, #ds)
    assert.are.same({ { first = 0, count = 3 }, { first = 3, count = 0 } }, ds:shard_ranges())
  end)

  it("reads the index cache the writer left, and scans again once the tar changed", function()
    local shards = make_shards("cache", 4, 2)
    for _, s in ipairs(shards) do assert(io.open(s .. ".idx"), s .. ".idx") end
    local ds = data.WebDataset(path("cache/s-{000..001}.tar"), { fields = { "txt" } })
    assert.are.same({ cached = 2, scanned = 0, dropped = 0 }, ds.index_stats)
    assert.are.equal("caption 3", ds:get(3))
    -- the cache is what is read: a damaged header goes unnoticed while the
    -- tar keeps its size and modification time
    local p = shards[1]
    os.execute(("cp -p %s %s.ref"):format(p, p))
    local s = slurp(p)
    spit(p, s:sub(1, 2) .. "X" .. s:sub(4))
    os.execute(("touch -r %s.ref %s"):format(p, p))
    ds = data.WebDataset(p, { fields = { "txt" } })
    assert.are.same({ cached = 1, scanned = 0, dropped = 0 }, ds.index_stats)
    assert.are.equal("caption 1", ds:get(1))
    -- the tar written again (without a cache): its index is stale, the headers are read
    local w = data.ShardWriter(path("cache/s-%03d.tar"), { index = false })
    w:write({ __key__ = "new", txt = "a longer caption than before" })
    w:close()
    ds = data.WebDataset(p, { fields = { "txt", "__key__" } })
    assert.are.same({ cached = 0, scanned = 1, dropped = 0 }, ds.index_stats)
    assert.are.same({ "a longer caption than before", "new" }, { ds:get(0) })
    -- write_index = true leaves a fresh cache
    ds = data.WebDataset(p, { write_index = true })
    ds = data.WebDataset(p)
    assert.are.same({ cached = 1, scanned = 0, dropped = 0 }, ds.index_stats)
    -- a corrupt cache is not trusted
    local idx = slurp(p .. ".idx")
    spit(p .. ".idx", idx:sub(1, 60) .. string.char((idx:byte(61) + 1) % 256) .. idx:sub(62))
    ds = data.WebDataset(p)
    assert.are.same({ cached = 0, scanned = 1, dropped = 0 }, ds.index_stats)
    -- a tar changed under a dataset made before: get says so
    w = data.ShardWriter(path("cache/s-%03d.tar"), { index = false })
    w:write({ __key__ = "newer", txt = "x" })
    w:close()
    fails(function() ds:get(0) end, p, "changed since it was indexed")
  end)

  it("expands brace patterns and globs, and names a pattern that matches nothing", function()
    local be = wds._brace_expand
    assert.are.same({ "s-000.tar", "s-001.tar", "s-002.tar" }, be("s-{000..002}.tar"))
    assert.are.same({ "a8", "a9", "a10" }, be("a{8..10}"))
    assert.are.same({ "x08", "x09", "x10" }, be("x{08..10}"))
    assert.are.same({ "3", "2", "1" }, be("{3..1}"))
    assert.are.same({ "a1", "a2", "b1", "b2" }, be("{a,b}{1..2}"))
    assert.are.same({ "xa", "xb", "xc" }, be("x{a,{b,c}}"))
    assert.are.same({ "{x}" }, be("{x}"))
    local shards = make_shards("glob", 6, 1)
    assert.are.same(shards, wds.expand_shards(path("glob/s-*.tar")))
    assert.are.same({ shards[1], shards[2] }, wds.expand_shards(path("glob/s-00[01].tar")))
    assert.are.same({ shards[3], shards[6] }, wds.expand_shards({ path("glob/s-002.tar"), (path("glob/s-00?.tar"):gsub("%?", "5")) }))
    assert.are.same(shards, wds.expand_shards(path("glob/s-00{0,1,{2..5}}.tar")))
    assert.are.same(shards, wds.expand_shards(path("g*b/s-00[0-5].tar")))
    fails(function() data.WebDataset(path("glob/t-*.tar")) end, "no file matches", "t-*.tar")
    fails(function() data.WebDataset(path("glob/s-{000..007}.tar")) end, "s-006.tar", "No such file",
          "(from the pattern", "s-{000..007}.tar")
    fails(function() data.WebDataset({}) end, "shards must be a path")
  end)

  it("gives the batches of num_workers = 0 through loader workers, shards opened in each", function()
    local ok = pcall(data.DataLoader, data.TensorDataset(ddp.arange(2)), { num_workers = 1 })
    if not ok then return pending("the DataLoader has no workers in this build") end
    local ds = data.WebDataset(make_shards("workers", 60, 8), { fields = { "jpg", "cls" },
                                                                decode = function(b) return b:narrow(0, 0, 6) end,
                                                                transform = function(x) return x:to("float32") end })
    ds:get(0)  -- opened in the main state first: the workers open their own
    local function run(nw)
      local s = data.ShardSampler(ds, { num_replicas = 2, rank = 1, seed = 3, window = 4 })
      local l = data.DataLoader(ds, { batch_size = 4, sampler = s, num_workers = nw })
      local out = {}
      for _ = 1, 2 do
        for _, x, y in l:iter() do out[#out + 1] = { x:tolist(), y:tolist() } end
      end
      return out
    end
    local ref = run(0)
    assert.are.equal(16, #ref)
    assert.are.same(ref, run(2))
  end)

  it("holds no cdata but tensors, so a loader worker can take a copy", function()
    local ds = data.WebDataset(make_shards("copy", 3, 2), { fields = { "txt" } })
    ds:get(0)  -- shards opened: in a table of the module's, not in the dataset
    for k, v in pairs(debug.getmetatable(ds).__index) do
      assert(type(v) ~= "cdata" or core.is_tensor(v), k)
      assert(type(v) ~= "userdata", k)
    end
  end)
end)

describe("ShardSampler", function()
  local shards = make_shards("samp", 23, 4)  -- 6 shards: 4, 4, 4, 4, 4, 3
  local ds = data.WebDataset(shards, { fields = { "cls" } })

  local function runs(list, ds_)  -- shard changes along a rank's indices
    local n, prev = 0, nil
    for _, i in ipairs(list) do
      local s = ds_:shard_of(i)
      if s ~= prev then n, prev = n + 1, s end
    end
    return n
  end

  it("gives every sample to exactly one rank, shard by shard, padded to equal shares", function()
    local even = data.WebDataset(make_shards("samp_even", 24, 4), { fields = { "cls" } })
    for epoch = 0, 2 do
      local seen, lens = {}, {}
      for r = 0, 1 do
        local s = data.ShardSampler(even, { num_replicas = 2, rank = r, seed = 5 })
        local list = s:indices(epoch)
        lens[r + 1] = #list
        for _, i in ipairs(list) do
          assert.is_nil(seen[i])
          seen[i] = true
        end
        assert(runs(list, even) <= 4, "more shard changes than a run of 12 samples over shards of 4 needs")
      end
      assert.are.same({ 12, 12 }, lens)
      for i = 0, 23 do assert.is_true(seen[i]) end
    end
    -- 23 samples over 2 ranks: 12 each, the list padded from its start
    local a = data.ShardSampler(ds, { num_replicas = 2, rank = 0, seed = 1 }):indices(3)
    local b = data.ShardSampler(ds, { num_replicas = 2, rank = 1, seed = 1 }):indices(3)
    assert.are.equal(12, #a)
    assert.are.equal(12, #b)
    assert.are.equal(a[1], b[12])  -- the one padding sample: the epoch's first
    local count = {}
    for _, i in ipairs(a) do count[i] = (count[i] or 0) + 1 end
    for _, i in ipairs(b) do count[i] = (count[i] or 0) + 1 end
    for i = 0, 22 do assert.is_true(count[i] >= 1) end
    -- drop_last: 11 each, none twice; eval: 12 and 11, every sample once
    local d0 = data.ShardSampler(ds, { num_replicas = 2, rank = 0, drop_last = true }):indices(0)
    local d1 = data.ShardSampler(ds, { num_replicas = 2, rank = 1, drop_last = true }):indices(0)
    assert.are.same({ 11, 11 }, { #d0, #d1 })
    local e0 = data.ShardSampler(ds, { num_replicas = 2, rank = 0, eval = true }):indices(0)
    local e1 = data.ShardSampler(ds, { num_replicas = 2, rank = 1, eval = true }):indices(0)
    assert.are.same({ 11, 12 }, { #e0, #e1 })
    local all = {}
    for _, i in ipairs(e0) do all[#all + 1] = i end
    for _, i in ipairs(e1) do all[#all + 1] = i end
    for i = 0, 22 do assert.are.equal(i, all[i + 1]) end  -- eval: in order
    -- more ranks than samples in a shard, and than samples: equal shares still
    for r = 0, 29 do assert.are.equal(1, #data.ShardSampler(ds, { num_replicas = 30, rank = r }):indices(0)) end
  end)

  it("2 ranks x 2 loader workers: every sample once an epoch, none lost or repeated (a real job)", function()
    os.execute("mkdir -p " .. path("job"))
    local w = data.ShardWriter(path("job/s-%03d.tar"), { maxcount = 5 })
    for i = 0, 39 do w:write({ __key__ = ("%06d"):format(i), id = i, jpg = bytes("image " .. i) }) end
    local shards = w:close()
    local s = jobs.script(([[
local data = require "ddp.data"
ddp.init()
local ds = data.WebDataset(%q, { fields = { "id" } })
local sampler = data.ShardSampler(ds, { seed = 3 })
local l = data.DataLoader(ds, { batch_size = 4, sampler = sampler, num_workers = 2, persistent_workers = true })
for epoch = 0, 2 do
  local keys = {}
  for _, id in l:iter() do
    for _, v in ipairs(id:totable()) do keys[#keys + 1] = v end
  end
  local all = ddp.all_gather_object(keys)
  if ddp.rank() == 0 then
    local seen, n = {}, 0
    for _, ks in ipairs(all) do
      for _, key in ipairs(ks) do
        assert(not seen[key], "epoch " .. epoch .. ": " .. key .. " twice")
        seen[key], n = true, n + 1
      end
    end
    print(("epoch %%d: %%d samples, %%d and %%d per rank"):format(epoch, n, #all[1], #all[2]))
  end
end
]]):format(path("job/s-*.tar")), "wds_job")
    assert.are.equal(8, #shards)
    local out, err, rc = jobs.run("--nproc 2 " .. jobs.q(s), nil, 90)
    assert.are.equal(0, rc, err)
    for epoch = 0, 2 do
      assert.truthy(out:find(("epoch %d: 40 samples, 20 and 20 per rank"):format(epoch), 1, true), out .. err)
    end
  end)

  it("shuffles the order of shards by seed and epoch, the same on every rank, samples in tar order", function()
    local function order(seed, epoch)
      return data.ShardSampler(ds, { num_replicas = 1, rank = 0, seed = seed }):shard_order(epoch)
    end
    assert.are.same(order(0, 0), order(0, 0))
    assert.are_not.same(order(0, 0), order(0, 1))
    assert.are_not.same(order(0, 0), order(7, 0))
    local s = data.ShardSampler(ds, { num_replicas = 1, rank = 0, seed = 3 })
    local list, ord = s:indices(2), s:shard_order(2)
    local k = 1
    for _, sh in ipairs(ord) do  -- each shard's samples, consecutive, in tar order
      local r = ds:shard_ranges()[sh]
      for j = 0, r.count - 1 do
        assert.are.equal(r.first + j, list[k])
        k = k + 1
      end
    end
    -- the ranks' runs concatenated are the one list of the epoch
    local a = data.ShardSampler(ds, { num_replicas = 2, rank = 0, seed = 3 }):indices(2)
    local b = data.ShardSampler(ds, { num_replicas = 2, rank = 1, seed = 3 }):indices(2)
    for j = 1, 12 do assert.are.equal(list[j], a[j]) end
    for j = 1, 11 do assert.are.equal(list[12 + j], b[j]) end
    -- shuffle = false: the shards in order
    assert.are.same({ 1, 2, 3, 4, 5, 6 }, data.ShardSampler(ds, { num_replicas = 1, rank = 0, shuffle = false })
                                           :shard_order(4))
  end)

  it("shuffles samples within windows of a shard when asked", function()
    local s = data.ShardSampler(ds, { num_replicas = 1, rank = 0, seed = 2, window = 2 })
    local plain = data.ShardSampler(ds, { num_replicas = 1, rank = 0, seed = 2 })
    local a, b = s:indices(1), plain:indices(1)
    assert.are_not.same(a, b)
    local k = 0
    for _, sh in ipairs(s:shard_order(1)) do  -- each shard's windows of 2: the same pairs, maybe swapped
      local r = ds:shard_ranges()[sh]
      for w0 = 0, r.count - 1, 2 do
        local want, got = {}, {}
        for j = w0, math.min(w0 + 1, r.count - 1) do
          want[#want + 1] = r.first + j
          got[#got + 1] = a[k + j + 1]
        end
        table.sort(got)
        assert.are.same(want, got)
      end
      k = k + r.count
    end
    table.sort(a)
    for i = 0, 22 do assert.are.equal(i, a[i + 1]) end
    fails(function() data.ShardSampler(ds, { shuffle = false, window = 4 }) end, "window is for shuffle = true")
    fails(function() data.ShardSampler(ds, { rank = 2, num_replicas = 2 }) end, "rank 2 is out of range")
    fails(function() data.ShardSampler(data.TensorDataset(ddp.arange(3))) end, "expected a dataset in shards")
  end)

  it("keeps its epoch and state as DistributedSampler does, and a DataLoader over it resumes exactly", function()
    local s = data.ShardSampler(ds, { num_replicas = 2, rank = 1, seed = 9 })
    assert.are.equal(0, s:epoch())
    s:set_epoch(4)
    local sd = s:state_dict()
    assert.are.equal(4, sd.epoch)
    assert.are.equal(9, sd.seed)
    assert.are.equal(6, sd.num_shards)
    local t = data.ShardSampler(ds, { num_replicas = 2, rank = 1 })
    t:load_state_dict(sd)
    assert.are.equal(4, t:epoch())
    assert.are.same(s:indices(), t:indices())
    -- a loader interrupted after 2 batches of epoch 1, resumed by a new one
    local function loader()
      return data.DataLoader(ds, { batch_size = 3, sampler = data.ShardSampler(ds, { num_replicas = 2, rank = 0,
                                                                                       seed = 4 }) })
    end
    local l1 = loader()
    for _ in l1:iter() do end  -- epoch 0
    local got, saved = {}, nil
    for b, y in l1:iter() do
      got[#got + 1] = y:tolist()
      if b == 1 then
        saved = l1:state_dict()
        break
      end
    end
    local full = {}
    for _, y in l1:iter() do full[#full + 1] = y:tolist() end  -- epoch 1 from its start again
    local l2 = loader()
    l2:load_state_dict(saved)
    local rest = {}
    for b, y in l2:iter() do
      assert(b >= 2)
      rest[#rest + 1] = y:tolist()
    end
    assert.are.equal(#full, 2 + #rest)
    for j, y in ipairs(rest) do assert.are.same(full[2 + j], y) end
    -- mid-epoch, a different window cannot continue
    local other = data.ShardSampler(ds, { num_replicas = 2, rank = 0, seed = 4, window = 2 })
    local l3 = data.DataLoader(ds, { batch_size = 3, sampler = other })
    fails(function() l3:load_state_dict(saved) end, "window = 0", "window = 2")
  end)
end)

describe("ShardWriter", function()
  it("writes what Python's tarfile conventions expect: ustar, pax for long names, 10240-byte records", function()
    os.execute("mkdir -p " .. path("w"))
    local long = ("k"):rep(120)
    local w = data.ShardWriter(path("w/w-%02d.tar"), { maxsize = 3000, mtime = 1700000000 })
    w:write({ __key__ = "a", bin = ("x"):rep(3000) })
    w:write({ __key__ = "dir/" .. long, txt = "long name" })
    w:write({ __key__ = "caf\195\169", txt = "non-ASCII name", cls = 1.5 })
    local out = w:close()
    assert.are.same({ path("w/w-00.tar"), path("w/w-01.tar") }, out)  -- maxsize: a new shard after 3000 bytes
    for _, p in ipairs(out) do assert.are.equal(0, #slurp(p) % 10240) end
    local s = slurp(out[1])
    assert.are.equal("ustar\00000", s:sub(258, 265))
    local ds = data.WebDataset(out, { fields = { "__key__", "txt" }, on_bad_sample = "skip" })
    assert.are.same({ "dir/" .. long, "long name" }, { ds:get(0) })
    assert.are.same({ "caf\195\169", "non-ASCII name" }, { ds:get(1) })
    local rows = tar_scan(out[2])
    assert.are.same({ "dir/" .. long .. ".txt", "caf\195\169.cls", "caf\195\169.txt" },
                    { rows[1][1], rows[2][1], rows[3][1] })
    assert.are.equal("1.5", str(core.own(C.dl_tar_read(C.dl_tar_open(out[2], -1, 0, 0), rows[2][2], rows[2][3], "x"))))
    -- GNU tar lists it too, where it is installed
    if os.execute("tar --version >/dev/null 2>&1") == 0 then
      local listing = jobs.sh("tar tf " .. jobs.q(out[2]))
      assert.truthy(listing:find("dir/" .. long .. ".txt", 1, true), listing)
    end
  end)

  it("refuses bad keys, values and patterns, and leaves no shard half written", function()
    os.execute("mkdir -p " .. path("werr"))
    fails(function() data.ShardWriter(path("werr/x.tar")) end, "one integer conversion")
    fails(function() data.ShardWriter(path("werr/x-%d-%d.tar")) end, "one integer conversion")
    local w = data.ShardWriter(path("werr/x-%d.tar"))
    fails(function() w:write({ __key__ = "a.b", jpg = "x" }) end, 'key "a.b"', "hold no dot")
    fails(function() w:write({ __key__ = "a" }) end, 'sample "a" has no fields')
    fails(function() w:write({ jpg = "x" }) end, "__key__ must be a non-empty string")
    fails(function() w:write({ __key__ = "a", jpg = ddp.ones(3) }) end, "jpg is a float32 tensor")
    fails(function() w:write({ __key__ = "a", ok = true }) end, "ok is true")
    w:write({ __key__ = "a", jpg = "x" })
    assert.is_nil(io.open(path("werr/x-0.tar")))  -- not there before close
    w:close()
    assert.truthy(io.open(path("werr/x-0.tar")))
    fails(function() w:write({ __key__ = "b", jpg = "x" }) end, "the writer is closed")
    local names = wds._list_dir(path("werr"))
    for _, n in ipairs(names) do assert.is_nil(n:find("%.tmp%."), n) end
  end)
end)

describe("tools/make_shards.lua", function()
  it("writes an image folder's files unchanged, with their class index, in shuffled shards", function()
    local root = path("folder")
    local files = { ["cat/1.jpg"] = "cat one", ["cat/2.JPG"] = "cat two", ["cat/sub/3.png"] = "cat three",
                    ["dog/a.jpg"] = "dog a", ["dog/b.png"] = "dog\0b", ["dog/notes.md"] = "not an image",
                    ["emu/x.jpeg"] = "emu x" }
    os.execute(("mkdir -p %s/cat/sub %s/dog %s/emu"):format(root, root, root))  -- made/ the tool makes
    for name, s in pairs(files) do spit(root .. "/" .. name, s) end
    local out, err, rc = jobs.run(("tools/make_shards.lua %s %s --maxcount 2 --shuffle-seed 1")
                                  :format(jobs.q(root), jobs.q(path("made/m-%03d.tar"))))
    assert.are.equal(0, rc, err)
    assert.truthy(out:find("6 samples of 3 classes in 3 shards", 1, true), out)
    assert.are.equal("cat\ndog\nemu\n", slurp(path("made/classes.txt")))
    local ds = data.WebDataset(path("made/m-*.tar"), { fields = { "jpg;jpeg;png", "cls", "__key__" } })
    assert.are.equal(6, #ds)
    assert.are.same({ cached = 3, scanned = 0, dropped = 0 }, ds.index_stats)
    local want = { ["cat one"] = 0, ["cat two"] = 0, ["cat three"] = 0, ["dog a"] = 1, ["dog\0b"] = 1,
                   ["emu x"] = 2 }
    local order = {}
    for i = 0, 5 do
      local img, cls, key = ds:get(i)
      local s = str(img)
      assert.are.equal(want[s], cls, s)
      want[s] = nil
      assert.are.equal(("%06d"):format(i), key)
      order[#order + 1] = s
    end
    assert.is_nil(next(want))
    assert.are_not.same({ "cat one", "cat two", "cat three", "dog a", "dog\0b", "emu x" }, order)
  end)
end)

describe("tools/make_shards.lua and data.decode_image", function()
  it("decode the images of a folder's shards to ImageFolder's pixels", function()
    local root = path("imgs")
    os.execute(("mkdir -p %s/a %s/b"):format(root, root))
    local k = 0
    for _, rel in ipairs { "a/0.png", "a/1.jpg", "b/2.png", "b/3.jpg", "b/4.png" } do
      k = k + 1
      local img = (ddp.arange(3 * 12 * 16):remainder(97) * k):remainder(256):to("uint8"):view(3, 12, 16)
      if rel:find("jpg$") then data.write_jpeg(img, root .. "/" .. rel) else data.write_png(img, root .. "/" .. rel) end
    end
    local _, err, rc = jobs.run(("tools/make_shards.lua %s %s --maxcount 2 --no-shuffle")
                                :format(jobs.q(root), jobs.q(path("imgs-out/s-%03d.tar"))))
    assert.are.equal(0, rc, err)
    local ds = data.WebDataset(path("imgs-out/s-*.tar"), { fields = { "jpg;png", "cls" }, decode = data.decode_image })
    local folder = data.ImageFolder(root)
    assert.are.equal(#folder, #ds)
    for i = 0, #ds - 1 do
      local img, cls = ds:get(i)
      local want, target = folder:get(i)
      assert.are.equal(target, cls)
      assert.are.same(want:shape(), img:shape())
      assert.are.equal(0, (want:to("int64") - img:to("int64")):abs():max():item())
    end
  end)
end)

describe("data.json", function()
  it("decodes RFC 8259 text and names the byte of a mistake", function()
    assert.are.same({ a = { 1, 2.5, "x" }, b = json.null, c = "\195\169", d = { true, false } },
                    json.decode('{"a": [1, 2.5, "x"], "b": null, "c": "\\u00e9", "d": [true, false]}'))
    assert.are.equal("\240\159\152\128", json.decode('"\\ud83d\\ude00"'))
    assert.are.equal(-1.5e-3, json.decode(" -1.5e-3 "))
    assert.are.same({}, json.decode("[]"))
    fails(function() json.decode('{"a": 01}', "x.json") end, "x.json: invalid JSON at byte 8")
    fails(function() json.decode("[1, 2") end, "invalid JSON at byte 6")
    fails(function() json.decode('"\\ud800"') end, "lone surrogate")
    fails(function() json.decode("1 2") end, "trailing characters")
    assert.are.equal('{"a":[1,2.5,"x"],"b":null,"c":"\\n"}', json.encode({ a = { 1, 2.5, "x" }, b = json.null, c = "\n" }))
    assert.are.same({ k = { 1, { z = "y" } } }, json.decode(json.encode({ k = { 1, { z = "y" } } })))
  end)
end)
