/*
** memory.c -- the CPU allocator: aligned blocks, byte accounting for the
** Lua garbage collector, and a cache of large freed blocks.
**
** Why a cache: a block of 64 KiB or more comes fresh from mmap and
** faults in every page on first touch, which costs more than the add that
** fills it (a 64 MB `x + y` measured 6.7 GB/s that way, in PyTorch too).  A
** training step allocates the same sizes again and again, so freed large
** blocks are kept, up to a cap, and handed out again for the same size,
** as PyTorch's caching allocator does on the GPU.
*/
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/internal.h"

/* mem_gc_base: the live bytes when Lua last collected; mem_dev_since_gc:
** device bytes allocated since then (see mem_gc_credit). */
static atomic_llong mem_live, mem_peak, mem_gc_base, mem_dev_since_gc;
/* dl_mem_window_peak's: the peak since its last reset */
static atomic_llong mem_window_peak;

/* -- Large-block cache ---------------------------------------------------- */

enum { CACHE_MIN = 1 << 16, CACHE_GRAIN = 1 << 16, CACHE_SLOTS = 256 };
#define HUGE_PAGE ((size_t)2 << 20)
#define FLOOR ((size_t)32 << 20)

/* How much garbage Lua may leave between collections, and so what the
** cache may hold: an eighth of the live bytes, at least 32 MiB.  Not the
** whole live set: a dataset of a few hundred megabytes that never changes
** would then let as much garbage pile up, twice over. */
static size_t slack(void) {
  size_t live = (size_t)atomic_load(&mem_live);
  return live / 8 > FLOOR ? live / 8 : FLOOR;
}

static struct {
  pthread_mutex_t mu;
  struct { void *p; size_t n; } slot[CACHE_SLOTS];  /* oldest first */
  int count;
  size_t bytes, limit;
  int limit_set;
} cache = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* Large sizes round up to 64 KiB so near-equal requests share blocks. */
static size_t block_size(size_t nbytes) {
  if (nbytes >= CACHE_MIN) return (nbytes + CACHE_GRAIN - 1) & ~(size_t)(CACHE_GRAIN - 1);
  return nbytes ? (nbytes + 63) & ~(size_t)63 : 64;
}

/* Default cap: 1 GiB or an eighth of the memory, whichever is less;
** DDPLUA_CPU_CACHE_MB overrides (0 turns the cache off). */
static size_t cache_limit(void) {
  if (!cache.limit_set) {
    long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
    size_t lim = (size_t)1 << 30;
    if (pages > 0 && psize > 0 && (size_t)pages * (size_t)psize / 8 < lim)
      lim = (size_t)pages * (size_t)psize / 8;
    const char *env = getenv("DDPLUA_CPU_CACHE_MB");
    if (env && *env) lim = (size_t)strtoull(env, NULL, 10) << 20;
    cache.limit = lim;
    cache.limit_set = 1;
  }
  return cache.limit;
}

static void *cache_take(size_t n) {
  void *p = NULL;
  pthread_mutex_lock(&cache.mu);
  for (int i = cache.count - 1; i >= 0; i--) {
    if (cache.slot[i].n != n) continue;
    p = cache.slot[i].p;
    cache.bytes -= n;
    for (int j = i; j < cache.count - 1; j++) cache.slot[j] = cache.slot[j + 1];
    cache.count--;
    break;
  }
  pthread_mutex_unlock(&cache.mu);
  return p;
}

/* Keeps p for reuse, evicting the oldest blocks to stay under the cap;
** returns 0 when p should be freed instead. */
static int cache_put(void *p, size_t n) {
  /* also never more than a few collections' garbage (slack()): the cache
  ** then tracks the working set, and resident memory stays flat.  Four:
  ** a GPT step's temporaries come in ten sizes, and with less the
  ** oldest-first eviction threw out the sizes the next step asked for
  ** (one in seven large blocks came fresh at 2 x slack, none at 4 x, and
  ** peak RSS fell: 250 -> 150 MiB in bench/train_gpt.lua).  Eight: a
  ** collection that frees a whole step's garbage at once still overflowed
  ** four, and the next step faulted in fresh huge pages (4% of a GPT
  ** step in the kernel's clear_page; train_mlp 5% faster at eight, the
  ** same peak RSS: bench/RESULTS.md, issue 25) */
  size_t lim = cache_limit(), dyn = 8 * slack();
  if (dyn < lim) lim = dyn;
  if (n > lim) return 0;
  void *evict[CACHE_SLOTS];
  int ne = 0;
  pthread_mutex_lock(&cache.mu);
  while (cache.count > 0 && (cache.bytes + n > lim || cache.count == CACHE_SLOTS)) {
    evict[ne++] = cache.slot[0].p;
    cache.bytes -= cache.slot[0].n;
    for (int j = 0; j < cache.count - 1; j++) cache.slot[j] = cache.slot[j + 1];
    cache.count--;
  }
  cache.slot[cache.count].p = p;
  cache.slot[cache.count].n = n;
  cache.count++;
  cache.bytes += n;
  pthread_mutex_unlock(&cache.mu);
  for (int i = 0; i < ne; i++) free(evict[i]);
  return 1;
}

