-- (moved: ddp.data.loader holds this module until the next commit splits it)
return require "ddp.data.loader"
