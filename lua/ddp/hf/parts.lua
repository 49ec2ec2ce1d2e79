-- ddp.hf.parts: what the Hugging Face models share -- GPT-2's Conv1D,
-- layers made without torch's default initialisation (Hugging Face's own
-- init instead, or none when a checkpoint fills them), and the reading of
-- a config's fields with errors that name the file and the field.
local core = require "ddp.core"
local factory = require "ddp.tensor.factory"
local autograd = require "ddp.autograd"
local nn = require "ddp.nn"
local json = require "ddp.data.json"
local F = nn.functional
local raise, show = core.raise, core.show

core.add_lib_file(debug.getinfo(1, "S").source)

local M = {}

local function param(shape, dtype) return factory.empty(shape, { dtype = dtype }):requires_grad_() end

-- A bare instance of a layer class: its fields set here, not by its init
-- (nn.Linear's init draws kaiming weights that a checkpoint would overwrite
-- at once: minutes and twice the memory for a large model).
local function bare(class, fields)
  local m = class.__new(class)
  for k, v in pairs(fields) do m[k] = v end
  return m
end

-- nn.Linear(in, out) with uninitialised weights of dtype (M.init_weights
-- draws them).
function M.linear(in_features, out_features, bias, dtype)
  return bare(nn.Linear, { in_features = in_features, out_features = out_features,
                           weight = param({ out_features, in_features }, dtype),
                           bias = bias and param({ out_features }, dtype) or nil })
end

function M.embedding(num, dim, dtype)
  return bare(nn.Embedding, { num_embeddings = num, embedding_dim = dim, weight = param({ num, dim }, dtype) })
end

-- The language-model head over an embedding's rows: a Linear holding the
-- embedding's own weight when tied (transformers' tie_word_embeddings),
-- else a weight of its own.
function M.lm_head(embedding, tied, dtype)
  local dim, vocab = embedding.embedding_dim, embedding.num_embeddings
  if not tied then return M.linear(dim, vocab, false, dtype) end
  return bare(nn.Linear, { in_features = dim, out_features = vocab, weight = embedding.weight })
end

-- -- Conv1D ----------------------------------------------------------------------

-- Conv1D(nf, nx), as transformers.pytorch_utils.Conv1D (GPT-2's
-- projections): a linear layer whose weight is stored transposed,
-- [nx (in), nf (out)], so y = x @ weight + bias.  Its state_dict is the one
-- Hugging Face files hold, so their square c_proj can never load
-- transposed into a Linear of the same shape.
M.Conv1D = nn.Module:extend("Conv1D")
function M.Conv1D:init(nf, nx, opts)
  opts = core.check_opts(opts, "Conv1D", { dtype = true })
  if not core.is_integer(nf) or not core.is_integer(nx) then raise("Conv1D: nf and nx must be integers") end
  self.nf, self.nx = nf, nx
  self.weight = param({ nx, nf }, opts.dtype)
  self.bias = param({ nf }, opts.dtype)
  autograd.no_grad(function()
    self.weight:normal_(0, 0.02)
    self.bias:zero_()
  end)
end
function M.Conv1D:forward(x) return F.linear(x, self.weight:t(), self.bias) end
function M.Conv1D:extra_repr() return ("nf=%d, nx=%d"):format(self.nf, self.nx) end

-- Hugging Face's _init_weights for these models: every matrix N(0, std)
-- (a name matching `scaled` gets scaled_std: GPT-2's residual
-- projections), biases zero, norms' weights one and biases zero.
function M.init_weights(model, std, scaled, scaled_std)
  autograd.no_grad(function()
    for name, p in model:named_parameters() do
      if p:dim() >= 2 then
        p:normal_(0, scaled and name:match(scaled) and scaled_std or std)
      elseif name:match("norm%.weight$") or name:match("ln_[%w]+%.weight$") then
        p:fill_(1)
      else
        p:zero_()
      end
    end
  end)
end

-- -- Inputs and the loss ----------------------------------------------------

