/*
** io/tar.c -- tar shards in the WebDataset convention: the member index
** of an archive (name, data offset, size of each regular member) read from
** its headers without reading the data, an index cache beside the shard,
** and members read back by offset.  The writer is io/tar_write.c.
**
** Formats read: ustar (POSIX.1-1988; name with its 155-byte prefix), pax
** (POSIX.1-2001: 'x' extended headers for the next member, 'g' global
** ones for all that follow, with path= and size=), GNU (long names 'L',
** long link names 'K', base-256 numbers) and pre-POSIX (V7) headers.  The
** rules follow Python's tarfile, which writes most shards in the wild:
** only regular members are listed, links and directories carry no data,
** and a member of an unknown type has its data stepped over.
**
** On a cluster filesystem a scan of a shard of 10,000 members costs 10,000
** header reads; the index cache (dl_tar_index_save/load) makes it one read
** of a small file, trusted only while the tar keeps the size and
** modification time recorded in it.
*/
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "core/internal.h"
#include "io/tar.h"

#define BLOCK TAR_BLOCK
#define EXT_MAX (16 << 20)    /* an extended header larger than this is corrupt */
#define WINDOW (64 << 10)     /* scan reads: small members' headers come together */
#define IDX_MAGIC "DLTARIX1"
#define IDX_HEAD 48           /* magic + 5 int64 */

static const char *OP = "tar";

/* -- The index ------------------------------------------------------------- */


DL_HIDDEN dl_tar_index *tar_index_new(void) {
  dl_tar_index *x = calloc(1, sizeof *x);
  if (!x) dl_err(EM_NOMEM, OP, (long long)sizeof *x, (long long)dl_mem_allocated());
  return x;
}

DL_API void dl_tar_index_free(dl_tar_index *x) {
  if (!x) return;
  free(x->off);
  free(x->size);
  free(x->name_at);
  free(x->names);
  free(x);
}

static int grow(void **p, int64_t *cap, int64_t need, size_t elem) {
  if (need <= *cap) return 0;
  int64_t c = *cap ? *cap : 64;
  while (c < need) c *= 2;
  void *q = realloc(*p, (size_t)c * elem);
  if (!q) return dl_err(EM_NOMEM, OP, (long long)c * (long long)elem, (long long)dl_mem_allocated());
  *p = q;
  *cap = c;
  return 0;
}

DL_HIDDEN int tar_index_add(dl_tar_index *x, const char *name, size_t len, int64_t off, int64_t size) {
  int64_t cap = x->cap;
  if (x->n == cap) {
    /* the three arrays share one capacity */
    int64_t c1 = cap, c2 = cap, c3 = cap;
    if (grow((void **)&x->off, &c1, x->n + 1, sizeof(int64_t)) ||
        grow((void **)&x->size, &c2, x->n + 1, sizeof(int64_t)) ||
        grow((void **)&x->name_at, &c3, x->n + 1, sizeof(int64_t)))
      return DL_ENOMEM;
    x->cap = c1;
  }
  if (grow((void **)&x->names, &x->names_cap, x->names_len + (int64_t)len + 1, 1)) return DL_ENOMEM;
  memcpy(x->names + x->names_len, name, len);
  x->names[x->names_len + (int64_t)len] = '\0';
  x->off[x->n] = off;
  x->size[x->n] = size;
  x->name_at[x->n] = x->names_len;
  x->names_len += (int64_t)len + 1;
  x->n++;
  return 0;
}

DL_API int64_t dl_tar_index_count(const dl_tar_index *x) { return x ? x->n : 0; }
DL_API const char *dl_tar_index_name(const dl_tar_index *x, int64_t i) {
  return x && i >= 0 && i < x->n ? x->names + x->name_at[i] : NULL;
}
DL_API int64_t dl_tar_index_offset(const dl_tar_index *x, int64_t i) {
  return x && i >= 0 && i < x->n ? x->off[i] : -1;
}
DL_API int64_t dl_tar_index_size(const dl_tar_index *x, int64_t i) {
  return x && i >= 0 && i < x->n ? x->size[i] : -1;
}
DL_API int64_t dl_tar_index_file_size(const dl_tar_index *x) { return x ? x->file_size : -1; }
DL_API int64_t dl_tar_index_mtime(const dl_tar_index *x, int which) {
  return x ? (which ? x->mtime_nsec : x->mtime_sec) : -1;
}

