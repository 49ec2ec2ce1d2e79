#!/usr/bin/python3
"""Golden values for scaled dot product attention and nn.MultiheadAttention,
computed by PyTorch 1.13.

Run from the repository root with Debian's python3 (torch 1.13):

    /usr/bin/python3 tests/golden/make_sdpa.py

It writes tests/golden/sdpa_cases.lua (both files committed), read by
tests/sdpa_spec.lua.  PyTorch 1.13 has no F.scaled_dot_product_attention,
so the attention cases compute its formula explicitly,

    softmax(q k^T * scale + mask) v        (causal: keys j <= i, top-left)

with gradients of q, k and v by autograd; a row whose keys are all masked
gives NaN there (softmax over -inf), which ddplua matches.  The
MultiheadAttention cases run torch.nn.MultiheadAttention itself and keep
its state dict, so the spec loads PyTorch's parameters.  Each section
reseeds from its own name, so adding a case changes only its section.
"""
import math
import zlib

import torch

from lua_writer import lua_str, lua_tensor

assert torch.__version__.startswith("1.13"), torch.__version__
torch.set_num_threads(1)

F32 = (1e-4, 1e-5)
F64 = (1e-12, 1e-13)


def section(name):
    torch.manual_seed(zlib.crc32(name.encode()))


def rn(*shape, dtype=torch.float32):
    return torch.randn(*shape, dtype=torch.float64).to(dtype)


# -- Lua writer (tests/golden/lua_writer.py) --------------------------------

def lua_map(d):
    return "{%s}" % ", ".join('[%s]=%s' % (lua_str(k), lua_tensor(v)) for k, v in sorted(d.items()))


# -- Attention by its formula ---------------------------------------------------

def attention(q, k, v, mask=None, causal=False, scale=None):
    L, S, E = q.shape[-2], k.shape[-2], q.shape[-1]
    s = q @ k.transpose(-2, -1) * (1 / math.sqrt(E) if scale is None else scale)
    if causal:
        s = s.masked_fill(~torch.ones(L, S, dtype=torch.bool).tril(), -math.inf)
    if mask is not None:
        s = s.masked_fill(~mask, -math.inf) if mask.dtype == torch.bool else s + mask
    return s.softmax(-1) @ v


SDPA = []


def sdpa_case(name, lua, inputs, mask=None, causal=False, scale=None):
    dtype = inputs["q"].dtype
    bound = {k: inputs[k].clone().requires_grad_(True) for k in "qkv"}
    m = inputs.get("m")
    out = attention(bound["q"], bound["k"], bound["v"], m, causal, scale)
    gout = rn(*out.shape, dtype=dtype)
    grads = torch.autograd.grad(out, [bound["q"], bound["k"], bound["v"]], gout)
    tol = F64 if dtype == torch.float64 else F32
    SDPA.append((name, lua, inputs, out.detach(), tol, gout, dict(zip("qkv", grads))))


def qkv(qs, ks, vs, dtype):
    return {"q": rn(*qs, dtype=dtype), "k": rn(*ks, dtype=dtype), "v": rn(*vs, dtype=dtype)}


def dt_tag(dtype):
    return "f64" if dtype == torch.float64 else "f32"


