"""allreduce.py: PyTorch twin of allreduce.lua (torch.distributed, gloo;
same sizes, calls per sample, samples, method and output).

    OMP_NUM_THREADS=1 /usr/bin/python3 bench/torchrun.py --nproc_per_node 2 bench/allreduce.py
"""
import time

import torch
import torch.distributed as dist

# bytes, calls per sample, samples: fewer calls for the big sizes
SIZES = [
    ("4KiB", 4 * 2**10, 200, 15),
    ("64KiB", 64 * 2**10, 100, 15),
    ("1MiB", 2**20, 20, 11),
    ("16MiB", 16 * 2**20, 3, 7),
    ("64MiB", 64 * 2**20, 1, 7),
    ("256MiB", 256 * 2**20, 1, 5),
]
WARMUP = 5

dist.init_process_group("gloo")
rank, w = dist.get_rank(), dist.get_world_size()

for name, nbytes, k, samples in SIZES:
    t = torch.ones(nbytes // 4, dtype=torch.float32)
    for _ in range(WARMUP):
        dist.all_reduce(t)
    dist.barrier()
    times = []
    for _ in range(samples):
        t0 = time.perf_counter()
        for _ in range(k):
            dist.all_reduce(t)
        times.append((time.perf_counter() - t0) / k)
    dt = sorted(times)[(len(times) + 1) // 2 - 1]
    if rank == 0:
        print("all_reduce %s time\t%.2f\tus" % (name, dt * 1e6))
        print("all_reduce %s busbw\t%.3f\tGB/s" % (name, 2 * (w - 1) / w * nbytes / dt / 1e9))
    del t
dist.destroy_process_group()
