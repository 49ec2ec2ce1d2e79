#!/usr/bin/python3
"""Safetensors files written by a second, independent writer, for
tests/safetensors_spec.lua.

Run from the repository root with Debian's python3 (torch 1.13; the
`safetensors` package is not installed, so the format is written by hand
with json and struct, laid out exactly as the reference implementation
does: an 8-byte little-endian header length, compact JSON with
"__metadata__" first, padded with spaces to a multiple of 8, tensors sorted
by descending dtype alignment and then by name):

    /usr/bin/python3 tests/golden/make_safetensors.py

writes tests/golden/st_*.safetensors and tests/golden/safetensors_cases.lua
(the expected values; all committed).

    /usr/bin/python3 tests/golden/make_safetensors.py --read FILE

reads a file ddplua wrote, checks its layout against the reference's rules
and prints one line per tensor, "name<TAB>dtype<TAB>shape<TAB>values"
(values with repr(), so the spec compares them exactly), and per metadata
entry, "meta<TAB>key<TAB>value as hex of its UTF-8".
"""
import json
import math
import os
import struct
import sys

import torch

assert torch.__version__.startswith("1.13"), torch.__version__

# name in the file, torch dtype, ddplua name, rank in the reference's Dtype
# enum (which orders tensors in the file)
DTYPES = [
    ("BOOL", torch.bool, "bool", 0),
    ("U8", torch.uint8, "uint8", 1),
    ("F16", torch.float16, "float16", 7),
    ("BF16", torch.bfloat16, "bfloat16", 8),
    ("I32", torch.int32, "int32", 9),
    ("F32", torch.float32, "float32", 11),
    ("F64", torch.float64, "float64", 12),
    ("I64", torch.int64, "int64", 13),
]
BY_TORCH = {d[1]: d for d in DTYPES}
BY_FILE = {d[0]: d for d in DTYPES}
HERE = os.path.dirname(os.path.abspath(__file__))


def raw_bytes(t):
    t = t.contiguous()
    if t.dtype == torch.bfloat16:  # numpy has no bfloat16: same bits as int16
        t = t.view(torch.int16)
    return t.numpy().tobytes()


def serialize(tensors, metadata=None, pad=True):
    """The reference's layout; pad=False leaves the header length as it is,
    so data can start misaligned (as some other writers do)."""
    order = sorted(tensors, key=lambda n: (-BY_TORCH[tensors[n].dtype][3], n))
    header, data, offset = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = dict(sorted(metadata.items()))
    for name in order:
        t = tensors[name]
        b = raw_bytes(t)
        header[name] = {"dtype": BY_TORCH[t.dtype][0], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(b)]}
        data.append(b)
        offset += len(b)
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    if pad:
        text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(data)


def golden_tensors():
    inf, nan = math.inf, math.nan
    f = torch.tensor
    return {
        "f32": f([[0.0, -1.5, 3.25], [inf, -inf, nan]], dtype=torch.float32),
        "f64": f([1 / 3, -2.5e300, 5e-324], dtype=torch.float64),
        "i32": f([[-2**31, 2**31 - 1], [0, -1]], dtype=torch.int32),
        "i64": f([-2**63, 2**63 - 1, 2**53 + 1, -5], dtype=torch.int64),
        "u8": f([0, 1, 127, 255], dtype=torch.uint8),
        "flags": f([True, False, True], dtype=torch.bool),
        "bf16": f([1.0, -2.0, 0.5, 3.140625, -inf, 3.3895313892515355e38], dtype=torch.bfloat16),
        "f16": f([1.0, -2.0, 0.1, 65504.0, -inf, 2.0**-24], dtype=torch.float16),
        "scalar": f(42.5, dtype=torch.float32),
        "empty": torch.zeros(0, 3, dtype=torch.float32),
        "layer.0.w\u00fc\u540d": f([[1.0], [2.0]], dtype=torch.float64),
    }


GOLDEN_META = {"format": "pt", "note": "quote \" backslash \\ newline \n tab \t \u00fcn\u00ef"}


