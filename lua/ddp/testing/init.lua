-- (moved: ddp.testing.run holds this module until the next commit splits it)
return require "ddp.testing.run"
