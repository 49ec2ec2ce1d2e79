-- A small deterministic data-parallel training run for tests/preempt_spec.lua
-- (the model and data of tests/scripts/resume_train.lua): it asks
-- ddp.should_stop() after every step and, on true, saves a checkpoint
-- (all_ranks) as DIR/step_<n>.safetensors and exits 0, as a job that a
-- scheduler pre-empts should.  Every step prints this rank's loss in full
-- precision; --resume starts from ddp.latest_checkpoint(DIR).
--
--   ddplua --nproc 2 tests/scripts/preempt_train.lua --dir DIR [--steps 20]
--     [--ready PIDDIR --ready-at K | --wait-at K] [--pace S] [--save-every K]
--     [--ignore-rank R] [--resume]
--
-- --ready PIDDIR: at step --ready-at (or --wait-at) each rank writes its pid
-- to PIDDIR/pid<rank>, armed, for the spec to signal it.  --wait-at K: the
-- ranks stop stepping after step K and poll should_stop until it says true
-- (at most 20 s, then exit 3), so the save comes at step K.  --pace S: sleep
-- S seconds after each step.  --ignore-rank R: rank R saves but then never
-- exits (the launcher must kill it after --save-grace).  --requeue: after the
-- save, ddp.requeue() (tests/slurm_spec.lua); --resume then continues.
local ddp = require "ddp"
local nn, optim, data = ddp.nn, ddp.optim, ddp.data
local F = nn.functional
local ffi = require "ffi"
pcall(ffi.cdef, "int poll(void *fds, unsigned long n, int timeout); int getpid(void);")
local function sleep(s) ffi.C.poll(nil, 0, math.floor(s * 1000)) end

local args = ddp.argparse({
  steps = 20, dir = "", ready = "", ready_at = 0, wait_at = 0, pace = 0.0, save_every = 0,
  ignore_rank = -1, resume = false, requeue = false,
}, arg)

ddp.init()
ddp.manual_seed(123)
local x, y = ddp.randn(50, 6), ddp.randint(0, 3, { 50 })
ddp.manual_seed(1)
local train = data.TensorDataset(x, y)
local loader = data.DataLoader(train, { batch_size = 4, sampler = data.DistributedSampler(train, { seed = 7 }) })
local model = ddp.DDP(nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 3)))
local opt = optim.AdamW(model:parameters(), { lr = 0.05 })
local sched = optim.lr_scheduler.StepLR(opt, { step_size = 5, gamma = 0.7 })

local step = 0
if args.resume then
  local path = assert(ddp.latest_checkpoint(args.dir), "no checkpoint in " .. args.dir)
  step = ddp.load_checkpoint(path, { model = model, optimizer = opt, scheduler = sched, loader = loader }).step
  ddp.log("resumed from " .. path)
end

ddp.should_stop()  -- arms this process before the first step

local function save()
  ddp.save_checkpoint(("%s/step_%d.safetensors"):format(args.dir, step),
                      { model = model, optimizer = opt, scheduler = sched, loader = loader, step = step },
                      { all_ranks = true })
end

local function ready()
  if args.ready == "" then return end
  local f = assert(io.open(("%s/pid%d"):format(args.ready, ddp.rank()), "w"))
  f:write(ffi.C.getpid(), "\n")
  f:close()
end

local function stop()
  save()
  ddp.log(("saved step %d after %s"):format(step, tostring(ddp.preempt_signal())))
  if args.requeue then ddp.requeue() end  -- rank 0: scontrol requeue $SLURM_JOB_ID
  if ddp.rank() == args.ignore_rank then
    ddp.log("ignoring it")
    io.stdout:flush()
    while true do sleep(1) end
  end
  ddp.log("final line of rank " .. ddp.rank())
  os.exit(0)
end

while step < args.steps do
  local epoch = loader:epoch()
  for _, xb, yb in loader:iter() do
    step = step + 1
    opt:zero_grad()
    local loss = F.cross_entropy(model(xb), yb)
    loss:backward()
    opt:step()
    sched:step()
    ddp.log(("step %d epoch %d loss %.17g"):format(step, epoch, loss:item()))
    if args.save_every > 0 and step % args.save_every == 0 then save() end
    if step == args.ready_at then ready() end
    if step == args.wait_at then
      ready()
      local t0 = os.time()
      while not ddp.should_stop() do
        if os.time() - t0 > 20 then ddp.log("no request came") os.exit(3) end
        sleep(0.01)
      end
    end
    if ddp.should_stop() then stop() end
    if args.pace > 0 then sleep(args.pace) end
    if step == args.steps then break end
  end
end
ddp.log("done at step " .. step)
