/*
** io/npy.c -- NumPy's .npy files: the header read by a small strict parser
** (a Python dict literal, never evaluated), the file's dtype mapped to
** ours, the data viewed in place in the mapped file or copied (converted
** where the dtype or byte order differs); and the writer, which gives
** np.save's bytes exactly.
**
** The format (numpy/lib/format.py): "\x93NUMPY", major and minor version
** bytes, the header length (2 bytes little-endian in 1.0, 4 in 2.0 and
** 3.0), then the header: "{'descr': '<f4', 'fortran_order': False,
** 'shape': (3, 4), }", spaces and a newline, padded so the data starts at
** a multiple of 64 bytes.  A file is untrusted input: every length is
** checked against what the file holds before a byte of data is touched.
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
#include "io/npy.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the .npy reader and writer take native order for little-endian"
#endif

/* -- The mapped file ---------------------------------------------------------- */

DL_HIDDEN npy_map *npy_map_file(const char *op, const char *path) {
  if (!path) return dl_errp(EM_NULLARG, op, "path");
  /* O_NONBLOCK: opening a FIFO must not hang; it is refused below */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return dl_errp(EM_NPY_OS, op, path, "cannot open", strerror(errno));
  struct stat st;
  if (fstat(fd, &st)) {
    int e = errno;
    close(fd);
    return dl_errp(EM_NPY_OS, op, path, "cannot stat", strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return dl_errp(EM_NPY_NOT_FILE, op, path);
  }
  size_t size = (size_t)st.st_size;
  void *base = NULL;
  int mapped = 0;
  if (size) {
    /* MAP_NORESERVE: a private writable mapping of a 10 GB file must not
    ** be charged 10 GB of swap up front; only pages written are copied */
    base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_NORESERVE, fd, 0);
    mapped = base != MAP_FAILED;
    if (!mapped) base = io_read_whole(fd, size);
  }
  int e = errno;
  close(fd);
  if (size && !base) return dl_errp(EM_NPY_OS, op, path, "cannot read", strerror(e));
  npy_map *m = io_map_new(base, size, mapped);
  if (!m) return dl_errp(EM_NOMEM, op, (long long)sizeof *m, (long long)dl_mem_allocated());
  return m;
}

/* -- dtypes -------------------------------------------------------------------- */

/* The file's element types we read: code and size as in a descr ('<f4'),
** the tensor's dtype, NumPy's name.  int8, int16 and uint16 widen to int32
** and uint32 to int64 (ddplua has none of them, as the IDX reader). */
typedef struct npy_kind {
  char code;
  int size;
  int dtype;
  const char *name;
} npy_kind;

static const npy_kind kinds[] = {
  {'f', 4, DL_FLOAT32, "float32"}, {'f', 8, DL_FLOAT64, "float64"},
  {'f', 2, DL_FLOAT16, "float16"}, {'i', 8, DL_INT64, "int64"},
  {'i', 4, DL_INT32, "int32"},     {'u', 1, DL_UINT8, "uint8"},
  {'b', 1, DL_BOOL, "bool"},       {'i', 2, DL_INT32, "int16"},
  {'i', 1, DL_INT32, "int8"},      {'u', 2, DL_INT32, "uint16"},
  {'u', 4, DL_INT64, "uint32"},
};
enum { NKINDS = sizeof kinds / sizeof kinds[0] };

/* What NumPy calls a descr we do not read, for the message. */
static const char *numpy_name(char code, int size, char *buf, size_t cap) {
  if (size <= 0 && code && strchr("fciu", code)) return "not a NumPy dtype";
  switch (code) {
  case 'f': snprintf(buf, cap, size == 16 || size == 12 ? "longdouble" : "float%d", 8 * size); break;
  case 'c': snprintf(buf, cap, size == 32 || size == 24 ? "clongdouble" : "complex%d", 8 * size); break;
  case 'i': snprintf(buf, cap, "int%d", 8 * size); break;
  case 'u': snprintf(buf, cap, "uint%d", 8 * size); break;
  case 'O': return "object: pickled Python objects";
  case 'S': case 'a': return "bytes";
  case 'U': return "str";
  case 'V': return "void: raw bytes, or a type NumPy does not know such as bfloat16";
  case 'M': return "datetime64";
  case 'm': return "timedelta64";
  default: return "not a NumPy dtype";
  }
  return buf;
}

