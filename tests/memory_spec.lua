-- Nothing leaks: after the first epochs, live tensor bytes stay exactly the
-- same and resident memory stays flat through two more (tensors freed by
-- the GC and by autograd, optimizer state made once, the allocator's cache
-- bounded by the live set).  Runs in a fresh process.
describe("memory", function()
  it("is flat from the second epoch to the fourth", function()
    local ddplua = os.getenv("DDPLUA") or "build/ddplua"
    local p = assert(io.popen(ddplua .. " tests/scripts/memory_epochs.lua 2>&1"))
    local out = p:read("*a")
    p:close()
    local e2, live2, rss2 = out:match("(2)\t(%d+)\t(%d+)")
    local e4, live4, rss4 = out:match("(4)\t(%d+)\t(%d+)")
    assert(e2 and e4, "unexpected output: " .. out)
    assert.equal(tonumber(live2), tonumber(live4))
    local grew = tonumber(rss4) - tonumber(rss2)
    assert(grew < 4 * 1024 * 1024, ("resident memory grew by %d bytes over two epochs"):format(grew))
  end)
end)