/* -- Opening --------------------------------------------------------------- */

/* Opens path for reading and stats it: the fd, or -1 with the error set. */
static int open_file(const char *path, struct stat *st) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return dl_err(EM_TAR_OS, OP, path, "cannot open", strerror(errno)), -1;
  if (fstat(fd, st) != 0) {
    int e = errno;
    close(fd);
    return dl_err(EM_TAR_OS, OP, path, "cannot stat", strerror(e)), -1;
  }
  if (!S_ISREG(st->st_mode)) {
    close(fd);
    return dl_err(EM_TAR_NOT_FILE, OP, path), -1;
  }
  return fd;
}

/* Reads n bytes at off (short reads and EINTR retried): the bytes read. */
static int64_t pread_all(int fd, void *buf, int64_t n, int64_t off) {
  int64_t got = 0;
  while (got < n) {
    ssize_t r = pread(fd, (char *)buf + got, (size_t)(n - got), (off_t)(off + got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += r;
  }
  return got;
}

/* -- Header fields --------------------------------------------------------- */

/* A numeric field: octal (spaces and NULs around it), or GNU's base-256
** (the first byte's high bit set) for values that do not fit.  0 on
** success; -1 when the field is not a number. */
static int number(const unsigned char *p, int len, int64_t *out) {
  if (p[0] & 0x80) {  /* base-256, big-endian, two's complement */
    if (p[0] & 0x40) return -1;  /* negative */
    uint64_t v = p[0] & 0x3f;
    for (int i = 1; i < len; i++) {
      if (v >> 55) return -1;  /* past int64 */
      v = v << 8 | p[i];
    }
    *out = (int64_t)v;
    return 0;
  }
  int i = 0;
  while (i < len && (p[i] == ' ' || p[i] == '\0')) i++;
  if (i == len) {  /* all blank: tarfile reads 0 */
    *out = 0;
    return 0;
  }
  uint64_t v = 0;
  int digits = 0;
  for (; i < len && p[i] >= '0' && p[i] <= '7'; i++, digits++) {
    if (v >> 60) return -1;
    v = v << 3 | (uint64_t)(p[i] - '0');
  }
  for (; i < len; i++)
    if (p[i] != ' ' && p[i] != '\0') return -1;
  if (!digits) return -1;
  *out = (int64_t)v;
  return 0;
}

/* The header's checksum as stored and as computed (its own field counted
** as spaces); historic writers summed signed chars, so either sum passes. */
static int checksum_ok(const unsigned char *h, int64_t *stored, int64_t *sum) {
  int64_t u = 0, s = 0;
  for (int i = 0; i < BLOCK; i++) {
    int in_field = i >= 148 && i < 156;
    u += in_field ? ' ' : h[i];
    s += in_field ? ' ' : (signed char)h[i];
  }
  *sum = u;
  if (number(h + 148, 8, stored) != 0) return 0;
  return *stored == u || *stored == s;
}

static int all_zero(const unsigned char *h) {
  for (int i = 0; i < BLOCK; i++)
    if (h[i]) return 0;
  return 1;
}

/* A name for messages from a header's name field: printable bytes only,
** in a thread-local buffer. */
DL_HIDDEN const char *tar_shown(const char *s, size_t len) {
  static _Thread_local char buf[160];
  size_t k = 0;
  for (size_t i = 0; i < len && s[i] && k + 4 < sizeof buf; i++)
    buf[k++] = s[i] >= 32 && s[i] < 127 ? s[i] : '?';
  if (k + 4 >= sizeof buf) memcpy(buf + k, "...", 3), k += 3;
  buf[k] = '\0';
  return buf;
}

/* -- Scanning -------------------------------------------------------------- */

/* Reads through a window of the file, so the headers of small members
** (which sit close together) come from one read. */
typedef struct {
  int fd;
  const char *path;
  int64_t file_size;
  unsigned char *win;
  int64_t win_off, win_len;
} scanner;

/* n <= WINDOW bytes at off, all present in the file (the caller checks). */
static const unsigned char *at(scanner *s, int64_t off, int64_t n) {
  if (off >= s->win_off && off + n <= s->win_off + s->win_len) return s->win + (off - s->win_off);
  int64_t want = s->file_size - off < WINDOW ? s->file_size - off : WINDOW;
  errno = 0;
  int64_t got = pread_all(s->fd, s->win, want, off);
  if (got < n) {
    s->win_len = 0;
    dl_err(EM_TAR_OS, OP, s->path, "read failed", errno ? strerror(errno) : "the file shrank");
    return NULL;
  }
  s->win_off = off;
  s->win_len = got;
  return s->win;
}

/* An extended header's data (a pax header, a GNU long name): a new
** NUL-terminated buffer, or NULL with the error set. */
static char *ext_data(scanner *s, int64_t off, int64_t size, const char *name) {
  if (size > EXT_MAX) return dl_errp(EM_TAR_EXT_BIG, OP, s->path, (long long)off - BLOCK, (long long)size, EXT_MAX);
  if (size > s->file_size - off)
    return dl_errp(EM_TAR_PAST_END, OP, s->path, name, (long long)size, (long long)off, (long long)s->file_size);
  char *d = malloc((size_t)size + 1);
  if (!d) return dl_errp(EM_NOMEM, OP, (long long)size + 1, (long long)dl_mem_allocated());
  errno = 0;
  if (pread_all(s->fd, d, size, off) != size) {
    free(d);
    return dl_errp(EM_TAR_OS, OP, s->path, "read failed", errno ? strerror(errno) : "the file shrank");
  }
  d[size] = '\0';
  return d;
}

/* What extended headers say about the next member (or, global, about all). */
typedef struct {
  char *path;     /* NULL: not given */
  int64_t size;   /* -1: not given */
  int sparse;     /* GNU.sparse.* keys: a sparse file */
} ext_info;

static void ext_clear(ext_info *e) {
  free(e->path);
  e->path = NULL;
  e->size = -1;
  e->sparse = 0;
}

/* Parses pax records "LEN KEY=VALUE\n" into e.  at: the header's offset
** for messages. */
static int pax_parse(scanner *s, const char *d, int64_t n, ext_info *e, int64_t at_off) {
  int64_t i = 0;
  for (int rec = 1; i < n; rec++) {
    if (d[i] == '\0') break;  /* padding NULs after the records */
    int64_t len = 0, j = i;
    while (j < n && d[j] >= '0' && d[j] <= '9' && len < EXT_MAX) len = len * 10 + (d[j++] - '0');
    if (j == i || j >= n || d[j] != ' ' || len <= j - i + 1 || i + len > n || d[i + len - 1] != '\n')
      return dl_err(EM_TAR_PAX, OP, s->path, (long long)at_off, rec);
    const char *key = d + j + 1, *end = d + i + len - 1;
    const char *eq = memchr(key, '=', (size_t)(end - key));
    if (!eq) return dl_err(EM_TAR_PAX, OP, s->path, (long long)at_off, rec);
    size_t klen = (size_t)(eq - key), vlen = (size_t)(end - eq - 1);
    const char *val = eq + 1;
    if (klen == 4 && !memcmp(key, "path", 4)) {
      free(e->path);
      e->path = strndup(val, vlen);
      if (!e->path) return dl_err(EM_NOMEM, OP, (long long)vlen + 1, (long long)dl_mem_allocated());
    } else if (klen == 4 && !memcmp(key, "size", 4)) {
      int64_t v = 0;
      size_t k = 0;
      for (; k < vlen && val[k] >= '0' && val[k] <= '9' && v < INT64_MAX / 10 - 9; k++) v = v * 10 + (val[k] - '0');
      if (k != vlen || vlen == 0) return dl_err(EM_TAR_PAX, OP, s->path, (long long)at_off, rec);
      e->size = v;
    } else if (klen > 11 && !memcmp(key, "GNU.sparse.", 11)) {
      e->sparse = 1;
    }
    i += len;
  }
  return 0;
}

/* Where a member's name comes from, in tarfile's order: a pax path (the
** member's own, then a global one), a GNU long name, the ustar prefix and
** name. */
static int member_name(const unsigned char *h, const ext_info *x, const ext_info *g, const char *longname,
                       char *buf, const char **name, size_t *len) {
  if (x->path || (!longname && g->path)) {
    *name = x->path ? x->path : g->path;
    *len = strlen(*name);
    return 0;
  }
  if (longname) {
    *name = longname;
    *len = strlen(longname);
    return 0;
  }
  size_t nl = strnlen((const char *)h, 100);
  /* POSIX ustar ("ustar\0"): a prefix; GNU's "ustar  " keeps other fields there */
  if (!memcmp(h + 257, "ustar\0", 6) && h[345]) {
    size_t pl = strnlen((const char *)h + 345, 155);
    memcpy(buf, h + 345, pl);
    buf[pl] = '/';
    memcpy(buf + pl + 1, h, nl);
    *len = pl + 1 + nl;
  } else {
    memcpy(buf, h, nl);
    *len = nl;
  }
  buf[*len] = '\0';
  *name = buf;
  return 0;
}

static int scan(scanner *s, dl_tar_index *x) {
  ext_info ext = { NULL, -1, 0 }, glob = { NULL, -1, 0 };
  char *longname = NULL;
  char namebuf[160 + 100 + 2];
  char last[200] = "before its first member";  /* for messages: where it stopped */
  int64_t off = 0;
  int rc = 0;
  if (s->file_size == 0) {
    rc = dl_err(EM_TAR_EMPTY, OP, s->path);
    goto out;
  }
  for (;;) {
    if (off >= s->file_size) {
      rc = dl_err(EM_TAR_TRUNC_END, OP, s->path, (long long)s->file_size, last);
      break;
    }
    if (off + BLOCK > s->file_size) {
      rc = dl_err(EM_TAR_TRUNC_HEADER, OP, s->path, (long long)off, last);
      break;
    }
    const unsigned char *h = at(s, off, BLOCK);
    if (!h) {
      rc = DL_EIO;
      break;
    }
    if (all_zero(h)) break;  /* the end-of-archive block (tarfile stops at the first) */
    int64_t stored, sum, size;
    if (!checksum_ok(h, &stored, &sum)) {
      rc = dl_err(EM_TAR_CHECKSUM, OP, s->path, (long long)off, tar_shown((const char *)h, 100), (long long)stored,
                  (long long)sum);
      break;
    }
    if (number(h + 124, 12, &size) != 0) {
      rc = dl_err(EM_TAR_FIELD, OP, s->path, tar_shown((const char *)h, 100), (long long)off, "size");
      break;
    }
    char type = (char)h[156];
    int64_t data = off + BLOCK;
    if (type == 'x' || type == 'g' || type == 'L' || type == 'K') {
      char *d = ext_data(s, data, size, type == 'L' ? "(a GNU long name)" : "(a pax extended header)");
      if (!d) {
        rc = dl_last_error_code();
        break;
      }
      if (type == 'x') rc = pax_parse(s, d, size, &ext, off);
      else if (type == 'g') rc = pax_parse(s, d, size, &glob, off);
      if (type == 'L') {
        free(longname);
        longname = d;
      } else {
        free(d);
      }
      if (rc) break;
      off = data + (size + BLOCK - 1) / BLOCK * BLOCK;
      continue;
    }
    const char *name;
    size_t nlen;
    member_name(h, &ext, &glob, longname, namebuf, &name, &nlen);
    snprintf(last, sizeof last, "after member \"%s\"", tar_shown(name, nlen));
    if (ext.size >= 0) size = ext.size;
    else if (glob.size >= 0) size = glob.size;
    int regular = type == '0' || type == '\0' || type == '7';
    int v7_dir = type == '\0' && nlen && name[nlen - 1] == '/';  /* tarfile: a directory */
    if (v7_dir) regular = 0;
    if (type == 'S' || (regular && (ext.sparse || glob.sparse))) {
      rc = dl_err(EM_TAR_SPARSE, OP, s->path, tar_shown(name, nlen));
      break;
    }
    /* links, devices, FIFOs and directories carry no data (tarfile) */
    int has_data = !(type >= '1' && type <= '6') && !v7_dir;
    if (has_data && size > s->file_size - data) {  /* no overflow: size < 2^63 */
      rc = dl_err(EM_TAR_PAST_END, OP, s->path, tar_shown(name, nlen), (long long)size, (long long)data,
                  (long long)s->file_size);
      break;
    }
    if (regular && (rc = tar_index_add(x, name, nlen, data, size)) != 0) break;
    ext_clear(&ext);
    free(longname);
    longname = NULL;
    off = has_data ? data + (size + BLOCK - 1) / BLOCK * BLOCK : data;
  }
out:
  ext_clear(&ext);
  ext_clear(&glob);
  free(longname);
  return rc;
}

DL_API dl_tar_index *dl_tar_scan(const char *path) {
  if (!path) return dl_errp(EM_NULLARG, OP, "path");
  struct stat st;
  int fd = open_file(path, &st);
  if (fd < 0) return NULL;
  dl_tar_index *x = tar_index_new();
  scanner s = { fd, path, (int64_t)st.st_size, malloc(WINDOW), 0, 0 };
  int rc = !x ? DL_ENOMEM : !s.win ? dl_err(EM_NOMEM, OP, (long long)WINDOW, (long long)dl_mem_allocated()) : 0;
  if (!rc) {
    posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    rc = scan(&s, x);
  }
  free(s.win);
  close(fd);
  if (rc) {
    dl_tar_index_free(x);
    return NULL;
  }
  x->file_size = (int64_t)st.st_size;
  x->mtime_sec = (int64_t)st.st_mtim.tv_sec;
  x->mtime_nsec = (int64_t)st.st_mtim.tv_nsec;
  return x;
}

/* -- The index cache ------------------------------------------------------- */

static void put64(unsigned char *p, int64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)((uint64_t)v >> (8 * i));
}
static int64_t get64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return (int64_t)v;
}

