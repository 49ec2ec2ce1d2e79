/*
** shm.c -- collectives among the ranks of one node through a shared-memory
** arena: the "shm" process-group backend (pg.h).
**
** The arena holds a header line, one control line per rank (its arrival
** counter and, under DDP_DEBUG=1, a record of its current call), and two
** sets of per-rank data slots.  A tensor moves in chunks of a slot; each
** chunk of an all-reduce is written by every rank into its slot, then each
** rank reduces its 1/world share of the chunk across all slots (in rank
** order, so every rank gets the same bits) into its own slot, then every
** rank copies all shares out.  Chunks alternate between the two slot sets:
** a rank may overwrite a set only after all ranks arrived at the next
** chunk's first barrier, by when they finished reading it.  Slots sit at
** offsets that are not multiples of 4 KiB apart (4 KiB aliasing made the
** reduction 2-5x slower, see notes/gloo.md).
*/
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "pg.h"

enum { LINE = 128, SLOT_PAD = 320, BLK = 512, MAX_WORLD = 1024 };
#define MAGIC 0x31306d6873646464ull  /* "dddshm01" */
#define DEFAULT_SLOT (4u << 20)

typedef struct rec {   /* one call, for DDP_DEBUG's comparison */
  int64_t seq, numel;
  int32_t kind, arg, dtype, pad;
} rec;

typedef struct ctl {
  _Atomic uint64_t arrive;  /* epochs this rank reached */
  rec r[2];                 /* by the call's seq parity */
} ctl;
_Static_assert(sizeof(ctl) <= LINE, "control line");

typedef struct header {
  uint64_t magic;
  int64_t world, slot_bytes, arena_bytes;
} header;

typedef struct shm {
  char *base;
  size_t bytes;
  size_t slot_bytes, stride, data_off;
  int rank, world, debug;
  uint64_t epoch, step;
  int64_t seq;
  double timeout;
  int broken;
  char why[256];
} shm;

enum { K_ALL_REDUCE, K_BROADCAST, K_ALL_GATHER, K_BARRIER };
static const char *kind_names[] = { "all_reduce", "broadcast", "all_gather", "barrier" };
static const char *red_names[] = { "sum", "avg", "max", "min", "prod" };