/* Finds descr's kind; -1 with the error set. */
static int find_kind(const char *descr, const char *op, const char *name, int *swap) {
  *swap = 0;
  for (int k = 0; k < NKINDS; k++)  /* a name np.dtype takes too: 'float32' */
    if (!strcmp(descr, kinds[k].name)) return k;
  const char *p = descr;
  int big = 0;
  if (*p && strchr("<>|=", *p)) big = *p++ == '>';
  char code = *p ? *p++ : 0;
  int size = 0, digits = 0;
  /* one-letter codes: '?' is bool, 'b' int8 and 'B' uint8 (np.dtype's) */
  if (!*p && (code == '?' || code == 'b' || code == 'B'))
    size = 1, code = code == '?' ? 'b' : code == 'b' ? 'i' : 'u';
  while (*p >= '0' && *p <= '9' && digits < 6) size = size * 10 + (*p++ - '0'), digits++;
  if (!*p && size > 0) {
    for (int k = 0; k < NKINDS; k++)
      if (kinds[k].code == code && kinds[k].size == size) {
        *swap = big && size > 1;
        return k;
      }
  }
  char buf[40];
  return dl_err(EM_NPY_DTYPE, op, name, descr, numpy_name(code, size, buf, sizeof buf));
}

/* -- Messages ------------------------------------------------------------------ */

/* Bytes from a file, fit for a message: printable ASCII as is, the rest as
** \xNN, quotes and backslashes escaped, at most max bytes shown.  Two
** rotating buffers. */
static const char *show_bytes(const unsigned char *s, size_t n, size_t max) {
  static _Thread_local char bufs[2][4 * 120 + 8];
  static _Thread_local int next;
  char *b = bufs[next = (next + 1) % 2], *w = b;
  if (max > 120) max = 120;
  for (size_t i = 0; i < n && i < max; i++) {
    unsigned c = s[i];
    if (c == '"' || c == '\\') *w++ = '\\', *w++ = (char)c;
    else if (c >= 0x20 && c < 0x7f) *w++ = (char)c;
    else w += snprintf(w, 5, "\\x%02x", c);
  }
  if (n > max) memcpy(w, "...", 3), w += 3;
  *w = 0;
  return b;
}

/* -- The preamble and the dict ------------------------------------------------ */

static uint32_t le_u32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

DL_HIDDEN int npy_preamble(const unsigned char *p, size_t avail, uint64_t total,
                           const char *op, const char *name, uint64_t *header) {
  static const unsigned char magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  size_t m = avail < 6 ? avail : 6;
  if (m && memcmp(p, magic, m))
    return dl_err(EM_NPY_MAGIC, op, name, show_bytes(p, avail < 8 ? avail : 8, 8),
                  avail >= 2 && p[0] == 'P' && p[1] == 'K' ? " (a zip archive: a .npz? load it with load_npz)" : "");
  if (total < 10) return dl_err(EM_NPY_TRUNC, op, name, "preamble", (long long)total, 10LL);
  int major = p[6], minor = p[7];
  if (major < 1 || major > 3 || minor != 0)
    return dl_err(EM_NPY_VERSION, op, name, major, minor);
  uint64_t lenbytes = major == 1 ? 2 : 4;
  if (total < 8 + lenbytes)
    return dl_err(EM_NPY_TRUNC, op, name, "preamble", (long long)total, (long long)(8 + lenbytes));
  uint64_t n = major == 1 ? (uint64_t)(p[8] | p[9] << 8) : le_u32(p + 8);
  if (n > NPY_MAX_HEADER) return dl_err(EM_NPY_HDR_BIG, op, name, (long long)n, NPY_MAX_HEADER);
  if (8 + lenbytes + n > total)
    return dl_err(EM_NPY_TRUNC, op, name, "header", (long long)total, (long long)(8 + lenbytes + n));
  *header = 8 + lenbytes + n;
  return 0;
}

