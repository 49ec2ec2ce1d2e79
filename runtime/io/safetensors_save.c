/*
** safetensors_save.c -- the safetensors format writer: names and metadata
** checked, the JSON header laid out as the reference implementation does
** (tensors sorted by descending dtype alignment, then by name, so each
** starts aligned), then the tensors' bytes, all through the atomic file
** writer (atomic_file.c), which owns the temporary file, fsync and rename.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "io/safetensors.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data is little-endian; the writer copies memory as is"
#endif

/* -- The header ----------------------------------------------------------- */

typedef struct sbuf {
  char *p;
  size_t n, cap;
  int oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
  if (b->oom) return;
  if (b->n + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->n + n + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
      b->oom = 1;
      return;
    }
    b->p = p, b->cap = cap;
  }
  memcpy(b->p + b->n, s, n);
  b->n += n;
}

static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

/* A JSON string as serde_json writes it (the reference's encoder): quote,
** backslash and control characters escaped, UTF-8 as is. */
static void sb_json(sbuf *b, const char *s) {
  sb_put(b, "\"", 1);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    char esc[8];
    const char *named = strchr("\"\\\b\f\n\r\t", *p);
    if (named)
      snprintf(esc, sizeof esc, "\\%c", "\"\\bfnrt"[named - "\"\\\b\f\n\r\t"]);
    else if (*p < 0x20)
      snprintf(esc, sizeof esc, "\\u%04x", *p);
    else
      esc[0] = (char)*p, esc[1] = 0;
    sb_str(b, esc);
  }
  sb_put(b, "\"", 1);
}

typedef struct save_item {
  const char *name;
  dl_tensor *t;
  uint64_t nbytes;
} save_item;

static int by_rank_name(const void *pa, const void *pb) {
  const save_item *a = pa, *b = pb;
  int ra = st_dtype_rank[a->t->dtype], rb = st_dtype_rank[b->t->dtype];
  if (ra != rb) return rb - ra;
  return strcmp(a->name, b->name);
}

static int by_str(const void *a, const void *b) {
  return strcmp(**(const char *const *const *)a, **(const char *const *const *)b);
}

/* Duplicates among n strings (through pointers, so meta values can follow
** their keys); sorts ptrs. */
static const char *find_dup(const char **ptrs[], int n) {
  st_sort(ptrs, n, sizeof *ptrs, by_str);
  for (int i = 1; i < n; i++)
    if (!strcmp(*ptrs[i - 1], *ptrs[i])) return *ptrs[i];
  return NULL;
}

/* -- The plan: every check and the header, before a file is touched -------- */

typedef struct save_plan {
  save_item *it;      /* the tensors, in file order once laid out */
  const char ***ptrs; /* names, then metadata keys, sorted to find duplicates */
  int n, nmeta;
  sbuf h;             /* the header JSON, padded to 8 bytes */
  uint64_t data;      /* bytes of tensor data after it */
} save_plan;

/* Every name valid JSON and not reserved, every tensor readable (CUDA ones
** are saved as PyTorch saves them: the values; loading puts them where the
** caller says, the CPU by default), no name twice. */
static int check_tensors(save_plan *p, const char *path, const char *const *names,
                         dl_tensor *const *tensors) {
  for (int i = 0; i < p->n; i++) {
    const char *nm = names[i];
    char what[96];
    int rc;
    if (!nm) return dl_err(EM_NULLARG, "save", "name");
    snprintf(what, sizeof what, "tensor name \"%s\"", st_show(nm));
    if (!strcmp(nm, "__metadata__")) return dl_err(EM_ST_RESERVED, "save", path);
    if (!st_utf8_valid(nm)) return dl_err(EM_ST_UTF8, "save", path, what);
    if ((rc = check_tensor_any("save", tensors[i]))) return rc;
    p->it[i].name = nm, p->it[i].t = tensors[i];
    p->it[i].nbytes = (uint64_t)dl_tensor_numel(tensors[i]) *
                      (uint64_t)dl_dtype_sizes[tensors[i]->dtype];
    p->ptrs[i] = &p->it[i].name;
  }
  const char *dup = find_dup(p->ptrs, p->n);
  return dup ? dl_err(EM_ST_DUP, "save", path, "tensor name", st_show(dup)) : 0;
}

/* Every key and value valid UTF-8, no key twice; leaves p->ptrs pointing at
** the keys in sorted order, as the header lists them. */
static int check_meta(save_plan *p, const char *path, const char *const *keys,
                      const char *const *values) {
  for (int i = 0; i < p->nmeta; i++) {
    char what[96];
    if (!keys[i] || !values[i]) return dl_err(EM_NULLARG, "save", "metadata");
    snprintf(what, sizeof what, "metadata key \"%s\"", st_show(keys[i]));
    if (!st_utf8_valid(keys[i]) || !st_utf8_valid(values[i])) {
      if (st_utf8_valid(keys[i])) strcat(what, "'s value");
      return dl_err(EM_ST_UTF8, "save", path, what);
    }
    p->ptrs[i] = (const char **)&keys[i];
  }
  const char *dup = find_dup(p->ptrs, p->nmeta);
  return dup ? dl_err(EM_ST_DUP, "save", path, "metadata key", st_show(dup)) : 0;
}

