/*
** io/npz.c -- NumPy's .npz files: a zip archive of .npy members, as
** np.savez (stored) and np.savez_compressed (deflated) write it.  The
** reader maps the file, reads the central directory (Zip64 too: numpy
** forces Zip64 local headers on every member) and checks every offset and
** size against the file before any member is read; a stored member becomes
** a view of the mapping when its data is aligned, a deflated one is
** inflated into its tensor and checked against its CRC-32.  The writer
** gives np.savez's layout (stored "NAME.npy" members) with each member's
** data aligned to 64 bytes, padding the local header with an extra field
** as Android's zipalign does, so a file it wrote maps without a copy.
**
** The zip format: PKWARE's APPNOTE.TXT (local file headers "PK\3\4",
** central directory headers "PK\1\2", the end record "PK\5\6"; Zip64's
** end record "PK\6\6", its locator "PK\6\7", and extra field 0x0001).
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "core/internal.h"
#include "io/npy.h"

/* -- Little-endian fields -------------------------------------------------- */

static uint32_t u16(const unsigned char *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }
static uint32_t u32(const unsigned char *p) { return u16(p) | u16(p + 2) << 16; }
static uint64_t u64(const unsigned char *p) { return (uint64_t)u32(p) | (uint64_t)u32(p + 4) << 32; }

static unsigned char *put16(unsigned char *p, uint32_t v) {
  p[0] = (unsigned char)v, p[1] = (unsigned char)(v >> 8);
  return p + 2;
}
static unsigned char *put32(unsigned char *p, uint32_t v) { return put16(put16(p, v & 0xFFFF), v >> 16); }
static unsigned char *put64(unsigned char *p, uint64_t v) {
  return put32(put32(p, (uint32_t)v), (uint32_t)(v >> 32));
}

enum { EOCD_LEN = 22, Z64_LOC_LEN = 20, Z64_EOCD_LEN = 56, CDH_LEN = 46, LFH_LEN = 30 };
#define MAX32 UINT64_C(0xFFFFFFFF)

/* -- The archive ------------------------------------------------------------ */

typedef struct npz_entry {
  char *member;         /* the zip's name, "x.npy" */
  char *key;            /* np.load's key, "x" */
  int method;           /* 0 stored, 8 deflate */
  uint32_t crc;
  uint64_t csize, usize;
  uint64_t data;        /* offset of the member's bytes in the file */
} npz_entry;

struct dl_npz {
  char *path;
  npy_map *map;
  int use_map;
  npz_entry *e;
  int n, cap;
};

DL_API void dl_npz_close(dl_npz *z) {
  if (!z) return;
  for (int i = 0; i < z->n; i++) free(z->e[i].member), free(z->e[i].key);
  free(z->e);
  free(z->path);
  io_map_release(z->map);
  free(z);
}

DL_API int dl_npz_count(const dl_npz *z) { return z ? z->n : 0; }
DL_API const char *dl_npz_name(const dl_npz *z, int i) {
  return z && i >= 0 && i < z->n ? z->e[i].key : NULL;
}

static int corrupt(const dl_npz *z, const char *fmt, unsigned long long a, unsigned long long b) {
  char why[200];
  snprintf(why, sizeof why, fmt, a, b);
  return dl_err(EM_NPZ_CORRUPT, "load_npz", z->path, why);
}

