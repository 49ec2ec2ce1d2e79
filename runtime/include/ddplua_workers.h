/*
** ddplua_workers.h -- threads and the queue between a DataLoader and its
** worker threads: jobs (a batch number and its sample indices) go out,
** finished batches (tensors, plus bytes for other values) come back, and
** the loader can always name what each worker is doing.
** Part of the public API: include ddplua.h, which includes every part.
*/
#ifndef DDPLUA_WORKERS_H
#define DDPLUA_WORKERS_H

#include "ddplua_base.h"

#if !defined(DL_CDEF) && defined(__cplusplus)
extern "C" {
#endif

/* -- Threads --------------------------------------------------------------- */

/* A thread running fn(arg): for a data worker, fn is an FFI callback made
** in the Lua state that thread alone will run.  The thread computes
** serially (the runtime's thread pool stays the training loop's), so
** workers never oversubscribe the cores behind the loop's back.  NULL with
** DL_ESTATE and the system's reason when no thread can be made. */
typedef struct dl_thread dl_thread;
DL_API dl_thread *dl_thread_start(void *(*fn)(void *), void *arg);
/* Waits up to timeout_ms (< 0: for ever) for the thread to end: 0 when it
** ended (t is freed), 1 when it still runs (t stays valid). */
DL_API int dl_thread_join(dl_thread *t, int timeout_ms);
/* Gives up a thread that does not end: it runs on, detached, and t is freed. */
DL_API void dl_thread_detach(dl_thread *t);

/* -- The batch queue --------------------------------------------------------- */

/* Results the queue waits with: */
typedef enum {
  DL_BQ_TIMEOUT = 0,  /* nothing within the time given */
  DL_BQ_READY = 1,    /* a job was taken / the batch waited for is done */
  DL_BQ_CLOSED = 2    /* the queue was closed: the worker must end */
} dl_bq_status;

/* The most tensors one batch may hold (a DataLoader sample's fields). */
enum { DL_BQ_MAX_FIELDS = 64 };

typedef struct dl_batchq dl_batchq;
/* A queue for nworkers workers holding at most capacity jobs and results
** at once (the loader's prefetch bound).  NULL with DL_EINVAL on bad
** numbers. */
DL_API dl_batchq *dl_batchq_new(int nworkers, int capacity);
/* Closes the queue (as dl_batchq_close) and frees it with every tensor it
** still holds: call after the workers ended. */
DL_API void dl_batchq_free(dl_batchq *q);
/* Wakes every waiter; later takes and waits return DL_BQ_CLOSED. */
DL_API void dl_batchq_close(dl_batchq *q);

/* The loader: job `batch` over the sample indices idx (retained).
** DL_ESTATE when the queue is full or closed. */
DL_API int dl_batchq_submit(dl_batchq *q, int64_t batch, dl_tensor *idx);
/* Waits up to timeout_ms for batch's result: a dl_bq_status. */
DL_API int dl_batchq_wait(dl_batchq *q, int64_t batch, int timeout_ms);
/* What a done batch holds: its tensors, whether it is an error report, the
** worker that made it and the bytes beside the tensors.  DL_EINDEX when
** batch is not done. */
DL_API int dl_batchq_result_info(dl_batchq *q, int64_t batch, int *nfields, int *is_error, int *worker,
                                 int64_t *extra_len);
/* Moves a done batch out of the queue: its tensors into fields (the caller
** owns them) and its bytes into extra (extra_len bytes, as result_info
** said).  DL_EINDEX when batch is not done. */
DL_API int dl_batchq_take_result(dl_batchq *q, int64_t batch, dl_tensor **fields, char *extra);

/* A worker: takes the next job, waiting up to timeout_ms: a dl_bq_status;
** on DL_BQ_READY *batch and *idx are set (the caller owns idx). */
DL_API int dl_batchq_take(dl_batchq *q, int worker, int timeout_ms, int64_t *batch, dl_tensor **idx);
/* A worker starts on sample `sample` (for messages that name it):
** DL_BQ_CLOSED when the queue closed meanwhile (stop working), else 0. */
DL_API int dl_batchq_mark(dl_batchq *q, int worker, int64_t sample);
/* A worker hands in batch's result: nfields tensors (retained: the caller
** keeps its own references) and extra_len bytes; is_error: the bytes are
** an error report.  DL_ESTATE when the queue is closed or full. */
DL_API int dl_batchq_put(dl_batchq *q, int worker, int64_t batch, dl_tensor *const *fields, int nfields,
                         const char *extra, int64_t extra_len, int is_error);
/* What worker w does now: the batch and sample it works on (-1 when idle)
** and for how many seconds it has been on that batch. */
DL_API int dl_batchq_worker(dl_batchq *q, int worker, int64_t *batch, int64_t *sample, double *seconds);

#if !defined(DL_CDEF) && defined(__cplusplus)
}
#endif

#endif
