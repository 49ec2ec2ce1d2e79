/* test_gloo.c -- the Gloo transport (runtime/gloo.cc) from C: a parent
** serves the store and forks ranks that each connect a context and run
** every collective against values computed locally; then a rank that skips
** a collective (the other must time out) and a rank that dies (the other
** must fail fast).  Each child exits with its number of failed checks. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "dist/gloo.h"

static int port;
static char err[1024];

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* -- Values: element i of rank r, and the reduction over all ranks -------- */

static uint64_t hsh(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static uint64_t val(int r, int64_t i, int salt) {
  return hsh(((uint64_t)salt << 48) ^ ((uint64_t)r << 40) ^ (uint64_t)i);
}

static uint16_t f2bf(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if (isnan(f)) return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fff + ((u >> 16) & 1);
  return (uint16_t)(u >> 16);
}

/* Exact for the values used here (normal, or zero). */
static uint16_t f2h(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
  uint32_t absu = u & 0x7fffffff;
  if (absu >= 0x7f800000) return sign | 0x7c00 | (absu > 0x7f800000 ? 0x200 : 0);
  if (absu >= 0x477ff000) return sign | 0x7c00;
  if (absu < 0x38800000) {
    float a;
    memcpy(&a, &absu, 4);
    return sign | (uint16_t)lrintf(a * 16777216.0f);
  }
  absu += 0xc8000fff + ((absu >> 13) & 1);
  return sign | (uint16_t)(absu >> 13);
}

static int is_flt(int dt) {
  return dt == DL_FLOAT32 || dt == DL_FLOAT64 || dt == DL_BFLOAT16 || dt == DL_FLOAT16;
}

/* Floats take small integers (sums and products stay exact in any order),
** NaN now and then for max and min; integers take random bits. */
static double fval(int r, int64_t i, int salt, int op) {
  uint64_t v = val(r, i, salt);
  if (op == DL_PG_PROD) { static const double k[5] = {-2, -1, 1, 2, 3}; return k[v % 5]; }
  if ((op == DL_PG_MAX || op == DL_PG_MIN) && (v >> 20) % 101 == 0) return NAN;
  return (double)(int)(v % 17) - 8;
}

static void store_as(void *p, int dt, double d) {
  switch (dt) {
  case DL_FLOAT32: *(float *)p = (float)d; break;
  case DL_FLOAT64: *(double *)p = d; break;
  case DL_BFLOAT16: *(uint16_t *)p = f2bf((float)d); break;
  case DL_FLOAT16: *(uint16_t *)p = f2h((float)d); break;
  }
}

static void fill(void *buf, int dt, int op, int r, int64_t n, int salt) {
  int es = dl_dtype_size(dt);
  for (int64_t i = 0; i < n; i++) {
    char *p = (char *)buf + i * es;
    uint64_t v = val(r, i, salt);
    if (is_flt(dt)) store_as(p, dt, fval(r, i, salt, op));
    else if (dt == DL_BOOL) *p = (char)(v & 1);
    else memcpy(p, &v, (size_t)es);  /* little-endian: the low bytes */
  }
}

/* The expected element i (bits into out); 1 when it must be a NaN. */
static int expect(void *out, int dt, int op, int W, int64_t i, int salt) {
  if (is_flt(dt)) {
    double acc = fval(0, i, salt, op);
    int nan = isnan(acc);
    for (int r = 1; r < W; r++) {
      double x = fval(r, i, salt, op);
      nan |= isnan(x);
      if (op == DL_PG_SUM || op == DL_PG_AVG) acc += x;
      else if (op == DL_PG_PROD) acc *= x;
      else if (op == DL_PG_MAX) acc = x > acc ? x : acc;
      else acc = x < acc ? x : acc;
    }
    if (nan) return 1;
    if (op == DL_PG_AVG) acc = dt == DL_FLOAT64 ? acc / W : (double)((float)acc / (float)W);
    store_as(out, dt, acc);
    return 0;
  }
  if (dt == DL_BOOL) {
    int acc = (op == DL_PG_SUM || op == DL_PG_MAX) ? 0 : 1;
    for (int r = 0; r < W; r++) {
      int b = (int)(val(r, i, salt) & 1);
      acc = (op == DL_PG_SUM || op == DL_PG_MAX) ? (acc | b) : (acc & b);
    }
    *(uint8_t *)out = (uint8_t)acc;
    return 0;
  }
  int es = dl_dtype_size(dt);
  int bits = es * 8;
  uint64_t mask = bits == 64 ? ~0ull : ((1ull << bits) - 1);
  uint64_t acc = val(0, i, salt) & mask;
  for (int r = 1; r < W; r++) {
    uint64_t x = val(r, i, salt) & mask;
    /* signed order for int32/int64, unsigned for uint8 */
    int64_t sx = dt == DL_INT32 ? (int64_t)(int32_t)x : (int64_t)x;
    int64_t sa = dt == DL_INT32 ? (int64_t)(int32_t)acc : (int64_t)acc;
    int gt = dt == DL_UINT8 ? x > acc : sx > sa;
    int lt = dt == DL_UINT8 ? x < acc : sx < sa;
    if (op == DL_PG_SUM) acc = (acc + x) & mask;
    else if (op == DL_PG_PROD) acc = (acc * x) & mask;
    else if (op == DL_PG_MAX) acc = gt ? x : acc;
    else acc = lt ? x : acc;
  }
  memcpy(out, &acc, (size_t)es);
  return 0;
}

static int isnan_elem(const void *p, int dt) {
  uint16_t h;
  switch (dt) {
  case DL_FLOAT32: return isnan(*(const float *)p);
  case DL_FLOAT64: return isnan(*(const double *)p);
  case DL_BFLOAT16: memcpy(&h, p, 2); return (h & 0x7fff) > 0x7f80;
  case DL_FLOAT16: memcpy(&h, p, 2); return (h & 0x7fff) > 0x7c00;
  }
  return 0;
}

/* Number of wrong elements of got[0..n) against elements first.. of the
** reduction. */
static int64_t count_bad(const void *got, int dt, int op, int W, int64_t first, int64_t n,
                         int salt) {
  int es = dl_dtype_size(dt);
  int64_t bad = 0;
  char want[8];
  for (int64_t i = 0; i < n; i++) {
    const char *p = (const char *)got + i * es;
    if (expect(want, dt, op, W, first + i, salt)) bad += !isnan_elem(p, dt);
    else bad += memcmp(want, p, (size_t)es) != 0;
  }
  return bad;
}

/* -- One world: every collective ------------------------------------------ */

static const int64_t sizes[] = {0, 1, 7, 1000003};

static void run_all_reduce(dlg *g, int rank, int W) {
  int salt = 1;
  for (int dt = 0; dt < DL_NDTYPES; dt++)
    for (int op = DL_PG_SUM; op <= DL_PG_PROD; op++) {
      if (op == DL_PG_AVG && !is_flt(dt)) continue;
      for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++, salt++) {
        int64_t n = sizes[k];
        void *buf = malloc((size_t)(n ? n : 1) * 8);
        fill(buf, dt, op, rank, n, salt);
        int rc = dlg_all_reduce(g, buf, n, dt, op, err, sizeof err);
        CHECK(rc == 0, "%s %d n=%lld: %s", dl_dtype_name(dt), op, (long long)n, err);
        int64_t bad = rc ? -1 : count_bad(buf, dt, op, W, 0, n, salt);
        CHECK(bad == 0, "all_reduce %s op %d n=%lld W=%d: %lld wrong", dl_dtype_name(dt), op,
              (long long)n, W, (long long)bad);
        free(buf);
      }
    }
  /* avg of an integer dtype is refused (before any communication) */
  int32_t x = 1;
  CHECK(dlg_all_reduce(g, &x, 1, DL_INT32, DL_PG_AVG, err, sizeof err) == -1);
  CHECK(dlg_barrier(g, err, sizeof err) == 0, "%s", err);
}

