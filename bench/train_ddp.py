"""train_ddp.py: PyTorch twin of train_ddp.lua: data-parallel training
throughput of train_mlp's MLP (784-1024-1024-10, ReLU; AdamW, lr 1e-3;
batch 64 a rank) on 2 ranks of one thread, wrapped in
DistributedDataParallel (gloo, default buckets: 25 MB, first 1 MB) and, as
the baseline, not wrapped ("local": each rank trains its own copy, no
gradient exchange).

    OMP_NUM_THREADS=1 /usr/bin/python3 bench/torchrun.py --nproc_per_node 2 bench/train_ddp.py [both|ddp|local]

Data (the same in both twins): random images of Fashion-MNIST's shape
(uniform in [0, 1)) and labels 0-9, a pool of POOL batches a rank made in
memory with seed 1000 + rank and used in turn; no dataset files.
Method (the same in both twins): WARMUP steps of each variant, then
WINDOWS windows of STEPS steps, the two variants alternating window by
window so a noisy neighbour hits both alike.  A window starts and ends
with a barrier and is timed on rank 0 with the monotonic clock; the median
window of each variant gives ms per step and samples/s over the job
(world size x 64 x STEPS / time).  Rank 0 prints "name<TAB>value<TAB>unit"
lines for bench/run.sh; lines whose unit ends in "(info)" are not compared.
The reducer lines: the number of buckets (after the rebuild), how many
all-reduces started while backward ran, and the overlap in ms from the
first bucket's all-reduce start to the end of backward; PyTorch's come
from DDP's logging data (bucket sizes; the overlap averaged over the
iterations it samples, every one here), and it starts every bucket from
an autograd hook, so all of them start during backward.
"""
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

BATCH, POOL, WARMUP, WINDOWS, STEPS = 64, 16, 20, 5, 40
variant = sys.argv[1] if len(sys.argv) > 1 else "both"
assert variant in ("both", "ddp", "local"), "variant: both, ddp or local"

torch.set_num_threads(1)
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))


torch.manual_seed(1000 + rank)
pool = [(torch.rand(BATCH, 784), torch.randint(0, 10, (BATCH,))) for _ in range(POOL)]

runs = {}
if variant in ("both", "local"):
    m = mlp()
    runs["local"] = {"model": m, "opt": torch.optim.AdamW(m.parameters(), lr=1e-3), "i": 0, "times": []}
if variant in ("both", "ddp"):
    m = DDP(mlp())
    m._set_ddp_runtime_logging_sample_rate(1)
    runs["DDP"] = {"model": m, "opt": torch.optim.AdamW(m.parameters(), lr=1e-3), "i": 0, "times": []}


def steps(r, n):
    model, opt = r["model"], r["opt"]
    for _ in range(n):
        x, y = pool[r["i"] % POOL]
        r["i"] += 1
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()


for r in runs.values():
    steps(r, WARMUP)
for _ in range(WINDOWS):
    for r in runs.values():
        dist.barrier()
        t0 = time.monotonic()
        steps(r, STEPS)
        dist.barrier()
        r["times"].append(time.monotonic() - t0)

if rank == 0:
    ms = {}
    for name in ("DDP", "local"):
        if name in runs:
            dt = sorted(runs[name]["times"])[(WINDOWS + 1) // 2 - 1]
            ms[name] = dt / STEPS * 1e3
            print("%s samples/s\t%.1f\tsamples/s" % (name, world * BATCH * STEPS / dt))
            print("%s ms/step\t%.3f\tms" % (name, ms[name]))
    if len(ms) == 2:
        print("DDP/local throughput\t%.3f\tx" % (ms["local"] / ms["DDP"]))
    if "DDP" in runs:
        log = runs["DDP"]["model"]._get_ddp_logging_data()
        nb = len(str(log.get("rebuilt_bucket_sizes") or log.get("bucket_sizes")).split(","))
        print("reducer buckets\t%d\tn (info)" % nb)
        print("launched in backward\t%d\tn (info)" % nb)
        print("reducer overlap\t%.3f\tms (info)" % (log.get("avg_backward_compute_comm_overlap_time", 0) / 1e6))
        if variant == "ddp":
            print({k: v for k, v in log.items() if k.startswith(("avg_", "bucket", "rebuilt"))}, file=sys.stderr)
dist.destroy_process_group()
