/*
** flight.c -- the flight recorder's writer: every collective of this process
** as one entry of a ring (the layout of include/ddplua_flight.h), and this
** rank's step breakdown beside it.
**
** Entries are written in place by the thread that makes the call (the main
** thread, or a group's queue thread for asynchronous calls) with no lock:
** the record number comes from one atomic add, and each entry's state is
** stored last with release order, so a reader (the launcher, mapping the
** same file) sees an entry whole once its state says so.  A reader that
** races a wrap-around checks `slot`.
*/
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dist/flight.h"

_Static_assert(sizeof(dl_flight_entry) == 256, "a flight entry is 256 bytes");
_Static_assert(sizeof(dl_flight_header) == 12288, "the flight header is 12288 bytes");

static dl_flight_header *ring;   /* NULL until opened or first used */
static size_t ring_bytes;
static int ring_mapped;          /* a file mapping (else private memory) */
static _Thread_local char site[DL_FLIGHT_SITE];
static _Atomic int64_t comm_ns;  /* time blocked in collectives */

static dl_flight_entry *entries(void) {
  return (dl_flight_entry *)((char *)ring + ring->header_bytes);
}

static double wall_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int off;  /* dl_flight_open(..., -1): the recorder is off */

static int default_capacity(void) {
  const char *e = getenv("DDP_FLIGHT_ENTRIES");
  long n = e && *e ? strtol(e, NULL, 10) : 0;
  return n >= 16 && n <= (1 << 20) ? (int)n : 2048;
}

static void fill_header(dl_flight_header *h, int capacity, int rank, int world, int local_rank,
                        const char *job_id) {
  memcpy(h->magic, "DDPLUAFR", 8);
  h->version = DL_FLIGHT_VERSION;
  h->header_bytes = (int32_t)sizeof *h;
  h->entry_bytes = (int32_t)sizeof(dl_flight_entry);
  h->capacity = capacity;
  h->rank = rank;
  h->world = world;
  h->local_rank = local_rank;
  h->pid = (int32_t)getpid();
  gethostname(h->host, sizeof h->host - 1);
  snprintf(h->job_id, sizeof h->job_id, "%s", job_id ? job_id : "");
  h->t_open = wall_s();
}

static size_t bytes_for(int capacity) {
  return sizeof(dl_flight_header) + (size_t)capacity * sizeof(dl_flight_entry);
}

/* A private ring, for a process that records before (or without) ddp.init. */
static int ensure_ring(void) {
  if (__atomic_load_n(&off, __ATOMIC_RELAXED)) return -1;
  if (ring) return 0;
  int cap = default_capacity();
  dl_flight_header *h = calloc(1, bytes_for(cap));
  if (!h) return -1;
  fill_header(h, cap, 0, 1, 0, "");
  ring_bytes = bytes_for(cap);
  ring = h;
  return 0;
}

DL_API int dl_flight_open(const char *path, int rank, int world, int local_rank, const char *job_id,
                          int capacity) {
  if (capacity < 0) {  /* off: nothing recorded from here on */
    __atomic_store_n(&off, 1, __ATOMIC_RELAXED);
    return 0;
  }
  __atomic_store_n(&off, 0, __ATOMIC_RELAXED);
  if (capacity == 0) capacity = default_capacity();
  if (capacity < 16 || capacity > (1 << 20))
    return dl_err(EM_BADVALUE, "flight recorder", "capacity must be 16..1048576 entries");
  size_t bytes = bytes_for(capacity);
  dl_flight_header *h;
  int mapped = 0;
  if (path && *path) {
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return dl_err(EM_PG_OS, "flight recorder", path, strerror(errno));
    if (ftruncate(fd, (off_t)bytes) != 0) {
      int e = errno;
      close(fd);
      return dl_err(EM_PG_OS, "flight recorder", path, strerror(e));
    }
    h = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (h == MAP_FAILED) return dl_err(EM_PG_OS, "flight recorder", path, strerror(errno));
    memset(h, 0, bytes);
    mapped = 1;
  } else if (!(h = calloc(1, bytes))) {
    return dl_err(EM_PG_OS, "flight recorder", "calloc", "out of memory");
  }
  fill_header(h, capacity, rank, world, local_rank, job_id);
  dl_flight_header *old = ring;
  if (old) {  /* keep what was recorded before (a world of one's first calls) */
    int64_t n = old->head, first = n > capacity ? n - capacity : 0;
    if (n - first > old->capacity) first = n - old->capacity;
    dl_flight_entry *oe = entries(), *ne = (dl_flight_entry *)((char *)h + h->header_bytes);
    for (int64_t k = first; k < n; k++) ne[k % capacity] = oe[k % old->capacity];
    h->head = n;
    h->steps = old->steps;
    memcpy(h->step, old->step, sizeof h->step);
  }
  /* the old ring is left in place: another thread may still be finishing
  ** an entry there (a few hundred KiB, once per process) */
  __atomic_store_n(&ring, h, __ATOMIC_RELEASE);
  ring_bytes = bytes;
  ring_mapped = mapped;
  return 0;
}

