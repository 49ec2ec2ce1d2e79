/*
** ddplua_io.h -- files: atomic writes, safetensors checkpoints, IDX data files
** and token files.
** Part of the public API: include ddplua.h, which includes every part.
*/
#ifndef DDPLUA_IO_H
#define DDPLUA_IO_H

#include "ddplua_base.h"

#if !defined(DL_CDEF) && defined(__cplusplus)
extern "C" {
#endif

/* -- Files written atomically -------------------------------------------- */

/* A file that holds the old contents or the new ones, never a mix, as every
** file ddplua writes for its user (checkpoints, token files).
** dl_file_create opens a temporary file beside path -- beside the end of
** path's symbolic links: the target is replaced, the link stays -- named
** "<target>.tmp.<pid>.<n>", with the old file's permission bits (and, where
** allowed, owner and group), or 0666 less the umask for a new file;
** temporary files left by writers that died are removed first.  size: the
** bytes the file will hold, or -1 when not known; a size over the file size
** limit (RLIMIT_FSIZE) fails at once, and so does any write that would cross
** it ("File too large", never SIGXFSZ).  op starts every message ("save:
** PATH: write failed: No space left on device"); NULL: "write".
** NULL with DL_EIO naming the path and the system's reason on failure. */
typedef struct dl_file dl_file;
DL_API dl_file *dl_file_create(const char *path, int64_t size, const char *op);
/* Appends n bytes (short writes and EINTR retried).  DL_EIO on failure
** (ENOSPC, EFBIG, ...); the handle then only refuses: abort it. */
DL_API int dl_file_write(dl_file *f, const void *data, size_t n);
/* fsyncs the file, renames it over the target and fsyncs the directory:
** 0 once the new file is in place for good.  On failure, or after a write
** failed, the temporary file is removed and the old file kept (DL_EIO; only
** a failed fsync of the directory comes after the rename).  Frees f. */
DL_API int dl_file_commit(dl_file *f);
/* Removes the temporary file, keeping the old one, and frees f (NULL:
** nothing).  Sets no error: the reason to abort stays the last one. */
DL_API void dl_file_abort(dl_file *f);

/* -- Checkpoints (safetensors) ------------------------------------------ */

/* Writes n named tensors and nmeta string pairs to path in the safetensors
** format (any layout; written row-major, little-endian).  Atomic, through
** dl_file_create: path holds the old file or the new one, never a mix; the
** new file keeps the old one's permission bits; a symbolic link is written
** through.  A file larger than the size limit (RLIMIT_FSIZE) fails before a
** byte is written ("File too large"); a program that may otherwise write
** past that limit should ignore SIGXFSZ (the library leaves it alone).
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

/* -- Token files (language models) ------------------------------------- */

/* A flat file of little-endian tokens -- nanoGPT's headerless uint16
** `.bin`, or llm.c's (a 1024-byte header: int32 magic 20240520 for uint16
** tokens, 20240801 for uint32, version, token count, reserved) --
** memory-mapped shared and read-only, so the ranks of a node share one copy
** in the page cache.  itemsize: 2 (uint16), 4 (uint32), or 0 to take it
** from an llm.c header (uint16 without one); header: 1 an llm.c header
** must be there, 0 none, -1 detect it by its magic.  NULL with DL_EIO when
** the file cannot be opened or mapped, DL_EINVAL when its length is not a
** whole number of tokens or the header disagrees with the file or itemsize. */
typedef struct dl_tokens dl_tokens;
DL_API dl_tokens *dl_tokens_open(const char *path, int itemsize, int header);
DL_API int64_t dl_tokens_count(const dl_tokens *f);
DL_API int dl_tokens_itemsize(const dl_tokens *f);
DL_API int dl_tokens_header_bytes(const dl_tokens *f);   /* 0 or 1024 */
/* A new int64 tensor [B, len], B = index's length: row b holds tokens
** first + index[b] * stride ... + len - 1.  index: a contiguous 1-D int64
** CPU tensor.  DL_EINDEX naming the window when one runs outside the file. */
DL_API dl_tensor *dl_tokens_windows(const dl_tokens *f, const dl_tensor *index, int64_t first,
                                    int64_t stride, int64_t len);
/* Unmaps the file (tensors from dl_tokens_windows are copies: they stay). */
DL_API void dl_tokens_close(dl_tokens *f);

#if !defined(DL_CDEF) && defined(__cplusplus)
}
#endif

#endif /* DDPLUA_IO_H */
