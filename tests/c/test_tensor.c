/* test_tensor.c -- C unit tests of tensor lifetime, views sharing storage,
** in-place writes into views whose elements overlap, alignment, memory
** accounting, the iterator, threads and the generator. */
#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>

#include "ddplua.h"
#include "check.h"
#include "ddplua_binding.h"


static double at(const dl_tensor *t, int64_t i) {
  double v = NAN;
  dl_get_double(t, i, &v);
  return v;
}

static void test_refcounts(void) {
  int64_t s[2] = {3, 4};
  dl_tensor *a = dl_zeros(s, 2, DL_FLOAT32);
  CHECK(a && dl_tensor_refcount(a) == 1 && dl_tensor_storage_refcount(a) == 1);
  dl_tensor *v = dl_transpose(a, 0, 1);
  CHECK(v && dl_tensor_storage_refcount(a) == 2 && dl_tensor_same_storage(a, v));
  dl_tensor_retain(a);
  CHECK(dl_tensor_refcount(a) == 2);
  dl_tensor_release(a);
  dl_tensor_release(a);  /* the view keeps the storage alive */
  CHECK(dl_tensor_storage_refcount(v) == 1);
  CHECK(dl_tensor_size(v, 0) == 4 && dl_tensor_stride(v, 0) == 1 && dl_tensor_stride(v, 1) == 4);
  dl_tensor_release(v);
  dl_tensor_release(NULL);  /* harmless */
}

static void test_views_share(void) {
  int64_t s[2] = {2, 3};
  dl_tensor *a = dl_arange(0, 6, 1, DL_FLOAT32);
  dl_tensor *m = dl_view(a, s, 2);
  dl_tensor *row = dl_select(m, 0, 1);
  CHECK(row && at(row, 0) == 3 && at(row, 2) == 5);
  dl_set_double(row, 1, 42);
  CHECK(at(a, 4) == 42);  /* writes through the view reach the base */
  dl_tensor *t = dl_transpose(m, 0, 1);
  CHECK(!dl_tensor_is_contiguous(t));
  int64_t flat = 6;
  CHECK(dl_view(t, &flat, 1) == NULL && dl_last_error_code() == DL_ESHAPE);
  CHECK(strstr(dl_last_error(), "reshape") != NULL);
  dl_tensor *r = dl_reshape(t, &flat, 1);  /* must copy */
  CHECK(r && !dl_tensor_same_storage(r, a) && at(r, 1) == 3 && at(r, 3) == 42);
  dl_tensor *c = dl_contiguous(m);  /* already contiguous: same tensor */
  CHECK(c == m && dl_tensor_refcount(m) == 2);
  dl_tensor *n = dl_narrow(m, 1, 1, 2);
  CHECK(n && dl_tensor_offset(n) == 1 && at(n, 0) == 1 && at(n, 3) == 5);
  int64_t e[3] = {4, 2, 3};
  dl_tensor *x = dl_expand(m, e, 3);
  CHECK(x && dl_tensor_stride(x, 0) == 0 && at(x, 9) == 3);
  dl_tensor *u = dl_unsqueeze(m, -1);
  CHECK(u && dl_tensor_dim(u) == 3 && dl_tensor_size(u, 2) == 1);
  dl_tensor *sq = dl_squeeze_all(u);
  CHECK(sq && dl_tensor_dim(sq) == 2);
  dl_tensor *list[] = {a, m, row, t, r, c, n, x, u, sq};
  for (size_t i = 0; i < sizeof list / sizeof *list; i++) dl_tensor_release(list[i]);
}

/* Whether two elements of a view share one place, by listing them all. */
static int overlaps_brute(const int64_t *shape, const int64_t *stride, int nd,
                          int64_t offset, int64_t cap) {
  static char seen[4096];
  memset(seen, 0, (size_t)cap);
  int64_t idx[8] = {0}, numel = 1;
  for (int i = 0; i < nd; i++) numel *= shape[i];
  for (int64_t k = 0; k < numel; k++) {
    int64_t off = offset;
    for (int i = 0; i < nd; i++) off += idx[i] * stride[i];
    if (seen[off]++) return 1;
    for (int i = nd - 1; i >= 0 && ++idx[i] == shape[i]; i--) idx[i] = 0;
  }
  return 0;
}