/* The dict, as Python's literal syntax writes it (ast.literal_eval is what
** numpy reads it with): strings in either quote, True/False, a tuple of
** non-negative ints (a trailing 'L' as Python 2 wrote them), trailing
** commas, any whitespace; nothing else. */
typedef struct hp {
  const unsigned char *s, *p, *end;
  const char *op, *name;
} hp;

static int herr(const hp *h, const char *what) {
  return dl_err(EM_NPY_HDR, h->op, h->name, (int)(h->p - h->s), what,
                show_bytes(h->s, (size_t)(h->end - h->s), 100));
}

static void ws(hp *h) {
  while (h->p < h->end && strchr(" \t\n\r\f\v", *h->p) && *h->p) h->p++;
}

static int at(hp *h, int c) {
  ws(h);
  return h->p < h->end && *h->p == c;
}

/* A quoted string into out (at most cap - 1 bytes kept, the rest cut). */
static int parse_str(hp *h, char *out, size_t cap) {
  ws(h);
  if (h->p >= h->end || (*h->p != '\'' && *h->p != '"')) return herr(h, "expected a quoted string");
  int q = *h->p++;
  size_t n = 0;
  while (h->p < h->end && *h->p != q) {
    int c = *h->p++;
    if (c == '\\') {
      if (h->p >= h->end || !strchr("\\'\"", *h->p) || !*h->p) return herr(h, "an escape other than \\\\, \\' or \\\" in a string");
      c = *h->p++;
    }
    if (c == '\n') return herr(h, "a line break in a string");
    if (n + 1 < cap) out[n++] = (char)c;
  }
  if (h->p >= h->end) return herr(h, "an unterminated string");
  h->p++;
  out[n] = 0;
  return 0;
}

/* A word (True, False) at p, ending where a name would. */
static int word(hp *h, const char *w) {
  size_t n = strlen(w);
  ws(h);
  if ((size_t)(h->end - h->p) < n || memcmp(h->p, w, n)) return 0;
  const unsigned char *q = h->p + n;
  if (q < h->end && (*q == '_' || (*q >= '0' && *q <= '9') || ((*q | 32) >= 'a' && (*q | 32) <= 'z'))) return 0;
  h->p = q;
  return 1;
}

static int parse_shape(hp *h, npy_hdr *x) {
  if (!at(h, '(')) {
    if (at(h, '[')) return herr(h, "the shape must be a tuple, (3, 4), not a list");
    return herr(h, "the shape must be a tuple of ints such as (3, 4)");
  }
  h->p++;
  int n = 0, commas = 0;
  while (!at(h, ')')) {
    if (n > commas) return herr(h, "expected ',' or ')' in the shape");
    if (at(h, '-')) return herr(h, "a negative size in the shape");
    if (h->p >= h->end || *h->p < '0' || *h->p > '9') return herr(h, "expected an int in the shape");
    uint64_t v = 0;
    while (h->p < h->end && *h->p >= '0' && *h->p <= '9') {
      if (v > (UINT64_C(1) << 62) / 10) return herr(h, "a size in the shape too large for 64 bits");
      v = v * 10 + (uint64_t)(*h->p++ - '0');
    }
    if (h->p < h->end && (*h->p == 'L' || *h->p == 'l')) h->p++;
    if (n < DL_MAX_DIMS) x->shape[n] = (int64_t)v;
    n++;
    if (at(h, ',')) h->p++, commas++;
  }
  h->p++;
  if (n == 1 && !commas)
    return herr(h, "the shape (n) is an int in Python, not a tuple: a 1-dim shape is written (n,)");
  if (n > DL_MAX_DIMS) return dl_err(EM_NPY_NDIM, h->op, h->name, n);
  x->ndim = n;
  return 0;
}

enum { HAVE_DESCR = 1, HAVE_FORTRAN = 2, HAVE_SHAPE = 4 };

