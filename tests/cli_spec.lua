-- The ddplua program as a user runs it: arg, exit codes, options, module paths.
-- Runs build/ddplua (or $DDPLUA) through the shell from the repository root.

local shell = require "helpers.shell"
local root, ddplua, q, slurp = shell.root, shell.ddplua, shell.q, shell.slurp
local tempfile, tempdir = shell.tempfile, shell.tempdir

-- Runs `ddplua <args>` (args: already quoted shell words); returns the output
-- and the exit code.  opts.stderr: "merge" (default, 2>&1), "only" (stdout
-- dropped) or "drop"; opts.stdin: text fed to stdin; opts.env: a prefix such
-- as "LUA_PATH=..."; opts.cwd: directory to run in.
local function run(args, opts)
  opts = opts or {}
  local out = tempfile()
  local redirect = ({ merge = " >" .. q(out) .. " 2>&1",
                      only = " 2>" .. q(out) .. " >/dev/null",
                      drop = " >" .. q(out) .. " 2>/dev/null" })[opts.stderr or "merge"]
  local input = opts.stdin and (" <" .. q(tempfile(opts.stdin))) or " </dev/null"
  local cmd = (opts.cwd and ("cd " .. q(opts.cwd) .. " && ") or "")
    .. (opts.env and (opts.env .. " ") or "")
    .. q(ddplua) .. " " .. args .. input .. redirect
  local p = assert(io.popen(cmd .. "; echo $?"))
  local rc = tonumber(p:read("*a"):match("(%d+)%s*$"))
  p:close()
  return slurp(out), rc
end

