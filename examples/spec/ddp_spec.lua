-- examples/spec/ddp_spec.lua: the MLP trained by ddp.DDP on 2 ranks (a
-- real `ddplua --nproc 2` job) equals one process trained on whole batches.
local ddp = require "ddp"
local testing = require "ddp.testing"
local mlp = require "mlp"

describe("ddp.DDP", function()
  it("on 2 ranks trains the MLP as one process does", function()
    local ranks = testing.run(2, function()
      ddp.init()  -- each rank trains on its half of every batch
      return mlp.train(ddp.DDP(mlp.new()), mlp.data()):state_dict()
    end)
    local alone = mlp.train(mlp.new(), mlp.data()):state_dict()
    assert.are.same(ranks[1], ranks[2])   -- every rank holds the very same weights
    assert.tensor_close(alone, ranks[1])  -- and those of one process
  end)
end)
