-- gpt.lua: a byte-level GPT (examples/gpt_model.lua: pre-LN blocks, causal
-- self-attention) trained data-parallel on the license texts every Debian
-- machine has (/usr/share/common-licenses, ~237 KB, package base-files),
-- as nanoGPT's train.py would: token files memory-mapped once per node
-- (ddp.tokens), a DistributedSampler over windows, AdamW with weight decay
-- only on matrices, gradient clipping, a warm-up + cosine schedule,
-- evaluation on held-out text, rank-0 logging, checkpoints that --resume
-- continues exactly (mid-epoch: the loader's place goes with them), and a
-- sample of text at the end.
--
--   ddplua --nproc 2 examples/gpt.lua                 (about a minute on 2 cores)
--   ddplua --nproc 2 examples/gpt.lua --resume        (after an interruption: the same flags)
--          [--text FILE,FILE...] [--batch-size 32 (per rank)] [--block-size 64]
--          [--n-layer 2] [--n-head 4] [--n-embd 128] [--lr 3e-3] [--out gpt]
--
-- Files: OUT.train.bin and OUT.val.bin (the text's bytes as uint16 tokens:
-- the last 10% of every text file held out for validation), OUT.ckpt.
local ddp = require "ddp"
local nn = require "ddp.nn"
local optim = require "ddp.optim"
local data = require "ddp.data"
local tokens = require "ddp.tokens"

local here = arg and arg[0] and arg[0]:match("^(.*)/") or "."
local gpt = dofile(here .. "/gpt_model.lua")

local LICENSES = "/usr/share/common-licenses/"
local DEFAULT_TEXT = {}
for _, n in ipairs { "Apache-2.0", "Artistic", "BSD", "CC0-1.0", "GFDL-1.2", "GFDL-1.3", "GPL-1", "GPL-2", "GPL-3",
                     "LGPL-2", "LGPL-2.1", "LGPL-3", "MPL-1.1", "MPL-2.0" } do
  DEFAULT_TEXT[#DEFAULT_TEXT + 1] = LICENSES .. n
end

local args = ddp.argparse({
  text = "", out = "gpt", steps = 600, batch_size = 32, block_size = 64, n_layer = 2, n_head = 4, n_embd = 128,
  lr = 3e-3, min_lr = 3e-4, warmup = 50, weight_decay = 0.1, grad_clip = 1.0,
  eval_every = 200, log_every = 50, ckpt_every = 200, resume = false, seed = 0, sample = 300, threads = 0,
  explicit_attention = false, stop_at = 0,
}, arg, {
  program = "ddplua examples/gpt.lua",
  help = { text = "comma-separated text files (default: /usr/share/common-licenses/*)",
           out = "prefix of the token files and the checkpoint", steps = "optimizer steps in all",
           batch_size = "windows per rank per step", resume = "continue from OUT.ckpt",
           sample = "bytes to sample at the end (0: none)", threads = "threads per rank (0: the default)",
           explicit_attention = "attention from matmul/softmax even where the fused one exists",
           stop_at = "stop after this step, as if interrupted (0: run to --steps)" },
})
gpt.force_explicit = args.explicit_attention

io.stdout:setvbuf("line")  -- the log as it comes, also into a file
ddp.init({ backend = "cpu" })
if args.threads > 0 then ddp.set_num_threads(args.threads) end
ddp.manual_seed(args.seed)

-- -- Data: the text's bytes, written once per node -------------------------------------

local train_bin, val_bin = args.out .. ".train.bin", args.out .. ".val.bin"
if ddp.local_rank() == 0 then
  local files = args.text ~= "" and {} or DEFAULT_TEXT
  for f in args.text:gmatch("[^,]+") do files[#files + 1] = f end
  local train_parts, val_parts = {}, {}
  for _, path in ipairs(files) do
    local f = io.open(path, "rb")
    if f then
      local s = f:read("*a")
      f:close()
      local cut = math.floor(#s * 0.9)
      train_parts[#train_parts + 1] = s:sub(1, cut)
      val_parts[#val_parts + 1] = s:sub(cut + 1)
    elseif args.text ~= "" then
      error("gpt.lua: cannot read " .. path)
    end
  end
  local function write(path, parts) return tokens.write(path, tokens.bytes(table.concat(parts))) end
  local nt, nv = write(train_bin, train_parts), write(val_bin, val_parts)
  ddp.print(("data: %d files, %d training and %d validation bytes"):format(#train_parts, nt, nv))
end
ddp.barrier()

local T = args.block_size
-- training windows at every position (stride 1), a new order each epoch;
-- validation over non-overlapping windows, each counted by one rank
local train = data.TokenDataset(train_bin, { block_size = T, stride = 1 })
local val = data.TokenDataset(val_bin, { block_size = T })
local sampler = data.DistributedSampler(train, { seed = args.seed, drop_last = true })
local loader = data.DataLoader(train, { batch_size = args.batch_size, sampler = sampler, drop_last = true })
local val_loader = data.DataLoader(val, { batch_size = 64, sampler = data.DistributedSampler(val, { eval = true }) })

-- -- Model, optimizer, schedule ----------------------------------------------------------

local cfg = { vocab_size = 256, block_size = T, n_layer = args.n_layer, n_head = args.n_head, n_embd = args.n_embd }
local model = ddp.DDP(gpt.GPT(cfg))
local opt = optim.AdamW(gpt.param_groups(model, args.weight_decay), { lr = args.lr, betas = { 0.9, 0.95 } })
local sched = optim.lr_scheduler.CosineWithWarmup(opt, {
  warmup_steps = math.min(args.warmup, args.steps - 1), total_steps = args.steps, min_lr = args.min_lr })

local ckpt = args.out .. ".ckpt"
local step = 0
if args.resume then
  local state = ddp.load_checkpoint(ckpt, { model = model, optimizer = opt, scheduler = sched, loader = loader })
  step = state.step
  ddp.print(("resumed from %s at step %d"):format(ckpt, step))
end
ddp.print(("GPT: %d parameters (%d layers, %d heads, n_embd %d, context %d), %d rank(s) x batch %d, %d thread(s) each, %s attention")
  :format(model:num_parameters(), cfg.n_layer, cfg.n_head, cfg.n_embd, T, ddp.world_size(), args.batch_size,
          ddp.get_num_threads(),
          (nn.functional.scaled_dot_product_attention and not gpt.force_explicit) and "fused" or "explicit"))

-- mean loss per token over the whole validation text: each rank its share
local function evaluate()
  model:eval()
  local sum, n = 0, 0
  ddp.no_grad(function()
    for _, x, y in val_loader:iter() do
      local _, loss = model(x, y)
      sum, n = sum + loss:item() * y:numel(), n + y:numel()
    end
  end)
  model:train()
  local m = data.reduce_metrics({ sum = sum, n = n })
  return m.sum / m.n
end

local function save()
  ddp.save_checkpoint(ckpt, { model = model, optimizer = opt, scheduler = sched, loader = loader, step = step },
                      { all_ranks = true })
end

-- -- Training ----------------------------------------------------------------------------

local clock = require("ddp.core").clock  -- monotonic seconds
local t0, window_loss, window_n = clock(), 0, 0
local start_step, start_time = step, clock()
while step < args.steps do
  for _, x, y in loader:iter() do
    opt:zero_grad()
    local _, loss = model(x, y)
    loss:backward()  -- gradients averaged over the ranks
    nn.utils.clip_grad_norm(model:parameters(), args.grad_clip)
    opt:step()
    sched:step()
    step = step + 1
    local l = loss:item()
    window_loss, window_n = window_loss + l, window_n + 1
    if step % args.log_every == 0 or step == args.steps then
      local now = clock()
      local mean = data.reduce_metrics({ l = window_loss / window_n }).l / ddp.world_size()
      ddp.print(("step %5d  loss %.6f  lr %.2e  %.0f ms/step"):format(step, mean, sched:get_last_lr()[1],
                (now - t0) * 1e3 / window_n))
      t0, window_loss, window_n = now, 0, 0
    end
    if step % args.eval_every == 0 or step == args.steps then
      ddp.print(("step %5d  val loss %.4f"):format(step, evaluate()))
    end
    if step % args.ckpt_every == 0 or step == args.steps or step == args.stop_at then save() end
    if window_n == 0 then t0 = clock() end  -- ms/step leaves evaluation and checkpoints out
    if step >= args.steps or step == args.stop_at then break end
  end
  if step == args.stop_at then break end
end
if step > start_step then
  ddp.print(("%d steps in %.1f s"):format(step - start_step, clock() - start_time))
end

-- -- Sampling ----------------------------------------------------------------------------

if args.sample > 0 and ddp.rank() == 0 then
  ddp.manual_seed(args.seed + 1)
  local prompt = "This License"
  local idx = ddp.tensor({ { prompt:byte(1, -1) } }, { dtype = "int64" })
  local out = gpt.generate(model.module or model, idx, args.sample, { temperature = 0.8 })
  io.write("---- sample ----\n", tokens.decode_bytes(out:get(0)), "\n----------------\n")
  io.flush()
end
ddp.barrier()