/* The header, laid out as the reference's serde_json writes it; sorts the
** tensors into file order and sums their bytes into p->data. */
static int build_header(save_plan *p, const char *path, const char *const *keys,
                        const char *const *values) {
  sbuf *h = &p->h;
  st_sort(p->it, p->n, sizeof *p->it, by_rank_name);
  sb_str(h, "{");
  if (p->nmeta) {
    sb_str(h, "\"__metadata__\":{");
    for (int i = 0; i < p->nmeta; i++) {
      if (i) sb_str(h, ",");
      sb_json(h, *p->ptrs[i]);
      sb_str(h, ":");
      sb_json(h, values[p->ptrs[i] - (const char **)keys]);
    }
    sb_str(h, p->n ? "}," : "}");
  }
  uint64_t off = 0;
  for (int i = 0; i < p->n; i++) {
    char num[64];
    const dl_tensor *t = p->it[i].t;
    if (i) sb_str(h, ",");
    sb_json(h, p->it[i].name);
    sb_str(h, ":{\"dtype\":\"");
    sb_str(h, st_dtype_names[t->dtype]);
    sb_str(h, "\",\"shape\":[");
    for (int d = 0; d < t->ndim; d++) {
      snprintf(num, sizeof num, d ? ",%lld" : "%lld", (long long)t->shape[d]);
      sb_str(h, num);
    }
    snprintf(num, sizeof num, "],\"data_offsets\":[%llu,%llu]}",
             (unsigned long long)off, (unsigned long long)(off + p->it[i].nbytes));
    sb_str(h, num);
    off += p->it[i].nbytes;
  }
  sb_str(h, "}");
  while (h->n % 8) sb_str(h, " ");
  p->data = off;
  if (h->oom) return dl_err(EM_NOMEM, "save", (long long)h->n, 0LL);
  if (h->n > ST_MAX_HEADER) return dl_err(EM_ST_HDR_SIZE, "save", path, (long long)h->n, ST_MAX_HEADER);
  return 0;
}

/* -- Writing -------------------------------------------------------------- */

/* The file body: header length, header, then each tensor contiguous (copied
** when not; a CUDA tensor through a host copy, one tensor at a time). */
static int write_body(dl_file *f, const save_plan *p) {
  unsigned char len[8];
  for (int i = 0; i < 8; i++) len[i] = (unsigned char)((uint64_t)p->h.n >> (8 * i));
  int rc = dl_file_write(f, len, 8);
  if (!rc) rc = dl_file_write(f, p->h.p, p->h.n);
  for (int i = 0; i < p->n && !rc; i++) {
    if (!p->it[i].nbytes) continue;
    dl_tensor *h = dl_to_device(p->it[i].t, -1), *c = h ? dl_contiguous(h) : NULL;
    dl_tensor_release(h);
    if (!c) return dl_last_error_code();  /* out of memory copying a view */
    rc = dl_file_write(f, tensor_first(c), (size_t)p->it[i].nbytes);
    dl_tensor_release(c);
  }
  return rc;
}

DL_API int dl_st_save(const char *path, const char *const *names,
                      dl_tensor *const *tensors, int n,
                      const char *const *meta_keys,
                      const char *const *meta_values, int nmeta) {
  if (!path) return dl_err(EM_NULLARG, "save", "path");
  if (n < 0 || nmeta < 0) return dl_err(EM_BADVALUE, "save", "negative count");
  if (n && (!names || !tensors)) return dl_err(EM_NULLARG, "save", "names/tensors");
  if (nmeta && (!meta_keys || !meta_values))
    return dl_err(EM_NULLARG, "save", "meta_keys/meta_values");
  save_plan p = {.n = n, .nmeta = nmeta};
  p.it = calloc((size_t)n + 1, sizeof *p.it);
  p.ptrs = calloc((size_t)(n > nmeta ? n : nmeta) + 1, sizeof *p.ptrs);
  int rc = !p.it || !p.ptrs ? dl_err(EM_NOMEM, "save", (long long)n * 32, 0LL) : 0;
  if (!rc) rc = check_tensors(&p, path, names, tensors);
  if (!rc) rc = check_meta(&p, path, meta_keys, meta_values);
  if (!rc) rc = build_header(&p, path, meta_keys, meta_values);
  if (!rc) {
    dl_file *f = dl_file_create(path, (int64_t)(8 + p.h.n + p.data), "save");
    rc = f ? write_body(f, &p) : dl_last_error_code();
    if (f && rc) dl_file_abort(f);
    else if (f) rc = dl_file_commit(f);
  }
  free(p.h.p);
  free(p.ptrs);
  free(p.it);
  return rc;
}
