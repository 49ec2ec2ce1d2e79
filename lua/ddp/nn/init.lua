-- ddp.nn: modules as in torch.nn -- nn.Module (ddp.nn.module), the layers
-- (ddp.nn.layers), Sequential and ModuleList (ddp.nn.containers),
-- MultiheadAttention (ddp.nn.attention), SyncBatchNorm and
-- convert_sync_batchnorm (ddp.nn.sync_bn), and nn.functional, nn.init,
-- nn.utils, nn.parallel (ddp.DDP).
--
-- The one way nn grows: a module of this folder returns a table of its
-- classes and functions, and this file takes them in (core.gather: a name
-- given twice is an error).  Nothing patches nn from outside, so require "ddp.nn"
-- alone has all of it.  SyncBatchNorm and DDP need the process group:
-- ddp.nn sits above ddp.dist, which needs nothing of nn.
local core = require "ddp.core"
local module = require "ddp.nn.module"

core.add_lib_file(debug.getinfo(1, "S").source)

local nn = {
  Module = module.Module,
  is_module = module.is_module,
  functional = require "ddp.nn.functional",
  init = require "ddp.nn.weight_init",
  utils = require "ddp.nn.utils",
  parallel = require "ddp.nn.parallel",
}

core.gather(nn, "ddp.nn", { "ddp.nn.layers", "ddp.nn.containers", "ddp.nn.attention", "ddp.nn.sync_bn" })

return nn
