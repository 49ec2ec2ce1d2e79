-- ddp.dist.env: who am I and how many are we, from the variables of
-- whatever started the process (ddplua's launcher, srun, mpirun, torchrun,
-- env://), read once and checked: rank, world_size, ..., this rank's
-- device, and print (rank 0) / log (every rank).  A script started by none
-- of them is a world of one.
local core = require "ddp.core"
local raise, show = core.raise, core.show
local tonumber = tonumber

core.add_lib_file(debug.getinfo(1, "S").source)

local M = {}
local C, ffi = core.C, core.ffi

local env_cache

local function int_env(name, dflt, min)
  local s = os.getenv(name)
  if s == nil or s == "" then return dflt end
  local n = tonumber(s)
  if not core.is_integer(n) or n < min then
    raise(("ddp: environment variable %s=%q is not an integer >= %d"):format(name, s, min))
  end
  return n
end

local kinds = { [0] = "alone", "ddplua", "mpi", "slurm", "torchrun", "env" }

-- Reads (once) and checks the launch layout: the runtime reads the
-- variables of ddplua's launcher, MPI, SLURM, torchrun or env://
-- (dist/launch_env.c, docs/clusters.md).
local function env()
  if env_cache then return env_cache end
  local l = ffi.new("dl_launch")
  if C.dl_launch_detect(l) ~= 0 then core.raise_c() end
  local kind = kinds[tonumber(l.kind)]
  env_cache = {
    rank = l.rank, world_size = l.world_size, local_rank = l.local_rank,
    local_world_size = l.local_world_size, node_rank = l.node_rank, nnodes = l.nnodes,
    launched = kind ~= "alone", kind = kind, serves_store = l.serves_store ~= 0,
    master_addr = ffi.string(l.master_addr), master_port = l.master_port,
    port_from = ffi.string(l.port_from), job_id = ffi.string(l.job_id),
    token = ffi.string(l.token), vars = ffi.string(l.vars), problem = ffi.string(l.problem),
  }
  return env_cache
end

function M.rank() return env().rank end
function M.world_size() return env().world_size end
function M.local_rank() return env().local_rank end
function M.local_world_size() return env().local_world_size end
function M.node_rank() return env().node_rank end
function M.is_main() return env().rank == 0 end
-- What started this process: "alone", "ddplua", "mpi", "slurm",
-- "torchrun" or "env".
function M.launch_kind() return env().kind end
-- torch.distributed's names, for the fingers of PyTorch users
M.get_rank, M.get_world_size = M.rank, M.world_size

-- Real (not emulated) CUDA devices, for the choice of NCCL.
function M._real_cuda_devices()
  local n = C.dl_cuda_device_count()
  if n <= 0 then return 0 end
  if ffi.string(C.dl_cuda_status()):find("emulat", 1, true) then return 0 end
  return n
end

-- ddp.device() / ddp.local_device(): this rank's device, "cuda:<k>" with
-- k = LOCAL_RANK mod the number of devices where CUDA is available (one
-- rank per GPU, as torchrun), else "cpu".
function M.device()
  local n = C.dl_cuda_device_count()
  if n > 0 then return "cuda:" .. (env().local_rank % n) end
  return "cpu"
end
M.local_device = M.device

-- ddp.print(...): as print, on rank 0 only.
function M.print(...)
  if env().rank == 0 then print(...) end
end

-- ddp.log(...): as print, on every rank.  The launcher already prefixes each
-- worker's lines with "[rank] " (unless --no-prefix), so nothing is added.
function M.log(...)
  print(...)
end

-- For the process group (ddp.dist.group): the checked variables, and an
-- integer one read with its default and minimum.
M._env, M._int_env = env, int_env

return M
