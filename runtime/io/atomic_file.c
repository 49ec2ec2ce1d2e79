/*
** atomic_file.c -- files written whole or not at all (dl_file_*): a
** temporary file beside the target, written, fsynced and renamed over it,
** then the directory fsynced.  The target is where the path's symbolic
** links end, so a save through a link replaces the file and keeps the
** link; the new file takes the old one's permissions.  Every file ddplua
** writes for its user goes through here (checkpoints, token files).
*/
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/internal.h"

struct dl_file {
  int fd;
  int failed;           /* errno of the write that failed, or 0 */
  uint64_t written;     /* = the offset: the file is written in order */
  uint64_t limit;       /* RLIMIT_FSIZE, or UINT64_MAX */
  char *op, *path;      /* for messages: the caller's words */
  char *target, *tmp;   /* the file replaced; its temporary ("" once renamed) */
  char *dir;            /* the target's directory, fsynced after the rename */
};

/* -- The target and its temporary files ----------------------------------- */

/* The file a write of path replaces: path itself, or where its chain of
** symbolic links ends -- an existing file or one to create, as a shell's
** `>` writes through a link -- so the rename replaces that file and never
** the link.  A new string, or NULL with errno set (ELOOP, ENOMEM, ...). */
static char *follow_links(const char *path) {
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

/* The directory holding target: a new string, or NULL (out of memory). */
static char *dir_of(const char *target) {
  const char *slash = strrchr(target, '/');
  return slash ? strndup(target, slash == target ? 1 : (size_t)(slash - target)) : strdup(".");
}

/* Whether s is "<base>.tmp.<pid>.<n>" of a writer that is no longer alive
** (it was killed mid-write); *base_len gets the length of <base>.  A pid
** alive, or one we may not signal, is left alone; so is our own, which
** another thread may be writing. */
static int stale_temp(const char *s, size_t *base_len) {
  const char *t = strstr(s, ".tmp.");
  while (t) {  /* the last ".tmp." that parses: a base may hold one too */
    const char *more = strstr(t + 1, ".tmp.");
    if (!more) break;
    t = more;
  }
  if (!t || t == s) return 0;
  char *q;
  errno = 0;
  long pid = strtol(t + 5, &q, 10);
  if (errno || pid <= 0 || pid > INT32_MAX || *q != '.' || q == t + 5) return 0;
  if (!q[1] || strspn(q + 1, "0123456789") != strlen(q + 1)) return 0;
  if (pid == getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH) return 0;
  *base_len = (size_t)(t - s);
  return 1;
}

/* The stale temporary files of the last few directories written into.  A
** directory is listed again before a create when it held fewer than
** STALE_SMALL entries, else once every entries / 64 creates: a folder of
** 60,000 images written one by one is listed ~64 times, not 60,000 (each
** file costs ~64 entries read), and a temporary left there by a writer
** that died is still gone within that many creates. */
enum { STALE_DIRS = 8, STALE_SMALL = 1024 };
static struct {
  pthread_mutex_t mu;
  struct { char *dir; char **names; int n; long entries, creates; } d[STALE_DIRS];
  int next;
} stale = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* Lists dir into slot k (a new slot when k < 0); the slot, or -1. */
static int stale_scan(const char *dir, int k) {
  if (k < 0) {
    k = stale.next;
    stale.next = (k + 1) % STALE_DIRS;
  }
  for (int i = 0; i < stale.d[k].n; i++) free(stale.d[k].names[i]);
  free(stale.d[k].names);
  free(stale.d[k].dir);
  stale.d[k].names = NULL;
  stale.d[k].n = 0;
  stale.d[k].entries = stale.d[k].creates = 0;
  stale.d[k].dir = strdup(dir);
  if (!stale.d[k].dir) return -1;
  DIR *d = opendir(dir);
  if (!d) return k;
  struct dirent *de;
  int cap = 0;
  size_t bl;
  while ((de = readdir(d))) {
    stale.d[k].entries++;
    if (!stale_temp(de->d_name, &bl)) continue;
    if (stale.d[k].n == cap) {
      cap = cap ? 2 * cap : 8;
      char **p = realloc(stale.d[k].names, (size_t)cap * sizeof *p);
      if (!p) break;
      stale.d[k].names = p;
    }
    char *name = strdup(de->d_name);
    if (!name) break;
    stale.d[k].names[stale.d[k].n++] = name;
  }
  closedir(d);
  return k;
}

/* Removes the stale "<base>.tmp.<pid>.<n>" files in dir. */
static void remove_stale(const char *dir, const char *base) {
  pthread_mutex_lock(&stale.mu);
  int k = -1;
  for (int i = 0; i < STALE_DIRS && k < 0; i++)
    if (stale.d[i].dir && !strcmp(stale.d[i].dir, dir)) k = i;
  if (k < 0 || stale.d[k].entries < STALE_SMALL || ++stale.d[k].creates * 64 >= stale.d[k].entries)
    k = stale_scan(dir, k);
  size_t bl = strlen(base);
  for (int i = 0; k >= 0 && i < stale.d[k].n; i++) {
    char *s = stale.d[k].names[i];
    size_t sbl;
    if (strncmp(s, base, bl) || strncmp(s + bl, ".tmp.", 5) || !stale_temp(s, &sbl) || sbl != bl) continue;
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/%s", dir, s) < (int)sizeof path) unlink(path);
    free(s);
    stale.d[k].names[i--] = stale.d[k].names[--stale.d[k].n];
  }
  pthread_mutex_unlock(&stale.mu);
}

static atomic_uint tmp_counter;

/* Creates f->tmp beside f->target with the old file's permissions (a 0600
** checkpoint stays private, also while it is written) and, where allowed,
** its owner; a new file gets 0666 less the umask, as open() gives it. */
static int create_temp(dl_file *f) {
  f->dir = dir_of(f->target);
  f->tmp = calloc(1, strlen(f->target) + 48);  /* "": nothing to remove yet */
  if (!f->dir || !f->tmp)
    return dl_err(EM_NOMEM, f->op, (long long)strlen(f->target) + 48, 0LL);
  const char *slash = strrchr(f->target, '/');
  remove_stale(f->dir, slash ? slash + 1 : f->target);
  sprintf(f->tmp, "%s.tmp.%d.%u", f->target, (int)getpid(), atomic_fetch_add(&tmp_counter, 1));
  struct stat old;
  int replaces = stat(f->target, &old) == 0 && S_ISREG(old.st_mode);
  f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, replaces ? old.st_mode & 0777 : 0666);
  if (f->fd < 0) {
    f->tmp[0] = '\0';  /* not ours to remove */
    return dl_err(EM_FILE_CREATE, f->op, f->path, strerror(errno));
  }
  if (!replaces) return 0;
  if ((old.st_uid != geteuid() || old.st_gid != getegid()) &&
      fchown(f->fd, old.st_uid, old.st_gid) != 0 && fchown(f->fd, (uid_t)-1, old.st_gid) != 0) {
    /* not allowed (another user's file): the new file is ours */
  }
  if (fchmod(f->fd, old.st_mode & 0777))  /* the umask took bits away */
    return dl_err(EM_FILE_MODE, f->op, f->path, strerror(errno));
  return 0;
}

