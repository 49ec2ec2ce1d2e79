-- ddp.console: what the ddplua prompt does with a typed chunk, on one rank
-- or on every rank of a job: compile it (an expression prints its value,
-- `local` stays visible on later lines), run it, format what it returned
-- (tables nested and depth-limited, tensors as PyTorch prints them),
-- complete names for the Tab key, and ddp.breakpoint().  The terminal
-- side (line editing, Ctrl-C, the launcher's prompt over ranks) is the
-- program's (cli/repl.c, cli/repl_dist.c, cli/link.c); this module is the
-- Lua side both share.
local core = require "ddp.core"
local tensor = require "ddp.tensor"
local nn = require "ddp.nn"

core.add_lib_file(debug.getinfo(1, "S").source)

local M = {}
local type, pairs, tostring, select = type, pairs, tostring, select

-- -- Top-level locals -------------------------------------------------------

-- Each chunk typed at the prompt is a function of its own, so its locals
-- would vanish with it.  The chunk's top-level `local` names are found by
-- a small scan of its tokens (strings, comments and nested blocks skipped)
-- and exported into the session at the end of the chunk; later chunks read
-- them through the session's environment.  (A closure made in one chunk
-- keeps its own upvalue: assigning the name at the prompt later changes
-- what later chunks see, not what that closure captured.)

local keywords = {}
for w in ([[and break do else elseif end false for function goto if in local nil
            not or repeat return then true until while]]):gmatch("%a+") do keywords[w] = true end
M.keywords = keywords

