/*
** test_tokens.c -- dl_tokens_* on hand-made token files (in a fresh
** directory under /tmp): headerless uint16 and uint32, llm.c headers
** detected and required, windows gathered with a first token and a
** stride, and every malformed file or window giving its message.
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

/* Writes n tokens i * mul as itemsize-byte little-endian values, after an
** llm.c header (magic, version 1, claimed count) when magic != 0; extra
** bytes are appended as they are. */
static const char *write_file(const char *name, int itemsize, int64_t n, uint32_t mul, int32_t magic,
                              int32_t claimed, const char *extra) {
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (!f) exit(2);
  if (magic) {
    int32_t h[256] = {magic, 1, claimed};
    fwrite(h, 4, 256, f);
  }
  for (int64_t i = 0; i < n; i++) {
    uint32_t v = (uint32_t)i * mul;
    unsigned char b[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                          (unsigned char)(v >> 24)};
    fwrite(b, 1, (size_t)itemsize, f);
  }
  if (extra) fputs(extra, f);
  fclose(f);
  return path;
}

static int has(const char *needle) { return strstr(dl_last_error(), needle) != NULL; }

static dl_tensor *index_of(const int64_t *v, int64_t n) {
  dl_tensor *t = dl_empty(&n, 1, DL_INT64);
  memcpy(dl_tensor_data(t), v, (size_t)n * sizeof *v);
  return t;
}

static void test_windows(void) {
  dl_tokens *f = dl_tokens_open(write_file("a.bin", 2, 100, 1, 0, 0, NULL), 0, -1);
  CHECK(f && dl_tokens_count(f) == 100 && dl_tokens_itemsize(f) == 2 && dl_tokens_header_bytes(f) == 0);
  int64_t iv[3] = {0, 5, 11};
  dl_tensor *idx = index_of(iv, 3);
  dl_tensor *w = dl_tokens_windows(f, idx, 1, 8, 9);  /* tokens 1 + 8i ... + 8 */
  CHECK(w && dl_tensor_dim(w) == 2 && dl_tensor_size(w, 0) == 3 && dl_tensor_size(w, 1) == 9);
  const int64_t *p = dl_tensor_data(w);
  CHECK(p[0] == 1 && p[8] == 9 && p[9] == 41 && p[26] == 97, "%lld %lld %lld %lld", (long long)p[0],
        (long long)p[8], (long long)p[9], (long long)p[26]);
  dl_tensor_release(w);
  /* window 11 at first 4: tokens 92..100, one past the end */
  CHECK(!dl_tokens_windows(f, idx, 4, 8, 9) && dl_last_error_code() == DL_EINDEX && has("window 11"));
  int64_t neg = -1;
  dl_tensor *bad = index_of(&neg, 1);
  CHECK(!dl_tokens_windows(f, bad, 0, 1, 1) && has("window -1"));
  dl_tensor_release(bad);
  dl_tensor_release(idx);
  dl_tokens_close(f);

  f = dl_tokens_open(write_file("b.bin", 4, 10, 1000000000, 20240801, 10, NULL), 0, -1);
  CHECK(f && dl_tokens_itemsize(f) == 4 && dl_tokens_header_bytes(f) == 1024 && dl_tokens_count(f) == 10);
  int64_t z = 0;
  idx = index_of(&z, 1);
  w = dl_tokens_windows(f, idx, 2, 0, 3);  /* uint32 above 2^31 stays unsigned */
  CHECK(w && ((const int64_t *)dl_tensor_data(w))[0] == 2000000000LL &&
        ((const int64_t *)dl_tensor_data(w))[1] == 3000000000LL);
  dl_tensor_release(w);
  dl_tensor_release(idx);
  dl_tokens_close(f);

  f = dl_tokens_open(write_file("e.bin", 2, 0, 1, 0, 0, NULL), 2, 0);
  CHECK(f && dl_tokens_count(f) == 0);
  dl_tokens_close(f);
}

static void test_errors(void) {
  CHECK(!dl_tokens_open("/nonexistent/x.bin", 2, 0) && dl_last_error_code() == DL_EIO && has("No such file"));
  CHECK(!dl_tokens_open(dir, 2, 0) && has("Is a directory"));
  CHECK(!dl_tokens_open(write_file("o.bin", 2, 3, 1, 0, 0, "x"), 2, 0) && dl_last_error_code() == DL_EINVAL &&
        has("7 bytes of tokens") && has("2-byte tokens"));
  CHECK(!dl_tokens_open(write_file("o4.bin", 2, 3, 1, 0, 0, NULL), 4, 0) && has("6 bytes of tokens"));
  CHECK(!dl_tokens_open(path, 3, 0) && has("must be 2 (uint16) or 4 (uint32)"));
  CHECK(!dl_tokens_open(path, 0, 1) && has("no llm.c header"));
  CHECK(!dl_tokens_open(write_file("h.bin", 2, 10, 1, 20240520, 11, NULL), 0, -1) &&
        has("says 11 tokens of 2 bytes") && has("holds 20 bytes"));
  CHECK(!dl_tokens_open(write_file("h2.bin", 2, 10, 1, 20240520, 10, NULL), 4, -1) &&
        has("says uint16 tokens, but uint32 was asked for"));
  /* header = 0 reads a file with a header as tokens: 1044 bytes, 522 of them */
  dl_tokens *f = dl_tokens_open(path, 2, 0);
  CHECK(f && dl_tokens_count(f) == 522);
  dl_tokens_close(f);
  dl_tokens_close(NULL);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/ddplua-tokens-XXXXXX");
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 2;
  }
  test_windows();
  test_errors();
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) printf("note: could not remove %s\n", dir);
  return check_report("test_tokens");
}