/* Sums of random floats (not exact): every rank must hold the same bits. */
static void run_same_bits(dlg *g, int rank, int W) {
  const int dts[3] = {DL_FLOAT32, DL_BFLOAT16, DL_FLOAT16};
  int64_t n = 100003;
  for (int k = 0; k < 3; k++) {
    int dt = dts[k], es = dl_dtype_size(dt);
    char *buf = malloc((size_t)(n * es)), *all = malloc((size_t)(n * es * W));
    for (int64_t i = 0; i < n; i++)
      store_as(buf + i * es, dt, (double)(val(rank, i, 999) % 1000003) / 1024.0 - 300.0);
    CHECK(dlg_all_reduce(g, buf, n, dt, DL_PG_SUM, err, sizeof err) == 0, "%s", err);
    CHECK(dlg_all_gather(g, all, buf, n * es, err, sizeof err) == 0, "%s", err);
    int same = 1;
    for (int r = 0; r < W; r++) same &= memcmp(all + (size_t)(r * n * es), buf, (size_t)(n * es)) == 0;
    CHECK(same, "%s all_reduce differs between ranks", dl_dtype_name(dt));
    free(buf);
    free(all);
  }
}

static void run_broadcast(dlg *g, int rank, int W) {
  const int64_t nbs[3] = {0, 100003, 3000017};
  for (int src = 0; src < W; src++)
    for (int k = 0; k < 3; k++) {
      int64_t nb = nbs[k];
      unsigned char *buf = malloc((size_t)nb + 1);
      for (int64_t i = 0; i < nb; i++)
        buf[i] = rank == src ? (unsigned char)val(src, i, 7) : 0xee;
      CHECK(dlg_broadcast(g, buf, nb, src, err, sizeof err) == 0, "%s", err);
      int64_t bad = 0;
      for (int64_t i = 0; i < nb; i++) bad += buf[i] != (unsigned char)val(src, i, 7);
      CHECK(bad == 0, "broadcast from %d of %lld bytes: %lld wrong", src, (long long)nb,
            (long long)bad);
      free(buf);
    }
  char b = 0;
  CHECK(dlg_broadcast(g, &b, 1, W, err, sizeof err) == -1 && strstr(err, "range"));
}

