/*
** pg.c -- process groups: the choice of backend, argument checks, the
** dispatch of dl_pg_* to a backend's vtable (pg.h), and asynchronous calls.
**
** Asynchronous calls run in call order on one thread per group, so every
** rank issues them to the backend in the same order; a blocking call first
** waits for the queue to empty, then runs on the caller's thread (no thread
** hop on the latency path).
**
** Devices: a backend takes contiguous tensors on one device, pg->device
** (-1: host memory, for shm / gloo / hier; cuda:k for nccl).  A tensor
** elsewhere is staged: copied to that device, the collective run there,
** the result copied back -- as PyTorch's gloo does for CUDA tensors.  So
** CUDA tensors work on every backend, and CPU tensors on an nccl group
** too (metrics, the reducer's small bookkeeping tensors).
*/
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/trace.h"
#include "cuda/cuda.h"
#include "dist/flight.h"
#include "dist/pg.h"

struct dl_work {
  dl_work *next;
  dl_pg *pg;
  dl_tensor *t, *orig;   /* orig: the caller's tensor when t is a staged copy, or NULL */
  int op, rc;
  double timeout;
  int64_t fr;    /* its flight recorder entry */
  dl_trace_event *te;  /* its span while a trace is on, else NULL */
  _Atomic int done, refs;
  char err[1024];
};

struct pg_queue {
  pthread_t th;
  pthread_mutex_t mu;
  pthread_cond_t work, idle;
  dl_work *head, *tail;
  int busy, stop;
};

DL_HIDDEN dl_pg *pg_wrap(const pg_ops *ops, void *impl, int rank, int world, double timeout) {
  if (!impl) return NULL;
  dl_pg *pg = calloc(1, sizeof *pg);
  if (!pg) {
    ops->free(impl);
    return dl_errp(EM_PG_OS, "process group", "calloc", "out of memory");
  }
  pg->ops = ops;
  pg->impl = impl;
  pg->rank = rank;
  pg->world = world;
  pg->timeout = timeout > 0 ? timeout : 600;
  pg->device = -1;
  static _Atomic int groups;
  pg->fr_group = atomic_fetch_add(&groups, 1);
  pg->fr_bucket = -1;
  return pg;
}

DL_HIDDEN void pg_flight_note(dl_pg *pg, int bucket, const char *note) {
  pg->fr_bucket = bucket;
  pg->fr_note = note;
}

/* When this thread's blocking call began: its time counts as
** communication in the step breakdown, recorder on or off. */
static _Thread_local double call_t0;
/* its span, while a trace is on (call_traced) */
static _Thread_local dl_trace_event call_ev;
static _Thread_local int call_traced;

/* The trace's span of the call about to run on pg (its number is
** fr_calls + 1), named as the flight recorder names it. */
static void trace_begin(dl_trace_event *e, const dl_pg *pg, int kind, int arg, const dl_tensor *t,
                        int thread) {
  dl_flight_entry fe;
  memset(&fe, 0, sizeof fe);
  fe.seq = pg->fr_calls + 1;
  fe.numel = t ? dl_tensor_numel(t) : 0;
  fe.kind = kind;
  fe.arg = arg;
  fe.dtype = t ? t->dtype : -1;
  memset(e, 0, sizeof *e);
  dl_flight_describe(&fe, e->name, (int)sizeof e->name);
  snprintf(e->note, sizeof e->note, "%s", pg->fr_note ? pg->fr_note : "");
  e->seq = fe.seq;
  e->kind = DL_TK_COLLECTIVE;
  e->thread = thread;
  e->bucket = pg->fr_bucket;
  e->group = pg->fr_group;
  e->t0 = trace_now();
}

