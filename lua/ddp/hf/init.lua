-- ddp.hf: Hugging Face model folders both ways, for GPT-2 and Llama-style
-- models.  from_pretrained reads config.json and the safetensors weights
-- (one file or shards with their index) into ddp.hf's GPT2LMHeadModel or
-- LlamaForCausalLM, whose names and layouts are transformers' own;
-- save_pretrained writes a folder that transformers' from_pretrained reads.
--
--   local hf = require "ddp.hf"            -- also ddp.hf
--   local model = hf.from_pretrained("gpt2-local")        -- {dtype =, device =}
--   local logits, loss = model(ids, ids)   -- labels shifted inside, as transformers
--   hf.save_pretrained(model, "out")       -- or model:save_pretrained("out")
local core = require "ddp.core"
local dist = require "ddp.dist"
local nn = require "ddp.nn"
local files = require "ddp.data.files"
local json = require "ddp.data.json"
local hf_files = require "ddp.hf.files"
local parts = require "ddp.hf.parts"
local gpt2 = require "ddp.hf.gpt2"
local llama = require "ddp.hf.llama"
local raise, show = core.raise, core.show

core.add_lib_file(debug.getinfo(1, "S").source)

local M = {
  GPT2LMHeadModel = gpt2.GPT2LMHeadModel, GPT2Model = gpt2.GPT2Model,
  LlamaForCausalLM = llama.LlamaForCausalLM, LlamaModel = llama.LlamaModel,
  Conv1D = parts.Conv1D,
}

