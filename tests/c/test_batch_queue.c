/*
** test_batch_queue.c -- the queue between a DataLoader and its worker
** threads (dl_batchq_*) and the threads (dl_thread_*): jobs taken in
** submission order by any worker, results waited for by batch number in
** any order, the capacity bound over queued + in the making + done, a
** close that wakes every waiter, tensors handed over by reference and
** released with the queue, and the errors of bad calls.
*/
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ddplua.h"
#include "check.h"

static dl_tensor *indices(int64_t first, int64_t n) {
  int64_t shape[1] = {n};
  dl_tensor *t = dl_empty(shape, 1, DL_INT64);
  int64_t *p = dl_tensor_data(t);
  for (int64_t i = 0; i < n; i++) p[i] = first + i;
  return t;
}

/* A worker: takes jobs until the queue closes; each result is one tensor,
** the job's indices times two, and the text "b<batch>". */
typedef struct {
  dl_batchq *q;
  int id, done;
} worker_arg;

static void *worker(void *p) {
  worker_arg *a = p;
  for (;;) {
    int64_t batch;
    dl_tensor *idx;
    int st = dl_batchq_take(a->q, a->id, 50, &batch, &idx);
    if (st == DL_BQ_CLOSED) break;
    if (st != DL_BQ_READY) continue;
    dl_batchq_mark(a->q, a->id, ((int64_t *)dl_tensor_data(idx))[0]);
    dl_tensor *out = dl_clone(idx);
    int64_t *o = dl_tensor_data(out);
    for (int64_t i = 0; i < dl_tensor_numel(out); i++) o[i] *= 2;
    char text[32];
    int n = snprintf(text, sizeof text, "b%lld", (long long)batch);
    /* later batches finish first now and then: results out of order */
    if (batch % 3 == 0) usleep(2000);
    dl_batchq_put(a->q, a->id, batch, &out, 1, text, n, 0);
    dl_tensor_release(out);
    dl_tensor_release(idx);
    a->done++;
  }
  return NULL;
}

static void test_order_and_bound(void) {
  enum { W = 3, CAP = 4, N = 40 };
  dl_batchq *q = dl_batchq_new(W, CAP);
  CHECK(q != NULL);
  worker_arg args[W];
  dl_thread *th[W];
  for (int w = 0; w < W; w++) {
    args[w] = (worker_arg){q, w, 0};
    th[w] = dl_thread_start(worker, &args[w]);
    CHECK(th[w] != NULL);
  }
  int64_t next_submit = 0, ok = 0;
  for (int64_t b = 0; b < N; b++) {
    while (next_submit < N) {
      dl_tensor *idx = indices(next_submit * 10, 4);
      int rc = dl_batchq_submit(q, next_submit, idx);
      dl_tensor_release(idx);
      if (rc != 0) break;  /* full: the bound */
      next_submit++;
    }
    CHECK(next_submit - b <= CAP, "batch %lld: %lld ahead", (long long)b, (long long)(next_submit - b));
    CHECK(dl_batchq_wait(q, b, 5000) == DL_BQ_READY);
    int nf, is_err, w;
    int64_t xl;
    CHECK(dl_batchq_result_info(q, b, &nf, &is_err, &w, &xl) == 0);
    dl_tensor *f[DL_BQ_MAX_FIELDS];
    char extra[32] = {0};
    CHECK(dl_batchq_take_result(q, b, f, extra) == 0);
    char want[32];
    snprintf(want, sizeof want, "b%lld", (long long)b);
    ok += nf == 1 && !is_err && w >= 0 && w < W && strcmp(extra, want) == 0 &&
          ((int64_t *)dl_tensor_data(f[0]))[3] == (b * 10 + 3) * 2;
    for (int i = 0; i < nf; i++) dl_tensor_release(f[i]);
  }
  CHECK(ok == N, "%lld of %d batches right, in order", (long long)ok, N);
  /* nothing is done twice: a second take of a batch is an error */
  CHECK(dl_batchq_take_result(q, 0, NULL, NULL) == DL_EINDEX);
  dl_batchq_close(q);
  int done = 0;
  for (int w = 0; w < W; w++) {
    CHECK(dl_thread_join(th[w], 2000) == 0);
    done += args[w].done;
  }
  CHECK(done == N);
  dl_batchq_free(q);
}

