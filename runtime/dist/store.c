/*
** store.c -- Rendezvous store: a TCP key-value store as PyTorch's TCPStore;
** this file has the blocking clients and the dl_store_* calls, the server
** (a poll loop on its own thread) is in store_server.c.
**
** Wire format (integers little-endian):
**   request  u8 op, u32 key length, u32 value length, key, value
**   reply    u8 status (0 ok, 1 error text), u32 length, bytes
** The first request of a connection must be AUTH carrying the token.
*/
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "dist/store.h"


/* -- Client ------------------------------------------------------------ */

struct dl_store {
  store_server *srv;    /* set on the server's own handle */
  int fd, port;
  char host[256];
  char *token;
  double timeout;
  int connected;        /* it was connected once: a refused reconnect means the server is gone */
  pthread_mutex_t mu;   /* one request at a time per handle */
};

/* How long a handle that was connected retries a refused or reset
** reconnect: the server does not come back (a new job has a new store), so
** waiting the whole timeout for it would only delay the error -- once per
** request, world x timeout in a census of ranks. */
#define STORE_RECONNECT_S 2.0

/* A get or wait tells the server how long it may park (its timeout); the
** server answers ST_NOTYET then and the connection stays.  The client
** gives the answer this much longer before it calls the server hung and
** drops the connection. */
#define STORE_NOTYET_GRACE_S 2.0

enum { IO_OK = 0, IO_TIMEOUT = 1, IO_LOST = 2 };

/* Sends every part before the deadline.  IO_LOST with errno on failure. */
static int send_parts(int fd, struct iovec *iov, int n, double deadline) {
  while (n > 0) {
    if (!iov->iov_len) { iov++, n--; continue; }
    struct msghdr m = { .msg_iov = iov, .msg_iovlen = (size_t)n };
    ssize_t w = sendmsg(fd, &m, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return IO_LOST;
      double left = deadline - now_s();
      if (left <= 0) return IO_TIMEOUT;
      struct pollfd p = { .fd = fd, .events = POLLOUT };
      poll(&p, 1, (int)(left * 1000) + 1);
      continue;
    }
    size_t k = (size_t)w;
    while (n > 0 && k >= iov->iov_len) k -= iov->iov_len, iov++, n--;
    if (n > 0) {
      iov->iov_base = (char *)iov->iov_base + k;
      iov->iov_len -= k;
    }
  }
  return IO_OK;
}

static int recv_all(int fd, void *p, size_t n, double deadline) {
  char *b = p;
  while (n > 0) {
    ssize_t r = recv(fd, b, n, 0);
    if (r > 0) { b += r, n -= (size_t)r; continue; }
    if (r == 0) { errno = ECONNRESET; return IO_LOST; }
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return IO_LOST;
    double left = deadline - now_s();
    if (left <= 0) return IO_TIMEOUT;
    struct pollfd pf = { .fd = fd, .events = POLLIN };
    poll(&pf, 1, (int)(left * 1000) + 1);
  }
  return IO_OK;
}

static void drop(dl_store *s) {
  if (s->fd >= 0) close(s->fd);
  s->fd = -1;
}

static void drop_if(dl_store *s, int cond) {
  if (cond) drop(s);
}

/* Exchanges one request for its reply on the open connection.  The reply
** body is malloc'd (NUL-terminated, for parsing) into *body. */
static int exchange(dl_store *s, int op, const char *k, size_t kn,
                    const void *v1, size_t n1, const void *v2, size_t n2,
                    double deadline, int *status, char **body, size_t *blen) {
  unsigned char h[HDR];
  h[0] = (unsigned char)op;
  put32(h + 1, (uint32_t)kn);
  put32(h + 5, (uint32_t)(n1 + n2));
  struct iovec iov[4] = { { h, HDR }, { (void *)k, kn }, { (void *)v1, n1 }, { (void *)v2, n2 } };
  int rc = send_parts(s->fd, iov, 4, deadline);
  if (rc) return rc;
  unsigned char rh[RHDR];
  if ((rc = recv_all(s->fd, rh, RHDR, deadline))) return rc;
  uint32_t n = get32(rh + 1);
  if (rh[0] > ST_NOTYET || n > STORE_MAX_VALUE) { errno = EPROTO; return IO_LOST; }
  char *b = malloc((size_t)n + 1);
  if (!b) { errno = ENOMEM; return IO_LOST; }
  if ((rc = recv_all(s->fd, b, n, deadline))) { free(b); return rc; }
  b[n] = 0;
  *status = rh[0], *body = b, *blen = n;
  return IO_OK;
}

