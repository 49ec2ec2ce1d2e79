/*
** io/tar.h -- what the tar reader (io/tar.c) and writer (io/tar_write.c)
** share: the member index and its helpers.
*/
#ifndef DL_IO_TAR_H
#define DL_IO_TAR_H

#include <stddef.h>
#include <stdint.h>

#include "core/internal.h"

enum { TAR_BLOCK = 512, TAR_RECORD = 10240 };  /* a header; tar's and tarfile's record */

/* The regular members of a tar, in file order. */
struct dl_tar_index {
  int64_t n, cap;
  int64_t *off, *size, *name_at;  /* name_at: start of the name in names */
  char *names;
  int64_t names_len, names_cap;
  int64_t file_size, mtime_sec, mtime_nsec;  /* the tar when indexed */
};

/* A new empty index, or NULL with the error set. */
DL_HIDDEN dl_tar_index *tar_index_new(void);
/* Appends a member (name: len bytes, no NUL needed); 0 or DL_ENOMEM. */
DL_HIDDEN int tar_index_add(dl_tar_index *x, const char *name, size_t len, int64_t off, int64_t size);
/* A name for messages: printable bytes only, at most ~150 (thread-local). */
DL_HIDDEN const char *tar_shown(const char *s, size_t len);

#endif /* DL_IO_TAR_H */
