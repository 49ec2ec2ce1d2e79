#!/usr/bin/env python3
"""JPEG and PNG files with torchvision's and PIL's decodings, for tests/image_spec.lua.

Run from the repository root with the PyPI environment's python:

    py=$(scripts/py-venv.sh); $py tests/golden/make_images.py

writes into tests/golden/images/ (all committed, a few hundred KB):
  *.jpg, *.png     small pictures of odd sizes written by PIL: JPEG baseline
                   4:2:0, 4:4:4, progressive, grayscale, CMYK (Adobe), restart
                   markers; PNG RGB, RGBA, gray, gray+alpha, palette, palette
                   with transparency, 16-bit RGB and gray, 1-bit gray, Adam7
                   interlaced
  dec/<file>.<mode>.npy   torchvision.io.decode_image(file, mode) as uint8
                   [C, H, W] (16-bit PNGs: the uint16 result's high byte, as
                   v2.ToDtype(uint8) makes it); where torchvision gives palette
                   indices or a wrong alpha (PIL_INSTEAD), PIL's convert()
  draft/<file>.<m>.npy    PIL's Image.draft("RGB", ...) decoding at scale
                   1/m (libjpeg's DCT scaling, the same as ours) in [3, H, W]
  cases.lua        the file list with each one's header: format, size,
                   stored channels
  folder/          a class-folder tree (nested folders, capitals, a .bmp and
                   a .txt that are not taken)
  folder_cases.lua torchvision's ImageFolder on it: classes, class_to_idx,
                   samples; dec/folder.<i>.npy each sample decoded as RGB
"""
import io
import os
import shutil

import numpy as np
import torch
import torchvision
from PIL import Image
from torchvision.io import ImageReadMode, decode_image

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "images")

MODES = {"unchanged": ImageReadMode.UNCHANGED, "gray": ImageReadMode.GRAY,
         "gray_alpha": ImageReadMode.GRAY_ALPHA, "rgb": ImageReadMode.RGB,
         "rgb_alpha": ImageReadMode.RGB_ALPHA}


# (file, mode) whose reference is PIL's Image.convert(...) instead of
# torchvision 0.29's decode_image
PIL_INSTEAD = {("palette.png", "unchanged"): "RGB", ("palette_trns.png", "unchanged"): "RGBA",
               ("palette.png", "gray_alpha"): "LA", ("palette.png", "rgb_alpha"): "RGBA",
               ("bits1.png", "gray_alpha"): "LA", ("bits1.png", "rgb_alpha"): "RGBA"}


