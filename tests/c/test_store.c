/* test_store.c -- the rendezvous store: concurrency, blocking, timeouts,
** tokens, malformed frames, ports; all on 127.0.0.1 with bounded waits. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "dist/store.h"

static int port;

static double mono(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_ms(int ms) {
  struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
  nanosleep(&ts, NULL);
}

static void *adder(void *arg) {
  (void)arg;
  dl_store *c = dl_store_connect("127.0.0.1", port, "secret", 10);
  if (!c) return (void *)1;
  long bad = 0;
  for (int i = 0; i < 1000; i++)
    if (dl_store_add(c, "counter", 1, NULL)) bad++;
  dl_store_close(c);
  return (void *)bad;
}

static void *late_setter(void *arg) {
  (void)arg;
  dl_store *c = dl_store_connect("127.0.0.1", port, "secret", 10);
  if (!c) return (void *)1;
  sleep_ms(150);
  long rc = dl_store_set(c, "late", "hello", 5);
  dl_store_close(c);
  return (void *)rc;
}

static void *barrier_rank(void *arg) {
  (void)arg;
  dl_store *c = dl_store_connect("127.0.0.1", port, "secret", 10);
  if (!c) return (void *)1;
  long bad = 0;
  for (int round = 0; round < 3; round++)
    if (dl_store_barrier(c, "bar", 4, 10)) bad++;
  dl_store_close(c);
  return (void *)bad;
}

/* A raw socket past the handshake, to send frames no client would. */
static int raw_connect(const char *token) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  if (connect(fd, (struct sockaddr *)&a, sizeof a)) { close(fd); return -1; }
  unsigned char h[9] = { 1, 0, 0, 0, 0, 0, 0, 0, 0 };
  uint32_t n = (uint32_t)strlen(token);
  memcpy(h + 1, &n, 4);  /* little-endian host */
  if (send(fd, h, 9, MSG_NOSIGNAL) != 9 || send(fd, token, n, MSG_NOSIGNAL) != (ssize_t)n) {
    close(fd);
    return -1;
  }
  return fd;
}

/* 1 when the peer closed the connection within 2 s (replies are skipped). */
static int closed_by_peer(int fd) {
  char buf[256];
  for (int i = 0; i < 200; i++) {
    struct pollfd p = { .fd = fd, .events = POLLIN };
    if (poll(&p, 1, 10) == 1) {
      ssize_t r = recv(fd, buf, sizeof buf, 0);
      if (r <= 0) return 1;
    }
  }
  return 0;
}