/* Opens the connection and presents the token, retrying refused connects
** (the server may not be up yet) until timeout. */
static int client_connect(dl_store *s, const char *op, double timeout) {
  double deadline = now_s() + timeout, pause = 0.01;
  char port[16], why[160] = "no address";
  snprintf(port, sizeof port, "%d", s->port);
  for (;;) {
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *ai = NULL;
    int g = getaddrinfo(s->host, port, &hints, &ai);
    if (g) snprintf(why, sizeof why, "%s", gai_strerror(g));
    for (struct addrinfo *a = ai; a && s->fd < 0; a = a->ai_next) {
      int fd = socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (fd < 0) { snprintf(why, sizeof why, "%s", strerror(errno)); continue; }
      int err = 0;
      if (connect(fd, a->ai_addr, a->ai_addrlen) < 0) {
        err = errno;
        if (err == EINPROGRESS) {
          double left = deadline - now_s();
          struct pollfd p = { .fd = fd, .events = POLLOUT };
          socklen_t el = sizeof err;
          if (poll(&p, 1, left > 0 ? (int)(left * 1000) + 1 : 0) == 1)
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
          else
            err = ETIMEDOUT;
        }
      }
      if (err) { snprintf(why, sizeof why, "%s", strerror(err)); close(fd); continue; }
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      s->fd = fd;
    }
    if (ai) freeaddrinfo(ai);
    if (s->fd >= 0) break;
    double left = deadline - now_s();
    if (left <= 0 && s->connected) return dl_err(EM_STORE_GONE, op, s->host, s->port, why);
    if (left <= 0) return dl_err(EM_STORE_CONNECT, op, s->host, s->port, timeout, why);
    if (pause > left) pause = left;
    struct timespec ts = { (time_t)pause, (long)((pause - (double)(time_t)pause) * 1e9) };
    nanosleep(&ts, NULL);
    if (pause < 0.2) pause *= 2;
  }
  int st = 0;
  char *body = NULL;
  size_t blen = 0;
  const char *tok = s->token ? s->token : "";
  /* a ddplua store answers at once: a port that keeps silent, closes or
  ** answers something else is another program's */
  int rc = exchange(s, OP_AUTH, tok, strlen(tok), NULL, 0, NULL, 0, now_s() + STORE_HANDSHAKE_S, &st,
                    &body, &blen);
  int e = errno;
  drop_if(s, rc || st != ST_OK);
  if (!rc && st == ST_ERR && blen >= sizeof STORE_NOT_OURS - 1 &&
      memcmp(body, STORE_NOT_OURS, sizeof STORE_NOT_OURS - 1) == 0) {
    free(body);
    return dl_err(EM_STORE_TOKEN, op, s->host, s->port);
  }
  if (!rc && st == ST_ERR) {  /* the server said why (out of descriptors) */
    int r = dl_err(EM_STORE_SAID, op, s->host, s->port, (int)blen, body);
    free(body);
    return r;
  }
  int ours = !rc && st == ST_OK && blen == sizeof STORE_HELLO - 1 && memcmp(body, STORE_HELLO, blen) == 0;
  free(body);
  if (!ours) {
    drop(s);
    /* the token was right before: a reset handshake is a dying server */
    if (s->connected) return dl_err(EM_STORE_GONE, op, s->host, s->port, rc ? strerror(e) : "refused");
    return dl_err(EM_STORE_FOREIGN, op, s->host, s->port,
                  rc == IO_TIMEOUT ? "it did not answer the handshake within 5 s"
                  : rc ? "it closed the connection at the handshake" : "it answered the handshake in another protocol");
  }
  s->connected = 1;
  return 0;
}

/* A dead connection shows as readable while no reply is due. */
static int stale(int fd) {
  struct pollfd p = { .fd = fd, .events = POLLIN };
  return poll(&p, 1, 0) != 0;
}

