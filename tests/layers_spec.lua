-- scripts/check-layers.sh, the runtime's layering check (run on the real
-- tree by scripts/run-tests.sh): here on small trees of its own, built
-- with cc, each with one kind of violation it must name, and a clean one.
local shell = require "helpers.shell"
local q, sh = shell.q, shell.sh

local ORDER = "Layers, bottom up: core ops nn autograd io [cpu cuda] dist\n"

-- A tree ROOT/runtime/<layer>/<file> from files {path = text}, its objects
-- in ROOT/obj/<layer>/, and the check's output and exit code.
local function check(files, order)
  local root = shell.tempdir()
  sh("mkdir -p " .. q(root .. "/docs"))
  shell.writefile(root .. "/docs/architecture.md", "# Architecture\n\n" .. (order or ORDER))
  for path, text in pairs(files) do
    local dir = path:match("^(.*)/")
    sh("mkdir -p " .. q(root .. "/runtime/" .. dir) .. " " .. q(root .. "/obj/" .. dir))
    shell.writefile(root .. "/runtime/" .. path, text)
  end
  for path in pairs(files) do
    if path:match("%.c$") then
      local o = root .. "/obj/" .. path:gsub("%.c$", ".o")
      local err = sh("cc -c -I" .. q(root .. "/runtime") .. " -o " .. q(o) .. " "
                     .. q(root .. "/runtime/" .. path) .. " 2>&1")
      assert(err == "", err)
    end
  end
  local out = sh("bash " .. q(shell.root .. "/scripts/check-layers.sh") .. " " .. q(root) .. " "
                 .. q(root .. "/obj") .. " 2>&1; echo rc=$?")
  return out, tonumber(out:match("rc=(%d+)"))
end

-- A tree that keeps the rules: core below ops, a device backend calling a
-- forward of ops.
local CLEAN = {
  ["core/core.h"] = "#pragma once\nstruct geom { int n; };\nint core_fn(void);\n",
  ["core/core.c"] = '#include "core/core.h"\nint core_fn(void) { return 1; }\n',
  ["ops/ops.h"] = '#include "core/core.h"\nint fw_op(struct geom *g);\n',
  ["ops/ops.c"] = '#include "ops/ops.h"\nint fw_op(struct geom *g) { return g->n + core_fn(); }\n',
  ["autograd/rec.c"] = '#include "ops/ops.h"\nint dl_rec(void) { struct geom g = {1}; return fw_op(&g); }\n',
  ["cpu/backend.c"] = '#include "ops/ops.h"\nint cpu_k(void) { struct geom g = {2}; return fw_op(&g); }\n',
  ["cuda/glue.c"] = '#include "ops/ops.h"\nint cuda_k(void) { struct geom g = {3}; return fw_op(&g); }\n',
}

local function with(changes)
  local t = {}
  for k, v in pairs(CLEAN) do t[k] = v end
  for k, v in pairs(changes) do t[k] = v end
  return t
end

describe("scripts/check-layers.sh", function()
  teardown(shell.cleanup)

  it("passes a tree that keeps the layers", function()
    local out, rc = check(CLEAN)
    assert.equal(0, rc, out)
    assert.truthy(out:find("0 findings", 1, true), out)
  end)

  it("names a header included from a lower layer, and folders that include each other", function()
    local out, rc = check(with {
      ["core/core.c"] = '#include "core/core.h"\n#include "ops/ops.h"\nint core_fn(void) { return 1; }\n',
    })
    assert.equal(1, rc, out)
    assert.truthy(out:find("include  runtime/core/core.c:2 (core) includes a header of ops, a higher layer", 1, true), out)
    assert.truthy(out:find("mutual   runtime/core/ and runtime/ops/ include each other", 1, true), out)
  end)

  it("names a call into a higher layer, found in the objects", function()
    local out, rc = check(with {
      ["ops/ops.c"] = '#include "ops/ops.h"\nint dl_rec(void);\n'
                      .. 'int fw_op(struct geom *g) { return g->n + core_fn() + dl_rec(); }\n',
    })
    assert.equal(1, rc, out)
    assert.truthy(out:find("call     ops/ops.o (ops) calls dl_rec of autograd (autograd/rec.o), a higher layer", 1, true), out)
  end)

  it("names a device backend calling its sibling", function()
    local out, rc = check(with {
      ["cpu/backend.c"] = 'int cuda_k(void);\nint cpu_k(void) { return cuda_k(); }\n',
    })
    assert.equal(1, rc, out)
    assert.truthy(out:find("call     cpu/backend.o (cpu) calls cuda_k of cuda (cuda/glue.o), a sibling", 1, true), out)
  end)

  it("names device glue that calls or includes the recording layer", function()
    local out, rc = check(with {
      ["autograd/rec.h"] = "int dl_rec(void);\n",
      ["cuda/glue.c"] = '#include "autograd/rec.h"\nint cuda_k(void) { return dl_rec(); }\n',
    })
    assert.equal(1, rc, out)
    assert.truthy(out:find("record   runtime/cuda/glue.c:1 (device glue) includes a header of autograd/", 1, true), out)
    assert.truthy(out:find("record   cuda/glue.o (device glue) calls dl_rec, a recording op of autograd/ (autograd/rec.o)", 1, true), out)
  end)

  it("names a struct of a higher layer declared below it", function()
    local out, rc = check(with {
      ["core/core.h"] = "#pragma once\nstruct geom { int n; };\nstruct plan;\nint core_fn(void);\n",
      ["ops/plan.h"] = "struct plan { int m; };\n",
    })
    assert.equal(1, rc, out)
    assert.truthy(out:find("struct   runtime/core/core.h:3 (core) names struct plan of ops, a higher layer", 1, true), out)
  end)

  it("refuses a tree whose docs state no order", function()
    local out, rc = check(CLEAN, "no order here\n")
    assert.equal(1, rc, out)
    assert.truthy(out:find("no 'Layers, bottom up:' line", 1, true), out)
  end)
end)
