-- ddp.data.webdataset: tar shards in the WebDataset convention --
-- WebDataset, a map-style dataset over an index of the shards' members,
-- so the DataLoader, its samplers, exact resume and the loader workers
-- apply unchanged, and the shard lists of braces and globs.  Its sampler
-- (each epoch's samples shard by shard, cut over the ranks in equal
-- shares) is ddp.data.shard_sampler, the writer ddp.data.shard_writer;
-- the tar format itself is runtime/io/tar.c.
--
-- The convention (webdataset's): a sample is the consecutive members of a
-- tar with one key -- a member's path up to the first dot of its
-- basename; the rest is its extension ("a/b/x.seg.png": key "a/b/x",
-- extension "seg.png", lower-cased).  Members with no dot in the basename
-- and top-level "__...__" files are skipped, as webdataset skips them.
--
--   local wds = require "ddp.data.webdataset"
--   local ds = wds.WebDataset("shards/train-{000000..000099}.tar", {fields = {"jpg", "cls"}})
--   local sampler = data.ShardSampler(ds, {seed = 0})
--   local loader = data.DataLoader(ds, {batch_size = 64, sampler = sampler})
local core = require "ddp.core"
local factory = require "ddp.tensor.factory"
local checks = require "ddp.data.checks"
local json = require "ddp.data.json"
local files = require "ddp.data.files"
local C, ffi = core.C, core.ffi
local raise, show = core.raise, core.show
local is_integer = core.is_integer
local check_opts, bool_opt = core.check_opts, checks.bool_opt
local floor = math.floor
local type, tonumber, tostring, ipairs, pairs, unpack = type, tonumber, tostring, ipairs, pairs, unpack
local sub, find, byte = string.sub, string.find, string.byte

core.add_lib_file(debug.getinfo(1, "S").source)

local M = {}

-- -- Files and directories ---------------------------------------------------

local list_dir, exists = files.list_dir, files.exists
M._list_dir = list_dir

-- -- Shard lists: braces and globs --------------------------------------------

-- The first top-level {...} of s: its start and end, or nil.
local function first_brace(s)
  local a = find(s, "{", 1, true)
  while a do
    local depth = 0
    for i = a, #s do
      local c = sub(s, i, i)
      if c == "{" then depth = depth + 1 elseif c == "}" then depth = depth - 1 end
      if depth == 0 then return a, i end
    end
    return nil
  end
  return nil
end

-- Brace expansion as webdataset's (the braceexpand package): "{000..099}"
-- numeric ranges (zero-padded to the wider end when either end is; counting
-- down when the first is larger), "{a,b,c}" lists, nested and repeated.
local function brace_expand(s, out)
  out = out or {}
  local a, b = first_brace(s)
  if not a then
    out[#out + 1] = s
    return out
  end
  local pre, body, post = sub(s, 1, a - 1), sub(s, a + 1, b - 1), sub(s, b + 1)
  local lo, hi = body:match("^(%-?%d+)%.%.(%-?%d+)$")
  if lo then
    local x, y = tonumber(lo), tonumber(hi)
    local padded = lo:match("^%-?0%d") or hi:match("^%-?0%d")
    local width = padded and math.max(#lo:gsub("^%-", ""), #hi:gsub("^%-", "")) or 0
    local step = x <= y and 1 or -1
    for v = x, y, step do
      local t = ("%0" .. width .. "d"):format(math.abs(v))
      brace_expand(pre .. (v < 0 and "-" or "") .. t .. post, out)
    end
    return out
  end
  -- alternatives split at top-level commas
  local alts, depth, start = {}, 0, 1
  for i = 1, #body do
    local c = sub(body, i, i)
    if c == "{" then depth = depth + 1 elseif c == "}" then depth = depth - 1
    elseif c == "," and depth == 0 then
      alts[#alts + 1] = sub(body, start, i - 1)
      start = i + 1
    end
  end
  alts[#alts + 1] = sub(body, start)
  if #alts == 1 then  -- "{x}": no choice, the braces are literal (as the shell keeps them)
    for _, rest in ipairs(brace_expand(post)) do
      for _, head in ipairs(brace_expand(pre .. "{" .. body)) do out[#out + 1] = head .. "}" .. rest end
    end
    return out
  end
  for _, alt in ipairs(alts) do brace_expand(pre .. alt .. post, out) end
  return out
end
M._brace_expand = brace_expand

local function has_glob(s) return find(s, "[*?[]") ~= nil end

-- A glob component ("shard-*.tar", "[ab]?.tar") as an anchored Lua pattern.
local function glob_pattern(g)
  local out, i = { "^" }, 1
  while i <= #g do
    local c = sub(g, i, i)
    if c == "*" then
      out[#out + 1] = ".*"
    elseif c == "?" then
      out[#out + 1] = "."
    elseif c == "[" and find(g, "]", i + 2, true) then
      local j = find(g, "]", i + 2, true)
      local set = sub(g, i + 1, j - 1):gsub("^!", "^"):gsub("%%", "%%%%")
      out[#out + 1] = "[" .. set .. "]"
      i = j
    else
      out[#out + 1] = c:gsub("%W", "%%%0")
    end
    i = i + 1
  end
  out[#out + 1] = "$"
  return table.concat(out)
end

-- Paths matching a glob (wildcards in any component; a leading dot is
-- matched only by a pattern that has one, as Python's glob), sorted.
local function glob(pattern)
  local parts = {}
  for p in pattern:gmatch("[^/]+") do parts[#parts + 1] = p end
  local bases = { pattern:sub(1, 1) == "/" and "/" or "" }
  for k, part in ipairs(parts) do
    local last, nexts = k == #parts, {}
    for _, base in ipairs(bases) do
      local join = base == "" and "" or (base == "/" and "/" or base .. "/")
      if has_glob(part) then
        local names, dirs = list_dir(base == "" and "." or base)
        local pat = glob_pattern(part)
        for _, name in ipairs(names or {}) do
          if find(name, pat) and (sub(name, 1, 1) ~= "." or sub(part, 1, 1) == ".") and (last or dirs[name]) then
            nexts[#nexts + 1] = join .. name
          end
        end
      else
        nexts[#nexts + 1] = join .. part
      end
    end
    bases = nexts
  end
  local out = {}
  for _, p in ipairs(bases) do
    if exists(p) then out[#out + 1] = p end
  end
  table.sort(out)
  return out
end

-- wds.expand_shards(spec): the shard paths of a list of paths, a glob
-- ("shards/*.tar") or a brace pattern ("shard-{000000..000099}.tar"; also
-- in a list's items).  Every path must exist: a glob matching nothing or
-- an expanded name missing is an error naming the pattern.
function M.expand_shards(spec, op)
  op = op or "expand_shards"
  local items = spec
  if type(spec) == "string" then
    items = { spec }
  elseif type(spec) ~= "table" or core.is_tensor(spec) or #spec == 0 then
    raise(("%s: shards must be a path, a glob or brace pattern, or a non-empty list of them, got %s")
          :format(op, show(spec)))
  end
  local out = {}
  for i, item in ipairs(items) do
    if type(item) ~= "string" or item == "" then
      raise(("%s: shard %d must be a path (a string), got %s"):format(op, i, show(item)))
    end
    for _, p in ipairs(brace_expand(item)) do
      if has_glob(p) then
        local got = glob(p)
        if #got == 0 then
          raise(("%s: no file matches %s%s"):format(op, show(p), p ~= item and (" (from %s)"):format(show(item)) or ""))
        end
        for _, g in ipairs(got) do out[#out + 1] = g end
      else
        if not exists(p) then
          local f, err = io.open(p, "rb")
          if f then f:close() end
          raise(("%s: %s%s"):format(op, err or (p .. ": cannot be read"),
                                     p ~= item and (" (from the pattern %s)"):format(show(item)) or ""))
        end
        out[#out + 1] = p
      end
    end
  end
  return out
end

-- -- Keys and extensions -------------------------------------------------------

-- webdataset's base_plus_ext: key and extension of a member's path, or nil
-- when it has none -- the regular expression ^((?:.*/|)[^.]+)[.]([^/]*)$:
-- the extension starts at the first dot of the basename, and the key must
-- end in a run of non-dots that starts the path or follows a slash.
local function split_name(path)
  local bs = (path:match("^.*()/") or 0) + 1  -- the basename's first byte
  local d = find(path, ".", bs, true)
  if not d then return nil end
  if d == bs then  -- the basename starts with a dot: the run must reach back past a slash
    local ok = false
    for p = d - 1, 1, -1 do
      if byte(path, p) == 46 then break end  -- a dot before it: no run
      if p == 1 or byte(path, p - 1) == 47 then
        ok = true
        break
      end
    end
    if not ok then return nil end
  end
  return sub(path, 1, d - 1), sub(path, d + 1)
end
M._split_name = split_name

local function is_meta(name)
  return not find(name, "/", 1, true) and sub(name, 1, 2) == "__" and #name >= 4 and sub(name, -2) == "__"
end

-- -- Growing arrays, turned into tensors at the end ---------------------------

local Buf = {}
Buf.__index = Buf
local function buf(ct) return setmetatable({ ct = ct, n = 0, cap = 0, p = nil }, Buf) end
function Buf:reserve(k)
  if self.n + k <= self.cap then return end
  local cap = math.max(1024, self.cap * 2, self.n + k)
  local p = ffi.new(self.ct .. "[?]", cap)
  if self.n > 0 then ffi.copy(p, self.p, self.n * ffi.sizeof(self.ct)) end
  self.p, self.cap = p, cap
end
function Buf:push(v)
  if self.n == self.cap then self:reserve(1) end
  self.p[self.n] = v
  self.n = self.n + 1
end
function Buf:append(s)  -- bytes of a string (a uint8_t buffer)
  self:reserve(#s)
  ffi.copy(self.p + self.n, s, #s)
  self.n = self.n + #s
end
function Buf:tensor(dtype)
  local t = factory.empty(self.n, { dtype = dtype })
  if self.n > 0 then ffi.copy(C.dl_tensor_data(t), self.p, self.n * ffi.sizeof(self.ct)) end
  return t
end

-- -- Decoding ---------------------------------------------------------------------

-- webdataset's basic handlers, by the extension's last component.
local TEXT = { txt = true, text = true, transcript = true }
local INT = { cls = true, cls2 = true, class = true, count = true, index = true, inx = true, id = true }
local JSON = { json = true, jsn = true }
local IMAGE = { jpg = true, jpeg = true, png = true, ppm = true, pgm = true, pbm = true, pnm = true, bmp = true,
                gif = true, webp = true, tif = true, tiff = true }

-- -- WebDataset -----------------------------------------------------------------

local WebDataset = checks.class("WebDataset")
M.WebDataset = WebDataset

local BAD = { error = true, warn = true, skip = true }
local SPECIAL = { __key__ = true, __url__ = true }

-- A shard's index: from its cache file when that describes the tar as it
-- is, else from its headers (then written to the cache when asked).
local function shard_index(path, write_index, stats)
  local idx_path = path .. ".idx"
  local x = C.dl_tar_index_load(path, idx_path)
  if x ~= nil then
    stats.cached = stats.cached + 1
    return ffi.gc(x, C.dl_tar_index_free)
  end
  x = C.dl_tar_scan(path)
  if x == nil then return nil, core.last_error() end
  x = ffi.gc(x, C.dl_tar_index_free)
  stats.scanned = stats.scanned + 1
  if write_index and C.dl_tar_index_save(x, idx_path) ~= 0 then
    io.stderr:write(("WebDataset: warning: cannot write the index cache: %s\n"):format(core.last_error()))
  end
  return x
end

local function fields_arg(fields, op)
  if fields == nil then return nil end
  if type(fields) == "string" then fields = { fields } end
  if type(fields) ~= "table" or #fields == 0 then
    raise(("%s: fields must be a non-empty list of extensions (such as {\"jpg\", \"cls\"}), got %s")
          :format(op, show(fields)))
  end
  local specs = {}
  for i, f in ipairs(fields) do
    if type(f) ~= "string" or f == "" then
      raise(("%s: fields[%d] must be an extension (a string such as \"jpg\" or \"jpg;png\"), got %s")
            :format(op, i, show(f)))
    end
    local alts = {}
    if SPECIAL[f] then
      alts.special = f
    else
      for a in f:gmatch("[^;]+") do alts[#alts + 1] = a:lower() end
    end
    alts.name = f
    specs[i] = alts
  end
  return specs
end

-- data.WebDataset(shards[, {fields =, decode =, transform =, on_bad_sample =
-- "error", write_index = false}]): the samples of tar shards, in tar order,
-- shard after shard.  shards: a list of paths, a glob or a brace pattern
-- (wds.expand_shards).  Each shard is indexed once, from its index cache
-- "<shard>.idx" (written by ShardWriter; write_index = true writes the
-- missing or stale ones) when that still describes the tar, else from its
-- headers.
--
-- fields: the extensions ds:get(i) returns, in order ("jpg;png": the
-- first present; "__key__" the key, "__url__" the shard's path); a sample
-- without one is an error naming the shard, key and field.  Without
-- fields, get returns a table of every member by extension, plus __key__
-- and __url__.  Values by extension (its last component): cls, cls2,
-- class, count, index, inx, id -> integer; txt, text, transcript ->
-- string; json, jsn -> Lua value (ddp.data.json); images (jpg, jpeg, png,
-- ppm, pgm, pbm, pnm, bmp, gif, webp, tif, tiff) -> decode(bytes, ext)
-- when decode is a function (the image reader plugs in there: decode =
-- data.decode_image), else the bytes as a 1-D uint8 tensor, as is every
-- other extension.  decode may also be a table of functions by extension
-- ({png = f, npy = g}), which wins over the rules above.  transform(v)
-- applies to the first field's value, or transform = {f1, f2, ...} (false
-- to leave one) to each field's, as webdataset's map_tuple.
--
-- on_bad_sample: "error" (a sample missing a field, two members with one
-- extension in a sample, a shard that cannot be indexed: an error naming
-- it), "warn" (such samples and shards are left out, one line each on
-- stderr), "skip" (left out silently).  A member that fails to read or
-- decode in get is always an error: the dataset's length is fixed.
local ds_opts = { fields = true, decode = true, transform = true, on_bad_sample = true, write_index = true }
function WebDataset:init(shards, opts)
  local op = "WebDataset"
  opts = check_opts(opts, op, ds_opts)
  local paths = M.expand_shards(shards, op)
  local fields = fields_arg(opts.fields, op)
  local dec = opts.decode
  if dec ~= nil and type(dec) ~= "function" and type(dec) ~= "table" then
    raise(("%s: decode must be a function(bytes, ext) for images or a table of them by extension, got %s")
          :format(op, show(dec)))
  end
  if type(dec) == "table" then
    for k, f in pairs(dec) do
      if type(k) ~= "string" or type(f) ~= "function" then
        raise(("%s: decode[%s] must be a function(bytes, ext), got %s"):format(op, show(k), show(f)))
      end
    end
  end
  local tf = opts.transform
  if tf ~= nil and type(tf) ~= "function" and type(tf) ~= "table" then
    raise(("%s: transform must be a function or a list of them (one per field), got %s"):format(op, show(tf)))
  end
  local bad = opts.on_bad_sample == nil and "error" or opts.on_bad_sample
  if not BAD[bad] then
    raise(("%s: on_bad_sample must be \"error\", \"warn\" or \"skip\", got %s"):format(op, show(bad)))
  end
  local write_index = bool_opt(opts.write_index, op, "write_index", false)

  local exts, ext_id = {}, {}
  local moff, msize, mext = buf("int64_t"), buf("int64_t"), buf("int32_t")
  local sfirst, koff, kbytes = buf("int64_t"), buf("int64_t"), buf("uint8_t")
  local starts, counts, fsize, msec, mnsec = {}, {}, {}, {}, {}
  local stats = { cached = 0, scanned = 0 }
  local dropped = 0
  -- the sample being gathered: its key and members (scratch, reused)
  local cur_key, cur_n = nil, 0
  local c_off, c_size, c_ext = {}, {}, {}
  local shard_path, shard_dropped, first_bad

  local function drop(why)
    dropped = dropped + 1
    shard_dropped = shard_dropped + 1
    first_bad = first_bad or why
  end
  local function finish()
    if cur_key == nil then return end
    local key, n = cur_key, cur_n
    cur_key, cur_n = nil, 0
    for a = 2, n do  -- two members with one extension (webdataset raises)
      for b = 1, a - 1 do
        if c_ext[a] == c_ext[b] then
          local why = ("%s: %s: sample %s has two members with the extension %s")
                      :format(op, shard_path, show(key), show(exts[c_ext[a] + 1]))
          if bad == "error" then raise(why) end
          return drop(why)
        end
      end
    end
    if fields then
      for _, f in ipairs(fields) do
        if not f.special then
          local found = false
          for _, a in ipairs(f) do
            local id = ext_id[a]
            for k = 1, n do
              if c_ext[k] == id then found = true break end
            end
            if found then break end
          end
          if not found then
            local have = {}
            for k = 1, n do have[k] = exts[c_ext[k] + 1] end
            local why = ("%s: %s: sample %s has no %s member (it has %s)")
                        :format(op, shard_path, show(key), show(f.name), table.concat(have, ", "))
            if bad == "error" then raise(why) end
            return drop(why)
          end
        end
      end
    end
    sfirst:push(moff.n)
    for k = 1, n do
      moff:push(c_off[k])
      msize:push(c_size[k])
      mext:push(c_ext[k])
    end
    koff:push(kbytes.n)
    kbytes:append(key)
  end

  for s, path in ipairs(paths) do
    shard_path, shard_dropped, first_bad = path, 0, nil
    starts[s] = sfirst.n
    local x, err = shard_index(path, write_index, stats)
    if x == nil then
      err = err:gsub("^tar: ", op .. ": ")
      if bad == "error" then raise(err) end
      if bad == "warn" then io.stderr:write(("%s: warning: shard left out: %s\n"):format(op, err)) end
      fsize[s], msec[s], mnsec[s] = -1, 0, 0
    else
      fsize[s] = tonumber(C.dl_tar_index_file_size(x))
      msec[s], mnsec[s] = tonumber(C.dl_tar_index_mtime(x, 0)), tonumber(C.dl_tar_index_mtime(x, 1))
      for m = 0, tonumber(C.dl_tar_index_count(x)) - 1 do
        local name = ffi.string(C.dl_tar_index_name(x, m))
        local key, ext = split_name(name)
        if key and not is_meta(name) then
          ext = ext:lower()
          if key ~= cur_key then
            finish()
            cur_key = key
          end
          local id = ext_id[ext]
          if not id then
            id = #exts
            exts[id + 1] = ext
            ext_id[ext] = id
          end
          cur_n = cur_n + 1
          c_off[cur_n] = tonumber(C.dl_tar_index_offset(x, m))
          c_size[cur_n] = tonumber(C.dl_tar_index_size(x, m))
          c_ext[cur_n] = id
        end
      end
      finish()  -- a sample never spans two shards
      C.dl_tar_index_free(ffi.gc(x, nil))
      if shard_dropped > 0 and bad == "warn" then
        io.stderr:write(("%s: warning: %d sample%s of %s left out; the first: %s\n")
                        :format(op, shard_dropped, shard_dropped == 1 and "" or "s", path, first_bad))
      end
    end
    counts[s] = sfirst.n - starts[s]
  end
  sfirst:push(moff.n)
  koff:push(kbytes.n)

  self.shards, self.fields, self.decode, self.transform, self.on_bad_sample = paths, opts.fields, dec, tf, bad
  if type(self.fields) == "string" then self.fields = { self.fields } end
  self.index_stats = { cached = stats.cached, scanned = stats.scanned, dropped = dropped }
  self._specs, self._exts, self._ext_id = fields, exts, ext_id
  self._n, self._starts, self._counts = sfirst.n - 1, starts, counts
  self._fsize, self._msec, self._mnsec = fsize, msec, mnsec
  self._moff, self._msize, self._mext = moff:tensor("int64"), msize:tensor("int64"), mext:tensor("int32")
  self._sfirst, self._koff, self._keys = sfirst:tensor("int64"), koff:tensor("int64"), kbytes:tensor("uint8")
end

function WebDataset:len() return self._n end
WebDataset.__len = WebDataset.len

-- ds:shard_of(i): the shard (1-based, into ds.shards) holding sample i.
function WebDataset:shard_of(i)
  local n = self._n
  if not is_integer(i) or i < 0 or i >= n then
    raise(("WebDataset:shard_of: index %s out of range for %d samples"):format(show(i), n))
  end
  local st = self._starts
  local lo, hi = 1, #st  -- the last shard starting at or before i
  while lo < hi do
    local mid = floor((lo + hi + 1) / 2)
    if st[mid] <= i then lo = mid else hi = mid - 1 end
  end
  return lo
end

-- ds:shard_ranges(): for each shard (as ds.shards), {first =, count =}:
-- its first sample's index (0-based) and how many samples it holds.
function WebDataset:shard_ranges()
  local out = {}
  for s = 1, #self._starts do out[s] = { first = self._starts[s], count = self._counts[s] } end
  return out
end

-- What get needs in each Lua state (the main one, each loader worker's):
-- pointers into the index tensors and the open shards -- never fields of
-- the dataset, so it travels to the workers as plain data.
local live = setmetatable({}, { __mode = "k" })
local MAX_OPEN = 4  -- shards a state keeps open per dataset (a worker reads on in one)

local function state(self)
  local st = live[self]
  if st then return st end
  local function p(t, ct) return ffi.cast(ct, C.dl_tensor_data(t)) end
  st = { moff = p(self._moff, "const int64_t *"), msize = p(self._msize, "const int64_t *"),
         mext = p(self._mext, "const int32_t *"), sfirst = p(self._sfirst, "const int64_t *"),
         koff = p(self._koff, "const int64_t *"), keys = p(self._keys, "const char *"),
         open = {}, order = {} }
  live[self] = st
  return st
end

local function reader(self, st, s)
  local h = st.open[s]
  if h then return h end
  local order = st.order
  if #order >= MAX_OPEN then
    local old = table.remove(order, 1)
    C.dl_tar_close(ffi.gc(st.open[old], nil))
    st.open[old] = nil
  end
  local path = self.shards[s]
  h = C.dl_tar_open(path, self._fsize[s], self._msec[s], self._mnsec[s])
  if h == nil then raise((core.last_error():gsub("^tar: ", "WebDataset: "))) end
  h = ffi.gc(h, C.dl_tar_close)
  st.open[s] = h
  order[#order + 1] = s
  return h
end

local function key_of(st, i)
  local a = st.koff[i]
  return ffi.string(st.keys + a, st.koff[i + 1] - a)
end

-- The value of member m (extension ext) of sample i in shard s.
local function value_of(self, st, s, i, m, ext)
  local key = key_of(st, i)
  local name = key .. "." .. ext
  local t = C.dl_tar_read(reader(self, st, s), st.moff[m], st.msize[m], name)
  if t == nil then raise((core.last_error():gsub("^tar: ", "WebDataset: "))) end
  t = core.own(t)
  local dec = self.decode
  local last = ext:match("[^.]*$")
  local f = type(dec) == "table" and (dec[ext] or dec[last]) or
            (type(dec) == "function" and IMAGE[last] and dec) or nil
  if f then
    local ok, v = pcall(f, t, ext)
    if not ok then
      raise(("WebDataset: %s: sample %s: decoding %s failed: %s"):format(self.shards[s], show(key), ext, tostring(v)))
    end
    return v
  end
  if TEXT[last] or INT[last] or JSON[last] then
    local n = tonumber(st.msize[m])
    local text = n > 0 and ffi.string(C.dl_tensor_data(t), n) or ""
    if TEXT[last] then return text end
    if JSON[last] then
      return json.decode(text, ("WebDataset: %s: sample %s: %s"):format(self.shards[s], show(key), ext))
    end
    local v = text:match("^%s*([-+]?%d+)%s*$")
    if not v then
      raise(("WebDataset: %s: sample %s: %s holds %s, not an integer"):format(self.shards[s], show(key), ext,
            show(#text > 40 and text:sub(1, 40) .. "..." or text)))
    end
    return tonumber(v)
  end
  return t
end

-- ds:get(i) (0-based; negative from the end): the fields of sample i,
-- decoded, in the order of opts.fields -- or, without fields, a table of
-- every member by extension with __key__ and __url__.
function WebDataset:get(i)
  local n = self._n
  if not is_integer(i) or i < -n or i >= n then
    raise(("WebDataset:get: index %s out of range for %d samples"):format(show(i), n))
  end
  if i < 0 then i = i + n end
  local st = state(self)
  local s = self:shard_of(i)
  local first, last = tonumber(st.sfirst[i]), tonumber(st.sfirst[i + 1])
  local specs, exts, mext = self._specs, self._exts, st.mext
  if not specs then
    local out = { __key__ = key_of(st, i), __url__ = self.shards[s] }
    for m = first, last - 1 do
      local ext = exts[mext[m] + 1]
      out[ext] = value_of(self, st, s, i, m, ext)
    end
    return out
  end
  local vals, ext_id = {}, self._ext_id
  for k, f in ipairs(specs) do
    if f.special == "__key__" then
      vals[k] = key_of(st, i)
    elseif f.special == "__url__" then
      vals[k] = self.shards[s]
    else
      for _, a in ipairs(f) do
        local id = ext_id[a]
        if id then
          for m = first, last - 1 do
            if mext[m] == id then
              vals[k] = value_of(self, st, s, i, m, a)
              break
            end
          end
        end
        if vals[k] ~= nil then break end
      end
    end
  end
  local tf = self.transform
  if type(tf) == "function" then
    vals[1] = tf(vals[1])
  elseif type(tf) == "table" then
    for k = 1, #specs do
      if tf[k] then vals[k] = tf[k](vals[k]) end
    end
  end
  return unpack(vals, 1, #specs)
end

-- ds:key(i): the key of sample i (0-based).
function WebDataset:key(i)
  local n = self._n
  if not is_integer(i) or i < 0 or i >= n then
    raise(("WebDataset:key: index %s out of range for %d samples"):format(show(i), n))
  end
  return key_of(state(self), i)
end

function WebDataset:__tostring()
  local f = self.fields and table.concat(self.fields, ", ") or "all members"
  return ("WebDataset(%d samples in %d shards: %s)"):format(self._n, #self.shards, f)
end

return M
