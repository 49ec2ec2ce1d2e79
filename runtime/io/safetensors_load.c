/*
** safetensors.c -- reading checkpoints in the safetensors format: a strict
** parser of the header, and a memory-mapped file handing out zero-copy
** tensors.  The layout (see safetensors_save.c for the writer) is the
** reference implementation's, Hugging Face's safetensors crate: an 8-byte
** little-endian header length N, N bytes of JSON padded with spaces to a
** multiple of 8, then the raw data.  The reader trusts nothing in the file:
** every length, offset and shape is checked before any byte of data is
** touched.
*/
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/internal.h"
#include "io/safetensors.h"
#include "io/file_map.h"

const char *const st_dtype_names[DL_NDTYPES] = {
    "F32", "F64", "I32", "I64", "U8", "BOOL", "BF16", "F16"};
const int st_dtype_rank[DL_NDTYPES] = {11, 12, 9, 13, 1, 0, 8, 7};

/* -- Messages ------------------------------------------------------------- */

DL_HIDDEN const char *st_show(const char *s) {
  static _Thread_local char bufs[3][96];
  static _Thread_local int next;
  char *b = bufs[next = (next + 1) % 3];
  size_t n = 0;
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (n >= 60) {
      while (n > 0 && ((unsigned char)b[n - 1] & 0xC0) == 0x80) n--;
      if (n > 0 && (unsigned char)b[n - 1] >= 0xC0) n--;  /* cut lead byte */
      memcpy(b + n, "...", 4);
      return b;
    }
    if (*p < 0x20 || *p == 0x7f || *p == '"' || *p == '\\')
      n += (size_t)snprintf(b + n, 8, *p == '"' || *p == '\\' ? "\\%c" : "\\x%02x", *p);
    else
      b[n++] = (char)*p;
  }
  b[n] = 0;
  return b;
}

/* The length of the UTF-8 sequence at p, or 0 when invalid. */
static int utf8_len(const unsigned char *p, const unsigned char *end) {
  unsigned c = p[0], cp, n;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) n = 2, cp = c & 0x1F;
  else if (c >= 0xE0 && c <= 0xEF) n = 3, cp = c & 0x0F;
  else if (c >= 0xF0 && c <= 0xF4) n = 4, cp = c & 0x07;
  else return 0;
  if ((size_t)(end - p) < n) return 0;
  for (unsigned i = 1; i < n; i++) {
    if ((p[i] & 0xC0) != 0x80) return 0;
    cp = cp << 6 | (p[i] & 0x3F);
  }
  if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10FFFF ||
      (cp >= 0xD800 && cp <= 0xDFFF))
    return 0;
  return (int)n;
}

DL_HIDDEN int st_utf8_valid(const char *s) {
  const unsigned char *p = (const unsigned char *)s, *end = p + strlen(s);
  while (p < end) {
    int n = utf8_len(p, end);
    if (!n) return 0;
    p += n;
  }
  return 1;
}

/* -- The mapping, shared by the file handle and its tensors --------------- */

typedef io_file_map st_map;

typedef struct st_entry {
  char *name;
  int dtype, ndim;
  int64_t shape[DL_MAX_DIMS];
  uint64_t begin, end;  /* relative to the end of the header */
} st_entry;

struct dl_st_file {
  char *path;
  st_map *map;
  const char *data;  /* first byte after the header */
  size_t data_size;
  st_entry *t;
  int nt, cap_t;
  char **meta;       /* key, value, key, value, ... */
  int nmeta, cap_meta;
};

DL_API void dl_st_close(dl_st_file *f) {
  if (!f) return;
  for (int i = 0; i < f->nt; i++) free(f->t[i].name);
  for (int i = 0; i < 2 * f->nmeta; i++) free(f->meta[i]);
  free(f->t);
  free(f->meta);
  free(f->path);
  if (f->map) io_map_release(f->map);
  free(f);
}

/* -- JSON header parser ---------------------------------------------------
** Hand-written and schema-driven: the header is one object whose values are
** tensor entries (objects with exactly dtype, shape and data_offsets) or
** the "__metadata__" object of strings.  Nothing recurses and nothing is
** skipped, so a hostile header cannot nest deep or hide data; every string
** is checked UTF-8 without NUL, so names are plain C strings. */

