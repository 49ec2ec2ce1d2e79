/*
** test_npy.c -- dl_npy_* and dl_npz_* from C (in a fresh directory under
** /tmp): round trips of row- and column-major tensors and of views with an
** offset, tensors that outlive their archive's handle, and the handles'
** NULL, duplicate and out-of-range cases.
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ddplua.h"
#include "check.h"

static char dir[64];
static char path[256];

static const char *at(const char *name) {
  snprintf(path, sizeof path, "%s/%s", dir, name);
  return path;
}

static int has(const char *needle) { return strstr(dl_last_error(), needle) != NULL; }

static int same(const dl_tensor *a, const dl_tensor *b) {
  if (!a || !b || dl_tensor_dtype(a) != dl_tensor_dtype(b) || dl_tensor_dim(a) != dl_tensor_dim(b)) return 0;
  for (int d = 0; d < dl_tensor_dim(a); d++)
    if (dl_tensor_size(a, d) != dl_tensor_size(b, d)) return 0;
  for (int64_t i = 0; i < dl_tensor_numel(a); i++) {
    double x, y;
    if (dl_get_double(a, i, &x) || dl_get_double(b, i, &y) || x != y) return 0;
  }
  return 1;
}

static void test_npy(void) {
  int64_t shape[2] = {3, 4};
  dl_tensor *a = dl_arange(0, 12, 1, DL_FLOAT32), *m = dl_view(a, shape, 2);
  dl_tensor *t = dl_transpose(m, 0, 1);          /* [4, 3], column-major */
  dl_tensor *n = dl_narrow(m, 1, 1, 2);          /* an offset, neither order */
  CHECK(dl_npy_save(at("t.npy"), t) == 0);
  CHECK(dl_npy_save(at("n.npy"), n) == 0);
  for (int map = 0; map < 2; map++) {
    dl_tensor *bt = dl_npy_load(at("t.npy"), map), *bn = dl_npy_load(at("n.npy"), map);
    CHECK(same(t, bt) && dl_tensor_stride(bt, 0) == 1 && dl_tensor_stride(bt, 1) == 4, "map %d", map);
    CHECK(same(n, bn) && dl_tensor_is_contiguous(bn), "map %d", map);
    dl_tensor_release(bt);
    dl_tensor_release(bn);
  }
  CHECK(dl_npy_save(NULL, t) == DL_EINVAL && has("save_npy: argument path is nil"));
  CHECK(dl_npy_save(at("x.npy"), NULL) != 0);
  CHECK(!dl_npy_load(NULL, 0) && has("load_npy: argument path is nil"));
  CHECK(!dl_npy_load(at("missing.npy"), 1) && dl_last_error_code() == DL_EIO && has("cannot open"));
  dl_tensor_release(n);
  dl_tensor_release(t);
  dl_tensor_release(m);
  dl_tensor_release(a);
}

static void test_npz(void) {
  int64_t s[1] = {5};
  dl_tensor *x = dl_arange(0, 5, 1, DL_INT64), *y = dl_full(s, 1, DL_FLOAT64, 0.25);
  const char *names[2] = {"x", "y"};
  dl_tensor *ts[2] = {x, y};
  CHECK(dl_npz_save(at("a.npz"), names, ts, 2) == 0);
  const char *dup[2] = {"x", "x"};
  CHECK(dl_npz_save(at("d.npz"), dup, ts, 2) == DL_EINVAL && has("the array name \"x\" appears twice"));
  CHECK(dl_npz_save(at("d.npz"), NULL, ts, 2) == DL_EINVAL);
  dl_npz *z = dl_npz_open(at("a.npz"), 1);
  CHECK(z && dl_npz_count(z) == 2 && !strcmp(dl_npz_name(z, 0), "x") && !strcmp(dl_npz_name(z, 1), "y"));
  CHECK(!dl_npz_name(z, 2) && !dl_npz_name(z, -1) && !dl_npz_name(NULL, 0) && dl_npz_count(NULL) == 0);
  CHECK(!dl_npz_tensor(z, 2) && dl_last_error_code() == DL_EINDEX && has("array index 2 out of range (the file holds 2 arrays)"));
  CHECK(!dl_npz_tensor(NULL, 0) && has("argument file is nil"));
  dl_tensor *bx = dl_npz_tensor(z, 0), *by = dl_npz_tensor(z, 1);
  dl_npz_close(z);  /* the views keep the mapping */
  CHECK(same(x, bx) && same(y, by));
  dl_tensor_release(bx);
  dl_tensor_release(by);
  dl_npz_close(NULL);
  CHECK(!dl_npz_open(at("missing.npz"), 0) && has("load_npz: ") && has("cannot open"));
  dl_tensor_release(x);
  dl_tensor_release(y);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/ddplua-npy-XXXXXX");
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 2;
  }
  test_npy();
  test_npz();
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) printf("note: could not remove %s\n", dir);
  return check_report("test_npy");
}
