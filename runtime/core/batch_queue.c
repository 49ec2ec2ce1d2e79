/*
** batch_queue.c -- the queue between a DataLoader and its worker threads,
** and the threads themselves.  Jobs go out in batch order and any idle
** worker takes the next one; results come back in any order and the loader
** waits for the one it needs, so batches reach the training loop in the
** order of num_workers = 0 whatever the number of workers.  Tensors cross
** threads by reference (their counts are atomic): nothing is copied,
** pickled or put in /dev/shm.
*/
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/internal.h"

/* -- Threads ------------------------------------------------------------- */

struct dl_thread {
  pthread_t th;
  void *(*fn)(void *);
  void *arg;
};

static void *thread_main(void *p) {
  dl_thread *t = p;
  threads_serial_here();
  return t->fn(t->arg);
}

DL_API dl_thread *dl_thread_start(void *(*fn)(void *), void *arg) {
  if (!fn) return dl_errp(EM_NULLARG, "dl_thread_start", "fn");
  dl_thread *t = calloc(1, sizeof *t);
  if (!t) return dl_errp(EM_THREAD_START, "dl_thread_start", strerror(ENOMEM));
  t->fn = fn, t->arg = arg;
  int rc = pthread_create(&t->th, NULL, thread_main, t);
  if (rc) {
    free(t);
    return dl_errp(EM_THREAD_START, "dl_thread_start", strerror(rc));
  }
  return t;
}

static struct timespec deadline_in(int ms) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += ms / 1000;
  ts.tv_nsec += (long)(ms % 1000) * 1000000L;
  if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
  return ts;
}

DL_API int dl_thread_join(dl_thread *t, int timeout_ms) {
  if (!t) return 0;
  if (timeout_ms < 0) {
    pthread_join(t->th, NULL);
  } else {
    struct timespec ts = deadline_in(timeout_ms);
    if (pthread_timedjoin_np(t->th, NULL, &ts) != 0) return 1;
  }
  free(t);
  return 0;
}

DL_API void dl_thread_detach(dl_thread *t) {
  if (!t) return;
  pthread_detach(t->th);
  free(t);
}

/* -- The queue ------------------------------------------------------------ */

typedef struct {
  int64_t batch;
  dl_tensor *idx;
} bq_job;

typedef struct {
  int used;
  int64_t batch;
  int nfields, is_error, worker;
  dl_tensor *fields[DL_BQ_MAX_FIELDS];
  char *extra;
  int64_t extra_len;
} bq_result;

typedef struct {
  int64_t batch, sample;  /* -1: idle */
  double since;
} bq_worker;

struct dl_batchq {
  dl_batchq *next_live;  /* the live queues, closed at exit */
  pthread_mutex_t mu;
  pthread_cond_t job_cv, result_cv;
  int closed, capacity, nworkers;
  bq_job *jobs;  /* a ring of capacity */
  int head, njobs;
  bq_result *results;  /* capacity slots */
  bq_worker *workers;
};

/* Queues not yet freed: at exit every one is closed, so workers still
** inside a take or between samples stop instead of computing on while the
** process tears down its libraries. */
static pthread_mutex_t live_mu = PTHREAD_MUTEX_INITIALIZER;
static dl_batchq *live;
static pthread_once_t live_once = PTHREAD_ONCE_INIT;

static void close_live(void) {
  pthread_mutex_lock(&live_mu);
  for (dl_batchq *q = live; q; q = q->next_live) dl_batchq_close(q);
  pthread_mutex_unlock(&live_mu);
}
static void live_init(void) { atexit(close_live); }

