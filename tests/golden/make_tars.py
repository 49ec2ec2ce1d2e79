#!/usr/bin/env python3
"""Tar shards Python wrote, for tests/webdataset_spec.lua.

Run from the repository root with the PyPI environment's python (it needs
the webdataset package: $py -m pip install webdataset):

    py=$(scripts/py-venv.sh); $py tests/golden/make_tars.py

writes into tests/golden/tars/ (all committed, about 60 KB):
  gnu.tar      tarfile.GNU_FORMAT: a long name (a GNU 'L' member), a
               directory and a symbolic link (skipped by readers)
  pax.tar      tarfile.PAX_FORMAT: a long name and a non-ASCII one in pax
               'x' headers, a pax global header ('g')
  ustar.tar    tarfile.USTAR_FORMAT: a name of 150 bytes split into the
               header's prefix and name, a hard link, a FIFO
  base256.tar  GNU format with one member's size rewritten in base-256 (as
               GNU tar writes sizes of 8 GiB and more) and its checksum made
               again
  samples.tar  PAX format, names in webdataset's corner cases: a key with
               dots in its directory, extensions of two parts, upper case,
               no extension, a basename starting with a dot, a top-level
               __meta__ file, "./" prefixes, an empty member
  expected.lua for each tar: tarfile's listing of its regular members
               (name, offset of the data, size, the bytes) and, for
               samples.tar, webdataset's own samples (key and extensions,
               in order) as webdataset.WebDataset gives them
"""
import io
import os
import sys
import tarfile

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "tars")
MTIME = 1700000000


def add(tf, name, data=b"", **kw):
    ti = tarfile.TarInfo(name)
    ti.size = len(data)
    ti.mtime = MTIME
    ti.mode = 0o644
    for k, v in kw.items():
        setattr(ti, k, v)
    tf.addfile(ti, io.BytesIO(data) if ti.isreg() else None)


def make(path, fmt, members, pax_headers=None):
    with tarfile.open(path, "w", format=fmt, pax_headers=pax_headers or {}) as tf:
        for m in members:
            add(tf, *m[:2], **(m[2] if len(m) > 2 else {}))


def lua_bytes(b):
    out = []
    for c in b:
        ch = chr(c)
        if ch == '"' or ch == "\\":
            out.append("\\" + ch)
        elif 32 <= c < 127:
            out.append(ch)
        else:
            out.append("\\%03d" % c)
    return '"' + "".join(out) + '"'


def listing(path):
    with tarfile.open(path) as tf:
        rows = []
        for m in tf.getmembers():
            if m.isreg():
                data = tf.extractfile(m).read()
                rows.append((m.name.encode("utf-8", "surrogateescape"), m.offset_data, m.size, data))
        return rows


def base256(src, dst, member):
    """Rewrites member's size field in base-256 and makes its checksum again."""
    raw = bytearray(open(src, "rb").read())
    off = 0
    while off < len(raw):
        h = raw[off:off + 512]
        if h == bytes(512):
            break
        name = h[:100].rstrip(b"\0").decode()
        size = int(h[124:136].rstrip(b"\0 ") or b"0", 8)
        if name == member:
            field = bytearray(12)
            field[0] = 0x80
            field[4:12] = size.to_bytes(8, "big")
            raw[off + 124:off + 136] = field
            raw[off + 148:off + 156] = b" " * 8
            chk = sum(raw[off:off + 512])
            raw[off + 148:off + 156] = b"%06o\0 " % chk
        off += 512 + (size + 511) // 512 * 512
    open(dst, "wb").write(bytes(raw))


