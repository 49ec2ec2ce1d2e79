/*
** io/tokens.c -- flat token files for language models, memory-mapped: the
** `.bin` files of nanoGPT (headerless uint16) and llm.c (a 256-int32
** header, then uint16 or uint32 tokens), little-endian.
**
** The file is mapped shared and read-only, so every rank of a node that
** opens it reads the same page-cache pages: one copy of the data per node,
** however many ranks train on it.  Windows of tokens are gathered from the
** mapping into fresh int64 tensors (dl_tokens_windows), so no tensor ever
** points into the mapping and closing it is always safe.
**
** llm.c's header: int32 magic (20240520: uint16 GPT-2 tokens; 20240801:
** uint32 LLaMA-3 tokens), int32 version, int32 token count, 253 more int32.
*/
#include <errno.h>
#include <stdint.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/internal.h"

#define LLMC_HEADER_BYTES 1024
#define LLMC_MAGIC_U16 20240520
#define LLMC_MAGIC_U32 20240801

struct dl_tokens {
  const unsigned char *map;  /* the whole file; NULL for an empty one */
  size_t map_len;
  const unsigned char *data; /* the first token */
  int64_t count;
  int itemsize;              /* 2 or 4 */
  int header;                /* bytes before the first token: 0 or 1024 */
};

static int32_t le32(const unsigned char *p) {
  return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

static const char *dtype_of(int itemsize) { return itemsize == 2 ? "uint16" : "uint32"; }

/* Checks the header and the length, filling f's data, count, itemsize and
** header; itemsize and header as dl_tokens_open takes them. */
static int layout(dl_tokens *f, const char *path, int64_t size, int itemsize, int header) {
  const char *op = "tokens";
  int32_t magic = size >= 4 ? le32(f->map) : 0;
  int is_llmc = size >= LLMC_HEADER_BYTES && (magic == LLMC_MAGIC_U16 || magic == LLMC_MAGIC_U32);
  if (header == 1 && !is_llmc) return dl_err(EM_TOK_NOHEADER, op, path, (long long)magic);
  if (header < 0) header = is_llmc;
  if (header) {
    int hsize = magic == LLMC_MAGIC_U16 ? 2 : 4;
    if (itemsize && itemsize != hsize)
      return dl_err(EM_TOK_HEADER_DTYPE, op, path, (long long)magic, dtype_of(hsize), dtype_of(itemsize));
    itemsize = hsize;
    int64_t claimed = le32(f->map + 8), have = size - LLMC_HEADER_BYTES;
    if (claimed < 0 || claimed * itemsize != have)
      return dl_err(EM_TOK_HEADER_COUNT, op, path, (long long)claimed, itemsize, (long long)have);
    f->header = LLMC_HEADER_BYTES;
  } else {
    if (itemsize == 0) itemsize = 2;  /* nanoGPT's uint16 */
    f->header = 0;
  }
  int64_t bytes = size - f->header;
  if (bytes % itemsize) return dl_err(EM_TOK_ODD, op, path, (long long)bytes, f->header, itemsize);
  f->itemsize = itemsize;
  f->count = bytes / itemsize;
  f->data = f->map ? f->map + f->header : NULL;
  return 0;
}

/* itemsize: 2 (uint16), 4 (uint32) or 0 (from an llm.c header, else
** uint16); header: 1 an llm.c header must be there, 0 none (the file is all
** tokens), -1 detect one by its magic.  NULL with DL_EIO when the file
** cannot be opened or mapped, DL_EINVAL when its length or header does not
** fit the token size. */
DL_API dl_tokens *dl_tokens_open(const char *path, int itemsize, int header) {
  const char *op = "tokens";
  if (!path) return dl_errp(EM_NULLARG, op, "path");
  if (itemsize != 0 && itemsize != 2 && itemsize != 4) return dl_errp(EM_TOK_ITEMSIZE, op, path, itemsize);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return dl_errp(EM_TOK_OPEN, op, path, strerror(errno));
  struct stat st;
  int e = fstat(fd, &st) != 0 ? errno : S_ISDIR(st.st_mode) ? EISDIR : !S_ISREG(st.st_mode) ? EINVAL : 0;
  if (e) {
    close(fd);
    return dl_errp(EM_TOK_OPEN, op, path, e == EINVAL ? "not a regular file" : strerror(e));
  }
  dl_tokens *f = calloc(1, sizeof *f);
  if (!f) {
    close(fd);
    return dl_errp(EM_NOMEM, op, (long long)sizeof *f, (long long)dl_mem_allocated());
  }
  if (st.st_size > 0) {
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
      e = errno;
      close(fd);
      free(f);
      return dl_errp(EM_TOK_OPEN, op, path, strerror(e));
    }
    f->map = m;
    f->map_len = (size_t)st.st_size;
  }
  close(fd);  /* the mapping keeps the file */
  if (layout(f, path, (int64_t)st.st_size, itemsize, header) != 0) {
    dl_tokens_close(f);
    return NULL;
  }
  return f;
}

DL_API int64_t dl_tokens_count(const dl_tokens *f) { return f ? f->count : 0; }
DL_API int dl_tokens_itemsize(const dl_tokens *f) { return f ? f->itemsize : 0; }
DL_API int dl_tokens_header_bytes(const dl_tokens *f) { return f ? f->header : 0; }

/* Row b: tokens [first + index[b] * stride, ... + len) as int64. */
DL_API dl_tensor *dl_tokens_windows(const dl_tokens *f, const dl_tensor *index, int64_t first,
                                    int64_t stride, int64_t len) {
  const char *op = "tokens";
  if (!f) return dl_errp(EM_NULLARG, op, "file");
  if (!index) return dl_errp(EM_NULLARG, op, "index");
  if (index->dtype != DL_INT64 || index->ndim != 1 || dl_tensor_device(index) >= 0 ||
      !dl_tensor_is_contiguous(index))
    return dl_errp(EM_NN_PARAM, op, "index", "a contiguous 1-D int64 CPU tensor", fmt_tshape(index));
  if (len < 0 || stride < 0 || first < 0)
    return dl_errp(EM_NN_PARAM, op, "first, stride and len", "non-negative", "a negative value");
  int64_t n = index->shape[0];
  const int64_t *idx = (const int64_t *)tensor_first(index);
  for (int64_t b = 0; b < n; b++) {  /* every window inside, without overflow */
    int64_t i = idx[b], room = f->count - len - first;
    if (i < 0 || room < 0 || (stride ? i > room / stride : 0)) {
      long long s = i < 0 || (stride && i > INT64_MAX / 2 / stride) ? -1 : (long long)(first + i * stride);
      return dl_errp(EM_TOK_RANGE, op, (long long)i, s, s < 0 ? -1 : s + len, (long long)f->count);
    }
  }
  int64_t shape[2] = {n, len};
  dl_tensor *out = tensor_new(DL_INT64, shape, 2);
  if (!out) return NULL;
  int64_t *o = (int64_t *)tensor_ptr(out);
  for (int64_t b = 0; b < n; b++, o += len) {
    const unsigned char *p = f->data + (first + idx[b] * stride) * f->itemsize;
    if (f->itemsize == 2) {
      for (int64_t t = 0; t < len; t++) o[t] = (int64_t)p[2 * t] | (int64_t)p[2 * t + 1] << 8;
    } else {
      for (int64_t t = 0; t < len; t++) o[t] = (int64_t)(uint32_t)le32(p + 4 * t);
    }
  }
  return out;
}

DL_API void dl_tokens_close(dl_tokens *f) {
  if (!f) return;
  if (f->map) munmap((void *)f->map, f->map_len);
  free(f);
}