def picture(w, h, seed):
    """A smooth gradient plus noise: detail for the DCT, edges for the chroma."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    r = (x * 255 // max(w - 1, 1))
    g = (y * 255 // max(h - 1, 1))
    b = ((x + y) * 7) % 256
    img = np.stack([r, g, b], -1).astype(np.int32) + rng.integers(-20, 21, (h, w, 3))
    return np.clip(img, 0, 255).astype(np.uint8)


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(os.path.join(OUT, "dec"))
    os.makedirs(os.path.join(OUT, "draft"))
    rgb = picture(37, 29, 1)
    big = picture(101, 77, 2)
    alpha = np.linspace(0, 255, 37 * 29).reshape(29, 37, 1).astype(np.uint8)
    files = {}

    def save(name, im, **kw):
        path = os.path.join(OUT, name)
        im.save(path, **kw)
        files[name] = path

    save("rgb420.jpg", Image.fromarray(rgb), quality=90)
    save("rgb444.jpg", Image.fromarray(rgb), quality=90, subsampling=0)
    save("progressive.jpg", Image.fromarray(big), quality=85, progressive=True)
    save("big.jpg", Image.fromarray(big), quality=90)
    save("gray.jpg", Image.fromarray(rgb).convert("L"), quality=90)
    save("cmyk.jpg", Image.fromarray(rgb).convert("CMYK"), quality=95)
    # restart markers every row of MCUs (libjpeg's -restart): a reader must
    # resynchronise at each
    buf = io.BytesIO()
    Image.fromarray(big).save(buf, "JPEG", quality=80)
    save("restart.jpg", Image.open(io.BytesIO(buf.getvalue())), quality=80, restart_marker_rows=1)

    save("rgb.png", Image.fromarray(rgb))
    save("rgba.png", Image.fromarray(np.concatenate([rgb, alpha], -1), "RGBA"))
    save("gray.png", Image.fromarray(rgb).convert("L"))
    save("gray_alpha.png", Image.fromarray(np.concatenate([rgb[..., :1], alpha], -1), "LA"))
    pal = Image.fromarray(rgb).quantize(colors=16)
    save("palette.png", pal)
    pal_t = pal.copy()
    pal_t.info["transparency"] = 3
    save("palette_trns.png", pal_t, transparency=3)
    save("bits1.png", Image.fromarray((rgb[..., 0] > 127).astype(np.uint8) * 255).convert("1"))
    save("interlaced.png", Image.fromarray(big), optimize=False)
    # 16-bit: PIL writes I;16 gray directly; RGB 16 through raw bytes
    g16 = (rgb[..., 1].astype(np.uint16) * 257 + np.arange(37, dtype=np.uint16)).astype(">u2")
    save("gray16.png", Image.frombuffer("I;16B", (37, 29), g16.tobytes(), "raw", "I;16B", 0, 1))
    # Adam7 interlacing: PIL cannot write it; write the file ourselves below
    os.remove(files.pop("interlaced.png"))
    write_interlaced(os.path.join(OUT, "interlaced.png"), big)
    files["interlaced.png"] = os.path.join(OUT, "interlaced.png")
    write_rgb16(os.path.join(OUT, "rgb16.png"), rgb)
    files["rgb16.png"] = os.path.join(OUT, "rgb16.png")

    lines = ["-- generated by tests/golden/make_images.py (torchvision %s, Pillow %s); do not edit"
             % (torchvision.__version__, Image.__version__), "return {"]
    for name in sorted(files):
        path = files[name]
        data = torchvision.io.read_file(path)
        with Image.open(path) as im:
            w, h = im.size
            stored = {"L": 1, "1": 1, "LA": 2, "RGB": 3, "RGBA": 4, "P": 3, "CMYK": 3,
                      "I;16": 1, "I;16B": 1, "I": 1}.get(im.mode)
            if im.mode == "RGB" and name.endswith("16.png"):
                stored = 3
        fmt = "jpeg" if name.endswith(".jpg") else "png"
        modes, from_pil = [], []
        for mode, m in MODES.items():
            pil = PIL_INSTEAD.get((name, mode))
            if pil:
                # torchvision gives palette indices, or a wrong alpha (1, or
                # the indices), here: PIL's conversion is the reference
                with Image.open(path) as im:
                    arr = np.asarray(im.convert(pil))
                t = torch.from_numpy(arr.reshape(arr.shape[0], arr.shape[1], -1).transpose(2, 0, 1).copy())
                from_pil.append('"%s"' % mode)
            else:
                try:
                    t = decode_image(data, mode=m)
                except RuntimeError:
                    continue  # torchvision refuses it (alpha from a JPEG): not a golden
                if name == "cmyk.jpg" and mode == "unchanged":
                    continue  # torchvision gives the 4 CMYK channels; ddplua RGB
            if t.dtype == torch.uint16:
                t = (t.to(torch.int32) >> 8).to(torch.uint8)
            np.save(os.path.join(OUT, "dec", "%s.%s.npy" % (name, mode)), t.numpy())
            modes.append('"%s"' % mode)
        if fmt == "jpeg" and name in ("big.jpg", "progressive.jpg", "rgb420.jpg"):
            for m in (2, 4, 8):
                with Image.open(path) as im:
                    im.draft("RGB", (w // m, h // m))  # PIL picks the scale min(w // size_w, h // size_h)
                    arr = np.asarray(im.convert("RGB")).transpose(2, 0, 1).copy()
                np.save(os.path.join(OUT, "draft", "%s.%d.npy" % (name, m)), arr)
        lines.append('  {file = "%s", format = "%s", height = %d, width = %d, channels = %d, modes = {%s}, '
                     'from_pil = {%s}},' % (name, fmt, h, w, stored, ", ".join(modes), ", ".join(from_pil)))
    lines.append("}")
    with open(os.path.join(OUT, "cases.lua"), "w") as f:
        f.write("\n".join(lines) + "\n")


def chunk(kind, data):
    import struct
    import zlib
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xffffffff)


def png_file(path, w, h, depth, ctype, interlace, raw):
    import struct
    import zlib
    ihdr = struct.pack(">IIBBBBB", w, h, depth, ctype, 0, 0, interlace)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw, 9)) +
                chunk(b"IEND", b""))


def write_rgb16(path, rgb):
    h, w, _ = rgb.shape
    px = (rgb.astype(np.uint16) * 257 + (np.arange(w, dtype=np.uint16)[None, :, None] * 3)).astype(">u2")
    raw = b"".join(b"\x00" + px[y].tobytes() for y in range(h))
    png_file(path, w, h, 16, 2, 0, raw)


def write_interlaced(path, rgb):
    """Adam7: seven passes of sub-images, each row with filter type 0."""
    h, w, _ = rgb.shape
    passes = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]
    raw = b""
    for x0, y0, dx, dy in passes:
        sub = rgb[y0::dy, x0::dx]
        if sub.shape[0] == 0 or sub.shape[1] == 0:
            continue
        raw += b"".join(b"\x00" + sub[y].tobytes() for y in range(sub.shape[0]))
    png_file(path, w, h, 8, 2, 1, raw)


def make_folder():
    """A small class-folder tree with the orderings that matter (nested
    folders, "a-b" before "a/", capitals first, endings in capitals, files
    that are not taken), and torchvision's ImageFolder's view of it."""
    from torchvision.datasets import DatasetFolder
    root = os.path.join(OUT, "folder")
    tree = {
        "cat/b.png": (9, 7, 11), "cat/a.JPG": (16, 12, 12), "cat/sub/c.png": (5, 6, 13),
        "cat/sub-x/d.png": (6, 5, 14), "cat/sub/deeper/e.jpeg": (8, 8, 15),
        "dog/0.png": (7, 9, 16), "dog/1.jpeg": (12, 10, 17), "Zebra/z.png": (4, 4, 18),
    }
    for rel, (w, h, seed) in tree.items():
        p = os.path.join(root, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        im = Image.fromarray(picture(w, h, seed))
        if rel.lower().endswith((".jpg", ".jpeg")):
            im.save(p, "JPEG", quality=90)
        else:
            im.save(p, "PNG")
    with open(os.path.join(root, "cat", "notes.txt"), "w") as f:
        f.write("not an image\n")
    Image.fromarray(picture(4, 4, 19)).save(os.path.join(root, "dog", "old.bmp"))
    ds = DatasetFolder(root, loader=lambda p: decode_image(p, mode=ImageReadMode.RGB),
                     extensions=(".jpg", ".jpeg", ".png"))
    lines = ["-- generated by tests/golden/make_images.py (torchvision %s): DatasetFolder(folder, decode_image RGB, extensions="
             "(\".jpg\", \".jpeg\", \".png\")); do not edit" % torchvision.__version__, "return {",
             "  classes = {%s}," % ", ".join('"%s"' % c for c in ds.classes),
             "  class_to_idx = {%s}," % ", ".join('["%s"] = %d' % kv for kv in sorted(ds.class_to_idx.items())),
             "  samples = {"]
    for i, (p, t) in enumerate(ds.samples):
        img, _ = ds[i]
        np.save(os.path.join(OUT, "dec", "folder.%d.npy" % i), img.numpy())
        lines.append('    {"%s", %d},' % (os.path.relpath(p, root), t))
    lines += ["  },", "}"]
    with open(os.path.join(OUT, "folder_cases.lua"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
    make_folder()