def main():
    os.makedirs(OUT, exist_ok=True)
    long_name = "deep/" + "d" * 60 + "/" + "x" * 70 + "/sample001.jpg"
    make(os.path.join(OUT, "gnu.tar"), tarfile.GNU_FORMAT, [
        ("train", b"", {"type": tarfile.DIRTYPE, "mode": 0o755}),
        ("train/000001.jpg", b"\xff\xd8\xff\xe0 not really a jpeg"),
        ("train/000001.cls", b"7"),
        (long_name, b"long name data"),
        ("train/link.jpg", b"", {"type": tarfile.SYMTYPE, "linkname": "000001.jpg"}),
        ("train/000002.txt", b"a caption\n"),
    ])
    make(os.path.join(OUT, "pax.tar"), tarfile.PAX_FORMAT, [
        ("p/" + "y" * 120 + ".json", b'{"label": 3, "name": "long"}'),
        ("p/caf\u00e9.txt", "na\u00efve caf\u00e9".encode()),
        ("p/plain.cls", b"12"),
    ], pax_headers={"comment": "a global header"})
    prefix_name = "a" * 80 + "/" + "b" * 69 + ".txt"
    make(os.path.join(OUT, "ustar.tar"), tarfile.USTAR_FORMAT, [
        (prefix_name, b"split into prefix and name"),
        ("u/hard.txt", b"", {"type": tarfile.LNKTYPE, "linkname": "u/000000.cls"}),
        ("u/fifo", b"", {"type": tarfile.FIFOTYPE}),
        ("u/000000.cls", b"0"),
    ])
    make(os.path.join(OUT, "gnu_for_base256.tar"), tarfile.GNU_FORMAT, [
        ("b/000000.txt", b"small, in octal"),
        ("b/000001.txt", b"size field in base-256"),
    ])
    base256(os.path.join(OUT, "gnu_for_base256.tar"), os.path.join(OUT, "base256.tar"), "b/000001.txt")
    os.remove(os.path.join(OUT, "gnu_for_base256.tar"))
    make(os.path.join(OUT, "samples.tar"), tarfile.PAX_FORMAT, [
        ("__meta__", b"skipped: top-level metadata"),
        ("v1.2/s0.jpg", b"jpeg 0"),
        ("v1.2/s0.seg.png", b"png 0"),
        ("v1.2/s0.cls", b"0"),
        ("s1.JPG", b"jpeg 1"),
        ("s1.cls", b" 1\n"),
        ("noext", b"skipped: no extension"),
        ("./s2.jpg", b"jpeg 2"),
        ("./s2.cls", b"2"),
        ("dir/.hidden.jpg", b"jpeg 3"),
        ("dir/.hidden.cls", b"3"),
        ("s4.jpg", b""),
        ("s4.cls", b"4"),
        ("s4.json", b'{"a": [1, 2.5, "x"], "b": null, "c": "\\u00e9"}'),
    ])
    import webdataset as wds
    tars = ["gnu.tar", "pax.tar", "ustar.tar", "base256.tar", "samples.tar"]
    with open(os.path.join(OUT, "expected.lua"), "w") as f:
        f.write("-- generated by tests/golden/make_tars.py: Python's tarfile listing of each tar's\n"
                "-- regular members {name, data offset, size, bytes}, and webdataset's samples.\n")
        f.write("return {\n  tarfile = {\n")
        for t in tars:
            f.write("    [%s] = {\n" % lua_bytes(t.encode()))
            for name, off, size, data in listing(os.path.join(OUT, t)):
                f.write("      {%s, %d, %d, %s},\n" % (lua_bytes(name), off, size, lua_bytes(data)))
            f.write("    },\n")
        f.write("  },\n  webdataset = {\n")
        for t in tars:
            f.write("    [%s] = {\n" % lua_bytes(t.encode()))
            ds = wds.WebDataset(os.path.join(OUT, t), shardshuffle=False, empty_check=False)
            for s in ds:
                exts = sorted(k for k in s if not k.startswith("__"))
                f.write("      {%s, {%s}},\n" % (lua_bytes(s["__key__"].encode()),
                                               ", ".join(lua_bytes(e.encode()) for e in exts)))
            f.write("    },\n")
        f.write("  },\n}\n")
    total = sum(os.path.getsize(os.path.join(OUT, t)) for t in os.listdir(OUT))
    print("wrote %d files, %d bytes, into %s" % (len(os.listdir(OUT)), total, OUT))


if __name__ == "__main__":
    sys.exit(main())