-- The tokens of src as a list of {kind, text, pos}: kind is "name",
-- "keyword" or "other" (strings, numbers, symbols).  Comments are dropped.
-- The scan is lenient: the chunk compiled already, this only finds names.
local function tokens(src)
  local out, i, n = {}, 1, #src
  local function long_bracket(at)
    local eq = src:match("^%[(=*)%[", at)
    if not eq then return nil end
    local close = src:find("]" .. eq .. "]", at + #eq + 2, true)
    return close and close + #eq + 2 or n + 1
  end
  while i <= n do
    local c = src:sub(i, i)
    if c:match("%s") then
      i = i + 1
    elseif src:sub(i, i + 1) == "--" then
      local stop = long_bracket(i + 2)
      if stop then i = stop else i = (src:find("\n", i, true) or n) + 1 end
    elseif c == "[" and long_bracket(i) then
      local stop = long_bracket(i)
      out[#out + 1] = { "other", src:sub(i, stop - 1), i }
      i = stop
    elseif c == '"' or c == "'" then
      local j = i + 1
      while j <= n do
        local d = src:sub(j, j)
        if d == "\\" then j = j + 2
        elseif d == c or d == "\n" then break
        else j = j + 1 end
      end
      out[#out + 1] = { "other", src:sub(i, j), i }
      i = j + 1
    elseif c:match("[%a_]") then
      local w = src:match("^[%w_]+", i)
      out[#out + 1] = { keywords[w] and "keyword" or "name", w, i }
      i = i + #w
    elseif c:match("%d") or (c == "." and src:sub(i + 1, i + 1):match("%d")) then
      local num = src:match("^0[xX][%x%.]*[pP]?[%+%-]?%x*", i) or src:match("^[%d%.]+[eE][%+%-]?%d+", i)
                  or src:match("^[%d%.]+", i)
      local suffix = src:match("^[uUlLiI]+", i + #num) or ""  -- LuaJIT's 1ULL, 1i
      out[#out + 1] = { "other", num .. suffix, i }
      i = i + #num + #suffix
    else
      local sym = src:match("^%.%.%.", i) or src:match("^[=~<>]=", i) or src:match("^%.%.", i)
                  or src:match("^::", i) or c
      out[#out + 1] = { "other", sym, i }
      i = i + #sym
    end
  end
  return out
end
M.tokens = tokens

local opens = { ["function"] = true, ["do"] = true, ["if"] = true, ["repeat"] = true }
local closes = { ["end"] = true, ["until"] = true }

-- The names the chunk declares `local` at its top level, in order, and the
-- position of its top-level `return` (nil if none).
local function top_level_locals(src)
  local toks, names, depth, ret = tokens(src), {}, 0, nil
  local k = 1
  while k <= #toks do
    local kind, text = toks[k][1], toks[k][2]
    if kind == "keyword" then
      if opens[text] then depth = depth + 1
      elseif closes[text] then depth = depth - 1
      elseif text == "return" and depth == 0 and not ret then ret = toks[k][3]
      elseif text == "local" and depth == 0 then
        local nxt = toks[k + 1]
        if nxt and nxt[2] == "function" then
          if toks[k + 2] and toks[k + 2][1] == "name" then names[#names + 1] = toks[k + 2][2] end
        else
          local j = k + 1
          while toks[j] and toks[j][1] == "name" do
            names[#names + 1] = toks[j][2]
            if toks[j + 1] and toks[j + 1][2] == "," then j = j + 2 else break end
          end
        end
      end
    end
    k = k + 1
  end
  return names, ret
end
M.top_level_locals = top_level_locals

-- -- Sessions ------------------------------------------------------------------

-- A session: the names the prompt declared (vars, declared), and for a
-- breakpoint the frame's locals (frame).  Its env is every chunk's
-- environment: prompt locals first, then the frame's, then the globals.
function M.session(frame)
  local s = { vars = {}, declared = {}, frame = frame, count = 0 }
  local globals = frame and frame.env or _G
  s.env = setmetatable({}, {
    __index = function(_, k)
      if s.declared[k] then return s.vars[k] end
      if frame and frame.has[k] then return frame.values[k] end
      return globals[k]
    end,
    __newindex = function(_, k, v)
      if s.declared[k] then s.vars[k] = v
      elseif frame and frame.has[k] then
        frame.values[k] = v
        frame.dirty[k] = true
      else globals[k] = v end
    end,
  })
  return s
end

-- The exporter every chunk with top-level locals gets as its `...`.
local function exporter(s)
  return function(...)
    for i = 1, select("#", ...), 2 do
      local name, v = select(i, ...)
      s.declared[name] = true
      s.vars[name] = v
    end
  end
end

local EXPORT = "__ddp_console_export"

-- Compiles text as the prompt does: "=expr" and a bare expression print
-- their value (tried as "return <text>" first, as lua.c does); else the
-- statements, with their top-level locals exported.  Returns the function
-- (its environment is the session's) and whether it is an expression, or
-- nil and the error message.
function M.compile(s, text)
  s.count = s.count + 1
  if text:sub(1, 1) == "=" then text = "return " .. text:sub(2) end
  local f = loadstring("return " .. text .. ";", "=stdin")
  local expr = f ~= nil
  if expr then
    -- through a function of ours, so that `error("x")` typed here is no
    -- tail call and keeps its "stdin:1:" position
    f = loadstring("local __ddp_console_pass = ... return __ddp_console_pass(" .. text .. "\n)", "=stdin")
  else
    local names, ret = top_level_locals(text)
    local code = text
    if #names > 0 then
      local args = {}
      for i, name in ipairs(names) do args[i] = ("%q, %s"):format(name, name) end
      local export = (" local %s = ... %s(%s) "):format(EXPORT, EXPORT, table.concat(args, ", "))
      if ret then
        code = text:sub(1, ret - 1) .. export .. text:sub(ret)
      else
        code = text .. "\n" .. export
      end
    end
    local err
    f, err = loadstring(code, "=stdin")
    if not f then
      -- report the error of the text as typed, not of our rewrite
      local _, plain = loadstring(text, "=stdin")
      return nil, plain or err
    end
  end
  setfenv(f, s.env)
  return f, expr
end

-- -- Formatting --------------------------------------------------------------

local MAX_DEPTH, MAX_ITEMS, WIDTH = 3, 40, 80

local function is_ident(k) return type(k) == "string" and k:match("^[%a_][%w_]*$") and not keywords[k] end

local function has_tostring(v)
  local mt = getmetatable(v)
  return type(mt) == "table" and rawget(mt, "__tostring") ~= nil
end

local format_value

local function format_table(t, depth, seen, indent)
  if seen[t] then return "<cycle>" end
  if depth > MAX_DEPTH then return "{...}" end
  seen[t] = true
  local n, parts = #t, {}
  for i = 1, math.min(n, MAX_ITEMS) do parts[#parts + 1] = format_value(t[i], depth + 1, seen, indent .. "  ") end
  local keys = {}
  for k in pairs(t) do
    if not (type(k) == "number" and k >= 1 and k <= n and k % 1 == 0) then keys[#keys + 1] = k end
  end
  table.sort(keys, function(a, b)
    local ta, tb = type(a), type(b)
    if ta ~= tb then return ta < tb end
    if ta == "number" or ta == "string" then return a < b end
    return tostring(a) < tostring(b)
  end)
  for i = 1, #keys do
    if #parts >= MAX_ITEMS then break end
    local k = keys[i]
    local key = is_ident(k) and k or ("[" .. format_value(k, MAX_DEPTH, seen, "") .. "]")
    parts[#parts + 1] = key .. " = " .. format_value(t[k], depth + 1, seen, indent .. "  ")
  end
  local more = (n + #keys) - #parts
  if more > 0 then parts[#parts + 1] = ("... (%d more)"):format(more) end
  seen[t] = nil
  if #parts == 0 then return "{}" end
  local flat = "{" .. table.concat(parts, ", ") .. "}"
  if #flat + #indent <= WIDTH and not flat:find("\n", 1, true) then return flat end
  return "{\n" .. indent .. "  " .. table.concat(parts, ",\n" .. indent .. "  ") .. "\n" .. indent .. "}"
end

function format_value(v, depth, seen, indent)
  local tv = type(v)
  if tv == "string" then return depth == 0 and v or ("%q"):format(v):gsub("\\\n", "\\n") end
  if core.is_tensor(v) or nn.is_module(v) then
    local str = tostring(v)
    return depth == 0 and str or str:gsub("\n", "\n" .. indent)
  end
  if tv == "table" and not has_tostring(v) then return format_table(v, depth, seen or {}, indent) end
  return tostring(v)
end

-- The values a chunk returned, as the prompt shows them: tab separated,
-- strings as they are at the top level.
function M.format(...)
  local out = {}
  for i = 1, select("#", ...) do
    local ok, str = pcall(format_value, (select(i, ...)), 0, {}, "")
    out[i] = ok and str or ("<cannot print: " .. tostring(str) .. ">")
  end
  return table.concat(out, "\t")
end

-- -- Running -----------------------------------------------------------------

-- The traceback of an error in a typed chunk, cut at the console's own
-- frames (what the user typed is the whole story).
local function traceback(msg)
  if type(msg) ~= "string" and type(msg) ~= "number" then
    local mt = getmetatable(msg)
    msg = (mt and mt.__tostring) and tostring(msg) or ("(error object is a " .. type(msg) .. " value)")
  end
  local tb = debug.traceback(tostring(msg), 2)
  local lines, out = {}, {}
  for line in tb:gmatch("[^\n]+") do lines[#lines + 1] = line end
  local frames = 0
  for _, line in ipairs(lines) do
    if line:find("ddp/console.lua", 1, true) or line:find("[C]: in function 'xpcall'", 1, true) then break end
    local src = line:match("^%s+(.-):%d+: in ")
    local ours = src and core.is_lib_source("@" .. src)
    if not ours and not line:find("^%s*%[C%]: in ") then
      out[#out + 1] = line
      if line:find("^%s") then frames = frames + 1 end
    end
  end
  -- one frame (the line typed) says nothing the message does not
  if frames <= 1 then return tostring(msg) end
  return table.concat(out, "\n")
end

local function pack(...) return { n = select("#", ...), ... } end
local function pass(...) return ... end

-- Runs text in session s: returns true and what to print ("" when the
-- chunk printed nothing itself), or false and the error with its
-- traceback.  Code typed here runs interpreted (the caller turns the JIT
-- off for it) so Ctrl-C's hook can stop a loop typed at the prompt.
function M.run(s, text)
  local f, expr = M.compile(s, text)
  if not f then return false, expr end
  jit.off(f, true)
  local r = pack(xpcall(f, traceback, expr and pass or exporter(s)))
  if not r[1] then return false, r[2] end
  if r.n <= 1 then return true, "" end
  return true, M.format(unpack(r, 2, r.n))
end

-- -- Completion --------------------------------------------------------------

local function add_keys(v, out, seen_tables, methods_only)
  local depth = 0
  while type(v) == "table" and depth < 8 and not seen_tables[v] do
    seen_tables[v] = true
    local fields = rawget(v, "_fields")  -- a module's registered fields
    if type(fields) == "table" then
      for k, x in pairs(fields) do
        if type(k) == "string" and (not methods_only or type(x) == "function") then out[k] = true end
      end
    end
    for k, x in pairs(v) do
      if type(k) == "string" and (not methods_only or type(x) == "function") then out[k] = true end
    end
    local mt = getmetatable(v)
    v = type(mt) == "table" and rawget(mt, "__index") or nil
    depth = depth + 1
  end
end

-- Candidates for the word ending text ("ddp.ze", "x:ad", "pri"): full words
-- in sorted order.  Names starting with "_" only when the word does.
function M.complete(s, text)
  local word = text:match("[%w_%.:]*$") or ""
  local path, sep, partial = word:match("^(.-)([%.:])([%w_]*)$")
  local out = {}
  if not path then
    partial = word
    for k in pairs(keywords) do out[k] = true end
    add_keys(_G, out, {})
    for k in pairs(s.vars) do out[k] = true end
    if s.frame then for k in pairs(s.frame.has) do out[k] = true end end
  else
    if path == "" or path:find(":", 1, true) then return {} end
    local v = s.env
    for name in path:gmatch("[^%.]+") do
      local ok, x = pcall(function() return v[name] end)
      if not ok or x == nil then return {} end
      v = x
    end
    if core.is_tensor(v) then
      for k, f in pairs(tensor.methods) do
        if sep == ":" or type(f) == "function" then out[k] = true end
      end
      if sep == "." then
        for _, k in ipairs { "grad", "requires_grad", "is_leaf", "grad_fn", "data", "shape" } do out[k] = true end
      end
    else
      add_keys(v, out, {}, sep == ":")
    end
  end
  local list = {}
  for k in pairs(out) do
    if k:sub(1, #partial) == partial and is_ident(k) or (keywords[k] and not path and k:sub(1, #partial) == partial) then
      if k:sub(1, 1) ~= "_" or partial:sub(1, 1) == "_" then
        list[#list + 1] = (path and (path .. sep) or "") .. k
      end
    end
  end
  table.sort(list)
  return list
end

-- The candidates one per line, for the launcher's Tab key (link.c).
function M.complete_text(s, text)
  return true, table.concat(M.complete(s, text), "\n")
end

-- -- ddp.breakpoint -----------------------------------------------------------

-- The caller's frame (level counts as debug.getinfo does) as a session's
-- frame: its locals (the innermost of a name wins) and upvalues, by value.
local function capture(level)
  local info = debug.getinfo(level + 1, "fSl")
  local frame = { has = {}, values = {}, dirty = {}, index = {}, upindex = {},
                  where = info and ("%s:%d"):format(info.short_src, info.currentline or 0) or "?" }
  if info and info.func then
    frame.env = getfenv(info.func)
    local i = 1
    while true do
      local name, v = debug.getupvalue(info.func, i)
      if not name then break end
      frame.has[name], frame.values[name], frame.upindex[name] = true, v, i
      i = i + 1
    end
  end
  local i = 1
  while true do
    local name, v = debug.getlocal(level + 1, i)
    if not name then break end
    if name:sub(1, 1) ~= "(" then
      frame.has[name], frame.values[name], frame.index[name] = true, v, i
      frame.upindex[name] = nil
    end
    i = i + 1
  end
  frame.func = info and info.func
  return frame
end

-- ddp.breakpoint([rank]): stops here and opens the prompt on that rank
-- (default 0) with this frame's locals in scope; the other ranks wait.
-- Ctrl-D at the prompt writes changed locals back and continues every
-- rank.  As torch.distributed.breakpoint, every rank calls it.  Under the
-- ddplua program the prompt is the launcher's (one terminal for the job);
-- elsewhere (plain luajit) it falls back to debug.debug().
function M.breakpoint(rank)
  if rank ~= nil and not core.is_integer(rank) then
    core.raise("breakpoint: rank must be an integer, got " .. core.show(rank))
  end
  rank = rank or 0
  local me = tonumber(os.getenv("RANK")) or 0
  local world = tonumber(os.getenv("WORLD_SIZE")) or 1
  if rank < 0 or rank >= world then
    core.raise(("breakpoint: rank %d is not in this job (ranks 0 to %d)"):format(rank, world - 1))
  end
  local frame = capture(2)
  local session = M.session(frame)
  local program = package.loaded["ddp.program"]
  if type(program) == "table" and program.prompt then
    program.prompt(session, rank, frame.where)
  elseif me == rank then
    io.stderr:write(("ddp.breakpoint at %s: not under the ddplua program, using debug.debug() (cont to go on)\n")
                    :format(frame.where))
    debug.debug()
  end
  for name in pairs(frame.dirty) do
    if frame.index[name] then debug.setlocal(2, frame.index[name], frame.values[name])
    elseif frame.upindex[name] then debug.setupvalue(frame.func, frame.upindex[name], frame.values[name]) end
  end
end

return M
