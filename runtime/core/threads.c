/*
** threads.c -- the per-process thread budget and the pool that spends it.
** One number (dl_set_num_threads) governs our pool and OpenBLAS's, so the
** two never oversubscribe the cores; idle workers sleep, they never spin.
*/
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include "core/internal.h"

extern void openblas_set_num_threads(int n);

enum { MAX_THREADS = 256 };

static struct {
  pthread_mutex_t mu;
  pthread_cond_t work, done;
  pthread_mutex_t call;     /* one parallel region at a time */
  int budget;               /* threads, the caller included */
  int nworkers;             /* started so far */
  int want;                 /* workers asked to join this region */
  unsigned long generation;
  par_fn fn;
  void *ctx;
  int64_t n, chunk;
  atomic_llong next;
  int running;
} pool = {.mu = PTHREAD_MUTEX_INITIALIZER,
          .work = PTHREAD_COND_INITIALIZER,
          .done = PTHREAD_COND_INITIALIZER,
          .call = PTHREAD_MUTEX_INITIALIZER};

static _Thread_local int in_pool;

static void run_chunks(void) {
  for (;;) {
    int64_t b = atomic_fetch_add(&pool.next, pool.chunk);
    if (b >= pool.n) break;
    int64_t e = b + pool.chunk < pool.n ? b + pool.chunk : pool.n;
    pool.fn(pool.ctx, b, e);
  }
}

static void *worker(void *arg) {
  int id = (int)(intptr_t)arg;
  unsigned long seen = 0;
  in_pool = 1;
  pthread_mutex_lock(&pool.mu);
  for (;;) {
    while (pool.generation == seen || id >= pool.want)
      pthread_cond_wait(&pool.work, &pool.mu);
    seen = pool.generation;
    pthread_mutex_unlock(&pool.mu);
    run_chunks();
    pthread_mutex_lock(&pool.mu);
    if (--pool.running == 0) pthread_cond_signal(&pool.done);
  }
  return NULL;
}

static int default_threads(void) {
  const char *env = getenv("DDPLUA_NUM_THREADS");
  if (!env || !*env) env = getenv("OMP_NUM_THREADS");
  if (env && atoi(env) > 0) return atoi(env);
  cpu_set_t set;
  if (!sched_getaffinity(0, sizeof set, &set)) return CPU_COUNT(&set);
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

static int forked;

static void after_fork_child(void) {
  forked = 1;
  /* the workers did not survive the fork */
  pthread_mutex_init(&pool.mu, NULL);
  pthread_mutex_init(&pool.call, NULL);
  pthread_cond_init(&pool.work, NULL);
  pthread_cond_init(&pool.done, NULL);
  pool.nworkers = 0;
  pool.running = 0;
}

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static void pool_init(void) {
  pthread_atfork(NULL, NULL, after_fork_child);
  if (!pool.budget) dl_set_num_threads(default_threads());
}

/* OpenBLAS threads the address-space limit (ulimit -v) leaves room for:
** each of its threads keeps a 128 MiB buffer, and one that cannot have it
** retries forever (so does the process's exit, which waits for it).
** Half a GiB for the rest, 256 MiB a thread; DL_BLAS_UNLIMITED without. */
DL_API int dl_blas_thread_cap(void) {
  struct rlimit as;
  if (getrlimit(RLIMIT_AS, &as) != 0 || as.rlim_cur == RLIM_INFINITY) return DL_BLAS_UNLIMITED;
  long long mib = (long long)(as.rlim_cur >> 20), cap = (mib - 512) / 256;
  return cap < 1 ? 1 : cap > MAX_THREADS ? MAX_THREADS : (int)cap;
}

DL_API int dl_set_num_threads(int n) {
  if (n < 1) return dl_err(EM_BADVALUE, "set_num_threads", "need at least 1 thread");
  if (n > MAX_THREADS) n = MAX_THREADS;
  pool.budget = n;
  int cap = dl_blas_thread_cap();
  openblas_set_num_threads(n < cap ? n : cap);
  return 0;
}

DL_API int dl_get_num_threads(void) {
  pthread_once(&init_once, pool_init);
  return pool.budget;
}

DL_HIDDEN void threads_serial_here(void) { in_pool = 1; }

DL_HIDDEN int threads_forked(void) { return forked; }

DL_HIDDEN void signals_hold_prof(sigset_t *old) {
  sigset_t prof;
  sigemptyset(&prof);
  sigaddset(&prof, SIGPROF);
  pthread_sigmask(SIG_BLOCK, &prof, old);
}

DL_HIDDEN void signals_restore(const sigset_t *old) { pthread_sigmask(SIG_SETMASK, old, NULL); }

DL_HIDDEN int parallel_threads(void) {
  if (in_pool) return 1;
  return dl_get_num_threads();
}

DL_HIDDEN void parallel_for(int64_t n, int64_t grain, par_fn fn, void *ctx) {
  int threads = parallel_threads();
  if (grain < 1) grain = 1;
  int64_t want = (n + grain - 1) / grain;
  if (want < threads) threads = (int)want;
  if (threads <= 1 || pthread_mutex_trylock(&pool.call)) {
    if (n > 0) fn(ctx, 0, n);  /* small, or another thread holds the pool */
    return;
  }
  pthread_mutex_lock(&pool.mu);
  while (pool.nworkers < threads - 1) {
    pthread_t th;
    if (pthread_create(&th, NULL, worker, (void *)(intptr_t)pool.nworkers)) break;
    pthread_detach(th);
    pool.nworkers++;
  }
  if (threads - 1 > pool.nworkers) threads = pool.nworkers + 1;
  pool.fn = fn;
  pool.ctx = ctx;
  pool.n = n;
  /* a few chunks per thread evens out uneven progress */
  pool.chunk = (n + threads * 4 - 1) / (threads * 4);
  if (pool.chunk < grain) pool.chunk = grain;
  atomic_store(&pool.next, 0);
  pool.want = threads - 1;
  pool.running = threads - 1;
  pool.generation++;
  pthread_cond_broadcast(&pool.work);
  pthread_mutex_unlock(&pool.mu);

  in_pool = 1;
  run_chunks();
  in_pool = 0;

  pthread_mutex_lock(&pool.mu);
  while (pool.running > 0) pthread_cond_wait(&pool.done, &pool.mu);
  pthread_mutex_unlock(&pool.mu);
  pthread_mutex_unlock(&pool.call);
}