/* Closes and removes what is left of f, then frees it. */
static void release(dl_file *f) {
  if (f->fd >= 0) close(f->fd);
  if (f->tmp && f->tmp[0]) unlink(f->tmp);
  free(f->tmp);
  free(f->dir);
  free(f->target);
  free(f->path);
  free(f->op);
  free(f);
}

/* -- The calls ------------------------------------------------------------ */

DL_API dl_file *dl_file_create(const char *path, int64_t size, const char *op) {
  if (!op) op = "write";
  if (!path) return dl_errp(EM_NULLARG, op, "path");
  /* a file size limit (ulimit -f) fails here, before a byte is written:
  ** past it, write() would raise SIGXFSZ, which kills a process that does
  ** not ignore it (the ddplua program does) */
  struct rlimit fsz;
  uint64_t limit = getrlimit(RLIMIT_FSIZE, &fsz) == 0 && fsz.rlim_cur != RLIM_INFINITY
                       ? (uint64_t)fsz.rlim_cur : UINT64_MAX;
  if (size >= 0 && (uint64_t)size > limit)
    return dl_errp(EM_FILE_WRITE, op, path, strerror(EFBIG));
  dl_file *f = calloc(1, sizeof *f);
  if (!f) return dl_errp(EM_NOMEM, op, (long long)sizeof *f, 0LL);
  f->fd = -1;
  f->limit = limit;
  f->op = strdup(op);
  f->path = strdup(path);
  if (!f->op || !f->path) {
    release(f);
    return dl_errp(EM_NOMEM, op, (long long)strlen(path), 0LL);
  }
  f->target = follow_links(path);
  if (!f->target) {
    int e = errno;
    release(f);
    return e == ENOMEM ? dl_errp(EM_NOMEM, op, (long long)strlen(path), 0LL)
                       : dl_errp(EM_FILE_LINKS, op, path, strerror(e));
  }
  if (create_temp(f)) {
    release(f);
    return NULL;
  }
  return f;
}