typedef struct jp {
  const unsigned char *s, *p, *end;
  const char *path;
} jp;

static int jerr(const jp *j, const char *what) {
  return dl_err(EM_ST_JSON, "load", j->path, (long long)(j->p - j->s), what);
}

/* What the parser sees at p, for "expected X, found Y". */
static const char *found(const jp *j) {
  static _Thread_local char buf[48];
  if (j->p >= j->end) return "the end of the header";
  int c = *j->p;
  if (c == '"') return "a string";
  if (c == '{') return "an object";
  if (c == '[') return "an array";
  if (c == '-' || (c >= '0' && c <= '9')) return "a number";
  if (c == 't' || c == 'f') return "a boolean";
  if (c == 'n') return "null";
  snprintf(buf, sizeof buf, c > 0x20 && c < 0x7f ? "'%c'" : "byte 0x%02x", c);
  return buf;
}

static void ws(jp *j) {
  while (j->p < j->end &&
         (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
    j->p++;
}

/* Skips whitespace; 1 when the next byte is c (not consumed). */
static int peek(jp *j, int c) {
  ws(j);
  return j->p < j->end && *j->p == c;
}

static int expect(jp *j, int c, const char *what) {
  if (peek(j, c)) {
    j->p++;
    return 0;
  }
  return dl_err(EM_ST_EXPECT, "load", j->path, (long long)(j->p - j->s), what,
                found(j));
}

static int hex4(const unsigned char *p, unsigned *out) {
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    int c = p[i], d = c >= '0' && c <= '9' ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (d < 0) return -1;
    v = v << 4 | (unsigned)d;
  }
  *out = v;
  return 0;
}

/* Appends code point cp as UTF-8; returns the new end. */
static char *utf8_put(char *w, unsigned cp) {
  int n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
  static const unsigned char lead[5] = {0, 0, 0xC0, 0xE0, 0xF0};
  for (int i = n - 1; i > 0; i--, cp >>= 6) w[i] = (char)(0x80 | (cp & 0x3F));
  w[0] = (char)(lead[n] | cp);
  return w + n;
}

/* A string at p (the caller saw the quote) into a new C string. */
static int parse_string(jp *j, char **out) {
  const unsigned char *q = ++j->p;
  const char *why = NULL;
  while (q < j->end && *q != '"') q += *q == '\\' ? 2 : 1;
  if (q >= j->end) return jerr(j, "unterminated string");
  /* decoding never grows the text: an escape takes more bytes than it gives */
  char *o = malloc((size_t)(q - j->p) + 1), *w = o;
  if (!o) return dl_err(EM_NOMEM, "load", (long long)(q - j->p), 0LL);
  while (j->p < q && !why) {
    unsigned c = *j->p, e = j->p[1], cp, lo;
    const char *esc = c == '\\' && e ? strchr("\"\\/bfnrt", (int)e) : NULL;
    int n;
    if (esc) {
      *w++ = "\"\\/\b\f\n\r\t"[esc - "\"\\/bfnrt"];
      j->p += 2;
    } else if (c == '\\') {
      if (e != 'u' || q - j->p < 6 || hex4(j->p + 2, &cp))
        why = "invalid escape in a string";
      else if (cp >= 0xD800 && cp <= 0xDBFF) {  /* a pair: one code point */
        if (q - j->p < 12 || j->p[6] != '\\' || j->p[7] != 'u' ||
            hex4(j->p + 8, &lo) || lo < 0xDC00 || lo > 0xDFFF)
          why = "unpaired surrogate in a \\u escape";
        else
          w = utf8_put(w, 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00)), j->p += 12;
      } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
        why = "unpaired surrogate in a \\u escape";
      } else if (cp == 0) {
        why = "NUL character (\\u0000) in a string";
      } else {
        w = utf8_put(w, cp), j->p += 6;
      }
    } else if (c < 0x20) {
      why = c ? "control character in a string (JSON needs it escaped)"
              : "NUL byte in a string";
    } else if (!(n = utf8_len(j->p, q))) {
      why = "invalid UTF-8 in a string";
    } else {
      memcpy(w, j->p, (size_t)n);
      w += n, j->p += n;
    }
  }
  if (why) {
    free(o);
    return jerr(j, why);
  }
  *w = 0;
  j->p = q + 1;
  *out = o;
  return 0;
}

