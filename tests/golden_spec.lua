-- Golden values: every tensor op against PyTorch.  tests/golden/make.py
-- (run with Debian's python3 and torch 1.13) writes tests/golden/cases.lua;
-- each case names its inputs, a Lua expression over them and PyTorch's
-- outputs with the tolerance allowed.  One `it` per case.
local ddp = require "ddp"

local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local cases = dofile(here .. "golden/cases.lua")

local unpack = unpack or table.unpack

local golden = require "helpers.golden"
local build, compare = golden.build, golden.compare

-- Results: several return values, or one Lua table of tensors (split).
local function results(...)
  local r = { ... }
  if select("#", ...) == 1 and type(r[1]) == "table" then r = r[1] end
  return r
end

local function run(case)
  local env = setmetatable({ ddp = ddp, math = math, unpack = unpack }, { __index = _G })
  for name, spec in pairs(case.inputs) do env[name] = build(spec) end
  local f = assert(load("return " .. case.lua, "=" .. case.name, "t", env))
  if setfenv then setfenv(f, env) end
  local outs = results(f())
  if #outs ~= #case.outputs then
    return ("%d results, expected %d"):format(#outs, #case.outputs)
  end
  for k, want in ipairs(case.outputs) do
    local why = compare(outs[k], want, case.rtol, case.atol)
    if why then
      return (#case.outputs > 1 and ("result %d: "):format(k) or "") .. why
    end
  end
end

describe("golden values against PyTorch", function()
  for _, case in ipairs(cases) do
    it(case.name, function()
      local why = run(case)
      if why then
        error(("%s\n  lua:   %s\n  torch: %s"):format(why, case.lua, case.torch), 0)
      end
    end)
  end
end)
