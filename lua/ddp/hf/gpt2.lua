-- ddp.hf.gpt2: Hugging Face's GPT2LMHeadModel in ddplua, with its module
-- tree, so its state_dict names and layouts are those of the files
-- transformers writes ("transformer.h.0.attn.c_attn.weight", Conv1D
-- weights [in, out]) and a checkpoint loads with nothing renamed or
-- transposed.  lm_head.weight is transformer.wte.weight (tied) unless the
-- config says tie_word_embeddings = false.
--
--   local model = hf.GPT2LMHeadModel({n_layer = 2, n_head = 2, n_embd = 64, vocab_size = 256})
--   local logits = model(input_ids)               -- [B, T, vocab_size]
--   local logits, loss = model(input_ids, labels)  -- labels as transformers': shifted here
local core = require "ddp.core"
local factory = require "ddp.tensor.factory"
local nn = require "ddp.nn"
local parts = require "ddp.hf.parts"
local F = nn.functional
local raise = core.raise

core.add_lib_file(debug.getinfo(1, "S").source)

local M = {}

-- GPT2Config's defaults (transformers), the fields this model reads.
M.defaults = {
  model_type = "gpt2", vocab_size = 50257, n_positions = 1024, n_embd = 768, n_layer = 12, n_head = 12,
  activation_function = "gelu_new", resid_pdrop = 0.1, embd_pdrop = 0.1, attn_pdrop = 0.1,
  layer_norm_epsilon = 1e-5, initializer_range = 0.02, scale_attn_weights = true,
  scale_attn_by_inverse_layer_idx = false, reorder_and_upcast_attn = false, add_cross_attention = false,
  tie_word_embeddings = true, bos_token_id = 50256, eos_token_id = 50256,
}

-- The config, resolved and checked: {fields the modules read} or an error
-- naming the field (what: "GPT2LMHeadModel" or the config file).
function M.check_config(cfg, what)
  local c = parts.resolve(cfg, M.defaults, what)
  local f = function(key, kind) return parts.field(c, key, kind, nil, what) end
  local r = {
    vocab_size = f("vocab_size", "positive"), n_positions = f("n_positions", "positive"),
    n_embd = f("n_embd", "positive"), n_layer = f("n_layer", "integer"), n_head = f("n_head", "positive"),
    resid_pdrop = f("resid_pdrop", "number"), embd_pdrop = f("embd_pdrop", "number"),
    attn_pdrop = f("attn_pdrop", "number"), layer_norm_epsilon = f("layer_norm_epsilon", "number"),
    initializer_range = f("initializer_range", "number"), scale_attn_weights = f("scale_attn_weights", "boolean"),
    scale_attn_by_inverse_layer_idx = f("scale_attn_by_inverse_layer_idx", "boolean"),
    tie_word_embeddings = f("tie_word_embeddings", "boolean"),
  }
  r.n_inner = parts.field(c, "n_inner", "positive", 4 * r.n_embd, what)
  r.act = parts.activation(f("activation_function", "string"), "activation_function", what)
  if r.n_embd % r.n_head ~= 0 then
    raise(("%s: n_embd = %d is not a multiple of n_head = %d"):format(what, r.n_embd, r.n_head))
  end
  if f("add_cross_attention", "boolean") then
    raise(("%s: add_cross_attention = true (an encoder-decoder GPT-2) is not supported"):format(what))
  end
  return r, c
end

local Attention = nn.Module:extend("GPT2Attention")
function Attention:init(r, layer_idx, dtype)
  self.n_head, self.n_embd = r.n_head, r.n_embd
  local hd = r.n_embd / r.n_head
  self.scaling = (r.scale_attn_weights and 1 / math.sqrt(hd) or 1) /
                 (r.scale_attn_by_inverse_layer_idx and (layer_idx + 1) or 1)
  self.attn_pdrop = r.attn_pdrop
  self.c_attn = parts.Conv1D(3 * r.n_embd, r.n_embd, { dtype = dtype })
  self.c_proj = parts.Conv1D(r.n_embd, r.n_embd, { dtype = dtype })
  self.resid_dropout = nn.Dropout(r.resid_pdrop)
