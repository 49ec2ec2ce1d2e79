-- ddp.nn.attention: nn.MultiheadAttention as torch.nn's (its parameter
-- names and layout, so state dicts move across), over
-- F.scaled_dot_product_attention.
local core = require "ddp.core"
local factory = require "ddp.tensor.factory"
local F = require "ddp.nn.functional"
local init = require "ddp.nn.weight_init"
local Module = require("ddp.nn.module").Module
local Linear = require("ddp.nn.layers").Linear
local raise = core.raise

core.add_lib_file(debug.getinfo(1, "S").source)

local nn = {}

local function param(...) return factory.empty(...):requires_grad_() end

-- MultiheadAttention(embed_dim, num_heads, {dropout=0, bias=true,
-- batch_first=false, kdim=, vdim=, dtype=}).  Parameters as PyTorch:
-- in_proj_weight [3E, E] (q, k, v stacked), or q_proj_weight [E, E],
-- k_proj_weight [E, kdim], v_proj_weight [E, vdim] when kdim or vdim
-- differ from E; in_proj_bias [3E]; out_proj (a Linear E -> E).
local MHA = Module:extend("MultiheadAttention")
nn.MultiheadAttention = MHA

function MHA:init(embed_dim, num_heads, opts)
  opts = opts or {}
  if not core.is_integer(embed_dim) or not core.is_integer(num_heads) or num_heads < 1 then
    raise("MultiheadAttention: embed_dim and num_heads must be integers (num_heads >= 1)")
  end
  if embed_dim % num_heads ~= 0 then
    raise(("MultiheadAttention: embed_dim %d must be divisible by num_heads %d"):format(embed_dim, num_heads))
  end
  if opts.add_bias_kv or opts.add_zero_attn then
    raise("MultiheadAttention: add_bias_kv and add_zero_attn are not supported")
  end
  local E, dt = embed_dim, { dtype = opts.dtype }
  self.embed_dim, self.num_heads, self.head_dim = E, num_heads, E / num_heads
  self.kdim, self.vdim = opts.kdim or E, opts.vdim or E
  self.dropout, self.batch_first = opts.dropout or 0, opts.batch_first == true
  if type(self.dropout) ~= "number" or self.dropout < 0 or self.dropout > 1 then
    raise("MultiheadAttention: dropout must be a number in [0, 1], got " .. core.show(self.dropout))
  end
  self._qkv_same = self.kdim == E and self.vdim == E
  -- registered in PyTorch's order, so named_parameters reads alike
  if self._qkv_same then
    self.in_proj_weight = param(3 * E, E, dt)
    init.xavier_uniform_(self.in_proj_weight)
  else
    self.q_proj_weight = param(E, E, dt)
    self.k_proj_weight = param(E, self.kdim, dt)
    self.v_proj_weight = param(E, self.vdim, dt)
    init.xavier_uniform_(self.q_proj_weight)
    init.xavier_uniform_(self.k_proj_weight)
    init.xavier_uniform_(self.v_proj_weight)
  end
  if opts.bias ~= false then
    self.in_proj_bias = param(3 * E, dt)
    init.zeros_(self.in_proj_bias)
  end
  self.out_proj = Linear(E, E, { bias = opts.bias ~= false, dtype = opts.dtype })
  if opts.bias ~= false then init.zeros_(self.out_proj.bias) end
end

function MHA:extra_repr()
  return ("embed_dim=%d, num_heads=%d, dropout=%s, batch_first=%s"):format(self.embed_dim, self.num_heads,
    tostring(self.dropout), self.batch_first and "True" or "False")
end

-- A PyTorch mask (bool: true = not allowed; float: added) as one added
-- to the scores: bool masks become 0 / -inf in dtype.
local function additive(m, dtype)
  if m:dtype() ~= "bool" then return m:to(dtype) end
  return factory.zeros(m:shape(), { dtype = dtype }):masked_fill(m, -math.huge)
end