/* The end of central directory record, Zip64's when there is one: the
** directory's offset, size and entry count.  end: where the directory must
** stop (the first end record). */
static int find_directory(const dl_npz *z, uint64_t *cd_off, uint64_t *cd_size, uint64_t *count,
                          uint64_t *end) {
  const unsigned char *b = z->map->base;
  size_t size = z->map->size;
  static const unsigned char npy_magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  int64_t at = -1;
  if (size >= EOCD_LEN) {
    /* backwards from the end: a comment of up to 65535 bytes may follow */
    size_t lo = size - EOCD_LEN > 65535 ? size - EOCD_LEN - 65535 : 0;
    for (size_t i = size - EOCD_LEN + 1; i-- > lo;)
      if (!memcmp(b + i, "PK\5\6", 4) && i + EOCD_LEN + u16(b + i + 20) <= size) {
        at = (int64_t)i;
        break;
      }
  }
  if (at < 0)
    return dl_err(EM_NPZ_NOT_ZIP, "load_npz", z->path,
                  size >= 6 && !memcmp(b, npy_magic, 6)
                      ? "it is a .npy file (load it with load_npy)"
                      : "it has no zip end-of-central-directory record (truncated, or not a zip file)");
  const unsigned char *e = b + at;
  if (u16(e + 4) || u16(e + 6) || u16(e + 8) != u16(e + 10))
    return corrupt(z, "a multi-volume archive (disk %llu, directory on disk %llu) is not supported",
                   u16(e + 4), u16(e + 6));
  *count = u16(e + 10), *cd_size = u32(e + 12), *cd_off = u32(e + 16), *end = (uint64_t)at;
  if (at >= Z64_LOC_LEN && !memcmp(e - Z64_LOC_LEN, "PK\6\7", 4)) {
    const unsigned char *loc = e - Z64_LOC_LEN;
    uint64_t off = u64(loc + 8);
    if (off > (uint64_t)at - Z64_LOC_LEN || (uint64_t)at - Z64_LOC_LEN - off < Z64_EOCD_LEN ||
        memcmp(b + off, "PK\6\6", 4))
      return corrupt(z, "the Zip64 locator points at %llu, where no Zip64 end record is (%llu bytes)",
                     off, size);
    const unsigned char *r = b + off;
    if (u32(r + 16) || u32(r + 20) || u64(r + 24) != u64(r + 32))
      return corrupt(z, "a multi-volume archive (disk %llu, directory on disk %llu) is not supported",
                     u32(r + 16), u32(r + 20));
    *count = u64(r + 32), *cd_size = u64(r + 40), *cd_off = u64(r + 48), *end = off;
  }
  if (*cd_off > *end || *cd_size > *end - *cd_off)
    return corrupt(z, "the central directory (%llu bytes at offset %llu) runs past its end record",
                   *cd_size, *cd_off);
  if (*count > *cd_size / CDH_LEN)
    return corrupt(z, "%llu entries cannot fit a central directory of %llu bytes", *count, *cd_size);
  return 0;
}

/* Zip64's extra field (0x0001) for the fields the header set to all ones,
** in the order APPNOTE gives: uncompressed size, compressed size, offset. */
static int zip64_fields(const dl_npz *z, const unsigned char *x, size_t n, uint64_t *usize,
                        uint64_t *csize, uint64_t *off) {
  while (n >= 4) {
    uint32_t id = u16(x), len = u16(x + 2);
    if (len > n - 4) return corrupt(z, "an extra field of %llu bytes runs past its header's %llu", len, n - 4);
    if (id == 1) {
      const unsigned char *p = x + 4, *q = x + 4 + len;
      uint64_t *f[3] = {usize, csize, off};
      for (int i = 0; i < 3; i++) {
        if (*f[i] != MAX32) continue;
        if (q - p < 8) return corrupt(z, "a Zip64 extra field of %llu bytes lacks field %llu", len, (unsigned long long)i);
        *f[i] = u64(p), p += 8;
      }
    }
    x += 4 + len, n -= 4 + len;
  }
  return 0;
}

static int ends_with(const char *s, size_t n, const char *suffix) {
  size_t k = strlen(suffix);
  return n >= k && !memcmp(s + n - k, suffix, k);
}