/* One request with the store's reconnect rule: a connection found broken
** is replaced once; a request lost after it was sent is resent only when
** it is idempotent (an add may have been applied).  A get or wait carries
** its timeout to the server, whose "not yet" ends it on time with the
** connection kept (dist.lua waits in 1 s slices: no reconnect and
** handshake per slice); a reply that never comes drops the connection
** (its late reply would be misread).  Timeouts name key; error replies
** become DL_ESTATE errors. */
static int call(dl_store *s, const char *op, int code, const char *key,
                const void *v1, size_t n1, const void *v2, size_t n2,
                double timeout, int idempotent, char **body, size_t *blen) {
  size_t kn = key ? strlen(key) : 0;
  if (kn > STORE_MAX_KEY) return dl_err(EM_STORE_LIMIT, op, "key", (long long)kn, STORE_MAX_KEY);
  if (n1 + n2 > STORE_MAX_VALUE)
    return dl_err(EM_STORE_LIMIT, op, "value", (long long)(n1 + n2), STORE_MAX_VALUE);
  if (timeout <= 0) timeout = s->timeout;
  double deadline = now_s() + timeout;
  unsigned char limit[8];
  if (code == OP_GET || code == OP_WAIT) {
    double ms = timeout * 1000 + 0.5;
    put64(limit, ms >= 1e12 ? (uint64_t)1e12 : ms < 1 ? 1u : (uint64_t)ms);
    v1 = limit, n1 = 8;
    deadline += STORE_NOTYET_GRACE_S;
  }
  int rc = 0, st = 0;
  pthread_mutex_lock(&s->mu);
  for (int attempt = 0; attempt < 2; attempt++) {
    if (s->fd >= 0 && stale(s->fd)) drop(s);
    if (s->fd < 0 &&
        (rc = client_connect(s, op, s->connected && s->timeout > STORE_RECONNECT_S ? STORE_RECONNECT_S
                                                                                   : s->timeout)))
      goto done;
    rc = exchange(s, code, key ? key : "", kn, v1, n1, v2, n2, deadline, &st, body, blen);
    if (rc == IO_OK) break;
    int e = errno;
    drop(s);
    if (rc == IO_TIMEOUT) {
      rc = dl_err(EM_STORE_TIMEOUT, op, timeout, (int)(kn > 200 ? 200 : kn), key ? key : "");
      goto done;
    }
    if (attempt == 1 || !idempotent) {
      rc = dl_err(EM_STORE_LOST, op, s->host, s->port, strerror(e));
      goto done;
    }
    /* a wait parked on the server ends when the server dies: the
    ** reconnect below says whether it is gone */
  }
  if (st == ST_NOTYET) {
    rc = dl_err(EM_STORE_TIMEOUT, op, timeout, (int)(kn > 200 ? 200 : kn), key ? key : "");
    free(*body);
    *body = NULL;
  } else if (st != ST_OK) {
    rc = dl_err(EM_STORE_REPLY, op, (int)*blen, *body);
    free(*body);
    *body = NULL;
  }
done:
  pthread_mutex_unlock(&s->mu);
  return rc;
}

/* -- Public API --------------------------------------------------------- */

static dl_store *handle_new(const char *host, int port, const char *token) {
  dl_store *s = calloc(1, sizeof *s);
  if (!s) return dl_errp(EM_NOMEM, "store", (long long)sizeof *s, 0ll);
  s->fd = -1, s->port = port, s->timeout = 300;
  snprintf(s->host, sizeof s->host, "%s", host && *host ? host : "127.0.0.1");
  if (token && !(s->token = strdup(token))) { free(s); return dl_errp(EM_NOMEM, "store", 0ll, 0ll); }
  pthread_mutex_init(&s->mu, NULL);
  return s;
}

DL_API dl_store *dl_store_server(const char *host, int port, const char *token) {
  if (port < 0 || port > 65535) return dl_errp(EM_BADVALUE, "store.server", "port must be in 0..65535");
  if (!host || !*host) host = "127.0.0.1";
  store_server *sv = store_server_start(host, port, token);
  if (!sv) return NULL;
  /* The server's own handle talks to it as a client, over loopback when it
  ** listens on every interface. */
  dl_store *s = handle_new(strcmp(host, "0.0.0.0") ? host : "127.0.0.1", store_server_port(sv), token);
  if (!s) { store_server_free(sv); return NULL; }
  s->srv = sv;
  return s;
}

DL_API dl_store *dl_store_connect(const char *host, int port, const char *token,
                                  double timeout_s) {
  if (port <= 0 || port > 65535) return dl_errp(EM_BADVALUE, "store.connect", "port must be in 1..65535");
  dl_store *s = handle_new(host, port, token);
  if (!s) return NULL;
  if (timeout_s > 0) s->timeout = timeout_s;
  if (client_connect(s, "store.connect", s->timeout)) { dl_store_close(s); return NULL; }
  return s;
}

DL_HIDDEN const store_server *store_server_of(const dl_store *s) { return s ? s->srv : NULL; }

