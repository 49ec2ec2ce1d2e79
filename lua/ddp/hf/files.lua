-- ddp.hf.files: a Hugging Face model folder on disk -- config.json, and the
-- weights as one model.safetensors or as shards listed by
-- model.safetensors.index.json ({"metadata": {"total_size": N},
-- "weight_map": {name: file}}), read and written as transformers does.
-- Every file goes through ddp.save / ddp.load (atomic writes, a strict
-- reader); the index names only files in the same folder.
local core = require "ddp.core"
local checkpoint = require "ddp.checkpoint"
local files = require "ddp.data.files"
local json = require "ddp.data.json"
local raise, show = core.raise, core.show

core.add_lib_file(debug.getinfo(1, "S").source)

local M = {}

M.CONFIG, M.WEIGHTS, M.INDEX = "config.json", "model.safetensors", "model.safetensors.index.json"
local SHARD = "^model%-%d%d%d%d%d%-of%-%d%d%d%d%d%.safetensors$"

local function read_text(path, what)
  local f, err = io.open(path, "rb")
  if not f then raise(("%s: cannot read %s: %s"):format(what, path, err)) end
  local text = f:read("*a")
  f:close()
  return text
end

-- The decoded JSON object of path, or an error naming the file.
local function read_object(path, what)
  local v = json.decode(read_text(path, what), path)
  if type(v) ~= "table" or v == json.null or #v > 0 then
    raise(("%s: %s must hold a JSON object"):format(what, path))
  end
  return v
end

function M.read_config(dir, what)
  local path = dir .. "/" .. M.CONFIG
  if not files.exists(path) then
    raise(("%s: %s has no %s (a Hugging Face model folder holds config.json and model.safetensors)")
          :format(what, dir, M.CONFIG))
  end
  return read_object(path, what), path
end

-- name -> tensor of every weight in dir (views of the files' pages; on
-- device when given), and the file they came from (for messages).
function M.read_weights(dir, what, device)
  local index = dir .. "/" .. M.INDEX
  local single = dir .. "/" .. M.WEIGHTS
  local opts = device and { device = device } or nil
  if files.exists(index) then
    local idx = read_object(index, what)
    local map = idx.weight_map
    if type(map) ~= "table" or map == json.null or #map > 0 then
      raise(("%s: %s has no weight_map object"):format(what, index))
    end
    local by_file, out = {}, {}
    for name, file in pairs(map) do
      if type(file) ~= "string" or not file:match("^[^/\\]+%.safetensors$") or file:match("^%.") then
        raise(("%s: %s: tensor %s maps to %s, not a .safetensors file of the same folder")
              :format(what, index, show(name), show(file)))
      end
      local shard = by_file[file]
      if not shard then
        local path = dir .. "/" .. file
        if not files.exists(path) then
          raise(("%s: %s lists %s, which is missing (tensor %s)"):format(what, index, file, show(name)))
        end
        shard = checkpoint.load(path, opts)
        by_file[file] = shard
      end
      local t = shard[name]
      if t == nil then raise(("%s: %s: %s does not hold tensor %s"):format(what, index, file, show(name))) end
      out[name] = t
    end
    return out, index
  end
  if files.exists(single) then return (checkpoint.load(single, opts)), single end
  for _, pickle in ipairs { "pytorch_model.bin", "pytorch_model.bin.index.json", "model.bin" } do
    if files.exists(dir .. "/" .. pickle) then
      raise(("%s: %s holds %s, PyTorch's pickle format, which ddplua does not read (unpickling runs code): "
             .. "convert it to safetensors first (in Python: model.save_pretrained(dir) with transformers)")
            :format(what, dir, pickle))
    end
  end
  raise(("%s: %s has neither %s nor %s"):format(what, dir, M.WEIGHTS, M.INDEX))
end

-- Bytes from a size such as transformers takes (max_shard_size): a number,
-- or "5GB" (10^9), "500MB", "2GiB" (2^30), "64KiB"...
local units = { B = 1, KB = 1e3, MB = 1e6, GB = 1e9, TB = 1e12, KIB = 2 ^ 10, MIB = 2 ^ 20, GIB = 2 ^ 30, TIB = 2 ^ 40 }
function M.parse_size(v, what)
  if type(v) == "number" and v > 0 then return v end
  if type(v) == "string" then
    local n, unit = v:match("^%s*([%d%.]+)%s*(%a*)%s*$")
    local f = units[(unit or ""):upper()]
    if n and tonumber(n) and f and tonumber(n) > 0 then return math.floor(tonumber(n) * f) end
  end
  raise(('%s: max_shard_size must be a positive number of bytes or a size such as "5GB" or "2GiB", got %s')
        :format(what, show(v)))
end

local function remove_stale(dir, keep)
  local names = files.list_dir(dir) or {}
  for _, name in ipairs(names) do
    if not keep[name] and (name:match(SHARD) or name == M.WEIGHTS or name == M.INDEX) then os.remove(dir .. "/" .. name) end
  end
end

-- Writes list ({name, tensor} pairs, in order) into dir: one
-- model.safetensors when it fits max_bytes, else shards of at most
-- max_bytes each (a larger tensor alone in its own) and their index.
-- Weight files of an earlier save that this one does not write are
-- removed after, so the folder never mixes two saves' shards.  Returns the
-- names of the files written.
function M.write_weights(dir, list, max_bytes, metadata)
  local total, params, shards, cur, cur_bytes = 0, 0, {}, nil, 0
  for _, nt in ipairs(list) do
    local bytes = nt[2]:numel() * nt[2]:element_size()
    total, params = total + bytes, params + nt[2]:numel()
    if cur == nil or (cur_bytes + bytes > max_bytes and #cur > 0) then
      cur, cur_bytes = {}, 0
      shards[#shards + 1] = cur
    end
    cur[#cur + 1] = nt
    cur_bytes = cur_bytes + bytes
  end
  local written, keep = {}, {}
  local function write(file, group)
    local tensors = {}
    for _, nt in ipairs(group) do tensors[nt[1]] = nt[2] end
    checkpoint.save(tensors, dir .. "/" .. file, metadata)
    written[#written + 1], keep[file] = file, true
  end
  if #shards <= 1 then
    write(M.WEIGHTS, shards[1] or {})
  else
    local map = {}
    for i, group in ipairs(shards) do
      local file = ("model-%05d-of-%05d.safetensors"):format(i, #shards)
      write(file, group)
      for _, nt in ipairs(group) do map[nt[1]] = file end
    end
    local text = json.encode({ metadata = { total_parameters = params, total_size = total }, weight_map = map })
    files.write_atomic(dir .. "/" .. M.INDEX, { { text, #text } }, "save_pretrained")
    written[#written + 1], keep[M.INDEX] = M.INDEX, true
  end
  remove_stale(dir, keep)
  return written
end

function M.write_config(dir, config)
  local text = json.encode(config) .. "\n"
  files.write_atomic(dir .. "/" .. M.CONFIG, { { text, #text } }, "save_pretrained")
end

return M