section("sdpa")
for dtype in (torch.float32, torch.float64):
    t = dt_tag(dtype)
    sdpa_case("plain_2x3x5x7_e4_ev6_" + t, "F.scaled_dot_product_attention(q, k, v)",
              qkv((2, 3, 5, 4), (2, 3, 7, 4), (2, 3, 7, 6), dtype))
    sdpa_case("broadcast_heads_batch_" + t, "F.scaled_dot_product_attention(q, k, v)",
              qkv((2, 3, 6, 8), (1, 3, 9, 8), (2, 1, 9, 5), dtype))
    sdpa_case("broadcast_3d_over_4d_" + t, "F.scaled_dot_product_attention(q, k, v)",
              qkv((2, 1, 6, 8), (3, 9, 8), (9, 5), dtype))
    sdpa_case("scale_0.3_" + t, "F.scaled_dot_product_attention(q, k, v, {scale = 0.3})",
              qkv((2, 4, 8), (2, 5, 8), (2, 5, 8), dtype), scale=0.3)
    sdpa_case("causal_L5_S9_" + t, "F.scaled_dot_product_attention(q, k, v, {is_causal = true})",
              qkv((2, 5, 4), (2, 9, 4), (2, 9, 3), dtype), causal=True)
    i = qkv((1, 2, 5, 4), (1, 2, 6, 4), (1, 2, 6, 4), dtype)
    i["m"] = torch.rand(5, 6) > 0.2
    i["m"][2, :] = False
    sdpa_case("fully_masked_row_nan_" + t,
              "F.scaled_dot_product_attention(q, k, v, {attn_mask = m})", i, mask=i["m"])
    i = qkv((2, 3, 6, 8), (2, 3, 10, 8), (2, 3, 10, 8), dtype)
    i["m"] = torch.arange(10).view(1, 1, 1, 10) < torch.tensor([7, 10]).view(2, 1, 1, 1)
    sdpa_case("key_padding_mask_" + t, "F.scaled_dot_product_attention(q, k, v, m)", i, mask=i["m"])

# Several 64-row/64-key tiles (the kernel's), partial tiles at the ends:
# float32 only (the float64 kernel is the same source; tests/sdpa_spec.lua
# checks it by finite differences).
f32 = torch.float32
sdpa_case("causal_L70_S130_f32", "F.scaled_dot_product_attention(q, k, v, {is_causal = true})",
          qkv((2, 1, 70, 8), (2, 1, 130, 8), (2, 1, 130, 6), f32), causal=True)
sdpa_case("causal_L130_S70_f32", "F.scaled_dot_product_attention(q, k, v, {is_causal = true})",
          qkv((1, 2, 130, 8), (1, 2, 70, 8), (1, 2, 70, 4), f32), causal=True)
sdpa_case("causal_L150_heads3_f32", "F.scaled_dot_product_attention(q, k, v, nil, 0, true)",
          qkv((1, 3, 150, 8), (1, 3, 150, 8), (1, 3, 150, 8), f32), causal=True)
i = qkv((1, 2, 67, 8), (1, 2, 90, 8), (1, 2, 90, 8), f32)
i["m"] = torch.rand(67, 90) > 0.3
i["m"][:, 0] = True
sdpa_case("bool_mask_LxS_f32", "F.scaled_dot_product_attention(q, k, v, {attn_mask = m})", i,
          mask=i["m"])
i = qkv((1, 2, 70, 8), (1, 2, 75, 8), (1, 2, 75, 4), f32)
i["m"] = rn(1, 2, 70, 75, dtype=f32)
i["m"][0, 1, :, 5:9] = -math.inf
sdpa_case("float_mask_full_f32", "F.scaled_dot_product_attention(q, k, v, {attn_mask = m})",
          i, mask=i["m"])


# -- nn.MultiheadAttention --------------------------------------------------------

MHA = []


def mha_case(name, E, heads, opts, fwd, N, L, S, kdim=None, vdim=None, masks=None):
    """opts: constructor keywords (Lua table text follows them); fwd: forward
    keywords other than the masks; masks: {name: tensor} passed by name."""
    kdim, vdim = kdim or E, vdim or E
    m = torch.nn.MultiheadAttention(E, heads, kdim=kdim, vdim=vdim, **opts).double()
    with torch.no_grad():  # biases are zero at init: make them count
        for n, p in m.named_parameters():
            if "bias" in n:
                p.normal_()
    bf = opts.get("batch_first", False)
    shp = (lambda n, t, d: (n, t, d)) if bf else (lambda n, t, d: (t, n, d))
    x = {"query": rn(*shp(N, L, E), dtype=torch.float64),
         "key": rn(*shp(N, S, kdim), dtype=torch.float64),
         "value": rn(*shp(N, S, vdim), dtype=torch.float64)}
    bound = {k: v.clone().requires_grad_(True) for k, v in x.items()}
    kw = dict(fwd)
    kw.update(masks or {})
    out, w = m(bound["query"], bound["key"], bound["value"], **kw)
    gout = rn(*out.shape, dtype=torch.float64)
    params = dict(m.named_parameters())
    names = list(bound) + list(params)
    gs = torch.autograd.grad(out, [bound[k] for k in bound] + list(params.values()), gout)
    lua_opts = ", ".join(["%s=%s" % (k, ("true" if v else "false") if isinstance(v, bool) else v)
                          for k, v in sorted(opts.items())] +
                         ["kdim=%d" % kdim, "vdim=%d" % vdim, 'dtype="float64"'])
    lua_fwd = ", ".join(["%s=%s" % (k, ("true" if v else "false")) for k, v in sorted(fwd.items())] +
                        ["%s=%s" % (k, k) for k in sorted(masks or {})])
    inputs = dict(x)
    inputs.update(masks or {})
    MHA.append((name, E, heads, lua_opts, lua_fwd, inputs, m.state_dict(), [out.detach()] +
                ([w.detach()] if w is not None else []), gout, dict(zip(names, gs))))