/* One central directory entry at *p (inside [p, end)), checked against the
** file; added to z unless it is a directory or not a .npy member. */
static int read_entry(dl_npz *z, const unsigned char **pp, const unsigned char *end, uint64_t cd_off) {
  const unsigned char *p = *pp, *b = z->map->base;
  if (end - p < CDH_LEN || memcmp(p, "PK\1\2", 4))
    return corrupt(z, "the central directory entry at offset %llu is damaged (%llu bytes left)",
                   (unsigned long long)(p - b), (unsigned long long)(end - p));
  uint32_t flags = u16(p + 8), method = u16(p + 10), nlen = u16(p + 28), xlen = u16(p + 30),
           clen = u16(p + 32);
  if ((size_t)(end - p) - CDH_LEN < (size_t)nlen + xlen + clen)
    return corrupt(z, "the central directory entry at offset %llu runs past the directory (%llu bytes)",
                   (unsigned long long)(p - b), (unsigned long long)(end - p));
  uint64_t csize = u32(p + 20), usize = u32(p + 24), lho = u32(p + 42);
  const char *name = (const char *)p + CDH_LEN;
  *pp = p + CDH_LEN + nlen + xlen + clen;
  if (zip64_fields(z, p + CDH_LEN + nlen, xlen, &usize, &csize, &lho)) return -1;
  if (memchr(name, 0, nlen)) return corrupt(z, "the name of the member at offset %llu holds a NUL byte%.0llu", lho, 0);
  if (!nlen || name[nlen - 1] == '/' || !ends_with(name, nlen, ".npy")) return 0;  /* not an array */
  char *member = strndup(name, nlen), *key = strndup(name, nlen - 4);
  if (!member || !key) {
    free(member), free(key);
    return dl_err(EM_NOMEM, "load_npz", (long long)nlen, (long long)dl_mem_allocated());
  }
  int rc = 0;
  if (flags & 1) {
    rc = dl_err(EM_NPZ_MEMBER, "load_npz", z->path, member, "it is encrypted");
  } else if (method != 0 && method != 8) {
    rc = dl_err(EM_NPZ_METHOD, "load_npz", z->path, member, (int)method);
  } else if (lho > cd_off || cd_off - lho < LFH_LEN || memcmp(b + lho, "PK\3\4", 4)) {
    char why[160];
    snprintf(why, sizeof why, "no local header at offset %llu, where the directory says it starts",
             (unsigned long long)lho);
    rc = dl_err(EM_NPZ_MEMBER, "load_npz", z->path, member, why);
  } else {
    uint64_t data = lho + LFH_LEN + u16(b + lho + 26) + u16(b + lho + 28);
    char why[200];
    if (data > cd_off || csize > cd_off - data) {
      snprintf(why, sizeof why, "its %llu bytes at offset %llu run past the archive's members (%llu bytes)",
               (unsigned long long)csize, (unsigned long long)data, (unsigned long long)cd_off);
      rc = dl_err(EM_NPZ_MEMBER, "load_npz", z->path, member, why);
    } else if (method == 0 ? usize != csize : usize / 1032 > csize + 64) {
      /* deflate gives at most 1032 bytes per input byte: a member that
      ** claims more is corrupt (or a bomb), and is refused before any
      ** memory is committed to it */
      snprintf(why, sizeof why, "the directory gives %llu bytes uncompressed from %llu %s",
               (unsigned long long)usize, (unsigned long long)csize,
               method == 0 ? "stored (they must be equal)" : "compressed, more than deflate can give");
      rc = dl_err(EM_NPZ_MEMBER, "load_npz", z->path, member, why);
    } else {
      for (int i = 0; i < z->n && !rc; i++)
        if (!strcmp(z->e[i].key, key)) rc = dl_err(EM_NPZ_DUP, "load_npz", z->path, key);
      if (!rc && z->n == z->cap) {
        int cap = z->cap ? 2 * z->cap : 16;
        npz_entry *e = realloc(z->e, sizeof *e * (size_t)cap);
        if (!e) rc = dl_err(EM_NOMEM, "load_npz", (long long)(sizeof *e * (size_t)cap), 0LL);
        else z->e = e, z->cap = cap;
      }
      if (!rc) {
        z->e[z->n++] = (npz_entry){member, key, (int)method, u32(p + 16), csize, usize, data};
        return 0;
      }
    }
  }
  free(member), free(key);
  return rc;
}

