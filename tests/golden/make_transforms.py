#!/usr/bin/env python3
"""Golden values for ddp.data.transforms: what torchvision 0.29's
transforms.v2.functional (torch 2.15, on the CPU) gives for the
deterministic transforms -- resize up and down with and without
antialias, nearest, uint8 and float32 and a batch, center crop (with the
zero padding of a crop larger than the image), resized_crop, horizontal
flip, to_dtype, normalize, adjust_brightness / contrast / saturation / hue
-- and one crop -> resize -> flip -> to_dtype -> normalize chain.

Run from the repository root with the cached PyPI environment:

    py=$(scripts/py-venv.sh); $py tests/golden/make_transforms.py

It writes tests/golden/transforms_cases.lua (the cases: inputs by name,
the call, the result's dtype, shape and place in the data file) and
tests/golden/transforms_out.bin (the results' bytes, uint8 or float32
little-endian, one after another), both committed; tests/transforms_spec.lua
checks every case.  The inputs are not stored: both sides make them with
the same generator (image() below: the MINSTD generator, one byte or one
float per element in C order), so the files stay small.
"""
import os
import struct

import torch
import torchvision
from torchvision.transforms.v2 import functional as F

HERE = os.path.dirname(os.path.abspath(__file__))

assert torch.__version__.startswith("2.15"), torch.__version__
assert torchvision.__version__.startswith("0.29"), torchvision.__version__
torch.set_num_threads(1)


def minstd(seed, n):
    """n numbers of the MINSTD generator (s = s * 48271 mod 2^31 - 1) after
    ten discarded, from s = seed."""
    s = seed
    for _ in range(10):
        s = s * 48271 % 2147483647
    out = []
    for _ in range(n):
        s = s * 48271 % 2147483647
        out.append(s)
    return out


def image(seed, shape, dtype):
    """uint8: bits 8..15 of each number; float32: the number / (2^31 - 1)."""
    n = 1
    for d in shape:
        n *= d
    vals = minstd(seed, n)
    if dtype == "uint8":
        return torch.tensor([(v >> 8) & 255 for v in vals], dtype=torch.uint8).reshape(shape)
    return torch.tensor([v / 2147483647 for v in vals], dtype=torch.float64).to(torch.float32).reshape(shape)


# name: (seed, shape, dtype) -- the spec makes the same from these
INPUTS = {
    "A": (1, (3, 37, 53), "uint8"),
    "B": (2, (1, 64, 48), "uint8"),
    "C": (3, (3, 375, 500), "uint8"),
    "D": (4, (3, 37, 53), "float32"),
    "E": (5, (2, 3, 20, 24), "uint8"),
    "F": (6, (3, 8, 8), "uint8"),
    "G": (7, (3, 12, 16), "float32"),
    "H": (8, (2, 3, 10, 12), "float32"),
    "J": (9, (3, 16, 20), "uint8"),
    "K": (10, (1, 12, 10), "uint8"),
}
IMG = {k: image(*v) for k, v in INPUTS.items()}
RAMP = torch.arange(256, dtype=torch.int64).to(torch.uint8).reshape(1, 16, 16)
IMG["ramp"] = RAMP