/* zlib's CRC-32, in pieces that fit its uInt lengths. */
static uint32_t crc_of(const unsigned char *p, int64_t n) {
  uLong c = crc32(0L, Z_NULL, 0);
  while (n > 0) {
    uInt k = n > (1 << 30) ? (1u << 30) : (uInt)n;
    c = crc32(c, p, k);
    p += k;
    n -= k;
  }
  return (uint32_t)c;
}

DL_API int dl_tar_index_save(const dl_tar_index *x, const char *idx_path) {
  if (!x) return dl_err(EM_NULLARG, OP, "index");
  if (!idx_path) return dl_err(EM_NULLARG, OP, "idx_path");
  int64_t body = IDX_HEAD + 24 * x->n + x->names_len;
  unsigned char *buf = malloc((size_t)body + 4);
  if (!buf) return dl_err(EM_NOMEM, OP, (long long)body + 4, (long long)dl_mem_allocated());
  memcpy(buf, IDX_MAGIC, 8);
  put64(buf + 8, x->file_size);
  put64(buf + 16, x->mtime_sec);
  put64(buf + 24, x->mtime_nsec);
  put64(buf + 32, x->n);
  put64(buf + 40, x->names_len);
  unsigned char *r = buf + IDX_HEAD;
  for (int64_t i = 0; i < x->n; i++, r += 24) {
    put64(r, x->off[i]);
    put64(r + 8, x->size[i]);
    put64(r + 16, x->name_at[i]);
  }
  if (x->names_len) memcpy(r, x->names, (size_t)x->names_len);
  uint32_t crc = crc_of(buf, body);
  for (int i = 0; i < 4; i++) buf[body + i] = (unsigned char)(crc >> (8 * i));
  dl_file *f = dl_file_create(idx_path, body + 4, "tar index");
  int rc = f ? dl_file_write(f, buf, (size_t)body + 4) : DL_EIO;
  free(buf);
  if (!f) return DL_EIO;
  if (rc) {
    dl_file_abort(f);
    return rc;
  }
  return dl_file_commit(f);
}