/* In-place writes refuse a view in which two elements share a place (a
** race across threads), and only such a view: expand, interleaved
** as_strided (unfold-like) views are refused, transposes, narrows, steps,
** empty and one-element views and as_strided views whose strides interleave
** without colliding are written.  Random views are checked against a list
** of every element's place. */
static void test_overlap_refused(void) {
  int64_t one = 1, four = 4;
  dl_tensor *z = dl_zeros(&one, 1, DL_FLOAT32);
  dl_tensor *x = dl_expand(z, &four, 1);
  CHECK(x && dl_fill_(x, 1) < 0 && dl_last_error_code() == DL_EINVAL);
  CHECK(strstr(dl_last_error(), "fill_: unsupported operation: more than one element of the "
                                "written-to tensor refers to a single memory location "
                                "(an expanded view: dim 0 of size 4 has stride 0); clone() it first"));
  CHECK(dl_binary_(DL_ADD, x, z) < 0 && strstr(dl_last_error(), "add_: unsupported"));
  CHECK(dl_unary_(DL_EXP, x) < 0 && strstr(dl_last_error(), "exp_: unsupported"));
  CHECK(dl_clamp_(x, 0, 1) < 0 && strstr(dl_last_error(), "clamp_: unsupported"));
  CHECK(dl_copy_(x, z) < 0 && strstr(dl_last_error(), "copy_: unsupported"));
  CHECK(dl_uniform_(x, 0, 1) < 0 && strstr(dl_last_error(), "uniform_: unsupported"));
  CHECK(dl_normal_(x, 0, 1) < 0 && strstr(dl_last_error(), "normal_: unsupported"));
  CHECK(at(z, 0) == 0);  /* refused before anything was written */
  CHECK(dl_set_double(x, 2, 5) == 0 && at(z, 0) == 5);  /* one element is one place */

  int64_t n = 12;
  dl_tensor *a = dl_zeros(&n, 1, DL_FLOAT32);
  struct { int64_t shape[2], stride[2]; int nd, refused; } cases[] = {
    {{3, 4}, {4, 1}, 2, 0},  /* contiguous */
    {{4, 3}, {1, 4}, 2, 0},  /* transposed */
    {{2, 2}, {6, 2}, 2, 0},  /* steps */
    {{3, 2}, {2, 3}, 2, 0},  /* interleaved, apart: 0 2 4 3 5 7 */
    {{3, 3}, {2, 1}, 2, 1},  /* interleaved, 2 twice */
    {{4, 3}, {1, 1}, 2, 1},  /* unfold(0, 3, 1) */
    {{1, 5}, {0, 2}, 2, 0},  /* stride 0 on a size-1 dim */
    {{0, 5}, {0, 0}, 2, 0},  /* no elements */
    {{4, 0}, {0, 6}, 2, 0},  /* no elements, after an expanded dim */
    {{5, 1}, {0, 0}, 1, 1},  /* expanded */
    {{1, 1}, {0, 0}, 2, 0},  /* one element */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    dl_tensor *v = dl_as_strided(a, cases[i].shape, cases[i].stride, cases[i].nd, 0);
    CHECK(v && (dl_fill_(v, 1) < 0) == cases[i].refused, "case %zu", i);
    dl_tensor_release(v);
  }
  int64_t sh[2] = {3, 3}, st[2] = {2, 1};
  dl_tensor *v = dl_as_strided(a, sh, st, 2, 0);
  CHECK(dl_fill_(v, 1) < 0 && strstr(dl_last_error(), "fill_: unsupported operation: more than "
                                     "one element of the written-to tensor refers to a single "
                                     "memory location (shape [3, 3], strides [2, 1])"));
  dl_tensor_release(v);

  /* random views of up to 4 dims, strides -6..6, against the list */
  dl_tensor *base = dl_zeros((int64_t[]){4096}, 1, DL_FLOAT32);
  uint64_t seed = 12345;
  int disagree = 0, refused = 0;
  for (int k = 0; k < 3000; k++) {
    int64_t shape[4], stride[4], offset = 0, hi = 0;
    int nd = 1 + (int)((seed = seed * 6364136223846793005ULL + 1442695040888963407ULL) >> 62);
    for (int i = 0; i < nd; i++) {
      seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
      shape[i] = (int64_t)((seed >> 33) % 5);  /* 0..4 */
      stride[i] = (int64_t)((seed >> 40) % 13) - 6;
      if (stride[i] < 0) offset -= stride[i] * (shape[i] ? shape[i] - 1 : 0);
      else hi += stride[i] * (shape[i] ? shape[i] - 1 : 0);
    }
    int want = overlaps_brute(shape, stride, nd, offset, offset + hi + 1);
    dl_tensor *w = dl_as_strided(base, shape, stride, nd, offset);
    int got = w && dl_fill_(w, 0) < 0;
    disagree += got != want;
    refused += got;
    dl_tensor_release(w);
  }
  CHECK(disagree == 0, "%d of 3000 random views judged wrongly", disagree);
  CHECK(refused > 300 && refused < 2700, "%d refused", refused);  /* both kinds were met */
  dl_tensor *list[] = {z, x, a, base};
  for (size_t i = 0; i < 4; i++) dl_tensor_release(list[i]);
}

