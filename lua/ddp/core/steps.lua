-- ddp.core.steps: where each optimizer step's time goes, by phase -- data
-- wait, forward, backward compute, exposed communication, optimizer, other
-- (ddp.step_stats(), the progress bar's breakdown, the launcher's
-- straggler lines and end-of-job table, the flight recorder's step table).
--
-- The library's own hot spots report here: the DataLoader its wait for a
-- batch, the outermost module call its forward, backward() its pass, the
-- optimizer its step.  Communication is what the runtime counts as time
-- blocked in collectives (dl_flight_comm_seconds: blocking calls and waits
-- for asynchronous ones, such as the reducer's wait for its last bucket at
-- the end of backward); it is taken out of the phase it happened in, so
-- backward is compute only.  A step ends when the first optimizer that
-- stepped steps again (a second optimizer, a GAN's, adds to the phase but
-- does not end a step, until it steps twice while the first does not: the
-- script moved on to it); "other" is the rest of the interval (logging,
-- the loss's item(), evaluation).
local B = require "ddp.ffi"

local C = B.C
local M = {}

-- ddp.core's monotonic clock (every module that reports here has loaded
-- ddp.core first; ddp.core does not load this one)
local clock = require("ddp.core").clock
-- while a trace is on, each phase and step is a span of it too
local trace = require "ddp.core.trace"
-- each step's end is a window of the memory breakdown's
local memory = require "ddp.core.memory"
local T_PHASE, T_STEP = trace.T_PHASE, trace.T_STEP

local comm = C.dl_flight_comm_seconds
local step_done = C.dl_flight_step_done

local WINDOW = 64  -- steps kept for medians (the flight recorder keeps as many)
local PHASES = { "total", "data", "forward", "backward", "comm", "optimizer", "other" }

-- this step so far (seconds), and where it began
local acc_data, acc_fwd, acc_bwd, acc_opt = 0, 0, 0, 0
local t_begin, c_begin = nil, 0
local clock_owner = nil   -- the optimizer whose steps end a step
local other_opt, other_steps = nil, 0  -- another one stepping since the clock's last step
local steps = 0
local window = {}         -- window[k % WINDOW + 1] = the step numbered k (0-based) as {total, data, ...}
local sums = { 0, 0, 0, 0, 0, 0, 0 }

-- M.publish(kind, line): set by ddp.dist (a rank of a job leaves its lines
-- in the store for the launcher, under ddp/<kind>/<rank>), called every
-- PUBLISH_EVERY seconds: this step summary ("steps") and the memory peaks
-- (ddp.core.memory's, "mem").
M.publish = nil
local PUBLISH_EVERY = 2
local t_published = nil

-- The clock and the communication counter now; a step begins at the
-- first phase measured after the previous one ended.
local function mark()
  local t, c = clock(), tonumber(comm())
  if t_begin == nil then t_begin, c_begin = t, c end
  return t, c
end
M.mark = mark

local function now() return clock(), tonumber(comm()) end

-- phase time = wall time since (t0, c0) less the communication inside it
function M.data(seconds)
  if t_begin == nil then t_begin, c_begin = clock() - seconds, tonumber(comm()) end
  acc_data = acc_data + seconds
  if trace.on then
    local t = clock()
    trace.span("data", "data", T_PHASE, t - seconds, t)
  end
end
-- > 0 while a checkpoint recomputes its forward inside backward
-- (ddp.nn.checkpoint): that time is the backward's, not the forward's.
M.recomputing = 0
function M.forward(t0, c0)
  if M.recomputing > 0 then return end
  local t, c = now()
  acc_fwd = acc_fwd + (t - t0) - (c - c0)
  if trace.on then trace.span("forward", "forward", T_PHASE, t0, t) end
end
function M.backward(t0, c0)
  local t, c = now()
  acc_bwd = acc_bwd + (t - t0) - (c - c0)
  if trace.on then trace.span("backward", "backward", T_PHASE, t0, t) end
end

local function median(vals, n)
  table.sort(vals)
  if n % 2 == 1 then return vals[(n + 1) / 2] end
  return (vals[n / 2] + vals[n / 2 + 1]) / 2
end

-- {total =, data =, ..., other =, busy =} medians over the window (busy:
-- the step less its communication, what a rank does on its own).
local function medians()
  local n = math.min(steps, WINDOW)
  if n == 0 then return nil end
  local out, vals = {}, {}
  for p = 1, #PHASES do
    for k = 1, n do vals[k] = window[k][p] end
    out[PHASES[p]] = median(vals, n)
  end
  for k = 1, n do vals[k] = window[k][1] - window[k][5] end
  out.busy = median(vals, n)
  return out, n
end

-- The line a rank leaves for the launcher (cli/steps.c reads it): version,
-- steps, window length, the window's medians (total data forward backward
-- comm optimizer other busy), then the sums over every step.
function M.summary()
  local m, n = medians()
  if not m then return nil end
  return ("1 %d %d %.6f %.6f %.6f %.6f %.6f %.6f %.6f %.6f %.6f %.6f %.6f %.6f %.6f %.6f %.6f"):format(
    steps, n, m.total, m.data, m.forward, m.backward, m.comm, m.optimizer, m.other, m.busy,
    sums[1], sums[2], sums[3], sums[4], sums[5], sums[6], sums[7])
end

function M.flush()
  local pub = M.publish
  if pub then
    pcall(pub, "steps", M.summary())
    pcall(pub, "mem", memory.line())
  end
end

-- The optimizer opt stepped from (t0, c0): its time goes to the
-- optimizer phase; the clock optimizer's step ends the step.
function M.optimizer(opt, t0, c0)
  local t, c = now()
  acc_opt = acc_opt + (t - t0) - (c - c0)
  if trace.on then trace.span("optimizer step", "optimizer", T_PHASE, t0, t) end
  if clock_owner == nil then clock_owner = opt end
  if clock_owner ~= opt then
    -- another optimizer that steps twice while the clock's does not
    -- (the script moved on to a new one) takes the clock
    if other_opt ~= opt then other_opt, other_steps = opt, 0 end
    other_steps = other_steps + 1
    if other_steps < 2 then return end
    clock_owner = opt
  end
  other_opt, other_steps = nil, 0
  local total = t - (t_begin or t0)
  local cm = c - c_begin
  local other = total - acc_data - acc_fwd - acc_bwd - cm - acc_opt
  if other < 0 then other = 0 end
  local slot = window[steps % WINDOW + 1]
  if not slot then slot = {} window[steps % WINDOW + 1] = slot end
  slot[1], slot[2], slot[3], slot[4], slot[5], slot[6], slot[7] = total, acc_data, acc_fwd, acc_bwd, cm, acc_opt, other
  for p = 1, 7 do sums[p] = sums[p] + slot[p] end
  steps = steps + 1
  step_done(total, acc_data, acc_fwd, acc_bwd, cm, acc_opt)
  if trace.on then
    trace.span("step " .. steps, "step", T_STEP, t - total, t,
               { data = acc_data, forward = acc_fwd, backward = acc_bwd, comm = cm, optimizer = acc_opt, other = other })
  end
  acc_data, acc_fwd, acc_bwd, acc_opt = 0, 0, 0, 0
  t_begin, c_begin = t, c
  memory.step_end()
  if M.publish and (t_published == nil or t - t_published >= PUBLISH_EVERY) then
    t_published = t
    M.flush()
  end
end

-- ddp.step_stats(): nil before the first step, else {step =, total =,
-- data =, forward =, backward =, comm =, optimizer =, other = (the last
-- step, seconds), median = {the same, and busy =, over the last steps},
-- window = how many steps the medians cover}.
function M.stats()
  if steps == 0 then return nil end
  local last = window[(steps - 1) % WINDOW + 1]
  local out = { step = steps }
  for p = 1, #PHASES do out[PHASES[p]] = last[p] end
  out.median, out.window = medians()
  return out
end

return M
