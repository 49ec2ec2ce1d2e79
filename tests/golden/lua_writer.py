"""lua_writer.py: how the golden-value scripts (make.py, make_nn.py,
make_sdpa.py) write PyTorch tensors as Lua tables: strings, numbers (NaN,
infinities, -0.0, integers past 2^53 as LL literals, every float exact by
repr) and tensors as {dtype=, shape=, values=}.
"""
import math

import torch

DTYPES = {
    torch.float32: "float32", torch.float64: "float64", torch.int32: "int32",
    torch.int64: "int64", torch.uint8: "uint8", torch.bool: "bool",
    torch.bfloat16: "bfloat16", torch.float16: "float16",
}


def lua_str(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def lua_num(v, dtype):
    if dtype == torch.bool:
        return "true" if v else "false"
    if dtype in (torch.int32, torch.int64, torch.uint8):
        v = int(v)
        return "%dLL" % v if abs(v) > 2 ** 53 else "%d" % v
    v = float(v)
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    if v == int(v) and abs(v) < 2 ** 53:
        return ("-0.0" if math.copysign(1, v) < 0 else "0") if v == 0 else "%d" % v
    r = repr(v)
    assert float(r) == v
    return r


def lua_tensor(x):
    vals = x.detach().flatten().tolist()
    return "{dtype=%s, shape={%s}, values={%s}}" % (
        lua_str(DTYPES[x.dtype]), ", ".join(str(s) for s in x.shape),
        ", ".join(lua_num(v, x.dtype) for v in vals))