static int parse_dict(hp *h, npy_hdr *x, char *descr, size_t cap) {
  if (!at(h, '{')) return herr(h, "expected '{'");
  h->p++;
  int have = 0;
  while (!at(h, '}')) {
    char key[64], why[160];
    if (parse_str(h, key, sizeof key)) return -1;
    int bit = !strcmp(key, "descr") ? HAVE_DESCR : !strcmp(key, "fortran_order") ? HAVE_FORTRAN
            : !strcmp(key, "shape") ? HAVE_SHAPE : 0;
    if (!bit || (have & bit)) {
      snprintf(why, sizeof why, bit ? "it gives '%s' twice" : "it has the key '%s'", show_bytes((const unsigned char *)key, strlen(key), 40));
      return dl_err(EM_NPY_KEYS, h->op, h->name, why);
    }
    have |= bit;
    if (!at(h, ':')) return herr(h, "expected ':' after a key");
    h->p++;
    if (bit == HAVE_DESCR) {
      if (at(h, '[')) return dl_err(EM_NPY_STRUCT, h->op, h->name);
      if (parse_str(h, descr, cap)) return -1;
    } else if (bit == HAVE_FORTRAN) {
      if (word(h, "True")) x->fortran = 1;
      else if (word(h, "False")) x->fortran = 0;
      else return herr(h, "fortran_order must be True or False");
    } else if (parse_shape(h, x)) {
      return -1;
    }
    if (!at(h, ',')) {
      if (!at(h, '}')) return herr(h, "expected ',' or '}' after a value");
      break;
    }
    h->p++;
  }
  h->p++;
  ws(h);
  if (h->p < h->end) return herr(h, "text after the dict's closing '}'");
  static const char *const keys[] = {"descr", "fortran_order", "shape"};
  for (int i = 0; i < 3; i++)
    if (!(have & 1 << i)) {
      char why[64];
      snprintf(why, sizeof why, "'%s' is missing", keys[i]);
      return dl_err(EM_NPY_KEYS, h->op, h->name, why);
    }
  return 0;
}

DL_HIDDEN int npy_parse(const unsigned char *p, uint64_t avail, uint64_t total,
                        const char *op, const char *name, const char *what,
                        npy_hdr *x) {
  uint64_t hl;
  memset(x, 0, sizeof *x);
  if (npy_preamble(p, (size_t)avail, total, op, name, &hl)) return -1;
  if (hl > avail) return dl_err(EM_NPY_TRUNC, op, name, "header", (long long)avail, (long long)hl);
  size_t pre = p[6] == 1 ? 10 : 12;
  hp h = {p + pre, p + pre, p + hl, op, name};
  char descr[48];
  if (parse_dict(&h, x, descr, sizeof descr)) return -1;
  x->kind = find_kind(descr, op, name, &x->swap);
  if (x->kind < 0) return -1;
  x->dtype = kinds[x->kind].dtype;
  /* the runtime's own limit (check_shape), on the product of the nonzero
  ** sizes too: strides come from it, and (0, 2**62, 2**62) would overflow */
  int64_t nonzero = 1;
  int empty = 0;
  for (int d = 0; d < x->ndim; d++) {
    if (!x->shape[d]) {
      empty = 1;
      continue;
    }
    if (nonzero > (INT64_C(1) << 48) / x->shape[d])
      return dl_err(EM_NPY_NUMEL, op, name, fmt_shape(x->shape, x->ndim));
    nonzero *= x->shape[d];
  }
  x->numel = empty ? 0 : nonzero;
  x->header = hl;
  x->nbytes = (uint64_t)x->numel * (uint64_t)kinds[x->kind].size;
  uint64_t have = total - hl;
  if (have != x->nbytes)
    return dl_err(have < x->nbytes ? EM_NPY_SHORT : EM_NPY_LONG, op, name, fmt_shape(x->shape, x->ndim),
                  kinds[x->kind].name, (long long)x->nbytes, (long long)hl, what, (long long)have);
  return 0;
}

DL_HIDDEN const char *npy_kind_name(const npy_hdr *h) { return kinds[h->kind].name; }

/* -- The tensor ------------------------------------------------------------------ */

/* Column-major strides: what torch.from_numpy gives for a Fortran array. */
static void fortran_strides(const npy_hdr *h, int64_t *st) {
  int64_t s = 1;
  for (int d = 0; d < h->ndim; d++) {
    st[d] = s;
    s *= h->shape[d] ? h->shape[d] : 1;
  }
}

