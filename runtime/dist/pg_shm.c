/*
** dist/pg_shm.c -- collectives among the ranks of one node through a shared-memory
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
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "dist/pg.h"

enum { LINE = 128, SLOT_PAD = 320, MAX_WORLD = PG_MAX_WORLD, MAX_BUFS = 64 };
#define MAGIC 0x31306d6873646464ull  /* "dddshm01" */
/* Small enough that a chunk one rank wrote is still in the shared cache
** when the others read it: 2 ranks reached 8.6-11 GB/s bus bandwidth for
** 16-256 MiB with 512 KiB slots, 5.7-6.9 GB/s with 4 MiB ones. */
#define DEFAULT_SLOT (512u << 10)
#define CHAN_BYTES (512u << 10)      /* a point-to-point half-buffer */

typedef struct rec {   /* one call, for DDP_DEBUG's comparison */
  int64_t seq, numel;
  int32_t kind, arg, dtype, pad;
} rec;

typedef struct ctl {
  _Atomic uint64_t arrive;  /* epochs this rank reached */
  int32_t pid;              /* to tell a dead rank from a late one */
  /* the records on a cache line of their own: writing one must not take
  ** away the line the other ranks poll for arrivals */
  _Alignas(64) rec r[2];    /* by the call's seq parity */
} ctl;
_Static_assert(sizeof(ctl) <= LINE, "control line");

typedef struct header {
  uint64_t magic;
  int64_t world, slot_bytes, arena_bytes;
} header;

/* One direction of a point-to-point link: chunk c of the stream goes to
** half c & 1; the sender may reuse a half once the receiver acked it. */
typedef struct chan {
  _Alignas(64) _Atomic uint64_t sent;
  _Alignas(64) _Atomic uint64_t acked;
  int64_t total[2];   /* the message's size, with each chunk: sizes must agree */
} chan;
#define CHAN_HDR 256
#define PAIR_BYTES (2 * (CHAN_HDR + 2 * (size_t)CHAN_BYTES))

typedef struct peer {   /* the link with one other rank, made on first use */
  char *base;
  chan *out, *in;
  char *out_data, *in_data;
  uint64_t nsent, nrecv;   /* chunks */
} peer;

typedef struct shm {
  char *base;
  size_t bytes;
  size_t slot_bytes, stride, data_off;
  int rank, world, debug, node, group;
  int rank0;      /* the job's rank of local rank 0 (node * world), for messages */
  const char *label;  /* set by hier: the user's call its messages name, */
  int64_t label_seq;  /* and that call's number (not this group's own) */
  int unchecked;  /* the current call's records are still to be compared */
  uint64_t epoch, step;
  int64_t seq;
  double timeout;
  int broken;
  dl_store *store;
  char id[100];
  peer *peers;
  struct shbuf *bufs[MAX_BUFS];  /* shared buffers (zero-copy all-reduce) */
  int nbufs, nbuf_calls;
  char why[256];
} shm;