/* A non-negative integer below 2^63; what names it in messages. */
static int parse_uint(jp *j, const char *what, uint64_t *out) {
  ws(j);
  const unsigned char *a = j->p, *b = a;
  if (b >= j->end || !(*b == '-' || (*b >= '0' && *b <= '9')))
    return dl_err(EM_ST_TYPE, "load", j->path, what,
                  "an array of non-negative integers", found(j));
  while (b < j->end && (strchr("+-.eE", *b) || (*b >= '0' && *b <= '9')) && *b)
    b++;
  uint64_t v = 0;
  int ok = *a != '-' && !(*a == '0' && b - a > 1);
  for (const unsigned char *d = a; ok && d < b; d++) {
    ok = *d >= '0' && *d <= '9' && v <= (UINT64_C(1) << 62) / 5;
    v = v * 10 + (uint64_t)(*d - '0');
  }
  if (!ok || v > (uint64_t)INT64_MAX)
    return dl_err(EM_ST_INT, "load", j->path, what,
                  (int)(b - a < 40 ? b - a : 40), (const char *)a);
  j->p = b;
  *out = v;
  return 0;
}

static int parse_dtype(jp *j, st_entry *e, const char *ctx) {
  char *s;
  if (!peek(j, '"'))
    return dl_err(EM_ST_TYPE, "load", j->path, ctx, "a string such as \"F32\"",
                  found(j));
  if (parse_string(j, &s)) return -1;
  e->dtype = -1;
  for (int d = 0; d < DL_NDTYPES; d++)
    if (!strcmp(s, st_dtype_names[d])) e->dtype = d;
  int rc = e->dtype < 0
               ? dl_err(EM_ST_DTYPE, "load", j->path, st_show(e->name), st_show(s))
               : 0;
  free(s);
  return rc;
}

/* [a, b, ...] into out (at most max, else an error); n gets the count. */
static int parse_uints(jp *j, const char *ctx, uint64_t *out, int max,
                       int *n, const char *expected) {
  if (!peek(j, '['))
    return dl_err(EM_ST_TYPE, "load", j->path, ctx, expected, found(j));
  j->p++;
  *n = 0;
  if (peek(j, ']')) {
    j->p++;
    return 0;
  }
  for (;;) {
    if (*n == max) return -2;  /* the caller names the limit */
    if (parse_uint(j, ctx, &out[(*n)++])) return -1;
    if (peek(j, ']')) {
      j->p++;
      return 0;
    }
    if (expect(j, ',', "',' or ']'")) return -1;
  }
}

enum { HAVE_DTYPE = 1, HAVE_SHAPE = 2, HAVE_OFFSETS = 4 };

static int parse_entry(jp *j, st_entry *e) {
  char ctx[128];
  snprintf(ctx, sizeof ctx, "tensor \"%s\"", st_show(e->name));
  if (!peek(j, '{'))
    return dl_err(EM_ST_TYPE, "load", j->path, ctx,
                  "an object with dtype, shape and data_offsets", found(j));
  j->p++;
  int have = 0;
  while (!peek(j, '}')) {
    char *key, sub[160];
    if (have && expect(j, ',', "',' or '}'")) return -1;
    if (!peek(j, '"')) return expect(j, '"', "a key string");
    if (parse_string(j, &key)) return -1;
    int bit = !strcmp(key, "dtype") ? HAVE_DTYPE
            : !strcmp(key, "shape") ? HAVE_SHAPE
            : !strcmp(key, "data_offsets") ? HAVE_OFFSETS : 0;
    snprintf(sub, sizeof sub, "%s: key", ctx);
    int rc = !bit ? dl_err(EM_ST_KEY, "load", j->path, st_show(e->name), st_show(key))
           : (have & bit) ? dl_err(EM_ST_DUP, "load", j->path, sub, st_show(key)) : 0;
    snprintf(sub, sizeof sub, "%s: %s", ctx, key);
    free(key);
    if (rc || expect(j, ':', "':'")) return -1;
    have |= bit;
    if (bit == HAVE_DTYPE) {
      if (parse_dtype(j, e, sub)) return -1;
    } else if (bit == HAVE_SHAPE) {
      uint64_t s[DL_MAX_DIMS];
      rc = parse_uints(j, sub, s, DL_MAX_DIMS, &e->ndim,
                       "an array of non-negative integers");
      if (rc == -2)
        return dl_err(EM_ST_NDIM, "load", j->path, st_show(e->name), DL_MAX_DIMS);
      if (rc) return -1;
      for (int i = 0; i < e->ndim; i++) e->shape[i] = (int64_t)s[i];
    } else {
      uint64_t o[2];
      int n;
      rc = parse_uints(j, sub, o, 2, &n, "an array [begin, end]");
      if (rc == -1) return -1;
      if (rc || n != 2)
        return dl_err(EM_ST_TYPE, "load", j->path, sub,
                      "an array of 2 integers [begin, end]",
                      rc ? "a longer array" : "a shorter array");
      e->begin = o[0], e->end = o[1];
    }
  }
  j->p++;
  static const char *const keys[] = {"dtype", "shape", "data_offsets"};
  for (int i = 0; i < 3; i++)
    if (!(have & 1 << i))
      return dl_err(EM_ST_MISSING, "load", j->path, st_show(e->name), keys[i]);
  return 0;
}

