/*
** io/tar_write.c -- tar shards written member by member (dl_tar_writer_*):
** POSIX ustar headers, a pax extended header for a name over 100 bytes or
** not ASCII and for a size of 8 GiB or more, ending in tar's 10240-byte
** records, committed atomically (io/atomic_file.c), with the index cache
** of io/tar.c written beside it from the offsets the writer knows.
*/
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/internal.h"
#include "io/tar.h"

#define BLOCK TAR_BLOCK
#define RECORD TAR_RECORD

static const char *OP = "tar";

struct dl_tar_writer {
  dl_file *f;
  char *path;
  int64_t mtime, written;
  int failed;
  dl_tar_index *ix;
};

DL_API dl_tar_writer *dl_tar_writer_create(const char *path, int64_t mtime) {
  if (!path) return dl_errp(EM_NULLARG, OP, "path");
  dl_tar_writer *w = calloc(1, sizeof *w);
  if (w) {
    w->path = strdup(path);
    w->ix = tar_index_new();
  }
  if (!w || !w->path || !w->ix) {
    if (w) {
      free(w->path);
      dl_tar_index_free(w->ix);
    }
    free(w);
    return dl_errp(EM_NOMEM, OP, (long long)sizeof *w, (long long)dl_mem_allocated());
  }
  w->mtime = mtime < 0 ? 0 : mtime;
  w->f = dl_file_create(path, -1, "tar");
  if (!w->f) {
    free(w->path);
    dl_tar_index_free(w->ix);
    free(w);
    return NULL;
  }
  return w;
}

static int put(dl_tar_writer *w, const void *p, int64_t n) {
  if (n == 0) return 0;
  if (dl_file_write(w->f, p, (size_t)n) != 0) {
    w->failed = 1;
    return DL_EIO;
  }
  w->written += n;
  return 0;
}

/* Zero bytes up to the next block boundary. */
static int pad(dl_tar_writer *w, int64_t to) {
  static const unsigned char zeros[RECORD];
  while (w->written % to) {
    int64_t n = to - w->written % to;
    if (put(w, zeros, n > RECORD ? RECORD : n)) return DL_EIO;
  }
  return 0;
}

/* One ustar header block (POSIX "ustar\0" "00"). */
static int header(dl_tar_writer *w, const char *name, size_t nlen, int64_t size, char type) {
  unsigned char h[BLOCK];
  memset(h, 0, sizeof h);
  memcpy(h, name, nlen > 100 ? 100 : nlen);
  memcpy(h + 100, "0000644", 8);
  memcpy(h + 108, "0000000", 8);
  memcpy(h + 116, "0000000", 8);
  if (size < 077777777777LL) {
    snprintf((char *)h + 124, 12, "%011llo", (unsigned long long)size);
  } else {  /* the pax header carries it exactly; GNU base-256 too, for old readers */
    h[124] = 0x80;
    for (int i = 0; i < 8; i++) h[135 - i] = (unsigned char)((uint64_t)size >> (8 * i));
  }
  snprintf((char *)h + 136, 12, "%011llo", (unsigned long long)(w->mtime < 077777777777LL ? w->mtime : 0));
  h[156] = (unsigned char)type;
  memcpy(h + 257, "ustar", 6);
  memcpy(h + 263, "00", 2);
  unsigned sum = 0;
  memset(h + 148, ' ', 8);
  for (int i = 0; i < BLOCK; i++) sum += h[i];
  snprintf((char *)h + 148, 8, "%06o", sum);  /* six digits, NUL, space */
  h[155] = ' ';
  return put(w, h, BLOCK);
}

/* A pax record "LEN key=value\n", LEN counting itself. */
static size_t pax_record(char *out, const char *key, const char *val, size_t vlen) {
  size_t body = strlen(key) + vlen + 3;  /* ' ', '=', '\n' */
  size_t len = body + 1;
  for (;;) {
    size_t digits = (size_t)snprintf(NULL, 0, "%zu", len);
    if (body + digits == len) break;
    len = body + digits;
  }
  int k = sprintf(out, "%zu %s=", len, key);
  memcpy(out + k, val, vlen);
  out[k + vlen] = '\n';
  return len;
}

DL_API int dl_tar_writer_add(dl_tar_writer *w, const char *name, const void *data, int64_t size) {
  if (!w) return dl_err(EM_NULLARG, OP, "writer");
  if (!name) return dl_err(EM_NULLARG, OP, "name");
  if (w->failed) return dl_err(EM_TAR_DONE, OP, w->path);
  size_t nlen = strlen(name);
  if (!nlen) return dl_err(EM_TAR_NAME, OP, w->path);
  if (size < 0) return dl_err(EM_TAR_SIZE, OP, w->path, tar_shown(name, nlen), (long long)size);
  if (size && !data) return dl_err(EM_NULLARG, OP, "data");
  int ascii = 1;
  for (size_t i = 0; i < nlen; i++) ascii &= (unsigned char)name[i] < 128;
  int big = size >= 077777777777LL;
  if (nlen > 100 || !ascii || big) {
    char *rec = malloc(nlen + 64 + 48);
    if (!rec) return dl_err(EM_NOMEM, OP, (long long)nlen + 112, (long long)dl_mem_allocated());
    size_t n = 0;
    if (nlen > 100 || !ascii) n += pax_record(rec, "path", name, nlen);
    if (big) {
      char num[24];
      int k = snprintf(num, sizeof num, "%lld", (long long)size);
      n += pax_record(rec + n, "size", num, (size_t)k);
    }
    int rc = header(w, "././@PaxHeader", 14, (int64_t)n, 'x');
    if (!rc) rc = put(w, rec, (int64_t)n);
    free(rec);
    if (rc || pad(w, BLOCK)) return DL_EIO;
  }
  if (header(w, name, nlen, size, '0')) return DL_EIO;
  int64_t at_off = w->written;
  if (put(w, data, size) || pad(w, BLOCK)) return DL_EIO;
  if (tar_index_add(w->ix, name, nlen, at_off, size)) {
    w->failed = 1;
    return DL_ENOMEM;
  }
  return 0;
}

DL_API int64_t dl_tar_writer_bytes(const dl_tar_writer *w) { return w ? w->written : 0; }

DL_API void dl_tar_writer_abort(dl_tar_writer *w) {
  if (!w) return;
  dl_file_abort(w->f);
  dl_tar_index_free(w->ix);
  free(w->path);
  free(w);
}

DL_API int dl_tar_writer_finish(dl_tar_writer *w, const char *idx_path) {
  if (!w) return dl_err(EM_NULLARG, OP, "writer");
  if (w->failed) {
    int rc = dl_err(EM_TAR_DONE, OP, w->path);
    dl_tar_writer_abort(w);
    return rc;
  }
  static const unsigned char zeros[2 * BLOCK];
  if (put(w, zeros, sizeof zeros) || pad(w, RECORD)) {
    dl_tar_writer_abort(w);
    return DL_EIO;
  }
  int rc = dl_file_commit(w->f);
  w->f = NULL;
  if (!rc && idx_path) {
    struct stat st;
    if (stat(w->path, &st) != 0) {
      rc = dl_err(EM_TAR_OS, OP, w->path, "cannot stat", strerror(errno));
    } else {
      w->ix->file_size = (int64_t)st.st_size;
      w->ix->mtime_sec = (int64_t)st.st_mtim.tv_sec;
      w->ix->mtime_nsec = (int64_t)st.st_mtim.tv_nsec;
      rc = dl_tar_index_save(w->ix, idx_path);
    }
  }
  dl_tar_writer_abort(w);  /* frees what is left (the file is committed) */
  return rc;
}
