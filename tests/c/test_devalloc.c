/* test_devalloc.c -- the device caching allocator (runtime/devalloc.c)
** against a fake device: host memory with a capacity, counting its calls. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cuda/devalloc.h"
#include "cuda/cuda.h"

typedef struct fake {
  size_t cap, used;
  int allocs, frees, syncs, outstanding;
  /* events: recorded ones, on which stream, and whether each has passed */
  int nev, waits;
  uintptr_t ev_stream[16];
  int ev_passed[16];
} fake;

static int fake_alloc(void *ctx, int device, size_t size, void **ptr) {
  fake *f = ctx;
  (void)device;
  if (f->used + size > f->cap) return 1;
  size_t *p = malloc(size + 16);
  if (!p) return 1;
  p[0] = size;
  f->used += size;
  f->allocs++;
  f->outstanding++;
  *ptr = (char *)p + 16;
  return 0;
}

static void fake_free(void *ctx, int device, void *ptr) {
  fake *f = ctx;
  (void)device;
  size_t *p = (size_t *)((char *)ptr - 16);
  f->used -= p[0];
  f->frees++;
  f->outstanding--;
  free(p);
}

static void fake_sync(void *ctx, int device) {
  (void)device;
  ((fake *)ctx)->syncs++;
}

/* An event is an index + 1 into the fake's table; it passes when the test
** says so, or when waited for. */
static void *fake_record(void *ctx, int device, uintptr_t stream) {
  fake *f = ctx;
  (void)device;
  if (f->nev == 16) return NULL;
  f->ev_stream[f->nev] = stream;
  f->ev_passed[f->nev] = 0;
  return (void *)(intptr_t)++f->nev;
}

static int fake_done(void *ctx, void *event, int wait) {
  fake *f = ctx;
  int i = (int)(intptr_t)event - 1;
  if (wait) f->waits++, f->ev_passed[i] = 1;
  return f->ev_passed[i];
}

#define MiB ((size_t)1 << 20)

static devalloc *fresh(fake *f, size_t cap) {
  memset(f, 0, sizeof *f);
  f->cap = cap;
  dev_backend be = { fake_alloc, fake_free, fake_sync, f, NULL, NULL };
  return devalloc_new(&be, 0);
}

static void small_blocks(void) {
  fake f;
  devalloc *a = fresh(&f, 64 * MiB);
  dev_stats s;
  char *p1 = devalloc_alloc(a, 1000, 0), *p2 = devalloc_alloc(a, 1000, 0), *p3 = devalloc_alloc(a, 3000, 0);
  CHECK(p1 && p2 && p3);
  CHECK(f.allocs == 1, "one 2 MiB segment for three small blocks, got %d", f.allocs);
  CHECK(p2 == p1 + 1024 && p3 == p2 + 1024, "blocks cut in 512-byte steps");
  CHECK(((uintptr_t)p1 - 16) % 16 == 0);
  devalloc_stats(a, &s);
  CHECK(s.allocated == 1024 + 1024 + 3072 && s.reserved == (int64_t)(2 * MiB));
  memset(p1, 1, 1000), memset(p2, 2, 1000), memset(p3, 3, 3000);
  /* a released block comes back for the same stream, not for another */
  CHECK(devalloc_release(a, p2) == 0);
  char *q = devalloc_alloc(a, 900, 7);
  CHECK(q != p2, "another stream must not get stream 0's block");
  char *r = devalloc_alloc(a, 1024, 0);
  CHECK(r == p2, "the freed block is reused on its stream");
  devalloc_stats(a, &s);
  CHECK(s.cache_hits >= 1);
  /* everything back: the pieces merge into the whole segment again */
  CHECK(devalloc_release(a, p1) == 0 && devalloc_release(a, r) == 0 && devalloc_release(a, p3) == 0);
  CHECK(devalloc_release(a, q) == 0);
  devalloc_stats(a, &s);
  CHECK(s.allocated == 0 && s.reserved == (int64_t)(4 * MiB), "two segments cached, got %lld",
        (long long)s.reserved);
  CHECK(f.frees == 0, "release never frees device memory");
  devalloc_empty(a);
  devalloc_stats(a, &s);
  CHECK(s.reserved == 0 && f.outstanding == 0 && f.syncs >= 1, "empty: reserved %lld, outstanding %d",
        (long long)s.reserved, f.outstanding);
  CHECK(devalloc_release(a, (void *)0x1234) != 0 && strstr(dl_last_error(), "did not hand out"));
  devalloc_free_all(a);
}