DL_API dl_tar_index *dl_tar_index_load(const char *tar_path, const char *idx_path) {
  if (!tar_path) return dl_errp(EM_NULLARG, OP, "tar_path");
  if (!idx_path) return dl_errp(EM_NULLARG, OP, "idx_path");
  struct stat st, tst;
  int fd = open_file(idx_path, &st);
  if (fd < 0) return NULL;
  int64_t len = (int64_t)st.st_size;
  unsigned char *buf = len >= IDX_HEAD + 4 ? malloc((size_t)len) : NULL;
  const char *bad = len < IDX_HEAD + 4 ? "too short" : NULL;
  if (!bad && !buf) {
    close(fd);
    return dl_errp(EM_NOMEM, OP, (long long)len, (long long)dl_mem_allocated());
  }
  if (!bad && pread_all(fd, buf, len, 0) != len) {
    int e = errno;
    close(fd);
    free(buf);
    return dl_errp(EM_TAR_OS, OP, idx_path, "read failed", e ? strerror(e) : "the file shrank");
  }
  close(fd);
  int64_t n = 0, m = 0;
  if (!bad && memcmp(buf, IDX_MAGIC, 8)) bad = "bad magic";
  if (!bad) {
    n = get64(buf + 32);
    m = get64(buf + 40);
    if (n < 0 || m < 0 || n > len / 24 || m > len || IDX_HEAD + 24 * n + m + 4 != len) bad = "bad lengths";
  }
  if (!bad) {
    uint32_t want = (uint32_t)buf[len - 4] | (uint32_t)buf[len - 3] << 8 | (uint32_t)buf[len - 2] << 16 |
                    (uint32_t)buf[len - 1] << 24;
    if (crc_of(buf, len - 4) != want) bad = "bad CRC-32";
  }
  const unsigned char *names = bad ? NULL : buf + IDX_HEAD + 24 * n;
  if (!bad && m && names[m - 1] != '\0') bad = "bad names";
  for (int64_t i = 0; !bad && i < n; i++) {
    const unsigned char *r = buf + IDX_HEAD + 24 * i;
    int64_t o = get64(r), z = get64(r + 8), a = get64(r + 16);
    if (o < 0 || z < 0 || a < 0 || a >= m || (i == 0 ? a != 0 : names[a - 1] != '\0')) bad = "bad member record";
  }
  if (bad) {
    free(buf);
    return dl_errp(EM_TAR_IDX_FORMAT, OP, idx_path, bad);
  }
  int64_t fs = get64(buf + 8), ms = get64(buf + 16), mn = get64(buf + 24);
  /* a stat, not an open: on a cluster filesystem an open costs more */
  if (stat(tar_path, &tst) != 0) {
    int e = errno;
    free(buf);
    return dl_errp(EM_TAR_OS, OP, tar_path, "cannot stat", strerror(e));
  }
  if (!S_ISREG(tst.st_mode)) {
    free(buf);
    return dl_errp(EM_TAR_NOT_FILE, OP, tar_path);
  }
  if (fs != (int64_t)tst.st_size || ms != (int64_t)tst.st_mtim.tv_sec || mn != (int64_t)tst.st_mtim.tv_nsec) {
    free(buf);
    return dl_errp(EM_TAR_IDX_STALE, OP, idx_path, tar_path, (long long)fs, (long long)ms, (long long)mn,
                   (long long)tst.st_size, (long long)tst.st_mtim.tv_sec, (long long)tst.st_mtim.tv_nsec);
  }
  dl_tar_index *x = tar_index_new();
  if (x) {
    x->off = malloc((size_t)(n ? n : 1) * sizeof(int64_t));
    x->size = malloc((size_t)(n ? n : 1) * sizeof(int64_t));
    x->name_at = malloc((size_t)(n ? n : 1) * sizeof(int64_t));
    x->names = malloc((size_t)(m ? m : 1));
  }
  if (!x || !x->off || !x->size || !x->name_at || !x->names) {
    if (x) dl_err(EM_NOMEM, OP, (long long)(24 * n + m), (long long)dl_mem_allocated());
    dl_tar_index_free(x);
    free(buf);
    return NULL;
  }
  for (int64_t i = 0; i < n; i++) {
    const unsigned char *r = buf + IDX_HEAD + 24 * i;
    x->off[i] = get64(r);
    x->size[i] = get64(r + 8);
    x->name_at[i] = get64(r + 16);
  }
  if (m) memcpy(x->names, names, (size_t)m);
  x->n = x->cap = n;
  x->names_len = x->names_cap = m;
  x->file_size = fs;
  x->mtime_sec = ms;
  x->mtime_nsec = mn;
  free(buf);
  return x;
}

