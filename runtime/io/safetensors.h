/*
** safetensors.h -- what the safetensors reader (safetensors.c), writer
** (safetensors_save.c) and fuzzer (tests/fuzz/fuzz_safetensors.c) share.
*/
#ifndef DL_SAFETENSORS_H
#define DL_SAFETENSORS_H

#include <stddef.h>

#include "core/internal.h"

/* The reference reader's limit: a bigger header is corruption, and parsing
** it would allocate without bound. */
enum { ST_MAX_HEADER = 100000000 };

/* Our dtypes' names in the file, and their rank in the reference's Dtype
** enum, which orders tensors on save (largest alignment first). */
extern const char *const st_dtype_names[DL_NDTYPES];
extern const int st_dtype_rank[DL_NDTYPES];

/* Parses and validates the safetensors file held in base[0, size).  Takes
** ownership of base in every case: munmap(base, size) when mapped, free(base)
** otherwise, once the file and all its tensors are gone (at once on error).
** name is what messages call the file.  NULL with the error set. */
DL_HIDDEN dl_st_file *st_open_buffer(void *base, size_t size, int mapped,
                                     const char *name);

/* A name from a file or a caller, fit for a message: at most 60 bytes,
** control characters, quotes and backslashes escaped.  Rotating buffers, so
** one message can show two names. */
DL_HIDDEN const char *st_show(const char *s);
/* Strict UTF-8: no overlong forms, surrogates or code points past U+10FFFF
** (JSON text must be UTF-8). */
DL_HIDDEN int st_utf8_valid(const char *s);
/* qsort, also for n == 0 with a NULL base. */
DL_HIDDEN void st_sort(void *base, int n, size_t size,
                       int (*cmp)(const void *, const void *));

#endif
