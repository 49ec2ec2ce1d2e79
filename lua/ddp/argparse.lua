-- ddp.argparse: command-line flags from a table of defaults, with the
-- types taken from the defaults.  Booleans parse as people mean them
-- (--flag, --no-flag, --flag=false), never as Python's type=bool, which
-- turns "False" into True.
--
--   local args = ddp.argparse({epochs = 3, lr = 1e-3, model = "mlp", resume = false}, arg,
--                             {help = {model = "mlp or cnn"}})
local core = require "ddp.core"

core.add_lib_file(debug.getinfo(1, "S").source)

local booleans = { ["true"] = true, ["1"] = true, yes = true, on = true,
                   ["false"] = false, ["0"] = false, no = false, off = false }

local function flag_name(k) return "--" .. k:gsub("_", "-") end

local function usage(defaults, opts)
  local names = {}
  for k in pairs(defaults) do names[#names + 1] = k end
  table.sort(names)
  local lines = { "usage: " .. (opts.program or "ddplua script.lua") .. " [options]", "options:" }
  for _, k in ipairs(names) do
    local v = defaults[k]
    local kind = type(v) == "boolean" and "" or (" " .. type(v):upper())
    local help = opts.help and opts.help[k] or ""
    lines[#lines + 1] = ("  %-26s %s (default: %s)"):format(flag_name(k) .. kind, help, tostring(v))
  end
  return table.concat(lines, "\n")
end

-- Returns a table with every key of defaults, overridden by argv (a list
-- such as the script's arg).  Errors name the flag and what was expected;
-- --help prints the usage and exits 0.  Positional arguments are returned
-- in args._positional.
return function(defaults, argv, opts)
  opts = opts or {}
  if type(defaults) ~= "table" then core.raise("argparse: expected a table of defaults") end
  local args, positional = {}, {}
  for k, v in pairs(defaults) do args[k] = v end
  local by_flag = {}
  for k in pairs(defaults) do by_flag[k:gsub("-", "_")] = k end
  local function fail(msg)
    error(msg .. "\n" .. usage(defaults, opts), 0)
  end
  local i = 1
  argv = argv or {}
  while i <= #argv do
    local a = argv[i]
    if a == "--help" or a == "-h" then
      print(usage(defaults, opts))
      os.exit(0)
    end
    local name, value = a:match("^%-%-([^=]+)=(.*)$")
    if not name then name = a:match("^%-%-(.+)$") end
    if not name then
      positional[#positional + 1] = a
    else
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
          args[key] = true
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
  args._positional = positional
  return args
end
