-- ddp.hf.llama: Hugging Face's LlamaForCausalLM in ddplua (RMSNorm, rotary
-- position embeddings, grouped-query attention, the SiLU-gated MLP), with
-- its module tree, so its state_dict names are those of the files
-- transformers writes ("model.layers.0.self_attn.q_proj.weight").  The
-- rotary embedding's rope_type may be "default", "linear" or "llama3"
-- (Llama 3.1 and later); others are refused by name.
--
--   local model = hf.LlamaForCausalLM({hidden_size = 64, intermediate_size = 128,
--                                      num_hidden_layers = 2, num_attention_heads = 4,
--                                      num_key_value_heads = 2, vocab_size = 256})
--   local logits, loss = model(input_ids, labels)  -- labels as transformers': shifted here
local core = require "ddp.core"
local factory = require "ddp.tensor.factory"
local nn = require "ddp.nn"
local parts = require "ddp.hf.parts"
local F = nn.functional
local ffi = core.ffi
local raise, show = core.raise, core.show

core.add_lib_file(debug.getinfo(1, "S").source)

local M = {}

-- LlamaConfig's defaults (transformers), the fields this model reads.
M.defaults = {
  model_type = "llama", vocab_size = 32000, hidden_size = 4096, intermediate_size = 11008,
  num_hidden_layers = 32, num_attention_heads = 32, hidden_act = "silu", max_position_embeddings = 2048,
  initializer_range = 0.02, rms_norm_eps = 1e-6, tie_word_embeddings = false, attention_bias = false,
  attention_dropout = 0.0, mlp_bias = false, bos_token_id = 1, eos_token_id = 2,
}

-- -- Rotary position embeddings -------------------------------------------------

-- float32 arithmetic, as transformers computes the frequencies (in torch
-- float32): each step rounded to float32.
local f32buf = ffi.new("float[1]")
local function f32(x) f32buf[0] = x; return f32buf[0] end

-- The rope parameters of a config, in transformers 5's form
-- (rope_parameters = {rope_type =, rope_theta =, factor =, ...}) or 4's
-- (rope_theta, rope_scaling = {type or rope_type =, factor =, ...} or null).
local function rope_parameters(c, what)
  local p = c.rope_parameters
  if parts.is_null(p) then
    p = {}
    local scaling = c.rope_scaling
    if not parts.is_null(scaling) then
      if type(scaling) ~= "table" then raise(("%s: rope_scaling must be an object, got %s"):format(what, show(scaling))) end
      for k, v in pairs(scaling) do p[k] = v end
    end
    p.rope_theta = c.rope_theta
  elseif type(p) ~= "table" then
    raise(("%s: rope_parameters must be an object, got %s"):format(what, show(p)))
  end
  local r = { rope_type = p.rope_type or p.type or "default" }
  if parts.is_null(r.rope_type) then r.rope_type = "default" end
  r.rope_theta = parts.field(p, "rope_theta", "number", 10000.0, what)
  if not parts.is_null(p.partial_rotary_factor) and p.partial_rotary_factor ~= 1 then
    raise(("%s: partial_rotary_factor = %s is not supported (a Llama rotates every dim)"):format(what, show(p.partial_rotary_factor)))
  end
  if r.rope_type == "linear" then
    r.factor = parts.field(p, "factor", "number", nil, what)
  elseif r.rope_type == "llama3" then
    r.factor = parts.field(p, "factor", "number", nil, what)
    r.low_freq_factor = parts.field(p, "low_freq_factor", "number", nil, what)
    r.high_freq_factor = parts.field(p, "high_freq_factor", "number", nil, what)
    r.original_max_position_embeddings = parts.field(p, "original_max_position_embeddings", "positive",
                                                     c.max_position_embeddings, what)
  elseif r.rope_type ~= "default" then
    raise(('%s: rope_type "%s" is not supported (supported: default, linear, llama3)'):format(what, tostring(r.rope_type)))
  end
  return r
end

