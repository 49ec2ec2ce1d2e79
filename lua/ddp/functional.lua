-- ddp.functional: the name scripts require for ddp.nn.functional (nn/functional.lua).
return require "ddp.nn.functional"
