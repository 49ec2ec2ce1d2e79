-- ddp.tensor.math: the math methods of tensors (elementwise, reductions,
-- linear algebra, indexing, sorting, random fills, whole-tensor
-- comparisons), their aliases and the arithmetic metamethods; ddp.tensor
-- composes them into the tensor type.
local core = require "ddp.core"
local C = core.C
local new, new2, check, raise = core.new, core.new2, core.check, core.raise
local operand, tensor_arg = core.operand, core.tensor_arg
local dim_arg, dims_arg = core.dim_arg, core.dims_arg
local type = type

core.add_lib_file(debug.getinfo(1, "S").source)

local M = {}
local m = {}  -- the methods of this file
-- The whole method table (ddp.tensor's), for calls between methods: they
-- go through it, so they meet the same wrappers a user's call does.
local T

-- -- Elementwise ---------------------------------------------------------

local binops = {
  add = C.DL_ADD, sub = C.DL_SUB, mul = C.DL_MUL, div = C.DL_DIV, pow = C.DL_POW,
  maximum = C.DL_MAXIMUM, minimum = C.DL_MINIMUM,
  eq = C.DL_EQ, ne = C.DL_NE, lt = C.DL_LT, le = C.DL_LE, gt = C.DL_GT, ge = C.DL_GE,
  logical_and = C.DL_LOGICAL_AND, logical_or = C.DL_LOGICAL_OR,
  fmod = C.DL_FMOD, remainder = C.DL_REMAINDER, atan2 = C.DL_ATAN2,
}
local aliases = {
  subtract = "sub", multiply = "mul", divide = "div", true_divide = "div",
  greater = "gt", greater_equal = "ge", less = "lt", less_equal = "le",
  not_equal = "ne",
}

for name, op in pairs(binops) do
  m[name] = function(a, b)
    return new(C.dl_binary, op, operand(a, name, 1), operand(b, name, 2))
  end
  m[name .. "_"] = function(a, b)
    check(C.dl_binary_(op, a, operand(b, name .. "_", 2)))
    return a
  end
end

-- add/sub take PyTorch's alpha: a + alpha * b.
for _, name in ipairs { "add", "sub" } do
  local op, plain, inplace = binops[name], m[name], m[name .. "_"]
  local function alpha_ok(alpha, op)
    if alpha ~= nil and type(alpha) ~= "number" then
      raise(("%s: alpha must be a number, got %s"):format(op, core.show(alpha)))
    end
    return alpha ~= nil and alpha ~= 1
  end
  m[name] = function(a, b, alpha)
    if alpha_ok(alpha, name) then b = T.mul(operand(b, name, 2), alpha) end
    return plain(a, b)
  end
  m[name .. "_"] = function(a, b, alpha)
    if alpha_ok(alpha, name .. "_") then b = T.mul(operand(b, name .. "_", 2), alpha) end
    return inplace(a, b)
  end
  -- (These were kept interpreted with jit.off while handles were
  -- pointers: LuaJIT's recorder took `tensor + number` for pointer
  -- arithmetic and crashed.  A reference (ddp.core) is no pointer to it:
  -- tests/jit_spec.lua, tests/luajit/ptr_arith_meta.lua, docs/luajit.md.)
  local _ = op
end

-- fmax/fmin: maximum/minimum where a NaN loses to a number, as torch.fmax.
for name, op in pairs { fmax = "maximum", fmin = "minimum" } do
  m[name] = function(a, b)
    a, b = operand(a, name, 1), operand(b, name, 2)
    local r = T.where(a, T.isnan(b), T[op](a, b))
    return T.where(b, T.isnan(a), r)
  end
end

local unops = {
  neg = C.DL_NEG, abs = C.DL_ABS, exp = C.DL_EXP, log = C.DL_LOG, sqrt = C.DL_SQRT,
  rsqrt = C.DL_RSQRT, sin = C.DL_SIN, cos = C.DL_COS, tanh = C.DL_TANH,
  sigmoid = C.DL_SIGMOID, relu = C.DL_RELU, logical_not = C.DL_LOGICAL_NOT,
  sign = C.DL_SIGN, floor = C.DL_FLOOR, ceil = C.DL_CEIL, round = C.DL_ROUND,
  trunc = C.DL_TRUNC, reciprocal = C.DL_RECIPROCAL, square = C.DL_SQUARE,
  log1p = C.DL_LOG1P, expm1 = C.DL_EXPM1, log2 = C.DL_LOG2, silu = C.DL_SILU,
  isnan = C.DL_ISNAN, isinf = C.DL_ISINF, isfinite = C.DL_ISFINITE,
}
aliases.negative = "neg"
aliases.absolute = "abs"
aliases.fix = "trunc"

for name, op in pairs(unops) do
  m[name] = function(a) return new(C.dl_unary, op, a) end
  m[name .. "_"] = function(a)
    check(C.dl_unary_(op, a))
    return a
  end
end

-- gelu(approximate = "none" | "tanh"), as torch.nn.functional.gelu.
local function gelu_op(approximate)
  if approximate == nil or approximate == "none" then return C.DL_GELU end
  if approximate == "tanh" then return C.DL_GELU_TANH end
  raise(('gelu: approximate must be "none" or "tanh", got %s'):format(core.show(approximate)))
end
function m.gelu(a, approximate) return new(C.dl_unary, gelu_op(approximate), a) end
function m.gelu_(a, approximate)
  check(C.dl_unary_(gelu_op(approximate), a))
  return a
end

local nan = 0 / 0
local function bound(v, op)
  if v == nil then return nan end
  if core.is_tensor(v) then v = T.item(v) end
  if type(v) ~= "number" then raise(op .. ": bounds must be numbers, got " .. type(v)) end
  return v
end
function m.clamp(a, lo, hi)
  if lo == nil and hi == nil then raise("clamp: at least one of min and max must be given") end
  return new(C.dl_clamp, a, bound(lo, "clamp"), bound(hi, "clamp"))
end
function m.clamp_(a, lo, hi)
  if lo == nil and hi == nil then raise("clamp_: at least one of min and max must be given") end
  check(C.dl_clamp_(a, bound(lo, "clamp_"), bound(hi, "clamp_")))
  return a
end
m.clip, m.clip_ = m.clamp, m.clamp_
function m.clamp_min(a, lo) return T.clamp(a, lo, nil) end
function m.clamp_max(a, hi) return T.clamp(a, nil, hi) end

-- x:where(cond, y) as in PyTorch: x where cond holds, else y.
function m.where(a, cond, b)
  return new(C.dl_where, tensor_arg(cond, "where", "condition"), operand(a, "where", 1), operand(b, "where", 2))
end

-- -- Reductions ------------------------------------------------------------

local function reducer(op, name)
  return function(t, dim, keepdim)
    if core.is_opts(dim) then dim, keepdim = dim.dim, dim.keepdim end
    local dims, n = dims_arg(dim, name)
    return new(C.dl_reduce, op, t, dims, n, keepdim and 1 or 0, 0)
  end
end
m.sum = reducer(C.DL_SUM, "sum")
m.mean = reducer(C.DL_MEAN, "mean")
m.prod = reducer(C.DL_PROD, "prod")
m.amax = reducer(C.DL_AMAX, "amax")
m.amin = reducer(C.DL_AMIN, "amin")

-- all() and any() over the whole tensor give a Lua boolean, so that
-- `if mask:all() then` means what it says (a tensor handle, like any
-- cdata, is always true in Lua); with dims they give tensors, as PyTorch.
local function truth(op, name)
  local per_dim = reducer(op, name)
  return function(t, dim, keepdim)
    if core.is_opts(dim) then dim, keepdim = dim.dim, dim.keepdim end
    if dim ~= nil then return per_dim(t, dim, keepdim) end
    local v = core.read(new(C.dl_reduce, op, t, nil, 0, 0, 0), 0)
    return v == true or (type(v) == "number" and v ~= 0)  -- uint8 stays uint8: 0 or 1
  end
end
m.all = truth(C.DL_ALL, "all")
m.any = truth(C.DL_ANY, "any")
m.logsumexp = reducer(C.DL_LOGSUMEXP, "logsumexp")
m.count_nonzero = reducer(C.DL_COUNT_NONZERO, "count_nonzero")

-- var/std(dim, unbiased or {correction=, unbiased=, keepdim=}, keepdim)
local function var_like(op, name)
  return function(t, dim, opt, keepdim)
    local correction = 1
    if core.is_opts(dim) then dim, opt = dim.dim, dim end
    if type(opt) == "table" then
      if opt.correction ~= nil then correction = opt.correction
      elseif opt.unbiased == false then correction = 0 end
      if opt.keepdim ~= nil then keepdim = opt.keepdim end
    elseif opt == false then
      correction = 0
    end
    if type(correction) ~= "number" then raise(name .. ": correction must be a number") end
    local dims, n = dims_arg(dim, name)
    return new(C.dl_reduce, op, t, dims, n, keepdim and 1 or 0, correction)
  end
end
m.var = var_like(C.DL_VAR, "var")
m.std = var_like(C.DL_STD, "std")

-- norm(p = 2 | "fro" | math.huge | number, dim, keepdim)
function m.norm(t, p, dim, keepdim)
  if p == nil or p == "fro" then p = 2 end
  if p == "nuc" then raise("norm: the nuclear norm is not supported") end
  if type(p) ~= "number" then raise("norm: p must be a number, \"fro\" or math.huge, got " .. tostring(p)) end
  local dims, n = dims_arg(dim, "norm")
  return new(C.dl_reduce, C.DL_NORM, t, dims, n, keepdim and 1 or 0, p)
end

-- max()/min(): the value; max(dim[, keepdim]): values, indices;
-- max(other): the elementwise maximum, as torch.max does.
local function maxmin(name, all_op, dim_fn, pair)
  return function(t, dim, keepdim)
    if dim == nil then return new(C.dl_reduce, all_op, t, nil, 0, 0, 0) end
    if core.is_tensor(dim) then return pair(t, dim) end
    return new2(C[dim_fn], t, dim_arg(dim, name), keepdim and 1 or 0)
  end
end
m.max = maxmin("max", C.DL_AMAX, "dl_max_dim", m.maximum)
m.min = maxmin("min", C.DL_AMIN, "dl_min_dim", m.minimum)

local FLATTEN = -100  -- below -DL_MAX_DIMS: argmax over the flattened tensor
function m.argmax(t, dim, keepdim)
  return new(C.dl_argmax, t, dim == nil and FLATTEN or dim_arg(dim, "argmax"), keepdim and 1 or 0)
end
function m.argmin(t, dim, keepdim)
  return new(C.dl_argmin, t, dim == nil and FLATTEN or dim_arg(dim, "argmin"), keepdim and 1 or 0)
end

local function along(fn, name)
  return function(t, dim)
    if dim == nil then raise(name .. ": dim is required") end
    return new(C[fn], t, dim_arg(dim, name))
  end
end
m.cumsum = along("dl_cumsum", "cumsum")
m.cumprod = along("dl_cumprod", "cumprod")
m.softmax = along("dl_softmax", "softmax")
m.log_softmax = along("dl_log_softmax", "log_softmax")

-- -- Linear algebra ------------------------------------------------------

function m.matmul(a, b) return new(C.dl_matmul, a, tensor_arg(b, "matmul", "other")) end
function m.mm(a, b) return new(C.dl_mm, a, tensor_arg(b, "mm", "mat2")) end
function m.bmm(a, b) return new(C.dl_bmm, a, tensor_arg(b, "bmm", "mat2")) end
function m.outer(a, b) return new(C.dl_outer, a, tensor_arg(b, "outer", "vec2")) end
m.ger = m.outer
function m.dot(a, b) return new(C.dl_dot, a, tensor_arg(b, "dot", "other")) end
-- c:addmm(a, b[, {beta=, alpha=}]) = beta * c + alpha * (a @ b)
function m.addmm(c, a, b, opts)
  opts = opts or {}
  return new(C.dl_addmm, c, tensor_arg(a, "addmm", "mat1"), tensor_arg(b, "addmm", "mat2"),
             opts.beta or 1, opts.alpha or 1)
end

-- -- Indexing and sorting --------------------------------------------------

-- Index arguments may be tensors or Lua tables of 0-based integers.
local function index_arg(idx, op)
  if core.is_tensor(idx) then return idx end
  if type(idx) == "number" then return new(C.dl_scalar, idx, 0) end
  if type(idx) == "table" then return core.tensor_from(idx, { dtype = "int64" }) end
  raise(op .. ": index must be a tensor or a table of integers, got " .. type(idx))
end

function m.index_select(t, dim, idx)
  return new(C.dl_index_select, t, dim_arg(dim, "index_select"), index_arg(idx, "index_select"))
end
function m.gather(t, dim, idx)
  return new(C.dl_gather, t, dim_arg(dim, "gather"), index_arg(idx, "gather"))
end

local function scatter_src(t, src, idx, op)
  if type(src) == "number" then
    -- made where t is, so a CUDA t takes a number too
    return new(C.dl_full_on, core.shape_buf, core.shape_args(op, false, core.shape_of(idx)),
               C.dl_tensor_dtype(t), src, C.dl_tensor_device(t))
  end
  return tensor_arg(src, op, "src")
end
local function scatter_fn(reduce, name, inplace)
  return function(t, dim, idx, src)
    idx = index_arg(idx, name)
    src = scatter_src(t, src, idx, name)
    dim = dim_arg(dim, name)
    if inplace then
      check(C.dl_scatter_(t, dim, idx, src, reduce))
      return t
    end
    return new(C.dl_scatter, t, dim, idx, src, reduce)
  end
end
m.scatter = scatter_fn(0, "scatter", false)
m.scatter_ = scatter_fn(0, "scatter_", true)
m.scatter_add = scatter_fn(1, "scatter_add", false)
m.scatter_add_ = scatter_fn(1, "scatter_add_", true)

local function fill_value(v, op)
  if core.is_tensor(v) then v = T.item(v) end
  if type(v) == "boolean" then v = v and 1 or 0 end
  if type(v) ~= "number" then raise(op .. ": value must be a number, got " .. type(v)) end
  return v
end
function m.masked_fill(t, mask, v)
  return new(C.dl_masked_fill, t, tensor_arg(mask, "masked_fill", "mask"), fill_value(v, "masked_fill"))
end
function m.masked_fill_(t, mask, v)
  check(C.dl_masked_fill_(t, tensor_arg(mask, "masked_fill_", "mask"), fill_value(v, "masked_fill_")))
  return t
end
function m.masked_select(t, mask)
  return new(C.dl_masked_select, t, tensor_arg(mask, "masked_select", "mask"))
end

function m.sort(t, dim, descending)
  if type(dim) == "table" then dim, descending = dim.dim, dim.descending end
  return new2(C.dl_sort, t, dim_arg(dim or -1, "sort"), descending and 1 or 0)
end
function m.argsort(t, dim, descending)
  local _, idx = T.sort(t, dim, descending)
  return idx
end
function m.topk(t, k, dim, largest, sorted)
  if type(dim) == "table" then dim, largest, sorted = dim.dim, dim.largest, dim.sorted end
  return new2(C.dl_topk, t, dim_arg(k, "topk", "k"), dim_arg(dim or -1, "topk"),
              largest == false and 0 or 1, sorted == false and 0 or 1)
end
function m.nonzero(t) return new(C.dl_nonzero, t) end
function m.tril(t, k) return new(C.dl_tril, t, dim_arg(k or 0, "tril", "diagonal")) end
function m.triu(t, k) return new(C.dl_triu, t, dim_arg(k or 0, "triu", "diagonal")) end
function m.one_hot(t, n) return new(C.dl_one_hot, t, dim_arg(n or -1, "one_hot", "num_classes")) end

-- -- Random fills ------------------------------------------------------------

function m.uniform_(t, a, b)
  a, b = a or 0, b or 1
  if type(a) ~= "number" or type(b) ~= "number" then raise("uniform_: bounds must be numbers") end
  check(C.dl_uniform_(t, a, b))
  return t
end
function m.normal_(t, mean, std)
  mean, std = mean or 0, std or 1
  if type(mean) ~= "number" or type(std) ~= "number" then raise("normal_: mean and std must be numbers") end
  check(C.dl_normal_(t, mean, std))
  return t
end

-- -- Comparisons of whole tensors -----------------------------------------

-- t:is(u): whether t and u are the same tensor (Python's `t is u`);
-- handles of one tensor are equal whatever their values.
function m.is(a, b) return core.is_tensor(b) and core.same(a, b) end

function m.equal(a, b)
  b = core.live(operand(b, "equal", 2), "equal")
  core.live(a, "equal")
  local sa, sb = core.shape_of(a), core.shape_of(b)
  if #sa ~= #sb then return false end
  for i = 1, #sa do
    if sa[i] ~= sb[i] then return false end
  end
  return T.all(T.eq(a, b))
end

-- Raises under op's name when a and b do not broadcast (the helpers used
-- below would report it as their own error, "sub: ...").
local function check_broadcast(a, b, op)
  local sa, sb = core.shape_of(a), core.shape_of(b)
  local na, nb = #sa, #sb
  local n = na > nb and na or nb
  for i = 1, n do
    local x, y = sa[na - n + i] or 1, sb[nb - n + i] or 1
    if x ~= y and x ~= 1 and y ~= 1 then
      raise(("%s: shapes %s and %s cannot be broadcast (dim %d: %d vs %d)")
            :format(op, core.fmt_shape(sa), core.fmt_shape(sb), i - 1, x, y))
    end
  end
end

function m.allclose(a, b, rtol, atol, equal_nan)
  if type(rtol) == "table" then rtol, atol, equal_nan = rtol.rtol, rtol.atol, rtol.equal_nan end
  rtol, atol = rtol or 1e-5, atol or 1e-8
  b = core.live(operand(b, "allclose", 2), "allclose")
  core.live(a, "allclose")
  check_broadcast(a, b, "allclose")
  local a64, b64 = T.to(a, "float64"), T.to(b, "float64")
  local close = T.le(T.abs(T.sub(a64, b64)), T.add(T.mul(T.abs(b64), rtol), atol))
  -- equal infinities are close; NaNs only when asked
  close = T.logical_or(close, T.eq(a64, b64))
  if equal_nan then close = T.logical_or(close, T.logical_and(T.isnan(a64), T.isnan(b64))) end
  return T.all(close)
end

function m.isclose(a, b, rtol, atol)
  rtol, atol = rtol or 1e-5, atol or 1e-8
  b = operand(b, "isclose", 2)
  check_broadcast(a, b, "isclose")
  local a64, b64 = T.to(a, "float64"), T.to(b, "float64")
  return T.logical_or(T.le(T.abs(T.sub(a64, b64)), T.add(T.mul(T.abs(b64), rtol), atol)), T.eq(a64, b64))
end

-- -- Operators ---------------------------------------------------------------

-- <, <=, >, >= and == compare values when every tensor involved has one
-- element, against another tensor or a Lua number (or boolean) on either
-- side, as PyTorch's `if loss > 0:` and `if a == b:` do (through the op, so
-- float32 0.1 == 0.1 as in PyTorch); more elements have no single truth
-- value: an error naming the elementwise method.  Tensor handles are
-- references (ddp.core), so LuaJIT asks these even between two tensors.
local function compare(op, a, b)
  for _, x in ipairs { a, b } do
    if core.is_tensor(x) and C.dl_tensor_numel(x) ~= 1 then
      local n = tonumber(C.dl_tensor_numel(x))
      core.live(x, op == "eq" and "==" or "<, <=, >, >=")
      if op == "eq" then
        raise(("==: a tensor with %d elements has no single truth value; use t:equal(u) (same shape and values), t:eq(u) (elementwise) or t:is(u) (the same tensor)")
              :format(n))
      end
      raise(("<, <=, >, >=: a tensor with %d elements has no single truth value; use t:lt(x), t:le(x), t:gt(x) or t:ge(x) for the elementwise comparison")
            :format(n))
    end
  end
  return T.item(T[op](a, b))
