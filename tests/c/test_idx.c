/*
** test_idx.c -- dl_read_idx on hand-made IDX files, plain and gzip'd (written
** with zlib into a fresh directory under /tmp): every element type, and
** every corruption a file can have, each of which must give its message.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "ddplua.h"
#include "check.h"

static char dir[64];
static char path[256];

/* -- Writing files ----------------------------------------------------------- */

typedef struct {
  unsigned char *p;
  size_t n, cap;
} buf;

static void put(buf *b, const void *data, size_t n) {
  if (b->n + n > b->cap) {
    b->cap = (b->n + n) * 2;
    b->p = realloc(b->p, b->cap);
    if (!b->p) exit(2);
  }
  memcpy(b->p + b->n, data, n);
  b->n += n;
}

static void put_be(buf *b, uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; i--) {
    unsigned char c = (unsigned char)(v >> (8 * i));
    put(b, &c, 1);
  }
}

static void header(buf *b, int type, int ndim, const uint32_t *shape) {
  unsigned char m[4] = {0, 0, (unsigned char)type, (unsigned char)ndim};
  put(b, m, 4);
  for (int i = 0; i < ndim; i++) put_be(b, shape[i], 4);
}

/* Writes b to dir/name, gzip'd when gz; returns the path (static buffer). */
static const char *write_file(const char *name, const buf *b, int gz) {
  snprintf(path, sizeof path, "%s/%s", dir, name);
  if (gz) {
    gzFile f = gzopen(path, "wb1");
    if (!f || (b->n && gzwrite(f, b->p, (unsigned)b->n) != (int)b->n) || gzclose(f) != Z_OK) {
      printf("setup: cannot write %s\n", path);
      exit(2);
    }
  } else {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(b->p, 1, b->n, f) != b->n || fclose(f) != 0) {
      printf("setup: cannot write %s\n", path);
      exit(2);
    }
  }
  return path;
}

static long file_size(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 ? (long)st.st_size : -1;
}

/* -- Checks ----------------------------------------------------------------- */

/* Reads p and checks dtype, shape and values (as doubles). */
static void expect(int line, const char *p, int dtype, int ndim, const int64_t *shape,
                   const double *vals) {
  dl_clear_error();
  dl_tensor *t = dl_read_idx(p);
  if (!t) {
    CHECK(t != NULL, "line %d: %s", line, p);
    return;
  }
  int ok = dl_tensor_dtype(t) == dtype && dl_tensor_dim(t) == ndim;
  for (int i = 0; ok && i < ndim; i++) ok = dl_tensor_size(t, i) == shape[i];
  CHECK(ok, "line %d: %s: dtype %s, %d dims", line, p, dl_dtype_name(dl_tensor_dtype(t)),
        dl_tensor_dim(t));
  if (ok) {
    int64_t n = dl_tensor_numel(t);
    double *got = malloc(sizeof(double) * (size_t)(n ? n : 1));
    dl_to_doubles(t, got);
    int same = 1;
    for (int64_t i = 0; i < n; i++) same &= got[i] == vals[i] || (isnan(got[i]) && isnan(vals[i]));
    CHECK(same, "line %d: %s: values differ", line, p);
    free(got);
  }
  dl_tensor_release(t);
}

/* Reading p must fail with code and a message containing each of the
** strings (NULL-terminated). */
static void expect_error(int line, const char *p, int code, ...) {
  dl_clear_error();
  int64_t before = dl_mem_allocated();
  dl_tensor *t = dl_read_idx(p);
  CHECK(t == NULL, "line %d: %s read without an error", line, p);
  if (t) {
    dl_tensor_release(t);
    return;
  }
  CHECK(dl_last_error_code() == code, "line %d: code %d, expected %d", line,
        dl_last_error_code(), code);
  CHECK(dl_mem_allocated() == before, "line %d: tensor bytes leaked", line);
  va_list ap;
  va_start(ap, code);
  for (const char *s; (s = va_arg(ap, const char *));)
    CHECK(strstr(dl_last_error(), s) != NULL, "line %d: message lacks \"%s\"", line, s);
  va_end(ap);
}

/* -- Element types ---------------------------------------------------------- */