static ctl *ctl_of(shm *g, int r) { return (ctl *)(g->base + LINE * (1 + r)); }
static char *slot_of(shm *g, int set, int r) {
  return g->base + g->data_off + (size_t)(set * g->world + r) * g->stride;
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

/* The call a message names: the caller's (hier) where it set one. */
static const char *nm(shm *g, const char *name) { return g->label ? g->label : name; }
static long long sq(shm *g) { return (long long)(g->label ? g->label_seq : g->seq); }

DL_HIDDEN void shm_label(void *impl, const char *name, int64_t seq) {
  shm *g = impl;
  g->label = name;
  g->label_seq = seq;
}

static int check_usable(shm *g, const char *name) {
  if (g->broken) return dl_err(EM_PG_BROKEN, nm(g, name), g->why);
  return 0;
}

static int gone(shm *g, int r) {
  pid_t pid = ctl_of(g, r)->pid;
  return pid > 0 && kill(pid, 0) != 0 && errno == ESRCH;
}

/* What a wait waits for: every rank's arrival at epoch e (peer < 0), or
** *ctr reaching want, which rank peer advances. */
typedef struct waiter {
  const char *name, *what;
  uint64_t e;
  int peer;
  _Atomic uint64_t *ctr;
  uint64_t want;
} waiter;

static int arrived(shm *g, int r, uint64_t e) {
  return atomic_load_explicit(&ctl_of(g, r)->arrive, memory_order_acquire) >= e;
}

static int ready(shm *g, const waiter *w) {
  if (w->peer >= 0) return atomic_load_explicit(w->ctr, memory_order_acquire) >= w->want;
  for (int r = 0; r < g->world; r++)
    if (!arrived(g, r, w->e)) return 0;
  return 1;
}

/* "rank 2" / "ranks 1, 3": the ranks the wait still misses; *dead = one of
** them whose process is gone, or -1. */
static void missing(shm *g, const waiter *w, char *who, size_t cap, int *dead) {
  *dead = -1;
  if (w->peer >= 0) {
    snprintf(who, cap, "rank %d %s", g->rank0 + w->peer, w->what);
    if (gone(g, w->peer)) *dead = w->peer;
    return;
  }
  int cnt = 0;
  for (int q = 0; q < g->world; q++) cnt += !arrived(g, q, w->e);
  size_t n = (size_t)snprintf(who, cap, cnt == 1 ? "rank " : "ranks ");
  int first = 1;
  for (int q = 0; q < g->world && n < cap - 16; q++) {
    if (arrived(g, q, w->e)) continue;
    if (*dead < 0 && gone(g, q)) *dead = q;
    n += (size_t)snprintf(who + n, cap - n, first ? "%d" : ", %d", g->rank0 + q);
    first = 0;
  }
  if (n < cap - 16) snprintf(who + n, cap - n, " %s", w->what);
}

/* Spins briefly, then yields, then sleeps up to 0.2 ms at a time; every
** half second checks that the ranks it waits for still live, and names
** the missing ones once the group's timeout passes. */
static int wait_for(shm *g, const waiter *w) {
  double t0 = 0, next_check = 0;
  long sleep_ns = 2000;
  for (long it = 0;; it++) {
    if (ready(g, w)) return 0;
    if (it < 200) { cpu_relax(); continue; }
    if (it < 2000) { sched_yield(); if (it % 64) continue; }
    else {
      struct timespec ts = { 0, sleep_ns };
      nanosleep(&ts, NULL);
      if (sleep_ns < 200000) sleep_ns += sleep_ns / 4;
    }
    double t = now_s();
    if (t0 == 0) t0 = next_check = t;  /* spinning before took well under 1 ms */
    int late = t - t0 > g->timeout;
    if (!late && t < next_check) continue;
    next_check = t + 0.5;
    char who[200];
    int dead;
    missing(g, w, who, sizeof who, &dead);
    if (dead >= 0)
      return fail(g, dl_err(EM_PG_DEAD, nm(g, w->name), sq(g), g->rank0 + dead,
                            (int)ctl_of(g, dead)->pid, who));
    if (late) return fail(g, dl_err(EM_PG_TIMEOUT, nm(g, w->name), sq(g), g->timeout, who));
  }
}

/* Marks this rank's arrival at a new epoch and waits for every rank's. */
static int check_calls(shm *g, const char *name);

/* Marks this rank's arrival at a new epoch and waits for every rank's;
** the first sync of a call also compares the ranks' calls. */
static int sync_all(shm *g, const char *name) {
  uint64_t e = ++g->epoch;
  atomic_store_explicit(&ctl_of(g, g->rank)->arrive, e, memory_order_release);
  waiter w = { name, "to arrive", e, -1, NULL, 0 };
  if (wait_for(g, &w)) return -1;
  if (!g->unchecked) return 0;
  g->unchecked = 0;
  return check_calls(g, name);
}

/* Every rank recorded its call before this sync, and none can record its
** next-but-one before this rank's next sync (records alternate by seq
** parity, and every call syncs at least once), so the records read here
** are this call's. */
static int check_calls(shm *g, const char *name) {
  const rec *mine = &ctl_of(g, g->rank)->r[g->seq & 1];
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
    const rec *o = &ctl_of(g, r)->r[g->seq & 1];
    pg_describe(d, sizeof d, o->kind, o->arg, o->dtype, o->numel, o->seq);
    n += snprintf(msg + n, sizeof msg - n, "%srank %d called %s", r ? "; " : "", g->rank0 + r, d);
  }
  return fail(g, dl_err(EM_PG_MISMATCH, nm(g, name), sq(g), msg));
}