/* A waiter is woken by a close; a batch done before it is still given. */
static void *closer(void *p) {
  usleep(50000);
  dl_batchq_close(p);
  return NULL;
}

static void test_close_and_timeouts(void) {
  dl_batchq *q = dl_batchq_new(1, 2);
  CHECK(dl_batchq_wait(q, 7, 20) == DL_BQ_TIMEOUT);
  int64_t b;
  dl_tensor *idx;
  CHECK(dl_batchq_take(q, 0, 20, &b, &idx) == DL_BQ_TIMEOUT);
  dl_tensor *t = indices(0, 2);
  CHECK(dl_batchq_submit(q, 1, t) == 0);
  CHECK(dl_batchq_take(q, 0, 20, &b, &idx) == DL_BQ_READY && b == 1);
  int64_t wb, ws;
  double secs;
  dl_batchq_mark(q, 0, 5);
  CHECK(dl_batchq_worker(q, 0, &wb, &ws, &secs) == 0 && wb == 1 && ws == 5 && secs >= 0);
  CHECK(dl_batchq_put(q, 0, 1, &idx, 1, NULL, 0, 0) == 0);
  dl_tensor_release(idx);
  CHECK(dl_batchq_worker(q, 0, &wb, &ws, &secs) == 0 && wb == -1);
  dl_thread *c = dl_thread_start(closer, q);
  CHECK(dl_batchq_wait(q, 2, -1) == DL_BQ_CLOSED);
  CHECK(dl_batchq_wait(q, 1, 0) == DL_BQ_READY);  /* done before the close */
  CHECK(dl_batchq_take(q, 0, 1000, &b, &idx) == DL_BQ_CLOSED);
  CHECK(dl_batchq_submit(q, 3, t) == DL_ESTATE && strstr(dl_last_error(), "closed"));
  CHECK(dl_batchq_mark(q, 0, 1) == DL_BQ_CLOSED);
  CHECK(dl_thread_join(c, 1000) == 0);
  /* the undelivered result's tensor goes with the queue */
  int before = dl_tensor_refcount(t);
  dl_batchq_free(q);
  CHECK(dl_tensor_refcount(t) == before - 1 || before == 1, "%d", before);
  dl_tensor_release(t);
}

static void test_errors(void) {
  CHECK(dl_batchq_new(0, 1) == NULL && strstr(dl_last_error(), "nworkers"));
  CHECK(dl_batchq_new(1, 0) == NULL && strstr(dl_last_error(), "capacity"));
  dl_batchq *q = dl_batchq_new(1, 1);
  dl_tensor *t = indices(0, 1);
  CHECK(dl_batchq_submit(q, 0, t) == 0);
  CHECK(dl_batchq_submit(q, 1, t) == DL_ESTATE && strstr(dl_last_error(), "full"));
  CHECK(dl_batchq_put(q, 3, 0, NULL, 0, NULL, 0, 0) == DL_EINVAL);
  CHECK(dl_batchq_put(q, 0, 0, NULL, 65, NULL, 0, 0) == DL_EINVAL);
  CHECK(dl_batchq_result_info(q, 9, NULL, NULL, NULL, NULL) == DL_EINDEX && strstr(dl_last_error(), "batch 9"));
  CHECK(dl_thread_start(NULL, NULL) == NULL);
  dl_batchq_free(q);  /* the queued job's reference is released */
  CHECK(dl_tensor_refcount(t) == 1);
  dl_tensor_release(t);
}

int main(void) {
  test_order_and_bound();
  test_close_and_timeouts();
  test_errors();
  return check_report("test_batch_queue");
}