def unaligned_tensors():
    f = torch.tensor
    return {
        "a64": f([1.5, -2.25], dtype=torch.float64),
        "b64": f([7, -8], dtype=torch.int64),
        "c32": f([0.5], dtype=torch.float32),
        "d16": f([1.0, 2.0, 3.0], dtype=torch.float16),
    }


def lua_str(s):
    out = []
    for ch in s.encode():
        c = chr(ch)
        out.append(c if 32 <= ch < 127 and c not in '"\\' else "\\%d" % ch)
    return '"' + "".join(out) + '"'


def lua_value(v, dtype):
    if dtype == torch.bool:
        return "true" if v else "false"
    if dtype in (torch.int64,):
        return "%dLL" % v if v != -2**63 else "(-9223372036854775807LL - 1)"
    if dtype in (torch.int32, torch.uint8):
        return "%d" % v
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return repr(float(v))


def lua_case(tensors, metadata):
    lines = ["  tensors = {"]
    for name in sorted(tensors):
        t = tensors[name]
        vals = t.reshape(-1).tolist()
        lines.append("    [%s] = {dtype=%s, shape={%s}, values={%s}}," % (
            lua_str(name), lua_str(BY_TORCH[t.dtype][2]),
            ", ".join(str(s) for s in t.shape),
            ", ".join(lua_value(v, t.dtype) for v in vals)))
    lines.append("  },")
    lines.append("  metadata = {%s}," % ", ".join(
        "[%s] = %s" % (lua_str(k), lua_str(v)) for k, v in sorted((metadata or {}).items())))
    return "\n".join(lines)


def make():
    files = [("st_dtypes.safetensors", golden_tensors(), GOLDEN_META, True),
             ("st_unaligned.safetensors", unaligned_tensors(), None, False),
             ("st_empty.safetensors", {}, None, True)]
    out = ["-- Generated by tests/golden/make_safetensors.py; do not edit.",
           "local inf, nan = math.huge, 0 / 0",
           "return {"]
    for fname, tensors, meta, pad in files:
        blob = serialize(tensors, meta, pad)
        with open(os.path.join(HERE, fname), "wb") as fh:
            fh.write(blob)
        out.append("[%s] = {" % lua_str(fname))
        out.append(lua_case(tensors, meta))
        out.append("},")
    out.append("}")
    with open(os.path.join(HERE, "safetensors_cases.lua"), "w") as fh:
        fh.write("\n".join(out) + "\n")


def read(path):
    """An independent reader: checks the reference's layout rules, then
    prints every tensor's values."""
    blob = open(path, "rb").read()
    (n,) = struct.unpack("<Q", blob[:8])
    text = blob[8:8 + n]
    assert n % 8 == 0, "header length %d is not a multiple of 8" % n
    assert text[:1] == b"{", "header does not start with {"
    header = json.loads(text)
    meta = header.pop("__metadata__", {})
    data = blob[8 + n:]
    order = sorted(header, key=lambda k: (-BY_FILE[header[k]["dtype"]][3], k))
    offset = 0
    for name in order:  # contiguous, in the reference's order, tiling the data
        info = header[name]
        assert info["data_offsets"][0] == offset, (name, info, offset)
        offset = info["data_offsets"][1]
    assert offset == len(data), "data is %d bytes, tensors cover %d" % (len(data), offset)
    for name in sorted(header):
        info = header[name]
        fname, dtype, dname, _ = BY_FILE[info["dtype"]]
        b, e = info["data_offsets"]
        numel = math.prod(info["shape"])
        if numel:
            t = torch.frombuffer(bytearray(data[b:e]), dtype=dtype)
        else:
            t = torch.zeros(0, dtype=dtype)
        assert t.numel() == numel
        vals = t.tolist()
        print("%s\t%s\t%s\t%s" % (name, dname, ",".join(str(s) for s in info["shape"]),
                                  ",".join(repr(v) for v in vals)))
    for k, v in sorted(meta.items()):
        print("meta\t%s\t%s" % (k, v.encode().hex()))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--read":
        read(sys.argv[2])
    else:
        make()