DL_API dl_npz *dl_npz_open(const char *path, int map) {
  npy_map *m = npy_map_file("load_npz", path);
  if (!m) return NULL;
  dl_npz *z = calloc(1, sizeof *z);
  if (z) z->path = strdup(path);
  if (!z || !z->path) {
    io_map_release(m);
    free(z);
    return dl_errp(EM_NOMEM, "load_npz", (long long)sizeof *z, 0LL);
  }
  z->map = m, z->use_map = map;
  uint64_t cd_off = 0, cd_size = 0, count = 0, end = 0;
  if (find_directory(z, &cd_off, &cd_size, &count, &end)) goto fail;
  const unsigned char *p = (const unsigned char *)m->base + cd_off, *stop = p + cd_size;
  for (uint64_t i = 0; i < count; i++)
    if (read_entry(z, &p, stop, cd_off)) goto fail;
  return z;
fail:
  dl_npz_close(z);
  return NULL;
}

/* -- A member's tensor --------------------------------------------------------- */

/* Inflates up to n bytes into out (*got: how many); 1 when the stream ended,
** 0 when more follows, -1 with the error set. */
static int inflate_some(z_stream *s, const unsigned char **in, uint64_t *left, void *out, uint64_t n,
                        uint64_t *got, const char *path, const char *member) {
  unsigned char *o = out;
  *got = 0;
  while (*got < n) {
    if (!s->avail_in && *left) {
      s->next_in = (unsigned char *)*in;
      s->avail_in = *left > (1u << 30) ? 1u << 30 : (unsigned)*left;
      *in += s->avail_in, *left -= s->avail_in;
    }
    uint64_t want = n - *got > (1u << 30) ? 1u << 30 : n - *got;
    s->next_out = o + *got;
    s->avail_out = (unsigned)want;
    int r = inflate(s, Z_NO_FLUSH);
    *got += want - s->avail_out;
    if (r == Z_STREAM_END) return 1;
    if (r == Z_BUF_ERROR && !s->avail_in && !*left)
      return dl_err(EM_NPZ_INFLATE, "load_npz", path, member, "the compressed data ends early");
    if (r != Z_OK && r != Z_BUF_ERROR)
      return dl_err(EM_NPZ_INFLATE, "load_npz", path, member, s->msg ? s->msg : zError(r));
  }
  return 0;
}

static uint32_t crc_of(uint32_t crc, const void *p, uint64_t n) {
  return (uint32_t)crc32_z(crc, p, (z_size_t)n);
}

static dl_tensor *inflated(const dl_npz *z, const npz_entry *e, const char *name) {
  const char *op = "load_npz";
  z_stream s;
  memset(&s, 0, sizeof s);
  if (inflateInit2(&s, -MAX_WBITS) != Z_OK)
    return dl_errp(EM_NOMEM, op, (long long)sizeof s, (long long)dl_mem_allocated());
  const unsigned char *in = (const unsigned char *)z->map->base + e->data;
  uint64_t left = e->csize, got, hl;
  unsigned char pre[12], *head = NULL;
  dl_tensor *t = NULL;
  npy_hdr h;
  /* the preamble, then the header, then the data straight into the tensor */
  int r = inflate_some(&s, &in, &left, pre, e->usize < 12 ? e->usize : 12, &got, z->path, e->member);
  if (r < 0 || npy_preamble(pre, (size_t)got, got < 12 && r ? got : e->usize, op, name, &hl)) goto done;
  /* a header shorter than the 12 bytes read never parses (the dict alone
  ** takes more): room for them all the same */
  if (!(head = malloc(hl < 12 ? 12 : (size_t)hl))) {
    dl_err(EM_NOMEM, op, (long long)hl, (long long)dl_mem_allocated());
    goto done;
  }
  memcpy(head, pre, (size_t)got);
  uint64_t more = 0;
  if (!r && got < hl) r = inflate_some(&s, &in, &left, head + got, hl - got, &more, z->path, e->member);
  if (r < 0) goto done;
  if (got + more < hl) {  /* the stream ended inside the header */
    dl_err(EM_NPY_TRUNC, op, name, "header", (long long)(got + more), (long long)hl);
    goto done;
  }
  if (npy_parse(head, hl, e->usize, op, name, "member", &h) || !(t = npy_alloc(&h))) goto done;
  uint32_t crc = crc_of(0, head, hl);
  if (h.nbytes) {
    if (!r) r = inflate_some(&s, &in, &left, t->storage->data, h.nbytes, &got, z->path, e->member);
    else got = 0;
    if (r < 0) goto fail;
    if (got < h.nbytes) {
      dl_err(EM_NPY_SHORT, op, name, fmt_shape(h.shape, h.ndim), npy_kind_name(&h), (long long)h.nbytes,
             (long long)hl, "decompressed data", (long long)got);
      goto fail;
    }
    crc = crc_of(crc, t->storage->data, h.nbytes);
  }
  if (!r) {  /* what the directory gives is all there is */
    unsigned char extra;
    r = inflate_some(&s, &in, &left, &extra, 1, &got, z->path, e->member);
    if (r < 0) goto fail;
    if (got || !r) {
      char why[160];
      snprintf(why, sizeof why, "it decompresses to more than the %llu bytes the zip directory gives",
               (unsigned long long)e->usize);
      dl_err(EM_NPZ_MEMBER, op, z->path, e->member, why);
      goto fail;
    }
  }
  if (crc != e->crc) {
    dl_err(EM_NPZ_CRC, op, z->path, e->member, crc, e->crc);
    goto fail;
  }
  if (npy_converts(&h)) npy_convert(&h, t->storage->data, t->storage->data);
  goto done;
fail:
  dl_tensor_release(t);
  t = NULL;
done:
  inflateEnd(&s);
  free(head);
  return t;
}

