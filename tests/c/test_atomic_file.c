/*
** test_atomic_file.c -- the atomic file writer (dl_file_*), in a fresh
** directory under /tmp: a commit replaces the file whole and leaves no
** temporary; a write that fails halfway (a file size limit) or an abort
** keeps the old file and removes the temporary; the old file's mode is
** kept, a symbolic link's target replaced, dead writers' temporaries
** removed; every error names the path and what failed.
*/
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ddplua.h"
#include "check.h"

static char dir[] = "/tmp/ddplua_af_c.XXXXXX";

/* dir/name, in one of 16 rotating buffers: enough for every path a test
** holds at once. */
static const char *at(const char *name) {
  static char bufs[16][512];
  static int next;
  next = (next + 1) % 16;
  snprintf(bufs[next], sizeof bufs[next], "%s/%s", dir, name);
  return bufs[next];
}

/* How many names in dir contain ".tmp.". */
static int temps(void) {
  int n = 0;
  DIR *d = opendir(dir);
  struct dirent *e;
  while (d && (e = readdir(d)))
    if (strstr(e->d_name, ".tmp.")) n++;
  if (d) closedir(d);
  return n;
}

/* The file's contents ("" when missing), in a static buffer. */
static const char *slurp(const char *path) {
  static char buf[65536];
  buf[0] = '\0';
  FILE *f = fopen(path, "rb");
  if (!f) return buf;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

static void put(const char *path, const char *s) {
  FILE *f = fopen(path, "wb");
  if (!f) exit(2);
  fputs(s, f);
  fclose(f);
}

static unsigned mode_of(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? (unsigned)(st.st_mode & 0777) : 07777;
}

static int has(const char *needle) { return strstr(dl_last_error(), needle) != NULL; }

/* One whole write: create, write s in two pieces, commit. */
static int write_whole(const char *path, const char *s) {
  dl_file *f = dl_file_create(path, (int64_t)strlen(s), "test");
  if (!f) return dl_last_error_code();
  size_t half = strlen(s) / 2;
  int rc = dl_file_write(f, s, half);
  if (!rc) rc = dl_file_write(f, s + half, strlen(s) - half);
  if (rc) {
    dl_file_abort(f);
    return rc;
  }
  return dl_file_commit(f);
}

/* -- Commit and abort ------------------------------------------------------ */

static void test_commit_and_abort(void) {
  const char *p = at("a.txt");
  mode_t um = umask(022);
  umask(um);
  CHECK(write_whole(p, "first version") == 0);
  CHECK(!strcmp(slurp(p), "first version"));
  CHECK(mode_of(p) == (0666 & ~um), "%o", mode_of(p));  /* a new file: as open() makes it */
  CHECK(temps() == 0);

  /* before the commit the old file is there, whole, beside one temporary */
  dl_file *f = dl_file_create(p, -1, "test");
  CHECK(f && temps() == 1);
  CHECK(dl_file_write(f, "second", 6) == 0 && dl_file_write(f, NULL, 0) == 0);
  CHECK(!strcmp(slurp(p), "first version"));
  CHECK(dl_file_commit(f) == 0);
  CHECK(!strcmp(slurp(p), "second") && temps() == 0);

  /* abort: the temporary goes, the old file stays */
  f = dl_file_create(p, -1, "test");
  CHECK(f && dl_file_write(f, "never", 5) == 0 && temps() == 1);
  dl_clear_error();
  dl_file_abort(f);
  CHECK(!strcmp(slurp(p), "second") && temps() == 0);
  CHECK(dl_last_error_code() == 0);  /* abort keeps the caller's error */
  dl_file_abort(NULL);

  /* two writers of one path at once: separate temporaries, the last commit wins */
  dl_file *a = dl_file_create(p, -1, "test"), *b = dl_file_create(p, -1, "test");
  CHECK(a && b && temps() == 2);
  CHECK(dl_file_write(a, "A", 1) == 0 && dl_file_write(b, "B", 1) == 0);
  CHECK(dl_file_commit(b) == 0 && dl_file_commit(a) == 0);
  CHECK(!strcmp(slurp(p), "A") && temps() == 0);
  unlink(p);
}

/* -- A write that fails halfway ------------------------------------------------ */

static void test_size_limit(void) {
  const char *p = at("limited.bin");
  CHECK(write_whole(p, "the old file") == 0);
  struct rlimit saved, small;
  getrlimit(RLIMIT_FSIZE, &saved);
  small = saved;
  small.rlim_cur = 4096;
  void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
  CHECK(setrlimit(RLIMIT_FSIZE, &small) == 0);

  static char big[10000];
  memset(big, 'x', sizeof big);
  /* size unknown: the first write fits, the second would cross the limit */
  dl_file *f = dl_file_create(p, -1, "test");
  CHECK(f && dl_file_write(f, big, 3000) == 0);
  CHECK(dl_file_write(f, big, 3000) == DL_EIO);
  CHECK(has("test: ") && has(p) && has("write failed: File too large"), "%s", dl_last_error());
  /* the handle refuses from then on, and a commit keeps the old file */
  CHECK(dl_file_write(f, big, 1) == DL_EIO && has("an earlier write failed (File too large)"),
        "%s", dl_last_error());
  CHECK(dl_file_commit(f) == DL_EIO && has(p) && has("earlier write failed"), "%s", dl_last_error());
  CHECK(!strcmp(slurp(p), "the old file") && temps() == 0);

  /* a size known too large fails before a file is made */
  f = dl_file_create(p, (int64_t)sizeof big, "test");
  CHECK(!f && dl_last_error_code() == DL_EIO && has(p) && has("File too large"), "%s", dl_last_error());
  CHECK(temps() == 0 && !strcmp(slurp(p), "the old file"));

  /* SIGXFSZ left as it is (it kills the process): the writer never
  ** crosses the limit, so a child exits with the error, not the signal */
  signal(SIGXFSZ, SIG_DFL);
  pid_t pid = fork();
  if (pid == 0) {
    dl_file *g = dl_file_create(p, -1, "test");
    int rc = g ? dl_file_write(g, big, sizeof big) : 0;
    dl_file_abort(g);
    _exit(rc == DL_EIO && has("File too large") ? 0 : 1);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %#x", st);
  CHECK(temps() == 0 && !strcmp(slurp(p), "the old file"));

  setrlimit(RLIMIT_FSIZE, &saved);
  signal(SIGXFSZ, old_handler);
  CHECK(write_whole(p, big) == 0 && strlen(slurp(p)) == sizeof big);  /* the limit gone */
  unlink(p);
}

/* -- Mode, links, leftovers ------------------------------------------------- */

static void test_mode_and_links(void) {
  const char *p = at("secret.bin");
  static const unsigned modes[] = {0600, 0640, 0444, 0666};
  for (int i = 0; i < 4; i++) {
    CHECK(write_whole(p, "old") == 0 && chmod(p, modes[i]) == 0);
    CHECK(write_whole(p, "new") == 0 && !strcmp(slurp(p), "new"));
    CHECK(mode_of(p) == modes[i], "%o, expected %o", mode_of(p), modes[i]);
  }
  unlink(p);

  /* a relative link, then a chain: the target is replaced, the links stay */
  CHECK(mkdir(at("sub"), 0777) == 0);
  const char *target = at("sub/target.bin"), *link = at("link.bin"), *link2 = at("link2.bin");
  CHECK(write_whole(target, "target") == 0 && chmod(target, 0600) == 0);
  CHECK(symlink("sub/target.bin", link) == 0 && symlink(link, link2) == 0);
  CHECK(write_whole(link2, "through links") == 0);
  struct stat st;
  char buf[256];
  ssize_t n = readlink(link, buf, sizeof buf - 1);
  CHECK(lstat(link, &st) == 0 && S_ISLNK(st.st_mode) && n == 14 && !memcmp(buf, "sub/target.bin", 14));
  CHECK(lstat(link2, &st) == 0 && S_ISLNK(st.st_mode));
  CHECK(!strcmp(slurp(target), "through links") && mode_of(target) == 0600);
  /* a dangling link: its target is created */
  unlink(target);
  CHECK(write_whole(link, "made") == 0 && !strcmp(slurp(target), "made"));
  CHECK(lstat(link, &st) == 0 && S_ISLNK(st.st_mode) && temps() == 0);
  unlink(link);
  unlink(link2);
  unlink(target);
  rmdir(at("sub"));

  /* a dead writer's temporary is removed by the next create; a live one's
  ** (pid 1) and names not of this form stay */
  pid_t pid = fork();
  if (pid == 0) _exit(0);
  waitpid(pid, NULL, 0);
  char dead[512];
  snprintf(dead, sizeof dead, "%s.tmp.%d.7", p, (int)pid);
  put(dead, "dead");
  put(at("secret.bin.tmp.1.0"), "live");
  put(at("secret.bin.tmp.x.0"), "other");
  CHECK(temps() == 3);
  CHECK(write_whole(p, "x") == 0);
  CHECK(access(dead, F_OK) != 0 && temps() == 2);
  unlink(at("secret.bin.tmp.1.0"));
  unlink(at("secret.bin.tmp.x.0"));
  unlink(p);
}

/* -- Errors name the path and what failed -------------------------------------- */

static void test_errors(void) {
  const char *missing = at("no/such/dir/x.bin");
  CHECK(dl_file_create(missing, -1, "save") == NULL && dl_last_error_code() == DL_EIO);
  CHECK(has("save: ") && has(missing) && has("cannot create a temporary file beside it") &&
        has("No such file or directory"), "%s", dl_last_error());

  const char *a = at("loop_a"), *b = at("loop_b");
  CHECK(symlink("loop_b", a) == 0 && symlink("loop_a", b) == 0);
  CHECK(dl_file_create(a, -1, NULL) == NULL && dl_last_error_code() == DL_EIO);
  CHECK(has("write: ") && has(a) && has("cannot follow its symbolic links"), "%s", dl_last_error());
  unlink(a);
  unlink(b);

  /* the rename fails (a directory is in the way): the temporary goes */
  const char *d = at("adir");
  CHECK(mkdir(d, 0777) == 0);
  dl_file *f = dl_file_create(d, -1, "test");
  CHECK(f && dl_file_write(f, "x", 1) == 0 && temps() == 1);
  CHECK(f && dl_file_commit(f) == DL_EIO);
  CHECK(has(d) && has("cannot rename the temporary file over it"), "%s", dl_last_error());
  CHECK(temps() == 0);
  rmdir(d);

  CHECK(dl_file_create(NULL, -1, "test") == NULL && dl_last_error_code() == DL_EINVAL);
  CHECK(dl_file_write(NULL, "x", 1) == DL_EINVAL && dl_file_commit(NULL) == DL_EINVAL);
  f = dl_file_create(at("n.bin"), -1, "test");
  CHECK(f && dl_file_write(f, NULL, 1) == DL_EINVAL);
  dl_file_abort(f);
  CHECK(temps() == 0 && access(at("n.bin"), F_OK) != 0);
}

/* -- A big directory is not listed for every file written into it -------------- */

static void test_big_dir(void) {
  /* 2,000 files: listed again once every 2000/64 creates, so a temporary of
  ** a dead writer that appears after a listing goes within ~31 creates (and
  ** writing the 2,000 files lists the folder ~64 times, not 2,000) */
  CHECK(mkdir(at("big"), 0777) == 0);
  char name[600];
  for (int i = 0; i < 2000; i++) {
    snprintf(name, sizeof name, "big/%05d.png", i);
    CHECK(write_whole(at(name), "x") == 0);
  }
  pid_t pid = fork();
  if (pid == 0) _exit(0);
  waitpid(pid, NULL, 0);
  char dead[600];
  snprintf(dead, sizeof dead, "%s.tmp.%d.3", at("big/z.png"), (int)pid);
  put(dead, "dead");
  int gone_after = -1;
  for (int i = 0; i < 40 && gone_after < 0; i++) {
    CHECK(write_whole(at("big/z.png"), "z") == 0);
    if (access(dead, F_OK) != 0) gone_after = i + 1;
  }
  CHECK(gone_after > 0 && gone_after <= 2000 / 64 + 1, "the dead temporary went after %d creates", gone_after);
  unlink(dead);
  unlink(at("big/z.png"));
  for (int i = 0; i < 2000; i++) {
    snprintf(name, sizeof name, "big/%05d.png", i);
    unlink(at(name));
  }
  CHECK(rmdir(at("big")) == 0);
}

int main(void) {
  if (!mkdtemp(dir)) {
    printf("FAIL cannot make a temporary directory\n");
    return 1;
  }
  test_commit_and_abort();
  test_size_limit();
  test_mode_and_links();
  test_errors();
  test_big_dir();
  rmdir(dir);
  return check_report("test_atomic_file");
}
