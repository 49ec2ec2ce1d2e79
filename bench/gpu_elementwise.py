# gpu_elementwise.py: elementwise bandwidth on cuda:0 against a
# device-to-device copy, PyTorch eager, twin of gpu_elementwise.lua.
#   python3 bench/gpu_elementwise.py [LOG2_N] [ITERS]
import sys
import time

n = 2 ** (int(sys.argv[1]) if len(sys.argv) > 1 else 26)
iters = int(sys.argv[2]) if len(sys.argv) > 2 else 50
try:
    import torch
    if not torch.cuda.is_available():
        raise RuntimeError("torch sees no CUDA device")
except Exception as e:
    print('RESULT gpu_elementwise impl=torch skip="%s"' % str(e).splitlines()[0])
    sys.exit(0)

a = torch.full((n,), 1.5, device="cuda")
b = torch.full((n,), -0.5, device="cuda")
out = torch.empty(n, device="cuda")
nbytes = n * 4


def gbps(tensors, f):
    for _ in range(3):
        f()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        f()
    torch.cuda.synchronize()
    return tensors * nbytes * iters / (time.perf_counter() - t0) / 1e9


copy = gbps(2, lambda: out.copy_(a))
add = gbps(3, lambda: a + b)
mul = gbps(2, lambda: a * 3)
relu = gbps(2, lambda: b.relu())
print("RESULT gpu_elementwise impl=torch copy_gbps=%.0f add_gbps=%.0f mul_gbps=%.0f relu_gbps=%.0f add_vs_copy=%.2f"
      % (copy, add, mul, relu, add / copy))
