/*
** ddplua_io.h -- files: atomic writes, safetensors checkpoints, IDX data files,
** NumPy arrays (.npy, .npz), token files and tar shards.
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

/* -- NumPy arrays (.npy, .npz) ------------------------------------------ */

/* Reads a .npy file (format versions 1.0, 2.0 and 3.0) as NumPy writes
** it.  dtypes: <f4 <f8 <f2 <i8 <i4 |u1 |b1 as float32, float64, float16,
** int64, int32, uint8 and bool; |i1 <i2 <u2 widen to int32 and <u4 to
** int64 (copies: ddplua has no such dtypes); big-endian ('>') files are
** byte-swapped into a copy.  fortran_order=True gives the tensor that
** torch.from_numpy(np.load(path)) gives: the file's shape with
** column-major strides (not contiguous; t:contiguous() copies).
** map: 1 maps the file copy-on-write (writing into the tensor never
** changes the file; the mapping goes when the last view of the tensor
** does), so opening any size is instant and pages are read when touched;
** a tensor that needs a conversion, or whose data offset is not a multiple
** of its element size, is copied all the same.  0 reads it into memory.
** NULL with DL_EIO (cannot open or read), DL_EINVAL (not a well-formed
** .npy file: bad magic, truncated, a header that is no Python dict of
** descr, fortran_order and shape, data shorter or longer than the shape),
** DL_EDTYPE (a dtype ddplua has no counterpart for, named) or DL_ESHAPE
** (more than 8 dims, too many elements), the message naming the file. */
DL_API dl_tensor *dl_npy_load(const char *path, int map);
/* Writes t as np.save writes it, byte for byte: format 1.0 (2.0 when the
** header needs more than 65535 bytes), the header padded to 64 bytes,
** little-endian data in C order -- in Fortran order (fortran_order=True)
** when t is column-major and not row-major, as np.save of t.numpy() does.
** A CUDA tensor is written through a host copy.  Atomic, as dl_st_save
** (dl_file_create).  DL_EDTYPE for bfloat16 (NumPy has no such dtype). */
DL_API int dl_npy_save(const char *path, const dl_tensor *t);
/* A .npz file (np.savez: a zip of .npy members, stored; np.savez_compressed:
** deflated; Zip64 read), its central directory read and checked.  Members
** whose names do not end in ".npy" are left out (NumPy hands them out as
** bytes).  map: 1 stored members become views of the mapped file as
** dl_npy_load's (a member whose data is not aligned to its element size is
** copied: numpy does not align members; dl_npz_save does); deflated ones
** are always inflated into memory.  NULL with the error set, naming the
** file (and the member). */
typedef struct dl_npz dl_npz;
DL_API dl_npz *dl_npz_open(const char *path, int map);
/* Arrays in the zip's order, 0 <= i < dl_npz_count; the name as np.load
** gives its key: the member's name without ".npy" ("arr_0", ...). */
DL_API int dl_npz_count(const dl_npz *z);
DL_API const char *dl_npz_name(const dl_npz *z, int i);
/* A new tensor of member i (read, inflated, checked against its CRC-32
** unless mapped); valid after dl_npz_close. */
DL_API dl_tensor *dl_npz_tensor(dl_npz *z, int i);
DL_API void dl_npz_close(dl_npz *z);
/* Writes n named tensors as np.savez does (member "NAME.npy" each, stored,
** as dl_npy_save writes it; Zip64 where sizes or offsets need it), every
** member's data aligned to 64 bytes in the file (an extra field pads the
** local header, as zipalign does), so dl_npz_open can map them.  Names:
** non-empty, at most 65000 bytes, no two the same.  Atomic. */
DL_API int dl_npz_save(const char *path, const char *const *names,
                       dl_tensor *const *tensors, int n);

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


/* -- Tar shards (WebDataset) --------------------------------------------- */

