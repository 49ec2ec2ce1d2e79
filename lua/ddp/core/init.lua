-- (moved: ddp.core.args holds this module until the next commit splits it)
return require "ddp.core.args"