static void large_blocks(void) {
  fake f;
  devalloc *a = fresh(&f, 100 * MiB);
  char *a1 = devalloc_alloc(a, 3 * MiB, 0), *a2 = devalloc_alloc(a, 3 * MiB, 0);
  CHECK(a1 && a2 && f.allocs == 1, "mid-sized blocks share a 20 MiB segment (%d segments)", f.allocs);
  char *big = devalloc_alloc(a, 33 * MiB + 5, 0);
  CHECK(big && f.allocs == 2);
  dev_stats s;
  devalloc_stats(a, &s);
  CHECK(s.reserved == (int64_t)(20 * MiB + 34 * MiB), "reserved %lld", (long long)s.reserved);
  devalloc_release(a, big);
  char *again = devalloc_alloc(a, 33 * MiB, 0);
  CHECK(again == big && f.allocs == 2, "a large block is reused");
  /* the window peak: from the bytes allocated at its reset, apart from
  ** the user's peak (reset_peak_memory_stats) */
  devalloc_stats(a, &s);
  int64_t held = s.allocated;
  devalloc_window_peak(a, 1);
  CHECK(devalloc_window_peak(a, 0) == held);
  devalloc_release(a, again);
  CHECK(devalloc_window_peak(a, 0) == held, "a window keeps its peak after a release");
  devalloc_stats(a, &s);
  CHECK(s.allocated < held);
  CHECK(devalloc_window_peak(a, 1) == held && devalloc_window_peak(a, 0) == s.allocated,
        "a reset starts from the bytes allocated now (%lld), got %lld", (long long)s.allocated,
        (long long)devalloc_window_peak(a, 0));
  CHECK(s.peak_allocated >= held, "the user's peak stays");
  devalloc_release(a, a1);
  devalloc_release(a, a2);
  devalloc_empty(a);
  CHECK(f.outstanding == 0);
  devalloc_free_all(a);
}

static void out_of_memory(void) {
  fake f;
  devalloc *a = fresh(&f, 40 * MiB);
  char *x = devalloc_alloc(a, 30 * MiB, 0);
  CHECK(x != NULL);
  devalloc_release(a, x);  /* cached: the device is full */
  char *y = devalloc_alloc(a, 12 * MiB, 5);  /* another stream: needs the cache back */
  dev_stats s;
  devalloc_stats(a, &s);
  CHECK(y != NULL && s.retries == 1, "retry after releasing the cache (retries %lld)", (long long)s.retries);
  char *z = devalloc_alloc(a, 30 * MiB, 5);
  CHECK(z == NULL, "no room even after the retry");
  CHECK(dl_last_error_code() == DL_ENOMEM);
  CHECK(strstr(dl_last_error(), "cuda:0 out of memory allocating 31457280 bytes") != NULL, "%s",
        dl_last_error());
  CHECK(strstr(dl_last_error(), "in use") && strstr(dl_last_error(), "reserved"));
  devalloc_stats(a, &s);
  CHECK(s.ooms == 1);
  devalloc_release(a, y);
  devalloc_free_all(a);
  CHECK(f.outstanding == 0);
}