/* The flight recorder's entry for the call about to run on pg (and its
** span, while a trace is on: *te for a queued call, else this thread's). */
static int64_t record_traced(dl_pg *pg, int kind, int arg, const dl_tensor *t, int queued,
                             dl_trace_event **te) {
  if (!queued) call_t0 = now_s();
  if (trace_on()) {
    if (!queued) {
      trace_begin(&call_ev, pg, kind, arg, t, 0);
      call_traced = 1;
    } else if (te && (*te = malloc(sizeof **te))) {
      trace_begin(*te, pg, kind, arg, t, 1);
    }
  }
  int64_t k = fr_begin(pg->fr_group, ++pg->fr_calls, kind, arg, t ? t->dtype : -1, t ? dl_tensor_numel(t) : 0,
                       pg->fr_bucket, pg->fr_note, queued);
  pg->fr_bucket = -1;
  pg->fr_note = NULL;
  return k;
}

/* rc, once the blocking call of entry k returned it. */
static int64_t record(dl_pg *pg, int kind, int arg, const dl_tensor *t, int queued) {
  return record_traced(pg, kind, arg, t, queued, NULL);
}

static int recorded(int64_t k, int rc) {
  fr_end(k, rc, 1);
  fr_add_comm(now_s() - call_t0);
  if (call_traced) {
    call_traced = 0;
    call_ev.t1 = trace_now();
    trace_add(&call_ev);
  }
  return rc;
}

DL_API dl_pg *dl_pg_shm_new(dl_store *store, int rank, int world,
                            const char *job_id, double timeout_s) {
  return pg_wrap(&shm_ops, shm_new(store, rank, world, job_id, 0, timeout_s), rank, world,
                 timeout_s);
}

DL_API dl_pg *dl_pg_new(dl_store *store, int rank, int world, int local_world,
                        const char *backend, const char *job_id, double timeout_s) {
  const char *op = "dl_pg_new";
  if (world < 1 || rank < 0 || rank >= world)
    return dl_errp(EM_PG_BACKEND, op, "rank or world size out of range");
  if (local_world < 1 || local_world > world || world % local_world)
    return dl_errp(EM_PG_BACKEND, op,
                   "every node must run the same number of ranks (LOCAL_WORLD_SIZE must divide WORLD_SIZE)");
  if (!backend || !*backend || !strcmp(backend, "auto") || !strcmp(backend, "cpu"))
    backend = local_world == world ? "shm" : "hier";
  if (!strcmp(backend, "shm")) {
    if (local_world != world)
      return dl_errp(EM_PG_BACKEND, op,
                     "the shm backend needs every rank on one node; use \"auto\" or \"gloo\" across nodes");
    return dl_pg_shm_new(store, rank, world, job_id, timeout_s);
  }
  if (world > 1 && !store) return dl_errp(EM_PG_BACKEND, op, "a store is needed for world > 1");
  if (!strcmp(backend, "gloo")) {
    /* the job's own store: keys need no job id (nodes' ids may differ) */
    char prefix[64];
    static int groups;
    snprintf(prefix, sizeof prefix, "ddp/gloo/%d", groups++);
    return pg_wrap(&gloo_pg_ops, gloo_pg_new(store, prefix, rank, world, 1, NULL, timeout_s),
                   rank, world, timeout_s);
  }
  if (!strcmp(backend, "hier"))
    return pg_wrap(&hier_ops, hier_new(store, rank, world, local_world, job_id, timeout_s),
                   rank, world, timeout_s);
  if (!strcmp(backend, "nccl")) {
    /* the launcher numbers ranks node by node: local rank = rank % local_world */
    int n = dl_cuda_device_count();
    if (n <= 0) return dl_errp(EM_CUDA_UNAVAIL, "dl_pg_new(nccl)", dl_cuda_status());
    return nccl_pg_new(store, rank, world, (rank % local_world) % n, timeout_s);
  }
  return dl_errp(EM_PG_BACKEND, op, "unknown backend (expected auto, cpu, shm, gloo, hier or nccl)");
}

