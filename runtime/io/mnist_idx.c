/*
** io/mnist_idx.c -- reads IDX files (the format of MNIST and Fashion-MNIST), gzip
** compressed or not, into tensors.
**
** The format: 4 magic bytes 00 00 TT DD (TT the element type, DD the number
** of dims), DD big-endian uint32 sizes, then the elements, big-endian,
** row-major.  A file is untrusted input: every size is checked against what
** the file really holds before memory is committed to it.
*/
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "core/internal.h"

/* -- Types ----------------------------------------------------------------- */

/* int8 and int16 widen to int32: the runtime has neither. */
typedef struct {
  uint8_t code;
  int size;   /* bytes per element in the file */
  int dtype;  /* the tensor's */
  const char *name;
} idx_type;

static const idx_type idx_types[] = {
  {0x08, 1, DL_UINT8, "uint8"},   {0x09, 1, DL_INT32, "int8"},
  {0x0B, 2, DL_INT32, "int16"},   {0x0C, 4, DL_INT32, "int32"},
  {0x0D, 4, DL_FLOAT32, "float32"}, {0x0E, 8, DL_FLOAT64, "float64"},
};

static const idx_type *find_type(uint8_t code) {
  for (size_t i = 0; i < sizeof idx_types / sizeof idx_types[0]; i++)
    if (idx_types[i].code == code) return &idx_types[i];
  return NULL;
}