DL_API dl_tensor *dl_npz_tensor(dl_npz *z, int i) {
  const char *op = "load_npz";
  if (!z) return dl_errp(EM_NULLARG, op, "file");
  if (i < 0 || i >= z->n) return dl_errp(EM_NPZ_INDEX, op, i, z->n);
  const npz_entry *e = &z->e[i];
  char name[4200];
  snprintf(name, sizeof name, "%s (member %.4000s)", z->path, e->member);
  if (e->method == 8) return inflated(z, e, name);
  const unsigned char *p = (const unsigned char *)z->map->base + e->data;
  npy_hdr h;
  if (npy_parse(p, e->usize, e->usize, op, name, "member", &h)) return NULL;
  dl_tensor *t = npy_tensor(&h, p + h.header, z->use_map ? z->map : NULL);
  /* a copy reads every byte anyway: check them; a view reads none now */
  if (t && (!z->use_map || t->storage->owned)) {
    uint32_t crc = crc_of(0, p, e->usize);
    if (crc != e->crc) {
      dl_tensor_release(t);
      return dl_errp(EM_NPZ_CRC, op, z->path, e->member, crc, e->crc);
    }
  }
  return t;
}

/* -- Writing ------------------------------------------------------------------- */

typedef struct npz_out {
  const char *name;     /* the key */
  size_t nlen;          /* the member name's length: key + ".npy" */
  const dl_tensor *t;
  npy_out o;
  uint64_t size;        /* the member's bytes: header and data */
  uint64_t lho;         /* its local header's offset */
  uint32_t crc;
  int pad;              /* bytes of the alignment extra field */
} npz_out;

static int zip64_member(const npz_out *m) { return m->size >= MAX32; }

/* The local header's length before the member's bytes, with the alignment
** field that puts those at a multiple of 64 (0, or 6 to 69 bytes: a field
** is 4 bytes of id and length, then zipalign's 2-byte alignment). */
static void lay_out(npz_out *m, uint64_t at) {
  uint64_t before = at + LFH_LEN + m->nlen + (zip64_member(m) ? 20 : 0);
  int need = (int)((64 - before % 64) % 64);
  if (need && need < 6) need += 64;
  m->pad = need;
  m->lho = at;
}

static uint64_t local_len(const npz_out *m) {
  return LFH_LEN + m->nlen + (zip64_member(m) ? 20 : 0) + (uint64_t)m->pad;
}

static int cd_zip64(const npz_out *m) { return zip64_member(m) || m->lho >= MAX32; }