DL_API int dl_pg_rank(const dl_pg *pg) { return pg->rank; }
DL_API int dl_pg_world_size(const dl_pg *pg) { return pg->world; }
DL_API const char *dl_pg_backend(const dl_pg *pg) { return pg->ops->name; }
DL_API double dl_pg_timeout(const dl_pg *pg) { return pg->timeout; }

DL_API int dl_pg_set_timeout(dl_pg *pg, double seconds) {
  if (!(seconds > 0) || seconds > 1e9)
    return dl_err(EM_PG_BACKEND, "dl_pg_set_timeout", "the timeout must be a positive number of seconds");
  pg->timeout = seconds;
  return 0;
}

DL_HIDDEN void pg_describe(char *b, size_t cap, int kind, int arg, int dtype, int64_t numel,
                           int64_t seq) {
  static const char *kinds[] = { "all_reduce", "broadcast", "all_gather", "barrier",
                                 "reduce_scatter" };
  static const char *reds[] = { "sum", "avg", "max", "min", "prod" };
  const char *k = kind >= 0 && kind <= PG_REDUCE_SCATTER ? kinds[kind] : "?";
  if (kind == PG_BARRIER) snprintf(b, cap, "barrier #%lld", (long long)seq);
  else if ((kind == PG_ALL_REDUCE || kind == PG_REDUCE_SCATTER) && arg >= DL_PG_SUM &&
           arg <= DL_PG_PROD)
    snprintf(b, cap, "%s(%s) #%lld %s x%lld", k, reds[arg - DL_PG_SUM], (long long)seq,
             fmt_dtype(dtype),
             (long long)numel);
  else if (kind == PG_BROADCAST)
    snprintf(b, cap, "broadcast(src %d) #%lld %s x%lld", arg, (long long)seq, fmt_dtype(dtype),
             (long long)numel);
  else snprintf(b, cap, "%s #%lld %s x%lld", k, (long long)seq, fmt_dtype(dtype), (long long)numel);
}

/* -- The queue ----------------------------------------------------------------- */

static void work_release(dl_work *w) {
  if (!w || atomic_fetch_sub(&w->refs, 1) != 1) return;
  dl_tensor_release(w->t);
  if (w->orig) dl_tensor_release(w->orig);
  free(w->te);
  free(w);
}

enum { PG_BATCH = 64 };  /* queued all-reduces a grouping backend takes at once */

static void finish_work(dl_work *w, int rc) {
  if (rc == 0 && w->orig) rc = dl_copy_(w->orig, w->t);
  fr_end(w->fr, rc, 0);
  if (w->te) {
    w->te->t1 = trace_now();
    trace_add(w->te);
  }
  w->rc = rc;
  if (rc) snprintf(w->err, sizeof w->err, "%s", dl_last_error());
}

static void work_started(dl_work *w) {
  fr_start(w->fr);
  if (w->te) w->te->t0 = trace_now();  /* its span is the run, not the time queued */
}

/* Runs ws[0..n): one grouped call where the backend has one (all under the
** first call's timeout), else one by one. */
static void run_works(dl_work **ws, int n) {
  dl_pg *pg = ws[0]->pg;
  if (n > 1 && pg->ops->all_reduce_many) {
    dl_tensor *ts[PG_BATCH];
    int ops[PG_BATCH];
    for (int i = 0; i < n; i++) ts[i] = ws[i]->t, ops[i] = ws[i]->op, work_started(ws[i]);
    pg->ops->set_timeout(pg->impl, ws[0]->timeout);
    int rc = pg->ops->all_reduce_many(pg->impl, ts, ops, n);
    for (int i = 0; i < n; i++) finish_work(ws[i], rc);
    return;
  }
  for (int i = 0; i < n; i++) {
    pg->ops->set_timeout(pg->impl, ws[i]->timeout);
    work_started(ws[i]);
    finish_work(ws[i], pg->ops->all_reduce(pg->impl, ws[i]->t, ws[i]->op));
  }
}