-- attn_mask [L, S] or [N * H, L, S] and key_padding_mask [N, S], in
-- PyTorch's sense, as one mask for F.scaled_dot_product_attention over
-- [N, H, L, S] (bool: true = take part), or nil.
local function merge_masks(self, attn_mask, kpm, N, L, S, dtype)
  if attn_mask ~= nil then
    if attn_mask:dim() == 3 then
      attn_mask = attn_mask:reshape(N, self.num_heads, L, S)
    elseif attn_mask:dim() ~= 2 then
      raise(("MultiheadAttention: attn_mask must be [L, S] or [N * num_heads, L, S], got shape %s")
            :format(core.fmt_shape(attn_mask:shape())))
    end
  end
  if kpm ~= nil then kpm = kpm:reshape(N, 1, 1, S) end
  if attn_mask == nil and kpm == nil then return nil end
  local both_bool = (attn_mask == nil or attn_mask:dtype() == "bool") and (kpm == nil or kpm:dtype() == "bool")
  if both_bool then
    local masked = attn_mask and kpm and attn_mask:logical_or(kpm) or attn_mask or kpm
    return masked:logical_not()
  end
  local m = attn_mask and additive(attn_mask, dtype)
  if kpm then m = m and m + additive(kpm, dtype) or additive(kpm, dtype) end
  return m
end

-- forward(query, key, value, {key_padding_mask=, need_weights=true,
-- attn_mask=, average_attn_weights=true, is_causal=false}) -> output,
-- weights (nil unless need_weights).  Inputs [N, L, E] (batch_first),
-- [L, N, E], or unbatched [L, E].  is_causal without attn_mask masks the
-- keys after each query (PyTorch 2 takes it only as a hint with a mask).
-- With need_weights the probabilities are made explicitly (they are a
-- result); otherwise the fused op runs and keeps no L x S matrix.
function MHA:forward(query, key, value, opts)
  opts = opts or {}
  local E, H, hd = self.embed_dim, self.num_heads, self.head_dim
  local batched, kpm = query:dim() == 3, opts.key_padding_mask
  if not batched and query:dim() ~= 2 then
    raise(("MultiheadAttention: query must be [L, E] or 3-D, got shape %s"):format(core.fmt_shape(query:shape())))
  end
  if not batched then
    query, key, value = query:unsqueeze(0), key:unsqueeze(0), value:unsqueeze(0)
    if kpm ~= nil then kpm = kpm:unsqueeze(0) end
  elseif not self.batch_first then
    query, key, value = query:transpose(0, 1), key:transpose(0, 1), value:transpose(0, 1)
  end
  local N, L, S = query:size(0), query:size(1), key:size(1)
  local wq, wk, wv
  if self._qkv_same then
    wq, wk, wv = self.in_proj_weight:narrow(0, 0, E), self.in_proj_weight:narrow(0, E, E),
                 self.in_proj_weight:narrow(0, 2 * E, E)
  else
    wq, wk, wv = self.q_proj_weight, self.k_proj_weight, self.v_proj_weight
  end
  local b = self.in_proj_bias
  local bq, bk, bv = b and b:narrow(0, 0, E), b and b:narrow(0, E, E), b and b:narrow(0, 2 * E, E)
  local function heads(x, w, bias, n)
    return F.linear(x, w, bias):view(N, n, H, hd):transpose(1, 2)
  end
  local q, k, v = heads(query, wq, bq, L), heads(key, wk, bk, S), heads(value, wv, bv, S)
  local attn_mask, causal = opts.attn_mask, false
  if opts.is_causal and attn_mask == nil then
    -- alone on the fused path the kernel skips the masked tiles
    if kpm == nil and opts.need_weights == false then
      causal = true
    else
      attn_mask = factory.ones(L, S):triu(1):bool()
    end
  end
  local mask = merge_masks(self, attn_mask, kpm, N, L, S, q:dtype())
  local p = self.training and self.dropout or 0
  local out, weights
  if opts.need_weights ~= false then
    local s = q:matmul(k:transpose(-2, -1)) * (1 / math.sqrt(hd))
    if mask ~= nil then
      s = mask:dtype() == "bool" and s:masked_fill(mask:logical_not(), -math.huge) or s + mask
    end
    weights = s:softmax(-1)
    if p > 0 then weights = F.dropout(weights, p, true) end
    out = weights:matmul(v)
    if opts.average_attn_weights ~= false then weights = weights:mean(1) end
    if not batched then weights = weights:squeeze(0) end
  else
    out = F.scaled_dot_product_attention(q, k, v, { attn_mask = mask, dropout_p = p, is_causal = causal })
  end
  out = self.out_proj(out:transpose(1, 2):reshape(N, L, E))
  if not batched then
    out = out:squeeze(0)
  elseif not self.batch_first then
    out = out:transpose(0, 1)
  end
  return out, weights
end

return nn