/* Random alloc/release: live blocks never overlap (each holds its own
** byte pattern) and everything returns. */
static void stress(void) {
  fake f;
  devalloc *a = fresh(&f, 512 * MiB);
  enum { N = 300 };
  char *p[N] = {0};
  size_t n[N] = {0};
  unsigned seed = 12345;
  int bad = 0;
  for (int it = 0; it < 20000; it++) {
    seed = seed * 1103515245u + 12345u;
    int i = (int)((seed >> 8) % N);
    if (p[i]) {
      for (size_t k = 0; k < n[i]; k += 97) bad += p[i][k] != (char)i;
      devalloc_release(a, p[i]);
      p[i] = NULL;
    } else {
      seed = seed * 1103515245u + 12345u;
      size_t sz = (seed >> 4) % 4 == 0 ? 1 + (seed >> 8) % (6 * MiB) : 1 + (seed >> 8) % 70000;
      p[i] = devalloc_alloc(a, sz, (seed >> 3) & 1);
      if (!p[i]) { bad++; continue; }
      n[i] = sz;
      memset(p[i], i, sz);
    }
  }
  for (int i = 0; i < N; i++) {
    if (!p[i]) continue;
    for (size_t k = 0; k < n[i]; k += 97) bad += p[i][k] != (char)i;
    devalloc_release(a, p[i]);
  }
  CHECK(bad == 0, "%d corrupted bytes or failed allocations", bad);
  dev_stats s;
  devalloc_stats(a, &s);
  CHECK(s.allocated == 0, "allocated %lld after releasing all", (long long)s.allocated);
  CHECK(s.cache_hits > s.allocs / 2, "mostly served from the cache: %lld of %lld", (long long)s.cache_hits,
        (long long)s.allocs);
  devalloc_empty(a);
  devalloc_stats(a, &s);
  CHECK(s.reserved == 0 && f.outstanding == 0, "everything merged back and returned (%lld, %d)",
        (long long)s.reserved, f.outstanding);
  devalloc_free_all(a);
}

/* A copy stream's block used on the compute stream too (memory.c's
** dl_to_device_async): released while the compute stream may still use it,
** it must not come back for another copy until the compute stream's event
** recorded at its release has passed. */
static void second_stream(void) {
  enum { COPY = 7 };
  fake f;
  memset(&f, 0, sizeof f);
  f.cap = 64 * MiB;
  dev_backend be = { fake_alloc, fake_free, fake_sync, &f, fake_record, fake_done };
  devalloc *a = devalloc_new(&be, 0);
  dev_stats s;
  char *p = devalloc_alloc(a, 4096, COPY);
  CHECK(p && devalloc_record_stream(a, p, 0) == 0);
  CHECK(devalloc_record_stream(a, p, COPY) == 0, "its own stream again: nothing to record");
  char *keep = devalloc_alloc(a, 4096, COPY);  /* p's neighbour, so p cannot merge */
  CHECK(keep == p + 4096);
  CHECK(devalloc_release(a, p) == 0);
  CHECK(f.nev == 1 && f.ev_stream[0] == 0, "an event recorded on the compute stream at release (%d)", f.nev);
  CHECK(f.syncs == 0, "without waiting for the device");
  devalloc_stats(a, &s);
  CHECK(s.allocated == 4096, "released bytes leave `allocated` at once: %lld", (long long)s.allocated);
  char *q = devalloc_alloc(a, 4096, COPY);
  CHECK(q && q != p, "not handed to the next copy while the compute stream may use it");
  char *c = devalloc_alloc(a, 4096, 0);
  CHECK(c && c != p, "nor to the compute stream (another pool)");
  f.ev_passed[0] = 1;
  char *r = devalloc_alloc(a, 4096, COPY);
  CHECK(r == p, "back for the copy stream once the event has passed");
  CHECK(f.waits == 0, "found by a query, not a wait");
  /* a block released with no other stream goes back at once, no event */
  CHECK(devalloc_release(a, q) == 0 && f.nev == 1);
  CHECK(devalloc_alloc(a, 4096, COPY) == q);
  /* a third stream is refused, naming it; a foreign pointer too */
  CHECK(devalloc_record_stream(a, r, 0) == 0 && devalloc_record_stream(a, r, 9) != 0 &&
        strstr(dl_last_error(), "at most two streams"), "%s", dl_last_error());
  char other[16];
  CHECK(devalloc_record_stream(a, other, 0) != 0 && strstr(dl_last_error(), "did not hand out"));
  /* empty_cache waits for pending blocks and gives their segments back */
  CHECK(devalloc_release(a, r) == 0 && f.nev == 2);
  CHECK(devalloc_release(a, keep) == 0 && devalloc_release(a, q) == 0 && devalloc_release(a, c) == 0);
  devalloc_empty(a);
  devalloc_stats(a, &s);
  CHECK(f.waits == 1 && s.reserved == 0 && f.outstanding == 0,
        "waited %d, reserved %lld, outstanding %d", f.waits, (long long)s.reserved, f.outstanding);
  devalloc_free_all(a);
  /* a backend without events: the release waits for the device instead */
  devalloc *b = fresh(&f, 64 * MiB);
  p = devalloc_alloc(b, 4096, COPY);
  keep = devalloc_alloc(b, 4096, COPY);
  CHECK(devalloc_record_stream(b, p, 0) == 0 && devalloc_release(b, p) == 0);
  CHECK(f.syncs == 1, "one device sync at release, got %d", f.syncs);
  CHECK(devalloc_alloc(b, 4096, COPY) == p, "then reused at once");
  devalloc_free_all(b);
}

