-- ddp.dist.env: who am I and how many are we, from the launcher's
-- variables (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, NODE_RANK),
-- read once and checked: rank, world_size, ..., this rank's device, and
-- print (rank 0) / log (every rank).  A script not started by the
-- launcher is a world of one.
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

-- Reads (once) and checks the launcher's variables.
local function env()
  if env_cache then return env_cache end
  local ws_s, rank_s = os.getenv("WORLD_SIZE"), os.getenv("RANK")
  local e
  if (ws_s == nil or ws_s == "") and (rank_s == nil or rank_s == "") then
    e = { rank = 0, world_size = 1, local_rank = 0, local_world_size = 1, node_rank = 0, launched = false }
  else
    if ws_s == nil or ws_s == "" or rank_s == nil or rank_s == "" then
      raise(("ddp: RANK and WORLD_SIZE must be set together (RANK=%s, WORLD_SIZE=%s); "
             .. "start the script with `ddplua --nproc N script.lua`, or unset both for a world of one")
            :format(show(rank_s), show(ws_s)))
    end
    local ws = int_env("WORLD_SIZE", nil, 1)
    local rank = int_env("RANK", nil, 0)
    if rank >= ws then
      raise(("ddp: RANK=%d is out of range for WORLD_SIZE=%d (ranks are 0..%d)"):format(rank, ws, ws - 1))
    end
    local lws = int_env("LOCAL_WORLD_SIZE", ws, 1)
    local lr = int_env("LOCAL_RANK", rank % lws, 0)
    if lr >= lws then
      raise(("ddp: LOCAL_RANK=%d is out of range for LOCAL_WORLD_SIZE=%d"):format(lr, lws))
    end
    if lws > ws then
      raise(("ddp: LOCAL_WORLD_SIZE=%d is larger than WORLD_SIZE=%d"):format(lws, ws))
    end
    e = { rank = rank, world_size = ws, local_rank = lr, local_world_size = lws,
          node_rank = int_env("NODE_RANK", int_env("GROUP_RANK", 0, 0), 0), launched = true }
  end
  env_cache = e
  return e
end

function M.rank() return env().rank end
function M.world_size() return env().world_size end
function M.local_rank() return env().local_rank end
function M.local_world_size() return env().local_world_size end
function M.node_rank() return env().node_rank end
function M.is_main() return env().rank == 0 end
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