static void *worker(void *arg) {
  pg_queue *q = arg;
  dl_work *ws[PG_BATCH];
  pthread_mutex_lock(&q->mu);
  for (;;) {
    while (!q->head && !q->stop) pthread_cond_wait(&q->work, &q->mu);
    if (!q->head) break;
    /* everything queued (a grouping backend), else the first */
    int n = 0, max = q->head->pg->ops->all_reduce_many ? PG_BATCH : 1;
    while (q->head && n < max) {
      ws[n++] = q->head;
      q->head = q->head->next;
    }
    if (!q->head) q->tail = NULL;
    q->busy = 1;
    pthread_mutex_unlock(&q->mu);
    run_works(ws, n);
    pthread_mutex_lock(&q->mu);
    for (int i = 0; i < n; i++) atomic_store(&ws[i]->done, 1);
    q->busy = 0;
    pthread_cond_broadcast(&q->idle);
    for (int i = 0; i < n; i++) work_release(ws[i]);
  }
  pthread_mutex_unlock(&q->mu);
  return NULL;
}

/* Waits until every queued call has run. */
static void drain(dl_pg *pg) {
  pg_queue *q = pg->q;
  if (!q) return;
  pthread_mutex_lock(&q->mu);
  while (q->head || q->busy) pthread_cond_wait(&q->idle, &q->mu);
  pthread_mutex_unlock(&q->mu);
}

static pg_queue *queue_of(dl_pg *pg) {
  if (pg->q) return pg->q;
  pg_queue *q = calloc(1, sizeof *q);
  if (!q) return dl_errp(EM_PG_OS, "all_reduce_async", "calloc", "out of memory");
  pthread_mutex_init(&q->mu, NULL);
  pthread_cond_init(&q->work, NULL);
  pthread_cond_init(&q->idle, NULL);
  int e = pthread_create(&q->th, NULL, worker, q);
  if (e) {
    free(q);
    return dl_errp(EM_PG_OS, "all_reduce_async", "pthread_create", strerror(e));
  }
  return pg->q = q;
}

DL_API void dl_pg_free(dl_pg *pg) {
  if (!pg) return;
  pg_queue *q = pg->q;
  if (q) {
    pthread_mutex_lock(&q->mu);
    q->stop = 1;
    pthread_cond_signal(&q->work);
    pthread_mutex_unlock(&q->mu);
    pthread_join(q->th, NULL);  /* runs what is queued first */
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->work);
    pthread_cond_destroy(&q->idle);
    free(q);
  }
  pg->ops->free(pg->impl);
  free(pg);
}

/* -- Argument checks ------------------------------------------------------------- */

static int check_op(const char *name, const dl_tensor *t, int op) {
  if (op < DL_PG_SUM || op > DL_PG_PROD) return dl_err(EM_PG_OP, name, op);
  if (op == DL_PG_AVG && (is_int_dtype(t->dtype) || t->dtype == DL_BOOL))
    return dl_err(EM_PG_AVG, name, fmt_dtype(t->dtype));
  return 0;
}

static int check_peer(dl_pg *pg, const char *name, const char *what, int r) {
  if (r < 0 || r >= pg->world || r == pg->rank)
    return dl_err(EM_PG_PEER, name, what, pg->world - 1, r);
  return 0;
}

/* The tensor the backend works on for t: t itself when it is contiguous
** on the backend's device, else a contiguous copy there (new ref). */
static dl_tensor *backend_copy(dl_pg *pg, const dl_tensor *t) {
  if (t->storage->device != pg->device) return dl_to_device(t, pg->device);
  return dl_contiguous(t);
}

/* A backend's result r (new ref) on the device of the caller's t. */
static dl_tensor *to_caller(dl_tensor *r, const dl_tensor *t) {
  if (!r || r->storage->device == t->storage->device) return r;
  dl_tensor *o = dl_to_device(r, t->storage->device);
  dl_tensor_release(r);
  return o;
}