DL_API void dl_empty_cache(void) {
  void *ps[CACHE_SLOTS];
  pthread_mutex_lock(&cache.mu);
  int n = cache.count;
  for (int i = 0; i < n; i++) ps[i] = cache.slot[i].p;
  cache.count = 0;
  cache.bytes = 0;
  pthread_mutex_unlock(&cache.mu);
  for (int i = 0; i < n; i++) free(ps[i]);
}

DL_API int64_t dl_mem_cached(void) {
  pthread_mutex_lock(&cache.mu);
  int64_t b = (int64_t)cache.bytes;
  pthread_mutex_unlock(&cache.mu);
  return b;
}

/* -- Allocation ----------------------------------------------------------- */

/* Blocks of 2 MiB and more are aligned to 2 MiB and may use huge pages:
** streaming ops over tens of megabytes otherwise spend their time on TLB
** misses and 4 KiB page faults. */
static void *block_new(size_t n) {
  void *p = NULL;
  size_t align = n >= HUGE_PAGE ? HUGE_PAGE : 64;
  if (posix_memalign(&p, align, n)) return NULL;
#ifdef MADV_HUGEPAGE
  if (n >= HUGE_PAGE) madvise(p, n, MADV_HUGEPAGE);  /* a hint: failure is fine */
#endif
  return p;
}

DL_HIDDEN void *mem_alloc(size_t nbytes) {
  size_t n = block_size(nbytes);
  if (n < nbytes) return NULL;
  void *p = n >= CACHE_MIN ? cache_take(n) : NULL;
  if (!p && !(p = block_new(n))) {
    dl_empty_cache();  /* the cache must never cause an out-of-memory */
    if (!(p = block_new(n))) return NULL;
  }
  long long live = atomic_fetch_add(&mem_live, (long long)nbytes) + (long long)nbytes;
  long long peak = atomic_load(&mem_peak);
  while (live > peak && !atomic_compare_exchange_weak(&mem_peak, &peak, live)) {}
  peak = atomic_load(&mem_window_peak);
  while (live > peak && !atomic_compare_exchange_weak(&mem_window_peak, &peak, live)) {}
  return p;
}

DL_HIDDEN void mem_free(void *p, size_t nbytes) {
  if (!p) return;
  atomic_fetch_sub(&mem_live, (long long)nbytes);
  size_t n = block_size(nbytes);
  if (n >= CACHE_MIN && cache_put(p, n)) return;
  free(p);
}

DL_API int64_t dl_mem_allocated(void) { return atomic_load(&mem_live); }
DL_API int64_t dl_mem_peak(void) { return atomic_load(&mem_peak); }

/* An allocation racing with a reset may be lost from the new window's
** peak only if it is freed before the next one; a step's peak is held for
** far longer than that. */
DL_API int64_t dl_mem_window_peak(int reset) {
  long long peak = atomic_load(&mem_window_peak), live = atomic_load(&mem_live);
  if (live > peak) peak = live;
  if (reset) atomic_store(&mem_window_peak, atomic_load(&mem_live));
  return peak;
}

/* Lua only sees 8-byte pointers: ask for a collection once the live
** bytes grew by slack() since the last one.  Growth, not bytes allocated:
** the temporaries C frees at once (im2col columns, a backward's
** intermediates) are no garbage Lua could hold, and counting them ran a
** full collection several times in each training step. */
DL_API int dl_gc_hint(void) {
  long long grown = atomic_load(&mem_live) - atomic_load(&mem_gc_base);
  return grown + atomic_load(&mem_dev_since_gc) > (long long)slack();
}

/* Device memory counts too: Lua sees an 8-byte handle for a CUDA tensor
** of any size, so without this a training loop's garbage would fill the
** GPU long before Lua's own heap asked for a collection. */
DL_HIDDEN void mem_gc_credit(size_t nbytes) {
  atomic_fetch_add(&mem_dev_since_gc, (long long)nbytes);
}

static atomic_int mem_gc_epoch;

DL_API int dl_gc_epoch(void) {
  if (dl_gc_hint()) {
    dl_gc_done();
    atomic_fetch_add(&mem_gc_epoch, 1);
  }
  return atomic_load(&mem_gc_epoch);
}

DL_API void dl_gc_done(void) {
  atomic_store(&mem_gc_base, atomic_load(&mem_live));
  atomic_store(&mem_dev_since_gc, 0);
}
