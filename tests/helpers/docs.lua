-- tests/helpers/docs.lua: the code blocks and links of README.md and
-- docs/*.md, for tests/docs_examples_spec.lua -- finding fenced blocks and
-- their info strings, running a Lua block as the page says (a program, a
-- job of N ranks, a copy of a file, a fragment that must compile), and
-- checking that relative links point at a file and heading that exist.
-- The convention is docs/testing.md's "Examples in the docs".
--
--   local docs = require "helpers.docs"
--   for _, b in ipairs(docs.blocks(text, "docs/data.md")) do
--     local ok, msg = docs.check(b)   -- false and "docs/data.md:57: ..." on failure
--   end
local jobs = require "helpers.jobs"
local q = jobs.q

local M = {}

M.TIMEOUT = 60  -- seconds a block may run

-- README.md and docs/*.md, relative to the repository root.
function M.pages()
  local list = { "README.md" }
  for name in jobs.sh("ls docs/*.md 2>/dev/null"):gmatch("[^\n]+") do list[#list + 1] = name end
  return list
end

-- -- Info strings ---------------------------------------------------------

-- The attributes a Lua block may carry, and what each value must look like.
local ATTRS = {
  fragment = "flag",
  nproc = "^[1-9]%d*$",
  args = ".",
  file = "^[%w_%-%./]+$",
}

-- "lua nproc=2 args=\"--epochs 1\"" -> "lua", {nproc = "2", args = "--epochs 1"}
-- or nil and what is wrong with it.
local function parse_info(info)
  local lang, rest = info:match("^(%S+)%s*(.-)$")
  if not lang then return nil, "the fence names no language (```lua, ```sh, ```text ...)" end
  local attrs, pos = {}, 1
  while pos <= #rest do
    local s, e, key, value = rest:find('^([%w_]+)="([^"]*)"%s*', pos)
    if not s then s, e, key, value = rest:find("^([%w_]+)=(%S+)%s*", pos) end
    if not s then s, e, key = rest:find("^([%w_]+)%s*", pos); value = true end
    if not s then return nil, ("cannot read the info string %q at %q"):format(info, rest:sub(pos)) end
    if attrs[key] ~= nil then return nil, ("attribute %s given twice"):format(key) end
    attrs[key] = value
    pos = e + 1
  end
  if lang ~= "lua" then return lang, attrs end
  for key, value in pairs(attrs) do
    local want = ATTRS[key]
    if not want then
      return nil, ("unknown attribute %q of a lua block (known: fragment, nproc=N, args=\"...\", file=PATH)"):format(key)
    end
    if want == "flag" and value ~= true then return nil, key .. " takes no value" end
    if want ~= "flag" and (value == true or not value:find(want)) then
      return nil, ("attribute %s needs a value matching %s, got %s"):format(key, want, tostring(value))
    end
  end
  local n = 0
  for _ in pairs(attrs) do n = n + 1 end
  if (attrs.fragment or attrs.file) and n > 1 then
    return nil, "fragment and file= take no other attribute"
  end
  return lang, attrs
end

-- -- Blocks ----------------------------------------------------------------

-- The fenced code blocks of a page's text: a list of {file =, line = (the
-- opening fence's), first = (the first code line's), lang =, attrs =,
-- code =}, or with `problem` set when the fence itself is wrong (no
-- language, an unknown attribute, never closed).  Indented fences (inside
-- a list item) count; their indentation is taken off the code.
function M.blocks(text, file)
  local lines = {}
  for l in (text .. "\n"):gmatch("([^\n]*)\n") do lines[#lines + 1] = l end
  if lines[#lines] == "" and text:sub(-1) == "\n" then lines[#lines] = nil end
  local out, i = {}, 1
  while i <= #lines do
    local indent, ticks, info = lines[i]:match("^( *)(```+)%s*(.-)%s*$")
    if indent and not info:find("`", 1, true) then
      local b = { file = file, line = i, first = i + 1 }
      local lang, attrs = parse_info(info)
      if lang then b.lang, b.attrs = lang, attrs else b.problem = attrs end
      local body, j = {}, i + 1
      while j <= #lines do
        local ci, ct = lines[j]:match("^( *)(```+)%s*$")
        if ct and #ct >= #ticks and #ci <= #indent + 3 then break end
        local l = lines[j]
        if l:sub(1, #indent) == indent then l = l:sub(#indent + 1) end
        body[#body + 1] = l
        j = j + 1
      end
      if j > #lines then b.problem = b.problem or "the fence is never closed" end
      b.code = table.concat(body, "\n") .. "\n"
      out[#out + 1] = b
      i = j + 1
    else
      i = i + 1
    end
  end
  return out
end

-- -- Running a block -------------------------------------------------------

local function where(b) return b.file .. ":" .. b.line end

-- The block's code preceded by blank lines, so that its lines keep their
-- numbers in the page and an error names the page's line.
local function aligned(b)
  return ("\n"):rep(b.first - 1) .. b.code
end

local function compile(b)
  local f, err = loadstring(aligned(b), "@" .. b.file)
  if not f then return false, where(b) .. ": the block does not compile: " .. err end
  return true
end

-- A file's lines after its leading comment and blank lines.
local function code_lines(text)
  local lines = {}
  for l in (text:gsub("\n*$", "") .. "\n"):gmatch("([^\n]*)\n") do lines[#lines + 1] = l end
  local k = 1
  while lines[k] and (lines[k]:find("^%-%-") or lines[k] == "") do k = k + 1 end
  return lines, k
end

-- file=PATH: the block and the file hold the same lines past their leading
-- comments.
local function same_as_file(b, root)
  local path = b.attrs.file
  local text = jobs.slurp((root or jobs.root) .. "/" .. path)
  if not text then return false, where(b) .. ": file=" .. path .. " does not exist" end
  local bl, bk = code_lines(b.code)
  local fl, fk = code_lines(text)
  local n = math.max(#bl - bk, #fl - fk)
  for d = 0, n do
    local x, y = bl[bk + d], fl[fk + d]
    if x ~= y then
      return false, ("%s: the block differs from %s at its line %d (the file's line %d):\n  block: %s\n  file:  %s")
        :format(where(b), path, b.first + bk + d - 1, fk + d, tostring(x), tostring(y))
    end
  end
  return true
end

-- Runs the block as a program of its own in a fresh temporary directory,
-- as `ddplua [--nproc N] PAGE ARGS`; returns true, or false and a message
-- with the page's file and line, the exit code and what the program wrote.
local function run(b, opts)
  opts = opts or {}
  local dir = jobs.sh("mktemp -d"):gsub("%s+$", "")
  local script = dir .. "/" .. b.file
  jobs.sh("mkdir -p " .. q(script:match("^(.*)/")))
  local f = assert(io.open(script, "w"))
  f:write(aligned(b))
  f:close()
  local secs = opts.timeout or M.TIMEOUT
  local launch = b.attrs.nproc and ("--nproc " .. b.attrs.nproc .. " ") or ""
  local cmd = "cd " .. q(dir) .. " && " .. jobs.CLEAN .. "timeout -k 5 " .. secs .. " " .. q(opts.program or jobs.ddplua)
    .. " " .. launch .. q(b.file) .. " " .. (b.attrs.args or "") .. " </dev/null 2>&1; echo \"rc=$?\""
  local out = jobs.sh(cmd)
  jobs.sh("rm -rf " .. q(dir))
  local rc = tonumber(out:match("rc=(%d+)%s*$"))
  out = out:gsub("rc=%d+%s*$", "")
  if rc == 0 then return true end
  local why = rc == 124 and ("timed out after " .. secs .. " s") or ("exited with code " .. tostring(rc))
  return false, ("%s: the example %s (run as `ddplua %s%s %s`); its output:\n%s")
    :format(where(b), why, launch, b.file, b.attrs.args or "", out)
end

-- Checks one block as its info string says: true, or false and a message
-- naming the page's file and line.  Blocks of other languages pass.
function M.check(b, opts)
  if b.problem then return false, where(b) .. ": " .. b.problem end
  if b.lang ~= "lua" then return true end
  local ok, err = compile(b)
  if not ok then return false, err end
  if b.attrs.fragment then return true end
  if b.attrs.file then return same_as_file(b, opts and opts.root) end
  return run(b, opts)
end

-- -- Links -----------------------------------------------------------------

-- GitHub's anchor of a heading: inline markup and punctuation dropped,
-- lower case, spaces as hyphens.
function M.slug(heading)
  local s = heading:gsub("%[(.-)%]%b()", "%1")
  s = s:lower():gsub("[^%w%s%-_]", ""):gsub(" ", "-")
  return s
end

-- The anchors of a page's headings (outside code blocks).
function M.anchors(text)
  local set, seen, fenced = {}, {}, false
  for l in (text .. "\n"):gmatch("([^\n]*)\n") do
    if l:find("^ *```") then fenced = not fenced
    elseif not fenced then
      local h = l:match("^#+%s+(.-)%s*$")
      if h then
        local s = M.slug(h)
        local a = seen[s] and (s .. "-" .. seen[s]) or s
        seen[s] = (seen[s] or 0) + 1
        set[a] = true
      end
    end
  end
  return set
end

-- The relative links of a page (outside code blocks and code spans) that
-- do not resolve: a list of "FILE:LINE: ..." messages.  read(path) gives
-- a file's text or nil (default: from the repository root).
function M.broken_links(text, file, read)
  read = read or function(path) return jobs.slurp(jobs.root .. "/" .. path) end
  local dir = file:match("^(.*)/") or ""
  local problems, fenced, n = {}, false, 0
  for l in (text .. "\n"):gmatch("([^\n]*)\n") do
    n = n + 1
    if l:find("^ *```") then fenced = not fenced
    elseif not fenced then
      local plain = l:gsub("``.-``", ""):gsub("`[^`]*`", "")
      for target in plain:gmatch("%]%(([^)%s]+)%)") do
        if not target:find("^%a[%w+.-]*:") then  -- http:, mailto: ...
          local path, anchor = target:match("^([^#]*)#?(.*)$")
          local full = path == "" and file or (dir ~= "" and dir .. "/" .. path or path)
          -- docs/../README.md -> README.md
          repeat local before = full; full = full:gsub("[^/]+/%.%./", "", 1) until full == before
          local body = read(full)
          local is_dir = body == nil and jobs.sh("test -d " .. q(jobs.root .. "/" .. full) .. " && echo d") ~= ""
          if body == nil and not is_dir then
            problems[#problems + 1] = ("%s:%d: link to %s: no file %s"):format(file, n, target, full)
          elseif anchor ~= "" and full:find("%.md$") and not M.anchors(body)[anchor] then
            problems[#problems + 1] = ("%s:%d: link to %s: %s has no heading with anchor #%s"):format(file, n, target, full, anchor)
          end
        end
      end
    end
  end
  return problems
end

return M
