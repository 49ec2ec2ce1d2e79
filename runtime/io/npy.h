/*
** npy.h -- what the .npy reader and writer (npy.c) and the .npz container
** (npz.c) share: the mapped file, the parsed header, and the pieces a
** member of a zip needs one at a time (it may be inflated, not mapped).
*/
#ifndef DL_NPY_H
#define DL_NPY_H

#include <stddef.h>

#include "core/internal.h"

/* A header longer than this is corruption (numpy itself refuses more than
** 10000 bytes without allow_pickle): parsing it would cost without bound. */
enum { NPY_MAX_HEADER = 1 << 20 };
/* The bytes np.save's header takes at most for 8 dims (about 400). */
enum { NPY_HEAD_CAP = 1024 };

/* -- The file, mapped (or read) once, shared with the tensors viewing it -- */

#include "io/file_map.h"

typedef io_file_map npy_map;

/* Maps path copy-on-write (private, writable, no swap reserved: a loaded
** tensor may be written, the file never is), or reads it where it cannot be
** mapped.  NULL with the error set, op and path in the message. */
DL_HIDDEN npy_map *npy_map_file(const char *op, const char *path);

/* -- The header -------------------------------------------------------------- */

typedef struct npy_hdr {
  int dtype;            /* the tensor's */
  int kind;             /* the file's element type (npy.c's table) */
  int swap;             /* big-endian elements of more than one byte */
  int fortran;          /* fortran_order=True */
  int ndim;
  int64_t shape[DL_MAX_DIMS];
  int64_t numel;
  uint64_t header;      /* bytes before the data: preamble and dict */
  uint64_t nbytes;      /* bytes of data in the file */
} npy_hdr;

/* The preamble in p[0, avail) of a .npy whose length is total (avail may be
** less, when the rest is still compressed: 12 bytes are enough): *header
** gets the bytes before the data.  what: "file" or "member", for messages;
** name: the file (or "a.npz (member x.npy)"). */
DL_HIDDEN int npy_preamble(const unsigned char *p, size_t avail, uint64_t total,
                           const char *op, const char *name, uint64_t *header);
/* The header in p[0, avail) (avail: at least the header's bytes; the
** preamble is checked again), checked against total: the data must be
** exactly what the shape needs. */
DL_HIDDEN int npy_parse(const unsigned char *p, uint64_t avail, uint64_t total,
                        const char *op, const char *name, const char *what,
                        npy_hdr *h);

/* NumPy's name of the file's dtype ("int16"), for messages. */
DL_HIDDEN const char *npy_kind_name(const npy_hdr *h);

/* -- The tensor ---------------------------------------------------------- */

/* A new tensor for h (uninitialised): row-major, or column-major strides
** for a Fortran-order file, its storage laid out as the file's data. */
DL_HIDDEN dl_tensor *npy_alloc(const npy_hdr *h);
/* Whether the file's elements differ from the tensor's (swapped, widened). */
DL_HIDDEN int npy_converts(const npy_hdr *h);
/* The file's h->numel elements at src into the tensor's at dst; dst may be
** src (converted in place: the storage of npy_alloc holds the raw bytes). */
DL_HIDDEN void npy_convert(const npy_hdr *h, void *dst, const void *src);
/* The tensor for h from its data at p: a view of map's memory when map is
** given, p is aligned and nothing converts; otherwise a copy. */
DL_HIDDEN dl_tensor *npy_tensor(const npy_hdr *h, const unsigned char *p, npy_map *map);

/* -- Writing ----------------------------------------------------------------- */

typedef struct npy_out {
  unsigned char head[NPY_HEAD_CAP];
  size_t head_len;
  int fortran;
  uint64_t nbytes;      /* data bytes after the header */
} npy_out;

/* np.save's header for t, byte for byte; the dtype checked.  name: the
** file, for messages. */
DL_HIDDEN int npy_prepare(const dl_tensor *t, const char *op, const char *name, npy_out *o);
/* t's elements on the host, contiguous in the file's order (o->fortran):
** t itself (a new reference) when it is already so. */
DL_HIDDEN dl_tensor *npy_host_data(const dl_tensor *t, const npy_out *o);

#endif