static void run_all_gather(dlg *g, int rank, int W) {
  const int64_t nbs[3] = {0, 1, 123457};
  for (int k = 0; k < 3; k++)
    for (int inplace = 0; inplace < 2; inplace++) {
      int64_t nb = nbs[k];
      unsigned char *out = malloc((size_t)(nb * W) + 1), *in = malloc((size_t)nb + 1);
      memset(out, 0xee, (size_t)(nb * W) + 1);
      unsigned char *mine = inplace ? out + rank * nb : in;
      for (int64_t i = 0; i < nb; i++) mine[i] = (unsigned char)val(rank, i, 8);
      CHECK(dlg_all_gather(g, out, mine, nb, err, sizeof err) == 0, "%s", err);
      int64_t bad = 0;
      for (int r = 0; r < W; r++)
        for (int64_t i = 0; i < nb; i++) bad += out[r * nb + i] != (unsigned char)val(r, i, 8);
      CHECK(bad == 0, "all_gather %lld bytes (in place %d): %lld wrong", (long long)nb, inplace,
            (long long)bad);
      free(out);
      free(in);
    }
}

static void run_reduce_scatter(dlg *g, int rank, int W) {
  /* 1500007 floats: more 1 MiB pieces than the receive window holds */
  const int64_t ns[5] = {0, 1, 7, 300007, 1500007};
  int salt = 5000;
  for (int dt = 0; dt < DL_NDTYPES; dt++)
    for (int op = DL_PG_SUM; op <= DL_PG_PROD; op++) {
      if (op == DL_PG_AVG && !is_flt(dt)) continue;
      for (int k = 0; k < 5; k++, salt++) {
        int64_t n = ns[k];
        /* big blocks only for a few, to keep the test short */
        if (n > 7 && !(op == DL_PG_SUM || (dt == DL_FLOAT32 && op == DL_PG_AVG))) continue;
        if (n > 300007 && !(dt == DL_FLOAT32 && op == DL_PG_SUM)) continue;
        int es = dl_dtype_size(dt);
        void *in = malloc((size_t)(n * W * es) + 8), *out = malloc((size_t)(n * es) + 8);
        fill(in, dt, op, rank, n * W, salt);
        int rc = dlg_reduce_scatter(g, out, in, n, dt, op, err, sizeof err);
        CHECK(rc == 0, "%s", err);
        int64_t bad = rc ? -1 : count_bad(out, dt, op, W, rank * n, n, salt);
        CHECK(bad == 0, "reduce_scatter %s op %d n=%lld W=%d: %lld wrong", dl_dtype_name(dt), op,
              (long long)n, W, (long long)bad);
        free(in);
        free(out);
      }
    }
}