end
function Attention:forward(x)
  local B, T, C = x:size(0), x:size(1), x:size(2)
  local H = self.n_head
  local qkv = self.c_attn(x):split(C, 2)
  local function heads(t) return t:view(B, T, H, C / H):transpose(1, 2) end
  local y = F.scaled_dot_product_attention(heads(qkv[1]), heads(qkv[2]), heads(qkv[3]), {
    is_causal = true, scale = self.scaling, dropout_p = self.training and self.attn_pdrop or 0 })
  return self.resid_dropout(self.c_proj(y:transpose(1, 2):contiguous():view(B, T, C)))
end

local MLP = nn.Module:extend("GPT2MLP")
function MLP:init(r, dtype)
  self.c_fc = parts.Conv1D(r.n_inner, r.n_embd, { dtype = dtype })
  self.c_proj = parts.Conv1D(r.n_embd, r.n_inner, { dtype = dtype })
  self.dropout = nn.Dropout(r.resid_pdrop)
  self.act = r.act
end
function MLP:forward(x) return self.dropout(self.c_proj(self.act(self.c_fc(x)))) end

local Block = nn.Module:extend("GPT2Block")
function Block:init(r, layer_idx, dtype)
  self.ln_1 = nn.LayerNorm(r.n_embd, { eps = r.layer_norm_epsilon, dtype = dtype })
  self.attn = Attention(r, layer_idx, dtype)
  self.ln_2 = nn.LayerNorm(r.n_embd, { eps = r.layer_norm_epsilon, dtype = dtype })
  self.mlp = MLP(r, dtype)
end
function Block:forward(x)
  x = x + self.attn(self.ln_1(x))
  return x + self.mlp(self.ln_2(x))
end

-- GPT2Model: the embeddings, the blocks and the last LayerNorm; the
-- hidden states [B, T, n_embd].
M.GPT2Model = nn.Module:extend("GPT2Model")
function M.GPT2Model:init(r, dtype)
  self.n_positions = r.n_positions
  self.wte = parts.embedding(r.vocab_size, r.n_embd, dtype)
  self.wpe = parts.embedding(r.n_positions, r.n_embd, dtype)
  self.drop = nn.Dropout(r.embd_pdrop)
  local blocks = {}
  for i = 1, r.n_layer do blocks[i] = Block(r, i - 1, dtype) end
  self.h = nn.ModuleList(blocks)
  self.ln_f = nn.LayerNorm(r.n_embd, { eps = r.layer_norm_epsilon, dtype = dtype })
end
function M.GPT2Model:forward(input_ids)
  local T = input_ids:size(1)
  if T > self.n_positions then
    raise(("GPT2Model: a sequence of %d tokens is longer than n_positions = %d"):format(T, self.n_positions))
  end
  local x = self.drop(self.wte(input_ids) + self.wpe(factory.arange(T, { device = input_ids:device() })))
  for _, block in self.h:iter() do x = block(x) end
  return self.ln_f(x)
end

M.GPT2LMHeadModel = nn.Module:extend("GPT2LMHeadModel")
-- GPT2LMHeadModel(config[, {dtype =, init = false}]): config as
-- transformers' GPT2Config (a table; missing fields take its defaults).
-- init = false leaves the weights unset (from_pretrained fills them).
function M.GPT2LMHeadModel:init(config, opts)
  opts = core.check_opts(opts, "GPT2LMHeadModel", { dtype = true, init = true })
  local r, c = M.check_config(config, "GPT2LMHeadModel")
  c.model_type, c.architectures = "gpt2", { "GPT2LMHeadModel" }
  self.config = c
  self.transformer = M.GPT2Model(r, opts.dtype)
  self.lm_head = parts.lm_head(self.transformer.wte, r.tie_word_embeddings, opts.dtype)
  if opts.init ~= false then
    parts.init_weights(self, r.initializer_range, "c_proj%.weight$", r.initializer_range / math.sqrt(2 * r.n_layer))
  end
end
function M.GPT2LMHeadModel:forward(input_ids, labels)
  return parts.lm_forward(self, self.transformer, input_ids, labels)
end

return M
