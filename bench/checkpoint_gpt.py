# checkpoint_gpt.py: twin of checkpoint_gpt.lua -- the GPT of train_gpt.py
# (2 blocks, n_embd 176, context 64, batch 32; AdamW), each block plain or
# wrapped in torch.utils.checkpoint.checkpoint(use_reentrant=False).
#   python3 bench/checkpoint_gpt.py plain|ckpt [THREADS] [STEPS]
# Prints "ms/step<TAB>value<TAB>ms" over STEPS (default 20) after 3 warm-up
# steps, and the last loss.  (PyTorch keeps no allocation statistics for
# the CPU, so the memory is ddplua's side only.)
import os
import sys
import time

import torch
import torch.utils.checkpoint as tc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_model import GPT

mode = sys.argv[1] if len(sys.argv) > 1 else "plain"
assert mode in ("plain", "ckpt")
threads = int(sys.argv[2]) if len(sys.argv) > 2 else 1
STEPS, WARMUP = int(sys.argv[3]) if len(sys.argv) > 3 else 20, 3
B, T = 32, 64
torch.set_num_threads(threads)

corpus = torch.frombuffer(bytearray(open("/usr/share/common-licenses/GPL-3", "rb").read()), dtype=torch.uint8).long()
N = corpus.numel()


def batch(k):
    starts = torch.tensor([((k * B + b) * 67) % (N - T - 1) for b in range(B)])
    w = corpus[(starts.view(B, 1) + torch.arange(T + 1).view(1, T + 1)).view(-1)].view(B, T + 1)
    return w[:, :T].contiguous(), w[:, 1:].contiguous()


torch.manual_seed(0)
model = GPT({"vocab_size": 256, "block_size": T, "n_layer": 2, "n_head": 4, "n_embd": 176,
             "fused": os.environ.get("GPT_FUSED") == "1"})
if mode == "ckpt":
    for block in model.h:
        plain = block.forward
        block.forward = lambda x, f=plain: tc.checkpoint(f, x, use_reentrant=False)
decay = [p for p in model.parameters() if p.dim() >= 2]
no_decay = [p for p in model.parameters() if p.dim() < 2]
opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                        lr=1e-3, betas=(0.9, 0.95))


def step(k):
    x, y = batch(k)
    opt.zero_grad()
    _, loss = model(x, y)
    loss.backward()
    opt.step()
    return loss


k = 0
for _ in range(WARMUP):
    step(k)
    k += 1
t0 = time.perf_counter()
for _ in range(STEPS):
    loss = step(k)
    k += 1
dt = time.perf_counter() - t0
print("ms/step\t%.2f\tms" % (dt / STEPS * 1e3))
print("last loss\t%.6f\tnats" % loss.item())