/* Ready for a blocking call: the queue empty, the backend on our timeout. */
static void settle(dl_pg *pg) {
  drain(pg);
  pg->ops->set_timeout(pg->impl, pg->timeout);
}

/* Runs an in-place call on t, through a copy when t is not contiguous or
** not on the backend's device. */
static int inplace(dl_pg *pg, dl_tensor *t, int arg, int (*fn)(void *, dl_tensor *, int)) {
  settle(pg);
  dl_tensor *c = backend_copy(pg, t);
  if (!c) return -1;
  int rc = fn(pg->impl, c, arg);
  if (rc == 0 && c != t) rc = dl_copy_(t, c);
  dl_tensor_release(c);
  return rc;
}

/* -- Calls ------------------------------------------------------------------------ */

/* The fence (dl_pg_set_fence): set and read on the thread that calls the
** collectives (the prompt's); the flag is atomic so the async queue's
** thread never reads a half-written text. */
static char fence_why[512];
static _Atomic int fence_up;

DL_API void dl_pg_set_fence(const char *why) {
  atomic_store(&fence_up, 0);
  if (!why) return;
  snprintf(fence_why, sizeof fence_why, "%s", why);
  atomic_store(&fence_up, 1);
}

DL_API const char *dl_pg_fence(void) { return atomic_load(&fence_up) ? fence_why : NULL; }

static int fenced(const char *name) {
  return atomic_load(&fence_up) ? dl_err(EM_PG_FENCED, name, fence_why) : 0;
}

DL_API int dl_pg_all_reduce(dl_pg *pg, dl_tensor *t, dl_pg_op op) {
  if (fenced("all_reduce") || check_tensor_any("all_reduce", t) || check_op("all_reduce", t, op)) return -1;
  int64_t k = record(pg, DL_FK_ALL_REDUCE, op, t, 0);
  return recorded(k, inplace(pg, t, op, pg->ops->all_reduce));
}

DL_API dl_work *dl_pg_all_reduce_async(dl_pg *pg, dl_tensor *t, dl_pg_op op) {
  if (fenced("all_reduce_async") || check_tensor_any("all_reduce_async", t) ||
      check_op("all_reduce_async", t, op))
    return NULL;
  pg_queue *q = queue_of(pg);
  if (!q) return NULL;
  dl_work *w = calloc(1, sizeof *w);
  if (!w) return dl_errp(EM_PG_OS, "all_reduce_async", "calloc", "out of memory");
  /* staged now, on the caller's thread: the copy sees t as it is at the call */
  if (!(w->t = backend_copy(pg, t))) { free(w); return NULL; }
  if (w->t != t) {
    dl_tensor_retain(t);
    w->orig = t;
  }
  w->pg = pg;
  w->op = op;
  w->timeout = pg->timeout;
  w->fr = record_traced(pg, DL_FK_ALL_REDUCE, op, t, 1, &w->te);
  atomic_init(&w->refs, 2);  /* the caller's handle and the queue */
  pthread_mutex_lock(&q->mu);
  if (q->tail) q->tail->next = w;
  else q->head = w;
  q->tail = w;
  pthread_cond_signal(&q->work);
  pthread_mutex_unlock(&q->mu);
  return w;
}

DL_API int dl_work_done(const dl_work *w) { return atomic_load(&w->done); }

