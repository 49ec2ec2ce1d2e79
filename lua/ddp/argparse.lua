-- ddp.argparse: command-line flags from a table of defaults, with the
-- types taken from the defaults.  Booleans parse as people mean them
-- (--flag, --flag false, --flag=False, --no-flag), never as Python's
-- type=bool, which turns "False" into True.  A mistake (an unknown flag, a
-- stray word, a bad value) prints the usage and "<prog>: error: ..." to
-- stderr and exits 2, as Python's argparse does, once per job: only rank 0
-- prints.
--
--   local args = ddp.argparse({epochs = 3, lr = 1e-3, model = "mlp", resume = false}, arg,
--                             {help = {model = "mlp or cnn"}, positional = {"data_dir"}})
local core = require "ddp.core"
local ffi = core.ffi

core.add_lib_file(debug.getinfo(1, "S").source)

local booleans = { ["true"] = true, ["1"] = true, yes = true, on = true,
                   ["false"] = false, ["0"] = false, no = false, off = false }

local function flag_name(k) return "--" .. k:gsub("_", "-") end

local function sorted_keys(defaults)
  local names = {}
  for k in pairs(defaults) do names[#names + 1] = k end
  table.sort(names)
  return names
end

local function value_name(v)
  return type(v) == "boolean" and "" or (" " .. type(v):upper())
end

-- "usage: prog [-h] [--epochs NUMBER] ... name", wrapped as Python wraps it.
local function usage_line(defaults, opts, prog)
  local words = { "[-h]" }
  for _, k in ipairs(sorted_keys(defaults)) do
    words[#words + 1] = "[" .. flag_name(k) .. value_name(defaults[k]) .. "]"
  end
  for _, name in ipairs(opts.positional or {}) do words[#words + 1] = name end
  if opts.allow_positional then words[#words + 1] = "[args ...]" end
  local head = "usage: " .. prog .. " "
  local indent = (" "):rep(#head < 40 and #head or 8)
  local lines, line = {}, head
  for i, w in ipairs(words) do
    if i > 1 and #line + 1 + #w > 78 then
      lines[#lines + 1] = line
      line = indent .. w
    else
      line = line .. (i > 1 and " " or "") .. w
    end
  end
  lines[#lines + 1] = line
  return table.concat(lines, "\n")
end

local function help_text(defaults, opts, prog)
  local lines = { usage_line(defaults, opts, prog) }
  if opts.positional and #opts.positional > 0 then
    lines[#lines + 1] = "positional arguments:"
    for _, name in ipairs(opts.positional) do
      lines[#lines + 1] = ("  %-26s %s"):format(name, opts.help and opts.help[name] or "")
    end
  end
  lines[#lines + 1] = "options:"
  lines[#lines + 1] = ("  %-26s %s"):format("-h, --help", "show this help and exit")
  for _, k in ipairs(sorted_keys(defaults)) do
    local v = defaults[k]
    local help = opts.help and opts.help[k]
    help = (help and help .. " " or "") .. "(default: " .. tostring(v) .. ")"
    lines[#lines + 1] = ("  %-26s %s"):format(flag_name(k) .. value_name(v), help)
  end
  return table.concat(lines, "\n")
end

local function is_rank0()
  local r = os.getenv("RANK")
  return r == nil or r == "" or r == "0"
end

-- Every rank of a job parses the same argv and fails alike; rank 0 alone
-- prints.  The others wait before exiting so that rank 0 is the rank the
-- launcher sees fail first: it then stops them and reports rank 0's status
-- and output, rather than stopping rank 0 before it could print.
local function exit_quietly(status)
  local world = tonumber(os.getenv("WORLD_SIZE") or "1") or 1
  if world > 1 and not is_rank0() then
    pcall(ffi.cdef, "int poll(void *fds, unsigned long nfds, int timeout);")
    pcall(function() ffi.C.poll(nil, 0, 5000) end)
  end
  os.exit(status)
end

-- Returns a table with every key of defaults, overridden by argv (a list
-- such as the script's arg; argv[0], the script, names the program).
-- opts: help = {key = text}; program = "ddplua train.lua";
-- positional = {"name", ...}: these positional arguments are required and
-- set args.name (and args._positional, the list); allow_positional = true:
-- any number of positional arguments, in args._positional; otherwise a
-- positional argument is an error.  exit_on_error = false: a mistake raises
-- a Lua error (with the usage) instead of printing it and exiting 2.
-- --help / -h prints the help on rank 0 and exits 0 on every rank.
return function(defaults, argv, opts)
  opts = opts or {}
  if type(defaults) ~= "table" then core.raise("argparse: expected a table of defaults") end
  if type(opts) ~= "table" then core.raise("argparse: options must be a table, got " .. core.describe(opts)) end
  argv = argv or {}
  local declared = opts.positional
  if declared ~= nil then
    if type(declared) ~= "table" then core.raise("argparse: positional must be a list of names") end
    for _, name in ipairs(declared) do
      if type(name) ~= "string" or defaults[name] ~= nil then
        core.raise(("argparse: positional name %s must be a string and not also a flag"):format(core.show(name)))
      end
    end
  end
  local prog = opts.program or ("ddplua " .. (type(argv[0]) == "string" and argv[0] or "script.lua"))
  local function fail(msg)
    if opts.exit_on_error == false then
      core.raise("argparse: " .. msg .. "\n" .. usage_line(defaults, opts, prog))
    end
    if is_rank0() then
      io.stdout:flush()
      io.stderr:write(usage_line(defaults, opts, prog), "\n", prog, ": error: ", msg, "\n")
      io.stderr:flush()
    end
    exit_quietly(2)
  end

  local args, positional = {}, {}
  for k, v in pairs(defaults) do args[k] = v end
  local by_flag = {}
  for k in pairs(defaults) do by_flag[k:gsub("-", "_")] = k end
  local i, options_done = 1, false
  while i <= #argv do
    local a = argv[i]
    if type(a) ~= "string" then
      core.raise(("argparse: argument %d is a %s, expected a string"):format(i, core.describe(a)))
    end
    local name, value
    if options_done then
      positional[#positional + 1] = a
    elseif a == "--" then
      options_done = true  -- what follows is positional, even "--x"
    elseif a == "--help" or a == "-h" then
      if is_rank0() then
        print(help_text(defaults, opts, prog))
        io.stdout:flush()
      end
      os.exit(0)
    else
      name, value = a:match("^%-%-([^=]+)=(.*)$")
      if not name then name = a:match("^%-%-(.+)$") end
      if not name then
        if a:match("^%-.") and not tonumber(a) then fail(("unknown option %s"):format(a)) end
        positional[#positional + 1] = a
      end
    end
    if name then
      local key = by_flag[name:gsub("-", "_")]
      local negated = false
      if not key and name:match("^no%-") then
        key = by_flag[name:sub(4):gsub("-", "_")]
        negated = key ~= nil and type(defaults[key]) == "boolean"
        if not negated then key = nil end
      end
      if not key then fail(("unknown option --%s"):format(name)) end
      local kind = type(defaults[key])
      if kind == "boolean" then
        if negated then
          if value then fail(("--no-%s takes no value"):format(name:sub(4))) end
          args[key] = false
        elseif value then
          local b = booleans[value:lower()]
          if b == nil then fail(("--%s expects true or false, got %q"):format(name, value)) end
          args[key] = b
        else
          -- "--flag False" is false: a boolean word after the flag is its
          -- value; anything else leaves the flag alone, meaning true
          local nxt, b = argv[i + 1], nil
          if type(nxt) == "string" then b = booleans[nxt:lower()] end
          if b ~= nil then i = i + 1 else b = true end
          args[key] = b
        end
      else
        if not value then
          i = i + 1
          value = argv[i]
          if value == nil then fail(("--%s expects a %s value"):format(name, kind)) end
        end
        if kind == "number" then
          local n = tonumber(value)
          if not n then fail(("--%s expects a number, got %q"):format(name, value)) end
          args[key] = n
        else
          args[key] = value
        end
      end
    end
    i = i + 1
  end

  if declared then
    if #positional < #declared then
      local missing = {}
      for k = #positional + 1, #declared do missing[#missing + 1] = declared[k] end
      fail("the following arguments are required: " .. table.concat(missing, ", "))
    end
    for k, name in ipairs(declared) do args[name] = positional[k] end
  end
  local allowed = declared and #declared or 0
  if not opts.allow_positional and #positional > allowed then
    local extra = {}
    for k = allowed + 1, #positional do extra[#extra + 1] = positional[k] end
    fail("unrecognized arguments: " .. table.concat(extra, " ")
         .. (allowed == 0 and " (this script takes no positional arguments)" or ""))
  end
  args._positional = positional
  return args
end