DL_API int dl_store_port(const dl_store *s) {
  if (!s) return dl_err(EM_NULLARG, "store.port", "store");
  return s->srv ? store_server_port(s->srv) : s->port;
}

DL_API int dl_store_local_addr(dl_store *s, char *out, int cap) {
  if (!s || !out || cap < 1) return dl_err(EM_NULLARG, "store.local_addr", "store");
  struct sockaddr_storage a;
  socklen_t al = sizeof a;
  pthread_mutex_lock(&s->mu);
  int rc = s->fd >= 0 ? getsockname(s->fd, (struct sockaddr *)&a, &al) : -1;
  pthread_mutex_unlock(&s->mu);
  if (rc) return dl_err(EM_STORE_OS, "store.local_addr", s->host, "not connected");
  const void *ip = a.ss_family == AF_INET6 ? (const void *)&((struct sockaddr_in6 *)&a)->sin6_addr
                                           : (const void *)&((struct sockaddr_in *)&a)->sin_addr;
  if (!inet_ntop(a.ss_family, ip, out, (socklen_t)cap))
    return dl_err(EM_STORE_OS, "store.local_addr", s->host, strerror(errno));
  return 0;
}

DL_API int dl_store_set_timeout(dl_store *s, double timeout_s) {
  if (!s) return dl_err(EM_NULLARG, "store.set_timeout", "store");
  if (!(timeout_s > 0)) return dl_err(EM_BADVALUE, "store.set_timeout", "timeout must be positive");
  s->timeout = timeout_s;
  return 0;
}

DL_API double dl_store_timeout(const dl_store *s) { return s ? s->timeout : 0; }

DL_API void dl_store_close(dl_store *s) {
  if (!s) return;
  drop(s);
  store_server_free(s->srv);
  pthread_mutex_destroy(&s->mu);
  free(s->token);
  free(s);
}

DL_API void dl_store_value_free(void *p) { free(p); }

#define NEED(x, name) if (!(x)) return dl_err(EM_NULLARG, op, name)
#define NEEDP(x, name) if (!(x)) return dl_errp(EM_NULLARG, op, name)

DL_API int dl_store_set(dl_store *s, const char *key, const void *value, int64_t len) {
  const char *op = "store.set";
  NEED(s, "store"); NEED(key, "key"); NEED(value || !len, "value");
  if (len < 0) return dl_err(EM_BADVALUE, op, "negative length");
  char *b = NULL;
  size_t bl = 0;
  int rc = call(s, op, OP_SET, key, value, (size_t)len, NULL, 0, 0, 1, &b, &bl);
  free(b);
  return rc;
}

/* The value as a NUL-terminated malloc'd buffer (free with dl_store_value_free),
** its length in *len. */
DL_API void *dl_store_get(dl_store *s, const char *key, double timeout_s, int64_t *len) {
  const char *op = "store.get";
  NEEDP(s, "store"); NEEDP(key, "key"); NEEDP(len, "len");
  char *b = NULL;
  size_t bl = 0;
  if (call(s, op, OP_GET, key, NULL, 0, NULL, 0, timeout_s, 1, &b, &bl)) return NULL;
  *len = (int64_t)bl;
  return b;
}

DL_API int dl_store_add(dl_store *s, const char *key, int64_t delta, int64_t *out) {
  const char *op = "store.add";
  NEED(s, "store"); NEED(key, "key");
  unsigned char d[8];
  put64(d, (uint64_t)delta);
  char *b = NULL;
  size_t bl = 0;
  int rc = call(s, op, OP_ADD, key, d, 8, NULL, 0, 0, 0, &b, &bl);
  if (rc) return rc;
  int64_t v = 0;
  rc = parse_i64(b, bl, &v);
  free(b);
  if (rc) return dl_err(EM_STORE_REPLY, op, 32, "the server sent a malformed counter");
  if (out) *out = v;
  return 0;
}

DL_API void *dl_store_compare_set(dl_store *s, const char *key, const void *expected,
                                  int64_t elen, const void *desired, int64_t dlen,
                                  int64_t *len) {
  const char *op = "store.compare_set";
  NEEDP(s, "store"); NEEDP(key, "key"); NEEDP(len, "len");
  NEEDP(expected || !elen, "expected"); NEEDP(desired || !dlen, "desired");
  if (elen < 0 || dlen < 0 || elen > STORE_MAX_VALUE) return dl_errp(EM_BADVALUE, op, "bad value length");
  unsigned char e4[4];
  put32(e4, (uint32_t)elen);
  /* expected goes after its length; desired is the rest of the value */
  char *b = NULL;
  size_t bl = 0;
  size_t total = 4 + (size_t)elen;
  char *v = malloc(total);
  if (!v) return dl_errp(EM_NOMEM, op, (long long)total, 0ll);
  memcpy(v, e4, 4);
  if (elen) memcpy(v + 4, expected, (size_t)elen);
  int rc = call(s, op, OP_CAS, key, v, total, desired, (size_t)dlen, 0, 0, &b, &bl);
  free(v);
  if (rc) return NULL;
  *len = (int64_t)bl;
  return b;
}