/* The regular members of a tar archive in file order -- each one's name,
** the byte offset of its data in the file and its size -- without its data:
** what a dataset over tar shards indexes.  Read from ustar, POSIX pax
** (extended headers 'x' and global 'g' with path= and size=) and GNU
** archives (long names 'L'; base-256 sizes); directories, links, devices
** and FIFOs are skipped, and so are members of unknown types (their data
** is stepped over).  The archive must end with its end-of-archive (zero)
** block.  NULL with DL_EIO when the file cannot be read, DL_EINVAL naming
** the file and the member when it is truncated (a header or a member's
** data cut off, no end-of-archive block), a header's checksum or a field
** is wrong, or a member is a GNU sparse file. */
typedef struct dl_tar_index dl_tar_index;
DL_API dl_tar_index *dl_tar_scan(const char *path);
/* The index cache beside a shard ("shard.tar.idx", written by
** dl_tar_index_save): the index of tar_path read from idx_path when it
** describes the tar as it is now (the tar's size and modification time,
** to the nanosecond, are recorded in it).  NULL with DL_EIO when idx_path
** cannot be read (errno-style reason in the message), DL_EINVAL when it is
** not a well-formed index (magic, lengths, CRC-32), DL_ESTATE when the tar
** changed since (scan it again then). */
DL_API dl_tar_index *dl_tar_index_load(const char *tar_path, const char *idx_path);
/* Writes x to idx_path, atomically (dl_file_create).  The format, all
** little-endian: "DLTARIX1", int64 tar size, int64 tar mtime seconds,
** int64 tar mtime nanoseconds, int64 member count n, int64 name bytes m;
** n records of int64 data offset, int64 size, int64 name start; m bytes of
** names, each ending in a NUL; uint32 CRC-32 (zlib's) of all before it. */
DL_API int dl_tar_index_save(const dl_tar_index *x, const char *idx_path);
DL_API int64_t dl_tar_index_count(const dl_tar_index *x);
/* Member i (0 <= i < count): its name (valid while x lives), the offset of
** its data in the tar, its size in bytes; -1 / NULL out of range. */
DL_API const char *dl_tar_index_name(const dl_tar_index *x, int64_t i);
DL_API int64_t dl_tar_index_offset(const dl_tar_index *x, int64_t i);
DL_API int64_t dl_tar_index_size(const dl_tar_index *x, int64_t i);
/* The tar as indexed: its size, and its modification time (which = 0:
** seconds, 1: nanoseconds within the second). */
DL_API int64_t dl_tar_index_file_size(const dl_tar_index *x);
DL_API int64_t dl_tar_index_mtime(const dl_tar_index *x, int which);
DL_API void dl_tar_index_free(dl_tar_index *x);

/* An open shard, read at the offsets of its index (pread: one handle
** reads consecutive members forward, the kernel reading ahead).  size,
** mtime_sec, mtime_nsec: the tar as indexed (size < 0: not checked); a tar
** that changed since is DL_ESTATE naming both.  One thread at a time. */
typedef struct dl_tar_reader dl_tar_reader;
DL_API dl_tar_reader *dl_tar_open(const char *path, int64_t size, int64_t mtime_sec, int64_t mtime_nsec);
/* A new uint8 tensor [size] holding the bytes at offset.  member names the
** member in messages: one past the end of the file is DL_EINVAL naming the
** shard and the member, a failed read DL_EIO. */
DL_API dl_tensor *dl_tar_read(dl_tar_reader *r, int64_t offset, int64_t size, const char *member);
DL_API void dl_tar_close(dl_tar_reader *r);

/* A tar written member by member (ustar; a pax extended header carries a
** name over 100 bytes or not ASCII, and a size of 8 GiB or more), files
** mode 0644 owned by uid 0, modified at mtime (seconds).  Atomic
** (dl_file_create): path holds the old file or the whole new archive. */
typedef struct dl_tar_writer dl_tar_writer;
DL_API dl_tar_writer *dl_tar_writer_create(const char *path, int64_t mtime);
/* Appends a regular member of size bytes.  DL_EINVAL for an empty name,
** DL_EIO when the write fails (the writer then only refuses: abort it). */
DL_API int dl_tar_writer_add(dl_tar_writer *w, const char *name, const void *data, int64_t size);
/* Bytes written so far (headers and padding included). */
DL_API int64_t dl_tar_writer_bytes(const dl_tar_writer *w);
/* Ends the archive (two zero blocks, padded to 10240 bytes as tar and
** Python's tarfile do) and commits it; then, when idx_path is not NULL,
** writes the archive's index there (dl_tar_index_save, stamped with the
** committed tar's size and mtime).  Frees w. */
DL_API int dl_tar_writer_finish(dl_tar_writer *w, const char *idx_path);
/* Removes the temporary file and frees w (NULL: nothing). */
DL_API void dl_tar_writer_abort(dl_tar_writer *w);

