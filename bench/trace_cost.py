"""trace_cost.py: PyTorch twin of trace_cost.lua -- the same MLP, data,
batch and optimizer, timed over 300 steps after 20, without (off) and
under torch.profiler recording CPU ops (on).

    python bench/trace_cost.py small|large off|on
"""
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

size = sys.argv[1] if len(sys.argv) > 1 else "small"
mode = sys.argv[2] if len(sys.argv) > 2 else "off"
torch.set_num_threads(1)
torch.manual_seed(0)
d_in, hidden, batch = (784, 1024, 64) if size == "large" else (64, 256, 32)
x, y = torch.randn(8192, d_in), torch.randint(0, 10, (8192,))
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=batch, shuffle=True)
model = nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 10))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
prof = None
if mode == "on":
    prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
    prof.__enter__()
WARMUP, STEPS = 20, 300
step, t0 = 0, None
while step < WARMUP + STEPS:
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
if prof is not None:
    prof.__exit__(None, None, None)
print(f"torch {size} {mode}\t{dt / STEPS * 1e6:.1f}\tus/step")