static int parse_metadata(jp *j, dl_st_file *f) {
  if (!peek(j, '{'))
    return dl_err(EM_ST_TYPE, "load", j->path, "__metadata__",
                  "an object of strings", found(j));
  j->p++;
  int first = 1;
  while (!peek(j, '}')) {
    if (!first && expect(j, ',', "',' or '}'")) return -1;
    first = 0;
    if (!peek(j, '"')) return expect(j, '"', "a key string");
    if (f->nmeta == f->cap_meta) {
      int cap = f->cap_meta ? 2 * f->cap_meta : 8;
      char **m = realloc(f->meta, sizeof *m * 2 * (size_t)cap);
      if (!m) return dl_err(EM_NOMEM, "load", (long long)(16 * cap), 0LL);
      f->meta = m, f->cap_meta = cap;
    }
    char **kv = f->meta + 2 * f->nmeta;
    if (parse_string(j, &kv[0])) return -1;
    kv[1] = NULL;
    f->nmeta++;  /* owned by f from here, so an error frees it */
    if (expect(j, ':', "':'")) return -1;
    if (!peek(j, '"')) {
      char ctx[128];
      snprintf(ctx, sizeof ctx, "__metadata__ value of \"%s\"", st_show(kv[0]));
      return dl_err(EM_ST_TYPE, "load", j->path, ctx, "a string", found(j));
    }
    if (parse_string(j, &kv[1])) return -1;
  }
  j->p++;
  return 0;
}

static int parse_header(jp *j, dl_st_file *f) {
  int have_meta = 0;
  if (!peek(j, '{')) {
    if (j->p < j->end && strchr("\"[-0123456789tfn", *j->p) && *j->p)
      return dl_err(EM_ST_TYPE, "load", j->path, "the header",
                    "a JSON object", found(j));
    return expect(j, '{', "'{'");
  }
  j->p++;
  while (!peek(j, '}')) {
    char *key;
    if ((f->nt || have_meta) && expect(j, ',', "',' or '}'")) return -1;
    if (!peek(j, '"')) return expect(j, '"', "a key string");
    if (parse_string(j, &key)) return -1;
    if (!strcmp(key, "__metadata__")) {
      free(key);
      if (have_meta)
        return dl_err(EM_ST_DUP, "load", j->path, "key", "__metadata__");
      have_meta = 1;
      if (expect(j, ':', "':'") || parse_metadata(j, f)) return -1;
      continue;
    }
    if (f->nt == f->cap_t) {
      int cap = f->cap_t ? 2 * f->cap_t : 16;
      st_entry *t = realloc(f->t, sizeof *t * (size_t)cap);
      if (!t) {
        free(key);
        return dl_err(EM_NOMEM, "load", (long long)(sizeof *t * (size_t)cap), 0LL);
      }
      f->t = t, f->cap_t = cap;
    }
    st_entry *e = memset(&f->t[f->nt++], 0, sizeof *f->t);
    e->name = key;
    if (expect(j, ':', "':'") || parse_entry(j, e)) return -1;
  }
  j->p++;
  ws(j);  /* the reference pads with spaces; anything else is garbage */
  if (j->p < j->end) return jerr(j, "unexpected data after the header's closing '}'");
  return 0;
}