DL_API dl_batchq *dl_batchq_new(int nworkers, int capacity) {
  const char *op = "dl_batchq_new";
  if (nworkers < 1 || nworkers > 1024) return dl_errp(EM_BQ_ARGS, op, "nworkers must be 1 to 1024");
  if (capacity < 1 || capacity > 1 << 20) return dl_errp(EM_BQ_ARGS, op, "capacity must be 1 to 2^20");
  dl_batchq *q = calloc(1, sizeof *q);
  if (!q) return dl_errp(EM_NOMEM, op, (long long)sizeof *q, (long long)dl_mem_allocated());
  q->jobs = calloc((size_t)capacity, sizeof *q->jobs);
  q->results = calloc((size_t)capacity, sizeof *q->results);
  q->workers = calloc((size_t)nworkers, sizeof *q->workers);
  if (!q->jobs || !q->results || !q->workers) {
    free(q->jobs), free(q->results), free(q->workers), free(q);
    return dl_errp(EM_NOMEM, op, (long long)capacity * (long long)sizeof(bq_result), (long long)dl_mem_allocated());
  }
  pthread_mutex_init(&q->mu, NULL);
  pthread_cond_init(&q->job_cv, NULL);
  pthread_cond_init(&q->result_cv, NULL);
  q->capacity = capacity, q->nworkers = nworkers;
  for (int w = 0; w < nworkers; w++) q->workers[w].batch = q->workers[w].sample = -1;
  pthread_once(&live_once, live_init);
  pthread_mutex_lock(&live_mu);
  q->next_live = live;
  live = q;
  pthread_mutex_unlock(&live_mu);
  return q;
}

DL_API void dl_batchq_close(dl_batchq *q) {
  if (!q) return;
  pthread_mutex_lock(&q->mu);
  q->closed = 1;
  pthread_cond_broadcast(&q->job_cv);
  pthread_cond_broadcast(&q->result_cv);
  pthread_mutex_unlock(&q->mu);
}

static void result_clear(bq_result *r) {
  for (int i = 0; i < r->nfields; i++) dl_tensor_release(r->fields[i]);
  free(r->extra);
  memset(r, 0, sizeof *r);
}

DL_API void dl_batchq_free(dl_batchq *q) {
  if (!q) return;
  pthread_mutex_lock(&live_mu);
  for (dl_batchq **p = &live; *p; p = &(*p)->next_live)
    if (*p == q) {
      *p = q->next_live;
      break;
    }
  pthread_mutex_unlock(&live_mu);
  dl_batchq_close(q);
  for (int i = 0; i < q->njobs; i++) dl_tensor_release(q->jobs[(q->head + i) % q->capacity].idx);
  for (int i = 0; i < q->capacity; i++)
    if (q->results[i].used) result_clear(&q->results[i]);
  pthread_mutex_destroy(&q->mu);
  pthread_cond_destroy(&q->job_cv);
  pthread_cond_destroy(&q->result_cv);
  free(q->jobs), free(q->results), free(q->workers), free(q);
}

/* Jobs queued, being made and done together stay within capacity: the
** loader submits only as far as it has room (its prefetch bound). */
static int in_flight(const dl_batchq *q) {
  int n = q->njobs;
  for (int w = 0; w < q->nworkers; w++) n += q->workers[w].batch >= 0;
  for (int i = 0; i < q->capacity; i++) n += q->results[i].used;
  return n;
}

DL_API int dl_batchq_submit(dl_batchq *q, int64_t batch, dl_tensor *idx) {
  const char *op = "dl_batchq_submit";
  if (!q || !idx) return dl_err(EM_NULLARG, op, q ? "idx" : "q");
  pthread_mutex_lock(&q->mu);
  int rc = 0;
  if (q->closed) {
    rc = dl_err(EM_BQ_STATE, op, "the queue is closed");
  } else if (in_flight(q) >= q->capacity) {
    rc = dl_err(EM_BQ_STATE, op, "the queue is full (the loader's prefetch bound)");
  } else {
    dl_tensor_retain(idx);
    q->jobs[(q->head + q->njobs) % q->capacity] = (bq_job){batch, idx};
    q->njobs++;
    pthread_cond_signal(&q->job_cv);
  }
  pthread_mutex_unlock(&q->mu);
  return rc;
}

