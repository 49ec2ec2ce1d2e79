-- ddp.store: the name scripts require for ddp.dist.store (dist/store.lua), the rendezvous store.
return require "ddp.dist.store"