/* dlg_first: messages of different sizes from each rank (up to the most
** it carries) arrive whole, each in its own slot, and never crash Gloo;
** with a stride each peer gets its own block; the reduction of the
** messages matches the expected values on every rank. */
static void run_first(dlg *g, int rank, int W) {
  size_t max = dlg_inline_max(g);
  CHECK(max >= 4096 && max <= (64 << 10), "inline max %zu", max);
  unsigned char *data = malloc(max * (size_t)W + 8);
  for (int round = 0; round < 3; round++) {
    /* rank r sends r * 1000 + round bytes; the last rank the most there is */
    size_t dlen = rank == W - 1 ? max : (size_t)(rank * 1000 + round);
    int64_t head[2] = { rank, (int64_t)dlen };
    for (size_t i = 0; i < dlen; i++) data[i] = (unsigned char)val(rank, (int64_t)i, 30 + round);
    CHECK(dlg_first(g, "t", head, sizeof head, data, dlen, 0, err, sizeof err) == 0, "%s", err);
    for (int r = 0; r < W; r++) {
      const unsigned char *m = dlg_msg(g, r);
      int64_t h[2];
      memcpy(h, m, sizeof h);
      size_t want = r == W - 1 ? max : (size_t)(r * 1000 + round);
      CHECK(h[0] == r && h[1] == (int64_t)want, "round %d: rank %d's head %lld %lld", round, r,
            (long long)h[0], (long long)h[1]);
      int64_t bad = 0;
      for (size_t i = 0; i < want; i++) bad += m[16 + i] != (unsigned char)val(r, (int64_t)i, 30 + round);
      CHECK(bad == 0, "round %d: rank %d's %zu bytes: %lld wrong", round, r, want, (long long)bad);
    }
  }
  /* a stride: peer q gets block q */
  size_t bn = 777;
  for (size_t i = 0; i < bn * (size_t)W; i++) data[i] = (unsigned char)val(rank, (int64_t)i, 40);
  int32_t h = rank;
  CHECK(dlg_first(g, "t", &h, sizeof h, data, bn, bn, err, sizeof err) == 0, "%s", err);
  int64_t bad = 0;
  for (int r = 0; r < W; r++) {
    const unsigned char *m = dlg_msg(g, r);
    int32_t hr;
    memcpy(&hr, m, 4);
    CHECK(hr == r, "strided head %d from %d", hr, r);
    for (size_t i = 0; i < bn; i++)
      bad += m[4 + i] != (unsigned char)val(r, (int64_t)((size_t)rank * bn + i), 40);
  }
  CHECK(bad == 0, "strided: %lld wrong", (long long)bad);
  CHECK(dlg_first(g, "t", &h, sizeof h, data, max + 1, 0, err, sizeof err) == -1 &&
        strstr(err, "over"), "%s", err);
  free(data);
  /* the reduction of the messages, every dtype and op, small sizes */
  int salt = 7000;
  for (int dt = 0; dt < DL_NDTYPES; dt++)
    for (int op = DL_PG_SUM; op <= DL_PG_PROD; op++) {
      if (op == DL_PG_AVG && !is_flt(dt)) continue;
      for (int64_t n = 0; n <= 1000; n = n ? n * 10 : 1, salt++) {
        int es = dl_dtype_size(dt);
        void *buf = malloc((size_t)(n ? n : 1) * 8), *out = malloc((size_t)(n ? n : 1) * 8);
        fill(buf, dt, op, rank, n, salt);
        int rc = dlg_first(g, "t", &h, sizeof h, buf, (size_t)(n * es), 0, err, sizeof err);
        if (rc == 0) rc = dlg_reduce_msgs(g, out, sizeof h, n, dt, op, err, sizeof err);
        CHECK(rc == 0, "%s", err);
        bad = rc ? -1 : count_bad(out, dt, op, W, 0, n, salt);
        CHECK(bad == 0, "reduce_msgs %s op %d n=%lld W=%d: %lld wrong", dl_dtype_name(dt), op,
              (long long)n, W, (long long)bad);
        free(buf);
        free(out);
      }
    }
}