-- The inverse frequencies of head_dim d, a list of d / 2 float32 values.
local function inv_freq(r, d)
  local out = {}
  for i = 0, d - 1, 2 do
    out[#out + 1] = f32(1 / f32(r.rope_theta ^ f32(i / d)))
  end
  if r.rope_type == "linear" then
    for i, v in ipairs(out) do out[i] = f32(v / r.factor) end
  elseif r.rope_type == "llama3" then
    local old = r.original_max_position_embeddings
    local low_wavelen, high_wavelen = old / r.low_freq_factor, old / r.high_freq_factor
    for i, v in ipairs(out) do
      local wavelen = f32(2 * math.pi / v)
      local scaled = wavelen > low_wavelen and f32(v / r.factor) or v
      if not (wavelen < high_wavelen) and not (wavelen > low_wavelen) then
        local smooth = f32((f32(old / wavelen) - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor))
        scaled = f32(f32(f32(1 - smooth) * scaled / r.factor) + f32(smooth * scaled))
      end
      out[i] = scaled
    end
  end
  return out
end

-- cos and sin [T, d] of positions 0..T-1, in dtype on device: the angles
-- in float32 (position times frequency), each half of d repeated, as
-- transformers' LlamaRotaryEmbedding.
local function rope_tables(self, T, device, dtype)
  local key = ("%d %s %s"):format(T, device, dtype)
  local cache = self._rope_cache
  if cache and cache.key == key then return cache.cos, cache.sin end
  local inv = factory.tensor(self.inv_freq, { dtype = "float32", device = device })
  local freqs = factory.arange(T, { dtype = "float32", device = device }):outer(inv)
  local emb = factory.cat({ freqs, freqs }, 1)
  local cos, sin = emb:cos():to(dtype), emb:sin():to(dtype)
  self._rope_cache = { key = key, cos = cos, sin = sin }
  return cos, sin
end

local function rotate_half(x)
  local d = x:size(-1)
  local half = d / 2
  return factory.cat({ x:narrow(-1, half, half):neg(), x:narrow(-1, 0, half) }, -1)
end

-- -- The model ----------------------------------------------------------------------

-- The config, resolved and checked (what: the class or the config file).
function M.check_config(cfg, what)
  local c = parts.resolve(cfg, M.defaults, what)
  local f = function(key, kind, dflt) return parts.field(c, key, kind, dflt, what) end
  local r = {
    vocab_size = f("vocab_size", "positive"), hidden_size = f("hidden_size", "positive"),
    intermediate_size = f("intermediate_size", "positive"), num_hidden_layers = f("num_hidden_layers", "integer"),
    num_attention_heads = f("num_attention_heads", "positive"),
    max_position_embeddings = f("max_position_embeddings", "positive"),
    initializer_range = f("initializer_range", "number"), rms_norm_eps = f("rms_norm_eps", "number"),
    tie_word_embeddings = f("tie_word_embeddings", "boolean"), attention_bias = f("attention_bias", "boolean"),
    attention_dropout = f("attention_dropout", "number"), mlp_bias = f("mlp_bias", "boolean"),
  }
  r.num_key_value_heads = f("num_key_value_heads", "positive", r.num_attention_heads)
  if r.hidden_size % r.num_attention_heads ~= 0 and parts.is_null(c.head_dim) then
    raise(("%s: hidden_size = %d is not a multiple of num_attention_heads = %d (give head_dim)")
          :format(what, r.hidden_size, r.num_attention_heads))
  end
  r.head_dim = f("head_dim", "positive", math.floor(r.hidden_size / r.num_attention_heads))
  if r.head_dim % 2 ~= 0 then raise(("%s: head_dim = %d must be even (rotary pairs)"):format(what, r.head_dim)) end
  if r.num_attention_heads % r.num_key_value_heads ~= 0 then
    raise(("%s: num_attention_heads = %d is not a multiple of num_key_value_heads = %d")
          :format(what, r.num_attention_heads, r.num_key_value_heads))
  end
  r.act = parts.activation(f("hidden_act", "string"), "hidden_act", what)
  r.rope = rope_parameters(c, what)
  return r, c
end

-- LlamaRMSNorm: nn.RMSNorm as transformers' Llama computes it, the
-- normalised x rounded to its dtype before the weight scales it (PyTorch's
-- F.rms_norm rounds once, after).
local RMSNorm = nn.RMSNorm:extend("LlamaRMSNorm")
function RMSNorm:forward(x)
  local dtype = x:dtype()
  if dtype ~= "bfloat16" and dtype ~= "float16" then return F.rms_norm(x, self.normalized_shape, self.weight, self.eps) end
  return self.weight:mul(F.rms_norm(x:float(), self.normalized_shape, nil, self.eps):to(dtype))
end

local Attention = nn.Module:extend("LlamaAttention")
function Attention:init(r, dtype)
  self.n_head, self.n_kv, self.head_dim = r.num_attention_heads, r.num_key_value_heads, r.head_dim
  self.attention_dropout = r.attention_dropout
  local hs, hd, b = r.hidden_size, r.head_dim, r.attention_bias
  self.q_proj = parts.linear(hs, self.n_head * hd, b, dtype)
  self.k_proj = parts.linear(hs, self.n_kv * hd, b, dtype)
  self.v_proj = parts.linear(hs, self.n_kv * hd, b, dtype)
  self.o_proj = parts.linear(self.n_head * hd, hs, b, dtype)
end
function Attention:forward(x, cos, sin)
  local B, T = x:size(0), x:size(1)
  local H, KV, hd = self.n_head, self.n_kv, self.head_dim
  local function heads(t, n) return t:view(B, T, n, hd):transpose(1, 2) end
  local q, k, v = heads(self.q_proj(x), H), heads(self.k_proj(x), KV), heads(self.v_proj(x), KV)
  q = q:mul(cos) + rotate_half(q):mul(sin)
  k = k:mul(cos) + rotate_half(k):mul(sin)
  if KV < H then  -- grouped-query attention: each key/value head serves H / KV query heads
    local rep = H / KV
    k = k:unsqueeze(2):expand(B, KV, rep, T, hd):reshape(B, H, T, hd)
    v = v:unsqueeze(2):expand(B, KV, rep, T, hd):reshape(B, H, T, hd)
  end
  local y = F.scaled_dot_product_attention(q, k, v, {
    is_causal = true, scale = 1 / math.sqrt(hd), dropout_p = self.training and self.attention_dropout or 0 })
  return self.o_proj(y:transpose(1, 2):reshape(B, T, H * hd))
end

local MLP = nn.Module:extend("LlamaMLP")
function MLP:init(r, dtype)
  self.gate_proj = parts.linear(r.hidden_size, r.intermediate_size, r.mlp_bias, dtype)
  self.up_proj = parts.linear(r.hidden_size, r.intermediate_size, r.mlp_bias, dtype)
  self.down_proj = parts.linear(r.intermediate_size, r.hidden_size, r.mlp_bias, dtype)
  self.act = r.act
end
function MLP:forward(x) return self.down_proj(self.act(self.gate_proj(x)):mul(self.up_proj(x))) end

local Layer = nn.Module:extend("LlamaDecoderLayer")
function Layer:init(r, dtype)
  self.self_attn = Attention(r, dtype)
  self.mlp = MLP(r, dtype)
  self.input_layernorm = RMSNorm(r.hidden_size, { eps = r.rms_norm_eps, dtype = dtype })
  self.post_attention_layernorm = RMSNorm(r.hidden_size, { eps = r.rms_norm_eps, dtype = dtype })
end
function Layer:forward(x, cos, sin)
  x = x + self.self_attn(self.input_layernorm(x), cos, sin)
  return x + self.mlp(self.post_attention_layernorm(x))
end

-- LlamaModel: the embedding, the decoder layers and the last norm; the
-- hidden states [B, T, hidden_size].
M.LlamaModel = nn.Module:extend("LlamaModel")
function M.LlamaModel:init(r, dtype)
  self.max_position_embeddings = r.max_position_embeddings
  self.inv_freq = inv_freq(r.rope, r.head_dim)  -- a Lua list: not a buffer, so never cast to a half dtype
  self.embed_tokens = parts.embedding(r.vocab_size, r.hidden_size, dtype)
  local layers = {}
  for i = 1, r.num_hidden_layers do layers[i] = Layer(r, dtype) end
  self.layers = nn.ModuleList(layers)
  self.norm = RMSNorm(r.hidden_size, { eps = r.rms_norm_eps, dtype = dtype })
end
function M.LlamaModel:forward(input_ids)
  local x = self.embed_tokens(input_ids)
  local cos, sin = rope_tables(self, input_ids:size(1), x:device(), x:dtype())
  for _, layer in self.layers:iter() do x = layer(x, cos, sin) end
  return self.norm(x)
end

M.LlamaForCausalLM = nn.Module:extend("LlamaForCausalLM")
-- LlamaForCausalLM(config[, {dtype =, init = false}]): config as
-- transformers' LlamaConfig (a table; missing fields take its defaults).
-- init = false leaves the weights unset (from_pretrained fills them).
function M.LlamaForCausalLM:init(config, opts)
  opts = core.check_opts(opts, "LlamaForCausalLM", { dtype = true, init = true })
  local r, c = M.check_config(config, "LlamaForCausalLM")
  c.model_type, c.architectures = "llama", { "LlamaForCausalLM" }
  self.config = c
  self.model = M.LlamaModel(r, opts.dtype)
  self.lm_head = parts.lm_head(self.model.embed_tokens, r.tie_word_embeddings, opts.dtype)
  if opts.init ~= false then parts.init_weights(self, r.initializer_range) end
end
function M.LlamaForCausalLM:forward(input_ids, labels)
  return parts.lm_forward(self, self.model, input_ids, labels)
end

return M