/* -- Validation ----------------------------------------------------------- */

DL_HIDDEN void st_sort(void *base, int n, size_t size,
                       int (*cmp)(const void *, const void *)) {
  if (n > 1) qsort(base, (size_t)n, size, cmp);  /* never qsort(NULL, 0) */
}

static int by_name(const void *a, const void *b) {
  return strcmp(((const st_entry *)a)->name, ((const st_entry *)b)->name);
}

static int by_offsets(const void *pa, const void *pb) {
  const st_entry *a = pa, *b = pb;
  if (a->begin != b->begin) return a->begin < b->begin ? -1 : 1;
  if (a->end != b->end) return a->end < b->end ? -1 : 1;
  return strcmp(a->name, b->name);
}

static int by_key(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Shapes against offsets against the data size; then, as the reference
** does, the tensors must tile the data exactly: no overlap, no gap, nothing
** after the last one. */
static int validate(dl_st_file *f) {
  const char *path = f->path;
  st_sort(f->t, f->nt, sizeof *f->t, by_name);
  for (int i = 1; i < f->nt; i++)
    if (!strcmp(f->t[i - 1].name, f->t[i].name))
      return dl_err(EM_ST_DUP, "load", path, "tensor", st_show(f->t[i].name));
  st_sort(f->meta, f->nmeta, 2 * sizeof *f->meta, by_key);
  for (int i = 1; i < f->nmeta; i++)
    if (!strcmp(f->meta[2 * i - 2], f->meta[2 * i]))
      return dl_err(EM_ST_DUP, "load", path, "__metadata__ key", st_show(f->meta[2 * i]));
  for (int i = 0; i < f->nt; i++) {
    st_entry *e = &f->t[i];
    /* the product of the nonzero sizes is bounded too: strides come from
    ** it, and [0, 2^62, 2^62] would overflow them */
    int64_t nonzero = 1, numel;
    int empty = 0;
    for (int d = 0; d < e->ndim; d++) {
      if (!e->shape[d]) {
        empty = 1;
        continue;
      }
      if (nonzero > (INT64_C(1) << 48) / e->shape[d])
        return dl_err(EM_ST_NUMEL, "load", path, st_show(e->name),
                      fmt_shape(e->shape, e->ndim));
      nonzero *= e->shape[d];
    }
    numel = empty ? 0 : nonzero;
    uint64_t nbytes = (uint64_t)numel * (uint64_t)dl_dtype_sizes[e->dtype];
    unsigned long long b = e->begin, x = e->end;
    if (e->begin > e->end)
      return dl_err(EM_ST_BACKWARDS, "load", path, st_show(e->name), b, x);
    if (e->end - e->begin != nbytes)
      return dl_err(EM_ST_SIZE, "load", path, st_show(e->name), b, x,
                    fmt_shape(e->shape, e->ndim), st_dtype_names[e->dtype],
                    (long long)nbytes);
    if (e->end > f->data_size)
      return dl_err(EM_ST_PAST, "load", path, st_show(e->name), b, x,
                    (long long)f->data_size);
  }
  st_sort(f->t, f->nt, sizeof *f->t, by_offsets);
  uint64_t pos = 0;
  for (int i = 0; i < f->nt; i++) {
    st_entry *e = &f->t[i], *p = i ? e - 1 : NULL;
    if (e->begin < pos)
      return dl_err(EM_ST_OVERLAP, "load", path, st_show(p->name),
                    (unsigned long long)p->begin, (unsigned long long)p->end,
                    st_show(e->name), (unsigned long long)e->begin,
                    (unsigned long long)e->end);
    if (e->begin > pos)
      return dl_err(EM_ST_GAP, "load", path, (unsigned long long)pos,
                    (unsigned long long)e->begin);
    pos = e->end;
  }
  if (pos < f->data_size)
    return dl_err(EM_ST_GAP, "load", path, (unsigned long long)pos,
                  (unsigned long long)f->data_size);
  return 0;
}

/* -- Opening -------------------------------------------------------------- */

DL_HIDDEN dl_st_file *st_open_buffer(void *base, size_t size, int mapped,
                                     const char *name) {
  st_map *m = io_map_new(base, size, mapped);
  dl_st_file *f = calloc(1, sizeof *f);
  char *path = strdup(name ? name : "?");
  if (!f || !m || !path) {
    free(f), free(path);
    io_map_release(m);
    return dl_errp(EM_NOMEM, "load", (long long)sizeof *f, 0LL);
  }
  f->map = m, f->path = path;
  const unsigned char *b = base;
  if (size < 8) {
    dl_err(EM_ST_SHORT, "load", path, (long long)size);
    goto fail;
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; i--) n = n << 8 | b[i];
  if (n > ST_MAX_HEADER) {
    dl_err(EM_ST_HDR_BIG, "load", path, (unsigned long long)n, ST_MAX_HEADER);
    goto fail;
  }
  if (n > size - 8) {
    dl_err(EM_ST_HDR_PAST, "load", path, (unsigned long long)n,
           (long long)(size - 8));
    goto fail;
  }
  jp j = {b + 8, b + 8, b + 8 + n, path};
  f->data = (const char *)b + 8 + n;
  f->data_size = size - 8 - n;
  if (parse_header(&j, f) || validate(f)) goto fail;
  return f;
fail:
  dl_st_close(f);
  return NULL;
}

DL_API dl_st_file *dl_st_open(const char *path) {
  if (!path) return dl_errp(EM_NULLARG, "load", "path");
  /* O_NONBLOCK: opening a FIFO must not hang; it is refused below */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    return dl_errp(EM_ST_OS, "load", path, "cannot open", strerror(errno));
  struct stat st;
  if (fstat(fd, &st)) {
    int e = errno;
    close(fd);
    return dl_errp(EM_ST_OS, "load", path, "cannot stat", strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return dl_errp(EM_ST_NOT_FILE, "load", path);
  }
  size_t size = (size_t)st.st_size;
  if (size < 8) {
    close(fd);
    return dl_errp(EM_ST_SHORT, "load", path, (long long)size);
  }
  /* private and writable: a loaded tensor can be changed in place, the
  ** kernel copying the pages touched, and the file never sees it */
  int mapped = 1;
  void *base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  if (base == MAP_FAILED) {
    mapped = 0;
    base = io_read_whole(fd, size);
  }
  int e = errno;
  close(fd);
  if (!base) return dl_errp(EM_ST_OS, "load", path, "cannot read", strerror(e));
  return st_open_buffer(base, size, mapped, path);
}

DL_API int dl_st_count(const dl_st_file *f) { return f ? f->nt : 0; }
DL_API const char *dl_st_name(const dl_st_file *f, int i) {
  return f && i >= 0 && i < f->nt ? f->t[i].name : NULL;
}
DL_API int dl_st_meta_count(const dl_st_file *f) { return f ? f->nmeta : 0; }
DL_API const char *dl_st_meta_key(const dl_st_file *f, int i) {
  return f && i >= 0 && i < f->nmeta ? f->meta[2 * i] : NULL;
}
DL_API const char *dl_st_meta_value(const dl_st_file *f, int i) {
  return f && i >= 0 && i < f->nmeta ? f->meta[2 * i + 1] : NULL;
}

DL_API dl_tensor *dl_st_tensor(dl_st_file *f, int i) {
  if (!f) return dl_errp(EM_NULLARG, "load", "file");
  if (i < 0 || i >= f->nt) return dl_errp(EM_ST_INDEX, "load", i, f->nt);
  const st_entry *e = &f->t[i];
  char *p = (char *)f->data + e->begin;
  size_t nbytes = (size_t)(e->end - e->begin);
  /* Another writer's header length need not be a multiple of 8; a view
  ** whose elements straddle their alignment would break vector loads. */
  if ((uintptr_t)p % (uintptr_t)dl_dtype_sizes[e->dtype]) {
    dl_tensor *t = tensor_new(e->dtype, e->shape, e->ndim);
    if (t) memcpy(t->storage->data, p, nbytes);
    return t;
  }
  atomic_fetch_add(&f->map->refs, 1);
  dl_tensor *t = dl_from_blob(p, e->dtype, e->shape, NULL, e->ndim,
                              io_map_deleter, f->map);
  if (!t) io_map_release(f->map);
  return t;
}
