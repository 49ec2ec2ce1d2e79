#!/usr/bin/env python3
"""NumPy's own .npy and .npz files, for tests/npy_spec.lua.

Run from the repository root with the PyPI environment's python (numpy):

    py=$(scripts/py-venv.sh); $py tests/golden/make_npy.py

writes into tests/golden/npy/ (all committed, a few tens of KB):
  *.npy            arrays np.save (or np.lib.format.write_array) wrote: every
                   dtype ddplua reads, C and Fortran order, 0-d, empty,
                   big-endian, format versions 2.0 and 3.0, plus a few
                   headers other writers produce (unaligned data, Python 2's
                   3L ints, double quotes and another key order)
  unsupported_*.npy  dtypes ddplua refuses (complex, object, str, uint64,
                   structured, datetime), as numpy writes them
  resaved/*.npy    np.save of each array as ddplua holds it (little-endian,
                   int8/int16/uint16 as int32, uint32 as int64, the same
                   memory order): what ddplua's save_npy must write, byte
                   for byte
  *.npz            np.savez, np.savez_compressed, a Zip64 archive (Python's
                   zipfile with its Zip64 limits lowered, so the central
                   directory and end records are Zip64 ones), and one with a
                   member that is not a .npy file
  cases.lua        the expected values: dtype, shape, strides, values in
                   row-major order
"""
import io
import math
import os
import shutil
import struct
import sys
import zipfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "npy")

inf, nan = math.inf, math.nan

# numpy's dtype -> ddplua's
OURS = {
    "float32": "float32", "float64": "float64", "float16": "float16",
    "int64": "int64", "int32": "int32", "uint8": "uint8", "bool": "bool",
    "int16": "int32", "int8": "int32", "uint16": "int32", "uint32": "int64",
}
AS_NUMPY = {"int32": np.int32, "int64": np.int64}


def arrays():
    """name -> (array, how): how is "save" or a format version."""
    a = np.array
    f = np.asfortranarray
    cases = {
        # every dtype, C order
        "f4": a([[0.0, -1.5, 3.25], [inf, -inf, nan]], dtype="<f4"),
        "f8": a([1 / 3, -2.5e300, 5e-324], dtype="<f8"),
        "f2": a([1.0, -2.0, 0.1, 65504.0, -inf, 2.0 ** -24], dtype="<f2"),
        "i8": a([-2 ** 63, 2 ** 63 - 1, 2 ** 53 + 1, -5], dtype="<i8"),
        "i4": a([[-2 ** 31, 2 ** 31 - 1], [0, -1]], dtype="<i4"),
        "i2": a([-32768, 32767, -1, 0], dtype="<i2"),
        "i1": a([-128, 127, -1, 5], dtype="|i1"),
        "u1": a([0, 1, 127, 255], dtype="|u1"),
        "u2": a([0, 65535, 1234], dtype="<u2"),
        "u4": a([0, 2 ** 32 - 1, 123456789], dtype="<u4"),
        "b1": a([True, False, True], dtype="|b1"),
        # Fortran order (a (1, 5) array is C-contiguous too: numpy writes it
        # as C order)
        "f4_fortran": f(np.arange(6, dtype="<f4").reshape(2, 3) - 2.5),
        "i8_fortran": f(np.arange(24, dtype="<i8").reshape(2, 3, 4) * 1000003),
        "f8_fortran_unit": f(np.arange(6, dtype="<f8").reshape(3, 1, 2) / 8),
        "i2_fortran": f(np.arange(6, dtype="<i2").reshape(3, 2) - 3),
        "u1_row": f(np.arange(5, dtype="|u1").reshape(1, 5)),
        # 0-d and empty
        "scalar_f8": a(42.5, dtype="<f8"),
        "scalar_i8": a(-7, dtype="<i8"),
        "scalar_b1": a(True, dtype="|b1"),
        "empty_f4": np.zeros((0,), dtype="<f4"),
        "empty_2d": np.zeros((0, 3), dtype="<f4"),
        "empty_3d_fortran": f(np.zeros((2, 0, 3), dtype="<i8")),
        # big-endian
        "be_f4": a([[1.5, -2.0, inf], [0.0, 3.25, -0.5]], dtype=">f4"),
        "be_i8": a([-2 ** 63, 1, 2 ** 40 + 3], dtype=">i8"),
        "be_i2": a([-2, 300, -32768, 7], dtype=">i2"),
        "be_f2": a([1.0, -0.5, 65504.0], dtype=">f2"),
        "be_u4": a([1, 2 ** 32 - 2], dtype=">u4"),
        "be_f8_fortran": f(a([[1.0, 2.0], [3.0, -4.5]], dtype=">f8")),
    }
    out = {k: (v, "save") for k, v in cases.items()}
    out["v2_f4"] = (a([1.0, 2.5, -3.0], dtype="<f4"), (2, 0))
    out["v3_i4"] = (a([[1, 2, 3], [4, 5, 6]], dtype="<i4"), (3, 0))
    return out


