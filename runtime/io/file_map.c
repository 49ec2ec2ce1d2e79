/*
** file_map.c -- a file's bytes shared by a reader and its tensors
** (file_map.h).
*/
#include <errno.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "io/file_map.h"

DL_HIDDEN void *io_read_whole(int fd, size_t size) {
  char *buf = malloc(size ? size : 1);
  size_t got = 0;
  while (buf && got < size) {
    ssize_t r = pread(fd, buf + got, size - got, (off_t)got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      if (r == 0) errno = EIO;  /* shrank while we read */
      free(buf);
      return NULL;
    }
    got += (size_t)r;
  }
  return buf;
}

static void drop_bytes(void *base, size_t size, int mapped) {
  if (mapped)
    munmap(base, size);
  else
    free(base);
}

DL_HIDDEN io_file_map *io_map_new(void *base, size_t size, int mapped) {
  io_file_map *m = malloc(sizeof *m);
  if (!m) {
    drop_bytes(base, size, mapped);
    return NULL;
  }
  atomic_init(&m->refs, 1);
  m->base = base, m->size = size, m->mapped = mapped;
  return m;
}

DL_HIDDEN void io_map_release(io_file_map *m) {
  if (!m || atomic_fetch_sub(&m->refs, 1) != 1) return;
  drop_bytes(m->base, m->size, m->mapped);
  free(m);
}

DL_HIDDEN void io_map_deleter(void *ctx, void *data) {
  (void)data;
  io_map_release(ctx);
}