static uint64_t cd_len(const npz_out *m) {
  return CDH_LEN + m->nlen + (cd_zip64(m) ? 4 + 8 * (zip64_member(m) ? 2 : 0) + 8 * (m->lho >= MAX32) : 0);
}

/* The fields both headers share from "version needed" to the name length. */
static unsigned char *common(unsigned char *p, const npz_out *m, int z64) {
  int utf8 = 0;
  for (size_t i = 0; i < m->nlen - 4; i++) utf8 |= (unsigned char)m->name[i] >= 0x80;
  p = put16(p, z64 ? 45 : 20);           /* version needed: 4.5 for Zip64 */
  p = put16(p, utf8 ? 1u << 11 : 0);     /* bit 11: the name is UTF-8 */
  p = put16(p, 0);                       /* stored */
  p = put16(p, 0);                       /* 00:00:00 ... */
  p = put16(p, 1u << 5 | 1);             /* ... on 1980-01-01: reproducible files */
  p = put32(p, m->crc);
  p = put32(p, zip64_member(m) ? 0xFFFFFFFFu : (uint32_t)m->size);
  p = put32(p, zip64_member(m) ? 0xFFFFFFFFu : (uint32_t)m->size);
  return put16(p, (uint32_t)m->nlen);
}

static unsigned char *name_of(unsigned char *p, const npz_out *m) {
  memcpy(p, m->name, m->nlen - 4);
  memcpy(p + m->nlen - 4, ".npy", 4);
  return p + m->nlen;
}

static int write_member(dl_file *f, npz_out *m, unsigned char *buf) {
  dl_tensor *c = npy_host_data(m->t, &m->o);
  if (!c) return dl_last_error_code();
  const void *data = tensor_first(c);
  m->crc = crc_of(crc_of(0, m->o.head, m->o.head_len), data, m->o.nbytes);
  unsigned char *p = put32(buf, 0x04034b50);
  p = common(p, m, zip64_member(m));
  p = put16(p, (uint32_t)(local_len(m) - LFH_LEN - m->nlen));
  p = name_of(p, m);
  if (zip64_member(m)) p = put64(put64(put16(put16(p, 1), 16), m->size), m->size);
  if (m->pad) {
    p = put16(put16(put16(p, 0xD935), (uint32_t)m->pad - 4), 64);
    memset(p, 0, (size_t)m->pad - 6), p += m->pad - 6;
  }
  int rc = dl_file_write(f, buf, (size_t)(p - buf));
  if (!rc) rc = dl_file_write(f, m->o.head, m->o.head_len);
  if (!rc && m->o.nbytes) rc = dl_file_write(f, data, (size_t)m->o.nbytes);
  dl_tensor_release(c);
  return rc;
}

static size_t central_entry(unsigned char *buf, const npz_out *m) {
  unsigned char *p = put32(buf, 0x02014b50);
  p = put16(p, 3u << 8 | (cd_zip64(m) ? 45 : 20));  /* made by: Unix */
  p = common(p, m, cd_zip64(m));
  p = put16(p, (uint32_t)(cd_len(m) - CDH_LEN - m->nlen));
  p = put16(p, 0);                       /* comment */
  p = put16(p, 0);                       /* disk */
  p = put16(p, 0);                       /* internal attributes */
  p = put32(p, 0100644u << 16);          /* a regular file, rw-r--r-- */
  p = put32(p, m->lho >= MAX32 ? 0xFFFFFFFFu : (uint32_t)m->lho);
  p = name_of(p, m);
  if (cd_zip64(m)) {
    p = put16(put16(p, 1), (uint32_t)(8 * (zip64_member(m) ? 2 : 0) + 8 * (m->lho >= MAX32)));
    if (zip64_member(m)) p = put64(put64(p, m->size), m->size);
    if (m->lho >= MAX32) p = put64(p, m->lho);
  }
  return (size_t)(p - buf);
}

