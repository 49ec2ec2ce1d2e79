/*
** safetensors_save.c -- writing checkpoints in the safetensors format,
** atomically: laid out as the reference implementation does (tensors sorted
** by descending dtype alignment, then by name, so each starts aligned), into
** a temporary file beside the target that is fsynced and renamed over it
** (the target: where the path's symbolic links lead; the new file takes the
** old one's permissions).
*/
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* -- Writing -------------------------------------------------------------- */

static int write_all(int fd, const char *p, size_t n) {
  while (n) {
    ssize_t w = write(fd, p, n > (1u << 30) ? 1u << 30 : n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return -1;
    p += w, n -= (size_t)w;
  }
  return 0;
}

/* Removes "<base>.tmp.<pid>.<n>" files in dir whose writer is no longer
** alive (it was killed mid-save).  A pid alive, or one we may not signal, is
** left alone; so is our own, which another thread may be writing. */
static void remove_stale(const char *dir, const char *base) {
  DIR *d = opendir(dir);
  if (!d) return;
  size_t bl = strlen(base);
  struct dirent *de;
  while ((de = readdir(d))) {
    const char *s = de->d_name;
    if (strncmp(s, base, bl) || strncmp(s + bl, ".tmp.", 5)) continue;
    char *q;
    errno = 0;
    long pid = strtol(s + bl + 5, &q, 10);
    if (errno || pid <= 0 || pid > INT32_MAX || *q != '.' || q == s + bl + 5)
      continue;
    if (!q[1] || strspn(q + 1, "0123456789") != strlen(q + 1)) continue;
    if (pid == getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
    unlinkat(dirfd(d), s, 0);
  }
  closedir(d);
}

static atomic_uint tmp_counter;

/* The file a save of path replaces: path itself, or where its chain of
** symbolic links ends -- an existing file or one to create, as a shell's
** `>` writes through a link -- so the rename replaces that file and never
** the link.  A new string, or NULL with errno set (ELOOP, ENOMEM, ...). */
static char *save_target(const char *path) {
  char *p = strdup(path);
  for (int hops = 0; p; hops++) {
    struct stat st;
    if (lstat(p, &st) != 0 || !S_ISLNK(st.st_mode)) return p;
    char link[PATH_MAX];
    ssize_t n = hops < 40 ? readlink(p, link, sizeof link) : -1;
    if (hops >= 40) errno = ELOOP;
    else if (n >= (ssize_t)sizeof link) errno = ENAMETOOLONG;
    if (n < 0 || n >= (ssize_t)sizeof link) {
      free(p);
      return NULL;
    }
    link[n] = '\0';
    /* a relative link is relative to the directory holding it */
    const char *slash = link[0] == '/' ? NULL : strrchr(p, '/');
    size_t keep = slash ? (size_t)(slash - p) + 1 : 0;
    char *next = malloc(keep + (size_t)n + 1);
    if (next) {
      memcpy(next, p, keep);
      memcpy(next + keep, link, (size_t)n + 1);
    }
    free(p);
    p = next;
  }
  return NULL;
}

/* The file body: header, then each tensor contiguous (copied when not; a
** CUDA tensor through a host copy, one tensor at a time). */
static int write_file(int fd, const sbuf *h, const save_item *it, int n) {
  unsigned char len[8];
  for (int i = 0; i < 8; i++) len[i] = (unsigned char)((uint64_t)h->n >> (8 * i));
  if (write_all(fd, (const char *)len, 8) || write_all(fd, h->p, h->n)) return -1;
  for (int i = 0; i < n; i++) {
    if (!it[i].nbytes) continue;
    dl_tensor *h = dl_to_device(it[i].t, -1), *c = h ? dl_contiguous(h) : NULL;
    dl_tensor_release(h);
    if (!c) return -2;
    int rc = write_all(fd, tensor_first(c), (size_t)it[i].nbytes);
    int e = errno;
    dl_tensor_release(c);
    errno = e;
    if (rc) return -1;
  }
  return 0;
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
  save_item *it = calloc((size_t)n + 1, sizeof *it);
  const char ***ptrs = calloc((size_t)(n > nmeta ? n : nmeta) + 1, sizeof *ptrs);
  sbuf h = {0};
  char *tmp = NULL, *dir = NULL, *target = NULL;
  int fd = -1, rc = -1;
  if (!it || !ptrs) {
    rc = dl_err(EM_NOMEM, "save", (long long)n * 32, 0LL);
    goto done;
  }
  /* -- arguments: every name valid JSON, every tensor readable (CUDA ones
  ** are saved as PyTorch saves them: the values; loading puts them where
  ** the caller says, the CPU by default) */
  for (int i = 0; i < n; i++) {
    const char *nm = names[i];
    char what[96];
    if (!nm) { rc = dl_err(EM_NULLARG, "save", "name"); goto done; }
    snprintf(what, sizeof what, "tensor name \"%s\"", st_show(nm));
    if (!strcmp(nm, "__metadata__")) { rc = dl_err(EM_ST_RESERVED, "save", path); goto done; }
    if (!st_utf8_valid(nm)) { rc = dl_err(EM_ST_UTF8, "save", path, what); goto done; }
    if ((rc = check_tensor_any("save", tensors[i]))) goto done;
    it[i].name = nm, it[i].t = tensors[i];
    it[i].nbytes = (uint64_t)dl_tensor_numel(tensors[i]) *
                   (uint64_t)dl_dtype_sizes[tensors[i]->dtype];
    ptrs[i] = &it[i].name;
  }
  const char *dup = find_dup(ptrs, n);
  if (dup) { rc = dl_err(EM_ST_DUP, "save", path, "tensor name", st_show(dup)); goto done; }
  for (int i = 0; i < nmeta; i++) {
    char what[96];
    if (!meta_keys[i] || !meta_values[i]) { rc = dl_err(EM_NULLARG, "save", "metadata"); goto done; }
    snprintf(what, sizeof what, "metadata key \"%s\"", st_show(meta_keys[i]));
    if (!st_utf8_valid(meta_keys[i]) || !st_utf8_valid(meta_values[i])) {
      if (st_utf8_valid(meta_keys[i])) strcat(what, "'s value");
      rc = dl_err(EM_ST_UTF8, "save", path, what);
      goto done;
    }
    ptrs[i] = (const char **)&meta_keys[i];
  }
  dup = find_dup(ptrs, nmeta);  /* leaves ptrs sorted by key */
  if (dup) { rc = dl_err(EM_ST_DUP, "save", path, "metadata key", st_show(dup)); goto done; }

  /* -- the header, laid out as the reference's serde_json writes it */
  st_sort(it, n, sizeof *it, by_rank_name);
  sb_str(&h, "{");
  if (nmeta) {
    sb_str(&h, "\"__metadata__\":{");
    for (int i = 0; i < nmeta; i++) {
      if (i) sb_str(&h, ",");
      sb_json(&h, *ptrs[i]);
      sb_str(&h, ":");
      sb_json(&h, meta_values[ptrs[i] - (const char **)meta_keys]);
    }
    sb_str(&h, n ? "}," : "}");
  }
  uint64_t off = 0;
  for (int i = 0; i < n; i++) {
    char num[64];
    const dl_tensor *t = it[i].t;
    if (i) sb_str(&h, ",");
    sb_json(&h, it[i].name);
    sb_str(&h, ":{\"dtype\":\"");
    sb_str(&h, st_dtype_names[t->dtype]);
    sb_str(&h, "\",\"shape\":[");
    for (int d = 0; d < t->ndim; d++) {
      snprintf(num, sizeof num, d ? ",%lld" : "%lld", (long long)t->shape[d]);
      sb_str(&h, num);
    }
    snprintf(num, sizeof num, "],\"data_offsets\":[%llu,%llu]}",
             (unsigned long long)off, (unsigned long long)(off + it[i].nbytes));
    sb_str(&h, num);
    off += it[i].nbytes;
  }
  sb_str(&h, "}");
  while (h.n % 8) sb_str(&h, " ");
  if (h.oom) { rc = dl_err(EM_NOMEM, "save", (long long)h.n, 0LL); goto done; }
  if (h.n > ST_MAX_HEADER) {
    rc = dl_err(EM_ST_HDR_SIZE, "save", path, (long long)h.n, ST_MAX_HEADER);
    goto done;
  }

  /* -- a file size limit (ulimit -f) fails the save here, before a byte is
  ** written: past it, write() would raise SIGXFSZ, which kills a process
  ** that does not ignore it (the ddplua program does) */
  struct rlimit fsz;
  if (getrlimit(RLIMIT_FSIZE, &fsz) == 0 && fsz.rlim_cur != RLIM_INFINITY &&
      8 + (uint64_t)h.n + off > (uint64_t)fsz.rlim_cur) {
    rc = dl_err(EM_ST_OS, "save", path, "write failed", strerror(EFBIG));
    goto done;
  }

  /* -- write beside the target (the end of path's symbolic links), fsync,
  ** rename over it, fsync the directory */
  target = save_target(path);
  if (!target) {
    rc = errno == ENOMEM ? dl_err(EM_NOMEM, "save", (long long)strlen(path), 0LL)
                         : dl_err(EM_ST_OS, "save", path, "cannot follow its symbolic links",
                                  strerror(errno));
    goto done;
  }
  const char *slash = strrchr(target, '/');
  dir = slash ? strndup(target, slash == target ? 1 : (size_t)(slash - target)) : strdup(".");
  tmp = malloc(strlen(target) + 48);
  if (!dir || !tmp) { rc = dl_err(EM_NOMEM, "save", (long long)strlen(path), 0LL); goto done; }
  remove_stale(dir, slash ? slash + 1 : target);
  sprintf(tmp, "%s.tmp.%d.%u", target, (int)getpid(), atomic_fetch_add(&tmp_counter, 1));
  /* the old file's permissions (a 0600 checkpoint stays private, also while
  ** it is written) and, where allowed, its owner; a new file gets 0666 less
  ** the umask, as open() gives it */
  struct stat old;
  int replaces = stat(target, &old) == 0 && S_ISREG(old.st_mode);
  fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, replaces ? old.st_mode & 0777 : 0666);
  if (fd < 0) {
    rc = dl_err(EM_ST_OS, "save", path, "cannot create a temporary file beside it",
                strerror(errno));
    goto done;
  }
  if (replaces) {
    if ((old.st_uid != geteuid() || old.st_gid != getegid()) &&
        fchown(fd, old.st_uid, old.st_gid) != 0 && fchown(fd, (uid_t)-1, old.st_gid) != 0) {
      /* not allowed (another user's file): the new file is ours */
    }
    if (fchmod(fd, old.st_mode & 0777)) {  /* the umask took bits away */
      rc = dl_err(EM_ST_OS, "save", path, "cannot give the new file the old one's mode",
                  strerror(errno));
      goto done;
    }
  }
  int w = write_file(fd, &h, it, n);
  if (w == -2) {  /* out of memory copying a view: the error is set */
    rc = dl_last_error_code();
    goto done;
  }
  if (w) { rc = dl_err(EM_ST_OS, "save", path, "write failed", strerror(errno)); goto done; }
  if (fsync(fd)) { rc = dl_err(EM_ST_OS, "save", path, "fsync failed", strerror(errno)); goto done; }
  int cr = close(fd);
  fd = -1;
  if (cr) { rc = dl_err(EM_ST_OS, "save", path, "close failed", strerror(errno)); goto done; }
  if (rename(tmp, target)) {
    rc = dl_err(EM_ST_OS, "save", path, "cannot rename the temporary file over it",
                strerror(errno));
    goto done;
  }
  free(tmp);
  tmp = NULL;  /* renamed: nothing to remove any more */
  /* the rename is durable only once the directory is; EINVAL: a filesystem
  ** that cannot sync directories, where there is nothing more to do */
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    int sr = fsync(dfd), e = errno;
    close(dfd);
    if (sr && e != EINVAL) {
      rc = dl_err(EM_ST_OS, "save", path, "fsync of its directory failed", strerror(e));
      goto done;
    }
  }
  rc = 0;
done:
  if (fd >= 0) close(fd);
  if (tmp) {
    unlink(tmp);
    free(tmp);
  }
  free(dir);
  free(target);
  free(h.p);
  free(ptrs);
  free(it);
  return rc;
}