describe("ddplua program", function()
  teardown(shell.cleanup)

  it("exists", function()
    assert.truthy(io.open(ddplua), "missing " .. ddplua .. " (run make)")
  end)

  it("runs OpenBLAS's AVX2 or AVX-512 kernels where the CPU has them, unless the user chose", function()
    -- Debian's OpenBLAS 0.3.21 falls back to SSE3 kernels ("Prescott") on
    -- CPUs it does not know; ddplua sets OPENBLAS_CORETYPE before it loads
    local flags = {}
    for line in io.lines("/proc/cpuinfo") do
      local f = line:match("^flags%s*:%s*(.*)")
      if f then
        for w in f:gmatch("%S+") do flags[w] = true end
        break
      end
    end
    local probe = [[-e "local ffi = require 'ffi' ffi.cdef 'char *openblas_get_corename(void);' ]]
      .. [[io.write(ffi.string(ffi.C.openblas_get_corename()):lower(), ' ', os.getenv('OPENBLAS_CORETYPE') or '-')"]]
    local out, rc = run(probe, {env = "env -u OPENBLAS_CORETYPE"})
    assert.equals(0, rc, out)
    local core = out:match("^(%S+)")
    local avx512 = flags.avx512f and flags.avx512bw and flags.avx512vl and flags.avx512dq and flags.avx512cd
    local good = {haswell = true, zen = true, skylakex = true, cooperlake = true, sapphirerapids = true,
                  excavator = true}
    if avx512 or (flags.avx2 and flags.fma) then
      assert.truthy(good[core], "OpenBLAS runs its " .. out .. " kernels on a CPU with AVX2")
    end
    -- the user's choice wins
    out, rc = run(probe, {env = "OPENBLAS_CORETYPE=Prescott"})
    assert.equals(0, rc, out)
    assert.equals("prescott Prescott", out)
    -- and -v says which
    out = run("-v")
    assert.truthy(out:find("BLAS: OpenBLAS", 1, true) and out:find("kernels: ", 1, true), out)
  end)

  it("passes the arg table and ... to the script", function()
    local s = tempfile([[
print(select("#", ...))
print(arg[-1], arg[0], arg[1], arg[2], #arg)
print(...)
]])
    local out, rc = run(q(s) .. " a 'b c'")
    assert.equals(0, rc)
    assert.equals("2\n" .. ddplua .. "\t" .. s .. "\ta\tb c\t2\na\tb c\n", out)
  end)

  it("puts the options before the script at negative indices", function()
    local s = tempfile("print(arg[-3], arg[-2], arg[-1], arg[0])")
    local out, rc = run("-e 'x=1' " .. q(s))
    assert.equals(0, rc)
    assert.equals(ddplua .. "\t-e\tx=1\t" .. s .. "\n", out)
  end)

  it("exits 0 when the script ends normally", function()
    local out, rc = run(q(tempfile("local x = 1")))
    assert.equals(0, rc)
    assert.equals("", out)
  end)

  it("exits 1 on an error, with the message and a traceback on stderr", function()
    local s = tempfile("local function f() error('boom') end\nf()\n")
    local out, rc = run(q(s), { stderr = "only" })
    assert.equals(1, rc)
    assert.truthy(out:find("ddplua: " .. s .. ":1: boom", 1, true), out)
    assert.truthy(out:find("stack traceback:", 1, true), out)
    assert.truthy(out:find("in function 'f'", 1, true), out)
  end)

  it("prints error values that are not strings", function()
    local out, rc = run([[-e 'error(setmetatable({}, {__tostring = function() return "custom error" end}))']])
    assert.equals(1, rc)
    assert.truthy(out:find("ddplua: custom error\nstack traceback:", 1, true), out)
    out, rc = run([[-e 'error({})']])
    assert.equals(1, rc)
    assert.truthy(out:find("ddplua: (error object is a table value)", 1, true), out)
  end)

  it("exits 1 without a word on error() with no value, as luajit does", function()
    -- busted ends a failing run so on Lua 5.1, after its own report
    local out, rc = run([[-e 'error()']])
    assert.equals(1, rc)
    assert.equals("", out)
    out, rc = run([[-e 'print("before"); error(nil)']])
    assert.equals(1, rc)
    assert.equals("before\n", out)
  end)

  it("exits with the code given to os.exit", function()
    local _, rc = run(q(tempfile("os.exit(3)")))
    assert.equals(3, rc)
    _, rc = run("-e 'os.exit(true)'")
    assert.equals(0, rc)
    _, rc = run("-e 'os.exit(false)'")
    assert.equals(1, rc)
  end)

  it("runs -e chunks in order, then the script", function()
    local s = tempfile("print('script', x)")
    local out, rc = run("-e 'x = 1' -e 'x = x * 10' -e 'print(x)' " .. q(s))
    assert.equals(0, rc)
    assert.equals("10\nscript\t10\n", out)
  end)

  it("reports an error in -e and stops", function()
    local out, rc = run("-e 'error(\"bad\")' -e 'print(\"not reached\")'")
    assert.equals(1, rc)
    assert.truthy(out:find("ddplua: (command line):1: bad", 1, true), out)
    assert.falsy(out:find("not reached", 1, true))
  end)

  it("requires -l modules into globals, in order with -e", function()
    local dir = tempdir()
    local f = assert(io.open(dir .. "/clitestmod.lua", "w"))
    f:write("return { value = 42 }")
    f:close()
    local env = "LUA_PATH=" .. q(dir .. "/?.lua;;")
    local out, rc = run("-e 'print(clitestmod)' -l clitestmod -e 'print(clitestmod.value)'", { env = env })
    assert.equals(0, rc)
    assert.equals("nil\n42\n", out)
    out, rc = run("-l m=clitestmod -e 'print(m.value)'", { env = env })
    assert.equals(0, rc)
    assert.equals("42\n", out)
    out, rc = run("-l no_such_module_xyz")
    assert.equals(1, rc)
    assert.truthy(out:find("module 'no_such_module_xyz' not found", 1, true), out)
  end)

  it("prints the version with -v", function()
    local out, rc = run("-v")
    assert.equals(0, rc)
    assert.truthy(out:match("^ddplua %d+%.%d+%.%d+%S* %(LuaJIT 2%.1[^,)]*, [^)]+%)\nBLAS: [^\n]+; kernels: %S+\nconv: [^\n]+\ngemm: [^\n]+\n$"), out)
    -- Debian's luajit and OpenResty's luajit2 print the same version: -v
    -- says which runs, as a script tells them (table.clone is OpenResty's)
    local openresty = pcall(require, "table.clone")
    assert.truthy(out:find(openresty and "(LuaJIT 2.1.0-beta3, OpenResty's luajit2)"
                                     or "not OpenResty's luajit2: see docs/luajit.md", 1, true), out)
  end)

  it("prints usage with -h and --help", function()
    for _, opt in ipairs { "-h", "--help" } do
      local out, rc = run(opt, { stderr = "drop" })
      assert.equals(0, rc)
      assert.truthy(out:find("^usage: ddplua %[options%] %[script %[args%]%]"), out)
      assert.truthy(out:find("-e chunk", 1, true), out)
    end
  end)

  it("runs the script from stdin with -", function()
    local out, rc = run("- x y", { stdin = "print('from stdin', arg[0], ...)" })
    assert.equals(0, rc)
    assert.equals("from stdin\t-\tx\ty\n", out)
  end)

  it("runs stdin without arguments when stdin is not a terminal", function()
    local out, rc = run("", { stdin = "print('piped')\nos.exit(4)" })
    assert.equals(4, rc)
    assert.equals("piped\n", out)
  end)

  it("rejects an unknown option with the usage on stderr", function()
    local out, rc = run("-x", { stderr = "only" })
    assert.equals(1, rc)
    assert.truthy(out:find("ddplua: unrecognized option '-x'", 1, true), out)
    assert.truthy(out:find("usage: ddplua", 1, true), out)
    out, rc = run("-x", { stderr = "drop" })
    assert.equals(1, rc)
    assert.equals("", out)
  end)

  it("needs a value after -e", function()
    local out, rc = run("-e", { stderr = "only" })
    assert.equals(1, rc)
    assert.truthy(out:find("ddplua: '-e' needs argument", 1, true), out)
  end)

  it("says clearly that a script is missing", function()
    local out, rc = run("no_such_script_xyz.lua", { stderr = "only" })
    assert.equals(1, rc)
    assert.equals("ddplua: cannot open no_such_script_xyz.lua (No such file or directory)\n", out)
  end)

  it("passes options after the script name to the script", function()
    local s = tempfile("print(...)")
    local out, rc = run(q(s) .. " -v -e x")
    assert.equals(0, rc)
    assert.equals("-v\t-e\tx\n", out)
  end)

  it("ends options at --", function()
    local s = tempfile("print(...)")
    local out, rc = run("-- " .. q(s) .. " -h")
    assert.equals(0, rc)
    assert.equals("-h\n", out)
  end)

  it("honours LUA_PATH, keeping ;; for the defaults", function()
    local dir = tempdir()
    local f = assert(io.open(dir .. "/clipathmod.lua", "w"))
    f:write("return 'found via LUA_PATH'")
    f:close()
    local out, rc = run([[-e 'print(require "clipathmod")' -e 'print(package.path)']],
                        { env = "LUA_PATH=" .. q(dir .. "/?.lua;;"), cwd = "/tmp" })
    assert.equals(0, rc)
    local first, path = out:match("^(.-)\n(.-)\n$")
    assert.equals("found via LUA_PATH", first)
    local ours = path:find(root .. "/lua/?.lua", 1, true)
    local theirs = path:find(dir .. "/?.lua", 1, true)
    assert.truthy(ours, path)
    assert.truthy(theirs, path)
    assert.truthy(ours < theirs, "our paths come first: " .. path)
    assert.truthy(path:find("./?.lua", 1, true), ";; expands to the defaults: " .. path)
  end)

  it("finds the ddplua Lua dirs relative to the executable", function()
    local out, rc = run([[-e 'print(package.path)' -e 'local p = package.loaded["ddp.program"]; print(p.exe, p.root)']],
                        { cwd = "/tmp" })
    assert.equals(0, rc)
    assert.truthy(out:find(root .. "/lua/?/init.lua", 1, true), out)
    assert.truthy(out:find(root .. "/bindings/?.lua", 1, true), out)
    assert.truthy(out:find("\n" .. ddplua .. "\t" .. root .. "\n", 1, true), out)
  end)

  it("finds the Lua files of an install (PREFIX/share/ddplua/lua)", function()
    local prefix = tempdir()
    assert(os.execute("mkdir -p " .. q(prefix .. "/bin") .. " " .. q(prefix .. "/lib") .. " "
                      .. q(prefix .. "/share/ddplua/lua/instpkg")))
    assert(os.execute("cp " .. q(ddplua) .. " " .. q(prefix .. "/bin/ddplua") .. " && cp "
                      .. q(root .. "/build/libddplua.so") .. " " .. q(prefix .. "/lib/")))
    local f = assert(io.open(prefix .. "/share/ddplua/lua/instpkg/init.lua", "w"))
    f:write("return 'installed'")
    f:close()
    local p = assert(io.popen("cd /tmp && " .. q(prefix .. "/bin/ddplua")
                              .. [[ -e 'print(require "instpkg")' 2>&1]]))
    local out = p:read("*a")
    p:close()
    assert.equals("installed\n", out)
  end)

  it("exposes the runtime to ffi.C", function()
    local out, rc = run([[-e 'local ffi = require "ffi"; ffi.cdef "const char *dl_version(void);"; io.write(ffi.string(ffi.C.dl_version()))']])
    assert.equals(0, rc)
    assert.truthy(out:match("^%d+%.%d+"), out)
  end)

  it("adds no globals but arg", function()
    local code = [[-e 'local k = {} for n in pairs(_G) do k[#k + 1] = n end table.sort(k) print(table.concat(k, " "))']]
    local ours = run(code)
    local p = assert(io.popen("luajit " .. code .. " 2>&1"))
    local theirs = p:read("*a")
    p:close()
    assert.equals(theirs, ours)
  end)

  -- Under `ulimit -v 192 MiB` every ddplua process spun forever: OpenBLAS
  -- retries the 128 MiB buffer of each of its threads without end (and
  -- its exit handler waits for them).  Too little is refused by name; a
  -- limit with room runs, OpenBLAS's threads fitted into it.
  it("refuses an address-space limit too small for OpenBLAS, and runs under one with room", function()
    local t0 = os.time()
    local out, rc = run("-e 'print(1)'", { env = "ulimit -v 196608;" })
    assert.equals(1, rc, out)
    assert.matches("ddplua: the address%-space limit %(ulimit %-v%) is 192 MiB; ddplua needs at least 288 MiB", out)
    assert.truthy(os.time() - t0 < 10)
    local s = tempfile("local ddp = require 'ddp'\nddp.init()\n"
                       .. "local x = ddp.randn(512, 512):matmul(ddp.randn(512, 512))\nddp.all_reduce(x)\n"
                       .. "print('ok', ddp.rank())\n")
    out, rc = run("--nproc 2 " .. q(s), { env = "ulimit -v 307200; timeout 60" })
    assert.equals(0, rc, out)
    assert.matches("%[0%] ok\t0", out)
    assert.matches("%[1%] ok\t1", out)
  end)

  -- Under a small process limit (ulimit -u counts threads) the launcher
  -- names the limit where a worker or the store's thread cannot start.
  -- (root is not held to it: the spec runs the job as nobody.)
  it("names the process limit when a worker or a thread cannot start", function()
    if shell.sh("id -u"):match("%d+") ~= "0" or shell.sh("command -v setpriv || true") == "" then
      pending("needs root and setpriv to run the job as another user")
      return
    end
    local bin = ddplua:sub(1, 1) == "/" and ddplua or root .. "/" .. ddplua
    if not shell.sh("setpriv --reuid=65534 --regid=65534 --clear-groups test -x " .. q(bin)
                    .. " && echo yes || true"):find("yes") then
      pending("user nobody cannot reach " .. bin .. " (a private directory above it)")
      return
    end
    local function as_nobody(limit)
      return shell.sh("timeout 30 setpriv --reuid=65534 --regid=65534 --clear-groups bash -c "
                      .. q("ulimit -u " .. limit .. "; exec " .. q(bin) .. " --nproc 2 -e 'print(1)'")
                      .. " 2>&1; echo rc=$?")
    end
    local out = as_nobody(2)
    assert.matches("cannot serve the rendezvous store on 127%.0%.0%.1: .*Resource temporarily unavailable "
                   .. "%(its thread: the user's process and thread limit, ulimit %-u, is reached; raise it%)", out)
    out = as_nobody(4)
    assert.matches("cannot start rank %d: Resource temporarily unavailable; the user's process and thread "
                   .. "limit %(ulimit %-u 4%) counts every thread", out)
    assert.matches("rc=1%d%d", out)
  end)

  it("runs require 'ddp' from any directory", function()
    local s = tempfile("local ddp = require 'ddp'\nprint(type(ddp))\n")
    local out, rc = run(q(s), { cwd = "/tmp" })
    assert.equals(0, rc)
    assert.equals("table\n", out)
  end)
end)

-- `busted --lua=ddplua`, the way users run their specs: busted's own report
-- and exit code, nothing from ddplua (busted ends a failing run with error()).
describe("busted through ddplua", function()
  teardown(shell.cleanup)

  -- Runs busted on a spec file holding body, in its own directory; returns
  -- stdout, stderr and the exit code.
  local function busted(body)
    local dir = tempdir()
    shell.writefile(dir .. "/x_spec.lua", body)
    local out, err = tempfile(), tempfile()
    local p = assert(io.popen("cd " .. q(dir) .. " && busted --lua=" .. q(ddplua) .. " -o plainTerminal x_spec.lua"
                              .. " </dev/null >" .. q(out) .. " 2>" .. q(err) .. "; echo $?"))
    local rc = tonumber(p:read("*a"):match("(%d+)%s*$"))
    p:close()
    return slurp(out), slurp(err), rc
  end

  it("exits 0 when every test passes", function()
    local out, err, rc = busted([[
describe("d", function() it("passes", function() assert.equals(2, require("ddp").ones(2):sum():item()) end) end)]])
    assert.equals(0, rc, out .. err)
    assert.truthy(out:find("1 success / 0 failures / 0 errors", 1, true), out)
    assert.equals("", err)
  end)

  it("exits 1 on a failure or an error, with busted's report only", function()
    for _, body in ipairs {
      [[describe("d", function() it("fails", function() assert.equals(1, 2) end) end)]],
      [[describe("d", function() it("errs", function() error("boom") end) end)]],
      [[this is not Lua]],
    } do
      local out, err, rc = busted(body)
      assert.equals(1, rc, body .. "\n" .. out .. err)
      assert.falsy((out .. err):find("ddplua:", 1, true), out .. err)
      assert.falsy((out .. err):find("stack traceback", 1, true), out .. err)
      assert.truthy(out:find("0 success", 1, true), out)
    end
  end)
end)