static int each_key(dl_store *s, const char *op, int code, const char *const *keys,
                    int n, double timeout_s) {
  NEED(s, "store"); NEED(keys || !n, "keys");
  if (n < 0) return dl_err(EM_BADVALUE, op, "negative key count");
  if (timeout_s <= 0) timeout_s = s->timeout;
  double deadline = now_s() + timeout_s;
  int all = 1;
  for (int i = 0; i < n; i++) {
    NEED(keys[i], "keys[i]");
    double left = deadline - now_s();
    char *b = NULL;
    size_t bl = 0;
    /* the whole wait has one deadline; its message states the full timeout */
    if (code == OP_WAIT && left <= 0) {
      size_t kn = strlen(keys[i]);
      return dl_err(EM_STORE_TIMEOUT, op, timeout_s, (int)(kn > 200 ? 200 : kn), keys[i]);
    }
    int rc = call(s, op, code, keys[i], NULL, 0, NULL, 0, code == OP_WAIT ? left : 0, 1, &b, &bl);
    if (rc) {
      if (dl_last_error_code() == DL_ESTATE && code == OP_WAIT && strstr(dl_last_error(), "timed out")) {
        size_t kn = strlen(keys[i]);
        dl_err(EM_STORE_TIMEOUT, op, timeout_s, (int)(kn > 200 ? 200 : kn), keys[i]);
      }
      return rc;
    }
    if (code == OP_CHECK && !(bl == 1 && b[0])) all = 0;
    free(b);
  }
  return all;
}

DL_API int dl_store_wait(dl_store *s, const char *const *keys, int n, double timeout_s) {
  int rc = each_key(s, "store.wait", OP_WAIT, keys, n, timeout_s);
  return rc < 0 ? rc : 0;
}

DL_API int dl_store_check(dl_store *s, const char *const *keys, int n) {
  return each_key(s, "store.check", OP_CHECK, keys, n, 0);
}

DL_API int dl_store_delete(dl_store *s, const char *key) {
  const char *op = "store.delete";
  NEED(s, "store"); NEED(key, "key");
  char *b = NULL;
  size_t bl = 0;
  int rc = call(s, op, OP_DELETE, key, NULL, 0, NULL, 0, 0, 0, &b, &bl);
  if (rc) return rc;
  rc = bl == 1 && b[0];
  free(b);
  return rc;
}

DL_API int64_t dl_store_num_keys(dl_store *s) {
  const char *op = "store.num_keys";
  NEED(s, "store");
  char *b = NULL;
  size_t bl = 0;
  int rc = call(s, op, OP_NUMKEYS, NULL, NULL, 0, NULL, 0, 0, 1, &b, &bl);
  if (rc) return rc;
  int64_t n = bl == 8 ? (int64_t)get64((unsigned char *)b) : -1;
  free(b);
  return n;
}

/* Reusable: the k-th arrival is in generation (k-1)/world_size, and the
** last one of a generation releases it. */
DL_API int dl_store_barrier(dl_store *s, const char *name, int world_size, double timeout_s) {
  const char *op = "store.barrier";
  NEED(s, "store"); NEED(name, "name");
  if (world_size < 1) return dl_err(EM_BADVALUE, op, "world_size must be at least 1");
  size_t nl = strlen(name);
  if (nl > 1024) return dl_err(EM_BADVALUE, op, "name longer than 1024 bytes");
  char key[1100];
  int64_t k = 0;
  snprintf(key, sizeof key, "%s/arrived", name);
  int rc = dl_store_add(s, key, 1, &k);
  if (rc) return rc;
  snprintf(key, sizeof key, "%s/done/%lld", name, (long long)((k - 1) / world_size));
  if (k % world_size == 0 && (rc = dl_store_set(s, key, "1", 1))) return rc;
  const char *keys[1] = { key };
  return dl_store_wait(s, keys, 1, timeout_s);
}
