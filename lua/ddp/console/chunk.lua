-- ddp.console.chunk: a chunk typed at the prompt, compiled in a session
-- -- an expression prints its value, and `local` stays visible on later
-- lines (the chunk's top-level locals, found by a scan of its tokens, are
-- exported into the session) -- and the session itself: the prompt's
-- names, and for ddp.breakpoint the stopped frame's locals.
local core = require "ddp.core"
local type, select, setmetatable = type, select, setmetatable

core.add_lib_file(debug.getinfo(1, "S").source)

local M = {}

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
function M._exporter(s)
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

return M
