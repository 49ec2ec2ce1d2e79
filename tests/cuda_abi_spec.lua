-- The CUDA library is found through one versioned table (runtime/cuda/dlc.h,
-- dlc_api_get): a library of another build, or one without the table, is
-- refused when it is loaded, with a status that says so, and every CUDA
-- call then fails with that message instead of calling into it.
local shell = require "helpers.shell"
local q = shell.q

local function status_with(lib)
  local cmd = "DDPLUA_CUDA_EMU=1 DDPLUA_CUDA_LIB=" .. q(lib) .. " " .. q(shell.ddplua)
    .. [[ -e 'local ddp = require "ddp"; print(ddp.cuda.device_count()); print(ddp.cuda.status());]]
    .. [[ print(select(2, pcall(ddp.zeros, 2, {device = "cuda"})))' 2>&1]]
  return shell.sh(cmd)
end

describe("the CUDA library's launcher table", function()
  it("is refused from a library of another build", function()
    local out = status_with(shell.root .. "/build/tests/libdlc_badabi.so")
    assert.truthy(out:match("^0\n"), out)
    assert.truthy(out:find("is of another build (launcher ABI 999", 1, true), out)
    assert.truthy(out:find("rebuild it with make", 1, true), out)
  end)

  it("is refused from a library without one", function()
    local out = status_with(shell.root .. "/build/tests/libddplua_testhooks.so")
    assert.truthy(out:match("^0\n"), out)
    assert.truthy(out:find("lacks dlc_api_get", 1, true), out)
  end)

  it("is taken from the emulator this build made", function()
    local out = status_with(shell.root .. "/build/libddplua_cudaemu.so")
    assert.truthy(out:match("^1\n"), out)
    assert.truthy(out:find("emulated CUDA device", 1, true), out)
  end)
end)