/* The same allocator over real device memory, where there is a GPU. */
static void on_cuda(void) {
  int64_t st[9];
  if (dl_cuda_device_count() <= 0) {
    printf("SKIP: devalloc on a CUDA device: %s\n", dl_cuda_status());
    CHECK(dl_cuda_memory_stats(0, st, 9) != 0 && strstr(dl_last_error(), "CUDA is not available"),
          "%s", dl_last_error());
    CHECK(cuda_mem_alloc(0, 100, 0) == NULL && dl_last_error_code() == DL_EDEVICE);
    return;
  }
  CHECK(dl_cuda_memory_stats(0, st, 9) == 0 && st[0] == 0);
  void *p = cuda_mem_alloc(0, 1000, 0), *q = cuda_mem_alloc(0, 64 * MiB, 0);
  CHECK(p && q, "%s", dl_last_error());
  CHECK(dl_cuda_memory_stats(0, st, 9) == 0 && st[0] == 1024 + (int64_t)(64 * MiB) &&
        st[1] >= st[0], "allocated %lld reserved %lld", (long long)st[0], (long long)st[1]);
  CHECK(cuda_mem_release(0, p) == 0 && cuda_mem_release(0, q) == 0);
  void *r = cuda_mem_alloc(0, 64 * MiB, 0);
  CHECK(r == q, "the cached block comes back");
  cuda_mem_release(0, r);
  CHECK(dl_cuda_synchronize(0) == 0, "%s", dl_last_error());
  CHECK(dl_cuda_empty_cache(0) == 0 && dl_cuda_memory_stats(0, st, 9) == 0 && st[1] == 0,
        "reserved after empty_cache: %lld", (long long)st[1]);
  /* far more than any card: fails cleanly, naming the statistics */
  CHECK(cuda_mem_alloc(0, (size_t)1 << 50, 0) == NULL && dl_last_error_code() == DL_ENOMEM &&
        strstr(dl_last_error(), "out of memory"), "%s", dl_last_error());
  void *after = cuda_mem_alloc(0, 4096, 0);  /* and the device still works */
  CHECK(after != NULL);
  cuda_mem_release(0, after);
}

int main(void) {
  small_blocks();
  large_blocks();
  out_of_memory();
  stress();
  second_stream();
  on_cuda();
  return check_report("test_devalloc");
}
