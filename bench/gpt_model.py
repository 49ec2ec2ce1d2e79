"""gpt_model.py: the GPT of bench/train_gpt.py and bench/gpu_train.py, the
PyTorch twin of examples/gpt_model.lua (pre-LN blocks, causal attention
from matmul, masked_fill and softmax, or torch's fused
scaled_dot_product_attention with c["fused"]; nanoGPT's names and
initialisation).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.n_head, self.n_embd = c["n_head"], c["n_embd"]
        self.c_attn = nn.Linear(self.n_embd, 3 * self.n_embd)
        self.c_proj = nn.Linear(self.n_embd, self.n_embd)
        # a plain attribute, not a buffer: DDP's gloo broadcast of buffers rejects bool
        self.mask = torch.ones(c["block_size"], c["block_size"]).triu(1).bool()
        # torch >= 2.0's fused kernel when asked for (the GPU twin); 1.13 has none
        self.fused = c.get("fused", False) and hasattr(F, "scaled_dot_product_attention")

    def forward(self, x):
        Bx, Tx, C = x.shape
        H = self.n_head
        q, k, v = self.c_attn(x).split(C, 2)
        q, k, v = (t.view(Bx, Tx, H, C // H).transpose(1, 2) for t in (q, k, v))
        if self.fused:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1 / math.sqrt(C // H))
            att = att.masked_fill(self.mask[:Tx, :Tx].to(att.device), float("-inf")).softmax(-1)
            y = att @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(Bx, Tx, C))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        e = c["n_embd"]
        self.ln_1, self.attn, self.ln_2 = nn.LayerNorm(e), CausalSelfAttention(c), nn.LayerNorm(e)
        self.mlp = nn.Sequential(nn.Linear(e, 4 * e), nn.GELU(), nn.Linear(4 * e, e))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(c["vocab_size"], c["n_embd"]), nn.Embedding(c["block_size"], c["n_embd"])
        self.h = nn.ModuleList([Block(c) for _ in range(c["n_layer"])])
        self.ln_f = nn.LayerNorm(c["n_embd"])
        self.lm_head = nn.Linear(c["n_embd"], c["vocab_size"], bias=False)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("weight") and p.dim() == 2:
                    res = name.endswith("c_proj.weight") or name.endswith("mlp.2.weight")
                    p.normal_(0, 0.02 / math.sqrt(2 * c["n_layer"]) if res else 0.02)
                elif name.endswith("bias") and not name.startswith("ln") and ".ln_" not in name:
                    p.zero_()

    def forward(self, idx, targets):
        Bx, Tx = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(Tx, device=idx.device))
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return logits, F.cross_entropy(logits.view(Bx * Tx, -1), targets.reshape(-1))
