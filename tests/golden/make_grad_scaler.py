"""Golden runs of PyTorch's torch.amp.GradScaler on the CPU, for
tests/grad_scaler_spec.lua: a float32 parameter stepped by SGD through the
scaler for 9 steps, the gradient that of a loss scaled by the scale then,
(the loss sum(p * base * k)), an inf in it at step 3 and a NaN at step 6, growth_interval 2 (so the scale
grows, backs off and grows again); after each step the scale, the growth
tracker and the parameter.

Run from the repository root with the cached PyPI venv (torch 2.15):

    py=$(scripts/py-venv.sh); $py tests/golden/make_grad_scaler.py

It writes tests/golden/grad_scaler_cases.lua (both files are committed).
"""
import torch

from lua_writer import lua_tensor

assert torch.__version__.startswith("2.15"), torch.__version__

p = torch.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
opt = torch.optim.SGD([p], lr=0.125)
sc = torch.amp.GradScaler("cpu", init_scale=8.0, growth_factor=2.0, backoff_factor=0.5, growth_interval=2)
base = torch.tensor([0.5, -0.25, 1.0, 2.0])
rows = []
for k in range(1, 10):
    opt.zero_grad()
    sc.scale((p * (base * k)).sum()).backward()
    with torch.no_grad():
        if k == 3:
            p.grad[1] = float("inf")
        if k == 6:
            p.grad[2] = float("nan")
    sc.step(opt)
    sc.update()
    rows.append("{scale=%r, tracker=%d, p=%s}" % (sc.get_scale(), sc.state_dict()["_growth_tracker"], lua_tensor(p)))
with open("tests/golden/grad_scaler_cases.lua", "w") as f:
    f.write("-- Written by tests/golden/make_grad_scaler.py (torch %s); do not edit.\n" % torch.__version__)
    f.write("return {init_scale=8, lr=0.125, growth_interval=2, base={0.5, -0.25, 1, 2}, steps={\n  ")
    f.write(",\n  ".join(rows))
    f.write("\n}}\n")
