-- ddp: the module users require, the top of the library.  It gives out,
-- as in PyTorch's torch namespace: tensor creation and random numbers
-- (ddp.tensor.factory), every tensor method also as a function (ddp.add(a, b)),
-- the runtime's switches (threads, memory, ddp.cuda), checkpoints, grad
-- mode, the process group's functions (ddp.dist: ddp.init, ddp.rank, ...),
-- ddp.DDP, and the submodules ddp.nn, ddp.optim, ddp.data, ddp.dist,
-- ddp.store, ddp.argparse, ddp.hf.
--
-- The library is lua/ddp/ in folders by concern; a folder's init.lua is
-- the module of the folder's name (ddp.nn is nn/init.lua) and gathers its
-- parts.  The modules form a strict hierarchy, each requiring only those
-- before it (tests/modules_spec.lua checks the order, in its LAYERS):
--   ddp.ffi (bindings/ddp/ffi.lua: the runtime, and its cdef, ddp.cdef)
--   ddp.core.errors, .handles, .args, .values, .class; ddp.core (all of them)
--   ddp.serialize, ddp.autocast
--   ddp.tensor.info, .views, .math, .grad, .sampling, .print; ddp.tensor (the type)
--   ddp.tensor.factory (creation), ddp.autograd
--   ddp.nn.functional (also ddp.functional)
--   ddp.dist.store (also ddp.store), ddp.dist.env, .group, .collectives, .objects,
--     .preempt; ddp.dist
--   ddp.nn.module, .weight_init, .layers, .containers, .utils, .attention,
--     .sync_bn, .parallel (ddp.DDP); ddp.nn (above ddp.dist: SyncBatchNorm and DDP use it)
--   ddp.optim.shards, .optimizer (the base), .lr_scheduler, .zero
--     (ZeroRedundancyOptimizer), .grad_scaler (GradScaler); ddp.optim
--   ddp.checkpoint (its all_ranks saves gather), ddp.data.checks, .sample_rng,
--     .worker_codec, .collate, .worker_main, .workers (loader worker threads), .dataset,
--     .idx, .samplers, .loader, .metrics, .npy, .transforms_functional, .transforms,
--     .json, .webdataset, .shard_sampler, .shard_writer, .tokens (also ddp.tokens); ddp.data;
--     ddp.progress, ddp.summary.tfevents, .histogram; ddp.summary (ddp.SummaryWriter),
--     ddp.argparse
--   ddp.hf.parts, .files, .gpt2, .llama; ddp.hf (Hugging Face model folders)
--   ddp.console.chunk, .format, .complete; ddp.console (the prompt's side in Lua)
--   ddp (this file)
-- so none of them requires "ddp" back, and everything here loads at once.
-- ddp.testing (.compare, .assertions, .run: busted helpers) sits beside
-- this file on the lower modules; specs load it, this file does not.
local core = require "ddp.core"
local tensor = require "ddp.tensor"
local factory = require "ddp.tensor.factory"
local printer = require "ddp.tensor.print"
local autograd = require "ddp.autograd"
local autocast = require "ddp.autocast"
local dist = require "ddp.dist"
local checkpoint = require "ddp.checkpoint"
local nn = require "ddp.nn"
local optim = require "ddp.optim"
local data = require "ddp.data"
local store = require "ddp.dist.store"
local argparse = require "ddp.argparse"
local progress = require "ddp.progress"
local summary = require "ddp.summary"
local console = require "ddp.console"
local hf = require "ddp.hf"
local C, ffi = core.C, core.ffi
local new, check, raise = core.new, core.check, core.raise
local is_integer = core.is_integer
local T = tensor.methods
local type = type

core.add_lib_file(debug.getinfo(1, "S").source)

local ddp = { _VERSION = ffi.string(C.dl_version()) }

-- dtype names, so scripts can write ddp.float32 as torch.float32
for _, name in ipairs { "float32", "float64", "int32", "int64", "uint8", "bool", "bfloat16", "float16" } do
  ddp[name] = name
end
ddp.float, ddp.double, ddp.long, ddp.int, ddp.half = "float32", "float64", "int64", "int32", "float16"

-- -- Creation ---------------------------------------------------------------

-- Before the method functions below, which fill only names still free
-- (ddp.float is a dtype name, ddp.where takes a condition first).
for name, f in pairs(factory) do ddp[name] = f end

function ddp.where(cond, a, b)
  if a == nil and b == nil then return T.nonzero(core.tensor_arg(cond, "where", "condition")) end
  return new(C.dl_where, core.tensor_arg(cond, "where", "condition"),
             core.operand(a, "where", 2), core.operand(b, "where", 3))
end
function ddp.addmm(c, a, b, opts) return T.addmm(core.operand(c, "addmm", 1), a, b, opts) end
function ddp.one_hot(t, n) return T.one_hot(core.tensor_arg(t, "one_hot", "input"), n) end

-- Every other method as a function of its first argument.
for name, f in pairs(T) do
  if ddp[name] == nil and not name:match("^_") then
    ddp[name] = function(x, ...)
      return f(core.operand(x, name, 1), ...)
    end
  end
end

-- -- Runtime ------------------------------------------------------------------

function ddp.is_tensor(x) return core.is_tensor(x) end
function ddp.is_floating_point(t) return T.is_floating_point(core.tensor_arg(t, "is_floating_point")) end
function ddp.promote_types(a, b)
  local da, db = core.dtype_arg(a, "promote_types", -1), core.dtype_arg(b, "promote_types", -1)
  if da < 0 or db < 0 then raise("promote_types: expected two dtype names, got " .. core.show(a) .. " and " .. core.show(b)) end
  return core.dtype_name(C.dl_promote_types(da, db))
end
function ddp.result_type(a, b)
  return core.dtype_name(C.dl_result_type(core.operand(a, "result_type", 1), core.operand(b, "result_type", 2)))
end
ddp.get_default_dtype = function() return core.dtype_name(core.default_dtype()) end
ddp.set_default_dtype = core.set_default_dtype

function ddp.set_num_threads(n)
  if not is_integer(n) or n < 1 then raise("set_num_threads: expected a positive integer, got " .. tostring(n)) end
  check(C.dl_set_num_threads(n))
end
function ddp.get_num_threads() return C.dl_get_num_threads() end
function ddp.memory_allocated() return tonumber(C.dl_mem_allocated()) end
function ddp.max_memory_allocated() return tonumber(C.dl_mem_peak()) end
function ddp.memory_cached() return tonumber(C.dl_mem_cached()) end
function ddp.empty_cache() C.dl_empty_cache() end
-- ddp.memory_summary([{model =, optimizer =}]): where this rank's memory
-- goes, a table to print (torch.cuda.memory_summary()); ddp.memory_breakdown:
-- the same numbers as a table (ddp.core.memory).
local memory = require "ddp.core.memory"
function ddp.memory_summary(opts) return memory.summary(opts, dist.rank(), dist.world_size()) end
function ddp.memory_breakdown(opts) return memory.breakdown(opts, dist.rank(), dist.world_size()) end

-- ddp.cuda: the device probe and device memory.  A device argument is an
-- index or "cuda:N"; the default is this worker's GPU (LOCAL_RANK, as
-- ddp.device() names it).
local function cuda_index(op, d)
  if d == nil then return dist.current_device() end
  if type(d) == "string" then
    local k = d:match("^cuda:(%d+)$") or (d == "cuda" and "0")
    if k then return tonumber(k) end
  elseif is_integer(d) and d >= 0 then
    return d
  end
  raise(op .. ": device must be an index or \"cuda:N\", got " .. tostring(d))
