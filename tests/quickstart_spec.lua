-- The README's quick start as a user follows it: examples/quickstart.lua on
-- one process and on 2 ranks, and `make install PREFIX=...` giving a
-- ddplua that runs a job from anywhere.
local shell = require "helpers.shell"
local jobs = require "helpers.jobs"
local q = shell.q

describe("the quick start", function()
  after_each(jobs.no_strays)
  teardown(shell.cleanup)

  local function losses(out)
    local t = {}
    for e, l in out:gmatch("epoch (%d+): loss ([%d%.]+)") do t[tonumber(e)] = tonumber(l) end
    return t
  end

  it("trains on one process and on 2 ranks, printing and saving once", function()
    local out, err, rc = jobs.run("examples/quickstart.lua")
    assert.equals(0, rc, err)
    local l = losses(out)
    assert.equals(3, #l, out)
    assert.truthy(l[3] < l[1] * 0.5, out)
    local ckpt = shell.tempname()
    os.remove(ckpt)
    out, err, rc = jobs.run("--nproc 2 examples/quickstart.lua --save " .. q(ckpt))
    assert.equals(0, rc, err)
    l = losses(out)
    assert.equals(3, #l, out)
    local _, lines = out:gsub("\n", "")
    assert.equals(3, lines, out)                 -- rank 0 alone prints
    assert.falsy(out:find("[1]", 1, true), out)
    assert.truthy(l[3] < l[1], out)
    assert.truthy(shell.exists(ckpt), "no checkpoint written")
    os.remove(ckpt)
  end)

  it("installs with make install PREFIX=... and runs a job from elsewhere", function()
    local prefix = shell.tempdir()
    local log = shell.sh("make -s --no-print-directory install PREFIX=" .. q(prefix) .. " 2>&1; echo rc=$?")
    assert.truthy(log:find("rc=0", 1, true), log)
    local exe = prefix .. "/bin/ddplua"
    assert.truthy(shell.exists(exe), log)
    local out = shell.sh("cd / && " .. jobs.CLEAN .. "timeout 60 " .. q(exe) .. " --nproc 2 -e "
      .. q('local ddp = require "ddp"; ddp.init(); local t = ddp.ones(1); ddp.all_reduce(t); ddp.print("sum " .. t:item())')
      .. " 2>&1; echo rc=$?")
    assert.truthy(out:find("[0] sum 2", 1, true), out)
    assert.truthy(out:find("rc=0", 1, true), out)
    -- the installed modules, not the build tree's
    out = shell.sh("cd / && " .. q(exe) .. " -e " .. q('print(package.searchpath("ddp", package.path))') .. " 2>&1")
    assert.truthy(out:find(prefix .. "/share/ddplua/lua/ddp/init.lua", 1, true), out)
    shell.sh("rm -rf " .. q(prefix))
  end)

  it("make install replaces an earlier install's Lua files (a module that moved into a folder leaves none behind)", function()
    local prefix = shell.tempdir()
    -- as an install from before lua/ddp/nn.lua became lua/ddp/nn/init.lua
    shell.sh("mkdir -p " .. q(prefix .. "/share/ddplua/lua/ddp"))
    shell.writefile(prefix .. "/share/ddplua/lua/ddp/nn.lua", 'return { old = true }\n')
    local log = shell.sh("make -s --no-print-directory install PREFIX=" .. q(prefix) .. " 2>&1; echo rc=$?")
    assert.truthy(log:find("rc=0", 1, true), log)
    local out = shell.sh("cd / && " .. q(prefix .. "/bin/ddplua") .. " -e "
      .. q('local nn = require "ddp.nn"; print(nn.old, nn.SyncBatchNorm)') .. " 2>&1")
    assert.equals("nil\tSyncBatchNorm\n", out)
    shell.sh("rm -rf " .. q(prefix))
  end)
end)