int main(void) {
  dl_store *srv = dl_store_server("127.0.0.1", 0, "secret");
  CHECK(srv != NULL);
  if (!srv) return check_report("test_store");
  port = dl_store_port(srv);
  CHECK(port > 0 && port < 65536, "port %d", port);

  /* port 0 picks a free port: a second server gets another one */
  dl_store *srv2 = dl_store_server(NULL, 0, "other");
  CHECK(srv2 && dl_store_port(srv2) != port);
  dl_store *clash = dl_store_server("127.0.0.1", port, "x");
  CHECK(clash == NULL && dl_last_error_code() == DL_EIO, "binding a used port fails");
  dl_store_close(clash);
  dl_store_close(srv2);

  dl_store *c = dl_store_connect("127.0.0.1", port, "secret", 5);
  CHECK(c != NULL);
  if (!c) return check_report("test_store");

  /* set / get / check / delete / num_keys */
  CHECK(dl_store_set(c, "a", "xyz", 3) == 0);
  int64_t len = -1;
  char *v = dl_store_get(c, "a", 1, &len);
  CHECK(v && len == 3 && !memcmp(v, "xyz", 3));
  dl_store_value_free(v);
  CHECK(dl_store_set(c, "empty", "", 0) == 0);
  v = dl_store_get(c, "empty", 1, &len);
  CHECK(v && len == 0);
  dl_store_value_free(v);
  const char *ks[2] = { "a", "nope" };
  CHECK(dl_store_check(c, ks, 1) == 1);
  CHECK(dl_store_check(c, ks, 2) == 0);
  CHECK(dl_store_num_keys(c) == 2);
  CHECK(dl_store_num_keys(srv) == 2, "the server handle is a client too");
  CHECK(dl_store_delete(c, "empty") == 1);
  CHECK(dl_store_delete(c, "empty") == 0);
  CHECK(dl_store_num_keys(c) == 1);

  /* a big value round-trips */
  size_t big = 3u << 20;
  char *bv = malloc(big);
  for (size_t i = 0; i < big; i++) bv[i] = (char)(i * 7);
  CHECK(dl_store_set(c, "big", bv, (int64_t)big) == 0);
  v = dl_store_get(c, "big", 5, &len);
  CHECK(v && len == (int64_t)big && !memcmp(v, bv, big));
  dl_store_value_free(v);
  free(bv);

  /* add: atomic across 4 clients x 1000 */
  pthread_t th[4];
  for (int i = 0; i < 4; i++) pthread_create(&th[i], NULL, adder, NULL);
  long bad = 0;
  for (int i = 0; i < 4; i++) {
    void *r;
    pthread_join(th[i], &r);
    bad += (long)r;
  }
  CHECK(bad == 0, "%ld adds failed", bad);
  int64_t n = 0;
  CHECK(dl_store_add(c, "counter", 0, &n) == 0 && n == 4000, "counter %lld", (long long)n);
  v = dl_store_get(c, "counter", 1, &len);
  CHECK(v && !strcmp(v, "4000"), "stored as decimal text");
  dl_store_value_free(v);
  CHECK(dl_store_add(c, "neg", -5, &n) == 0 && n == -5);
  CHECK(dl_store_add(c, "a", 1, &n) == DL_ESTATE && strstr(dl_last_error(), "not an integer"),
        "add on a non-integer value");
  CHECK(dl_store_num_keys(c) >= 3, "the connection survives an error reply");

  /* compare_set */
  v = dl_store_compare_set(c, "cas", "", 0, "one", 3, &len);
  CHECK(v && len == 3 && !memcmp(v, "one", 3), "missing key with empty expected is set");
  dl_store_value_free(v);
  v = dl_store_compare_set(c, "cas", "zzz", 3, "two", 3, &len);
  CHECK(v && len == 3 && !memcmp(v, "one", 3), "wrong expected leaves it");
  dl_store_value_free(v);
  v = dl_store_compare_set(c, "cas", "one", 3, "two", 3, &len);
  CHECK(v && len == 3 && !memcmp(v, "two", 3), "right expected swaps");
  dl_store_value_free(v);

  /* a blocking get satisfied by a later set from another client */
  pthread_t ls;
  pthread_create(&ls, NULL, late_setter, NULL);
  v = dl_store_get(c, "late", 5, &len);
  CHECK(v && len == 5 && !memcmp(v, "hello", 5));
  dl_store_value_free(v);
  pthread_join(ls, NULL);

  /* timeouts name the operation and the key, and the handle recovers */
  v = dl_store_get(c, "rank3/addr", 0.2, &len);
  CHECK(v == NULL && dl_last_error_code() == DL_ESTATE &&
        strstr(dl_last_error(), "store.get: timed out after 0.2 s waiting for key \"rank3/addr\""),
        "got: %s", dl_last_error());
  const char *wk[2] = { "a", "never" };
  CHECK(dl_store_wait(c, wk, 2, 0.2) == DL_ESTATE && strstr(dl_last_error(), "store.wait") &&
        strstr(dl_last_error(), "\"never\""), "got: %s", dl_last_error());
  CHECK(dl_store_wait(c, wk, 1, 1) == 0);
  CHECK(dl_store_set(c, "after", "1", 1) == 0, "the handle works after a timeout");

  /* a wait in slices (as dist.lua's, 1 s each) keeps its connection: the
  ** server answers "not yet" when a slice ends, so there is no reconnect
  ** and handshake per slice, and each slice still ends on time */
  long acc0 = -1, auth0 = -1, acc1 = -1, auth1 = -1;
  store_server_counts(store_server_of(srv), &acc0, &auth0);
  const char *nk[1] = { "slow/key" };
  double t0 = mono();
  int slices_ok = 0;
  for (int i = 0; i < 5; i++) {
    slices_ok += dl_store_wait(c, nk, 1, 0.2) == DL_ESTATE &&
                 strstr(dl_last_error(), "store.wait: timed out after 0.2 s waiting for key \"slow/key\"");
    v = dl_store_get(c, nk[0], 0.2, &len);
    slices_ok += v == NULL && dl_last_error_code() == DL_ESTATE &&
                 strstr(dl_last_error(), "store.get: timed out after 0.2 s");
  }
  double dt = mono() - t0;
  CHECK(slices_ok == 10, "%d of 10 slices timed out as they should: %s", slices_ok, dl_last_error());
  CHECK(dt > 1.9 && dt < 4, "10 slices of 0.2 s took %.2f s", dt);
  store_server_counts(store_server_of(srv), &acc1, &auth1);
  CHECK(acc1 == acc0 && auth1 == auth0,
        "10 slices opened %ld connections and %ld handshakes", acc1 - acc0, auth1 - auth0);
  CHECK(dl_store_set(c, nk[0], "v", 1) == 0 && dl_store_wait(c, nk, 1, 1) == 0);

  /* barrier, reused for three rounds by four clients */
  pthread_t br[4];
  for (int i = 0; i < 4; i++) pthread_create(&br[i], NULL, barrier_rank, NULL);
  bad = 0;
  for (int i = 0; i < 4; i++) {
    void *r;
    pthread_join(br[i], &r);
    bad += (long)r;
  }
  CHECK(bad == 0, "%ld barriers failed", bad);

  /* the wrong token is refused */
  dl_store *w = dl_store_connect("127.0.0.1", port, "wrong", 1);
  CHECK(w == NULL && dl_last_error_code() == DL_ESTATE && strstr(dl_last_error(), "token"));
  dl_store_close(w);
  w = dl_store_connect("127.0.0.1", port, NULL, 1);
  CHECK(w == NULL, "no token is refused too");
  dl_store_close(w);

  /* nothing listening: connect retries, then names the address */
  dl_store *none = dl_store_server("127.0.0.1", 0, "x");
  int dead_port = dl_store_port(none);
  dl_store_close(none);
  w = dl_store_connect("127.0.0.1", dead_port, "x", 0.3);
  CHECK(w == NULL && dl_last_error_code() == DL_EIO && strstr(dl_last_error(), "could not connect"),
        "got: %s", dl_last_error());

  /* malformed and oversized frames close only their own connection */
  int fd = raw_connect("secret");
  unsigned char bogus[9] = { 200, 0, 0, 0, 0, 0, 0, 0, 0 };
  CHECK(fd >= 0 && send(fd, bogus, 9, MSG_NOSIGNAL) == 9);
  CHECK(closed_by_peer(fd), "unknown opcode closes");
  close(fd);
  fd = raw_connect("secret");
  unsigned char huge[9] = { 2, 0, 0, 0, 1, 0, 0, 0, 0 };  /* key of 16 MiB */
  CHECK(fd >= 0 && send(fd, huge, 9, MSG_NOSIGNAL) == 9);
  CHECK(closed_by_peer(fd), "oversized key closes");
  close(fd);
  fd = raw_connect("secret");
  unsigned char hugev[9] = { 2, 1, 0, 0, 0, 0, 0, 0, 0x20 };  /* value of 512 MiB */
  CHECK(fd >= 0 && send(fd, hugev, 9, MSG_NOSIGNAL) == 9);
  CHECK(closed_by_peer(fd), "oversized value closes");
  close(fd);
  fd = raw_connect("secret");
  unsigned char badadd[9 + 1 + 3] = { 4, 1, 0, 0, 0, 3, 0, 0, 0, 'k', 1, 2, 3 };
  CHECK(fd >= 0 && send(fd, badadd, sizeof badadd, MSG_NOSIGNAL) == (ssize_t)sizeof badadd);
  CHECK(closed_by_peer(fd), "add with a short delta closes");
  close(fd);
  fd = raw_connect("secret");
  CHECK(fd >= 0 && send(fd, "\x02\x05\x00", 3, MSG_NOSIGNAL) == 3);
  close(fd);  /* truncated frame, then gone */
  fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  CHECK(connect(fd, (struct sockaddr *)&a, sizeof a) == 0);
  unsigned char noauth[9] = { 8, 0, 0, 0, 0, 0, 0, 0, 0 };
  CHECK(send(fd, noauth, 9, MSG_NOSIGNAL) == 9);
  CHECK(closed_by_peer(fd), "a request before the handshake closes");
  close(fd);
  v = dl_store_get(c, "a", 1, &len);
  CHECK(v && len == 3 && !memcmp(v, "xyz", 3), "other clients and the data are intact");
  dl_store_value_free(v);
  CHECK(dl_store_add(c, "counter", 1, &n) == 0 && n == 4001);

  /* client-side limits are checked before sending */
  char *longkey = malloc(70000);
  memset(longkey, 'k', 69999);
  longkey[69999] = 0;
  CHECK(dl_store_set(c, longkey, "x", 1) == DL_EINVAL);
  free(longkey);

  /* the server closing under a client gives an error, not SIGPIPE */
  dl_store_close(srv);
  CHECK(dl_store_set_timeout(c, 0.3) == 0);
  CHECK(dl_store_set(c, "x", "1", 1) < 0, "after the server closed");
  CHECK(dl_store_set(c, "x", "1", 1) == DL_EIO && strstr(dl_last_error(), "store.set"),
        "and again: %s", dl_last_error());
  dl_store_close(c);
  return check_report("test_store");
}
