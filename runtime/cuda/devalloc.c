/*
** devalloc.c -- the caching allocator for device memory (devalloc.h).
**
** cudaMalloc and cudaFree are slow and synchronise the device, so memory is
** taken from the device in segments and cut into blocks that are reused:
** small requests (up to 1 MiB) from 2 MiB segments, large ones from
** segments of their own size rounded to 2 MiB (20 MiB for 1-10 MiB, so
** several mid-sized blocks share one).  A free block is found best-fit
** among the free blocks of the same pool and stream, split when the rest
** is worth keeping, and merged with its free neighbours when released.
** Blocks keep the stream they were allocated on: work queued on that
** stream is ordered, so a block released there can be handed out again at
** once; another stream never gets it.  A block also used on a second
** stream (devalloc_record_stream: a copy stream's block that the compute
** stream reads) waits at its release, out of every pool, until an event
** recorded then on that stream has passed: its own stream's work alone
** does not order a reuse after the other's.  Memory goes back to the device
** only in devalloc_empty (after a sync), never from a release, so a Lua
** finalizer can release a block at any time.
*/
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/devalloc.h"
#include "core/internal.h"

enum { ALIGN = 512 };
#define SMALL_MAX ((size_t)1 << 20)
#define SMALL_SEG ((size_t)2 << 20)
#define MID_MAX ((size_t)10 << 20)
#define MID_SEG ((size_t)20 << 20)
#define ROUND_SEG ((size_t)2 << 20)

typedef struct block {
  char *ptr;
  size_t size;
  uintptr_t stream;
  uintptr_t also;             /* the other stream it is used on (has_also) */
  void *event;                /* recorded on `also` at release, while pending */
  int used, small, has_also;
  struct block *prev, *next;  /* neighbours within the segment, by address */
  struct block *hnext;        /* the in-use table's chain */
} block;

typedef struct pool {  /* free blocks, sorted by (stream, size, ptr) */
  block **v;
  int n, cap;
} pool;

enum { HBITS = 12 };

struct devalloc {
  pthread_mutex_t mu;
  dev_backend be;
  int device;
  pool small, large;
  block *inuse[1 << HBITS];
  block *pending;  /* released, waiting for their event (chained by hnext) */
  dev_stats st;
};

static void reap_pending(devalloc *a, int all, uintptr_t stream, int wait);

static size_t round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }

static int before(const block *a, const block *b) {
  if (a->stream != b->stream) return a->stream < b->stream;
  if (a->size != b->size) return a->size < b->size;
  return a->ptr < b->ptr;
}

