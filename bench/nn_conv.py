#!/usr/bin/python3
"""PyTorch twin of bench/nn_conv.c: conv2d forward and forward+backward for
the two layers of a Fashion-MNIST CNN.  Usage: nn_conv.py THREADS [REPS]"""
import sys
import time

import torch
import torch.nn.functional as F


def layer(n, c, h, o, need_x, reps):
    torch.manual_seed(0)
    x = torch.randn(n, c, h, h, requires_grad=need_x)
    w = torch.randn(o, c, 3, 3, requires_grad=True)
    b = torch.randn(o, requires_grad=True)
    g = torch.randn(n, o, h, h)
    fw, tot = [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        y = F.conv2d(x, w, b, padding=1)
        t1 = time.perf_counter()
        y.backward(g)
        t2 = time.perf_counter()
        x.grad = w.grad = b.grad = None
        fw.append(t1 - t0)
        tot.append(t2 - t0)
    fw.sort()
    tot.sort()
    print("torch  threads=%d [%d,%d,%d,%d]->%d%s  fwd %.3f ms (min %.3f)  fwd+bwd %.3f ms (min %.3f)" % (
        torch.get_num_threads(), n, c, h, h, o, "" if need_x else " (no grad_x)",
        fw[reps // 2] * 1e3, fw[0] * 1e3, tot[reps // 2] * 1e3, tot[0] * 1e3))


torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
reps = int(sys.argv[2]) if len(sys.argv) > 2 else 50
layer(64, 1, 28, 32, True, reps)
layer(64, 1, 28, 32, False, reps)
layer(64, 32, 14, 64, True, reps)