DL_API int dl_work_wait(dl_work *w) {
  if (!atomic_load(&w->done)) {
    pg_queue *q = w->pg->q;
    double t0 = now_s();
    dl_trace_event e;
    int traced = trace_on() && w->te;
    if (traced) {  /* from the fields set before it was queued: the thread writes its times */
      memset(&e, 0, sizeof e);
      char name[sizeof e.name + 16];
      snprintf(name, sizeof name, "wait for %s", w->te->name);
      memcpy(e.name, name, sizeof e.name - 1);
      memcpy(e.note, w->te->note, sizeof e.note);
      e.seq = w->te->seq;
      e.bucket = w->te->bucket;
      e.group = w->te->group;
      e.kind = DL_TK_WAIT;
      e.t0 = trace_now();
    }
    fr_wait(w->fr, 1);
    pthread_mutex_lock(&q->mu);
    while (!atomic_load(&w->done)) pthread_cond_wait(&q->idle, &q->mu);
    pthread_mutex_unlock(&q->mu);
    fr_wait(w->fr, 0);
    fr_add_comm(now_s() - t0);
    if (traced) {
      e.t1 = trace_now();
      trace_add(&e);
    }
  }
  if (w->rc) return dl_err(EM_PG_PASS, w->err);
  return 0;
}

DL_API void dl_work_free(dl_work *w) { work_release(w); }

DL_API int dl_pg_broadcast(dl_pg *pg, dl_tensor *t, int src) {
  if (fenced("broadcast") || check_tensor_any("broadcast", t)) return -1;
  if (src < 0 || src >= pg->world) return dl_err(EM_PG_SRC, "broadcast", pg->world - 1, src);
  int64_t k = record(pg, DL_FK_BROADCAST, src, t, 0);
  return recorded(k, inplace(pg, t, src, pg->ops->broadcast));
}

DL_API int dl_pg_send(dl_pg *pg, const dl_tensor *t, int dst) {
  if (fenced("send") || check_tensor_any("send", t) || check_peer(pg, "send", "dst", dst)) return -1;
  int64_t k = record(pg, DL_FK_SEND, dst, t, 0);
  settle(pg);
  dl_tensor *c = backend_copy(pg, t);
  if (!c) return recorded(k, -1);
  int rc = pg->ops->send(pg->impl, c, dst);
  dl_tensor_release(c);
  return recorded(k, rc);
}

DL_API int dl_pg_recv(dl_pg *pg, dl_tensor *t, int src) {
  if (fenced("recv") || check_tensor_any("recv", t) || check_peer(pg, "recv", "src", src)) return -1;
  int64_t k = record(pg, DL_FK_RECV, src, t, 0);
  return recorded(k, inplace(pg, t, src, pg->ops->recv));
}

static dl_tensor *gather(dl_pg *pg, const dl_tensor *t);

DL_API dl_tensor *dl_pg_all_gather(dl_pg *pg, const dl_tensor *t) {
  if (fenced("all_gather") || check_tensor_any("all_gather", t)) return NULL;
  int64_t k = record(pg, DL_FK_ALL_GATHER, -1, t, 0);
  dl_tensor *r = gather(pg, t);
  recorded(k, r ? 0 : -1);
  return r;
}

static dl_tensor *gather(dl_pg *pg, const dl_tensor *t) {
  settle(pg);
  int64_t shape[DL_MAX_DIMS];
  int nd = t->ndim ? t->ndim : 1;
  if (t->ndim) memcpy(shape, t->shape, sizeof(int64_t) * t->ndim);
  else shape[0] = 1;
  shape[0] *= pg->world;
  dl_tensor *c = backend_copy(pg, t);
  if (!c) return NULL;
  dl_tensor *out = tensor_new_on(pg->device, t->dtype, shape, nd);
  if (!out || pg->ops->all_gather(pg->impl, out, c)) {
    dl_tensor_release(c);
    if (out) dl_tensor_release(out);
    return NULL;
  }
  dl_tensor_release(c);
  return to_caller(out, t);
}

/* The backend's in-place all-gather where it has one (shm: zero-copy for
** a shared buffer), else its all-gather from a copy of this rank's block. */
static int gather_inplace(dl_pg *pg, dl_tensor *c) {
  if (pg->ops->all_gather_inplace) return pg->ops->all_gather_inplace(pg->impl, c);
  int64_t n = dl_tensor_numel(c) / pg->world;
  dl_tensor *mine = dl_narrow(c, 0, (int64_t)pg->rank * n, n);
  dl_tensor *in = mine ? dl_clone(mine) : NULL;
  dl_tensor_release(mine);
  if (!in) return -1;
  int rc = pg->ops->all_gather(pg->impl, c, in);
  dl_tensor_release(in);
  return rc;
}