static bq_result *find_result(dl_batchq *q, int64_t batch) {
  for (int i = 0; i < q->capacity; i++)
    if (q->results[i].used && q->results[i].batch == batch) return &q->results[i];
  return NULL;
}

/* Waits on cv until ready() holds, the queue closes or timeout_ms passes. */
#define WAIT_UNTIL(q, cv, cond, timeout_ms, status)                      \
  do {                                                                   \
    struct timespec ts_ = deadline_in((timeout_ms) < 0 ? 0 : (timeout_ms)); \
    status = DL_BQ_READY;                                                \
    while (!(cond)) {                                                    \
      if ((q)->closed) { status = DL_BQ_CLOSED; break; }                 \
      if ((timeout_ms) < 0) { pthread_cond_wait(&(cv), &(q)->mu); continue; } \
      if (pthread_cond_timedwait(&(cv), &(q)->mu, &ts_) == ETIMEDOUT && !(cond)) { \
        status = (q)->closed ? DL_BQ_CLOSED : DL_BQ_TIMEOUT;             \
        break;                                                           \
      }                                                                  \
    }                                                                    \
  } while (0)

DL_API int dl_batchq_wait(dl_batchq *q, int64_t batch, int timeout_ms) {
  if (!q) return dl_err(EM_NULLARG, "dl_batchq_wait", "q");
  int status;
  pthread_mutex_lock(&q->mu);
  WAIT_UNTIL(q, q->result_cv, find_result(q, batch) != NULL, timeout_ms, status);
  /* a batch done before the close is still handed out */
  if (status == DL_BQ_CLOSED && find_result(q, batch)) status = DL_BQ_READY;
  pthread_mutex_unlock(&q->mu);
  return status;
}

DL_API int dl_batchq_result_info(dl_batchq *q, int64_t batch, int *nfields, int *is_error, int *worker,
                                 int64_t *extra_len) {
  const char *op = "dl_batchq_result_info";
  if (!q) return dl_err(EM_NULLARG, op, "q");
  pthread_mutex_lock(&q->mu);
  bq_result *r = find_result(q, batch);
  if (r) {
    if (nfields) *nfields = r->nfields;
    if (is_error) *is_error = r->is_error;
    if (worker) *worker = r->worker;
    if (extra_len) *extra_len = r->extra_len;
  }
  pthread_mutex_unlock(&q->mu);
  return r ? 0 : dl_err(EM_BQ_NOT_DONE, op, (long long)batch);
}

DL_API int dl_batchq_take_result(dl_batchq *q, int64_t batch, dl_tensor **fields, char *extra) {
  const char *op = "dl_batchq_take_result";
  if (!q) return dl_err(EM_NULLARG, op, "q");
  pthread_mutex_lock(&q->mu);
  bq_result *r = find_result(q, batch);
  if (r) {
    if (r->nfields > 0 && !fields) {
      pthread_mutex_unlock(&q->mu);
      return dl_err(EM_NULLARG, op, "fields");
    }
    for (int i = 0; i < r->nfields; i++) fields[i] = r->fields[i];
    if (r->extra_len > 0 && extra) memcpy(extra, r->extra, (size_t)r->extra_len);
    r->nfields = 0;  /* moved out */
    result_clear(r);
    pthread_cond_broadcast(&q->job_cv);
  }
  pthread_mutex_unlock(&q->mu);
  return r ? 0 : dl_err(EM_BQ_NOT_DONE, op, (long long)batch);
}

