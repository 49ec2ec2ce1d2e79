"""train_mlp.py: PyTorch twin of train_mlp.lua (same model, data, batch,
optimizer, steps).

    /usr/bin/python3 bench/train_mlp.py THREADS
"""
import gzip
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
torch.set_num_threads(threads)
torch.manual_seed(0)

D = "/usr/share/datasets/fashion-mnist/"
with gzip.open(D + "train-images-idx3-ubyte.gz") as f:
    x = torch.tensor(np.frombuffer(f.read()[16:], dtype=np.uint8).reshape(-1, 784), dtype=torch.float32) / 255
with gzip.open(D + "train-labels-idx1-ubyte.gz") as f:
    y = torch.tensor(np.frombuffer(f.read()[8:], dtype=np.uint8), dtype=torch.int64)
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=64, shuffle=True)
model = nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

WARMUP, STEPS = 20, 300
step, t0 = 0, None
for xb, yb in loader:
    if step == WARMUP:
        t0 = time.perf_counter()
    opt.zero_grad()
    F.cross_entropy(model(xb), yb).backward()
    opt.step()
    step += 1
    if step == WARMUP + STEPS:
        break
dt = time.perf_counter() - t0
print("samples/s\t%.1f\tsamples/s" % (STEPS * 64 / dt))
with open("/proc/self/status") as f:
    for line in f:
        if line.startswith("VmHWM:"):
            print("peak RSS\t%.1f\tMiB" % (int(line.split()[1]) / 1024))