end
local mem_stat_buf = ffi.new("int64_t[9]")
local mem_stat_names = { "allocated", "reserved", "peak_allocated", "peak_reserved", "allocs",
                         "cache_hits", "segments", "retries", "ooms" }
ddp.cuda = {
  is_available = function() return C.dl_cuda_device_count() > 0 end,
  device_count = function() return C.dl_cuda_device_count() end,
  -- The current device (ddp.init makes it this rank's, ddp.device()).
  current_device = function() return dist.current_device() end,
  -- "cuda" (no index) names it from then on.
  set_device = function(d) core.set_current_cuda(cuda_index("cuda.set_device", d)) end,
  status = function() return ffi.string(C.dl_cuda_status()) end,
  synchronize = function(d) check(C.dl_cuda_synchronize(cuda_index("cuda.synchronize", d))) end,
  empty_cache = function(d) check(C.dl_cuda_empty_cache(cuda_index("cuda.empty_cache", d))) end,
  reset_peak_memory_stats = function(d)
    check(C.dl_cuda_reset_peak_memory_stats(cuda_index("cuda.reset_peak_memory_stats", d)))
  end,
  -- {allocated=, reserved=, peak_allocated=, peak_reserved=, allocs=,
  -- cache_hits=, segments=, retries=, ooms=} (bytes and counts)
  memory_stats = function(d)
    check(C.dl_cuda_memory_stats(cuda_index("cuda.memory_stats", d), mem_stat_buf, 9))
    local r = {}
    for i, k in ipairs(mem_stat_names) do r[k] = tonumber(mem_stat_buf[i - 1]) end
    return r
  end,
  -- TF32 for float32 matmul / conv2d (off by default, as PyTorch)
  set_allow_tf32 = function(on) C.dl_cuda_set_allow_tf32(on and 1 or 0) end,
  allow_tf32 = function() return C.dl_cuda_get_allow_tf32() ~= 0 end,
}

ddp.save, ddp.load = checkpoint.save, checkpoint.load
ddp.save_checkpoint, ddp.load_checkpoint = checkpoint.save_checkpoint, checkpoint.load_checkpoint
ddp.latest_checkpoint = checkpoint.latest_checkpoint
-- NumPy's .npy files (ddp.data.npy), as np.load / np.save
ddp.load_npy, ddp.save_npy = data.load_npy, data.save_npy

ddp.autograd = autograd
ddp.no_grad, ddp.enable_grad = autograd.no_grad, autograd.enable_grad
ddp.checkpoint = require("ddp.nn.checkpoint").checkpoint
ddp.set_grad_enabled, ddp.is_grad_enabled = autograd.set_grad_enabled, autograd.is_grad_enabled

ddp.set_printoptions = printer.set_printoptions
ddp.Tensor = T

-- The process group (ddp.dist): ddp.init, ddp.rank, ddp.barrier, ...
for _, name in ipairs { "init", "shutdown", "is_initialized", "backend", "rank", "world_size",
                        "local_rank", "local_world_size", "node_rank", "is_main", "local_device", "launch_kind",
                        "print", "barrier", "broadcast_object", "all_gather_object",
                        "all_reduce", "broadcast", "all_gather", "all_gather_into_tensor", "reduce_scatter",
                        "send", "recv", "all_reduce_async", "should_stop", "preempt_signal",
                        "requeue" } do
  ddp[name] = dist[name]
end

-- ddp.autocast(dtype, fn, ...): mixed precision (ddp.autocast).
ddp.autocast = autocast.autocast
ddp.autocast_dtype = autocast.get_dtype
-- ddp.GradScaler([opts]) (ddp.optim.grad_scaler): torch.amp.GradScaler;
-- ddp.amp.GradScaler and ddp.amp.autocast as torch.amp names them.
ddp.GradScaler = optim.GradScaler
ddp.amp = { GradScaler = optim.GradScaler, autocast = autocast.autocast }

-- The submodules, as ddp.nn etc. (require "ddp.nn" gives the same table).
ddp.nn, ddp.optim, ddp.data, ddp.dist, ddp.store, ddp.argparse = nn, optim, data, dist, store, argparse
-- ddp.hf: Hugging Face model folders (from_pretrained, save_pretrained, GPT-2, Llama).
ddp.hf = hf

-- ddp.DDP(model[, opts]) (ddp.nn.parallel): the data-parallel wrapper.
ddp.DDP = nn.parallel.DDP
-- ddp.ZeroRedundancyOptimizer(params, ddp.optim.AdamW, opts): ddp.optim's.
ddp.ZeroRedundancyOptimizer = optim.ZeroRedundancyOptimizer

-- ddp.DataLoader, ddp.DistributedSampler, ddp.reduce_metrics: ddp.data's.
ddp.DataLoader, ddp.DistributedSampler, ddp.reduce_metrics =
  data.DataLoader, data.DistributedSampler, data.reduce_metrics

-- ddp.progress(total[, opts]) (ddp.progress): a rank-0 progress line.
ddp.progress = progress
-- ddp.SummaryWriter(logdir[, opts]) (ddp.summary): TensorBoard event files
-- and metrics.jsonl, written by rank 0, as torch.utils.tensorboard's.
ddp.SummaryWriter = summary.SummaryWriter
-- ddp.clock(): monotonic seconds (for timing steps); ddp.time(): Unix
-- time in seconds, a float (time.time()).
ddp.clock, ddp.time = core.clock, core.time
-- ddp.trace.start(dir[, opts]) / ddp.trace.stop(): one timeline of every
-- rank, Chrome trace events (ddp.trace; `ddplua --trace DIR`).
ddp.trace = require "ddp.trace"
-- ddp.step_stats(): this rank's last optimizer step by phase (data,
-- forward, backward, comm, optimizer, other, total: seconds) and the
-- medians of its last steps, or nil before the first (ddp.core.steps).
ddp.step_stats = require("ddp.core.steps").stats
-- ddp.breakpoint([rank]): the prompt on that rank, with the caller's
-- locals; the other ranks wait (ddp.console).
ddp.breakpoint = console.breakpoint

-- ddp.log and ddp.device are tensor functions too (torch.log, t:device()):
-- a tensor argument keeps that meaning; ddp.log("step", i) prints on every
-- rank and ddp.device() names this worker's device.
do
  local tensor_log, tensor_device = T.log, T.device
  function ddp.log(...)
    if select("#", ...) == 1 and core.is_tensor((...)) then return tensor_log((...)) end
    return dist.log(...)
  end
  function ddp.device(...)
    if select("#", ...) > 0 then return tensor_device(core.tensor_arg((...), "device", "input")) end
    return dist.device()
  end
end

return ddp
