/*
** read_whole.c -- a whole file read into memory (read_whole.h).
*/
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "io/read_whole.h"

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
