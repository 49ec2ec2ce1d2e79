"""Golden steps of PyTorch's SGD, Adam and AdamW on bfloat16 and float16
parameters (state in the parameter's dtype, as PyTorch keeps it), for
tests/optim_half_spec.lua.

Run from the repository root with the cached PyPI venv (torch 2.15):

    py=$(scripts/py-venv.sh); $py tests/golden/make_optim_half.py

It writes tests/golden/optim_half_cases.lua (both files are committed):
for each case its name, the Lua optimizer and options, and around the
last of STEPS steps (so the state is not zero): the parameters and their
state before it, its gradients, and the parameters and state after it.  PyTorch on the CPU steps
one parameter at a time (foreach=False, its CPU default), rounding to the
half type after each op of the update; ddplua rounds each stored value
once, so the spec allows a rounding's difference.
"""
import torch

from lua_writer import lua_str, lua_tensor

assert torch.__version__.startswith("2.15"), torch.__version__

STEPS = 3
CASES = [
    # name, dtype, lua class, lua options, torch constructor
    ("adamw_bf16", torch.bfloat16, "AdamW", "{lr = 1e-2, weight_decay = 0.1}",
     lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1, foreach=False)),
    ("adam_amsgrad_l2_bf16", torch.bfloat16, "Adam", "{lr = 3e-3, weight_decay = 0.01, amsgrad = true}",
     lambda ps: torch.optim.Adam(ps, lr=3e-3, weight_decay=0.01, amsgrad=True, foreach=False)),
    ("sgd_nesterov_bf16", torch.bfloat16, "SGD",
     "{lr = 0.05, momentum = 0.9, nesterov = true, weight_decay = 1e-3}",
     lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-3,
                                foreach=False)),
    ("adamw_fp16", torch.float16, "AdamW", "{lr = 1e-3, betas = {0.9, 0.95}}",
     lambda ps: torch.optim.AdamW(ps, lr=1e-3, betas=(0.9, 0.95), foreach=False)),
    ("sgd_dampening_fp16", torch.float16, "SGD", "{lr = 0.1, momentum = 0.5, dampening = 0.1}",
     lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.5, dampening=0.1, foreach=False)),
]

STATE = {"AdamW": ["exp_avg", "exp_avg_sq"], "Adam": ["exp_avg", "exp_avg_sq", "max_exp_avg_sq"],
         "SGD": ["momentum_buffer"]}


def state_of(opt, ps, cls):
    st = []
    for p in ps:
        s = opt.state[p]
        fields = ["%s=%s" % (k, lua_tensor(s[k])) for k in STATE[cls]]
        if "step" in s:
            fields.append("step=%d" % int(s["step"]))
        st.append("{%s}" % ", ".join(fields))
    return "{%s}" % ", ".join(st)


def case(name, dtype, cls, opts, make):
    """STEPS - 1 steps to a state that is not zero, then the last step:
    the spec loads the state before it and takes that one step."""
    g = torch.Generator().manual_seed(len(name))
    # multiples of 64 elements: PyTorch's vector loops take every element
    # (a tail takes its scalar loop, which rounds an add's product apart)
    shapes = [(8, 16), (64,)]
    ps = [torch.randn(s, generator=g).to(dtype).requires_grad_() for s in shapes]
    opt = make(ps)
    for k in range(STEPS):
        if k == STEPS - 1:
            before = [p.detach().clone() for p in ps]
            state = state_of(opt, ps, cls)
        grads = []
        for p in ps:
            gr = (torch.randn(p.shape, generator=g) * 0.5).to(dtype)
            p.grad = gr.clone()
            grads.append(gr)
        opt.step()
    out = ["{name=%s, dtype=%s, cls=%s, opts=%s," % (lua_str(name), lua_str(str(dtype).split(".")[1]),
                                                   lua_str(cls), lua_str(opts))]
    out.append(" params={%s}, state=%s," % (", ".join(lua_tensor(p) for p in before), state))
    out.append(" grads={%s}," % ", ".join(lua_tensor(t) for t in grads))
    out.append(" after={%s}, state_after=%s}" % (", ".join(lua_tensor(p) for p in ps),
                                                 state_of(opt, ps, cls)))
    return "\n".join(out)


with open("tests/golden/optim_half_cases.lua", "w") as f:
    f.write("-- Written by tests/golden/make_optim_half.py (torch %s); do not edit.\n" % torch.__version__)
    f.write("return {cases={\n")
    f.write(",\n".join(case(*c) for c in CASES))
    f.write("\n}}\n")
