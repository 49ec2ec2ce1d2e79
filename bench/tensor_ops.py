"""tensor_ops.py: PyTorch twin of tensor_ops.lua (same ops, sizes, timing).

    /usr/bin/python3 bench/tensor_ops.py THREADS
"""
import sys
import time
import torch

threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
torch.set_num_threads(threads)
torch.manual_seed(0)


def best(reps, f):
    """Median time of 2 * reps + 1 runs after one warm-up."""
    f()
    ts = []
    for _ in range(2 * reps + 1):
        t = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t)
    ts.sort()
    return ts[reps]


def report(name, value, unit):
    print("%s\t%.3f\t%s" % (name, value, unit))


for n in (512, 1024, 2048):
    a, b = torch.randn(n, n), torch.randn(n, n)
    t = best(3 if n >= 2048 else 5, lambda: a.matmul(b))
    report("matmul %d" % n, 2 * n ** 3 / t / 1e9, "GFLOP/s")

N = 16 * 1024 * 1024
x, y = torch.randn(N), torch.randn(N)
report("add 16M", 3 * 4 * N / best(5, lambda: x + y) / 1e9, "GB/s")
report("mul 16M", 3 * 4 * N / best(5, lambda: x * y) / 1e9, "GB/s")
report("add_ 16M (in place)", 3 * 4 * N / best(5, lambda: x.add_(y)) / 1e9, "GB/s")
report("sum 16M", 4 * N / best(5, lambda: x.sum()) / 1e9, "GB/s")
rows = torch.randn(4096, 1024)
report("softmax 4096x1024", 4096 / best(5, lambda: rows.softmax(1)), "rows/s")
