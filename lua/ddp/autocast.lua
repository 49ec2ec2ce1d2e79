-- ddp.autocast: mixed precision as torch.autocast does it, by op lists.
--
--   ddp.autocast("bf16", function() loss = F.cross_entropy(model(x), y) end)
--
-- Inside fn, the "low" ops (matmul, mm, bmm, addmm, linear, conv2d) cast
-- their floating tensor arguments to bfloat16 (or float16) and so return
-- that dtype; the "f32" ops (reductions, softmax / log_softmax, the
-- losses, layer_norm / batch_norm) cast bf16 / fp16 arguments up to
-- float32.  Other ops run as called (elementwise ops promote as usual).
--
-- Design: one wrapper per listed op, installed over the tensor method (by
-- ddp.tensor, which builds the type) or the functional form (by
-- ddp.functional) when those modules load -- every path into the op
-- (t:matmul, ddp.matmul, F.linear, nn.Linear) goes through the one table
-- entry, so there is no per-op code and the C runtime knows nothing of
-- it.  The casts are ordinary t:to(dtype) calls, recorded by autograd, so
-- gradients come back to the float32 parameters in float32.  Outside
-- autocast a wrapper costs one upvalue test.  The state is per Lua state
-- (one per process), nestable, and restored when fn raises.  It is this
-- module's own, as every module's: the library is loaded once per process
-- (the tensor metatype can be set only once), so the specs load it once
-- too (.busted's helper).
local core = require "ddp.core"
local raise, show = core.raise, core.show
local is_tensor = core.is_tensor
local select, pcall, error, unpack = select, pcall, error, unpack or table.unpack

local M = {}

-- state.low: the low dtype while autocast is on ("bfloat16" / "float16"),
-- else nil; the wrappers read it.
local state = { low = nil }

local names = { bf16 = "bfloat16", bfloat16 = "bfloat16", fp16 = "float16", float16 = "float16",
                half = "float16" }
local reduced = { bfloat16 = true, float16 = true }

local function cast(x, dtype)
  if is_tensor(x) and x:is_floating_point() and x:dtype() ~= dtype then return x:to(dtype) end
  return x
end

-- f with its tensor arguments cast (all of them: the first few are the
-- tensors; options tables pass as they are) under autocast.
local function wrap(f, mode)
  return function(...)
    local low = state.low
    if not low then return f(...) end
    local n = select("#", ...)
    local a = { ... }
    for i = 1, n do
      local x = a[i]
      if is_tensor(x) then
        if mode == "low" then a[i] = cast(x, low)
        elseif reduced[x:dtype()] then a[i] = x:to("float32") end
      end
    end
    return f(unpack(a, 1, n))
  end
end

-- Replaces tbl[name] for each listed name present.
function M.install(tbl, list, mode)
  for _, name in ipairs(list) do
    if tbl[name] ~= nil then tbl[name] = wrap(tbl[name], mode) end
  end
end

-- The op lists: tensor methods (ddp.tensor) and functional forms.
M.tensor_low = { "matmul", "mm", "bmm", "addmm" }
M.tensor_f32 = { "sum", "mean", "prod", "var", "std", "norm", "logsumexp", "cumsum",
                 "softmax", "log_softmax" }
M.functional_low = { "linear", "conv2d" }
M.functional_f32 = { "softmax", "log_softmax", "cross_entropy", "nll_loss", "mse_loss",
                     "l1_loss", "smooth_l1_loss", "binary_cross_entropy",
                     "binary_cross_entropy_with_logits", "kl_div", "layer_norm", "batch_norm",
                     "group_norm" }

-- The previous state back, then fn's results or its error.
local function restore(prev, ok, ...)
  state.low = prev
  if not ok then error((...), 0) end
  return ...
end

-- ddp.autocast(dtype, fn, ...): fn(...) with autocast to dtype ("bf16",
-- "bfloat16", "fp16", "float16"; false: off inside fn); returns fn's
-- results.
function M.autocast(dtype, fn, ...)
  local want
  if dtype == false then
    want = nil
  else
    want = type(dtype) == "string" and names[dtype]
    if not want then
      raise("autocast: dtype must be \"bf16\", \"bfloat16\", \"fp16\", \"float16\" or false, got " .. show(dtype))
    end
  end
  if type(fn) ~= "function" then raise("autocast: expected a function, got " .. core.describe(fn)) end
  local prev = state.low
  state.low = want
  return restore(prev, pcall(fn, ...))
end

-- The autocast dtype in effect ("bfloat16", "float16"), or nil.
function M.get_dtype() return state.low end
function M.is_enabled() return state.low ~= nil end

return M
