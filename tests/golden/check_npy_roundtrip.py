#!/usr/bin/env python3
"""NumPy reads what ddplua writes: runs tests/golden/write_npy.lua with
build/ddplua into tests/golden/npy/ddplua/ and checks every file with numpy.

Run from the repository root, once after a change to the writer (make all
first), with the PyPI environment's python:

    py=$(scripts/py-venv.sh); $py tests/golden/check_npy_roundtrip.py

Each .npy must be byte for byte what np.save writes for the same array
(computed here again from the formulas of write_npy.lua), and np.load must
give its values, dtype, shape and memory order; the .npz must pass
zipfile's CRC check (testzip), hold the members np.savez would name, and
np.load must give every array.  The files stay committed:
tests/npy_spec.lua checks that ddplua still writes exactly these bytes.
"""
import io
import os
import shutil
import subprocess
import sys
import zipfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "golden", "npy", "ddplua")


def arrays():
    """write_npy.lua's arrays, computed by numpy."""
    return {
        "t_f32": np.arange(12, dtype=np.float32).reshape(3, 4).T,
        "slice_i64": np.ascontiguousarray(np.arange(20, dtype=np.int64).reshape(4, 5)[:, 1:4]),
        "scalar_f64": np.array(2.5),
        "empty_f32": np.zeros((0, 3), dtype=np.float32),
        "even_bool": np.arange(6) % 2 == 0,
        "quarter_f16": (np.arange(5, dtype=np.float32) / 4).astype(np.float16),
        "u8": np.arange(0, 256, 17, dtype=np.uint8),
        "i32": np.arange(-6, 6, dtype=np.int32).reshape(3, 4),
        "big_i64": np.array([-2 ** 62, 2 ** 53 + 2, -1], dtype=np.int64),
    }


def npz_contents(a):
    return {
        "arr_0": a["t_f32"], "arr_1": a["slice_i64"], "scalar": a["scalar_f64"], "empty": a["empty_f32"],
        "flags": a["even_bool"], "w\u00e4rme": a["quarter_f16"], "u8": a["u8"], "i32": a["i32"],
    }


def same(got, want, what):
    assert got.dtype == want.dtype, "%s: dtype %s, expected %s" % (what, got.dtype, want.dtype)
    assert got.shape == want.shape, "%s: shape %s, expected %s" % (what, got.shape, want.shape)
    assert np.array_equal(got, want), "%s: values\n%s\nexpected\n%s" % (what, got, want)
    assert got.flags.f_contiguous == want.flags.f_contiguous, "%s: memory order differs" % what


def main():
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)
    lua = "dofile('tests/golden/write_npy.lua')(%r)" % OUT
    subprocess.run([os.path.join(ROOT, "build", "ddplua"), "-e", lua], cwd=ROOT, check=True)
    a = arrays()
    for name, want in sorted(a.items()):
        path = os.path.join(OUT, name + ".npy")
        b = io.BytesIO()
        np.save(b, want)
        with open(path, "rb") as fh:
            data = fh.read()
        assert data == b.getvalue(), "%s: differs from np.save's bytes\n%r\n%r" % (
            name, data[:160], b.getvalue()[:160])
        same(np.load(path), want, name)
        same(np.load(path, mmap_mode="r"), want, name + " (mmap_mode='r')")
    path = os.path.join(OUT, "arrays.npz")
    with zipfile.ZipFile(path) as z:
        assert z.testzip() is None, "a member's CRC is wrong"
        for info in z.infolist():
            assert info.compress_type == zipfile.ZIP_STORED, info.filename
    want = npz_contents(a)
    with np.load(path) as z:
        assert sorted(z.files) == sorted(want), "members %s, expected %s" % (z.files, sorted(want))
        for k, w in want.items():
            same(z[k], w, "arrays.npz: " + k)
    names = sorted(os.listdir(OUT))
    print("numpy %s reads all %d files ddplua wrote in %s" % (np.__version__, len(names), OUT))


if __name__ == "__main__":
    sys.exit(main())