/* A ring (even ranks send first, odd ones receive first: a send waits for
** the matching recv), then two messages in a row to check their order. */
static void run_send_recv(dlg *g, int rank, int W) {
  if (W < 2) {
    char b = 0;
    CHECK(dlg_send(g, &b, 1, 0, err, sizeof err) == -1);
    return;
  }
  int64_t nb = 1000003;
  unsigned char *sb = malloc((size_t)nb), *rb = malloc((size_t)nb);
  int next = (rank + 1) % W, prev = (rank + W - 1) % W;
  for (int64_t i = 0; i < nb; i++) sb[i] = (unsigned char)val(rank, i, 9);
  memset(rb, 0, (size_t)nb);
  for (int phase = 0; phase < 2; phase++) {
    if ((phase == 0) == (rank % 2 == 0))
      CHECK(dlg_send(g, sb, nb, next, err, sizeof err) == 0, "%s", err);
    else
      CHECK(dlg_recv(g, rb, nb, prev, err, sizeof err) == 0, "%s", err);
  }
  int64_t bad = 0;
  for (int64_t i = 0; i < nb; i++) bad += rb[i] != (unsigned char)val(prev, i, 9);
  CHECK(bad == 0, "ring recv from %d: %lld wrong", prev, (long long)bad);
  /* 0 -> 1: a small then a big message; 1 posts its recvs in that order */
  if (rank == 0) {
    int32_t a = 42;
    CHECK(dlg_send(g, &a, 4, 1, err, sizeof err) == 0, "%s", err);
    CHECK(dlg_send(g, sb, nb, 1, err, sizeof err) == 0, "%s", err);
    CHECK(dlg_send(g, sb, 0, 1, err, sizeof err) == 0, "%s", err);
  } else if (rank == 1) {
    int32_t a = 0;
    CHECK(dlg_recv(g, &a, 4, 0, err, sizeof err) == 0 && a == 42, "%s", err);
    CHECK(dlg_recv(g, rb, nb, 0, err, sizeof err) == 0, "%s", err);
    CHECK(memcmp(rb, sb, 16) != 0 || rank == 0);  /* rb holds rank 0's data */
    bad = 0;
    for (int64_t i = 0; i < nb; i++) bad += rb[i] != (unsigned char)val(0, i, 9);
    CHECK(bad == 0, "second message: %lld wrong", (long long)bad);
    CHECK(dlg_recv(g, rb, 0, 0, err, sizeof err) == 0, "%s", err);
  }
  free(sb);
  free(rb);
}

static dl_store *connect_store(void) {
  dl_store *s = dl_store_connect("127.0.0.1", port, "t", 10);
  CHECK(s != NULL);
  return s;
}

static int child(int rank, int W) {
  dl_store *s = connect_store();
  if (!s) return 1;
  char prefix[64];
  snprintf(prefix, sizeof prefix, "gtest/%d/w%d", (int)getppid(), W);
  dlg *g = dlg_new(s, prefix, rank, W, "127.0.0.1", 10, err, sizeof err);
  CHECK(g != NULL, "%s", err);
  if (!g) return 1;
  CHECK(dlg_rank(g) == rank && dlg_world(g) == W);
  run_all_reduce(g, rank, W);
  run_same_bits(g, rank, W);
  run_broadcast(g, rank, W);
  run_all_gather(g, rank, W);
  run_reduce_scatter(g, rank, W);
  run_send_recv(g, rank, W);
  run_first(g, rank, W);
  CHECK(dlg_barrier(g, err, sizeof err) == 0, "%s", err);
  dlg_free(g);
  dl_store_close(s);
  return failed;
}

/* -- Failures -------------------------------------------------------------- */

/* Rank 1 never calls the all_reduce: rank 0 times out after ~1 s, then
** fails at once with the same reason. */
static int child_timeout(int rank) {
  dl_store *s = connect_store();
  if (!s) return 1;
  char prefix[64];
  snprintf(prefix, sizeof prefix, "gtest/%d/timeout", (int)getppid());
  dlg *g = dlg_new(s, prefix, rank, 2, "127.0.0.1", 10, err, sizeof err);
  CHECK(g != NULL, "%s", err);
  if (!g) return 1;
  CHECK(dlg_barrier(g, err, sizeof err) == 0, "%s", err);
  if (rank == 0) {
    dlg_set_timeout(g, 1);
    float x[64] = {0};
    double t0 = now();
    int rc = dlg_all_reduce(g, x, 64, DL_FLOAT32, DL_PG_SUM, err, sizeof err);
    double dt = now() - t0;
    CHECK(rc == -1 && strstr(err, "timed out") && strstr(err, "all_reduce"), "rc %d: %s", rc, err);
    CHECK(dt > 0.8 && dt < 3, "timed out after %.2f s", dt);
    printf("timeout: after %.3f s: %s\n", dt, err);
    t0 = now();
    rc = dlg_barrier(g, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "earlier failure") && strstr(err, "timed out"), "%s", err);
    CHECK(now() - t0 < 0.1, "a poisoned context took %.2f s", now() - t0);
    t0 = now();
    dlg_free(g);
    CHECK(now() - t0 < 2, "dlg_free took %.2f s", now() - t0);
  } else {
    usleep(2500 * 1000);
    dlg_free(g);
  }
  dl_store_close(s);
  return failed;
}

