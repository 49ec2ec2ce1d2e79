"""train_cnn.py: PyTorch twin of train_cnn.lua: training throughput of the
Fashion-MNIST CNN (2 x (conv 3x3 + ReLU + max-pool 2) + linear 3136-128-10;
AdamW, lr 2e-3; batch 64 a rank).  One process at THREADS threads, or under
torchrun (bench/torchrun.py) every rank with one thread and the model in
DistributedDataParallel over gloo.

    /usr/bin/python3 bench/train_cnn.py THREADS
    /usr/bin/python3 bench/torchrun.py --nproc_per_node 2 bench/train_cnn.py 1

Data and method as train_cnn.lua: random images in [0, 1) and labels 0-9, a
pool of POOL batches made with seed 1000 + rank; WARMUP steps, then STEPS
timed steps (between barriers when distributed).
"""
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

BATCH, POOL, WARMUP, STEPS = 64, 16, 10, 60
threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
torch.set_num_threads(threads)
distributed = "RANK" in os.environ
if distributed:
    dist.init_process_group("gloo")
rank = dist.get_rank() if distributed else 0
world = dist.get_world_size() if distributed else 1

torch.manual_seed(0)
model = nn.Sequential(
    nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
    nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
    nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))
if distributed:
    model = nn.parallel.DistributedDataParallel(model)
opt = torch.optim.AdamW(model.parameters(), lr=2e-3)

torch.manual_seed(1000 + rank)
pool = [(torch.rand(BATCH, 1, 28, 28), torch.randint(0, 10, (BATCH,))) for _ in range(POOL)]


def steps(first, n):
    for s in range(first, first + n):
        x, y = pool[s % POOL]
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()


steps(0, WARMUP)
if distributed:
    dist.barrier()
t0 = time.perf_counter()
steps(WARMUP, STEPS)
if distributed:
    dist.barrier()
dt = time.perf_counter() - t0
if rank == 0:
    print("samples/s\t%.1f\tsamples/s" % (world * BATCH * STEPS / dt))
    print("ms/step\t%.2f\tms" % (dt / STEPS * 1e3))
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                print("peak RSS (rank 0)\t%.1f\tMiB" % (int(line.split()[1]) / 1024))
if distributed:
    dist.destroy_process_group()