/* Starts a call: its number and its record, which the call's first sync
** compares with every rank's (always: it costs a few loads).  DDP_DEBUG=1
** adds a sync of its own, so calls that move no data are checked too. */
static int begin(shm *g, const char *name, int kind, int arg, int dtype, int64_t numel) {
  if (check_usable(g, name)) return -1;
  g->seq++;
  ctl_of(g, g->rank)->r[g->seq & 1] = (rec){ g->seq, numel, kind, arg, dtype, 0 };
  g->unchecked = 1;
  return g->debug ? sync_all(g, name) : 0;
}

/* -- Collectives ----------------------------------------------------------- */

static int64_t chunk_elems(shm *g, int es) { return (int64_t)(g->slot_bytes / es); }

static int zc_all_reduce(shm *g, struct shbuf *b, size_t off, dl_tensor *t, int op);
static struct shbuf *find_buf(shm *g, const char *p, size_t nbytes, size_t *off);

static int shm_all_reduce(void *impl, dl_tensor *t, int op) {
  shm *g = impl;
  int64_t n = dl_tensor_numel(t);
  if (begin(g, "all_reduce", PG_ALL_REDUCE, op, t->dtype, n)) return -1;
  int es = dl_dtype_sizes[t->dtype];
  char *data = tensor_first(t);
  if (n == 0) return sync_all(g, "all_reduce");  /* every call syncs: check_calls */
  size_t zoff;
  struct shbuf *zb = find_buf(g, data, (size_t)(n * es), &zoff);
  if (zb) return zc_all_reduce(g, zb, zoff, t, op);
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
  if (begin(g, "broadcast", PG_BROADCAST, src, t->dtype, n)) return -1;
  if (n == 0) return sync_all(g, "broadcast");
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
  if (begin(g, "all_gather", PG_ALL_GATHER, 0, t->dtype, n)) return -1;
  if (n == 0) return sync_all(g, "all_gather");
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

/* Rank r's block of the result: chunks of world pieces, piece q of each
** rank's slot headed for rank q, which reduces it straight into out. */
static int shm_reduce_scatter(void *impl, dl_tensor *out, const dl_tensor *t, int op) {
  shm *g = impl;
  int64_t n = dl_tensor_numel(out);
  if (begin(g, "reduce_scatter", PG_REDUCE_SCATTER, op, t->dtype, n * g->world)) return -1;
  if (n == 0) return sync_all(g, "reduce_scatter");
  int es = dl_dtype_sizes[t->dtype];
  const char *data = tensor_first(t);
  char *o = tensor_first(out);
  int64_t ce = chunk_elems(g, es) / g->world;
  if (ce < 1) ce = 1;
  static _Thread_local red_job job;
  for (int64_t off = 0; off < n; off += ce) {
    int64_t m = n - off < ce ? n - off : ce;
    int set = (int)(g->step++ & 1);
    char *mine = slot_of(g, set, g->rank);
    for (int q = 0; q < g->world; q++)
      memcpy(mine + q * m * es, data + (q * n + off) * es, (size_t)(m * es));
    if (sync_all(g, "reduce_scatter")) return -1;
    job.fn = red_for(t->dtype);
    job.w = g->world;
    job.op = op;
    job.es = es;
    job.dst = o + off * es;
    for (int r = 0; r < g->world; r++) job.src[r] = slot_of(g, set, r) + g->rank * m * es;
    parallel_for(m, PAR_GRAIN, red_part, &job);
  }
  return 0;  /* sets alternate: the next writer of this one waits at a sync */
}

static int shm_barrier(void *impl) {
  shm *g = impl;
  if (begin(g, "barrier", PG_BARRIER, 0, 0, 0)) return -1;
  return sync_all(g, "barrier");
}

/* A new shared-memory object of `bytes`, named "<prefix><n><suffix>" for
** the first n from `first` no other object has, reserved up front so a
** full /dev/shm fails here and not with SIGBUS at first touch.  Its fd, or
** -1 with the error set (op, the name tried, why); nothing is left behind. */
static int create_segment(char *name, size_t cap, const char *prefix, int first,
                          const char *suffix, size_t bytes, const char *op) {
  int fd = -1;
  for (int n = first; n < first + 1000; n++) {
    snprintf(name, cap, "%s%d%s", prefix, n, suffix);
    fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd >= 0 || errno != EEXIST) break;
  }
  if (fd < 0) return dl_err(EM_PG_OS, op, name, strerror(errno)), -1;
  int e = ftruncate(fd, (off_t)bytes) ? errno : posix_fallocate(fd, 0, (off_t)bytes);
  if (!e) return fd;
  char why[200];
  snprintf(why, sizeof why, "cannot reserve %zu bytes (%s); is /dev/shm large enough?", bytes,
           strerror(e));
  dl_err(EM_PG_OS, op, name, why);
  close(fd);
  shm_unlink(name);
  return -1;
}

