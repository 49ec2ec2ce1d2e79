"""optimizer_step.py: PyTorch twin of optimizer_step.lua: the optimizer
step alone, at one thread, of torch.optim.AdamW (weight decay on the
matrices) and SGD with momentum over train_gpt's GPT and a 12-block
n_embd 64 one, with foreach=False (a loop over the parameters),
foreach=True (torch._foreach_* kernels over the list) and, for AdamW,
fused=True (one fused kernel, CPU support since torch 2.4).

    python bench/optimizer_step.py

Method and output: as optimizer_step.lua ("model optimizer variant<TAB>us").
"""
import sys
import time

import torch

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from gpt_model import GPT  # noqa: E402

WARMUP, WINDOWS, STEPS = 20, 7, 50
torch.set_num_threads(1)

MODELS = [
    ("gpt", {"vocab_size": 256, "block_size": 64, "n_layer": 2, "n_head": 4, "n_embd": 176}),
    ("gpt12", {"vocab_size": 256, "block_size": 64, "n_layer": 12, "n_head": 4, "n_embd": 64}),
]


def groups(m):
    return [{"params": [p for p in m.parameters() if p.dim() >= 2], "weight_decay": 0.1},
            {"params": [p for p in m.parameters() if p.dim() < 2], "weight_decay": 0.0}]


def variants(opt_name):
    out = [("per-parameter", {"foreach": False}), ("foreach", {"foreach": True})]
    if opt_name == "AdamW":
        out.append(("fused", {"fused": True}))
    return out


def make_opt(opt_name, m, kw):
    if opt_name == "AdamW":
        return torch.optim.AdamW(groups(m), lr=1e-3, **kw)
    return torch.optim.SGD(m.parameters(), lr=1e-3, momentum=0.9, **kw)


for name, cfg in MODELS:
    for opt_name in ("AdamW", "SGD"):
        runs = {}
        for vname, kw in variants(opt_name):
            torch.manual_seed(0)
            m = GPT(cfg)
            torch.manual_seed(1)
            for p in m.parameters():
                p.grad = torch.randn(p.shape) * 1e-2
            try:
                runs[vname] = {"opt": make_opt(opt_name, m, kw), "times": [], "n": len(list(m.parameters()))}
                runs[vname]["opt"].step()
            except (RuntimeError, TypeError) as e:  # fused on a CPU build without it
                print(f"{name} {opt_name} {vname}\t-\t({e.__class__.__name__}: {str(e)[:60]})")
                runs.pop(vname, None)
        with torch.no_grad():
            for r in runs.values():
                for _ in range(WARMUP):
                    r["opt"].step()
            for _ in range(WINDOWS):
                for r in runs.values():
                    t0 = time.monotonic()
                    for _ in range(STEPS):
                        r["opt"].step()
                    r["times"].append(time.monotonic() - t0)
        for vname, r in runs.items():
            t = sorted(r["times"])[(WINDOWS - 1) // 2]
            print(f"{name} {opt_name} {vname}\t{t / STEPS * 1e6:.1f}\tus ({r['n']} tensors)")