DL_API int dl_batchq_take(dl_batchq *q, int worker, int timeout_ms, int64_t *batch, dl_tensor **idx) {
  const char *op = "dl_batchq_take";
  if (!q || !batch || !idx) return dl_err(EM_NULLARG, op, !q ? "q" : "batch or idx");
  if (worker < 0 || worker >= q->nworkers) return dl_err(EM_BQ_ARGS, op, "worker out of range");
  int status;
  pthread_mutex_lock(&q->mu);
  bq_worker *w = &q->workers[worker];
  w->batch = w->sample = -1;
  pthread_cond_broadcast(&q->result_cv);  /* its batch left the in-flight count */
  WAIT_UNTIL(q, q->job_cv, q->njobs > 0, timeout_ms, status);
  if (status == DL_BQ_READY) {
    bq_job j = q->jobs[q->head];
    q->head = (q->head + 1) % q->capacity;
    q->njobs--;
    *batch = j.batch, *idx = j.idx;
    w->batch = j.batch, w->since = now_s();
  }
  pthread_mutex_unlock(&q->mu);
  return status;
}

DL_API int dl_batchq_mark(dl_batchq *q, int worker, int64_t sample) {
  if (!q || worker < 0 || worker >= q->nworkers) return dl_err(EM_BQ_ARGS, "dl_batchq_mark", "no such worker");
  pthread_mutex_lock(&q->mu);
  q->workers[worker].sample = sample;
  int closed = q->closed;
  pthread_mutex_unlock(&q->mu);
  return closed ? DL_BQ_CLOSED : 0;
}

DL_API int dl_batchq_put(dl_batchq *q, int worker, int64_t batch, dl_tensor *const *fields, int nfields,
                         const char *extra, int64_t extra_len, int is_error) {
  const char *op = "dl_batchq_put";
  if (!q) return dl_err(EM_NULLARG, op, "q");
  if (worker < 0 || worker >= q->nworkers) return dl_err(EM_BQ_ARGS, op, "worker out of range");
  if (nfields < 0 || nfields > DL_BQ_MAX_FIELDS || (nfields > 0 && !fields))
    return dl_err(EM_BQ_ARGS, op, "a batch holds 0 to 64 tensors");
  if (extra_len < 0 || (extra_len > 0 && !extra)) return dl_err(EM_BQ_ARGS, op, "bad extra bytes");
  for (int i = 0; i < nfields; i++)
    if (!fields[i]) return dl_err(EM_NULLARG, op, "fields[i]");
  char *copy = NULL;
  if (extra_len > 0) {
    copy = malloc((size_t)extra_len);
    if (!copy) return dl_err(EM_NOMEM, op, (long long)extra_len, (long long)dl_mem_allocated());
    memcpy(copy, extra, (size_t)extra_len);
  }
  pthread_mutex_lock(&q->mu);
  bq_result *r = NULL;
  for (int i = 0; i < q->capacity && !r; i++)
    if (!q->results[i].used) r = &q->results[i];
  int rc = 0;
  if (q->closed || !r) {
    rc = dl_err(EM_BQ_STATE, op, q->closed ? "the queue is closed" : "no room for the result");
    free(copy);
  } else {
    r->used = 1, r->batch = batch, r->nfields = nfields, r->is_error = is_error, r->worker = worker;
    for (int i = 0; i < nfields; i++) {
      dl_tensor_retain(fields[i]);
      r->fields[i] = fields[i];
    }
    r->extra = copy, r->extra_len = extra_len;
    q->workers[worker].batch = q->workers[worker].sample = -1;
    pthread_cond_broadcast(&q->result_cv);
  }
  pthread_mutex_unlock(&q->mu);
  return rc;
}

DL_API int dl_batchq_worker(dl_batchq *q, int worker, int64_t *batch, int64_t *sample, double *seconds) {
  if (!q || worker < 0 || worker >= q->nworkers) return dl_err(EM_BQ_ARGS, "dl_batchq_worker", "no such worker");
  pthread_mutex_lock(&q->mu);
  bq_worker w = q->workers[worker];
  pthread_mutex_unlock(&q->mu);
  if (batch) *batch = w.batch;
  if (sample) *sample = w.sample;
  if (seconds) *seconds = w.batch >= 0 ? now_s() - w.since : 0;
  return 0;
}
