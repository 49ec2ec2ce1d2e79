-- ddp.data: data for training -- IDX files (MNIST, Fashion-MNIST:
-- ddp.data.idx), TensorDataset (ddp.data.dataset), samplers
-- (DistributedSampler: each rank's share; ddp.data.samplers), the
-- DataLoader that cuts a dataset into batches (ddp.data.loader, which also
-- tells the sampler protocol), reduce_metrics to sum evaluation metrics
-- over ranks (ddp.data.metrics), NumPy's .npy and .npz files and
-- NpyDataset (ddp.data.npy), token files for language models
-- (data.tokens, data.TokenDataset: ddp.data.tokens, also ddp.tokens),
-- torchvision.transforms.v2's image transforms (data.transforms:
-- ddp.data.transforms), tar shards in the WebDataset convention
-- (data.WebDataset, data.expand_shards: ddp.data.webdataset;
-- data.ShardSampler: ddp.data.shard_sampler; data.ShardWriter:
-- ddp.data.shard_writer) and the small JSON codec their .json members use
-- (data.json).
local core = require "ddp.core"

core.add_lib_file(debug.getinfo(1, "S").source)

-- Each part's classes and functions (core.gather).
local data = core.gather({}, "ddp.data", { "ddp.data.idx", "ddp.data.dataset", "ddp.data.samplers",
                                           "ddp.data.loader", "ddp.data.metrics", "ddp.data.npy", "ddp.data.image",
                                           "ddp.data.image_folder",
                                           "ddp.data.webdataset", "ddp.data.shard_sampler", "ddp.data.shard_writer" })

data.tokens = require "ddp.data.tokens"
data.TokenDataset = data.tokens.TokenDataset
data.transforms = require "ddp.data.transforms"
data.json = require "ddp.data.json"

return data