DL_HIDDEN dl_tensor *npy_alloc(const npy_hdr *h) {
  dl_tensor *t = tensor_new(h->dtype, h->shape, h->ndim);
  if (t && h->fortran) fortran_strides(h, t->stride);  /* a fresh header: ours to lay out */
  return t;
}

DL_HIDDEN int npy_converts(const npy_hdr *h) {
  return h->swap || kinds[h->kind].size != dl_dtype_sizes[h->dtype];
}

/* Backwards, so dst may be src: element i's result covers only bytes that
** elements >= i came from, and those are converted already. */
DL_HIDDEN void npy_convert(const npy_hdr *h, void *dst, const void *src) {
  const npy_kind *k = &kinds[h->kind];
  int ks = k->size, ds = dl_dtype_sizes[h->dtype], sign = k->code == 'i';
  const unsigned char *s = src;
  unsigned char *o = dst;
  for (int64_t i = h->numel - 1; i >= 0; i--) {
    unsigned char b[8];
    const unsigned char *e = s + i * ks;
    for (int j = 0; j < ks; j++) b[j] = e[h->swap ? ks - 1 - j : j];
    if (ds == ks) {
      memcpy(o + i * ds, b, (size_t)ds);
      continue;
    }
    int64_t v;
    if (ks == 1) {
      v = sign ? (int64_t)(int8_t)b[0] : (int64_t)b[0];
    } else if (ks == 2) {
      uint16_t u;
      memcpy(&u, b, 2);
      v = sign ? (int64_t)(int16_t)u : (int64_t)u;
    } else {
      uint32_t u;
      memcpy(&u, b, 4);
      v = sign ? (int64_t)(int32_t)u : (int64_t)u;
    }
    if (ds == 4) {
      int32_t w = (int32_t)v;
      memcpy(o + i * 4, &w, 4);
    } else {
      memcpy(o + i * 8, &v, 8);
    }
  }
}

DL_HIDDEN dl_tensor *npy_tensor(const npy_hdr *h, const unsigned char *p, npy_map *map) {
  int es = dl_dtype_sizes[h->dtype];
  if (map && h->numel && !npy_converts(h) && (uintptr_t)p % (uintptr_t)es == 0) {
    int64_t st[DL_MAX_DIMS];
    if (h->fortran) fortran_strides(h, st);
    atomic_fetch_add(&map->refs, 1);
    dl_tensor *t = dl_from_blob((void *)p, h->dtype, h->shape, h->fortran ? st : NULL, h->ndim,
                                io_map_deleter, map);
    if (!t) io_map_release(map);
    return t;
  }
  dl_tensor *t = npy_alloc(h);
  if (!t || !h->numel) return t;
  if (npy_converts(h))
    npy_convert(h, t->storage->data, p);
  else
    memcpy(t->storage->data, p, (size_t)h->nbytes);
  return t;
}

DL_API dl_tensor *dl_npy_load(const char *path, int map) {
  const char *op = "load_npy";
  npy_map *m = npy_map_file(op, path);
  if (!m) return NULL;
  npy_hdr h;
  dl_tensor *t = NULL;
  if (npy_parse(m->base, m->size, m->size, op, path, "file", &h) == 0)
    t = npy_tensor(&h, (const unsigned char *)m->base + h.header, map ? m : NULL);
  io_map_release(m);
  return t;
}

/* -- Writing ------------------------------------------------------------------- */

static const char *const descrs[DL_NDTYPES] = {
  [DL_FLOAT32] = "<f4", [DL_FLOAT64] = "<f8", [DL_INT32] = "<i4", [DL_INT64] = "<i8",
  [DL_UINT8] = "|u1", [DL_BOOL] = "|b1", [DL_FLOAT16] = "<f2",
};

/* NumPy's contiguity flags: size-1 dims do not count, and an empty array is
** both; Fortran order is the one with the first dim fastest. */
static int is_layout(const dl_tensor *t, int fortran) {
  if (!dl_tensor_numel(t)) return 1;
  int64_t s = 1;
  for (int k = 0; k < t->ndim; k++) {
    int i = fortran ? k : t->ndim - 1 - k;
    if (t->shape[i] == 1) continue;
    if (t->stride[i] != s) return 0;
    s *= t->shape[i];
  }
  return 1;
}

