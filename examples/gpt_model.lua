-- gpt_model.lua: a small GPT (pre-LN transformer blocks, causal
-- self-attention, GELU MLP) for examples/gpt.lua and bench/train_gpt.lua,
-- with nanoGPT's parameter names.  Load it with dofile:
--
--   local gpt = dofile("examples/gpt_model.lua")
--   local model = gpt.GPT({ vocab_size = 256, block_size = 64, n_layer = 2, n_head = 4, n_embd = 128 })
--   local logits, loss = model(x, y)          -- x, y int64 [B, T]
--
-- The attention is one small function: the fused
-- F.scaled_dot_product_attention(q, k, v, {is_causal = true}) when this
-- ddplua has it, else the formula written from matmul, masked_fill and
-- softmax (gpt.attention; gpt.explicit_attention forces the formula).
local ddp = require "ddp"
local nn = require "ddp.nn"
local F = nn.functional

local gpt = {}

-- softmax(q k^T / sqrt(d) + causal mask) v; q, k, v [B, H, T, d]; mask a
-- bool [block, block], true above the diagonal (the future).
function gpt.explicit_attention(q, k, v, mask)
  local T, d = q:size(2), q:size(3)
  local att = q:matmul(k:transpose(-2, -1)):mul(1 / math.sqrt(d))
  att = att:masked_fill(mask:narrow(0, 0, T):narrow(1, 0, T), -math.huge)
  return att:softmax(-1):matmul(v)
end

function gpt.attention(q, k, v, mask)
  if F.scaled_dot_product_attention and not gpt.force_explicit then
    return F.scaled_dot_product_attention(q, k, v, { is_causal = true })
  end
  return gpt.explicit_attention(q, k, v, mask)
end

local CausalSelfAttention = nn.Module:extend("CausalSelfAttention")
function CausalSelfAttention:init(cfg)
  self.n_head, self.n_embd = cfg.n_head, cfg.n_embd
  self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
  self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd)
  -- not a parameter and not saved: rebuilt from block_size
  self._mask = ddp.ones(cfg.block_size, cfg.block_size):triu(1):bool()
end
function CausalSelfAttention:forward(x)
  local B, T, C = x:size(0), x:size(1), x:size(2)
  local H = self.n_head
  local qkv = self.c_attn(x):split(C, 2)
  local function heads(t) return t:view(B, T, H, C / H):transpose(1, 2) end
  -- the mask follows the model to its device (:to moves only parameters and buffers)
  if self._mask:device() ~= x:device() then self._mask = self._mask:to(x:device()) end
  local y = gpt.attention(heads(qkv[1]), heads(qkv[2]), heads(qkv[3]), self._mask)
  return self.c_proj(y:transpose(1, 2):contiguous():view(B, T, C))
end

local Block = nn.Module:extend("Block")
function Block:init(cfg)
  self.ln_1 = nn.LayerNorm(cfg.n_embd)
  self.attn = CausalSelfAttention(cfg)
  self.ln_2 = nn.LayerNorm(cfg.n_embd)
  self.mlp = nn.Sequential(nn.Linear(cfg.n_embd, 4 * cfg.n_embd), nn.GELU(), nn.Linear(4 * cfg.n_embd, cfg.n_embd))
end
function Block:forward(x)  -- pre-LN: the residual stream is never normalised
  x = x + self.attn(self.ln_1(x))
  return x + self.mlp(self.ln_2(x))
end

local GPT = nn.Module:extend("GPT")
gpt.GPT = GPT
function GPT:init(cfg)
  for _, k in ipairs { "vocab_size", "block_size", "n_layer", "n_head", "n_embd" } do
    if type(cfg[k]) ~= "number" then error(("GPT: config field %s must be a number, got %s"):format(k, tostring(cfg[k])), 3) end
  end
  if cfg.n_embd % cfg.n_head ~= 0 then
    error(("GPT: n_embd = %d is not a multiple of n_head = %d"):format(cfg.n_embd, cfg.n_head), 3)
  end
  self.block_size = cfg.block_size
  self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
  self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)
  local blocks = {}
  for i = 1, cfg.n_layer do blocks[i] = Block(cfg) end
  self.h = nn.ModuleList(blocks)
  self.ln_f = nn.LayerNorm(cfg.n_embd)
  self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, { bias = false })
  -- GPT-2's initialisation: N(0, 0.02), residual projections scaled down
  ddp.no_grad(function()
    for name, p in self:named_parameters() do
      if name:match("weight$") and p:dim() == 2 then
        local std = name:match("c_proj%.weight$") or name:match("mlp%.2%.weight$")
        p:normal_(0, std and 0.02 / math.sqrt(2 * cfg.n_layer) or 0.02)
      elseif name:match("bias$") and not name:match("^ln") and not name:match("%.ln_") then
        p:zero_()
      end
    end
  end)
end

-- logits [B, T, V], and with targets the mean cross-entropy
function GPT:forward(idx, targets)
  local B, T = idx:size(0), idx:size(1)
  if T > self.block_size then
    error(("GPT: a sequence of %d tokens is longer than block_size = %d"):format(T, self.block_size), 2)
  end
  local x = self.wte(idx) + self.wpe(ddp.arange(T, { device = idx:device() }))
  for _, block in self.h:iter() do x = block(x) end
  local logits = self.lm_head(self.ln_f(x))
  if targets == nil then return logits end
  local V = logits:size(2)
  return logits, F.cross_entropy(logits:view(B * T, V), targets:reshape(B * T))
end

-- AdamW's groups as nanoGPT makes them: weight decay for the matrices
-- (linear weights, embeddings), none for biases and LayerNorm.
function gpt.param_groups(model, weight_decay)
  local decay, no_decay = {}, {}
  for _, p in model:named_parameters() do
    if p:dim() >= 2 then decay[#decay + 1] = p else no_decay[#no_decay + 1] = p end
  end
  return { { params = decay, weight_decay = weight_decay }, { params = no_decay, weight_decay = 0 } }
end

-- One draw per row from the categorical distribution of probs [B, V]:
-- ddp.multinomial where it exists, else the inverse of the cumulative sum
-- at a uniform draw.  Returns int64 [B, 1].
function gpt.sample(probs)
  if ddp.multinomial then return ddp.multinomial(probs, 1) end
  local cdf = probs:cumsum(-1)
  local u = ddp.rand(probs:size(0), 1):mul(cdf:narrow(1, cdf:size(1) - 1, 1))
  -- the first index whose cumulative probability exceeds u
  return cdf:lt(u):sum(1, true):long():clamp(0, probs:size(1) - 1)
end

-- max_new tokens after idx [1, t] (greedy-free: temperature, top_k).
function gpt.generate(model, idx, max_new, opts)
  opts = opts or {}
  local temperature, top_k = opts.temperature or 1.0, opts.top_k
  return ddp.no_grad(function()
    for _ = 1, max_new do
      local t = idx:size(1)
      local ctx = t > model.block_size and idx:narrow(1, t - model.block_size, model.block_size) or idx
      local logits = model(ctx)
      logits = logits:select(1, logits:size(1) - 1):div(temperature)
      if top_k then
        local v = logits:topk(top_k, -1)
        local kth = v:narrow(1, top_k - 1, 1)
        logits = logits:masked_fill(logits:lt(kth), -math.huge)
      end
      idx = ddp.cat({ idx, gpt.sample(logits:softmax(-1)) }, 1)
    end
    return idx
  end)
end

return gpt