static uint32_t be32(const unsigned char *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint64_t be64(const unsigned char *p) {
  return (uint64_t)be32(p) << 32 | be32(p + 4);
}

/* Turns n big-endian elements at the start of p into native ones, in place.
** Widening types walk backwards: element i's result covers bytes that only
** elements >= i came from, and those are converted already. */
static void convert(unsigned char *p, int64_t n, const idx_type *ty) {
  switch (ty->code) {
  case 0x09:
    for (int64_t i = n - 1; i >= 0; i--) {
      int32_t v = (int8_t)p[i];
      memcpy(p + 4 * i, &v, 4);
    }
    break;
  case 0x0B:
    for (int64_t i = n - 1; i >= 0; i--) {
      int32_t v = (int16_t)((uint16_t)(p[2 * i] << 8 | p[2 * i + 1]));
      memcpy(p + 4 * i, &v, 4);
    }
    break;
  case 0x0C:
  case 0x0D:
    for (int64_t i = 0; i < n; i++) {
      uint32_t v = be32(p + 4 * i);
      memcpy(p + 4 * i, &v, 4);
    }
    break;
  case 0x0E:
    for (int64_t i = 0; i < n; i++) {
      uint64_t v = be64(p + 8 * i);
      memcpy(p + 8 * i, &v, 8);
    }
    break;
  default:  /* uint8: nothing to do */
    break;
  }
}

/* -- Reading --------------------------------------------------------------- */

typedef struct {
  const char *path;
  gzFile f;
  int header;           /* bytes */
  int64_t shape[DL_MAX_DIMS];
  int ndim;
  const idx_type *ty;
} idx_file;

/* Reads up to n bytes, fewer only at the end of the data; *got says how
** many.  Returns -1 with the error set when zlib reports one (corrupt or
** truncated compressed data: gzread then returns 0 or -1, so both are
** checked with gzerror). */
static int read_some(idx_file *x, unsigned char *buf, size_t n, size_t *got) {
  size_t k = 0;
  while (k < n) {
    unsigned want = n - k > (1u << 30) ? 1u << 30 : (unsigned)(n - k);
    int r = gzread(x->f, buf + k, want);
    if (r <= 0) break;
    k += (size_t)r;
  }
  *got = k;
  int zerr;
  const char *msg = gzerror(x->f, &zerr);
  if (zerr == Z_ERRNO) return dl_err(EM_IDXF_READ, "read_idx", x->path, strerror(errno));
  if (zerr != Z_OK) return dl_err(EM_IDXF_GZIP, "read_idx", x->path, msg);
  return 0;
}

/* The magic and the sizes; fills x and *numel. */
static int read_header(idx_file *x, int64_t *numel) {
  const char *op = "read_idx";
  unsigned char b[4 * DL_MAX_DIMS];
  size_t got;
  if (read_some(x, b, 4, &got)) return -1;
  if (got < 4) return dl_err(EM_IDXF_HEADER, op, x->path, (long long)got, 4LL);
  if (b[0] != 0 || b[1] != 0)
    return dl_err(EM_IDXF_MAGIC, op, x->path, b[0], b[1], b[2], b[3]);
  x->ty = find_type(b[2]);
  if (!x->ty) return dl_err(EM_IDXF_TYPE, op, x->path, b[2]);
  x->ndim = b[3];
  if (x->ndim < 1 || x->ndim > DL_MAX_DIMS)
    return dl_err(EM_IDXF_NDIM, op, x->path, x->ndim);
  x->header = 4 + 4 * x->ndim;
  if (read_some(x, b, (size_t)(4 * x->ndim), &got)) return -1;
  if (got < (size_t)(4 * x->ndim))
    return dl_err(EM_IDXF_HEADER, op, x->path, (long long)(4 + got), (long long)x->header);
  int64_t n = 1;
  for (int i = 0; i < x->ndim; i++) x->shape[i] = be32(b + 4 * i);
  for (int i = 0; i < x->ndim; i++) {
    /* the runtime's own limit on elements (check_shape) */
    if (x->shape[i] && n > (INT64_C(1) << 48) / x->shape[i])
      return dl_err(EM_IDXF_SIZE, op, x->path, fmt_shape(x->shape, x->ndim));
    n *= x->shape[i];
  }
  *numel = n;
  return 0;
}

/* Compressed (or unsized) input: its length is known only once it has been
** read, so the data goes into chunks allocated as it arrives -- a header
** claiming terabytes costs nothing until the bytes are really there -- and
** into the tensor once the length has proved right. */
enum { CHUNK = 16 << 20 };

static dl_tensor *read_chunked(idx_file *x, int64_t need) {
  const char *op = "read_idx";
  size_t cap = 0, used = 0;
  unsigned char **chunks = NULL;  /* grows with the data too */
  dl_tensor *out = NULL;
  int64_t have = 0;
  while (have < need) {
    size_t n = need - have > CHUNK ? CHUNK : (size_t)(need - have), got;
    if (used == cap) {
      size_t ncap = cap ? 2 * cap : 8;
      unsigned char **nc = realloc(chunks, ncap * sizeof *nc);
      if (!nc) {
        dl_err(EM_NOMEM, op, (long long)(ncap * sizeof *nc), (long long)dl_mem_allocated());
        goto fail;
      }
      chunks = nc, cap = ncap;
    }
    unsigned char *c = malloc(n);
    if (!c) {
      dl_err(EM_NOMEM, op, (long long)n, (long long)dl_mem_allocated());
      goto fail;
    }
    chunks[used++] = c;
    if (read_some(x, c, n, &got)) goto fail;
    have += (int64_t)got;
    if (got < n) {
      dl_err(EM_IDXF_SHORT, op, x->path, fmt_shape(x->shape, x->ndim), x->ty->name,
             (long long)need, x->header, "decompressed data", (long long)have);
      goto fail;
    }
  }
  unsigned char extra;
  size_t got;
  if (read_some(x, &extra, 1, &got)) goto fail;
  if (got) {
    dl_err(EM_IDXF_LONG_GZ, op, x->path, fmt_shape(x->shape, x->ndim), x->ty->name,
           (long long)need, x->header);
    goto fail;
  }
  out = tensor_new(x->ty->dtype, x->shape, x->ndim);
  if (!out) goto fail;
  for (size_t i = 0; i < used; i++) {
    int64_t at = (int64_t)i * CHUNK;
    memcpy(tensor_ptr(out) + at, chunks[i], (size_t)(need - at > CHUNK ? CHUNK : need - at));
  }
  convert((unsigned char *)tensor_ptr(out), need / x->ty->size, x->ty);
fail:
  for (size_t i = 0; i < used; i++) free(chunks[i]);
  free(chunks);
  return out;
}

/* An uncompressed regular file: its length is checked first, so the data
** can go straight into the tensor. */
static dl_tensor *read_direct(idx_file *x, int64_t need, int64_t file_size) {
  const char *op = "read_idx";
  int64_t have = file_size - x->header;
  if (have < need)
    return dl_errp(EM_IDXF_SHORT, op, x->path, fmt_shape(x->shape, x->ndim), x->ty->name,
                   (long long)need, x->header, "file", (long long)have);
  if (have > need)
    return dl_errp(EM_IDXF_LONG, op, x->path, fmt_shape(x->shape, x->ndim), x->ty->name,
                   (long long)need, x->header, (long long)have);
  dl_tensor *out = tensor_new(x->ty->dtype, x->shape, x->ndim);
  if (!out) return NULL;
  size_t got;
  if (read_some(x, (unsigned char *)tensor_ptr(out), (size_t)need, &got)) goto fail;
  if ((int64_t)got < need) {  /* the file shrank under us */
    dl_err(EM_IDXF_SHORT, op, x->path, fmt_shape(x->shape, x->ndim), x->ty->name,
           (long long)need, x->header, "file", (long long)got);
    goto fail;
  }
  convert((unsigned char *)tensor_ptr(out), need / x->ty->size, x->ty);
  return out;
fail:
  dl_tensor_release(out);
  return NULL;
}

/* Returns the tensor (uint8, int32, float32 or float64 with the file's
** shape), or NULL with the error set: DL_EIO when the file cannot be opened
** or read, DL_EINVAL when its content is not a well-formed IDX file. */
DL_API dl_tensor *dl_read_idx(const char *path) {
  const char *op = "read_idx";
  if (!path) return dl_errp(EM_NULLARG, op, "path");
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return dl_errp(EM_IDXF_OPEN, op, path, strerror(errno));
  struct stat st;
  int e = fstat(fd, &st) != 0 ? errno : S_ISDIR(st.st_mode) ? EISDIR : 0;
  if (e) {
    close(fd);
    return dl_errp(EM_IDXF_OPEN, op, path, strerror(e));
  }
  idx_file x = {.path = path, .f = gzdopen(fd, "rb")};
  if (!x.f) {  /* zlib could not allocate its state */
    close(fd);
    return dl_errp(EM_NOMEM, op, (long long)sizeof(z_stream), (long long)dl_mem_allocated());
  }
  gzbuffer(x.f, 1 << 18);  /* larger reads than the 8 KiB default */
  dl_tensor *out = NULL;
  int64_t numel = 0;
  if (read_header(&x, &numel) == 0) {
    int64_t need = numel * x.ty->size;
    /* gzdirect is reliable once a read has happened: 1 for plain data */
    if (gzdirect(x.f) && S_ISREG(st.st_mode))
      out = read_direct(&x, need, (int64_t)st.st_size);
    else
      out = read_chunked(&x, need);
  }
  gzclose_r(x.f);  /* closes fd */
  return out;
}
