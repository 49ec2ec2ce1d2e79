-- ddp.tokens: the name scripts require for ddp.data.tokens (data/tokens.lua), token files.
return require "ddp.data.tokens"
