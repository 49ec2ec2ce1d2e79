-- tests/docs_examples_spec.lua: every Lua example of README.md and
-- docs/*.md runs as its fence says (docs/testing.md, "Examples in the
-- docs"), so the pages cannot drift from the code; every relative link
-- between them resolves; and the checks themselves catch a broken block.
local docs = require "helpers.docs"
local jobs = require "helpers.jobs"

describe("the docs' examples", function()
  teardown(jobs.cleanup)

  for _, page in ipairs(docs.pages()) do
    for _, b in ipairs(docs.blocks(assert(jobs.slurp(page), page), page)) do
      if b.problem or b.lang == "lua" then
        it(b.file .. ":" .. b.line, function()
          local ok, msg = docs.check(b)
          assert(ok, msg)
        end)
      end
    end
  end
end)

describe("the docs' links", function()
  for _, page in ipairs(docs.pages()) do
    it("of " .. page .. " resolve", function()
      local broken = docs.broken_links(jobs.slurp(page), page)
      assert(#broken == 0, table.concat(broken, "\n"))
    end)
  end

  it("reach every page of docs/ from the README", function()
    local readme = jobs.slurp("README.md")
    for _, page in ipairs(docs.pages()) do
      if page ~= "README.md" then
        assert(readme:find("](" .. page .. ")", 1, true), "README.md does not link to " .. page)
      end
    end
  end)
end)

describe("the docs' checks", function()
  teardown(jobs.cleanup)

  local function one(text, name)
    local bs = docs.blocks(text, name or "docs/broken.md")
    assert.equals(1, #bs)
    return bs[1]
  end

  it("report a block that fails with the page's file and line and the program's output", function()
    local b = one("# Broken\n\nSome text.\n\n```lua\nprint('before the error')\nerror('broken here')\n```\n")
    assert.equals(5, b.line)
    local ok, msg = docs.check(b)
    assert.is_false(ok)
    assert.truthy(msg:find("docs/broken.md:5: the example exited with code 1", 1, true), msg)
    assert.truthy(msg:find("before the error", 1, true), msg)
    assert.truthy(msg:find("docs/broken.md:7: broken here", 1, true), msg)  -- the page's own line
  end)

  it("pass a block that runs, on one process and as a job of 2 ranks with its arguments", function()
    local prog = 'local ddp = require "ddp"\nddp.init()\nassert(arg[1] == "--n" and arg[2] == "3")\n'
      .. "local t = ddp.ones(1)\nddp.all_reduce(t)\nassert(t:item() == ddp.world_size())\n"
    assert(docs.check(one("```lua args=\"--n 3\"\n" .. prog .. "```\n")))
    local b = one("```lua nproc=2 args=\"--n 3\"\n" .. prog .. "```\n")
    assert.equals("2", b.attrs.nproc)
    assert(docs.check(b))
    -- the same job expecting 3 ranks fails on each
    b = one("```lua nproc=2\nlocal ddp = require 'ddp'\nddp.init()\nassert(ddp.world_size() == 3, 'not 3 ranks')\n```\n")
    local ok, msg = docs.check(b)
    assert.is_false(ok)
    assert.truthy(msg:find("not 3 ranks", 1, true), msg)
  end)

  it("report a block that outlives its timeout", function()
    local b = one("```lua\nwhile true do end\n```\n")
    local ok, msg = docs.check(b, { timeout = 1 })
    assert.is_false(ok)
    assert.truthy(msg:find("docs/broken.md:1: the example timed out after 1 s", 1, true), msg)
  end)

  it("compile a fragment without running it, and report one that does not compile", function()
    assert(docs.check(one("```lua fragment\nlocal x = model(x)  -- not run\nerror('never')\n```\n")))
    local ok, msg = docs.check(one("\n```lua fragment\nlocal x = \n  for\n```\n"))
    assert.is_false(ok)
    assert.truthy(msg:find("docs/broken.md:2: the block does not compile: docs/broken.md:4:", 1, true), msg)
  end)

  it("compare a file= block with its file past their leading comments", function()
    local text = jobs.slurp("examples/quickstart.lua")
    local body = text:gsub("^(%-%-[^\n]*\n)+", "")
    assert(docs.check(one("```lua file=examples/quickstart.lua\n-- a copy\n" .. body .. "```\n")))
    local ok, msg = docs.check(one("```lua file=examples/quickstart.lua\n-- a copy\n"
      .. body:gsub("epochs = 3", "epochs = 4", 1) .. "```\n"))
    assert.is_false(ok)
    assert.truthy(msg:find("differs from examples/quickstart.lua at its line", 1, true), msg)
    assert.truthy(msg:find("epochs = 4", 1, true), msg)
    ok, msg = docs.check(one("```lua file=examples/none.lua\nprint(1)\n```\n"))
    assert.is_false(ok)
    assert.truthy(msg:find("file=examples/none.lua does not exist", 1, true), msg)
  end)

  it("report a fence without a language, an unknown attribute and an unclosed fence", function()
    local ok, msg = docs.check(one("text\n```\nprint(1)\n```\n"))
    assert.is_false(ok)
    assert.truthy(msg:find("docs/broken.md:2: the fence names no language", 1, true), msg)
    ok, msg = docs.check(one("```lua nrpoc=2\nprint(1)\n```\n"))
    assert.is_false(ok)
    assert.truthy(msg:find('unknown attribute "nrpoc"', 1, true), msg)
    ok, msg = docs.check(one("```lua fragment nproc=2\nprint(1)\n```\n"))
    assert.is_false(ok)
    assert.truthy(msg:find("fragment and file= take no other attribute", 1, true), msg)
    ok, msg = docs.check(one("```lua\nprint(1)\n"))
    assert.is_false(ok)
    assert.truthy(msg:find("the fence is never closed", 1, true), msg)
  end)

  it("find indented fences and leave other languages alone", function()
    local bs = docs.blocks("- item:\n\n  ```lua\n  print(1)\n  ```\n\n```sh\nexit 1\n```\n", "x.md")
    assert.equals(2, #bs)
    assert.equals("print(1)\n", bs[1].code)
    assert.equals("sh", bs[2].lang)
    assert(docs.check(bs[2]))
  end)

  it("report a link to a missing file or heading", function()
    local pages = { ["docs/a.md"] = "# A page\n\n## Its part: `x`\n", ["README.md"] = "# R\n" }
    local read = function(path) return pages[path] end
    local text = "[ok](a.md#its-part-x) [up](../README.md#r) [web](https://example.org/x.md)\n"
      .. "`[code](nowhere.md)`\n```text\n[in a block](nowhere.md)\n```\n"
      .. "[gone](b.md) [no heading](a.md#nothing) [here](#a-page)\n"
    local broken = docs.broken_links(text, "docs/a.md", read)
    assert.same({
      "docs/a.md:6: link to b.md: no file docs/b.md",
      "docs/a.md:6: link to a.md#nothing: docs/a.md has no heading with anchor #nothing",
    }, broken)
  end)

  it("make GitHub's anchors", function()
    assert.equals("data-parallel-training-ddpddp", docs.slug("Data-parallel training (`ddp.DDP`)"))
    assert.equals("each-ranks-share-distributedsampler", docs.slug("Each rank's share: `DistributedSampler`"))
    assert.equals("a-gpt-on-text-examplesgptlua", docs.slug("A GPT on text: examples/gpt.lua"))
  end)
end)
