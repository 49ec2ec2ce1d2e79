/*
** file_map.c -- a file's bytes shared by a reader and its tensors
** (file_map.h), and a small file read whole into a tensor (an image's).
*/
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
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

DL_API dl_tensor *dl_read_file(const char *path, const char *op) {
  if (!op) op = "read_file";
  if (!path) return dl_errp(EM_NULLARG, op, "path");
  /* O_NONBLOCK: opening a FIFO must not hang; it is refused below */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return dl_errp(EM_IMG_OS, op, path, "cannot open", strerror(errno));
  struct stat st;
  if (fstat(fd, &st)) {
    int e = errno;
    close(fd);
    return dl_errp(EM_IMG_OS, op, path, "cannot stat", strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return dl_errp(EM_IMG_NOT_FILE, op, path);
  }
  int64_t n = (int64_t)st.st_size;
  dl_tensor *t = dl_empty(&n, 1, DL_UINT8);
  if (!t) {
    close(fd);
    return NULL;
  }
  /* read straight into the tensor: an image file is read once, whole */
  char *p = dl_tensor_data(t);
  int64_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, p + got, (size_t)(n - got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      int e = r < 0 ? errno : EIO;  /* EIO: it shrank while we read it */
      close(fd);
      dl_tensor_release(t);
      return dl_errp(EM_IMG_OS, op, path, "cannot read", strerror(e));
    }
    got += r;
  }
  close(fd);
  return t;
}