static size_t end_records(unsigned char *buf, uint64_t n, uint64_t cd_off, uint64_t cd_size) {
  unsigned char *p = buf;
  if (n >= 0xFFFF || cd_off >= MAX32 || cd_size >= MAX32) {
    uint64_t z64 = cd_off + cd_size;
    p = put32(p, 0x06064b50);
    p = put64(p, Z64_EOCD_LEN - 12);
    p = put16(put16(p, 3u << 8 | 45), 45);
    p = put32(put32(p, 0), 0);
    p = put64(put64(p, n), n);
    p = put64(put64(p, cd_size), cd_off);
    p = put32(p, 0x07064b50);
    p = put32(p, 0);
    p = put64(p, z64);
    p = put32(p, 1);
  }
  p = put32(p, 0x06054b50);
  p = put16(put16(p, 0), 0);
  p = put16(put16(p, n >= 0xFFFF ? 0xFFFF : (uint32_t)n), n >= 0xFFFF ? 0xFFFF : (uint32_t)n);
  p = put32(p, cd_size >= MAX32 ? 0xFFFFFFFFu : (uint32_t)cd_size);
  p = put32(p, cd_off >= MAX32 ? 0xFFFFFFFFu : (uint32_t)cd_off);
  p = put16(p, 0);
  return (size_t)(p - buf);
}

static int by_name(const void *a, const void *b) {
  return strcmp(((const npz_out *)a)->name, ((const npz_out *)b)->name);
}

DL_API int dl_npz_save(const char *path, const char *const *names, dl_tensor *const *tensors, int n) {
  const char *op = "save_npz";
  if (!path) return dl_err(EM_NULLARG, op, "path");
  if (n < 0) return dl_err(EM_BADVALUE, op, "negative count");
  if (n && (!names || !tensors)) return dl_err(EM_NULLARG, op, "names/tensors");
  npz_out *m = calloc((size_t)n + 1, sizeof *m), *sorted = calloc((size_t)n + 1, sizeof *m);
  unsigned char *buf = malloc(CDH_LEN + 65535 + 100);
  int rc = !m || !sorted || !buf ? dl_err(EM_NOMEM, op, (long long)n * (long long)sizeof *m, 0LL) : 0;
  uint64_t at = 0, cd_size = 0;
  for (int i = 0; i < n && !rc; i++) {
    if (!names[i]) {
      rc = dl_err(EM_NULLARG, op, "name");
      break;
    }
    size_t len = strlen(names[i]);
    if (!len || len > 65000) {
      rc = dl_err(EM_NPZ_NAME, op, path, len ? "..." : "", len ? "is longer than 65000 bytes" : "is empty");
      break;
    }
    m[i].name = names[i], m[i].nlen = len + 4, m[i].t = tensors[i];
    char what[128];
    snprintf(what, sizeof what, "%s (array \"%.60s\")", path, names[i]);
    rc = npy_prepare(tensors[i], op, what, &m[i].o);
    m[i].size = m[i].o.head_len + m[i].o.nbytes;
    lay_out(&m[i], at);
    at += local_len(&m[i]) + m[i].size;
    cd_size += cd_len(&m[i]);
  }
  if (!rc && n) {
    memcpy(sorted, m, sizeof *m * (size_t)n);
    qsort(sorted, (size_t)n, sizeof *m, by_name);
    for (int i = 1; i < n && !rc; i++)
      if (!strcmp(sorted[i - 1].name, sorted[i].name)) rc = dl_err(EM_NPZ_DUP, op, path, sorted[i].name);
  }
  if (!rc) {
    unsigned char end[Z64_EOCD_LEN + Z64_LOC_LEN + EOCD_LEN];
    size_t end_len = end_records(end, (uint64_t)n, at, cd_size);
    dl_file *f = dl_file_create(path, (int64_t)(at + cd_size + end_len), op);
    rc = f ? 0 : dl_last_error_code();
    for (int i = 0; i < n && !rc; i++) rc = write_member(f, &m[i], buf);
    for (int i = 0; i < n && !rc; i++) rc = dl_file_write(f, buf, central_entry(buf, &m[i]));
    if (!rc) rc = dl_file_write(f, end, end_len);
    if (f && rc) dl_file_abort(f);
    else if (f) rc = dl_file_commit(f);
  }
  free(buf);
  free(sorted);
  free(m);
  return rc;
}
