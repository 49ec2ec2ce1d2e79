/*
** read_whole.h -- a whole file read into memory, for the readers that map
** their files and fall back to reading where mmap is refused (safetensors,
** .npy/.npz).
*/
#ifndef DL_IO_READ_WHOLE_H
#define DL_IO_READ_WHOLE_H

#include <stddef.h>

#include "core/internal.h"

/* The first size bytes of fd in a new malloc'd buffer, or NULL with errno
** set (EIO when the file shrank while it was read). */
DL_HIDDEN void *io_read_whole(int fd, size_t size);

#endif
