-- ddp.tensor.print: tostring(t) in PyTorch's style (torch/_tensor_str.py): the
-- same number formats, widths, line wrapping and summarisation, so output
-- reads the same as in Python.
local core = require "ddp.core"
local C, ffi = core.C, core.ffi
local fmt, floor, huge = string.format, math.floor, math.huge

core.add_lib_file(debug.getinfo(1, "S").source)

-- The options set_printoptions gives format (the tensor type's __tostring).
local state = { opts = { precision = 4, threshold = 1000, edgeitems = 3, linewidth = 80, sci_mode = nil } }

local M = {}

local profiles = {
  default = { precision = 4, threshold = 1000, edgeitems = 3, linewidth = 80 },
  short = { precision = 2, threshold = 1000, edgeitems = 2, linewidth = 80 },
  full = { precision = 4, threshold = huge, edgeitems = 3, linewidth = 80 },
}

-- What each option may be, as a check and its words: refused when set,
-- so printing never fails on it later.
local function is_int(v) return type(v) == "number" and v == floor(v) and v ~= huge end
local limits = {
  precision = { function(v) return is_int(v) and v >= 0 and v <= 99 end,
                "an integer from 0 to 99 (a double has 17 significant digits)" },
  threshold = { function(v) return type(v) == "number" and v >= 0 end, "a number >= 0 (math.huge: never summarise)" },
  edgeitems = { function(v) return is_int(v) and v >= 0 end, "an integer >= 0" },
  linewidth = { function(v) return is_int(v) and v > 0 end, "an integer > 0" },
}

-- set_printoptions{precision=, threshold=, edgeitems=, linewidth=,
-- sci_mode=, profile=}, as torch.set_printoptions: all checked before any
-- is taken.
function M.set_printoptions(o)
  if type(o) ~= "table" or core.is_tensor(o) then core.raise("set_printoptions: expected a table of options") end
  local new = {}
  for k, v in pairs(state.opts) do new[k] = v end
  for k, v in pairs(o) do
    if k == "profile" then
      if not profiles[v] then
        core.raise(('set_printoptions: profile must be "default", "short" or "full", got %s'):format(core.show(v)))
      end
      for pk, pv in pairs(profiles[v]) do new[pk] = pv end
    elseif k == "sci_mode" then
      if type(v) ~= "boolean" then core.raise("set_printoptions: sci_mode must be a boolean, got " .. core.show(v)) end
    elseif limits[k] then
      if not limits[k][1](v) then
        core.raise(("set_printoptions: %s must be %s, got %s"):format(k, limits[k][2], core.show(v)))
      end
    else
      core.raise(("set_printoptions: unknown option %s (options: precision, threshold, edgeitems, linewidth, sci_mode, profile)")
                 :format(core.show(k)))
    end
  end
  for k in pairs(limits) do  -- the options given win over the profile's
    if o[k] ~= nil then new[k] = o[k] end
  end
  if o.sci_mode ~= nil then new.sci_mode = o.sci_mode end
  state.opts = new
end

local function isfinite(v) return v == v and v ~= huge and v ~= -huge end

local function special(v)
  if v ~= v then return "nan" end
  if v == huge then return "inf" end
  if v == -huge then return "-inf" end
end

-- Reads the elements that will be shown (the edges of each dim when
-- summarising), depth first, as {values = flat list, ...}.
local function read_tensor(t, summarize)
  local dims = C.dl_tensor_dim(t)
  local shape = core.shape_of(t)
  local isint64 = C.dl_tensor_dtype(t) == C.DL_INT64
  local dval, ival = core.ffi.new("double[1]"), core.ffi.new("int64_t[1]")
  local strides, n = {}, 1
  for d = dims, 1, -1 do
    strides[d] = n
    n = n * shape[d]
  end
  local function get(linear)
    if isint64 then
      C.dl_get_int64(t, linear, ival)
      return ival[0]
    end
    C.dl_get_double(t, linear, dval)
    return dval[0]
  end
  local e = state.opts.edgeitems
  local function indices(size)
    if summarize and size > 2 * e then
      local r = {}
      for i = 0, e - 1 do r[#r + 1] = i end
      r[#r + 1] = false  -- the "..." marker
      for i = size - e, size - 1 do r[#r + 1] = i end
      return r
    end
    local r = {}
    for i = 0, size - 1 do r[#r + 1] = i end
    return r
  end
  local function build(d, base)
    if d > dims then return get(base) end
    local node = {}
    for _, i in ipairs(indices(shape[d])) do
      node[#node + 1] = i and build(d + 1, base + i * strides[d]) or false
    end
    return node
  end
  return build(1, 0), shape
end

local function flatten(node, out)
  if type(node) ~= "table" then
    out[#out + 1] = node
    return out
  end
  for _, v in ipairs(node) do
    if v ~= false then flatten(v, out) end
  end
  return out
end

-- The formatter: decides int mode, sci mode and the common width from the
-- values shown, exactly as PyTorch's _Formatter.
local function make_formatter(values, dtype)
  local floating = C.dl_dtype_is_float(dtype) ~= 0
  local isbool = dtype == C.DL_BOOL
  local f = { width = 1 }
  if isbool then
    f.fn = function(v) return v ~= 0 and "True" or "False" end
    for _, v in ipairs(values) do f.width = math.max(f.width, #f.fn(v)) end
    return f
  end
  if not floating then
    f.fn = function(v)
      if type(v) == "cdata" then return (tostring(v):gsub("LL$", "")) end
      return fmt("%d", v)
    end
    for _, v in ipairs(values) do f.width = math.max(f.width, #f.fn(v)) end
    return f
  end
  local finite = {}
  for _, v in ipairs(values) do
    if isfinite(v) and v ~= 0 then finite[#finite + 1] = v end
  end
  local prec = state.opts.precision
  local int_mode, sci = true, false
  if #finite > 0 then
    local amin, amax = huge, 0
    for _, v in ipairs(finite) do
      local a = math.abs(v)
      if a < amin then amin = a end
      if a > amax then amax = a end
      if v ~= floor(v) then int_mode = false end
    end
    if int_mode then
      if amax > 1e8 then sci = true end
    else
      if amax / amin > 1000 or amax > 1e8 or amin < 1e-4 then sci = true end
    end
  end
  if state.opts.sci_mode ~= nil then sci = state.opts.sci_mode end
  if sci then
    f.fn = function(v) return special(v) or fmt("%." .. prec .. "e", v) end
  elseif int_mode then
    f.fn = function(v) return special(v) or (fmt("%.0f", v) .. ".") end
  else
    f.fn = function(v) return special(v) or fmt("%." .. prec .. "f", v) end
  end
  for _, v in ipairs(finite) do f.width = math.max(f.width, #f.fn(v)) end
  if int_mode and not sci then
    -- PyTorch counts "0." too once a finite value exists
    for _, v in ipairs(values) do
      if v == 0 then f.width = math.max(f.width, 2) end
    end
  end
  return f
end

local function pad(s, w)
  if #s >= w then return s end
  return string.rep(" ", w - #s) .. s
end

local function vector_str(node, indent, f)
  local elem_len = f.width + 2
  local per_line = math.max(1, floor((state.opts.linewidth - indent) / elem_len))
  local items = {}
  for _, v in ipairs(node) do
    items[#items + 1] = v == false and " ..." or pad(f.fn(v), f.width)
  end
  local lines = {}
  for i = 1, #items, per_line do
    local chunk = {}
    for j = i, math.min(i + per_line - 1, #items) do chunk[#chunk + 1] = items[j] end
    lines[#lines + 1] = table.concat(chunk, ", ")
  end
  return "[" .. table.concat(lines, ",\n" .. string.rep(" ", indent + 1)) .. "]"
end

local function tensor_str(node, dims, indent, f)
  if dims == 1 then return vector_str(node, indent, f) end
  local parts = {}
  for _, sub in ipairs(node) do
    parts[#parts + 1] = sub == false and "..." or tensor_str(sub, dims - 1, indent + 1, f)
  end
  return "[" .. table.concat(parts, "," .. string.rep("\n", dims - 1) .. string.rep(" ", indent + 1)) .. "]"
end

function M.format(t)
  local dtype = C.dl_tensor_dtype(t)
  local dims = C.dl_tensor_dim(t)
  local numel = tonumber(C.dl_tensor_numel(t))
  local prefix = "tensor("
  local indent = #prefix
  local suffixes = {}
  local body
  if C.dl_tensor_is_freed(t) ~= 0 then return "tensor(<freed>)" end
  local dev = C.dl_tensor_device(t)
  if dev >= 0 then
    -- the values come through a copy on the CPU, which cannot read device memory
    local host = numel > 0 and C.dl_to_device(t, -1) or nil
    if host ~= nil then
      t = core.own(host)
    elseif numel > 0 then
      body = ("<%s %s>"):format(core.dtype_name(dtype), "[" .. table.concat(core.shape_of(t), ", ") .. "]")
    end
  end
  if body then  -- shown as a summary
  elseif numel == 0 then
    body = "[]"
    local shape = core.shape_of(t)
    if not (dims == 1 and shape[1] == 0) then
      suffixes[#suffixes + 1] = "size=(" .. table.concat(shape, ", ") .. (dims == 1 and ",)" or ")")
    end
  else
    local summarize = numel > state.opts.threshold
    local node = read_tensor(t, summarize)
    local f = make_formatter(flatten(node, {}), dtype)
    if dims == 0 then
      body = f.fn(node)
    else
      body = tensor_str(node, dims, indent, f)
    end
  end
  if dev >= 0 then suffixes[#suffixes + 1] = "device='cuda:" .. dev .. "'" end
  if dtype ~= core.default_dtype() and dtype ~= C.DL_INT64 and dtype ~= C.DL_BOOL then
    suffixes[#suffixes + 1] = "dtype=torch." .. core.dtype_name(dtype)
  elseif numel == 0 and dtype ~= core.default_dtype() then
    suffixes[#suffixes + 1] = "dtype=torch." .. core.dtype_name(dtype)
  end
  -- as PyTorch: the node that made it, or requires_grad on a leaf
  local grad_fn = ffi.string(C.dl_grad_fn_name(t))
  if grad_fn ~= "" then
    -- PyTorch numbers its node classes by overload (MulBackward0)
    suffixes[#suffixes + 1] = "grad_fn=<" .. grad_fn .. (grad_fn:match("%d$") and "" or "0") .. ">"
  elseif C.dl_requires_grad(t) ~= 0 then
    suffixes[#suffixes + 1] = "requires_grad=True"
  end
  if #suffixes > 0 then body = body .. ", " .. table.concat(suffixes, ", ") end
  return prefix .. body .. ")"
end

return M