/* First index whose block is not before key. */
static int lower(const pool *p, const block *key) {
  int lo = 0, hi = p->n;
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (before(p->v[mid], key)) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

static int pool_add(pool *p, block *b) {
  if (p->n == p->cap) {
    int cap = p->cap ? p->cap * 2 : 64;
    block **v = realloc(p->v, sizeof *v * (size_t)cap);
    if (!v) return -1;
    p->v = v;
    p->cap = cap;
  }
  int i = lower(p, b);
  memmove(&p->v[i + 1], &p->v[i], sizeof *p->v * (size_t)(p->n - i));
  p->v[i] = b;
  p->n++;
  return 0;
}

static void pool_remove(pool *p, block *b) {
  int i = lower(p, b);
  if (i < p->n && p->v[i] == b) {
    memmove(&p->v[i], &p->v[i + 1], sizeof *p->v * (size_t)(p->n - i - 1));
    p->n--;
  }
}

static unsigned hash(const void *p) {
  uintptr_t x = (uintptr_t)p >> 9;
  x ^= x >> 17;
  x *= 0x9e3779b97f4a7c15ull;
  return (unsigned)(x >> (64 - HBITS));
}

static void inuse_put(devalloc *a, block *b) {
  unsigned h = hash(b->ptr);
  b->hnext = a->inuse[h];
  a->inuse[h] = b;
}

static block *inuse_find(devalloc *a, const void *ptr) {
  for (block *b = a->inuse[hash(ptr)]; b; b = b->hnext)
    if (b->ptr == ptr) return b;
  return NULL;
}

static block *inuse_take(devalloc *a, const void *ptr) {
  block **pp = &a->inuse[hash(ptr)];
  for (; *pp; pp = &(*pp)->hnext)
    if ((*pp)->ptr == ptr) {
      block *b = *pp;
      *pp = b->hnext;
      return b;
    }
  return NULL;
}

DLA_API devalloc *devalloc_new(const dev_backend *be, int device) {
  devalloc *a = calloc(1, sizeof *a);
  if (!a) return dl_errp(EM_NOMEM, "devalloc", (long long)sizeof *a, 0LL);
  pthread_mutex_init(&a->mu, NULL);
  a->be = *be;
  a->device = device;
  return a;
}

/* Segments whose single block is free go back to the device. */
static void release_cached(devalloc *a, pool *p) {
  int synced = 0;
  for (int i = 0; i < p->n;) {
    block *b = p->v[i];
    if (b->prev || b->next) { i++; continue; }
    if (!synced && a->be.sync) a->be.sync(a->be.ctx, a->device);
    synced = 1;
    memmove(&p->v[i], &p->v[i + 1], sizeof *p->v * (size_t)(p->n - i - 1));
    p->n--;
    a->be.free(a->be.ctx, a->device, b->ptr);
    a->st.reserved -= (int64_t)b->size;
    a->st.segments--;
    free(b);
  }
}

DLA_API void devalloc_empty(devalloc *a) {
  pthread_mutex_lock(&a->mu);
  if (a->pending) reap_pending(a, 1, 0, 1);
  release_cached(a, &a->small);
  release_cached(a, &a->large);
  pthread_mutex_unlock(&a->mu);
}

DLA_API void devalloc_free_all(devalloc *a) {
  if (!a) return;
  devalloc_empty(a);
  /* blocks still in use (a leak by the caller) stay with the device */
  free(a->small.v);
  free(a->large.v);
  pthread_mutex_destroy(&a->mu);
  free(a);
}

/* Best fit: the smallest free block of this stream that is big enough. */
static block *find_free(pool *p, size_t size, uintptr_t stream) {
  block key = { .ptr = NULL, .size = size, .stream = stream };
  int i = lower(p, &key);
  if (i < p->n && p->v[i]->stream == stream && p->v[i]->size >= size) return p->v[i];
  return NULL;
}

static block *new_segment(devalloc *a, size_t size, int small, uintptr_t stream) {
  size_t seg = small ? SMALL_SEG : size <= MID_MAX ? MID_SEG : round_up(size, ROUND_SEG);
  void *ptr = NULL;
  if (a->be.alloc(a->be.ctx, a->device, seg, &ptr) != 0 || !ptr) return NULL;
  block *b = calloc(1, sizeof *b);
  if (!b) {
    a->be.free(a->be.ctx, a->device, ptr);
    return NULL;
  }
  *b = (block){ .ptr = ptr, .size = seg, .stream = stream, .small = small };
  a->st.reserved += (int64_t)seg;
  a->st.segments++;
  if (a->st.reserved > a->st.peak_reserved) a->st.peak_reserved = a->st.reserved;
  return b;
}

DLA_API void *devalloc_alloc(devalloc *a, size_t size, uintptr_t stream) {
  size_t want = round_up(size ? size : 1, ALIGN);
  int small = want <= SMALL_MAX;
  pthread_mutex_lock(&a->mu);
  if (a->pending) reap_pending(a, 0, stream, 0);  /* only this stream's: no queries for others */
  pool *p = small ? &a->small : &a->large;
  block *b = find_free(p, want, stream);
  if (b) {
    pool_remove(p, b);
    a->st.cache_hits++;
  } else {
    b = new_segment(a, want, small, stream);
    if (!b) {  /* give the cache back and try once more */
      a->st.retries++;
      if (a->pending) reap_pending(a, 1, 0, 1);
      release_cached(a, &a->small);
      release_cached(a, &a->large);
      b = new_segment(a, want, small, stream);
    }
    if (!b) {
      a->st.ooms++;
      dev_stats s = a->st;
      pthread_mutex_unlock(&a->mu);
      char why[200];
      snprintf(why, sizeof why,
               "cuda:%d out of memory allocating %zu bytes (%lld bytes in use, %lld reserved, "
               "%lld at peak)", a->device, size, (long long)s.allocated, (long long)s.reserved,
               (long long)s.peak_allocated);
      dl_err_set(DL_ENOMEM, why);
      return NULL;
    }
  }
  /* split off the rest when it is worth a block of its own */
  size_t rest = b->size - want;
  if (rest >= (small ? (size_t)ALIGN : SMALL_MAX + 1)) {
    block *r = calloc(1, sizeof *r);
    if (r) {
      *r = (block){ .ptr = b->ptr + want, .size = rest, .stream = stream, .small = small,
                    .prev = b, .next = b->next };
      if (b->next) b->next->prev = r;
      b->next = r;
      b->size = want;
      if (pool_add(p, r)) {  /* no room to track it: keep it in the block */
        b->next = r->next;
        if (r->next) r->next->prev = b;
        b->size += rest;
        free(r);
      }
    }
  }
  b->used = 1;
  inuse_put(a, b);
  a->st.allocs++;
  a->st.allocated += (int64_t)b->size;
  if (a->st.allocated > a->st.peak_allocated) a->st.peak_allocated = a->st.allocated;
  if (a->st.allocated > a->st.window_peak) a->st.window_peak = a->st.allocated;
  pthread_mutex_unlock(&a->mu);
  return b->ptr;
}

/* Folds a free neighbour n into b (n follows b). */
static void merge(pool *p, block *b, block *n) {
  pool_remove(p, n);
  b->size += n->size;
  b->next = n->next;
  if (n->next) n->next->prev = b;
  free(n);
}

/* b (released, no longer waited for) back to its pool, merged with its
** free neighbours; nonzero when the pool has no room to track it. */
static int block_free(devalloc *a, block *b) {
  pool *p = b->small ? &a->small : &a->large;
  b->used = 0;
  b->has_also = 0;
  b->event = NULL;
  if (b->next && !b->next->used) merge(p, b, b->next);
  if (b->prev && !b->prev->used) {
    block *prev = b->prev;
    pool_remove(p, prev);
    merge(p, prev, b);  /* b is not in the pool: pool_remove finds nothing */
    b = prev;
  }
  return pool_add(p, b);
}

/* Pending blocks of stream (all streams when all) whose event has passed
** go back to their pools (wait: waits for each). */
static void reap_pending(devalloc *a, int all, uintptr_t stream, int wait) {
  block **pp = &a->pending;
  while (*pp) {
    block *b = *pp;
    if ((all || b->stream == stream) && a->be.done(a->be.ctx, b->event, wait)) {
      *pp = b->hnext;
      block_free(a, b);  /* no room: the block stays out of the pool (a leak, not a hazard) */
    } else {
      pp = &b->hnext;
    }
  }
}

DLA_API int devalloc_record_stream(devalloc *a, void *ptr, uintptr_t stream) {
  pthread_mutex_lock(&a->mu);
  block *b = inuse_find(a, ptr);
  int rc = 0;
  if (!b)
    rc = dl_err(EM_BADVALUE, "devalloc", "record_stream of a pointer this allocator did not hand out");
  else if (stream != b->stream && b->has_also && b->also != stream)
    rc = dl_err(EM_BADVALUE, "devalloc", "record_stream: a block is used on at most two streams");
  else if (stream != b->stream) {
    b->also = stream;
    b->has_also = 1;
  }
  pthread_mutex_unlock(&a->mu);
  return rc;
}

DLA_API int devalloc_release(devalloc *a, void *ptr) {
  if (!ptr) return 0;
  pthread_mutex_lock(&a->mu);
  block *b = inuse_take(a, ptr);
  if (!b) {
    pthread_mutex_unlock(&a->mu);
    return dl_err(EM_BADVALUE, "devalloc", "release of a pointer this allocator did not hand out");
  }
  a->st.allocated -= (int64_t)b->size;
  if (b->has_also) {
    /* work on `also` queued before now may still use the block: it waits
    ** for an event recorded here, or (no event) for the device */
    void *ev = a->be.record && a->be.done ? a->be.record(a->be.ctx, a->device, b->also) : NULL;
    if (ev) {
      b->event = ev;
      b->hnext = a->pending;
      a->pending = b;
      pthread_mutex_unlock(&a->mu);
      return 0;
    }
    if (a->be.sync) a->be.sync(a->be.ctx, a->device);
  }
  int rc = block_free(a, b);
  pthread_mutex_unlock(&a->mu);
  return rc ? dl_err(EM_NOMEM, "devalloc", 0LL, 0LL) : 0;
}

DLA_API void devalloc_stats(devalloc *a, dev_stats *out) {
  pthread_mutex_lock(&a->mu);
  *out = a->st;
  pthread_mutex_unlock(&a->mu);
}

DLA_API int64_t devalloc_window_peak(devalloc *a, int reset) {
  pthread_mutex_lock(&a->mu);
  int64_t peak = a->st.window_peak > a->st.allocated ? a->st.window_peak : a->st.allocated;
  if (reset) a->st.window_peak = a->st.allocated;
  pthread_mutex_unlock(&a->mu);
  return peak;
}

DLA_API void devalloc_reset_peak(devalloc *a) {
  pthread_mutex_lock(&a->mu);
  a->st.peak_allocated = a->st.allocated;
  a->st.peak_reserved = a->st.reserved;
  pthread_mutex_unlock(&a->mu);
}