/* -- Images (JPEG, PNG) --------------------------------------------------- */

/* A file's whole contents as a 1-D uint8 tensor (a regular file only: a
** FIFO or a directory is refused, never waited on).  op starts every
** message ("read_image: cats/1.jpg: cannot open: No such file ..."). */
DL_API dl_tensor *dl_read_file(const char *path, const char *op);

/* What decoding makes of the channels, as torchvision.io.ImageReadMode. */
typedef enum dl_image_mode {
  DL_IMAGE_UNCHANGED = 0,  /* as stored: 1 (gray), 2, 3 (RGB) or 4 */
  DL_IMAGE_GRAY = 1,
  DL_IMAGE_GRAY_ALPHA = 2,
  DL_IMAGE_RGB = 3,
  DL_IMAGE_RGB_ALPHA = 4
} dl_image_mode;
typedef enum dl_image_format { DL_IMAGE_JPEG = 1, DL_IMAGE_PNG = 2 } dl_image_format;
/* The most pixels an image may have (16384 x 16384): a header claiming
** more is corrupt, or a decompression bomb. */
#define DL_IMAGE_MAX_PIXELS ((int64_t)1 << 28)
typedef struct dl_image_header {
  int32_t format;    /* dl_image_format */
  int32_t channels;  /* as stored (a palette PNG: 3, or 4 with transparency) */
  int64_t height, width;
  int32_t bit_depth; /* 8; a PNG's may be 1, 2, 4 or 16 */
  int32_t progressive;
} dl_image_header;
/* Reads the header of the encoded image in bytes (a uint8 CPU tensor) into
** out, decoding nothing.  name names the bytes in messages (a file's path;
** NULL: "the bytes").  DL_EINVAL for a format that is not JPEG or PNG (the
** message names what it is when it can tell: GIF, BMP, WebP, ...), or a
** corrupt or truncated header. */
DL_API int dl_image_header_read(const dl_tensor *bytes, const char *name, dl_image_header *out);
/* Decodes a JPEG or PNG image (found from its first bytes, whatever the
** file is called) into a uint8 [C, H, W] tensor, C from mode.  PNGs of 16
** bits are reduced to their high byte, palettes and low bit depths
** expanded, transparency (tRNS) becomes alpha; gAMA is ignored and alpha
** dropped, not blended, when the mode has none (as torchvision and PIL).
** Gray from color: JPEG's luma; a PNG's by libpng with torchvision's
** weights (0.2989, 0.587, 0.114).  CMYK JPEGs come out as RGB (also in
** DL_IMAGE_UNCHANGED, where torchvision gives the 4 CMYK channels), and
** palette PNGs as RGB (torchvision gives the palette indices).  min_h, min_w > 0 let a
** JPEG be decoded smaller -- by the largest of libjpeg's factors 1/8 ..
** 8/8 that keeps it at least min_h x min_w -- the rest decode in full
** (0, 0: always in full).  A truncated or corrupt image is an error naming
** name, never a partly gray picture. */
DL_API dl_tensor *dl_image_decode(const dl_tensor *bytes, dl_image_mode mode,
                                  int64_t min_h, int64_t min_w, const char *name);
/* An image (uint8 [C, H, W], C = 1, 2, 3 or 4; any strides) as PNG bytes
** (level 0-9, zlib's), or as JPEG bytes (C = 1 or 3; quality 1-100,
** 4:2:0 as libjpeg's default, the same as torchvision's encode_jpeg): a
** new 1-D uint8 tensor. */
DL_API dl_tensor *dl_image_encode_png(const dl_tensor *img, int level);
DL_API dl_tensor *dl_image_encode_jpeg(const dl_tensor *img, int quality);

#if !defined(DL_CDEF) && defined(__cplusplus)
}
#endif

#endif /* DDPLUA_IO_H */