def write(path, data):
    with open(path, "wb") as fh:
        fh.write(data)


def saved(arr, how="save"):
    b = io.BytesIO()
    if how == "save":
        np.save(b, arr)
    else:
        np.lib.format.write_array(b, arr, version=how)
    return b.getvalue()


def handmade(header, data):
    """A v1.0 file with the header text as given (no padding added)."""
    h = header.encode("latin1")
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h + data


def other_writers():
    out = {}
    # data at offset 75: not aligned for 8-byte elements
    h = "{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }"
    h += " " * (75 - 10 - len(h) - 1) + "\n"
    out["unaligned_f8"] = (handmade(h, np.array([1.5, -2.25, 3.0], "<f8").tobytes()),
                           np.array([1.5, -2.25, 3.0], "<f8"))
    # Python 2's numpy wrote 3L for a long
    h = "{'descr': '<i8', 'fortran_order': False, 'shape': (3L,), }\n"
    out["py2_long"] = (handmade(h, np.array([4, 5, 6], "<i8").tobytes()), np.array([4, 5, 6], "<i8"))
    # double quotes, another order, no trailing comma, no padding
    h = '{"shape": (2, 2), "fortran_order": True, "descr": "<i4"}'
    arr = np.asfortranarray(np.array([[1, 2], [3, 4]], "<i4"))
    out["other_order"] = (handmade(h, arr.tobytes(order="F")), arr)
    return out


def unsupported():
    a = np.array
    return {
        "unsupported_c8": (a([1 + 2j], dtype="<c8"), "complex64"),
        "unsupported_object": (a([1, "x"], dtype=object), "object"),
        "unsupported_str": (a(["ab", "c"], dtype="<U2"), "str"),
        "unsupported_u8": (a([1, 2], dtype="<u8"), "uint64"),
        "unsupported_struct": (np.zeros(2, dtype=[("a", "<f4"), ("b", "<i4")]), "structured"),
        "unsupported_datetime": (a(["2020-01-01"], dtype="<M8[D]"), "datetime64"),
    }


def npz_arrays():
    return {
        "x": np.array([True, False, False, True]),
        "scalar": np.array(2.5),
        "fmat": np.asfortranarray(np.arange(6, dtype="<f8").reshape(2, 3) / 4),
        "big": np.array([1, -2, 3], dtype=">i4"),
        "w\u00e4rme": np.arange(4, dtype="<f2"),
        "empty": np.zeros((0, 2), dtype="<f4"),
    }


def npz_positional():
    return [np.arange(6, dtype="<f4").reshape(2, 3), np.arange(5, dtype="<i8") - 2]


def zip64_npz(path):
    """np.savez with Python's Zip64 limits lowered: every central directory
    entry gets a Zip64 extra field and the archive Zip64 end records."""
    saved_limits = zipfile.ZIP64_LIMIT, zipfile.ZIP_FILECOUNT_LIMIT
    zipfile.ZIP64_LIMIT, zipfile.ZIP_FILECOUNT_LIMIT = 1, 1
    try:
        np.savez(path, *npz_positional(), **npz_arrays())
    finally:
        zipfile.ZIP64_LIMIT, zipfile.ZIP_FILECOUNT_LIMIT = saved_limits
    with open(path, "rb") as fh:
        data = fh.read()
    assert b"PK\x06\x06" in data and b"PK\x06\x07" in data, "no Zip64 end records"


