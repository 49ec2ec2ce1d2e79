/* test_nccl.c -- the NCCL transport (runtime/nccl.c, runtime/cuda/nccl.cu), with or without a GPU. */
/*
** Build: as every tests/c test (scripts/run-tests.sh, or cc -std=c11
**   -D_GNU_SOURCE -Iruntime/include -Iruntime tests/c/test_nccl.c -Lbuild
**   -lddplua -Wl,-rpath,$PWD/build -o build/test_nccl).
** The parent serves the store and never touches CUDA: a CUDA context does
** not survive fork, so every CUDA step runs in a forked child, which sends
** its counts back through a pipe.
**   no device:  nccl_new fails with a message that says why (and rank 0
**               publishes it, so a second rank fails at once); SKIP lines.
**   no NCCL:    the same with the message naming libnccl.so.2; SKIP.
**   1+ GPUs:    a 1-rank communicator runs every collective on cudaMalloc'd
**               memory (dtypes, ops, streams, waits, bad arguments).
**   2+ GPUs:    2 forked ranks on cuda:0 and cuda:1 check the results, a
**               grouped send/recv exchange, then a timeout (rank 1 skips an
**               all_reduce): rank 0's wait says "timed out" and the
**               communicator stays aborted.
** Exit status: 0 when all passed.
*/
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "dist/nccl.h"

static int port;

/* What a child sends back. */
typedef struct {
  int ndev, passed, failed, skipped;
} report;

/* -- Host values --------------------------------------------------------- */

/* Small integers, so every reduction is exact in every dtype. */
static double val(int dtype, int rank, int64_t i) {
  if (dtype == DL_BOOL) return (double)((i + rank) % 3 == 0);
  return (double)(i % 7 + rank + 1);
}

static uint16_t to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)(u >> 16);  /* exact for small integers */
}