/* -- Point to point ----------------------------------------------------------- */

/* The link with rank p: the lower rank makes a small arena for the pair
** and publishes its name; the higher one maps it and unlinks the name. */
static peer *link_to(shm *g, int p, const char *name) {
  if (!g->peers && !(g->peers = calloc((size_t)g->world, sizeof *g->peers))) {
    dl_err(EM_PG_OS, name, "calloc", "out of memory");
    return NULL;
  }
  peer *pr = &g->peers[p];
  if (pr->base) return pr;
  int lo = g->rank < p ? g->rank : p, hi = g->rank ^ p ^ lo;
  char key[220], path[200] = "";
  snprintf(key, sizeof key, "ddp/shm/%s/n%d/%d/p2p/%d-%d", g->id, g->node, g->group, lo, hi);
  int fd = -1;
  if (g->rank == lo) {
    char prefix[128], suffix[64];
    snprintf(prefix, sizeof prefix, "/ddplua-%s-", g->id);
    snprintf(suffix, sizeof suffix, "p%dx%dx%d", g->group, lo, hi);
    fd = create_segment(path, sizeof path, prefix, 0, suffix, PAIR_BYTES, name);
    if (fd < 0) return NULL;
    if (dl_store_set(g->store, key, path, (int64_t)strlen(path))) {
      close(fd);
      shm_unlink(path);
      return NULL;
    }
  } else {
    int64_t len;
    char *v = dl_store_get(g->store, key, g->timeout, &len);
    if (!v) return NULL;
    snprintf(path, sizeof path, "%s", v);
    dl_store_value_free(v);
    fd = shm_open(path, O_RDWR, 0);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) || (size_t)st.st_size != PAIR_BYTES) {
      dl_err(EM_PG_ARENA, name, path, fd < 0 ? strerror(errno) : "size");
      if (fd >= 0) close(fd);
      return NULL;
    }
  }
  void *m = mmap(NULL, PAIR_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED) {
    dl_err(EM_PG_OS, name, path, strerror(errno));
    if (g->rank == lo) shm_unlink(path);
    return NULL;
  }
  if (g->rank == hi) {
    shm_unlink(path);
    dl_store_delete(g->store, key);
  }
  char *c0 = m, *c1 = c0 + CHAN_HDR + 2 * (size_t)CHAN_BYTES;  /* lo -> hi, hi -> lo */
  pr->base = m;
  pr->out = (chan *)(g->rank == lo ? c0 : c1);
  pr->in = (chan *)(g->rank == lo ? c1 : c0);
  pr->out_data = (char *)pr->out + CHAN_HDR;
  pr->in_data = (char *)pr->in + CHAN_HDR;
  return pr;
}

static int64_t chunks_of(int64_t nbytes) {
  return nbytes <= 0 ? 1 : (nbytes + CHAN_BYTES - 1) / CHAN_BYTES;
}

static int shm_send(void *impl, const dl_tensor *t, int dst) {
  shm *g = impl;
  if (check_usable(g, "send")) return -1;
  peer *pr = link_to(g, dst, "send");
  if (!pr) return fail(g, -1);
  int64_t nbytes = dl_tensor_numel(t) * dl_dtype_sizes[t->dtype], k = chunks_of(nbytes);
  const char *data = tensor_first(t);
  for (int64_t i = 0; i < k; i++) {
    uint64_t c = pr->nsent;
    waiter w = { "send", "to receive", 0, dst, &pr->out->acked, c < 2 ? 0 : c - 1 };
    if (wait_for(g, &w)) return -1;
    int64_t off = i * CHAN_BYTES, m = nbytes - off < CHAN_BYTES ? nbytes - off : CHAN_BYTES;
    if (m > 0) memcpy(pr->out_data + (c & 1) * CHAN_BYTES, data + off, (size_t)m);
    pr->out->total[c & 1] = nbytes;
    pr->nsent = c + 1;
    atomic_store_explicit(&pr->out->sent, c + 1, memory_order_release);
  }
  return 0;
}