DL_API int dl_file_write(dl_file *f, const void *data, size_t n) {
  if (!f) return dl_err(EM_NULLARG, "write", "file");
  if (f->failed) return dl_err(EM_FILE_FAILED, f->op, f->path, strerror(f->failed));
  if (!n) return 0;
  if (!data) return dl_err(EM_NULLARG, f->op, "data");
  const char *p = data;
  while (n) {
    size_t chunk = n > (1u << 30) ? 1u << 30 : n;
    ssize_t w = -1;
    if (f->written + chunk > f->limit) errno = EFBIG;  /* not SIGXFSZ */
    else w = write(f->fd, p, chunk);
    if (w < 0 && errno == EINTR) continue;
    if (w == 0) errno = ENOSPC;  /* a regular file that takes nothing is full */
    if (w <= 0) {
      f->failed = errno;
      return dl_err(EM_FILE_WRITE, f->op, f->path, strerror(errno));
    }
    p += w, n -= (size_t)w, f->written += (uint64_t)w;
  }
  return 0;
}

DL_API int dl_file_commit(dl_file *f) {
  if (!f) return dl_err(EM_NULLARG, "commit", "file");
  int rc = 0;
  if (f->failed) {
    rc = dl_err(EM_FILE_FAILED, f->op, f->path, strerror(f->failed));
    goto done;
  }
  if (fsync(f->fd)) {
    rc = dl_err(EM_FILE_FSYNC, f->op, f->path, strerror(errno));
    goto done;
  }
  int cr = close(f->fd);
  f->fd = -1;
  if (cr) {
    rc = dl_err(EM_FILE_CLOSE, f->op, f->path, strerror(errno));
    goto done;
  }
  if (rename(f->tmp, f->target)) {
    rc = dl_err(EM_FILE_RENAME, f->op, f->path, strerror(errno));
    goto done;
  }
  f->tmp[0] = '\0';  /* renamed: nothing to remove any more */
  /* the rename is durable only once the directory is; EINVAL: a filesystem
  ** that cannot sync directories, where there is nothing more to do */
  int dfd = open(f->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    int sr = fsync(dfd), e = errno;
    close(dfd);
    if (sr && e != EINVAL) rc = dl_err(EM_FILE_DIRSYNC, f->op, f->path, strerror(e));
  }
done:
  release(f);
  return rc;
}

DL_API void dl_file_abort(dl_file *f) {
  if (f) release(f);  /* sets no error: the caller's reason stays the last one */
}