static float from_bf16(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* Normal numbers only (the values here are small integers or 0). */
static uint16_t to_f16(float f) {
  if (f == 0) return 0;
  uint32_t u;
  memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000, e = (u >> 23) & 0xff, m = u & 0x7fffff;
  return (uint16_t)(sign | ((e - 127 + 15) << 10) | (m >> 13));
}

static float from_f16(uint16_t h) {
  if ((h & 0x7fff) == 0) return 0;
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f,
           m = h & 0x3ff;
  uint32_t u = sign | ((e - 15 + 127) << 23) | (m << 13);
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static void put(void *p, int dtype, int64_t i, double v) {
  switch (dtype) {
    case DL_FLOAT32: ((float *)p)[i] = (float)v; break;
    case DL_FLOAT64: ((double *)p)[i] = v; break;
    case DL_INT32: ((int32_t *)p)[i] = (int32_t)v; break;
    case DL_INT64: ((int64_t *)p)[i] = (int64_t)v; break;
    case DL_UINT8: case DL_BOOL: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case DL_BFLOAT16: ((uint16_t *)p)[i] = to_bf16((float)v); break;
    case DL_FLOAT16: ((uint16_t *)p)[i] = to_f16((float)v); break;
  }
}

static double get(const void *p, int dtype, int64_t i) {
  switch (dtype) {
    case DL_FLOAT32: return ((const float *)p)[i];
    case DL_FLOAT64: return ((const double *)p)[i];
    case DL_INT32: return ((const int32_t *)p)[i];
    case DL_INT64: return (double)((const int64_t *)p)[i];
    case DL_UINT8: case DL_BOOL: return ((const uint8_t *)p)[i];
    case DL_BFLOAT16: return from_bf16(((const uint16_t *)p)[i]);
    case DL_FLOAT16: return from_f16(((const uint16_t *)p)[i]);
  }
  return NAN;
}

/* The reduction over ranks 0..world-1 of element i. */
static double reduced(int dtype, int op, int world, int64_t i) {
  double acc = val(dtype, 0, i);
  for (int r = 1; r < world; r++) {
    double v = val(dtype, r, i);
    switch (op) {
      case DL_PG_SUM: case DL_PG_AVG: acc += v; break;
      case DL_PG_MAX: acc = v > acc ? v : acc; break;
      case DL_PG_MIN: acc = v < acc ? v : acc; break;
      case DL_PG_PROD: acc *= v; break;
    }
  }
  if (op == DL_PG_AVG) acc /= world;
  if (dtype == DL_BOOL) acc = acc != 0;
  return acc;
}

/* -- Device buffers ------------------------------------------------------ */

typedef struct {
  int device;
  void *d;     /* device */
  char *h;     /* host mirror */
  int64_t nbytes;
} buf;

static int buf_new(buf *b, int device, int64_t nbytes) {
  b->device = device;
  b->nbytes = nbytes;
  b->h = malloc((size_t)(nbytes ? nbytes : 1));
  b->d = nccl_dev_alloc(device, nbytes);
  CHECK(b->h && b->d, "alloc of %lld bytes on cuda:%d", (long long)nbytes,
        device);
  return b->h && b->d ? 0 : -1;
}

static void buf_free(buf *b) {
  if (b->d) CHECK(nccl_dev_free(b->device, b->d) == 0);
  free(b->h);
  b->d = b->h = NULL;
}

static int to_dev(buf *b) {
  int rc = nccl_dev_copy(b->device, b->d, b->h, b->nbytes);
  CHECK(rc == 0, "copy to cuda:%d", b->device);
  return rc;
}

static int to_host(buf *b) {
  int rc = nccl_dev_copy(b->device, b->h, b->d, b->nbytes);
  CHECK(rc == 0, "copy from cuda:%d", b->device);
  return rc;
}

/* -- Collectives on one communicator ------------------------------------- */

static const int dtypes[] = {DL_FLOAT32, DL_FLOAT64, DL_INT32, DL_INT64,
                             DL_UINT8, DL_BOOL, DL_BFLOAT16, DL_FLOAT16};
static const char *const opnames[] = {"sum", "avg", "max", "min", "prod"};

/* all_reduce in place of every dtype with every op that applies, waited
** for either on the host (nccl_wait) or through the legacy stream
** (nccl_stream_wait, then the copy on that stream). */
static void test_all_reduce(nccl_comm *c, int device, int64_t n) {
  int rank = nccl_rank(c), world = nccl_world(c);
  for (size_t k = 0; k < sizeof dtypes / sizeof *dtypes; k++) {
    int dt = dtypes[k], size = dl_dtype_size(dt);
    for (int op = DL_PG_SUM; op <= DL_PG_PROD; op++) {
      if (op == DL_PG_AVG && !dl_dtype_is_float(dt)) continue;
      buf b;
      if (buf_new(&b, device, n * size) == 0) {
        for (int64_t i = 0; i < n; i++) put(b.h, dt, i, val(dt, rank, i));
        to_dev(&b);
        int rc = nccl_all_reduce(c, b.d, b.d, n, dt, op, NULL);
        CHECK(rc == 0, "all_reduce %s %s", dl_dtype_name(dt), opnames[op]);
        rc = (op & 1) ? nccl_wait(c) : nccl_stream_wait(c, NULL);
        CHECK(rc == 0, "wait after all_reduce %s %s", dl_dtype_name(dt),
              opnames[op]);
        memset(b.h, 0xff, (size_t)b.nbytes);
        to_host(&b);
        int64_t bad = -1;
        for (int64_t i = 0; i < n && bad < 0; i++)
          if (get(b.h, dt, i) != reduced(dt, op, world, i)) bad = i;
        CHECK(bad < 0, "all_reduce %s %s, world %d: [%lld] = %g, want %g",
              dl_dtype_name(dt), opnames[op], world, (long long)bad,
              bad < 0 ? 0 : get(b.h, dt, bad),
              bad < 0 ? 0 : reduced(dt, op, world, bad));
      }
      buf_free(&b);
    }
  }
}

/* broadcast (out of place), all_gather, reduce_scatter (float32 sum). */
static void test_others(nccl_comm *c, int device, int64_t n) {
  int rank = nccl_rank(c), world = nccl_world(c), src = world - 1;
  int64_t bytes = n * 4;
  buf in, out;
  if (buf_new(&in, device, bytes * world) || buf_new(&out, device, bytes * world))
    goto done;

  for (int64_t i = 0; i < n; i++) put(in.h, DL_FLOAT32, i, val(DL_FLOAT32, rank, i));
  to_dev(&in);
  CHECK(nccl_broadcast(c, out.d, in.d, bytes, src, NULL) == 0);
  CHECK(nccl_wait(c) == 0);
  to_host(&out);
  int64_t bad = -1;
  for (int64_t i = 0; i < n && bad < 0; i++)
    if (get(out.h, DL_FLOAT32, i) != val(DL_FLOAT32, src, i)) bad = i;
  CHECK(bad < 0, "broadcast from %d: [%lld] wrong", src, (long long)bad);

  CHECK(nccl_all_gather(c, out.d, in.d, bytes, NULL) == 0);
  CHECK(nccl_wait(c) == 0);
  to_host(&out);
  bad = -1;
  for (int r = 0; r < world; r++)
    for (int64_t i = 0; i < n && bad < 0; i++)
      if (get(out.h, DL_FLOAT32, r * n + i) != val(DL_FLOAT32, r, i)) bad = r * n + i;
  CHECK(bad < 0, "all_gather: [%lld] wrong", (long long)bad);

  /* Block b of every rank's input holds val(rank, b * n + i). */
  for (int64_t i = 0; i < n * world; i++)
    put(in.h, DL_FLOAT32, i, val(DL_FLOAT32, rank, i));
  to_dev(&in);
  CHECK(nccl_reduce_scatter(c, out.d, in.d, n, DL_FLOAT32, DL_PG_SUM, NULL) == 0);
  CHECK(nccl_wait(c) == 0);
  to_host(&out);
  bad = -1;
  for (int64_t i = 0; i < n && bad < 0; i++)
    if (get(out.h, DL_FLOAT32, i) != reduced(DL_FLOAT32, DL_PG_SUM, world, rank * n + i))
      bad = i;
  CHECK(bad < 0, "reduce_scatter: [%lld] wrong", (long long)bad);

done:
  buf_free(&in);
  buf_free(&out);
}

/* Arguments refused before anything reaches NCCL. */
static void test_bad_args(nccl_comm *c, int device) {
  void *d = nccl_dev_alloc(device, 64);
  CHECK(d != NULL);
  CHECK(nccl_all_reduce(c, d, d, 4, DL_INT32, DL_PG_AVG, NULL) == DL_EDTYPE);
  CHECK(strstr(dl_last_error(), "avg") != NULL, "%s", dl_last_error());
  CHECK(nccl_all_reduce(c, d, d, 4, 99, DL_PG_SUM, NULL) == DL_EDTYPE);
  CHECK(nccl_all_reduce(c, d, d, 4, DL_FLOAT32, 17, NULL) == DL_EINVAL);
  CHECK(nccl_all_reduce(c, d, d, -1, DL_FLOAT32, DL_PG_SUM, NULL) == DL_EINVAL);
  CHECK(nccl_all_reduce(NULL, d, d, 4, DL_FLOAT32, DL_PG_SUM, NULL) == DL_EINVAL);
  CHECK(nccl_broadcast(c, d, d, 16, nccl_world(c), NULL) == DL_EINDEX);
  CHECK(nccl_send(c, d, 16, nccl_rank(c), NULL) == DL_EINDEX);
  CHECK(nccl_recv(c, d, 16, -1, NULL) == DL_EINDEX);
  CHECK(nccl_group_end(c) == DL_ESTATE, "group_end without start");
  /* An empty collective is fine. */
  CHECK(nccl_all_reduce(c, d, d, 0, DL_FLOAT32, DL_PG_SUM, NULL) == 0);
  CHECK(nccl_wait(c) == 0);
  CHECK(nccl_dev_free(device, d) == 0);
}

/* Ranks 0 and 1 swap buffers in one group (both send first: without the
** group this could deadlock). */
static void test_exchange(nccl_comm *c, int device, int64_t n) {
  int rank = nccl_rank(c), peer = 1 - rank;
  buf s, r;
  if (buf_new(&s, device, n * 8) == 0 && buf_new(&r, device, n * 8) == 0) {
    for (int64_t i = 0; i < n; i++) put(s.h, DL_INT64, i, val(DL_INT64, rank, i));
    to_dev(&s);
    CHECK(nccl_group_start(c) == 0);
    CHECK(nccl_send(c, s.d, n * 8, peer, NULL) == 0);
    CHECK(nccl_recv(c, r.d, n * 8, peer, NULL) == 0);
    CHECK(nccl_group_end(c) == 0);
    CHECK(nccl_wait(c) == 0);
    to_host(&r);
    int64_t bad = -1;
    for (int64_t i = 0; i < n && bad < 0; i++)
      if (get(r.h, DL_INT64, i) != val(DL_INT64, peer, i)) bad = i;
    CHECK(bad < 0, "send/recv: [%lld] wrong", (long long)bad);
  }
  buf_free(&s);
  buf_free(&r);
}

/* -- Ranks --------------------------------------------------------------- */

static void skip(report *rep, const char *what, const char *why) {
  printf("SKIP: %s: %s\n", what, why);
  rep->skipped++;
}

/* Without a device: nccl_new says why, and rank 0 tells the others. */
static void test_no_device(dl_store *s, report *rep) {
  const char *status = dl_cuda_status();
  dl_clear_error();
  nccl_comm *c = nccl_new(s, "nodev", 0, 2, 0, 5);
  CHECK(c == NULL, "nccl_new succeeded without a device");
  CHECK(dl_last_error_code() == DL_EDEVICE, "code %d", dl_last_error_code());
  CHECK(strncmp(dl_last_error(), "nccl: ", 6) == 0 &&
            strstr(dl_last_error(), status) != NULL,
        "\"%s\" does not carry the status \"%s\"", dl_last_error(), status);
  printf("nccl_new without a device: %s\n", dl_last_error());
  /* Rank 1 fails by itself too, without waiting for an id. */
  c = nccl_new(s, "nodev", 1, 2, 0, 5);
  CHECK(c == NULL);
  CHECK(strstr(dl_last_error(), status) != NULL, "%s", dl_last_error());
  int64_t len = 0;
  char *v = dl_store_get(s, "nodev/nccl_id", 1, &len);
  CHECK(v && v[0] == '!' && strstr(v, status), "published: %s", v ? v : "(none)");
  dl_store_value_free(v);
  CHECK(nccl_version() == DL_EDEVICE);
  CHECK(nccl_dev_alloc(0, 16) == NULL);
  skip(rep, "NCCL collectives", status);
}

/* One rank of `world` on cuda:rank; rank 1 of 2 skips the last
** collective so that rank 0 times out. */
static void run_rank(dl_store *s, const char *prefix, int rank, int world) {
  nccl_comm *c = nccl_new(s, prefix, rank, world, rank, 60);
  CHECK(c != NULL, "nccl_new rank %d of %d", rank, world);
  if (!c) return;
  CHECK(nccl_rank(c) == rank && nccl_world(c) == world);
  test_all_reduce(c, rank, 1000);
  test_all_reduce(c, rank, 3 * 1000 * 1000 + 1);  /* > 1 NCCL chunk */
  test_others(c, rank, 100001);
  test_bad_args(c, rank);
  if (world == 2) test_exchange(c, rank, 65537);
  if (world < 2) {
    nccl_free(c);
    return;
  }

  char key[128];
  snprintf(key, sizeof key, "%s/timeout-done", prefix);
  if (rank == 1) {
    /* Stays alive, without the all_reduce, until rank 0 has timed out;
    ** leaves its communicator to the process exit (its peer is gone). */
    int64_t len;
    void *v = dl_store_get(s, key, 60, &len);
    CHECK(v != NULL, "rank 0 never reported its timeout");
    dl_store_value_free(v);
    return;
  }
  void *d = nccl_dev_alloc(rank, 4096);
  nccl_set_timeout(c, 2);
  CHECK(nccl_all_reduce(c, d, d, 1024, DL_FLOAT32, DL_PG_SUM, NULL) == 0);
  int rc = nccl_wait(c);
  CHECK(rc == DL_ESTATE, "wait returned %d", rc);
  CHECK(strstr(dl_last_error(), "timed out") != NULL, "%s", dl_last_error());
  printf("timeout: %s\n", dl_last_error());
  rc = nccl_all_reduce(c, d, d, 1024, DL_FLOAT32, DL_PG_SUM, NULL);
  CHECK(rc == DL_ESTATE && strstr(dl_last_error(), "aborted"),
        "after a timeout: %d %s", rc, dl_last_error());
  dl_store_set(s, key, "1", 1);
  nccl_free(c);
  nccl_dev_free(rank, d);
}

/* -- Processes ----------------------------------------------------------- */

typedef void (*child_fn)(dl_store *s, int rank, int world, report *rep);

static void child_probe(dl_store *s, int rank, int world, report *rep) {
  (void)rank, (void)world;
  rep->ndev = dl_cuda_device_count();
  printf("dl_cuda_status: %s\n", dl_cuda_status());
  if (rep->ndev == 0) {
    test_no_device(s, rep);
    return;
  }
  int v = nccl_version();
  if (v < 0) {
    CHECK(strstr(dl_last_error(), "libnccl.so.2") != NULL, "%s",
          dl_last_error());
    skip(rep, "NCCL collectives", dl_last_error());
    rep->ndev = -1;  /* no NCCL: the parent starts no ranks */
    return;
  }
  printf("NCCL version code %d\n", v);
  run_rank(s, "one", 0, 1);
}

static void child_rank(dl_store *s, int rank, int world, report *rep) {
  (void)rep;
  run_rank(s, "two", rank, world);
}

/* Forks `world` children running fn; adds their reports into passed,
** failed (a child that dies or hangs counts as a failure); returns the
** first child's ndev. */
static int spawn(child_fn fn, int world, report *skipped) {
  int fds[2];
  pid_t pids[8];
  int ndev = 0;
  if (pipe(fds) != 0) {
    CHECK(0, "pipe");
    return 0;
  }
  fflush(stdout);
  for (int r = 0; r < world; r++) {
    pids[r] = fork();
    if (pids[r] == 0) {
      close(fds[0]);
      alarm(240);  /* a hung GPU call must not hang the test */
      report rep = {0, 0, 0, 0};
      dl_store *s = dl_store_connect("127.0.0.1", port, "t", 30);
      CHECK(s != NULL);
      if (s) fn(s, r, world, &rep);
      dl_store_close(s);
      rep.passed = passed;
      rep.failed = failed;
      if (write(fds[1], &rep, sizeof rep) != (ssize_t)sizeof rep)
        printf("FAIL: child %d could not report\n", r);
      fflush(stdout);
      _exit(failed != 0);
    }
  }
  close(fds[1]);
  report rep;
  int got = 0;
  while (read(fds[0], &rep, sizeof rep) == (ssize_t)sizeof rep) {
    if (got++ == 0) ndev = rep.ndev;
    passed += rep.passed;
    failed += rep.failed;
    skipped->skipped += rep.skipped;
  }
  close(fds[0]);
  for (int r = 0; r < world; r++) {
    int st = 0;
    waitpid(pids[r], &st, 0);
    CHECK(WIFEXITED(st), "child %d killed by signal %d", r,
          WIFSIGNALED(st) ? WTERMSIG(st) : 0);
  }
  CHECK(got == world, "%d of %d children reported", got, world);
  return ndev;
}

int main(void) {
  dl_store *srv = dl_store_server("127.0.0.1", 0, "t");
  CHECK(srv != NULL, "store server");
  if (!srv) return check_report("test_nccl");
  port = dl_store_port(srv);

  /* Arguments are checked before CUDA is looked for: safe in the parent. */
  /* (a world of one needs no store: the NCCL process group of `--nproc 1`) */
  CHECK(nccl_new(NULL, "p", 0, 2, 0, 1) == NULL && dl_last_error_code() == DL_EINVAL);
  CHECK(nccl_new(srv, NULL, 0, 1, 0, 1) == NULL && dl_last_error_code() == DL_EINVAL);
  CHECK(nccl_new(srv, "p", 2, 2, 0, 1) == NULL && dl_last_error_code() == DL_EINVAL);
  CHECK(nccl_new(srv, "p", 0, 0, 0, 1) == NULL && dl_last_error_code() == DL_EINVAL);
  nccl_free(NULL);

  report sk = {0, 0, 0, 0};
  int ndev = spawn(child_probe, 1, &sk);
  if (ndev >= 2)
    spawn(child_rank, 2, &sk);
  else if (ndev == 1)
    printf("SKIP: 2-rank NCCL checks: only 1 CUDA device\n");
  dl_store_close(srv);
  return check_report("test_nccl");
}