static int shm_recv(void *impl, dl_tensor *t, int src) {
  shm *g = impl;
  if (check_usable(g, "recv")) return -1;
  peer *pr = link_to(g, src, "recv");
  if (!pr) return fail(g, -1);
  int64_t nbytes = dl_tensor_numel(t) * dl_dtype_sizes[t->dtype], k = chunks_of(nbytes);
  char *data = tensor_first(t);
  for (int64_t i = 0; i < k; i++) {
    uint64_t c = pr->nrecv;
    waiter w = { "recv", "to send", 0, src, &pr->in->sent, c + 1 };
    if (wait_for(g, &w)) return -1;
    int64_t total = pr->in->total[c & 1];
    if (total != nbytes)
      return fail(g, dl_err(EM_PG_SIZE, "recv", src, (long long)total, (long long)nbytes,
                            "the link is out of step now"));
    int64_t off = i * CHAN_BYTES, m = nbytes - off < CHAN_BYTES ? nbytes - off : CHAN_BYTES;
    if (m > 0) memcpy(data + off, pr->in_data + (c & 1) * CHAN_BYTES, (size_t)m);
    pr->nrecv = c + 1;
    atomic_store_explicit(&pr->in->acked, c + 1, memory_order_release);
  }
  return 0;
}

/* -- Shared buffers ---------------------------------------------------------------- */

/* One mapping holding a buffer for every rank of the node (rank r's at
** base + r * stride): an all-reduce of a tensor inside it reads the other
** ranks' data where it lies, with no copy in (DDP's buckets live here). */
typedef struct shbuf {
  _Atomic int refs;   /* the group's registry and the tensor's storage */
  char *base;
  size_t bytes, stride;
} shbuf;

static void shbuf_release(shbuf *b) {
  if (atomic_fetch_sub(&b->refs, 1) != 1) return;
  munmap(b->base, b->bytes);
  free(b);
}

static void shbuf_deleter(void *ctx, void *data) {
  (void)data;
  shbuf_release(ctx);
}

static shbuf *find_buf(shm *g, const char *p, size_t nbytes, size_t *off) {
  for (int i = 0; i < g->nbufs; i++) {
    shbuf *b = g->bufs[i];
    const char *own = b->base + (size_t)g->rank * b->stride;
    if (p >= own && p + nbytes <= own + b->stride) {
      *off = (size_t)(p - own);
      return b;
    }
  }
  return NULL;
}

/* Every rank's data is in place: each reduces its share from all ranks'
** buffers into its own, then copies the other shares from their owners;
** the last sync keeps every buffer unchanged until all have copied. */
static int zc_all_reduce(shm *g, shbuf *b, size_t off, dl_tensor *t, int op) {
  int64_t n = dl_tensor_numel(t);
  int es = dl_dtype_sizes[t->dtype];
  char *own = b->base + (size_t)g->rank * b->stride + off;
  if (sync_all(g, "all_reduce")) return -1;
  int64_t lo = n * g->rank / g->world, hi = n * (g->rank + 1) / g->world;
  static _Thread_local red_job job;
  if (hi > lo) {
    job.fn = red_for(t->dtype);
    job.w = g->world;
    job.op = op;
    job.es = es;
    job.dst = own + lo * es;
    for (int r = 0; r < g->world; r++) job.src[r] = b->base + (size_t)r * b->stride + off + lo * es;
    parallel_for(hi - lo, PAR_GRAIN, red_part, &job);
  }
  if (sync_all(g, "all_reduce")) return -1;
  for (int q = 0; q < g->world; q++) {
    int64_t a = n * q / g->world, e = n * (q + 1) / g->world;
    if (q != g->rank && e > a)
      memcpy(own + a * es, b->base + (size_t)q * b->stride + off + a * es, (size_t)((e - a) * es));
  }
  return sync_all(g, "all_reduce");
}