NEAREST = torchvision.transforms.InterpolationMode.NEAREST
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def lua(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        r = repr(v)
        assert float(r) == v
        return r
    if isinstance(v, str):
        return '"' + v + '"'
    if isinstance(v, dict):
        return "{ " + ", ".join("%s = %s" % (k, lua(x)) for k, x in sorted(v.items())) + " }"
    if isinstance(v, (list, tuple)):
        return "{ " + ", ".join(lua(x) for x in v) + " }"
    raise TypeError(v)


CASES = []
DATA = bytearray()


def case(name, inp, op, args, out, view=None):
    """A case: the spec calls T.functional[op](input, unpack(args)); view
    (top, left, height, width) narrows the input first."""
    global DATA
    out = out.contiguous()
    if out.dtype == torch.uint8:
        raw = bytes(out.flatten().tolist())
    else:
        assert out.dtype == torch.float32
        raw = struct.pack("<%df" % out.numel(), *out.flatten().tolist())
    CASES.append({"name": name, "input": inp, "op": op, "args": list(args),
                  "dtype": "uint8" if out.dtype == torch.uint8 else "float32",
                  "shape": list(out.shape), "offset": len(DATA), **({"view": list(view)} if view else {})})
    DATA += raw


def viewed(inp, view):
    x = IMG[inp]
    if view:
        t, l, h, w = view
        x = x[..., t:t + h, l:l + w]
    return x


def resize(name, inp, size, antialias=True, interpolation="bilinear", max_size=None):
    x = IMG[inp]
    mode = NEAREST if interpolation == "nearest" else torchvision.transforms.InterpolationMode.BILINEAR
    y = F.resize(x, size, interpolation=mode, antialias=antialias, max_size=max_size)
    opts = {"antialias": antialias, "interpolation": interpolation}
    if max_size is not None:
        opts["max_size"] = max_size
    case(name, inp, "resize", [size, opts], y)


def main():
    # resize: down, up, one dim only, the shorter side, max_size, nearest
    resize("resize A down aa", "A", [20, 31])
    resize("resize A down no aa", "A", [20, 31], antialias=False)
    resize("resize A up aa", "A", [50, 70])
    resize("resize A up no aa", "A", [50, 70], antialias=False)
    resize("resize A height only", "A", [37, 20])
    resize("resize A width only no aa", "A", [16, 53], antialias=False)
    resize("resize A shorter side 24", "A", 24)
    resize("resize A shorter side 24 max_size 30", "A", 24, max_size=30)
    resize("resize A nearest down", "A", [17, 29], interpolation="nearest")
    resize("resize F nearest 2x", "F", [16, 16], interpolation="nearest")
    resize("resize B 1 channel aa", "B", [33, 17])
    resize("resize B 1 channel up no aa", "B", [70, 61], antialias=False)
    resize("resize C 375x500 aa", "C", [30, 97])
    resize("resize C 375x500 no aa", "C", [30, 97], antialias=False)
    resize("resize C shorter side 40", "C", 40)
    resize("resize D float down aa", "D", [20, 31])
    resize("resize D float down no aa", "D", [20, 31], antialias=False)
    resize("resize G float up aa", "G", [24, 30])
    resize("resize G float up no aa", "G", [24, 30], antialias=False)
    resize("resize D float nearest", "D", [10, 14], interpolation="nearest")
    resize("resize E batch aa", "E", [10, 12])
    resize("resize H float batch aa", "H", [7, 5])

    # center_crop: inside (even and odd margins, Python's round half to
    # even), larger than the image (zero padding), one dim larger
    for inp, size in [("J", [10, 12]), ("J", [15, 19]), ("J", [13, 17]), ("F", [12, 11]),
                      ("J", [6, 24]), ("F", [11, 9]), ("G", [14, 10])]:
        case("center_crop %s %dx%d" % (inp, size[0], size[1]), inp, "center_crop", [size],
             F.center_crop(IMG[inp], size))

    # crop (inside, and reaching outside: zeros) and resized_crop
    case("crop A inside", "A", "crop", [5, 7, 20, 30], F.crop(IMG["A"], 5, 7, 20, 30))
    case("crop A outside", "A", "crop", [-3, 40, 10, 20], F.crop(IMG["A"], -3, 40, 10, 20))
    for name, inp, t, l, h, w, size, aa in [("A", "A", 5, 7, 20, 30, [16, 16], True),
                                           ("A no aa", "A", 5, 7, 20, 30, [16, 16], False),
                                           ("A up", "A", 2, 3, 11, 13, [30, 24], True),
                                           ("C", "C", 50, 100, 200, 250, [32, 32], True),
                                           ("D", "D", 3, 4, 25, 40, [16, 16], True)]:
        y = F.resized_crop(IMG[inp], t, l, h, w, size, antialias=aa)
        case("resized_crop " + name, inp, "resized_crop", [t, l, h, w, size, {"antialias": aa}], y)

    # flip, to_dtype, normalize
    case("horizontal_flip J", "J", "horizontal_flip", [], F.horizontal_flip(IMG["J"]))
    case("horizontal_flip G", "G", "horizontal_flip", [], F.horizontal_flip(IMG["G"]))
    case("horizontal_flip E batch", "E", "horizontal_flip", [], F.horizontal_flip(IMG["E"]))
    case("to_dtype ramp float32 scale", "ramp", "to_dtype", ["float32", {"scale": True}],
         F.to_dtype(RAMP, torch.float32, scale=True))
    case("to_dtype ramp float32", "ramp", "to_dtype", ["float32"], F.to_dtype(RAMP, torch.float32))
    case("to_dtype G uint8 scale", "G", "to_dtype", ["uint8", {"scale": True}],
         F.to_dtype(IMG["G"], torch.uint8, scale=True))
    case("normalize G", "G", "normalize", [MEAN, STD], F.normalize(IMG["G"], MEAN, STD))
    view = (3, 5, 10, 20)
    case("normalize D view", "D", "normalize", [[0.5], [0.25]],
         F.normalize(viewed("D", view), [0.5], [0.25]), view=view)
    case("normalize H batch", "H", "normalize", [MEAN, STD], F.normalize(IMG["H"], MEAN, STD))

    # the colour jitter primitives
    for fn, factors in [("adjust_brightness", [0.0, 0.7, 1.3]), ("adjust_contrast", [0.0, 0.6, 1.5]),
                        ("adjust_saturation", [0.0, 0.3, 1.8]), ("adjust_hue", [-0.5, -0.35, 0.2, 0.5])]:
        for f in factors:
            for inp in ["J", "G"]:
                case("%s %s %g" % (fn, inp, f), inp, fn, [f], getattr(F, fn)(IMG[inp], f))
        case("%s K 1 channel" % fn, "K", fn, [factors[1]], getattr(F, fn)(IMG["K"], factors[1]))
        case("%s E batch" % fn, "E", fn, [factors[-1]], getattr(F, fn)(IMG["E"], factors[-1]))
        case("%s H float batch" % fn, "H", fn, [factors[1]], getattr(F, fn)(IMG["H"], factors[1]))
    view = (4, 6, 20, 30)
    case("adjust_hue A view", "A", "adjust_hue", [0.1], F.adjust_hue(viewed("A", view), 0.1), view=view)

    # RandomResizedCrop -> RandomHorizontalFlip -> ToDtype -> Normalize with
    # fixed parameters, unfused in torchvision
    for name, inp, t, l, h, w, size, flip in [("C", "C", 40, 60, 300, 280, [24, 24], True),
                                             ("A", "A", 2, 1, 30, 44, [24, 20], False),
                                             ("D float", "D", 5, 9, 22, 31, [16, 16], True)]:
        y = F.resized_crop(IMG[inp], t, l, h, w, size, antialias=True)
        if flip:
            y = F.horizontal_flip(y)
        y = F.normalize(F.to_dtype(y, torch.float32, scale=True), MEAN, STD)
        case("chain " + name, inp, "chain", [t, l, h, w, size, flip, MEAN, STD], y)

    lines = [
        "-- generated by tests/golden/make_transforms.py (torch %s, torchvision %s, CPU capability %s); do not edit"
        % (torch.__version__, torchvision.__version__, torch.backends.cpu.get_cpu_capability()),
        "-- inputs: name = {seed, shape, dtype} (the spec makes them as the script's image());",
        "-- cases: T.functional[op](input, unpack(args)) against the bytes at offset in transforms_out.bin",
        "return {",
        "  inputs = {",
    ]
    for k, (seed, shape, dtype) in sorted(INPUTS.items()):
        lines.append("    %s = { seed = %d, shape = %s, dtype = %s }," % (k, seed, lua(list(shape)), lua(dtype)))
    lines.append("  },")
    lines.append("  cases = {")
    for c in CASES:
        lines.append("    %s," % lua(c))
    lines.append("  },")
    lines.append("}")
    with open(os.path.join(HERE, "transforms_cases.lua"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(HERE, "transforms_out.bin"), "wb") as f:
        f.write(bytes(DATA))
    print("%d cases, %d bytes of results" % (len(CASES), len(DATA)))


if __name__ == "__main__":
    main()
