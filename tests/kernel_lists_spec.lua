-- Each kernel signature written once: the device kernels' list
-- (runtime/core/device_slots.h), from which dl_device, the cpu_*/cuda_*
-- prototypes and both tables are made, and the CUDA launcher table that
-- scripts/gen_dlc_api.sh generates from the launchers' definitions.
local shell = require "helpers.shell"
local q, sh = shell.q, shell.sh

local GEN = shell.root .. "/scripts/gen_dlc_api.sh"

-- Runs the generator on kernel files {name = text}; returns its output,
-- exit code, and the two headers it wrote (nil when it failed).
local function generate(files, not_emulated, untraced)
  local dir = shell.tempdir()
  local paths = {}
  local names = {}
  for name in pairs(files) do names[#names + 1] = name end
  table.sort(names)
  for _, name in ipairs(names) do
    shell.writefile(dir .. "/" .. name, files[name])
    paths[#paths + 1] = q(dir .. "/" .. name)
  end
  local skip = not_emulated and ("--not-emulated " .. q(dir .. "/" .. not_emulated) .. " ") or ""
  if untraced then skip = skip .. "--untraced " .. q(dir .. "/" .. untraced) .. " " end
  local out = sh("bash " .. q(GEN) .. " " .. q(dir .. "/gen") .. " " .. skip .. "-- "
                 .. table.concat(paths, " ") .. " 2>&1; echo rc=$?")
  return out, tonumber(out:match("rc=(%d+)")), shell.slurp(dir .. "/gen/dlc_api.h"),
         shell.slurp(dir .. "/gen/dlc_table.h")
end

local A = [[
/* y = x + 1 */
DLC_API int dlc_inc(int device, const float *x,
                    float *y, int64_t n) {
  return 0;
}
DLC_API const char *dlc_name(void) { return "a"; }
]]
local B = "DLC_API int dlc_peer(void *c, int rank) { return 0; }\n"

-- Compiles a C file against the runtime's headers; returns the compiler's
-- output and whether it succeeded.
local function compile(text)
  local src = shell.tempname() .. ".c"
  shell.track(src)
  shell.writefile(src, text)
  local out = sh("cc -std=c11 -Wall -Wextra -Werror -D_GNU_SOURCE -fsyntax-only -I"
                 .. q(shell.root .. "/runtime/include") .. " -I" .. q(shell.root .. "/runtime")
                 .. " " .. q(src) .. " 2>&1; echo rc=$?")
  return out, out:match("rc=0") ~= nil
end

describe("scripts/gen_dlc_api.sh", function()
  teardown(shell.cleanup)

  it("makes one member per launcher, grouped by file, and a table of designated initializers", function()
    local out, rc, api, tab = generate({ ["a.cu"] = A, ["b.cu"] = B })
    assert.equal(0, rc, out)
    assert.truthy(api:find("  /* a.cu */\n  int (*inc)(int device, const float *x, float *y, int64_t n);\n"
                           .. "  const char *(*name)(void);\n  /* b.cu */\n  int (*peer)(void *c, int rank);\n", 1, true), api)
    assert.truthy(api:find("#define DLC_ABI_VERSION %d+u"), api)
    assert.truthy(tab:find('extern "C" int dlc_inc(int device, const float *x, float *y, int64_t n);', 1, true), tab)
    -- inc takes a device: a traced trampoline; name and peer do not
    assert.truthy(tab:find("  .inc = dlc_traced_inc,\n  .name = dlc_name,\n  .peer = dlc_peer,\n", 1, true), tab)
  end)

  it("puts each launcher taking a device behind a trampoline that times it while a trace is on", function()
    local out, rc, _, tab = generate({ ["a.cu"] = A, ["b.cu"] = B })
    assert.equal(0, rc, out)
    assert.truthy(tab:find("static int dlc_traced_inc(int device, const float *x, float *y, int64_t n) {\n"
      .. "  if (!dlc_tr_on()) return dlc_inc(device, x, y, n);\n"
      .. "  long long span_ = dlc_tr_begin(device, DLC_TR_COMPUTE, dlc_stream(device), \"inc\");\n"
      .. "  int rc_ = dlc_inc(device, x, y, n);\n"
      .. "  dlc_tr_end(span_, dlc_stream(device));\n  return rc_;\n}\n", 1, true), tab)
    -- a file named after --untraced keeps its launchers as they are
    out, rc, _, tab = generate({ ["a.cu"] = A, ["b.cu"] = B }, nil, "a.cu")
    assert.equal(0, rc, out)
    assert.truthy(tab:find("  .inc = dlc_inc,\n", 1, true), tab)
    assert.falsy(tab:find("dlc_traced_", 1, true), tab)
  end)

  it("changes the ABI version when any signature changes, and not for a body", function()
    local _, _, api1 = generate({ ["a.cu"] = A })
    local _, _, api2 = generate({ ["a.cu"] = A:gsub("return 0;", "return 1;", 1) })
    local _, _, api3 = generate({ ["a.cu"] = A:gsub("int64_t n", "int n") })
    local v = function(s) return s:match("DLC_ABI_VERSION (%d+)u") end
    assert.equal(v(api1), v(api2))
    assert.are_not.equal(v(api1), v(api3))
  end)

  it("leaves the launchers of files not emulated NULL in the emulator's build", function()
    local out, rc, _, tab = generate({ ["a.cu"] = A, ["b.cu"] = B }, "b.cu")
    assert.equal(0, rc, out)
    assert.truthy(tab:find("#ifndef DLC_EMU\n  .peer = dlc_peer,\n#else\n  .peer = nullptr,\n#endif\n", 1, true), tab)
    assert.truthy(tab:find("  .inc = dlc_traced_inc,\n", 1, true), tab)
  end)

  it("refuses a definition it cannot read, naming the file and line, and a launcher defined twice", function()
    local out, rc = generate({ ["a.cu"] = "\n\nDLC_API int broken {\n" })
    assert.equal(1, rc, out)
    assert.truthy(out:find("a.cu:3: cannot read this DLC_API definition", 1, true), out)
    out, rc = generate({ ["a.cu"] = A, ["b.cu"] = "DLC_API int dlc_inc(void) { return 0; }\n" })
    assert.equal(1, rc, out)
    assert.truthy(out:find("launchers defined twice: inc", 1, true), out)
  end)

  it("gives the build's table every launcher the kernel files define", function()
    local defs = sh("cat " .. q(shell.root) .. "/runtime/cuda/kernels/*.cu | grep -c '^DLC_API '")
    local api = assert(shell.slurp(shell.root .. "/build/gen/dlc_api.h"), "build/gen/dlc_api.h: build first")
    local _, members = api:gsub("%(%*[%w_]+%)%(", "")
    assert.equal(tonumber(defs), members)
  end)
end)

describe("runtime/core/device_slots.h", function()
  teardown(shell.cleanup)

  it("gives dl_device one member per slot and the two tables every kernel", function()
    local list = assert(shell.slurp(shell.root .. "/runtime/core/device_slots.h"))
    local n = select(2, list:gsub("\nDL_SLOT%(", ""))
    assert.is_true(n > 40, n)
    local out, ok = compile([[
#include "core/device.h"
/* the name, three int flags (padded to a pointer), then a pointer a slot */
_Static_assert(sizeof(dl_device) == (sizeof(const char *) + 3 * sizeof(int) + sizeof(void *) - 1)
               / sizeof(void *) * sizeof(void *) + ]] .. n
      .. [[ * sizeof(void (*)(void)), "one member per slot");
]])
    assert.is_true(ok, out)
  end)

  it("refuses a kernel whose signature differs from its slot at compile time", function()
    local out, ok = compile([[
#include "core/device.h"
DL_HIDDEN int cpu_softmax(const char *op, const dl_tensor *x, dl_tensor *y, int64_t outer,
                          int64_t n, int64_t inner) { return 0; }
]])
    assert.is_false(ok, out)
    assert.truthy(out:find("conflicting types for", 1, true) and out:find("cpu_softmax", 1, true), out)
  end)

  it("refuses an op passing a value of another enum to a typed slot", function()
    local out, ok = compile([[
#include "core/device.h"
int f(const dl_device *d, dl_tensor *const *ops) { return d->binary("add", DL_SUM, DL_FLOAT32, ops); }
]])
    assert.is_false(ok, out)
    assert.truthy(out:find("enum%-conversion") or out:find("implicit conversion"), out)
  end)
end)
