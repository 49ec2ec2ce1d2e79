"""data_images.py: PyTorch twin of data_images.lua: an ImageNet-style input
pipeline -- JPEG decode + RandomResizedCrop(224) + RandomHorizontalFlip +
ToDtype(float32, scale) + Normalize into float32 batches of 64 -- through
torch.utils.data.DataLoader with 1 and 2 worker processes, over the same
JPEG files (IMAGES of 500 x 375 at quality 90, written by PIL into
DATA_IMAGES_DIR once: bench/run.sh runs `data_images.py --make` first, so
both sides decode the very same files).

    venv/bin/python bench/data_images.py --make
    venv/bin/python bench/data_images.py [THREADS]

Two paths, as torchvision offers them: PIL (datasets.ImageFolder's default
loader) and torchvision.io.decode_jpeg on the file's bytes; the faster is
the row compared (both go to stderr).  The "eval" row: Resize(256) +
CenterCrop(224) instead of the augmentation (torchvision decodes in full).  Each row: a warm pass first (workers
started and persistent), then PASSES timed passes.  Peak memory: the most
resident memory of the main process and its workers together, sampled at
every batch.
"""
import os
import sys
import time

import torch
import torchvision
from torchvision.transforms import v2

IMAGES, W, H, BATCH, PASSES = 256, 500, 375, 64, 2
root = os.environ.get("DATA_IMAGES_DIR", "/tmp/ddplua-bench-images")
torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 1)


def pixels(k):
    """Image k: smooth gradients plus a seeded texture (compresses like a photo)."""
    y = torch.arange(H, dtype=torch.float32).view(H, 1)
    x = torch.arange(W, dtype=torch.float32).view(1, W)
    g = torch.Generator().manual_seed(k)
    noise = torch.rand(3, H // 4 + 1, W // 4 + 1, generator=g)
    noise = torch.nn.functional.interpolate(noise[None], size=(H, W), mode="bilinear")[0]
    base = torch.stack([((x * (k % 7 + 1) + y) % 256).expand(H, W), ((y * 2 + k * 13) % 256).expand(H, W),
                        ((x + y * 3 + k) % 256).expand(H, W)])
    return (0.6 * base + 0.4 * 255 * noise).clamp(0, 255).to(torch.uint8)


def ensure_images():
    d = os.path.join(root, "class0")
    if os.path.isdir(d) and len(os.listdir(d)) >= IMAGES:
        return
    os.makedirs(d, exist_ok=True)
    from PIL import Image
    for k in range(IMAGES):
        img = Image.fromarray(pixels(k).permute(1, 2, 0).numpy())
        tmp = os.path.join(d, "%04d.jpg.tmp" % k)
        img.save(tmp, format="JPEG", quality=90)
        os.replace(tmp, os.path.join(d, "%04d.jpg" % k))


MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
augment = v2.Compose([v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip(),
                      v2.ToImage(), v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])


evaluate = v2.Compose([v2.Resize(256, antialias=True), v2.CenterCrop(224), v2.ToImage(),
                       v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])


class DecodeJpeg(torch.utils.data.Dataset):
    def __init__(self, files, tf=augment):
        self.files, self.tf = files, tf

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        img = torchvision.io.decode_jpeg(torchvision.io.read_file(self.files[i]))
        return self.tf(img), 0


def rss_mb():
    """Resident memory of this process and its children, in MB."""
    pids = [os.getpid()]
    try:
        for t in os.listdir("/proc/self/task"):
            with open("/proc/self/task/%s/children" % t) as f:
                pids += [int(p) for p in f.read().split()]
    except OSError:
        pass
    total = 0
    for p in pids:
        try:
            with open("/proc/%d/status" % p) as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


def run(ds, workers):
    loader = torch.utils.data.DataLoader(ds, batch_size=BATCH, shuffle=True, num_workers=workers,
                                         persistent_workers=True, prefetch_factor=2)
    peak = 0
    for x, y in loader:  # warm: workers started, files in the page cache
        peak = max(peak, rss_mb())
    t0 = time.perf_counter()
    n = 0
    for _ in range(PASSES):
        for x, y in loader:
            n += x.shape[0]
            peak = max(peak, rss_mb())
    return n / (time.perf_counter() - t0), peak


ensure_images()
if "--make" in sys.argv:
    sys.exit(0)
folder = torchvision.datasets.ImageFolder(root, transform=augment)
files = [p for p, _ in folder.samples]
for workers in (1, 2):
    pil, pil_mem = run(folder, workers)
    dec, dec_mem = run(DecodeJpeg(files), workers)
    best, mem = (pil, pil_mem) if pil >= dec else (dec, dec_mem)
    # the rows data_images.lua prints, in its order (bench/run.sh pastes
    # them line by line); the two paths' own numbers go to stderr
    print("images %d worker%s\t%.1f\timages/s" % (workers, "" if workers == 1 else "s", best))
    print("peak memory %d w\t%.0f\tMB (info)" % (workers, mem))
    print("  PIL path %d w: %.1f images/s, decode_jpeg path: %.1f images/s" % (workers, pil, dec), file=sys.stderr)
eval_pil, _ = run(torchvision.datasets.ImageFolder(root, transform=evaluate), 2)
eval_dec, _ = run(DecodeJpeg(files, evaluate), 2)
print("eval images 2 workers\t%.1f\timages/s" % max(eval_pil, eval_dec))
print("  eval PIL path: %.1f images/s, decode_jpeg path: %.1f images/s" % (eval_pil, eval_dec), file=sys.stderr)