/* t holds world blocks; this rank's is its input.  Inside a shared buffer
** (at the same place on every rank: the place is part of the call's
** record, so a different one is a mismatch) each rank copies the other
** blocks from their owners' memory, between two syncs; elsewhere through
** the arena, as all_gather from this rank's block, which every chunk reads
** before it is written back. */
static int shm_all_gather_inplace(void *impl, dl_tensor *t) {
  shm *g = impl;
  int64_t n = dl_tensor_numel(t) / g->world;
  int es = dl_dtype_sizes[t->dtype];
  char *data = tensor_first(t);
  size_t zoff;
  shbuf *b = find_buf(g, data, (size_t)(n * g->world * es), &zoff);
  if (!b) {
    int64_t off = (int64_t)g->rank * n;
    dl_tensor *mine = tensor_alias(t, &n, t->stride, 1, t->offset + off);
    if (!mine) return -1;
    int rc = shm_all_gather(impl, t, mine);
    dl_tensor_release(mine);
    return rc;
  }
  if (begin(g, "all_gather", PG_ALL_GATHER, (int)(zoff / (size_t)es), t->dtype, n)) return -1;
  if (sync_all(g, "all_gather")) return -1;
  char *own = b->base + (size_t)g->rank * b->stride + zoff;
  size_t bytes = (size_t)(n * es);
  for (int q = 0; q < g->world; q++)
    if (q != g->rank && bytes)
      memcpy(own + (size_t)q * bytes, b->base + (size_t)q * b->stride + zoff + (size_t)q * bytes, bytes);
  return sync_all(g, "all_gather");
}

/* A zeroed 1-D tensor of numel elements inside a new shared mapping, or in
** private memory when /dev/shm is short or any rank could not map it (the
** ranks agree through the store).  Every rank of the group calls it, in
** the same order, with the same size. */
DL_HIDDEN dl_tensor *shm_shared_zeros(void *impl, int64_t numel, int dtype) {
  shm *g = impl;
  const char *op = "ddp.DDP";
  int64_t one = numel;
  size_t need = (size_t)numel * dl_dtype_sizes[dtype];
  for (int i = 0; i < g->nbufs;) {  /* drop mappings whose tensors are gone */
    if (atomic_load(&g->bufs[i]->refs) == 1) {
      shbuf_release(g->bufs[i]);
      g->bufs[i] = g->bufs[--g->nbufs];
    } else i++;
  }
  if (g->world == 1 || !g->store || g->nbufs == MAX_BUFS || need == 0) return dl_zeros(&one, 1, dtype);
  size_t stride = ((need + 4095) & ~(size_t)4095) + SLOT_PAD, bytes = stride * (size_t)g->world;
  int j = g->nbuf_calls++;
  char key[220], okkey[230], name[160] = "-", val[200];
  snprintf(key, sizeof key, "ddp/shm/%s/n%d/%d/buf%d", g->id, g->node, g->group, j);
  snprintf(okkey, sizeof okkey, "%s/ok", key);
  int fd = -1;
  if (g->rank == 0) {
    struct statvfs sv;
    if (statvfs("/dev/shm", &sv) == 0 && bytes <= (size_t)sv.f_bavail * sv.f_frsize / 2) {
      char prefix[128];
      snprintf(prefix, sizeof prefix, "/ddplua-%s-", g->id);
      /* on failure the ranks agree on private memory instead */
      fd = create_segment(name, sizeof name, prefix, 500, "", bytes, op);
      if (fd < 0) snprintf(name, sizeof name, "-");
    }
    snprintf(val, sizeof val, "%s", name);
    if (dl_store_set(g->store, key, val, (int64_t)strlen(val))) goto fail;
  } else {
    int64_t len;
    char *v = dl_store_get(g->store, key, g->timeout, &len);
    if (!v) return NULL;
    snprintf(name, sizeof name, "%s", v);
    dl_store_value_free(v);
    if (strcmp(name, "-")) fd = shm_open(name, O_RDWR, 0);
  }
  void *base = MAP_FAILED;
  struct stat st;
  if (fd >= 0 && fstat(fd, &st) == 0 && (size_t)st.st_size == bytes)
    base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (fd >= 0) close(fd);
  char bkey[240];
  snprintf(bkey, sizeof bkey, "%s/mapped", key);
  int64_t oks = 0;
  if (dl_store_add(g->store, okkey, base != MAP_FAILED, NULL) ||
      dl_store_barrier(g->store, bkey, g->world, g->timeout) ||
      dl_store_add(g->store, okkey, 0, &oks)) {
    if (base != MAP_FAILED) munmap(base, bytes);
    goto fail;
  }
  if (g->rank == 0 && strcmp(name, "-")) shm_unlink(name);
  shbuf *b = oks == g->world ? calloc(1, sizeof *b) : NULL;
  if (!b) {  /* some rank could not map it: all take private memory */
    if (base != MAP_FAILED) munmap(base, bytes);
    return dl_zeros(&one, 1, dtype);
  }
  atomic_init(&b->refs, 2);
  b->base = base;
  b->bytes = bytes;
  b->stride = stride;
  dl_tensor *t = dl_from_blob(b->base + (size_t)g->rank * stride, dtype, &one, NULL, 1,
                              shbuf_deleter, b);
  if (!t) {
    munmap(base, bytes);
    free(b);
    return NULL;
  }
  g->bufs[g->nbufs++] = b;
  return t;
fail:;
  char why[300];
  snprintf(why, sizeof why, "%s", dl_last_error());
  if (g->rank == 0 && strcmp(name, "-")) shm_unlink(name);
  return dl_errp(EM_PG_OS, op, "shared buffer", why);
}

