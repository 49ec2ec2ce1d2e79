/*
** ddplua_io.h -- files: safetensors checkpoints and IDX data files.
** Part of the public API: include ddplua.h, which includes every part.
*/
#ifndef DDPLUA_IO_H
#define DDPLUA_IO_H

#include "ddplua_base.h"

#if !defined(DL_CDEF) && defined(__cplusplus)
extern "C" {
#endif

/* -- Checkpoints (safetensors) ------------------------------------------ */

/* Writes n named tensors and nmeta string pairs to path in the safetensors
** format (any layout; written row-major, little-endian).  Atomic: the data
** goes to a temporary file beside path, is fsynced and renamed over path, so
** path holds the old file or the new one, never a mix.  Temporary files left
** by writers that died are removed by the next save of the same path.  The
** new file keeps the old one's permission bits (and, where allowed, owner
** and group); a symbolic link is written through: its target is replaced,
** in the target's directory, and the link stays.  A file larger than the
** size limit (RLIMIT_FSIZE) fails before a byte is written ("File too
** large"); a program that may otherwise write past that limit should
** ignore SIGXFSZ (the library leaves it alone).
** Returns DL_EIO naming the path and the system's reason on failure. */
DL_API int dl_st_save(const char *path, const char *const *names,
                      dl_tensor *const *tensors, int n,
                      const char *const *meta_keys,
                      const char *const *meta_values, int nmeta);
/* Opens and validates a safetensors file, memory-mapped (copy-on-write:
** changing a loaded tensor never changes the file).  NULL with a message
** naming the file and the problem when it is not a valid file. */
typedef struct dl_st_file dl_st_file;
DL_API dl_st_file *dl_st_open(const char *path);
/* Tensors in file order, 0 <= i < dl_st_count. */
DL_API int dl_st_count(const dl_st_file *f);
DL_API const char *dl_st_name(const dl_st_file *f, int i);
/* A new tensor viewing the mapping (no copy, unless the data is not
** aligned to its element size); valid after dl_st_close. */
DL_API dl_tensor *dl_st_tensor(dl_st_file *f, int i);
DL_API int dl_st_meta_count(const dl_st_file *f);
DL_API const char *dl_st_meta_key(const dl_st_file *f, int i);
DL_API const char *dl_st_meta_value(const dl_st_file *f, int i);
/* The mapping goes when the file and every tensor from it are gone. */
DL_API void dl_st_close(dl_st_file *f);

/* -- Data files ---------------------------------------------------------- */

/* Reads an IDX file (the MNIST format), gzip-compressed or not: a tensor
** with the file's shape, of dtype uint8, int32 (for int8, int16, int32),
** float32 or float64.  NULL with DL_EIO when the file cannot be opened or
** read, DL_EINVAL when it is not a well-formed IDX file (bad magic, sizes
** that disagree with its length); memory follows the data really present,
** never a size the header merely claims. */
DL_API dl_tensor *dl_read_idx(const char *path);

#if !defined(DL_CDEF) && defined(__cplusplus)
}
#endif

#endif /* DDPLUA_IO_H */
