"""train_gpt.py: PyTorch twin of train_gpt.lua: training throughput of a
byte-level GPT (2 pre-LN blocks, n_embd 176, 4 heads, context 64, batch
32, 849,728 parameters; attention from matmul, masked_fill and softmax, as
torch 1.13 has no scaled_dot_product_attention; AdamW with weight decay on
the matrices, clip_grad_norm 1.0).  GPT_FUSED=1: torch's
scaled_dot_product_attention; GPT_COMPILE=1: torch.compile(model).

    /usr/bin/python3 bench/train_gpt.py THREADS [STEPS]        one process
    /usr/bin/python3 bench/torchrun.py --nproc_per_node 2 bench/train_gpt.py 1 [STEPS]   DDP (gloo)

Data, batches and method: as in train_gpt.lua.
"""
import os
import resource
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from gpt_model import GPT

threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
STEPS, WARMUP = int(sys.argv[2]) if len(sys.argv) > 2 else int(os.environ.get("GPT_STEPS", "30")), 5
B, T = 32, 64
torch.set_num_threads(threads)
world = int(os.environ.get("WORLD_SIZE", "1"))
if world > 1:
    dist.init_process_group("gloo")
rank = dist.get_rank() if world > 1 else 0

names = ["Apache-2.0", "Artistic", "BSD", "CC0-1.0", "GFDL-1.2", "GFDL-1.3", "GPL-1", "GPL-2", "GPL-3",
         "LGPL-2", "LGPL-2.1", "LGPL-3", "MPL-1.1", "MPL-2.0"]
text = b"".join(open("/usr/share/common-licenses/" + n, "rb").read() for n in names)
corpus = torch.frombuffer(bytearray(text), dtype=torch.uint8).long()
N = corpus.numel()


def batch(k):
    starts = torch.tensor([(((k * world + rank) * B + b) * 67) % (N - T - 1) for b in range(B)])
    w = corpus[(starts.view(B, 1) + torch.arange(T + 1).view(1, T + 1)).view(-1)].view(B, T + 1)
    return w[:, :T].contiguous(), w[:, 1:].contiguous()


torch.manual_seed(0)
# GPT_FUSED=1 (make bench's train_gpt_fused): F.scaled_dot_product_attention
# where this torch has it (2.x), the formula on 1.13
model = GPT({"vocab_size": 256, "block_size": T, "n_layer": 2, "n_head": 4, "n_embd": 176,
             "fused": os.environ.get("GPT_FUSED") == "1"})
nparams = sum(p.numel() for p in model.parameters())
if world > 1:
    model = nn.parallel.DistributedDataParallel(model)
# GPT_COMPILE=1 (make bench's train_gpt_compile): torch.compile's inductor
# on the forward (and so its backward), compiled in the warm-up steps;
# torch 1.13 has no torch.compile
fwd = model
if os.environ.get("GPT_COMPILE") == "1":
    if not hasattr(torch, "compile"):
        sys.exit("train_gpt.py: torch %s has no torch.compile" % torch.__version__)
    fwd = torch.compile(model)
decay = [p for p in model.parameters() if p.dim() >= 2]
no_decay = [p for p in model.parameters() if p.dim() < 2]
opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                        lr=1e-3, betas=(0.9, 0.95))


def step(k):
    x, y = batch(k)
    opt.zero_grad()
    _, loss = fwd(x, y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return loss


k = 0
for _ in range(WARMUP):
    step(k)
    k += 1
if world > 1:
    dist.barrier()
t0 = time.monotonic()
for _ in range(STEPS):
    loss = step(k)
    k += 1
loss = loss.item()
if world > 1:
    dist.barrier()
dt = time.monotonic() - t0
if rank == 0:
    print("steps/s\t%.3f\tsteps/s" % (STEPS / dt))
    print("ms/step\t%.1f\tms" % (dt / STEPS * 1e3))
    print("tokens/s\t%.0f\ttokens/s" % (STEPS * world * B * T / dt))
    print("peak RSS\t%.1f\tMiB" % (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024))
    print("parameters\t%d\tn (info)" % nparams)
    print("last loss\t%.3f\tnats (info)" % loss)
if world > 1:
    dist.destroy_process_group()
