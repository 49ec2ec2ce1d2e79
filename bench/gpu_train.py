# gpu_train.py: training step time on cuda:0 of the Fashion-MNIST MLP and
# CNN, AdamW, batch 128 of synthetic data on the device, and of
# train_gpt.py's GPT (32 x 64 random tokens, torch's fused attention where
# it has one), PyTorch eager; twin of gpu_train.lua.
#   python3 bench/gpu_train.py [STEPS] [none|bf16] [WARMUP]
import sys
import time

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 100
amp = sys.argv[2] if len(sys.argv) > 2 else "none"
B, WARMUP = 128, int(sys.argv[3]) if len(sys.argv) > 3 else 10
try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    if not torch.cuda.is_available():
        raise RuntimeError("torch sees no CUDA device")
except Exception as e:
    print('RESULT gpu_train impl=torch skip="%s"' % str(e).splitlines()[0])
    sys.exit(0)
from gpt_model import GPT


def mlp():
    return nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))


def cnn():
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))


def gpt():
    return GPT({"vocab_size": 256, "block_size": 64, "n_layer": 2, "n_head": 4, "n_embd": 176, "fused": True})


def step_ms(build, shape):
    torch.manual_seed(0)
    model = build().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    if shape == "tokens":
        x = torch.randint(0, 256, (32, 64), device="cuda")
        y = torch.randint(0, 256, (32, 64), device="cuda")
        loss_of = lambda: model(x, y)[1]
    else:
        x = torch.rand(shape, device="cuda")
        y = torch.randint(0, 10, (B,), device="cuda")
        loss_of = lambda: F.cross_entropy(model(x), y)

    def step():
        opt.zero_grad()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp == "bf16"):
            loss = loss_of()
        loss.backward()
        opt.step()

    for _ in range(WARMUP):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / steps * 1e3


m = step_ms(mlp, (B, 784))
c = step_ms(cnn, (B, 1, 28, 28))
g = step_ms(gpt, "tokens")
print("RESULT gpu_train impl=torch amp=%s batch=%d mlp_ms=%.3f cnn_ms=%.3f gpt_ms=%.3f" % (amp, B, m, c, g))