static void test_alignment_and_memory(void) {
  int64_t base = dl_mem_allocated();
  int64_t s = 1000;
  dl_tensor *a = dl_empty(&s, 1, DL_FLOAT64);
  CHECK(((uintptr_t)dl_tensor_data(a) & 63) == 0);
  CHECK(dl_mem_allocated() - base == 8000);
  dl_tensor *b = dl_empty(&s, 1, DL_UINT8);
  CHECK(((uintptr_t)dl_tensor_data(b) & 63) == 0);
  dl_tensor_release(a);
  dl_tensor_release(b);
  CHECK(dl_mem_allocated() == base);
  CHECK(dl_mem_peak() >= base + 9000);
}

/* The window peak (ddp.memory_summary's, per optimizer step) starts again
** from the live bytes at each reset and leaves the user's peak alone. */
static void test_window_peak(void) {
  int64_t n = 1 << 20;
  dl_tensor *a = dl_empty(&n, 1, DL_FLOAT32);  /* 4 MiB, held across the reset */
  dl_mem_window_peak(1);
  int64_t live = dl_mem_allocated(), user = dl_mem_peak();
  CHECK(dl_mem_window_peak(0) == live, "a fresh window's peak is the live bytes");
  int64_t m = 3 << 20;
  dl_tensor *b = dl_empty(&m, 1, DL_FLOAT32);  /* 12 MiB, freed before the look */
  dl_tensor_release(b);
  CHECK(dl_mem_window_peak(0) == live + 12 * 1048576, "window peak %lld, live %lld",
        (long long)dl_mem_window_peak(0), (long long)live);
  CHECK(dl_mem_window_peak(1) == live + 12 * 1048576 && dl_mem_window_peak(0) == live,
        "a reset starts from the live bytes");
  dl_tensor_release(a);
  CHECK(dl_mem_window_peak(0) == live, "the window keeps its peak after frees");
  CHECK(dl_mem_window_peak(1) == live && dl_mem_window_peak(0) == live - 4 * 1048576, "reset after a free");
  CHECK(dl_mem_peak() >= user, "the user's peak is untouched by resets");
}

/* Lua is asked to collect when the live bytes grew by the slack (32 MiB
** on a small heap) since the last collection -- not after any 32 MiB of
** allocations: temporaries freed at once are no garbage Lua could hold,
** and counting them ran full collections within every training step. */
static void test_gc_hint(void) {
  dl_gc_done();
  CHECK(dl_gc_hint() == 0);
  int64_t s = 4 << 20;  /* 16 MiB of float32 */
  for (int i = 0; i < 64; i++) dl_tensor_release(dl_empty(&s, 1, DL_FLOAT32));
  CHECK(dl_gc_hint() == 0, "1 GiB of temporaries asked for a collection");
  dl_tensor *held[3];
  for (int i = 0; i < 3; i++) held[i] = dl_empty(&s, 1, DL_FLOAT32);
  CHECK(dl_gc_hint() == 1, "48 MiB more live bytes did not ask for one");
  dl_gc_done();
  CHECK(dl_gc_hint() == 0);
  for (int i = 0; i < 3; i++) dl_tensor_release(held[i]);
  CHECK(dl_gc_hint() == 0);
}

static int deleted;
static void on_delete(void *ctx, void *data) {
  (void)data;
  deleted = *(int *)ctx;
}

static void test_from_blob(void) {
  float buf[6] = {1, 2, 3, 4, 5, 6};
  int tag = 7;
  int64_t s[2] = {2, 3};
  dl_tensor *t = dl_from_blob(buf, DL_FLOAT32, s, NULL, 2, on_delete, &tag);
  CHECK(t && dl_tensor_data(t) == buf && at(t, 4) == 5);
  dl_tensor *v = dl_transpose(t, 0, 1);
  dl_tensor_release(t);
  CHECK(deleted == 0);
  dl_tensor_release(v);
  CHECK(deleted == 7);
  dl_tensor *a = dl_from_blob_anchored(buf, DL_FLOAT32, s, NULL, 2, 99);
  dl_tensor_release(a);
  int64_t ids[4];
  CHECK(dl_anchors_pending() == 1 && dl_released_anchors(ids, 4) == 1 && ids[0] == 99);
  CHECK(dl_anchors_pending() == 0);
}