/* -- Reading members ------------------------------------------------------- */

struct dl_tar_reader {
  int fd;
  int64_t file_size;
  char *path;
};

DL_API dl_tar_reader *dl_tar_open(const char *path, int64_t size, int64_t mtime_sec, int64_t mtime_nsec) {
  if (!path) return dl_errp(EM_NULLARG, OP, "path");
  struct stat st;
  int fd = open_file(path, &st);
  if (fd < 0) return NULL;
  if (size >= 0 && (size != (int64_t)st.st_size || mtime_sec != (int64_t)st.st_mtim.tv_sec ||
                    mtime_nsec != (int64_t)st.st_mtim.tv_nsec)) {
    close(fd);
    return dl_errp(EM_TAR_CHANGED, OP, path, (long long)size, (long long)mtime_sec, (long long)mtime_nsec,
                   (long long)st.st_size, (long long)st.st_mtim.tv_sec, (long long)st.st_mtim.tv_nsec);
  }
  dl_tar_reader *r = calloc(1, sizeof *r);
  char *p = strdup(path);
  if (!r || !p) {
    close(fd);
    free(r);
    free(p);
    return dl_errp(EM_NOMEM, OP, (long long)sizeof *r, (long long)dl_mem_allocated());
  }
  /* a worker reads a shard's samples in order: let the kernel read ahead */
  posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  r->fd = fd;
  r->file_size = (int64_t)st.st_size;
  r->path = p;
  return r;
}

DL_API dl_tensor *dl_tar_read(dl_tar_reader *r, int64_t offset, int64_t size, const char *member) {
  if (!r) return dl_errp(EM_NULLARG, OP, "reader");
  if (!member) member = "?";
  if (offset < 0 || size < 0) return dl_errp(EM_TAR_READ_RANGE, OP, r->path, member, (long long)offset, (long long)size);
  if (offset > r->file_size || size > r->file_size - offset)
    return dl_errp(EM_TAR_READ_PAST, OP, r->path, member, (long long)size, (long long)offset,
                   (long long)r->file_size);
  dl_tensor *t = tensor_new(DL_UINT8, &size, 1);
  if (!t) return NULL;
  errno = 0;
  int64_t got = size ? pread_all(r->fd, tensor_ptr(t), size, offset) : 0;
  if (got != size) {
    int e = errno;
    dl_tensor_release(t);
    return dl_errp(EM_TAR_SHORT_READ, OP, r->path, member, (long long)got, (long long)size, (long long)offset,
                   e ? strerror(e) : "the file shrank");
  }
  return t;
}

DL_API void dl_tar_close(dl_tar_reader *r) {
  if (!r) return;
  close(r->fd);
  free(r->path);
  free(r);
}