DL_API int dl_pg_all_gather_inplace(dl_pg *pg, dl_tensor *t) {
  const char *op = "all_gather_inplace";
  if (fenced(op) || check_tensor_any(op, t)) return -1;
  if (t->ndim != 1) return dl_err(EM_BADVALUE, op, "expected a 1-D tensor");
  if (t->shape[0] % pg->world) return dl_err(EM_PG_DIVIDE, op, fmt_tshape(t), pg->world);
  int64_t n = t->shape[0] / pg->world;
  dl_tensor *mine = dl_narrow(t, 0, (int64_t)pg->rank * n, n);
  if (!mine) return -1;
  int64_t k = record(pg, DL_FK_ALL_GATHER, -1, mine, 0);
  dl_tensor_release(mine);
  settle(pg);
  dl_tensor *c = backend_copy(pg, t);
  if (!c) return recorded(k, -1);
  int rc = gather_inplace(pg, c);
  if (rc == 0 && c != t) rc = dl_copy_(t, c);
  dl_tensor_release(c);
  return recorded(k, rc);
}

static dl_tensor *scatter(dl_pg *pg, const dl_tensor *t, dl_pg_op op);

DL_API dl_tensor *dl_pg_reduce_scatter(dl_pg *pg, const dl_tensor *t, dl_pg_op op) {
  if (fenced("reduce_scatter") || check_tensor_any("reduce_scatter", t) ||
      check_op("reduce_scatter", t, op))
    return NULL;
  if (t->ndim == 0) return dl_errp(EM_PG_SCALAR, "reduce_scatter");
  if (t->shape[0] % pg->world)
    return dl_errp(EM_PG_DIVIDE, "reduce_scatter", fmt_tshape(t), pg->world);
  int64_t k = record(pg, DL_FK_REDUCE_SCATTER, op, t, 0);
  dl_tensor *r = scatter(pg, t, op);
  recorded(k, r ? 0 : -1);
  return r;
}

static dl_tensor *scatter(dl_pg *pg, const dl_tensor *t, dl_pg_op op) {
  settle(pg);
  int64_t shape[DL_MAX_DIMS];
  memcpy(shape, t->shape, sizeof(int64_t) * t->ndim);
  shape[0] /= pg->world;
  dl_tensor *c = backend_copy(pg, t);
  if (!c) return NULL;
  dl_tensor *out = tensor_new_on(pg->device, t->dtype, shape, t->ndim);
  if (!out || pg->ops->reduce_scatter(pg->impl, out, c, op)) {
    dl_tensor_release(c);
    if (out) dl_tensor_release(out);
    return NULL;
  }
  dl_tensor_release(c);
  return to_caller(out, t);
}

DL_API dl_tensor *dl_pg_shared_zeros(dl_pg *pg, int64_t numel, dl_dtype dtype) {
  int64_t n = numel;
  if (fenced("shared_zeros")) return NULL;
  if (numel < 0) return dl_errp(EM_NEG_SIZE, "shared_zeros", (long long)numel, "");
  const char *env = getenv("DDP_SHM_ZERO_COPY");  /* "0": private buffers (to compare) */
  if (pg->ops != &shm_ops || (env && !strcmp(env, "0"))) return dl_zeros(&n, 1, dtype);
  settle(pg);
  return shm_shared_zeros(pg->impl, numel, dtype);
}

DL_API int dl_pg_barrier(dl_pg *pg) {
  if (fenced("barrier")) return -1;
  int64_t k = record(pg, DL_FK_BARRIER, -1, NULL, 0);
  settle(pg);
  return recorded(k, pg->ops->barrier(pg->impl));
}