end

-- The metamethods of the tensor type (ddp.tensor puts them in its metatable).
M.operators = {
  __lt = function(a, b) return compare("lt", a, b) end,
  __le = function(a, b) return compare("le", a, b) end,
  -- a tensor equals a number or tensor by value (one element), and itself;
  -- t == "x", t == {}, t == nil and t == false are false, never an error,
  -- as Lua's == is everywhere else (so `opt ~= false` stays safe when opt
  -- is a tensor)
  __eq = function(a, b)
    local ta, tb = core.is_tensor(a), core.is_tensor(b)
    if ta and tb then
      if core.same(a, b) then return true end
    else
      local other = ta and b or a
      if type(other) ~= "number" then return false end
    end
    return compare("eq", a, b)
  end,
  __add = function(a, b) return T.add(a, b) end,
  __sub = function(a, b) return T.sub(a, b) end,
  __mul = function(a, b) return T.mul(a, b) end,
  __div = function(a, b) return T.div(a, b) end,
  __pow = function(a, b) return T.pow(a, b) end,
  __mod = function(a, b) return T.remainder(a, b) end,
  __unm = function(a) return T.neg(a) end,
  __len = function(a)
    if C.dl_tensor_dim(a) == 0 then raise("len: # of a 0-dim tensor is undefined; use numel() or item()") end
    return tonumber(C.dl_tensor_size(a, 0))
  end,
}

-- Other names of methods (alias -> name; name_ -> alias_ too).  ddp.tensor
-- adds them after autocast's wrappers, so an alias shares its op's wrapper.
M.aliases = aliases

-- Binary ops take a number first (2 + t calls add(2, t)): ddp.tensor checks
-- no tensor self for them.
M.binops, M.unops = binops, unops

-- methods(all) -> this file's methods; all is the table they end up in.
function M.methods(all)
  T = all
  return m
end

return M