static void test_types(void) {
  for (int gz = 0; gz < 2; gz++) {
    buf b = {0};
    uint32_t s23[2] = {2, 3};
    const int64_t i23[2] = {2, 3};

    header(&b, 0x08, 2, s23);
    for (int i = 0; i < 6; i++) put_be(&b, (uint64_t)(i * 50), 1);
    expect(__LINE__, write_file(gz ? "u8.gz" : "u8", &b, gz), DL_UINT8, 2, i23,
           (const double[]){0, 50, 100, 150, 200, 250});

    b.n = 0;
    header(&b, 0x09, 2, s23);
    const int i8[6] = {0, 1, -1, 127, -128, -5};
    for (int i = 0; i < 6; i++) put_be(&b, (uint8_t)i8[i], 1);
    expect(__LINE__, write_file(gz ? "i8.gz" : "i8", &b, gz), DL_INT32, 2, i23,
           (const double[]){0, 1, -1, 127, -128, -5});

    b.n = 0;
    header(&b, 0x0B, 2, s23);
    const int i16[6] = {0, 300, -300, 32767, -32768, -1};
    for (int i = 0; i < 6; i++) put_be(&b, (uint16_t)i16[i], 2);
    expect(__LINE__, write_file(gz ? "i16.gz" : "i16", &b, gz), DL_INT32, 2, i23,
           (const double[]){0, 300, -300, 32767, -32768, -1});

    b.n = 0;
    header(&b, 0x0C, 2, s23);
    const int64_t i32[6] = {0, 70000, -70000, 2147483647, -2147483647 - 1, -1};
    for (int i = 0; i < 6; i++) put_be(&b, (uint32_t)i32[i], 4);
    expect(__LINE__, write_file(gz ? "i32.gz" : "i32", &b, gz), DL_INT32, 2, i23,
           (const double[]){0, 70000, -70000, 2147483647, -2147483648.0, -1});

    b.n = 0;
    uint32_t s4[1] = {4};
    const int64_t i4[1] = {4};
    header(&b, 0x0D, 1, s4);
    const float f32[4] = {1.5f, -2.25f, 1e-30f, INFINITY};
    for (int i = 0; i < 4; i++) {
      uint32_t u;
      memcpy(&u, &f32[i], 4);
      put_be(&b, u, 4);
    }
    expect(__LINE__, write_file(gz ? "f32.gz" : "f32", &b, gz), DL_FLOAT32, 1, i4,
           (const double[]){1.5, -2.25, (double)1e-30f, INFINITY});

    b.n = 0;
    header(&b, 0x0E, 1, s4);
    const double f64[4] = {0.1, -1e300, NAN, 3};
    for (int i = 0; i < 4; i++) {
      uint64_t u;
      memcpy(&u, &f64[i], 8);
      put_be(&b, u, 8);
    }
    expect(__LINE__, write_file(gz ? "f64.gz" : "f64", &b, gz), DL_FLOAT64, 1, i4, f64);

    /* a size of 0: an empty tensor of that shape */
    b.n = 0;
    uint32_t s05[2] = {0, 5};
    header(&b, 0x08, 2, s05);
    expect(__LINE__, write_file(gz ? "empty.gz" : "empty", &b, gz), DL_UINT8, 2,
           (const int64_t[]){0, 5}, NULL);

    /* 8 dims, the most a tensor has */
    b.n = 0;
    uint32_t s8[8] = {1, 2, 1, 1, 1, 1, 1, 2};
    header(&b, 0x08, 8, s8);
    for (int i = 0; i < 4; i++) put_be(&b, (uint64_t)(i + 1), 1);
    expect(__LINE__, write_file(gz ? "dims8.gz" : "dims8", &b, gz), DL_UINT8, 8,
           (const int64_t[]){1, 2, 1, 1, 1, 1, 1, 2}, (const double[]){1, 2, 3, 4});
    free(b.p);
  }
}

/* More than one 16 MiB chunk of compressed input, with float32 elements,
** so the chunks must join exactly at element boundaries. */
static void test_large_gzip(void) {
  buf b = {0};
  enum { N = 5 << 20 };  /* 20 MiB of float32 */
  uint32_t s[2] = {5, 1 << 20};
  header(&b, 0x0D, 2, s);
  for (uint32_t i = 0; i < N; i++) {
    float f = (float)i;
    uint32_t u;
    memcpy(&u, &f, 4);
    put_be(&b, u, 4);
  }
  const char *p = write_file("large.gz", &b, 1);
  dl_tensor *t = dl_read_idx(p);
  CHECK(t != NULL);
  if (t) {
    const float *v = dl_tensor_data(t);
    int ok = dl_tensor_dim(t) == 2 && dl_tensor_size(t, 0) == 5 && dl_tensor_size(t, 1) == 1 << 20;
    for (uint32_t i = 0; ok && i < N; i++) ok = v[i] == (float)i;
    CHECK(ok, "values of a 20 MiB gzip'd float32 file");
    dl_tensor_release(t);
  }
  free(b.p);
}

/* -- Errors ------------------------------------------------------------------- */

