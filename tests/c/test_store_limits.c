/* test_store_limits.c -- the rendezvous store under exhaustion: idle and
** half-sent handshakes, out of descriptors, log floods, and a rendezvous of
** 1,024 clients at the default open-file limit raised as the launcher does.
** Servers that need their own limits run in forked children. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

enum { NCHILD = 8, PER_CHILD = 128 };  /* 1,024 clients */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_ms(int ms) {
  struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
  nanosleep(&ts, NULL);
}

/* A plain TCP connection that says nothing; -1 on failure. */
static int raw_open(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a)) {
    if (fd >= 0) close(fd);
    return -1;
  }
  return fd;
}

/* 1 when the peer has closed fd (EOF or reset), waiting at most ms. */
static int peer_closed(int fd, int ms) {
  struct pollfd p = { .fd = fd, .events = POLLIN };
  if (poll(&p, 1, ms) != 1) return 0;
  char buf[512];
  ssize_t r;
  while ((r = recv(fd, buf, sizeof buf, MSG_DONTWAIT)) > 0) {}
  return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

static long rss_kib(void) {
  long pages = 0, res = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if (f) {
    if (fscanf(f, "%ld %ld", &pages, &res) != 2) res = 0;
    fclose(f);
  }
  return res * (sysconf(_SC_PAGESIZE) / 1024);
}

/* CPU seconds (user + system) used so far by process pid. */
static double cpu_s(pid_t pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  char *p = strrchr(buf, ')');
  unsigned long ut = 0, st = 0;
  /* fields 3..13 are skipped; 14 and 15 are utime and stime */
  if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
    return -1;
  return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* Forks a process serving a store with its soft open-file limit set to soft
** (then raised to the hard limit when raise_limit, as the launcher does) and
** its stderr in errfile (NULL: /dev/null).  Returns the pid; *port is set. */
static pid_t serve_child(rlim_t soft, int raise_limit, const char *errfile, int *port) {
  int p[2];
  if (pipe(p)) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    close(p[0]);
    if (!freopen(errfile ? errfile : "/dev/null", "w", stderr)) _exit(1);
    setvbuf(stderr, NULL, _IOLBF, 0);
    struct rlimit r;
    getrlimit(RLIMIT_NOFILE, &r);
    r.rlim_cur = soft < r.rlim_max ? soft : r.rlim_max;
    setrlimit(RLIMIT_NOFILE, &r);
    if (raise_limit) {
      r.rlim_cur = r.rlim_max;
      setrlimit(RLIMIT_NOFILE, &r);
    }
    dl_store *s = dl_store_server("127.0.0.1", 0, "secret");
    int pt = s ? dl_store_port(s) : -1;
    if (write(p[1], &pt, sizeof pt) != sizeof pt) _exit(1);
    close(p[1]);
    for (;;) pause();
  }
  close(p[1]);
  *port = -1;
  if (pid > 0 && read(p[0], port, sizeof *port) != sizeof *port) *port = -1;
  close(p[0]);
  return pid;
}

static void end_child(pid_t pid) {
  if (pid <= 0) return;
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
}

/* One process of PER_CHILD clients.  rendezvous: each adds to "arrived";
** the one that makes it NCHILD * PER_CHILD sets "go"; then each gets "go"
** (a barrier).  Otherwise (hold): connect all, hold them until "release".
** Exit status: bit 0 some client failed, bit 1 some failure named the
** descriptor shortage, bit 2 the rendezvous failed. */
static void client_child(int port, int rendezvous) {
  dl_store *c[PER_CHILD];
  int st = 0, ok = 0;
  for (int i = 0; i < PER_CHILD; i++) {
    c[i] = dl_store_connect("127.0.0.1", port, "secret", rendezvous ? 30 : 3);
    if (!c[i]) {
      st |= 1;
      if (strstr(dl_last_error(), "out of file descriptors")) st |= 2;
    } else {
      ok++;
    }
  }
  if (rendezvous) {
    for (int i = 0; i < PER_CHILD && !(st & 1); i++) {
      int64_t n = 0;
      if (dl_store_add(c[i], "arrived", 1, &n)) st |= 4;
      else if (n == NCHILD * PER_CHILD && dl_store_set(c[i], "go", "1", 1)) st |= 4;
    }
    for (int i = 0; i < PER_CHILD && !(st & 1); i++) {
      int64_t len;
      char *v = dl_store_get(c[i], "go", 60, &len);
      if (!v) st |= 4;
      dl_store_value_free(v);
    }
  } else {
    for (int i = 0; i < PER_CHILD; i++)
      if (c[i]) {
        dl_store_add(c[i], "held", 1, NULL);
        const char *k = "release";
        dl_store_wait(c[i], &k, 1, 30);
        break;
      }
  }
  for (int i = 0; i < PER_CHILD; i++) dl_store_close(c[i]);
  _exit(st);
}

/* Runs NCHILD client processes against port; returns the OR of their exit
** statuses.  In hold mode the parent's client ctl releases them once every
** child has connected what it could. */
static int run_clients(int port, int rendezvous, dl_store *ctl, double *secs) {
  pid_t kids[NCHILD];
  double t0 = now_s();
  for (int i = 0; i < NCHILD; i++)
    if ((kids[i] = fork()) == 0) client_child(port, rendezvous);
  if (!rendezvous && ctl) {
    int64_t held = 0;
    for (int t = 0; t < 600 && held < NCHILD; t++) {
      sleep_ms(50);
      if (dl_store_add(ctl, "held", 0, &held)) break;
    }
    dl_store_set(ctl, "release", "1", 1);
  }
  int all = 0;
  for (int i = 0; i < NCHILD; i++) {
    int ws = 0;
    if (kids[i] > 0 && waitpid(kids[i], &ws, 0) == kids[i] && WIFEXITED(ws)) all |= WEXITSTATUS(ws);
    else all |= 1;
  }
  if (secs) *secs = now_s() - t0;
  return all;
}

static int count_lines(const char *path, const char *needle, int *matches) {
  FILE *f = fopen(path, "r");
  int n = 0;
  char line[512];
  *matches = 0;
  if (!f) return -1;
  while (fgets(line, sizeof line, f)) {
    n++;
    if (strstr(line, needle)) (*matches)++;
  }
  fclose(f);
  return n;
}

/* The bound on what the store holds (DDP_STORE_MAX_MB, _KEYS): a set past
** it is refused by name and the store goes on; deleting makes room;
** overwriting a key counts its new size only. */
static void test_bound(void) {
  setenv("DDP_STORE_MAX_MB", "1", 1);
  setenv("DDP_STORE_MAX_KEYS", "5", 1);
  dl_store *bsrv = dl_store_server("127.0.0.1", 0, "secret");
  unsetenv("DDP_STORE_MAX_MB");
  unsetenv("DDP_STORE_MAX_KEYS");
  CHECK(bsrv != NULL);
  if (bsrv) {
    dl_store *bc = dl_store_connect("127.0.0.1", dl_store_port(bsrv), "secret", 5);
    static char big[400 * 1024];
    memset(big, 'x', sizeof big);
    CHECK(bc && dl_store_set(bc, "a", big, sizeof big) == 0 && dl_store_set(bc, "b", big, sizeof big) == 0);
    CHECK(dl_store_set(bc, "c", big, sizeof big) != 0, "a third 400 KiB value is past 1 MiB");
    const char *msg = dl_last_error();
    CHECK(strstr(msg, "the store refused key \"c\" (a value of 409600 bytes)") &&
          strstr(msg, "past its bound of 1 MiB (DDP_STORE_MAX_MB); delete the keys no longer needed"),
          "the refusal names the key, its size and the bound: %s", msg);
    CHECK(dl_store_set(bc, "a", big, 1000) == 0, "overwriting a key frees its old size");
    CHECK(dl_store_set(bc, "c", big, sizeof big) == 0, "then the third fits");
    CHECK(dl_store_delete(bc, "b") == 1 && dl_store_set(bc, "d", big, 1) == 0, "deleting makes room");
    for (int i = 0; i < 2; i++) {
      char k[8];
      snprintf(k, sizeof k, "k%d", i);
      CHECK(dl_store_set(bc, k, "1", 1) == 0);
    }
    CHECK(dl_store_set(bc, "k9", "1", 1) != 0 && strstr(dl_last_error(), "holds 5 keys, its bound (DDP_STORE_MAX_KEYS)"),
          "a sixth key is refused: %s", dl_last_error());
    CHECK(dl_store_set(bc, "a", "2", 1) == 0, "an existing key may still change");
    dl_store_close(bc);
    dl_store_close(bsrv);
  }
}

int main(void) {
  test_bound();
  /* This process holds both ends of many connections. */
  struct rlimit rl;
  getrlimit(RLIMIT_NOFILE, &rl);
  rl.rlim_cur = rl.rlim_max;
  setrlimit(RLIMIT_NOFILE, &rl);
  if (rl.rlim_max < 2400) {
    printf("test_store_limits: skipped (hard open-file limit %lu < 2400)\n", (unsigned long)rl.rlim_max);
    return 0;
  }
  setenv("DDPLUA_STORE_HANDSHAKE_TIMEOUT", "1", 1);

  /* (a) 300 idle connections: the oldest beyond 256 are closed at once, an
  ** authenticated client still gets in, the rest go at the deadline. */
  dl_store *srv = dl_store_server("127.0.0.1", 0, "secret");
  CHECK(srv != NULL);
  if (!srv) return check_report("test_store_limits");
  int port = dl_store_port(srv);
  int idle[300];
  for (int i = 0; i < 300; i++) idle[i] = raw_open(port);
  dl_store *c = dl_store_connect("127.0.0.1", port, "secret", 5);
  CHECK(c && dl_store_set(c, "k", "v", 1) == 0, "a client gets in past 300 idle connections");
  int early = 0;
  for (int i = 0; i < 300; i++) early += idle[i] >= 0 && peer_closed(idle[i], i < 44 ? 300 : 0);
  CHECK(early >= 44 && early < 300, "%d of 300 closed before the deadline (want the 44 beyond 256)", early);
  sleep_ms(1300);
  int late = 0;
  for (int i = 0; i < 300; i++) late += idle[i] >= 0 && peer_closed(idle[i], 200);
  CHECK(late == 300, "%d of 300 closed after the 1 s handshake deadline", late);
  for (int i = 0; i < 300; i++) if (idle[i] >= 0) close(idle[i]);
  int64_t len;
  char *v = dl_store_get(c, "k", 2, &len);
  CHECK(v && len == 1, "the authenticated client is never dropped: %s", v ? "" : dl_last_error());
  dl_store_value_free(v);

  /* (b) half-sent handshakes cannot grow the server past its bound */
  int hfd = raw_open(port);
  unsigned char hdr[9] = { 1, 0x60, 0xea, 0, 0, 0, 0, 0, 0 };  /* auth, token of 60,000 bytes */
  char *junk = calloc(1, 64 * 1024);
  CHECK(hfd >= 0 && send(hfd, hdr, 9, MSG_NOSIGNAL) == 9);
  if (send(hfd, junk, 30000, MSG_NOSIGNAL) < 0) {}
  CHECK(peer_closed(hfd, 2000), "a 60,000-byte handshake is refused at its header");
  close(hfd);
  enum { NHALF = 600 };
  int half[NHALF];
  long rss0 = rss_kib();
  for (int i = 0; i < NHALF; i++) {
    half[i] = raw_open(port);
    unsigned char h[9] = { 1, 0, 0, 0, 0, 0, 0, 0, 0 };
    uint32_t kn = i % 2 ? 4000 : 65536;  /* a legal token size, then the key limit */
    memcpy(h + 1, &kn, 4);
    if (half[i] < 0) continue;
    if (send(half[i], h, 9, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {}
    if (send(half[i], junk, kn - 100, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {}
  }
  sleep_ms(500);
  long grew = rss_kib() - rss0;
  printf("test_store_limits: %d half-sent handshakes grew the process by %ld KiB\n", NHALF, grew);
  CHECK(grew < 8 * 1024, "%d half-sent handshakes grew memory by %ld KiB (bound: 256 x 4 KiB)", NHALF, grew);
  CHECK(dl_store_num_keys(c) >= 1, "the store still answers");
  for (int i = 0; i < NHALF; i++) if (half[i] >= 0) close(half[i]);
  free(junk);
  dl_store_close(c);
  dl_store_close(srv);
  sleep_ms(1100);  /* children inherit the log rate limiter: let its second pass */

  /* (c) out of descriptors: the loop does not spin, and a client that
  ** cannot get in is told why */
  char errfile[] = "/tmp/ddplua_store_limits_XXXXXX";
  int efd = mkstemp(errfile);
  if (efd >= 0) close(efd);
  pid_t sp = serve_child(64, 0, errfile, &port);
  CHECK(sp > 0 && port > 0);
  dl_store *held[80];
  int nheld = 0, named = 0;
  char lasterr[512] = "";
  for (int i = 0; i < 80; i++) {
    held[i] = dl_store_connect("127.0.0.1", port, "secret", 2);
    if (held[i]) nheld++;
    else if (strstr(dl_last_error(), "out of file descriptors")) named++;
    else snprintf(lasterr, sizeof lasterr, "%s", dl_last_error());
  }
  CHECK(nheld > 40 && nheld < 64, "%d clients fit under a limit of 64", nheld);
  CHECK(named > 0, "clients refused for want of descriptors are told so (%d; other error: %s)",
        named, lasterr);
  int pend[5];
  for (int i = 0; i < 5; i++) pend[i] = raw_open(port);
  sleep_ms(200);
  double cpu0 = cpu_s(sp);
  sleep_ms(1000);
  double cpu = cpu_s(sp) - cpu0;
  printf("test_store_limits: out of descriptors, the server used %.2f s of CPU in 1 s\n", cpu);
  CHECK(cpu >= 0 && cpu < 0.2, "server CPU %.2f s over 1 s while out of descriptors", cpu);
  int ok = 0;
  for (int i = 0; i < 80; i++) ok += held[i] && dl_store_num_keys(held[i]) >= 0;
  CHECK(ok == nheld, "every connected client still works (%d of %d)", ok, nheld);
  for (int i = 0; i < 80; i++) dl_store_close(held[i]);
  for (int i = 0; i < 5; i++) if (pend[i] >= 0) close(pend[i]);
  end_child(sp);
  int fdlines = 0;
  count_lines(errfile, "out of file descriptors", &fdlines);
  CHECK(fdlines > 0, "the refusal is logged");

  /* (d) a flood of bad frames writes a few lines a second and a summary */
  sp = serve_child(1 << 16, 0, errfile, &port);
  double t0 = now_s();
  for (int i = 0; i < 400; i++) {
    int fd = raw_open(port);
    unsigned char bogus[9] = { 200, 0, 0, 0, 0, 0, 0, 0, 0 };
    if (fd >= 0 && send(fd, bogus, 9, MSG_NOSIGNAL) == 9) peer_closed(fd, 1000);
    if (fd >= 0) close(fd);
  }
  double flood = now_s() - t0;
  sleep_ms(2200);  /* the summary comes once its second is over */
  end_child(sp);
  int summaries = 0, lines = count_lines(errfile, "more refused or closed connections", &summaries);
  CHECK(lines > 0 && lines <= 8 * (int)(flood + 3) && summaries >= 1,
        "400 bad frames in %.1f s logged %d lines (%d summaries)", flood, lines, summaries);
  unlink(errfile);

  /* (e) 1,024 clients at the default limit: without the launcher's raise
  ** some are refused, by name; with it the rendezvous completes. */
  sp = serve_child(1024, 0, NULL, &port);
  dl_store *ctl = dl_store_connect("127.0.0.1", port, "secret", 5);
  int st = run_clients(port, 0, ctl, NULL);
  CHECK((st & 1) && (st & 2), "at 1,024 descriptors some of 1,024 clients are refused, "
        "naming the cause (status %d)", st);
  dl_store_close(ctl);
  end_child(sp);
  sp = serve_child(1024, 1, NULL, &port);
  double secs = 0;
  st = run_clients(port, 1, NULL, &secs);
  printf("test_store_limits: 1,024 clients connected and passed a barrier in %.2f s\n", secs);
  CHECK(st == 0, "1,024 clients rendezvous once the limit is raised (status %d)", st);
  end_child(sp);

  return check_report("test_store_limits");
}
