-- ddp.testing: busted for users' own training code -- tensor assertions
-- for luassert (assert.tensor_equal, assert.tensor_close, assert.are.same
-- on tensors: ddp.testing.assertions, over ddp.testing.compare) and
-- testing.run, which runs a chunk as a real N-rank job of `ddplua --nproc
-- N` and hands back what each rank returned (ddp.testing.run).
--
--   local testing = require "ddp.testing"   -- registers the assertions under busted
--   assert.tensor_close(expected, actual)   -- PyTorch's assert_close tolerances per dtype
--   local res = testing.run(2, function() ddp.init(); return ddp.rank() end)  -- res[1], res[2]: 0, 1
--
-- Above the top module: it requires ddp's lower modules (never "ddp"), and
-- nothing in the library requires it, so `require "ddp"` does not load it.
local core = require "ddp.core"

core.add_lib_file(debug.getinfo(1, "S").source)

-- Each part's functions (core.gather).
local M = core.gather({}, "ddp.testing", { "ddp.testing.compare", "ddp.testing.assertions", "ddp.testing.run" })

-- Requiring this module registers the assertions where luassert is
-- loaded (under busted it is).
if package.loaded.luassert then M.register(package.loaded.luassert) end

return M