static void test_errors(void) {
  buf b = {0};
  char missing[300];
  snprintf(missing, sizeof missing, "%s/no-such-file.gz", dir);
  expect_error(__LINE__, missing, DL_EIO, "cannot open", missing, "No such file", NULL);
  expect_error(__LINE__, dir, DL_EIO, "cannot open", "Is a directory", NULL);
  dl_clear_error();
  CHECK(dl_read_idx(NULL) == NULL && dl_last_error_code() == DL_EINVAL);

  for (int gz = 0; gz < 2; gz++) {
    const char *p;
    b.n = 0;
    p = write_file(gz ? "zero.gz" : "zero", &b, gz);
    expect_error(__LINE__, p, DL_EINVAL, "not an IDX file", "ends inside the header (0 of 4", NULL);

    b.n = 0;
    put(&b, "\0\0\x08", 3);
    p = write_file(gz ? "three.gz" : "three", &b, gz);
    expect_error(__LINE__, p, DL_EINVAL, "ends inside the header (3 of 4", NULL);

    b.n = 0;
    put(&b, "\x01\0\x08\x01\0\0\0\x01\x07", 9);
    p = write_file(gz ? "magic.gz" : "magic", &b, gz);
    expect_error(__LINE__, p, DL_EINVAL, "not an IDX file", "01 00 08 01", NULL);

    b.n = 0;
    put(&b, "\0\0\x0a\x01\0\0\0\x01\x07", 9);
    p = write_file(gz ? "type.gz" : "type", &b, gz);
    expect_error(__LINE__, p, DL_EINVAL, "unknown IDX element type 0x0a", NULL);

    b.n = 0;
    put(&b, "\0\0\x08\0\x07", 5);
    p = write_file(gz ? "ndim0.gz" : "ndim0", &b, gz);
    expect_error(__LINE__, p, DL_EINVAL, "gives 0 dims; 1 to 8", NULL);

    b.n = 0;
    uint32_t ones[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    header(&b, 0x08, 9, ones);
    put(&b, "\x07", 1);
    p = write_file(gz ? "ndim9.gz" : "ndim9", &b, gz);
    expect_error(__LINE__, p, DL_EINVAL, "gives 9 dims", NULL);

    /* 255 dims: the most the byte allows */
    b.n = 0;
    put(&b, "\0\0\x08\xff", 4);
    p = write_file(gz ? "ndim255.gz" : "ndim255", &b, gz);
    expect_error(__LINE__, p, DL_EINVAL, "gives 255 dims", NULL);

    /* the sizes cut short */
    b.n = 0;
    put(&b, "\0\0\x08\x03\0\0\0\x02\0\0", 10);
    p = write_file(gz ? "hdr.gz" : "hdr", &b, gz);
    expect_error(__LINE__, p, DL_EINVAL, "ends inside the header (10 of 16", NULL);

    /* sizes whose product overflows int64 */
    b.n = 0;
    uint32_t big[8] = {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu,
                       0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu};
    header(&b, 0x0E, 8, big);
    p = write_file(gz ? "overflow.gz" : "overflow", &b, gz);
    expect_error(__LINE__, p, DL_EINVAL, "too many elements", "4294967295", NULL);

    /* a claim of 2^47 bytes on a file of a few: refused without allocating
    ** (expect_error checks that no tensor bytes stay allocated; ASan or
    ** valgrind would see an allocation of that size fail) */
    b.n = 0;
    uint32_t claim[2] = {1u << 24, 1u << 23};
    header(&b, 0x08, 2, claim);
    put(&b, "abcdef", 6);
    p = write_file(gz ? "claim.gz" : "claim", &b, gz);
    expect_error(__LINE__, p, DL_EINVAL, "is truncated", "[16777216, 8388608]",
                 "needs 140737488355328 bytes", gz ? "decompressed data has only 6" : "file has only 6",
                 NULL);

    /* data one element short, and one too long */
    b.n = 0;
    uint32_t s23[2] = {2, 3};
    header(&b, 0x0C, 2, s23);
    for (int i = 0; i < 5; i++) put_be(&b, (uint64_t)i, 4);
    p = write_file(gz ? "short.gz" : "short", &b, gz);
    expect_error(__LINE__, p, DL_EINVAL, "is truncated", "shape [2, 3] of int32", "needs 24 bytes",
                 "12-byte header", "has only 20", NULL);
    put_be(&b, 5, 4);
    put_be(&b, 6, 4);
    p = write_file(gz ? "long.gz" : "long", &b, gz);
    expect_error(__LINE__, p, DL_EINVAL, "needs 24 bytes", "disagree with the file length",
                 gz ? "goes on past" : "file has 28", NULL);
  }

  /* a gzip stream cut off, and one with a flipped byte */
  b.n = 0;
  uint32_t s[1] = {100000};
  header(&b, 0x0C, 1, s);
  srand(1);
  for (int i = 0; i < 100000; i++) put_be(&b, (uint64_t)rand(), 4);
  const char *p = write_file("cut.gz", &b, 1);
  long n = file_size(p);
  CHECK(n > 1000 && truncate(p, n / 2) == 0);
  expect_error(__LINE__, p, DL_EIO, "cut.gz", "compressed data is corrupt or truncated",
               "unexpected end of file", NULL);

  p = write_file("flip.gz", &b, 1);
  FILE *f = fopen(p, "r+b");
  CHECK(f != NULL);
  if (f) {
    /* zero a run of compressed bytes mid-stream: inflate either rejects
    ** the block or the CRC check at the end does */
    fseek(f, n / 2, SEEK_SET);
    for (int i = 0; i < 64; i++) fputc(0, f);
    fclose(f);
    expect_error(__LINE__, p, DL_EIO, "flip.gz", "compressed data is corrupt or truncated", NULL);
  }
  free(b.p);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/ddplua-idx-XXXXXX");
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 2;
  }
  test_types();
  test_large_gzip();
  test_errors();
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) printf("note: could not remove %s\n", dir);
  return check_report("test_idx");
}
