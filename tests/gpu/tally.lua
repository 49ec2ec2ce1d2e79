-- tests/gpu/tally.lua: the pass/fail count of the GPU scripts that run as
-- plain ddplua programs (cuda_tensors.lua, h2d_overlap.lua), whose last
-- line tests/gpu/check.sh reads as a row: "NAME: N passed, M failed".
--   local t = dofile(dir .. "/tally.lua")(NAME)
--   t.check(cond, what); t.try(what, fn); t.report()
return function(name)
  local t = { passed = 0, failed = 0 }
  function t.check(cond, what)
    if cond then t.passed = t.passed + 1 else t.failed = t.failed + 1 print("FAIL " .. what) end
  end
  function t.try(what, fn)
    local ok, err = pcall(fn)
    if not ok then t.failed = t.failed + 1 print("FAIL " .. what .. ": " .. tostring(err)) end
  end
  function t.report()
    print(("%s: %d passed, %d failed"):format(name, t.passed, t.failed))
    return t.failed
  end
  return t
end
