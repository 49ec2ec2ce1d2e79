/*
** file_map.h -- a file's bytes, mapped (or read, where mmap is refused),
** shared by the file handle of a reader and every tensor viewing them
** (safetensors, .npy/.npz): freed when the last one lets go.
*/
#ifndef DL_IO_FILE_MAP_H
#define DL_IO_FILE_MAP_H

#include <stddef.h>

#include "core/internal.h"

typedef struct io_file_map {
  atomic_int refs;
  void *base;
  size_t size;
  int mapped;  /* munmap; else free */
} io_file_map;

/* The first size bytes of fd in a new malloc'd buffer, or NULL with errno
** set (EIO when the file shrank while it was read). */
DL_HIDDEN void *io_read_whole(int fd, size_t size);
/* A map holding base (one reference), or NULL (base is then released). */
DL_HIDDEN io_file_map *io_map_new(void *base, size_t size, int mapped);
/* Drops one reference; the last unmaps or frees the bytes. */
DL_HIDDEN void io_map_release(io_file_map *m);
/* A dl_from_blob deleter whose ctx is a map (one reference). */
DL_HIDDEN void io_map_deleter(void *ctx, void *data);

#endif