static void test_errors(void) {
  int64_t bad[1] = {-2};
  CHECK(dl_zeros(bad, 1, DL_FLOAT32) == NULL && dl_last_error_code() == DL_ESHAPE);
  CHECK(strstr(dl_last_error(), "-2") != NULL);
  int64_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  CHECK(dl_zeros(nine, 9, DL_FLOAT32) == NULL);
  CHECK(dl_zeros(nine, 1, 42) == NULL && dl_last_error_code() == DL_EDTYPE);
  dl_tensor *a = dl_arange(0, 4, 1, DL_INT32);
  CHECK(dl_transpose(a, 0, 3) == NULL && strstr(dl_last_error(), "dim 3 out of range"));
  CHECK(dl_binary(DL_FMOD, a, a) == NULL && strstr(dl_last_error(), "division by zero"));
  double v;
  CHECK(dl_get_double(a, 4, &v) < 0 && dl_last_error_code() == DL_EINDEX);
  CHECK(dl_view(NULL, nine, 1) == NULL && dl_last_error_code() == DL_EINVAL);
  dl_tensor_release(a);
}

static void test_broadcast_iter(void) {
  /* [3,1] + [4] and a transposed operand, checked element by element */
  int64_t s31[2] = {3, 1}, s4 = 4;
  dl_tensor *a = dl_arange(0, 3, 1, DL_FLOAT64), *av = dl_view(a, s31, 2);
  dl_tensor *b = dl_arange(0, 40, 10, DL_FLOAT64);
  dl_tensor *c = dl_binary(DL_ADD, av, b);
  CHECK(c && dl_tensor_size(c, 0) == 3 && dl_tensor_size(c, 1) == 4);
  int ok = 1;
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 4; j++) ok &= at(c, i * 4 + j) == i + 10 * j;
  CHECK(ok);
  dl_tensor *ct = dl_transpose(c, 0, 1), *d = dl_binary(DL_SUB, ct, ct);
  CHECK(d && at(d, 5) == 0);
  (void)s4;
  dl_tensor *list[] = {a, av, b, c, ct, d};
  for (size_t i = 0; i < 6; i++) dl_tensor_release(list[i]);
}

static void test_threads_and_rng(void) {
  /* a large op gives the same bits on 1 and 2 threads */
  int64_t n = 1 << 20;
  dl_set_num_threads(1);
  dl_manual_seed(123);
  dl_tensor *a = dl_randn(&n, 1, DL_FLOAT32);
  dl_tensor *ea = dl_unary(DL_EXP, a);
  dl_set_num_threads(2);
  CHECK(dl_get_num_threads() == 2);
  dl_manual_seed(123);
  dl_tensor *b = dl_randn(&n, 1, DL_FLOAT32);
  dl_tensor *eb = dl_unary(DL_EXP, b);
  CHECK(memcmp(dl_tensor_data(a), dl_tensor_data(b), (size_t)n * 4) == 0);
  CHECK(memcmp(dl_tensor_data(ea), dl_tensor_data(eb), (size_t)n * 4) == 0);
  /* moments of randn and rand are about right */
  const float *p = dl_tensor_data(b);
  double m = 0, m2 = 0;
  for (int64_t i = 0; i < n; i++) m += p[i], m2 += (double)p[i] * p[i];
  m /= (double)n;
  m2 /= (double)n;
  CHECK(fabs(m) < 0.01 && fabs(m2 - 1) < 0.01);
  CHECK(dl_rng_offset() == (uint64_t)n / 4);
  dl_tensor *u = dl_rand(&n, 1, DL_FLOAT64);
  const double *q = dl_tensor_data(u);
  double lo = 1, hi = 0;
  for (int64_t i = 0; i < n; i++) lo = q[i] < lo ? q[i] : lo, hi = q[i] > hi ? q[i] : hi;
  CHECK(lo >= 0 && lo < 1e-4 && hi < 1 && hi > 1 - 1e-4);
  int64_t k = 1000;
  dl_tensor *ri = dl_randint(-3, 3, &k, 1, DL_INT64);
  const int64_t *r = dl_tensor_data(ri);
  int okr = 1;
  for (int i = 0; i < k; i++) okr &= r[i] >= -3 && r[i] < 3;
  CHECK(okr);
  dl_tensor *pm = dl_randperm(100, DL_INT64);
  const int64_t *pp = dl_tensor_data(pm);
  int seen[100] = {0}, okp = 1;
  for (int i = 0; i < 100; i++) okp &= pp[i] >= 0 && pp[i] < 100 && !seen[pp[i]]++;
  CHECK(okp);
  dl_tensor *list[] = {a, ea, b, eb, u, ri, pm};
  for (size_t i = 0; i < 7; i++) dl_tensor_release(list[i]);
}

