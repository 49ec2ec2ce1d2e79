"""zero_optimizer.py: PyTorch twin of zero_optimizer.lua: the optimizer
state each rank keeps and the step time of DistributedDataParallel (gloo)
with AdamW against the same with torch.distributed.optim's
ZeroRedundancyOptimizer(AdamW), on 2 ranks of one thread, for train_ddp's
MLP or train_gpt's GPT.

    OMP_NUM_THREADS=1 python bench/torchrun.py --nproc_per_node 2 bench/zero_optimizer.py mlp|gpt

Method, data and output: as zero_optimizer.lua (the state: the bytes of
every tensor in the rank's optimizer state, ZeroRedundancyOptimizer's
local optimizer's for the sharded one).
"""
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from gpt_model import GPT  # noqa: E402

which = sys.argv[1] if len(sys.argv) > 1 else "mlp"
assert which in ("mlp", "gpt"), "model: mlp or gpt"
WARMUP, WINDOWS = 5, 5
STEPS = 40 if which == "mlp" else 10

torch.set_num_threads(1)
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

if which == "mlp":
    def make():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))
    torch.manual_seed(1000 + rank)
    pool = [(torch.rand(64, 784), torch.randint(0, 10, (64,))) for _ in range(16)]

    def batch(k):
        return pool[k % 16]

    def loss_of(m, x, y):
        return F.cross_entropy(m(x), y)

    def params(m):
        return list(m.parameters())
else:
    B, T = 32, 64
    text = open("/usr/share/common-licenses/GPL-3", "rb").read()
    corpus = torch.frombuffer(bytearray(text), dtype=torch.uint8).long()
    N = corpus.numel()

    def make():
        torch.manual_seed(0)
        return GPT({"vocab_size": 256, "block_size": T, "n_layer": 2, "n_head": 4, "n_embd": 176})

    def batch(k):
        starts = torch.tensor([(((k * world + rank) * B + b) * 67) % (N - T - 1) for b in range(B)])
        w = corpus[(starts.view(B, 1) + torch.arange(T + 1).view(1, T + 1)).view(-1)].view(B, T + 1)
        return w[:, :T].contiguous(), w[:, 1:].contiguous()

    def loss_of(m, x, y):
        return m(x, y)[1]

    def params(m):  # weight decay on the matrices, as gpt.param_groups
        return [{"params": [p for p in m.parameters() if p.dim() >= 2], "weight_decay": 0.1},
                {"params": [p for p in m.parameters() if p.dim() < 2], "weight_decay": 0.0}]

runs = {}
for name, sharded in (("AdamW", False), ("ZeRO AdamW", True)):
    m = DDP(make())
    if sharded:
        opt = ZeroRedundancyOptimizer(params(m), optimizer_class=torch.optim.AdamW, lr=1e-3)
    else:
        opt = torch.optim.AdamW(params(m), lr=1e-3)
    runs[name] = {"model": m, "opt": opt, "k": 0, "times": []}


def steps(r, n):
    for _ in range(n):
        x, y = batch(r["k"])
        r["k"] += 1
        r["opt"].zero_grad()
        loss_of(r["model"], x, y).backward()
        r["opt"].step()


for r in runs.values():
    steps(r, WARMUP)
for _ in range(WINDOWS):
    for r in runs.values():
        dist.barrier()
        t0 = time.monotonic()
        steps(r, STEPS)
        dist.barrier()
        r["times"].append(time.monotonic() - t0)


def state_bytes(opt):
    o = opt.optim if isinstance(opt, ZeroRedundancyOptimizer) else opt
    return sum(v.numel() * v.element_size() for s in o.state.values() for v in s.values() if torch.is_tensor(v) and v.dim() > 0)


state = {}
for name, r in runs.items():
    got = [None] * world
    dist.all_gather_object(got, state_bytes(r["opt"]))
    state[name] = max(got)
if rank == 0:
    ms = {}
    for name, r in runs.items():
        t = sorted(r["times"])[(WINDOWS - 1) // 2]
        ms[name] = t / STEPS * 1e3
        print(f"{name} ms/step\t{ms[name]:.3f}\tms")
        print(f"{name} state per rank\t{state[name] / 2**20:.3f}\tMiB")
    print(f"ZeRO/AdamW step time\t{ms['ZeRO AdamW'] / ms['AdamW']:.3f}\tx")
    print(f"ZeRO/AdamW state per rank\t{state['ZeRO AdamW'] / state['AdamW']:.3f}\tx")
dist.destroy_process_group()