def lua_str(s):
    out = []
    for ch in s.encode():
        c = chr(ch)
        out.append(c if 32 <= ch < 127 and c not in '"\\' else "\\%d" % ch)
    return '"' + "".join(out) + '"'


def lua_value(v, ours):
    if ours == "bool":
        return "true" if v else "false"
    if ours == "int64":
        v = int(v)
        if v == -2 ** 63:
            return "(-9223372036854775807LL - 1)"
        return "%dLL" % v
    if ours in ("int32", "uint8"):
        return "%d" % int(v)
    v = float(v)
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return repr(v)


def lua_array(arr):
    ours = OURS[arr.dtype.name]
    vals = arr.flatten(order="C").tolist()
    strides = [s // arr.itemsize for s in arr.strides]
    return "{dtype=%s, shape={%s}, strides={%s}, values={%s}}" % (
        lua_str(ours), ", ".join(str(s) for s in arr.shape), ", ".join(str(s) for s in strides),
        ", ".join(lua_value(v, ours) for v in vals))


def as_ours(arr):
    """The array as ddplua holds it: little-endian, widened, same order."""
    name = OURS[arr.dtype.name]
    dt = np.dtype(AS_NUMPY.get(name, arr.dtype.newbyteorder("<") if arr.dtype.itemsize > 1 else arr.dtype))
    return arr.astype(dt.newbyteorder("<") if dt.itemsize > 1 else dt, order="K")


def main():
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    os.makedirs(os.path.join(OUT, "resaved"))
    lines = ["-- Generated by tests/golden/make_npy.py; do not edit.",
             "local inf, nan = math.huge, 0 / 0", "return {", "npy = {"]
    every = {}
    for name, (arr, how) in sorted(arrays().items()):
        every[name] = (saved(arr, how), arr)
    every.update(other_writers())
    for name, (data, arr) in sorted(every.items()):
        fname = name + ".npy"
        write(os.path.join(OUT, fname), data)
        back = np.load(os.path.join(OUT, fname))
        assert back.dtype == arr.dtype and back.shape == arr.shape, name
        assert np.array_equal(back, arr, equal_nan=arr.dtype.kind == "f"), name
        write(os.path.join(OUT, "resaved", fname), saved(as_ours(back)))
        lines.append("  [%s] = %s," % (lua_str(fname), lua_array(back)))
    lines.append("},")
    lines.append("unsupported = {")
    for name, (arr, what) in sorted(unsupported().items()):
        fname = name + ".npy"
        np.save(os.path.join(OUT, fname), arr, allow_pickle=True)
        descr = np.lib.format.dtype_to_descr(arr.dtype)
        lines.append("  [%s] = {descr=%s, what=%s}," % (
            lua_str(fname), lua_str(descr if isinstance(descr, str) else "list"), lua_str(what)))
    lines.append("},")
    lines.append("npz = {")
    np.savez(os.path.join(OUT, "savez.npz"), *npz_positional(), **npz_arrays())
    np.savez_compressed(os.path.join(OUT, "savez_compressed.npz"), *npz_positional(), **npz_arrays())
    zip64_npz(os.path.join(OUT, "zip64.npz"))
    p = os.path.join(OUT, "extra_member.npz")
    np.savez(p, a=np.arange(3, dtype="<i4"))
    with zipfile.ZipFile(p, "a") as z:
        z.writestr("notes.txt", "not an array")
    for fname in ("savez.npz", "savez_compressed.npz", "zip64.npz", "extra_member.npz"):
        with np.load(os.path.join(OUT, fname)) as z:
            keys = [k for k in z.files if not k.endswith(".txt")]
            lines.append("  [%s] = {names={%s}, arrays={" % (lua_str(fname), ", ".join(lua_str(k) for k in keys)))
            for k in keys:
                lines.append("    [%s] = %s," % (lua_str(k), lua_array(z[k])))
            lines.append("  }},")
    lines.append("},")
    lines.append("}")
    with open(os.path.join(OUT, "cases.lua"), "w") as fh:
        fh.write("\n".join(lines) + "\n")
    total = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(OUT) for f in fs)
    print("wrote %s (%d bytes, numpy %s)" % (OUT, total, np.__version__))


if __name__ == "__main__":
    sys.exit(main())
