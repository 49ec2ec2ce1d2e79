/* test_safetensors.c -- C unit tests of the safetensors API: file order,
** zero-copy tensors that outlive the handle, error codes, no temp files. */
#include <dirent.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ddplua.h"
#include "check.h"

static char dir[] = "/tmp/ddplua_st_c.XXXXXX";

static int files_in_dir(void) {
  int n = 0;
  DIR *d = opendir(dir);
  struct dirent *e;
  while (d && (e = readdir(d)))
    if (e->d_name[0] != '.') n++;
  if (d) closedir(d);
  return n;
}

static double at(const dl_tensor *t, int64_t i) {
  double v = -1;
  dl_get_double(t, i, &v);
  return v;
}

static void test_round_trip(const char *path) {
  int64_t s23[2] = {2, 3};
  dl_tensor *a = dl_arange(0, 6, 1, DL_FLOAT32);
  dl_tensor *m = dl_view(a, s23, 2);
  dl_tensor *mt = dl_transpose(m, 0, 1);      /* written row-major */
  dl_tensor *b = dl_full(NULL, 0, DL_INT64, -7);
  dl_tensor *c = dl_full(s23, 2, DL_UINT8, 3);
  const char *names[3] = {"mt", "b", "c"};
  dl_tensor *ts[3] = {mt, b, c};
  const char *keys[1] = {"k"}, *vals[1] = {"v"};
  CHECK(dl_st_save(path, names, ts, 3, keys, vals, 1) == 0);
  CHECK(files_in_dir() == 1, "%d files", files_in_dir());

  dl_st_file *f = dl_st_open(path);
  CHECK(f && dl_st_count(f) == 3 && dl_st_meta_count(f) == 1);
  if (!f) return;
  /* file order: 8-byte dtypes first, then 4, then 1 */
  CHECK(!strcmp(dl_st_name(f, 0), "b") && !strcmp(dl_st_name(f, 1), "mt") &&
        !strcmp(dl_st_name(f, 2), "c"));
  CHECK(!strcmp(dl_st_meta_key(f, 0), "k") && !strcmp(dl_st_meta_value(f, 0), "v"));
  CHECK(dl_st_name(f, 3) == NULL && dl_st_meta_key(f, -1) == NULL);
  dl_tensor *lb = dl_st_tensor(f, 0), *lm = dl_st_tensor(f, 1), *again = dl_st_tensor(f, 1);
  CHECK(dl_st_tensor(f, 3) == NULL && dl_last_error_code() == DL_EINDEX);
  dl_st_close(f);  /* the tensors keep the mapping */
  CHECK(lb && dl_tensor_dim(lb) == 0 && at(lb, 0) == -7);
  CHECK(lm && dl_tensor_size(lm, 0) == 3 && dl_tensor_size(lm, 1) == 2);
  CHECK(at(lm, 0) == 0 && at(lm, 1) == 3 && at(lm, 2) == 1 && at(lm, 5) == 5);
  /* zero copy: two loads of one tensor see the same bytes */
  CHECK(again && dl_tensor_data(again) == dl_tensor_data(lm));
  CHECK((char *)dl_tensor_data(lm) - (char *)dl_tensor_data(lb) == 8);
  dl_set_double(lm, 0, 42);
  CHECK(at(again, 0) == 42);
  dl_tensor_release(again);
  dl_tensor_release(lm);
  dl_tensor_release(lb);
  dl_tensor_release(mt);
  dl_tensor_release(m);
  dl_tensor_release(a);
  dl_tensor_release(b);
  dl_tensor_release(c);
}

static void test_errors(const char *path) {
  dl_tensor *t = dl_full(NULL, 0, DL_FLOAT32, 1);
  const char *dup[2] = {"x", "x"};
  dl_tensor *ts[2] = {t, t};
  CHECK(dl_st_save(path, dup, ts, 2, NULL, NULL, 0) == DL_EINVAL);
  CHECK(strstr(dl_last_error(), "tensor name \"x\" appears twice"), "%s", dl_last_error());
  CHECK(files_in_dir() == 1);  /* nothing written, the old file kept */

  char bad[512];
  snprintf(bad, sizeof bad, "%s/missing/x.safetensors", dir);
  CHECK(dl_st_save(bad, dup, ts, 1, NULL, NULL, 0) == DL_EIO);
  CHECK(strstr(dl_last_error(), "No such file or directory"), "%s", dl_last_error());
  CHECK(dl_st_open(bad) == NULL && dl_last_error_code() == DL_EIO);
  CHECK(strstr(dl_last_error(), bad), "%s", dl_last_error());
  CHECK(dl_st_open(dir) == NULL && strstr(dl_last_error(), "not a regular file"));
  CHECK(dl_st_open(NULL) == NULL && dl_last_error_code() == DL_EINVAL);
  CHECK(dl_st_count(NULL) == 0);
  dl_st_close(NULL);  /* harmless */

  FILE *fp = fopen(path, "wb");
  static const char hostile[] = "\x10\0\0\0\0\0\0\0{\"a\":5}         ";
  fwrite(hostile, 1, sizeof hostile - 1, fp);
  fclose(fp);
  CHECK(dl_st_open(path) == NULL && dl_last_error_code() == DL_EINVAL);
  CHECK(strstr(dl_last_error(), "tensor \"a\" must be an object"), "%s", dl_last_error());
  dl_tensor_release(t);
}

int main(void) {
  if (!mkdtemp(dir)) {
    printf("FAIL cannot make a temporary directory\n");
    return 1;
  }
  char path[256];
  snprintf(path, sizeof path, "%s/t.safetensors", dir);
  test_round_trip(path);
  test_errors(path);
  unlink(path);
  rmdir(dir);
  return check_report("test_safetensors");
}
