#!/usr/bin/env python3
"""Python reads the tar shards ddplua writes: runs build/ddplua to write
shards with data.ShardWriter into a temporary folder, then checks them with
Python's tarfile (random access and stream mode), the webdataset package
and the index cache's documented format.

Run from the repository root, once after a change to the writer (make all
first), with the PyPI environment's python and webdataset installed:

    py=$(scripts/py-venv.sh); $py -m pip install webdataset
    $py tests/golden/check_tars_roundtrip.py

Checked: every member's name (long ones in pax headers, non-ASCII ones),
size and bytes as ddplua wrote them; webdataset's samples (keys,
extensions, the bytes, cls as text); each "<shard>.idx" as
runtime/include/ddplua_io.h describes it (magic, the tar's size and
mtime to the nanosecond, records equal to tarfile's offset_data and size,
the names, the CRC-32).
"""
import os
import struct
import subprocess
import sys
import tarfile
import tempfile
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

WRITE = r'''
local data = require "ddp.data"
local dir = arg[1]
local w = data.ShardWriter(dir .. "/rt-%06d.tar", { maxcount = 5 })
for i = 0, 11 do
  local key = (i % 4 == 1) and ("deep/" .. ("d"):rep(90) .. "/" .. ("%06d"):format(i))
           or (i % 4 == 2) and ("caf\195\169/" .. ("%06d"):format(i)) or ("%06d"):format(i)
  local s = { __key__ = key, cls = i % 3, txt = "caption " .. i, json = { i = i, name = "n" .. i } }
  s.jpg = (i == 3) and "" or (i == 7) and ("\0\255"):rep(300000) or ("jpeg %d \0 bytes"):format(i)
  w:write(s)
end
for _, p in ipairs(w:close()) do print(p) end
'''


def expected(i):
    if i % 4 == 1:
        key = "deep/" + "d" * 90 + "/%06d" % i
    elif i % 4 == 2:
        key = "caf\u00e9/%06d" % i
    else:
        key = "%06d" % i
    jpg = b"" if i == 3 else b"\0\xff" * 300000 if i == 7 else b"jpeg %d \0 bytes" % i
    js = b'{"i":%d,"name":"n%d"}' % (i, i)
    return key, {"cls": b"%d" % (i % 3), "jpg": jpg, "json": js, "txt": b"caption %d" % i}


def check_idx(tar_path):
    raw = open(tar_path + ".idx", "rb").read()
    assert raw[:8] == b"DLTARIX1", raw[:8]
    size, sec, nsec, n, m = struct.unpack("<5q", raw[8:48])
    st = os.stat(tar_path)
    assert (size, sec, nsec) == (st.st_size, st.st_mtime_ns // 10**9, st.st_mtime_ns % 10**9), (size, sec, nsec)
    assert len(raw) == 48 + 24 * n + m + 4
    assert struct.unpack("<I", raw[-4:])[0] == zlib.crc32(raw[:-4])
    names = raw[48 + 24 * n:48 + 24 * n + m]
    with tarfile.open(tar_path) as tf:
        regs = [t for t in tf.getmembers() if t.isreg()]
    assert len(regs) == n
    for k, t in enumerate(regs):
        off, sz, at = struct.unpack("<3q", raw[48 + 24 * k:72 + 24 * k])
        name = names[at:names.index(b"\0", at)].decode()
        assert (name, off, sz) == (t.name, t.offset_data, t.size), (name, off, sz, t.name, t.offset_data, t.size)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "write.lua")
        open(script, "w").write(WRITE)
        out = subprocess.run([os.path.join(ROOT, "build", "ddplua"), script, tmp], check=True,
                             capture_output=True, text=True).stdout.split()
        assert [os.path.basename(p) for p in out] == ["rt-000000.tar", "rt-000001.tar", "rt-000002.tar"], out
        seen = 0
        for p in out:
            with tarfile.open(p) as tf:  # random access
                members = tf.getmembers()
                for t in members:
                    assert t.isreg() and t.mode == 0o644, t
                    key, ext = t.name.split(".", 1)
                    i = int(key[-6:])
                    want_key, vals = expected(i)
                    assert key == want_key, (key, want_key)
                    assert tf.extractfile(t).read() == vals[ext], t.name
                    seen += 1
            with open(p, "rb") as f, tarfile.open(fileobj=f, mode="r|") as tf:  # a stream, as webdataset reads
                assert [t.name for t in tf] == [t.name for t in members]
            check_idx(p)
        assert seen == 12 * 4, seen
        import webdataset as wds
        samples = list(wds.WebDataset(out, shardshuffle=False))
        assert len(samples) == 12
        for i, s in enumerate(samples):
            key, vals = expected(i)
            assert s["__key__"] == key, (s["__key__"], key)
            assert {k: v for k, v in s.items() if not k.startswith("__")} == vals, i
        decoded = list(wds.WebDataset(out, shardshuffle=False).decode().to_tuple("cls", "txt", "json"))
        assert decoded[4] == (1, "caption 4", {"i": 4, "name": "n4"}), decoded[4]
    print("ok: tarfile and webdataset %s read ddplua's shards; the index caches are as documented"
          % wds.__version__)


if __name__ == "__main__":
    sys.exit(main())