-- The input ids, checked: an integer [B, T] tensor.
function M.check_ids(ids, what, name)
  if not core.is_tensor(ids) then raise(("%s: %s must be a tensor of token ids, got %s"):format(what, name, core.describe(ids))) end
  local dt = ids:dtype()
  if ids:dim() ~= 2 or not (dt == "int64" or dt == "int32") then
    raise(("%s: %s must be an int64 tensor [batch, tokens], got %s %s"):format(what, name, dt, core.fmt_shape(ids:shape())))
  end
end

-- The language-model loss as transformers computes it from labels: the
-- logits at t predict labels at t + 1 (the shift is done here: pass the
-- input ids themselves), labels of -100 are left out.
function M.causal_lm_loss(logits, labels, what)
  M.check_ids(labels, what, "labels")
  local B, T, V = logits:size(0), logits:size(1), logits:size(2)
  if labels:size(0) ~= B or labels:size(1) ~= T then
    raise(("%s: labels %s do not match input_ids [%d, %d]"):format(what, core.fmt_shape(labels:shape()), B, T))
  end
  if T < 2 then raise(("%s: labels need at least 2 tokens a row (the first predicts the second)"):format(what)) end
  local shifted = logits:narrow(1, 0, T - 1):float():reshape(B * (T - 1), V)
  return F.cross_entropy(shifted, labels:narrow(1, 1, T - 1):long():reshape(B * (T - 1)), { ignore_index = -100 })
end

-- A causal LM's forward: logits of the body's hidden states, and with
-- labels the loss.
function M.lm_forward(model, body, input_ids, labels)
  M.check_ids(input_ids, model.__name, "input_ids")
  local logits = model.lm_head(body(input_ids))
  if labels == nil then return logits end
  return logits, M.causal_lm_loss(logits, labels, model.__name)
end

-- -- Config fields ----------------------------------------------------------

-- cfg[key] checked as kind ("integer", "positive", "number", "boolean",
-- "string"), dflt when absent or null; an error names the config (its
-- file, when read from one) and the field.
local kinds = {
  integer = function(v) return core.is_integer(v) end,
  positive = function(v) return core.is_integer(v) and v > 0 end,
  number = function(v) return type(v) == "number" end,
  boolean = function(v) return type(v) == "boolean" end,
  string = function(v) return type(v) == "string" end,
}
local kind_text = { integer = "an integer", positive = "a positive integer", number = "a number",
                    boolean = "true or false", string = "a string" }

-- absent, or JSON's null (config.json writes null for "the default")
function M.is_null(v) return v == nil or v == json.null end

function M.field(cfg, key, kind, dflt, what)
  local v = cfg[key]
  if M.is_null(v) then v = dflt end
  if v == nil then raise(("%s: the field %s is missing"):format(what, key)) end
  if not kinds[kind](v) then
    raise(("%s: the field %s must be %s, got %s"):format(what, key, kind_text[kind], show(v)))
  end
  return v
end

-- An activation by its Hugging Face name (ACT2FN), or an error naming it.
local activations = {
  gelu = function(x) return x:gelu() end,
  gelu_new = function(x) return x:gelu("tanh") end,
  gelu_fast = function(x) return x:gelu("tanh") end,
  gelu_pytorch_tanh = function(x) return x:gelu("tanh") end,
  relu = function(x) return x:relu() end,
  silu = function(x) return x:silu() end,
  swish = function(x) return x:silu() end,
  tanh = function(x) return x:tanh() end,
}
function M.activation(name, key, what)
  local f = activations[name]
  if not f then
    local names = {}
    for k in pairs(activations) do names[#names + 1] = k end
    table.sort(names)
    raise(("%s: %s = %s is not supported (supported: %s)"):format(what, key, show(name), table.concat(names, ", ")))
  end
  return f
end

-- A config table of the model's own: the user's fields over the defaults
-- (the user's table is not changed).
function M.resolve(cfg, defaults, what)
  if cfg ~= nil and (type(cfg) ~= "table" or core.is_tensor(cfg)) then
    raise(("%s: config must be a table, got %s"):format(what, core.describe(cfg)))
  end
  local out = {}
  for k, v in pairs(defaults) do out[k] = v end
  for k, v in pairs(cfg or {}) do
    if not M.is_null(v) then out[k] = v elseif out[k] == nil then out[k] = v end
  end
  return out
end

return M