DL_HIDDEN int npy_prepare(const dl_tensor *t, const char *op, const char *name, npy_out *o) {
  int rc = check_tensor_any(op, t);
  if (rc) return rc;
  if (t->dtype == DL_BFLOAT16) return dl_err(EM_NPY_BF16, op, name);
  /* np.save: isfortran = a.flags.f_contiguous and not a.flags.c_contiguous */
  o->fortran = !is_layout(t, 0) && is_layout(t, 1);
  char d[NPY_HEAD_CAP], *w = d;
  w += sprintf(w, "{'descr': '%s', 'fortran_order': %s, 'shape': (", descrs[t->dtype],
               o->fortran ? "True" : "False");
  for (int i = 0; i < t->ndim; i++)
    w += sprintf(w, i ? ", %lld" : "%lld", (long long)t->shape[i]);
  w += sprintf(w, t->ndim == 1 ? ",), }" : "), }");
  /* numpy leaves room to grow the header in place: the growth axis (the
  ** first dim, the last in Fortran order) may get up to 21 digits */
  if (t->ndim) {
    char num[24];
    int len = snprintf(num, sizeof num, "%lld", (long long)t->shape[o->fortran ? t->ndim - 1 : 0]);
    for (int i = len; i < 21; i++) *w++ = ' ';
  }
  size_t hlen = (size_t)(w - d) + 1;  /* and the newline */
  /* padded so magic, version, length and header end on a 64-byte boundary;
  ** version 2.0 only when the length does not fit 1.0's 2 bytes */
  size_t lenbytes = 2, pad = 64 - (8 + lenbytes + hlen) % 64;
  if (hlen + pad > 65535) lenbytes = 4, pad = 64 - (8 + lenbytes + hlen) % 64;
  size_t field = hlen + pad;
  unsigned char *h = o->head;
  memcpy(h, "\x93NUMPY", 6);
  h[6] = lenbytes == 2 ? 1 : 2;
  h[7] = 0;
  for (size_t i = 0; i < lenbytes; i++) h[8 + i] = (unsigned char)(field >> (8 * i));
  size_t at = 8 + lenbytes;
  memcpy(h + at, d, hlen - 1);
  memset(h + at + hlen - 1, ' ', pad);
  h[at + hlen - 1 + pad] = '\n';
  o->head_len = at + field;
  o->nbytes = (uint64_t)dl_tensor_numel(t) * (uint64_t)dl_dtype_sizes[t->dtype];
  return 0;
}

DL_HIDDEN dl_tensor *npy_host_data(const dl_tensor *t, const npy_out *o) {
  /* Fortran order's bytes are the C-order bytes of the dims reversed */
  dl_tensor *src = (dl_tensor *)t;
  if (o->fortran) {
    int64_t shape[DL_MAX_DIMS], stride[DL_MAX_DIMS];
    for (int i = 0; i < t->ndim; i++)
      shape[i] = t->shape[t->ndim - 1 - i], stride[i] = t->stride[t->ndim - 1 - i];
    src = tensor_alias(t, shape, stride, t->ndim, t->offset);
    if (!src) return NULL;
  } else {
    dl_tensor_retain(src);
  }
  dl_tensor *h = dl_to_device(src, -1), *c = h ? dl_contiguous(h) : NULL;
  dl_tensor_release(h);
  dl_tensor_release(src);
  return c;
}

DL_API int dl_npy_save(const char *path, const dl_tensor *t) {
  const char *op = "save_npy";
  if (!path) return dl_err(EM_NULLARG, op, "path");
  npy_out o;
  int rc = npy_prepare(t, op, path, &o);
  if (rc) return rc;
  dl_tensor *c = npy_host_data(t, &o);
  if (!c) return dl_last_error_code();
  dl_file *f = dl_file_create(path, (int64_t)(o.head_len + o.nbytes), op);
  rc = f ? dl_file_write(f, o.head, o.head_len) : dl_last_error_code();
  if (!rc && o.nbytes) rc = dl_file_write(f, tensor_first(c), (size_t)o.nbytes);
  dl_tensor_release(c);
  if (f && rc) dl_file_abort(f);
  else if (f) rc = dl_file_commit(f);
  return rc;
}