static void test_half(void) {
  double vals[5] = {1.0, -2.5, 65504.0, 1e-7, 3.14159};
  int64_t s = 5;
  dl_tensor *h = dl_from_doubles(vals, &s, 1, DL_FLOAT16);
  dl_tensor *b = dl_from_doubles(vals, &s, 1, DL_BFLOAT16);
  CHECK(at(h, 0) == 1.0 && at(h, 1) == -2.5 && at(h, 2) == 65504.0);
  CHECK(fabs(at(h, 3) - 1.1920928955078125e-07) < 1e-12);  /* nearest subnormal */
  CHECK(at(h, 4) == 3.140625 && at(b, 4) == 3.140625);
  dl_tensor *sum = dl_binary(DL_ADD, h, h);
  CHECK(sum && dl_tensor_dtype(sum) == DL_FLOAT16 && at(sum, 1) == -5.0);
  dl_tensor *list[] = {h, b, sum};
  for (size_t i = 0; i < 3; i++) dl_tensor_release(list[i]);
}

/* dl_tensor_rebase: a tensor's data moves into a flat buffer, values and
** identity kept, writes through either seen by the other; the refusals. */
static void test_rebase(void) {
  int64_t s[2] = {2, 3}, n8 = 8;
  dl_tensor *a = dl_arange(0, 6, 1, DL_FLOAT32);
  dl_tensor *p = dl_view(a, s, 2);
  dl_tensor *flat = dl_zeros(&n8, 1, DL_FLOAT32);
  dl_tensor_release(a);  /* p alone holds its memory now */
  dl_tensor *place = dl_narrow(flat, 0, 1, 6);
  CHECK(dl_tensor_rebase(p, place) == 0);
  CHECK(dl_tensor_same_storage(p, flat) && dl_tensor_offset(p) == 1);
  CHECK(dl_tensor_size(p, 0) == 2 && dl_tensor_size(p, 1) == 3 && dl_tensor_is_contiguous(p));
  CHECK(at(flat, 0) == 0 && at(flat, 1) == 0 && at(flat, 6) == 5 && at(flat, 7) == 0);
  dl_fill_(place, 7);
  CHECK(at(p, 4) == 7);
  CHECK(dl_tensor_rebase(p, place) == 0);  /* already there */
  /* refused: a view on its memory, another dtype, size or layout */
  dl_tensor *q = dl_arange(0, 6, 1, DL_FLOAT32);
  dl_tensor *qv = dl_narrow(q, 0, 0, 3);
  CHECK(dl_tensor_rebase(q, place) != 0 && strstr(dl_last_error(), "another tensor (a view) shares its memory"));
  dl_tensor_release(qv);
  dl_tensor *d = dl_arange(0, 6, 1, DL_FLOAT64);
  CHECK(dl_tensor_rebase(d, place) != 0 && dl_last_error_code() == DL_EDTYPE);
  dl_tensor *small = dl_narrow(flat, 0, 0, 5);
  CHECK(dl_tensor_rebase(q, small) != 0 && strstr(dl_last_error(), "another number of elements"));
  dl_tensor *strided = dl_transpose(p, 0, 1);
  dl_tensor *c = dl_zeros(&n8, 1, DL_FLOAT32);
  dl_tensor *c6 = dl_narrow(c, 0, 0, 6);
  CHECK(dl_tensor_rebase(strided, c6) != 0 && strstr(dl_last_error(), "contiguous"));
  CHECK(dl_tensor_rebase(q, c6) == 0 && at(c, 5) == 5);
  dl_tensor_release(c6), dl_tensor_release(c), dl_tensor_release(strided);
  dl_tensor_release(small), dl_tensor_release(d), dl_tensor_release(q);
  dl_tensor_release(place), dl_tensor_release(p);
  CHECK(dl_tensor_storage_refcount(flat) == 1);
  dl_tensor_release(flat);
}

int main(void) {
  test_refcounts();
  test_rebase();
  test_views_share();
  test_overlap_refused();
  test_alignment_and_memory();
  test_window_peak();
  test_gc_hint();
  test_from_blob();
  test_errors();
  test_broadcast_iter();
  test_threads_and_rng();
  test_half();
  return check_report("test_tensor");
}