DL_API void dl_flight_site(const char *s) {
  snprintf(site, sizeof site, "%s", s ? s : "");
}

DL_API const dl_flight_header *dl_flight_get(void) { return ring; }

DL_HIDDEN int64_t fr_begin(int group, int64_t seq, int kind, int arg, int dtype, int64_t numel,
                           int bucket, const char *note, int queued) {
  if (ensure_ring()) return -1;
  dl_flight_header *h = ring;
  int64_t k = __atomic_fetch_add(&h->head, 1, __ATOMIC_ACQ_REL);
  dl_flight_entry *e = &entries()[k % h->capacity];
  __atomic_store_n(&e->state, DL_FS_EMPTY, __ATOMIC_RELEASE);
  e->slot = k;
  e->seq = seq;
  e->numel = numel;
  e->group = group;
  e->kind = kind;
  e->arg = arg;
  e->dtype = dtype;
  e->bucket = bucket;
  double t = wall_s();
  e->t_enqueue = t;
  e->t_start = queued ? 0 : t;
  e->t_end = 0;
  memcpy(e->site, site, sizeof e->site);
  snprintf(e->note, sizeof e->note, "%s", note ? note : "");
  __atomic_store_n(&e->state, queued ? DL_FS_QUEUED : DL_FS_STARTED, __ATOMIC_RELEASE);
  if (!queued) __atomic_store_n(&h->in_call, k + 1, __ATOMIC_RELEASE);
  return k;
}

/* The entry of record k, or NULL when it was overwritten since. */
static dl_flight_entry *entry_of(int64_t k) {
  if (k < 0 || !ring) return NULL;
  dl_flight_entry *e = &entries()[k % ring->capacity];
  return e->slot == k ? e : NULL;
}

DL_HIDDEN void fr_start(int64_t k) {
  dl_flight_entry *e = entry_of(k);
  if (!e) return;
  e->t_start = wall_s();
  __atomic_store_n(&e->state, DL_FS_STARTED, __ATOMIC_RELEASE);
}

DL_HIDDEN void fr_end(int64_t k, int rc, int blocking) {
  dl_flight_entry *e = entry_of(k);
  if (!e) return;
  double t = wall_s();
  e->t_end = t;
  __atomic_store_n(&e->state, rc ? DL_FS_FAILED : DL_FS_DONE, __ATOMIC_RELEASE);
  if (blocking) {  /* its time went to the communication count already (pg.c) */
    ring->t_idle = t;
    __atomic_store_n(&ring->in_call, 0, __ATOMIC_RELEASE);
  }
}

DL_HIDDEN void fr_wait(int64_t k, int on) {
  dl_flight_header *h = ring;
  if (!h || k < 0) return;
  if (!on) h->t_idle = wall_s();
  __atomic_store_n(&h->in_call, on ? k + 1 : 0, __ATOMIC_RELEASE);
}