static void shm_set_timeout(void *impl, double s) { ((shm *)impl)->timeout = s; }

static void shm_free(void *impl) {
  shm *g = impl;
  if (!g) return;
  if (g->peers) {
    for (int r = 0; r < g->world; r++)
      if (g->peers[r].base) munmap(g->peers[r].base, PAIR_BYTES);
    free(g->peers);
  }
  for (int i = 0; i < g->nbufs; i++) shbuf_release(g->bufs[i]);
  if (g->base) munmap(g->base, g->bytes);
  free(g);
}

DL_HIDDEN const pg_ops shm_ops = {
  "shm", shm_all_reduce, shm_broadcast, shm_all_gather, shm_reduce_scatter,
  shm_send, shm_recv, shm_barrier, shm_set_timeout, shm_free,
  NULL,  /* all_reduce_many: one call at a time */
  shm_all_gather_inplace
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

DL_HIDDEN void pg_clean_id(char *out, size_t cap, const char *job_id) {
  snprintf(out, cap, "%s", job_id && *job_id ? job_id : "nojob");
  for (char *c = out; *c; c++)
    if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
          *c == '-' || *c == '_' || *c == '.')) *c = '_';
}

DL_HIDDEN void *shm_new(dl_store *store, int rank, int world, const char *job_id,
                        int node, double timeout_s) {
  static int groups;  /* same order on every rank: names the store keys */
  const char *op = "dl_pg_shm_new";
  if (world < 1 || world > MAX_WORLD || rank < 0 || rank >= world)
    return dl_errp(EM_PG_OS, op, "arguments", "rank or world size out of range (world 1..1024)");
  if (world > 1 && !store) return dl_errp(EM_PG_OS, op, "arguments", "a store is needed for world > 1");
  shm *g = calloc(1, sizeof *g);
  if (!g) return dl_errp(EM_PG_OS, op, "calloc", "out of memory");
  g->rank = rank;
  g->world = world;
  g->node = node;
  g->rank0 = node * world;  /* hier: node k holds ranks k * world and up */
  g->store = store;
  g->timeout = timeout_s > 0 ? timeout_s : 600;
  const char *dbg = getenv("DDP_DEBUG");
  g->debug = dbg && *dbg && strcmp(dbg, "0") != 0;
  int k = g->group = groups++;
  char *id = g->id, key[200], name[160] = "", val[256];
  pg_clean_id(g->id, sizeof g->id, job_id);
  int no_id = !(job_id && *job_id);  /* the arena is then named after rank 0's pid */
  snprintf(key, sizeof key, "ddp/shm/%s/n%d/%d/arena", id, node, k);
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
    char prefix[128];
    if (no_id) snprintf(prefix, sizeof prefix, "/ddplua-p%ld-", (long)getpid());
    else snprintf(prefix, sizeof prefix, "/ddplua-%s-", id);
    if ((fd = create_segment(name, sizeof name, prefix, 0, "", g->bytes, op)) < 0) goto fail;
    created = 1;
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
    dl_store_value_free(v);
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
  ctl_of(g, rank)->pid = (int32_t)getpid();
  if (world > 1) {
    char bkey[200];
    snprintf(bkey, sizeof bkey, "ddp/shm/%s/n%d/%d/mapped", id, node, k);
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
