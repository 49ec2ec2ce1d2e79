-- ddp.progress: a progress line for training loops, shown by rank 0 only.
--
--   local bar = ddp.progress(total, { desc = "epoch 1", unit = "samples" })
--   bar:update(n, { loss = 0.41 })   -- n more done; extra fields shown
--   bar:close()                      -- the final line, with the totals
--
-- With {loader = loader} the line also shows the share of the time the
-- loop waited for that DataLoader's batches since the bar began ("data
-- 3%": loader:stats()); above a few percent, more num_workers help.
--
-- With {steps = true} it shows where this rank's steps go (the medians of
-- ddp.step_stats(): "step 11.2 ms: data 1% fwd 1% bwd 3% comm 94% opt 1%");
-- a large comm share on a rank means it waits for the others.
--
-- On a terminal (ddplua's launcher says so through DDP_TTY, since workers
-- write into pipes) the line redraws itself; elsewhere (logs, CI) a plain
-- line is printed every `every` seconds (default 10) and at the end.
local core = require "ddp.core"
local dist = require "ddp.dist"
local steps = require "ddp.core.steps"
local ffi = core.ffi
local raise, show = core.raise, core.show
local floor, fmt = math.floor, string.format

core.add_lib_file(debug.getinfo(1, "S").source)
-- Declared under a name of our own (bound to the libc symbol): ddp loads
-- this module at once, and a script's own declaration of isatty, with its
-- own types, must still work.
pcall(ffi.cdef, [[
int dl_progress_isatty(int fd) __asm__("isatty");
]])

local Bar = core.class("ddp.progress")

local clock = core.clock

local function on_terminal()
  local v = os.getenv("DDP_TTY")
  if v ~= nil and v ~= "" then return v == "1" end
  return ffi.C.dl_progress_isatty(1) == 1
end

local function hms(s)
  if s ~= s or s == math.huge then return "?" end
  s = floor(s + 0.5)
  if s >= 3600 then return fmt("%d:%02d:%02d", floor(s / 3600), floor(s % 3600 / 60), s % 60) end
  return fmt("%d:%02d", floor(s / 60), s % 60)
end

local function rate(x)
  if x >= 1e4 then return fmt("%.1fk", x / 1e3) end
  return fmt("%.0f", x)
end

function Bar:line(final)
  local t = clock() - self.t0
  local done, total = self.n, self.total
  local speed = t > 0 and done / t or 0
  local parts = {}
  if self.desc then parts[#parts + 1] = self.desc end
  local pct = total > 0 and done / total or 1
  if self.tty then
    local w = 24
    local k = floor(pct * w + 0.5)
    parts[#parts + 1] = fmt("%3d%% |%s%s|", floor(pct * 100), ("#"):rep(k), (" "):rep(w - k))
  else
    parts[#parts + 1] = fmt("%3d%%", floor(pct * 100))
  end
  parts[#parts + 1] = fmt("%d/%d %s", floor(done * self.scale + 0.5), floor(total * self.scale + 0.5), self.unit)
  parts[#parts + 1] = fmt("%s %s/s", t >= 0.2 and rate(speed * self.scale) or "-", self.unit)
  if self.loader then
    local st = self.loader:stats()
    local dt = st.total_s - self.stats0.total_s
    if dt > 0 then parts[#parts + 1] = fmt("data %d%%", floor(100 * (st.wait_s - self.stats0.wait_s) / dt + 0.5)) end
  end
  if self.steps then
    local st = steps.stats()
    local m = st and st.median
    if m and m.total > 0 then
      local function pc(v) return floor(100 * v / m.total + 0.5) end
      parts[#parts + 1] = fmt("step %.1f ms: data %d%% fwd %d%% bwd %d%% comm %d%% opt %d%%", m.total * 1e3,
                              pc(m.data), pc(m.forward), pc(m.backward), pc(m.comm), pc(m.optimizer))
    end
  end
  for _, k in ipairs(self.keys) do
    local v = self.fields[k]
    parts[#parts + 1] = type(v) == "number" and fmt("%s %.4g", k, v) or (k .. " " .. tostring(v))
  end
  if final then parts[#parts + 1] = "in " .. hms(t)
  else parts[#parts + 1] = "ETA " .. hms(speed > 0 and (total - done) / speed or 0 / 0) end
  return table.concat(parts, "  ")
end

-- bar:update(n[, fields]): n more units done (samples of this rank; the
-- rate is scaled to the whole job with opts.scale, default world size).
function Bar:update(n, fields)
  if not self.show then return end
  self.n = self.n + (n or 1)
  if fields then
    for k, v in pairs(fields) do
      if self.fields[k] == nil then self.keys[#self.keys + 1] = k table.sort(self.keys) end
      self.fields[k] = v
    end
  end
  local now = clock()
  if self.tty then
    if now - self.last >= 0.1 then
      self.last = now
      io.stdout:write(self:line(false), "\27[K\r")
      io.stdout:flush()
    end
  elseif now - self.last >= self.every then
    self.last = now
    print(self:line(false))
  end
end

function Bar:close()
  if not self.show or self.closed then return end
  self.closed = true
  io.stdout:write(self:line(true), self.tty and "\27[K\n" or "\n")
  io.stdout:flush()
end

-- ddp.progress(total[, {desc=, unit="it", every=10, scale=world size,
-- all_ranks=false, loader=nil, steps=false}]).
function Bar:init(total, opts)
  if type(total) ~= "number" or total < 0 then raise("ddp.progress: total must be a number >= 0, got " .. show(total)) end
  opts = opts or {}
  self.total, self.desc, self.unit, self.every = total, opts.desc, opts.unit or "it", opts.every or 10
  self.scale, self.n, self.fields, self.keys = opts.scale or dist.world_size(), 0, {}, {}
  self.show, self.tty = opts.all_ranks or dist.rank() == 0, on_terminal()
  if opts.loader ~= nil then
    if type(opts.loader) ~= "userdata" and type(opts.loader) ~= "table" or type(opts.loader.stats) ~= "function" then
      raise("ddp.progress: loader must be a DataLoader (with stats()), got " .. show(opts.loader))
    end
    self.loader, self.stats0 = opts.loader, opts.loader:stats()
  end
  if opts.steps ~= nil and type(opts.steps) ~= "boolean" then
    raise("ddp.progress: steps must be true or false, got " .. show(opts.steps))
  end
  self.steps = opts.steps
  self.t0 = clock()
  self.last = self.tty and 0 or self.t0
end

-- The module is the constructor: ddp.progress(total, opts) is Bar(total, opts).
return function(total, opts) return Bar(total, opts) end
