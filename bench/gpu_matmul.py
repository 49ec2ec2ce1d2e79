# gpu_matmul.py: bfloat16 matmul throughput on cuda:0 at n^3 (default
# 8192), PyTorch eager, twin of gpu_matmul.lua.  Prints one line:
#   RESULT gpu_matmul impl=torch dtype=bfloat16 n=8192 tflops=<TFLOP/s>
#   python3 bench/gpu_matmul.py [N] [ITERS]
import sys
import time

n = int(sys.argv[1]) if len(sys.argv) > 1 else 8192
iters = int(sys.argv[2]) if len(sys.argv) > 2 else 50
try:
    import torch
    if not torch.cuda.is_available():
        raise RuntimeError("torch sees no CUDA device")
except Exception as e:  # no torch, or no GPU: say so, do not fail
    print('RESULT gpu_matmul impl=torch skip="%s"' % str(e).splitlines()[0])
    sys.exit(0)

torch.manual_seed(0)
a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
for _ in range(3):
    c = a @ b
torch.cuda.synchronize()
t0 = time.perf_counter()
for _ in range(iters):
    c = a @ b
torch.cuda.synchronize()
dt = time.perf_counter() - t0
print("RESULT gpu_matmul impl=torch dtype=bfloat16 n=%d tflops=%.1f" % (n, 2 * n ** 3 * iters / dt / 1e12))