DL_HIDDEN void fr_add_comm(double seconds) {
  if (seconds > 0) atomic_fetch_add(&comm_ns, (int64_t)(seconds * 1e9));
}

DL_API double dl_flight_comm_seconds(void) { return (double)atomic_load(&comm_ns) * 1e-9; }

/* mkdir -p of path's folder. */
static void make_parents(const char *path) {
  char d[4096];
  snprintf(d, sizeof d, "%s", path);
  for (char *p = d + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    mkdir(d, 0777);
    *p = '/';
  }
}

DL_API int dl_flight_dump(const char *path) {
  if (ensure_ring()) return dl_err(EM_PG_OS, "flight recorder", "calloc", "out of memory");
  make_parents(path);
  dl_file *f = dl_file_create(path, (int64_t)ring_bytes, "flight recorder dump");
  if (!f) return -1;
  ring->t_dump = wall_s();
  snprintf(ring->status, sizeof ring->status, "running");
  if (dl_file_write(f, ring, ring_bytes)) {
    dl_file_abort(f);
    return -1;
  }
  return dl_file_commit(f);
}

DL_API int dl_flight_stack_wanted(void) {
  dl_flight_header *h = ring;
  return h && __atomic_load_n(&h->stack_req, __ATOMIC_ACQUIRE) !=
                  __atomic_load_n(&h->stack_ack, __ATOMIC_ACQUIRE);
}

DL_API void dl_flight_want_stack(void) {
  dl_flight_header *h = ring;
  if (h) __atomic_fetch_add(&h->stack_req, 1, __ATOMIC_ACQ_REL);
}

DL_API void dl_flight_set_stack(const char *text) {
  dl_flight_header *h = ring;
  if (!h) return;
  int64_t req = __atomic_load_n(&h->stack_req, __ATOMIC_ACQUIRE);
  snprintf(h->stack, sizeof h->stack, "%s", text ? text : "");
  h->t_stack = wall_s();
  __atomic_store_n(&h->stack_ack, req, __ATOMIC_RELEASE);
}

DL_API void dl_flight_step_done(double total, double data, double forward, double backward,
                                double comm, double optimizer) {
  if (ensure_ring()) return;
  dl_flight_header *h = ring;
  int64_t n = h->steps + 1;
  h->step[(n - 1) % DL_FLIGHT_STEPS] = (dl_flight_step){
    n, wall_s(), total, data, forward, backward, comm, optimizer};
  __atomic_store_n(&h->steps, n, __ATOMIC_RELEASE);
}

DL_API int dl_flight_describe(const dl_flight_entry *e, char *out, int cap) {
  static const char *const kinds[] = {"all_reduce", "broadcast", "all_gather", "barrier",
                                      "reduce_scatter", "send", "recv"};
  static const char *const reds[] = {"sum", "avg", "max", "min", "prod"};
  if (!e || !out || cap <= 0) return -1;
  const char *k = e->kind >= 0 && e->kind <= DL_FK_RECV ? kinds[e->kind] : "?";
  char arg[32] = "";
  if ((e->kind == DL_FK_ALL_REDUCE || e->kind == DL_FK_REDUCE_SCATTER) && e->arg >= DL_PG_SUM &&
      e->arg <= DL_PG_PROD)
    snprintf(arg, sizeof arg, "(%s)", reds[e->arg - DL_PG_SUM]);
  else if (e->kind == DL_FK_BROADCAST) snprintf(arg, sizeof arg, "(src %d)", e->arg);
  else if (e->kind == DL_FK_SEND) snprintf(arg, sizeof arg, "(dst %d)", e->arg);
  else if (e->kind == DL_FK_RECV) snprintf(arg, sizeof arg, "(src %d)", e->arg);
  if (e->kind == DL_FK_BARRIER) return snprintf(out, (size_t)cap, "barrier #%lld", (long long)e->seq);
  return snprintf(out, (size_t)cap, "%s%s #%lld %s x%lld", k, arg, (long long)e->seq,
                  fmt_dtype(e->dtype), (long long)e->numel);
}