/* Rank 1 exits without a word while rank 0 waits for it in a collective:
** rank 0 fails within a few seconds though its timeout is 30 s. */
static int child_dead(int rank) {
  dl_store *s = connect_store();
  if (!s) return 1;
  char prefix[64];
  snprintf(prefix, sizeof prefix, "gtest/%d/dead", (int)getppid());
  dlg *g = dlg_new(s, prefix, rank, 2, "127.0.0.1", 30, err, sizeof err);
  CHECK(g != NULL, "%s", err);
  if (!g) return 1;
  CHECK(dlg_barrier(g, err, sizeof err) == 0, "%s", err);
  if (rank == 1) { usleep(300 * 1000); _exit(0); }  /* while rank 0 waits in the all_reduce */
  float *x = calloc(1 << 20, sizeof *x);
  double t0 = now();
  int rc = dlg_all_reduce(g, x, 1 << 20, DL_FLOAT32, DL_PG_SUM, err, sizeof err);
  double dt = now() - t0;
  CHECK(rc == -1, "all_reduce with a dead peer succeeded");
  CHECK(dt < 5, "noticed the dead peer after %.2f s", dt);
  printf("dead peer: noticed after %.3f s: %s\n", dt, err);
  rc = dlg_send(g, x, 4, 1, err, sizeof err);
  CHECK(rc == -1 && strstr(err, "earlier failure"), "%s", err);
  free(x);
  dlg_free(g);
  dl_store_close(s);
  return failed;
}

/* A rank whose peer never comes: dlg_new gives up after its timeout. */
static int child_alone(int rank, int W) {
  (void)W;
  dl_store *s = connect_store();
  if (!s) return 1;
  char prefix[64];
  snprintf(prefix, sizeof prefix, "gtest/%d/alone", (int)getppid());
  double t0 = now();
  dlg *g = dlg_new(s, prefix, rank, 2, "127.0.0.1", 1, err, sizeof err);
  double dt = now() - t0;
  CHECK(g == NULL && strstr(err, "timed out") && strstr(err, "init"), "%s", err);
  CHECK(dt > 0.8 && dt < 3, "gave up after %.2f s", dt);
  printf("init alone: after %.3f s: %s\n", dt, err);
  dl_store_close(s);
  return failed;
}

/* Forks W children running fn(rank, W), waits at most limit_s for all. */
static void run_world(int W, int (*fn)(int, int), double limit_s, const char *what) {
  pid_t pids[8];
  fflush(stdout);  /* or each child prints the parent's buffer again */
  for (int r = 0; r < W; r++) {
    pids[r] = fork();
    if (pids[r] == 0) {
      int f = fn(r, W);
      fflush(stdout);
      _exit(f ? 1 : 0);
    }
  }
  double t0 = now();
  int left = W;
  while (left > 0) {
    for (int r = 0; r < W; r++) {
      if (pids[r] <= 0) continue;
      int st = 0;
      if (waitpid(pids[r], &st, WNOHANG) == pids[r]) {
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s W=%d rank %d status %d", what, W, r, st);
        pids[r] = 0;
        left--;
      }
    }
    if (left && now() - t0 > limit_s) {
      CHECK(0, "%s W=%d: hung for %.0f s", what, W, limit_s);
      for (int r = 0; r < W; r++)
        if (pids[r] > 0) { kill(pids[r], SIGKILL); waitpid(pids[r], NULL, 0); pids[r] = 0; }
      break;
    }
    usleep(10 * 1000);
  }
  printf("%s W=%d: %.2f s\n", what, W, now() - t0);
}

static int timeout_fn(int r, int W) { (void)W; return child_timeout(r); }
static int dead_fn(int r, int W) { (void)W; return child_dead(r); }

int main(void) {
  dl_store *srv = dl_store_server("127.0.0.1", 0, "t");
  CHECK(srv != NULL);
  if (!srv) return check_report("test_gloo");
  port = dl_store_port(srv);
  for (int W = 1; W <= 4; W++) run_world(W, child, 60, "collectives");
  run_world(2, timeout_fn, 30, "timeout");
  run_world(2, dead_fn, 30, "dead peer");
  run_world(1, child_alone, 30, "init alone");
  dl_store_close(srv);
  return check_report("test_gloo");
}