section("mha")
mha_case("batch_first_weights_avg", 8, 2, {"batch_first": True}, {"need_weights": True}, 2, 5, 7)
mha_case("seq_first_no_weights", 8, 4, {}, {"need_weights": False}, 3, 6, 6)
mha_case("kdim_vdim_per_head_weights", 12, 3, {"batch_first": True},
         {"need_weights": True, "average_attn_weights": False}, 2, 4, 9, kdim=5, vdim=7)
mha_case("no_bias", 8, 2, {"batch_first": True, "bias": False}, {"need_weights": False}, 2, 5, 5)
kpm = torch.arange(7).view(1, 7) >= torch.tensor([7, 4]).view(2, 1)   # True = padding
mha_case("key_padding_mask", 8, 2, {"batch_first": True}, {"need_weights": True}, 2, 5, 7,
         masks={"key_padding_mask": kpm})
causal = torch.ones(6, 6, dtype=torch.bool).triu(1)                   # True = not allowed
mha_case("bool_attn_mask_causal", 8, 2, {"batch_first": True}, {"need_weights": False}, 2, 6, 6,
         masks={"attn_mask": causal})
mha_case("float_attn_mask_3d_and_padding", 8, 2, {"batch_first": True}, {"need_weights": False},
         2, 5, 7, masks={"attn_mask": rn(4, 5, 7, dtype=torch.float64),
                         "key_padding_mask": kpm})


def write(path):
    lines = [
        "-- Generated by tests/golden/make_sdpa.py from PyTorch %s; do not edit." % torch.__version__,
        "-- sdpa: the attention formula by torch (inputs, a Lua call, output, (rtol, atol), grad_out",
        "-- and the gradients of q, k, v); mha: torch.nn.MultiheadAttention's state dict, inputs,",
        "-- outputs (attn_output, attn_weights) and gradients of inputs and parameters (float64).",
        "local inf, nan = math.huge, 0 / 0",
        "return {", "sdpa = {",
    ]
    for name, lua, inputs, out, (rtol, atol), gout, grads in SDPA:
        lines.append("{name=%s, lua=%s, rtol=%r, atol=%r," % (lua_str(name), lua_str(lua), rtol, atol))
        lines.append(" inputs=%s," % lua_map(inputs))
        lines.append(" output=%s," % lua_tensor(out))
        lines.append(" grad_out=%s," % lua_tensor(gout))
        lines.append(" grads=%s}," % lua_map(grads))
    lines.append("},")
    lines.append("mha = {")
    for name, E, heads, opts, fwd, inputs, state, outs, gout, grads in MHA:
        lines.append("{name=%s, embed_dim=%d, num_heads=%d, opts=%s, forward=%s," % (
            lua_str(name), E, heads, lua_str("{" + opts + "}"), lua_str("{" + fwd + "}")))
        lines.append(" state=%s," % lua_map(state))
        lines.append(" inputs=%s," % lua_map(inputs))
        lines.append(" outputs={%s}," % ", ".join(lua_tensor(o) for o in outs))
        lines.append(" grad_out=%s," % lua_tensor(gout))
        lines.append(" grads=%s}," % lua_map(grads))
    lines.append("},")
    lines.append("}")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


write("tests/golden/sdpa_cases.lua")