-- What each model_type is: its class, the architectures whose weights it
-- takes (a base model's too: it lacks only the tied lm_head), the prefix
-- of its body in state_dict names, and the keys of buffers that older
-- transformers saved and that this model does not keep (GPT-2's causal
-- mask, Llama's rotary frequencies).
local kinds = {
  gpt2 = { class = gpt2.GPT2LMHeadModel, body = "transformer.", embedding = "transformer.wte.weight",
           embedding_of = function(m) return m.transformer.wte.weight end,
           architectures = { GPT2LMHeadModel = true, GPT2Model = true },
           dropped = { "%.attn%.bias$", "%.attn%.masked_bias$" } },
  llama = { class = llama.LlamaForCausalLM, body = "model.", embedding = "model.embed_tokens.weight",
            embedding_of = function(m) return m.model.embed_tokens.weight end,
            architectures = { LlamaForCausalLM = true, LlamaModel = true },
            dropped = { "%.rotary_emb%.inv_freq$" } },
}
-- a set's keys, sorted and joined (the names an error offers)
local function names_of(set, sep)
  local names = {}
  for k in pairs(set) do names[#names + 1] = k end
  table.sort(names)
  return table.concat(names, sep)
end

local float_dtypes = { float32 = true, float64 = true, bfloat16 = true, float16 = true }

-- The dtype the weights become: opts.dtype, or with "auto" (the default,
-- as transformers 5) the config's dtype (torch_dtype in older files), else
-- the files' first floating dtype.
local function target_dtype(want, config, tensors, what)
  if want ~= nil and want ~= "auto" then
    if not float_dtypes[want] then
      raise(('%s: dtype must be "auto", "float32", "bfloat16", "float16" or "float64", got %s'):format(what, show(want)))
    end
    return want
  end
  for _, key in ipairs { "dtype", "torch_dtype" } do
    local d = config[key]
    if type(d) == "string" and float_dtypes[d] then return d end
  end
  local names = {}
  for name, t in pairs(tensors) do if t:is_floating_point() then names[#names + 1] = name end end
  table.sort(names)
  return names[1] and tensors[names[1]]:dtype() or "float32"
end

-- The file's names as the model's state_dict has them: the body's prefix
-- added where a file of the base model has none, old buffers left out,
-- a tied lm_head given the embedding.
local function model_names(tensors, kind, tied)
  local prefixed = false
  for name in pairs(tensors) do
    if name:sub(1, #kind.body) == kind.body then prefixed = true break end
  end
  local out = {}
  for name, t in pairs(tensors) do
    local drop = false
    for _, pat in ipairs(kind.dropped) do drop = drop or name:match(pat) ~= nil end
    if not drop then
      if not prefixed and name ~= "lm_head.weight" then name = kind.body .. name end
      out[name] = t
    end
  end
  if tied then out["lm_head.weight"] = out[kind.embedding] end
  return out
end

local from_opts = { dtype = true, device = true }

-- hf.from_pretrained(dir[, {dtype = "auto", device = "cpu"}]) -> model, in
-- eval mode as transformers returns it (model:train() to fine-tune).  The
-- model's class comes from config.json's model_type (gpt2, llama); another
-- type, an unknown architecture, a missing or extra weight and a weight of
-- another shape are errors naming them.  Every rank reads the files
-- itself (memory-mapped: no rank waits for another).
function M.from_pretrained(dir, opts)
  if type(dir) ~= "string" then raise("from_pretrained: dir must be a folder's path, got " .. core.describe(dir)) end
  opts = core.check_opts(opts, "from_pretrained", from_opts)
  local what = "from_pretrained"
  local config, config_path = hf_files.read_config(dir, what)
  local kind = kinds[config.model_type]
  if not kind then
    raise(("%s: %s: model_type %s is not supported (supported: %s)"):format(what, config_path, show(config.model_type), names_of(kinds, ", ")))
  end
  local arch = config.architectures
  if type(arch) == "table" and arch ~= json.null then
    for _, a in ipairs(arch) do
      if not kind.architectures[a] then
        raise(("%s: %s: architecture %s is not supported (this model_type loads as %s)")
              :format(what, config_path, show(a), names_of(kind.architectures, " or ")))
      end
    end
  end
  local device = opts.device and core.device_arg(opts.device, what) >= 0 and opts.device or nil
  local tensors, source = hf_files.read_weights(dir, what)
  local dtype = target_dtype(opts.dtype, config, tensors, what)
  local model = kind.class(config, { dtype = dtype, init = false })
  local sd = model_names(tensors, kind, core.same(model.lm_head.weight, kind.embedding_of(model)))
  local ok, err = pcall(model.load_state_dict, model, sd)
  if not ok then raise(("%s: %s: %s"):format(what, source, (tostring(err):gsub("^[^\n]-:%d+: ", "", 1)))) end
  if device then model:to(device) end
  return model:eval()
end

-- -- Saving ------------------------------------------------------------------------

-- The model itself: a DDP wrapper's module, checked to be one of ddp.hf's.
local function hf_model(model, what)
  if nn.parallel.is_ddp(model) then model = model.module end
  local kind = nn.is_module(model) and type(model.config) == "table" and kinds[model.config.model_type]
  if not kind or not core.is_instance(model, kind.class) then
    raise(("%s: expected a ddp.hf model (GPT2LMHeadModel, LlamaForCausalLM), got %s")
          :format(what, nn.is_module(model) and model.__name or core.describe(model)))
  end
  return model, kind
end

local save_opts = { max_shard_size = true }

-- hf.save_pretrained(model, dir[, {max_shard_size = "50GB"}]): config.json
-- and the weights in their dtype (one model.safetensors, or shards of at
-- most max_shard_size and their index), with metadata format = "pt" as
-- transformers wants; a tied lm_head is left out, as transformers leaves
-- it.  Written by rank 0 alone (the others return at once: ddp.barrier()
-- waits for the files), each file atomically, config.json last.  A DDP
-- model saves its module.  Returns the names of the files written (rank 0).
function M.save_pretrained(model, dir, opts)
  local what = "save_pretrained"
  local kind
  model, kind = hf_model(model, what)
  if type(dir) ~= "string" or dir == "" then raise("save_pretrained: dir must be a folder's path, got " .. show(dir)) end
  opts = core.check_opts(opts, what, save_opts)
  local max_bytes = hf_files.parse_size(opts.max_shard_size or "50GB", what)
  if dist.rank() ~= 0 then return {} end
  local ok, why = files.make_dirs(dir)
  if not ok then raise(("save_pretrained: cannot make the folder %s"):format(why)) end
  -- named_parameters lists a tensor held twice once, under its first name:
  -- the embedding, never the lm_head tied to it
  local list, dtype = {}, nil
  for name, p in model:named_parameters() do
    list[#list + 1] = { name, p:detach() }
    dtype = dtype or p:dtype()
  end
  local sd = model:state_dict()
  for name, b in model:named_buffers() do
    if sd[name] ~= nil then list[#list + 1] = { name, b } end
  end
  local config = {}
  for k, v in pairs(model.config) do config[k] = v end
  config.dtype, config.torch_dtype = dtype, nil
  config.tie_word_embeddings = core.same(model.lm_head.weight, kind.embedding_of(model))
  local written = hf_files.write_weights(dir, list, max_bytes, { format = "pt" })
  hf_files.write_config(dir, config)
  written[#written + 1] = hf_files.CONFIG
  return written
end

-- hf.AutoModelForCausalLM.from_pretrained(dir), and the classes' own
-- Class.from_pretrained(dir) and model:save_pretrained(dir), as in
-- transformers.
M.AutoModelForCausalLM = { from_pretrained = M.from_pretrained }
for _, kind in pairs(kinds) do
  local class = kind.class
  class.from_pretrained = function(dir, opts)
    local model = M.from_pretrained(dir, opts)
    if not core.is_instance(model, class) then
      raise(("from_pretrained: %s holds a %s, not a %s"):format(dir, model.__name, class.__name))
    end
    return model
  end
  class.save_pretrained = M.save_pretrained
end

return M