static ctl *ctl_of(shm *g, int r) { return (ctl *)(g->base + LINE * (1 + r)); }
static char *slot_of(shm *g, int set, int r) {
  return g->base + g->data_off + (size_t)(set * g->world + r) * g->stride;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

/* -- Waiting --------------------------------------------------------------- */

static int fail(shm *g, int rc) {
  g->broken = 1;
  snprintf(g->why, sizeof g->why, "%s", dl_last_error());
  return rc;
}

static int check_usable(shm *g, const char *name) {
  if (g->broken) return dl_err(EM_PG_BROKEN, name, g->why);
  return 0;
}

/* Marks this rank's arrival at a new epoch and waits for every rank's:
** spins briefly, then yields, then sleeps up to 0.2 ms at a time, and
** names the missing ranks once the group's timeout passes. */
static int sync_all(shm *g, const char *name) {
  uint64_t e = ++g->epoch;
  atomic_store_explicit(&ctl_of(g, g->rank)->arrive, e, memory_order_release);
  double t0 = 0;
  long sleep_ns = 2000;
  for (long it = 0;; it++) {
    int r = 0;
    while (r < g->world &&
           atomic_load_explicit(&ctl_of(g, r)->arrive, memory_order_acquire) >= e) r++;
    if (r == g->world) return 0;
    if (it < 200) { cpu_relax(); continue; }
    if (it < 2000) { sched_yield(); if (it % 64) continue; }
    else {
      struct timespec ts = { 0, sleep_ns };
      nanosleep(&ts, NULL);
      if (sleep_ns < 200000) sleep_ns += sleep_ns / 4;
    }
    double t = now();
    if (t0 == 0) t0 = t;
    /* spinning before t0 took well under a millisecond */
    if (t - t0 > g->timeout) {
      char who[200];
      int n = 0, cnt = 0;
      for (int q = 0; q < g->world; q++)
        if (atomic_load_explicit(&ctl_of(g, q)->arrive, memory_order_acquire) < e) cnt++;
      n = snprintf(who, sizeof who, cnt == 1 ? "rank " : "ranks ");
      int first = 1;
      for (int q = 0; q < g->world && n < (int)sizeof who - 16; q++) {
        if (atomic_load_explicit(&ctl_of(g, q)->arrive, memory_order_acquire) >= e) continue;
        n += snprintf(who + n, sizeof who - n, first ? "%d" : ", %d", q);
        first = 0;
      }
      return fail(g, dl_err(EM_PG_TIMEOUT, name, (long long)g->seq, g->timeout, who));
    }
  }
}

static void describe(char *b, size_t cap, const rec *r) {
  const char *k = r->kind >= 0 && r->kind <= K_BARRIER ? kind_names[r->kind] : "?";
  if (r->kind == K_BARRIER) snprintf(b, cap, "barrier #%lld", (long long)r->seq);
  else if (r->kind == K_ALL_REDUCE)
    snprintf(b, cap, "all_reduce(%s) #%lld %s x%lld", red_names[r->arg], (long long)r->seq,
             fmt_dtype(r->dtype), (long long)r->numel);
  else if (r->kind == K_BROADCAST)
    snprintf(b, cap, "broadcast(src %d) #%lld %s x%lld", r->arg, (long long)r->seq,
             fmt_dtype(r->dtype), (long long)r->numel);
  else snprintf(b, cap, "%s #%lld %s x%lld", k, (long long)r->seq, fmt_dtype(r->dtype),
                (long long)r->numel);
}

/* Starts a call: its number, and under DDP_DEBUG the comparison of every
** rank's call (records alternate by seq parity, so a fast rank's next call
** never overwrites one a slow rank still reads). */
static int begin(shm *g, const char *name, int kind, int arg, int dtype, int64_t numel) {
  if (check_usable(g, name)) return -1;
  g->seq++;
  if (!g->debug) return 0;
  rec *mine = &ctl_of(g, g->rank)->r[g->seq & 1];
  *mine = (rec){ g->seq, numel, kind, arg, dtype, 0 };
  if (sync_all(g, name)) return -1;
  int same = 1;
  for (int r = 0; r < g->world; r++) {
    const rec *o = &ctl_of(g, r)->r[g->seq & 1];
    if (memcmp(o, mine, sizeof *o)) same = 0;
  }
  if (same) return 0;
  char msg[900];
  size_t n = 0;
  for (int r = 0; r < g->world && n < sizeof msg - 100; r++) {
    char d[120];
    describe(d, sizeof d, &ctl_of(g, r)->r[g->seq & 1]);
    n += snprintf(msg + n, sizeof msg - n, "%srank %d called %s", r ? "; " : "", r, d);
  }
  return fail(g, dl_err(EM_PG_MISMATCH, name, (long long)g->seq, msg));
}

/* -- Reduction kernels ---------------------------------------------------- */

/* dst[i] = src[0][i] op src[1][i] op ... (rank order) for i < n. */
typedef void (*red_fn)(char *dst, char *const *src, int w, int64_t n, int op);

#define ADD_F(a, b) ((a) + (b))
#define MUL_F(a, b) ((a) * (b))
#define ADD_U(U, a, b) ((a) = (__typeof__(a))((U)(a) + (U)(b)))
#define ID(x) (x)

#define DEF_RED(fname, T, A, U, LD, ST, ISFLOAT)                               \
  static void fname(char *dst, char *const *src, int w, int64_t n, int op) {    \
    A acc[BLK];                                                                \
    for (int64_t b = 0; b < n; b += BLK) {                                     \
      int64_t m = n - b < BLK ? n - b : BLK;                                   \
      const T *s0 = (const T *)src[0] + b;                                     \
      for (int64_t i = 0; i < m; i++) acc[i] = LD(s0[i]);                      \
      for (int r = 1; r < w; r++) {                                            \
        const T *s = (const T *)src[r] + b;                                    \
        switch (op) {                                                          \
        case DL_RED_SUM: case DL_RED_AVG:                                      \
          for (int64_t i = 0; i < m; i++) acc[i] = (A)((U)acc[i] + (U)LD(s[i])); \
          break;                                                               \
        case DL_RED_PROD:                                                      \
          for (int64_t i = 0; i < m; i++) acc[i] = (A)((U)acc[i] * (U)LD(s[i])); \
          break;                                                               \
        case DL_RED_MAX:                                                       \
          for (int64_t i = 0; i < m; i++) {                                    \
            A x = LD(s[i]);                                                    \
            acc[i] = (x > acc[i] || x != x) ? x : acc[i];                      \
          }                                                                    \
          break;                                                               \
        default:                                                               \
          for (int64_t i = 0; i < m; i++) {                                    \
            A x = LD(s[i]);                                                    \
            acc[i] = (x < acc[i] || x != x) ? x : acc[i];                      \
          }                                                                    \
        }                                                                      \
      }                                                                        \
      if (ISFLOAT && op == DL_RED_AVG)                                         \
        for (int64_t i = 0; i < m; i++) acc[i] = (A)(acc[i] / w);              \
      T *d = (T *)dst + b;                                                     \
      for (int64_t i = 0; i < m; i++) d[i] = ST(acc[i]);                       \
    }                                                                          \
  }

DEF_RED(red_f32, float, float, float, ID, ID, 1)
DEF_RED(red_f64, double, double, double, ID, ID, 1)
DEF_RED(red_i32, int32_t, int32_t, uint32_t, ID, ID, 0)
DEF_RED(red_i64, int64_t, int64_t, uint64_t, ID, ID, 0)
DEF_RED(red_u8, uint8_t, uint8_t, uint8_t, ID, ID, 0)
DEF_RED(red_bf16, uint16_t, float, float, bf16_to_float, float_to_bf16, 1)
DEF_RED(red_f16, uint16_t, float, float, half_to_float, float_to_half, 1)

/* bool: sum and max are or, prod and min are and (as PyTorch) */
static void red_bool(char *dst, char *const *src, int w, int64_t n, int op) {
  red_u8(dst, src, w, n, (op == DL_RED_SUM || op == DL_RED_MAX) ? DL_RED_MAX : DL_RED_MIN);
}

static red_fn red_for(int dtype) {
  switch (dtype) {
  case DL_FLOAT32: return red_f32;
  case DL_FLOAT64: return red_f64;
  case DL_INT32: return red_i32;
  case DL_INT64: return red_i64;
  case DL_UINT8: return red_u8;
  case DL_BOOL: return red_bool;
  case DL_BFLOAT16: return red_bf16;
  default: return red_f16;
  }
}

typedef struct red_job {
  red_fn fn;
  char *dst;
  char *src[MAX_WORLD];
  int w, op, es;
} red_job;

static void red_part(void *ctx, int64_t b, int64_t e) {
  red_job *j = ctx;
  char *src[MAX_WORLD];
  for (int r = 0; r < j->w; r++) src[r] = j->src[r] + b * j->es;
  j->fn(j->dst + b * j->es, src, j->w, e - b, j->op);
}

/* -- Collectives ----------------------------------------------------------- */

static int64_t chunk_elems(shm *g, int es) { return (int64_t)(g->slot_bytes / es); }

static int shm_all_reduce(void *impl, dl_tensor *t, int op) {
  shm *g = impl;
  int64_t n = dl_tensor_numel(t);
  if (begin(g, "all_reduce", K_ALL_REDUCE, op, t->dtype, n)) return -1;
  int es = dl_dtype_sizes[t->dtype];
  char *data = tensor_first(t);
  int64_t ce = chunk_elems(g, es);
  static _Thread_local red_job job;
  for (int64_t off = 0; off < n; off += ce) {
    int64_t m = n - off < ce ? n - off : ce;
    int set = (int)(g->step++ & 1);
    memcpy(slot_of(g, set, g->rank), data + off * es, (size_t)(m * es));
    if (sync_all(g, "all_reduce")) return -1;
    int64_t lo = m * g->rank / g->world, hi = m * (g->rank + 1) / g->world;
    if (hi > lo) {
      job.fn = red_for(t->dtype);
      job.w = g->world;
      job.op = op;
      job.es = es;
      job.dst = slot_of(g, set, g->rank) + lo * es;
      for (int r = 0; r < g->world; r++) job.src[r] = slot_of(g, set, r) + lo * es;
      parallel_for(hi - lo, PAR_GRAIN, red_part, &job);
    }
    if (sync_all(g, "all_reduce")) return -1;
    for (int q = 0; q < g->world; q++) {
      int64_t a = m * q / g->world, b = m * (q + 1) / g->world;
      memcpy(data + (off + a) * es, slot_of(g, set, q) + a * es, (size_t)((b - a) * es));
    }
  }
  return 0;
}

static int shm_broadcast(void *impl, dl_tensor *t, int src) {
  shm *g = impl;
  int64_t n = dl_tensor_numel(t);
  if (begin(g, "broadcast", K_BROADCAST, src, t->dtype, n)) return -1;
  int es = dl_dtype_sizes[t->dtype];
  char *data = tensor_first(t);
  int64_t ce = chunk_elems(g, es);
  for (int64_t off = 0; off < n; off += ce) {
    int64_t m = n - off < ce ? n - off : ce;
    int set = (int)(g->step++ & 1);
    if (g->rank == src) memcpy(slot_of(g, set, src), data + off * es, (size_t)(m * es));
    if (sync_all(g, "broadcast")) return -1;
    if (g->rank != src) memcpy(data + off * es, slot_of(g, set, src), (size_t)(m * es));
  }
  return 0;
}

static int shm_all_gather(void *impl, dl_tensor *out, const dl_tensor *t) {
  shm *g = impl;
  int64_t n = dl_tensor_numel(t);
  if (begin(g, "all_gather", K_ALL_GATHER, 0, t->dtype, n)) return -1;
  int es = dl_dtype_sizes[t->dtype];
  const char *data = tensor_first(t);
  char *o = tensor_first(out);
  int64_t ce = chunk_elems(g, es);
  for (int64_t off = 0; off < n; off += ce) {
    int64_t m = n - off < ce ? n - off : ce;
    int set = (int)(g->step++ & 1);
    memcpy(slot_of(g, set, g->rank), data + off * es, (size_t)(m * es));
    if (sync_all(g, "all_gather")) return -1;
    for (int q = 0; q < g->world; q++)
      memcpy(o + (q * n + off) * es, slot_of(g, set, q), (size_t)(m * es));
  }
  return 0;
}

static int shm_barrier(void *impl) {
  shm *g = impl;
  if (begin(g, "barrier", K_BARRIER, 0, 0, 0)) return -1;
  return sync_all(g, "barrier");
}

static void shm_free(void *impl) {
  shm *g = impl;
  if (!g) return;
  if (g->base) munmap(g->base, g->bytes);
  free(g);
}

DL_HIDDEN const pg_ops shm_ops = {
  "shm", shm_all_reduce, shm_broadcast, shm_all_gather, shm_barrier, shm_free
};

/* -- Creating the arena ------------------------------------------------------ */

static void layout(shm *g, size_t slot) {
  g->slot_bytes = slot;
  g->stride = slot + SLOT_PAD;  /* consecutive slots 320 B off a 4 KiB multiple */
  g->data_off = ((size_t)LINE * (1 + g->world) + 4095) & ~(size_t)4095;
  g->bytes = g->data_off + (size_t)2 * g->world * g->stride;
}

static int map_fd(shm *g, int fd, const char *name, int prot) {
  void *p = mmap(NULL, g->bytes, prot, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return dl_err(EM_PG_OS, "dl_pg_shm_new", name, strerror(errno));
  g->base = p;
  return 0;
}

DL_HIDDEN void *shm_new(dl_store *store, int rank, int world, const char *job_id,
                        double timeout_s) {
  static int groups;  /* same order on every rank: names the store keys */
  const char *op = "dl_pg_shm_new";
  if (world < 1 || world > MAX_WORLD || rank < 0 || rank >= world)
    return dl_errp(EM_PG_OS, op, "arguments", "rank or world size out of range (world 1..1024)");
  if (world > 1 && !store) return dl_errp(EM_PG_OS, op, "arguments", "a store is needed for world > 1");
  shm *g = calloc(1, sizeof *g);
  if (!g) return dl_errp(EM_PG_OS, op, "calloc", "out of memory");
  g->rank = rank;
  g->world = world;
  g->timeout = timeout_s > 0 ? timeout_s : 600;
  const char *dbg = getenv("DDP_DEBUG");
  g->debug = dbg && *dbg && strcmp(dbg, "0") != 0;
  int k = groups++;
  char id[100], key[160], name[160] = "", val[256];
  snprintf(id, sizeof id, "%s", job_id && *job_id ? job_id : "");
  int no_id = !id[0];  /* the arena is then named after rank 0's pid */
  if (no_id) snprintf(id, sizeof id, "nojob");
  for (char *c = id; *c; c++)
    if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
          *c == '-' || *c == '_' || *c == '.')) *c = '_';
  snprintf(key, sizeof key, "ddp/shm/%s/%d/arena", id, k);
  int created = 0, fd = -1;

  if (rank == 0) {
    size_t slot = DEFAULT_SLOT;
    const char *sb = getenv("DDP_SHM_SLOT_BYTES");
    if (sb && *sb) {
      long long v = atoll(sb);
      if (v >= 4096) slot = (size_t)v & ~(size_t)63;
    }
    layout(g, slot);
    struct statvfs sv;  /* leave room in a small /dev/shm (docker: 64 MiB) */
    if (statvfs("/dev/shm", &sv) == 0) {
      size_t avail = (size_t)sv.f_bavail * sv.f_frsize;
      while (g->bytes > avail / 2 && g->slot_bytes > (64u << 10)) layout(g, g->slot_bytes / 2);
    }
    for (int n = 0; n < 1000; n++) {
      if (no_id) snprintf(name, sizeof name, "/ddplua-p%ld-%d", (long)getpid(), n);
      else snprintf(name, sizeof name, "/ddplua-%s-%d", id, n);
      fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
      if (fd >= 0 || errno != EEXIST) break;
    }
    if (fd < 0) { dl_err(EM_PG_OS, op, name, strerror(errno)); goto fail; }
    created = 1;
    int e = ftruncate(fd, (off_t)g->bytes) ? errno : posix_fallocate(fd, 0, (off_t)g->bytes);
    if (e) {
      char why[200];
      snprintf(why, sizeof why, "cannot reserve %zu bytes (%s); is /dev/shm large enough?", g->bytes, strerror(e));
      dl_err(EM_PG_OS, op, name, why);
      goto fail;
    }
    if (map_fd(g, fd, name, PROT_READ | PROT_WRITE)) goto fail;
    close(fd);
    fd = -1;
    header *h = (header *)g->base;
    *h = (header){ MAGIC, world, (int64_t)g->slot_bytes, (int64_t)g->bytes };
    snprintf(val, sizeof val, "%s %zu %zu", name, g->bytes, g->slot_bytes);
    if (world > 1 && dl_store_set(store, key, val, (int64_t)strlen(val))) goto fail;
  } else {
    int64_t len;
    char *v = dl_store_get(store, key, timeout_s, &len);
    if (!v) goto fail;
    size_t bytes = 0, slot = 0;
    int ok = sscanf(v, "%159s %zu %zu", name, &bytes, &slot) == 3;
    dl_store_free(v);
    if (!ok) { dl_err(EM_PG_ARENA, op, name, "bad store record"); goto fail; }
    layout(g, slot);
    if (g->bytes != bytes) { dl_err(EM_PG_ARENA, op, name, "size"); goto fail; }
    fd = shm_open(name, O_RDWR, 0);
    if (fd < 0) { dl_err(EM_PG_OS, op, name, strerror(errno)); goto fail; }
    struct stat st;
    if (fstat(fd, &st) || (size_t)st.st_size != bytes) {
      dl_err(EM_PG_ARENA, op, name, "file size");
      goto fail;
    }
    if (map_fd(g, fd, name, PROT_READ | PROT_WRITE)) goto fail;
    close(fd);
    fd = -1;
    header *h = (header *)g->base;
    if (h->magic != MAGIC || h->world != world || h->slot_bytes != (int64_t)slot) {
      dl_err(EM_PG_ARENA, op, name, "header");
      goto fail;
    }
  }
  if (world > 1) {
    char bkey[180];
    snprintf(bkey, sizeof bkey, "ddp/shm/%s/%d/mapped", id, k);
    if (dl_store_barrier(store, bkey, world, timeout_s)) goto fail;
    if (rank == 0) dl_store_delete(store, key);
  }
  /* every rank holds a mapping: the name is no longer needed */
  if (created) shm_unlink(name);
  return g;
fail:
  if (fd >= 0) close(fd);
  if (created) shm_unlink(name);
  shm_free(g);
  return NULL;
}
