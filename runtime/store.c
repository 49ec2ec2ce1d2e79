/*
** store.c -- Rendezvous store: a TCP key-value store as PyTorch's TCPStore,
** a server running a poll loop on its own thread and blocking clients.
**
** Wire format (integers little-endian):
**   request  u8 op, u32 key length, u32 value length, key, value
**   reply    u8 status (0 ok, 1 error text), u32 length, bytes
** The first request of a connection must be AUTH carrying the token.  All
** store state lives on the server thread, so it needs no lock.
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

#include "store.h"

enum { OP_AUTH = 1, OP_SET, OP_GET, OP_ADD, OP_CAS, OP_WAIT, OP_CHECK,
       OP_DELETE, OP_NUMKEYS, OP__END };
enum { HDR = 9, RHDR = 5, ST_OK = 0, ST_ERR = 1 };
/* Bytes a parked connection (blocked in get or wait) may send before it
** is a protocol violation: a real client sends nothing until it has its
** reply. */
enum { PARKED_SLACK = 1 << 20, READ_CHUNK = 256 * 1024 };

static void put32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
         (uint32_t)p[3] << 24;
}
static void put64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint64_t get64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* -- Table (chained hash of byte-string keys) ------------------------- */

typedef struct entry {
  struct entry *next;
  uint64_t hash;
  char *val;
  size_t vlen;
  uint32_t klen;
  char key[];
} entry;

typedef struct { entry **b; size_t nb, n; } table;

static uint64_t hash_key(const char *k, uint32_t n) {
  uint64_t h = 1469598103934665603ull;  /* FNV-1a */
  for (uint32_t i = 0; i < n; i++) h = (h ^ (unsigned char)k[i]) * 1099511628211ull;
  return h;
}

static entry **tab_slot(table *t, const char *k, uint32_t n) {
  if (!t->nb) return NULL;
  uint64_t h = hash_key(k, n);
  entry **pp = &t->b[h & (t->nb - 1)];
  for (; *pp; pp = &(*pp)->next)
    if ((*pp)->hash == h && (*pp)->klen == n && !memcmp((*pp)->key, k, n)) break;
  return pp;
}

static entry *tab_find(table *t, const char *k, uint32_t n) {
  entry **pp = tab_slot(t, k, n);
  return pp ? *pp : NULL;
}

static int tab_grow(table *t) {
  size_t nb = t->nb ? t->nb * 2 : 64;
  entry **b = calloc(nb, sizeof *b);
  if (!b) return -1;
  for (size_t i = 0; i < t->nb; i++)
    for (entry *e = t->b[i], *next; e; e = next) {
      next = e->next;
      e->next = b[e->hash & (nb - 1)];
      b[e->hash & (nb - 1)] = e;
    }
  free(t->b);
  t->b = b, t->nb = nb;
  return 0;
}

/* Stores a copy of the value; -1 when out of memory (the table is unchanged). */
static int tab_put(table *t, const char *k, uint32_t n, const void *v, size_t vlen) {
  char *copy = malloc(vlen ? vlen : 1);
  if (!copy) return -1;
  memcpy(copy, v, vlen);
  entry *e = tab_find(t, k, n);
  if (!e) {
    if (t->n >= t->nb && tab_grow(t)) { free(copy); return -1; }
    if (!(e = malloc(sizeof *e + n))) { free(copy); return -1; }
    memcpy(e->key, k, n);
    e->klen = n, e->hash = hash_key(k, n), e->val = NULL;
    e->next = t->b[e->hash & (t->nb - 1)];
    t->b[e->hash & (t->nb - 1)] = e;
    t->n++;
  }
  free(e->val);
  e->val = copy, e->vlen = vlen;
  return 0;
}

static int tab_del(table *t, const char *k, uint32_t n) {
  entry **pp = tab_slot(t, k, n);
  if (!pp || !*pp) return 0;
  entry *e = *pp;
  *pp = e->next;
  free(e->val);
  free(e);
  t->n--;
  return 1;
}

static void tab_free(table *t) {
  for (size_t i = 0; i < t->nb; i++)
    for (entry *e = t->b[i], *next; e; e = next) {
      next = e->next;
      free(e->val);
      free(e);
    }
  free(t->b);
  memset(t, 0, sizeof *t);
}

/* -- Server: connections and frames ----------------------------------- */

typedef struct conn {
  int fd, authed, dead;
  char peer[64];
  unsigned char *in, *out;
  size_t inoff, inlen, incap, outoff, outlen, outcap;
  int wait_op;          /* OP_GET or OP_WAIT while parked on wait_key */
  char *wait_key;
  uint32_t wait_klen;
} conn;

typedef struct server {
  int lfd, wake[2], port, started;
  atomic_int stop;
  char *token;
  size_t tlen;
  table tab;
  conn **conns;
  int nconns, capconns;
  unsigned char *rbuf;  /* READ_CHUNK bytes, for the server thread's recv */
  pthread_t thread;
} server;

static void conn_log(const conn *c, const char *why) {
  fprintf(stderr, "ddplua store: closing connection from %s: %s\n", c->peer, why);
}

static void conn_free(conn *c) {
  if (c->fd >= 0) close(c->fd);
  free(c->in);
  free(c->out);
  free(c->wait_key);
  free(c);
}

static int reply(conn *c, int status, const void *p, size_t n) {
  size_t need = c->outlen + RHDR + n;
  if (need > c->outcap) {
    size_t cap = c->outcap ? c->outcap : 256;
    while (cap < need) cap *= 2;
    unsigned char *o = realloc(c->out, cap);
    if (!o) { conn_log(c, "out of memory for a reply"); return -1; }
    c->out = o, c->outcap = cap;
  }
  c->out[c->outlen] = (unsigned char)status;
  put32(c->out + c->outlen + 1, (uint32_t)n);
  if (n) memcpy(c->out + c->outlen + RHDR, p, n);
  c->outlen += RHDR + n;
  return 0;
}

static int reply_err(conn *c, const char *fmt, const char *key, uint32_t klen) {
  char msg[512];
  int n = snprintf(msg, sizeof msg, fmt, (int)(klen > 200 ? 200 : klen), key);
  return reply(c, ST_ERR, msg, (size_t)(n < 0 ? 0 : n >= (int)sizeof msg ? (int)sizeof msg - 1 : n));
}

/* Answers every connection parked on key (the key now exists). */
static void notify(server *s, const entry *e) {
  for (int i = 0; i < s->nconns; i++) {
    conn *c = s->conns[i];
    if (c->dead || !c->wait_key || c->wait_klen != e->klen ||
        memcmp(c->wait_key, e->key, e->klen)) continue;
    int rc = c->wait_op == OP_GET ? reply(c, ST_OK, e->val, e->vlen)
                                  : reply(c, ST_OK, NULL, 0);
    if (rc) c->dead = 1;
    free(c->wait_key);
    c->wait_key = NULL;
  }
}

static int park(conn *c, int op, const char *k, uint32_t n) {
  if (!(c->wait_key = malloc(n ? n : 1))) { conn_log(c, "out of memory"); return -1; }
  memcpy(c->wait_key, k, n);
  c->wait_klen = n, c->wait_op = op;
  return 0;
}

/* A strict decimal int64, as add stores its counters. */
static int parse_i64(const char *p, size_t n, int64_t *out) {
  size_t i = 0;
  int neg = 0;
  uint64_t v = 0;
  if (n && (p[0] == '-' || p[0] == '+')) neg = p[0] == '-', i = 1;
  if (i == n || n - i > 19) return -1;
  for (; i < n; i++) {
    if (p[i] < '0' || p[i] > '9') return -1;
    v = v * 10 + (uint64_t)(p[i] - '0');
  }
  if (v > (uint64_t)INT64_MAX + (uint64_t)neg) return -1;
  *out = neg ? (int64_t)(0 - v) : (int64_t)v;
  return 0;
}

/* One complete frame.  Returns -1 to close the connection (logged). */
static int handle(server *s, conn *c, int op, const char *k, uint32_t kn,
                  const unsigned char *v, uint32_t vn) {
  entry *e;
  unsigned char b8[8];
  switch (op) {
  case OP_AUTH:
    if (c->authed) { conn_log(c, "second handshake"); return -1; }
    if (s->tlen && (kn != s->tlen || memcmp(k, s->token, kn))) {
      fprintf(stderr, "ddplua store: refused connection from %s: wrong token\n", c->peer);
      return -1;
    }
    c->authed = 1;
    return reply(c, ST_OK, NULL, 0);
  case OP_SET:
    if (tab_put(&s->tab, k, kn, v, vn)) return reply_err(c, "out of memory storing key \"%.*s\"", k, kn);
    notify(s, tab_find(&s->tab, k, kn));
    return reply(c, ST_OK, NULL, 0);
  case OP_GET:
    if ((e = tab_find(&s->tab, k, kn))) return reply(c, ST_OK, e->val, e->vlen);
    return park(c, OP_GET, k, kn);
  case OP_WAIT:
    if (tab_find(&s->tab, k, kn)) return reply(c, ST_OK, NULL, 0);
    return park(c, OP_WAIT, k, kn);
  case OP_ADD: {
    int64_t cur = 0, delta = (int64_t)get64(v), sum;
    if ((e = tab_find(&s->tab, k, kn)) && parse_i64(e->val, e->vlen, &cur))
      return reply_err(c, "the value of key \"%.*s\" is not an integer", k, kn);
    if (__builtin_add_overflow(cur, delta, &sum))
      return reply_err(c, "the counter \"%.*s\" would overflow int64", k, kn);
    char txt[24];
    int n = snprintf(txt, sizeof txt, "%lld", (long long)sum);
    if (tab_put(&s->tab, k, kn, txt, (size_t)n)) return reply_err(c, "out of memory storing key \"%.*s\"", k, kn);
    notify(s, tab_find(&s->tab, k, kn));
    return reply(c, ST_OK, txt, (size_t)n);
  }
  case OP_CAS: {
    uint32_t en = get32(v);
    if (en > vn - 4) { conn_log(c, "compare_set: expected value runs past the frame"); return -1; }
    const unsigned char *exp = v + 4, *des = v + 4 + en;
    uint32_t dn = vn - 4 - en;
    e = tab_find(&s->tab, k, kn);
    /* As PyTorch: a missing key is created only when expected is empty. */
    if ((!e && en == 0) || (e && e->vlen == en && !memcmp(e->val, exp, en))) {
      if (tab_put(&s->tab, k, kn, des, dn)) return reply_err(c, "out of memory storing key \"%.*s\"", k, kn);
      e = tab_find(&s->tab, k, kn);
      notify(s, e);
    }
    return e ? reply(c, ST_OK, e->val, e->vlen) : reply(c, ST_OK, NULL, 0);
  }
  case OP_CHECK:
    b8[0] = tab_find(&s->tab, k, kn) != NULL;
    return reply(c, ST_OK, b8, 1);
  case OP_DELETE:
    b8[0] = (unsigned char)tab_del(&s->tab, k, kn);
    return reply(c, ST_OK, b8, 1);
  case OP_NUMKEYS:
    put64(b8, (uint64_t)s->tab.n);
    return reply(c, ST_OK, b8, 8);
  }
  return -1;
}

/* Runs every complete frame buffered on c, checking each header's limits
** before waiting for (and so buffering) its body.  Returns the number of
** frames handled, or -1 to close the connection. */
static int conn_process(server *s, conn *c) {
  int done = 0;
  while (!c->wait_key && c->inlen - c->inoff >= HDR) {
    const unsigned char *h = c->in + c->inoff;
    int op = h[0];
    uint32_t kn = get32(h + 1), vn = get32(h + 5);
    char why[128];
    why[0] = 0;
    if (op < OP_AUTH || op >= OP__END)
      snprintf(why, sizeof why, "unknown opcode %d", op);
    else if (kn > STORE_MAX_KEY)
      snprintf(why, sizeof why, "key of %u bytes (limit %d)", kn, STORE_MAX_KEY);
    else if (vn > STORE_MAX_VALUE)
      snprintf(why, sizeof why, "value of %u bytes (limit %d)", vn, STORE_MAX_VALUE);
    else if (!c->authed && op != OP_AUTH)
      snprintf(why, sizeof why, "request before the handshake");
    else if ((op == OP_ADD && vn != 8) || (op == OP_CAS && vn < 4) ||
             (op != OP_SET && op != OP_ADD && op != OP_CAS && vn != 0))
      snprintf(why, sizeof why, "opcode %d with a value of %u bytes", op, vn);
    if (why[0]) { conn_log(c, why); return -1; }
    size_t len = HDR + (size_t)kn + vn;
    if (c->inlen - c->inoff < len) break;
    if (handle(s, c, op, (const char *)h + HDR, kn, h + HDR + kn, vn)) return -1;
    c->inoff += len;
    done++;
  }
  if (c->inoff == c->inlen) {
    c->inoff = c->inlen = 0;
    if (c->incap > 4 * READ_CHUNK) { free(c->in); c->in = NULL; c->incap = 0; }
  } else if (c->wait_key && c->inlen - c->inoff > PARKED_SLACK) {
    conn_log(c, "sent more while waiting for a key");
    return -1;
  }
  return done;
}

/* Appends bytes (already received) to c's buffer. */
static int conn_append(conn *c, const void *p, size_t n) {
  if (c->inoff && c->inlen + n > c->incap) {
    memmove(c->in, c->in + c->inoff, c->inlen - c->inoff);
    c->inlen -= c->inoff, c->inoff = 0;
  }
  if (c->inlen + n > c->incap) {
    size_t cap = c->incap ? c->incap : 4096;
    while (cap < c->inlen + n) cap *= 2;
    unsigned char *b = realloc(c->in, cap);
    if (!b) { conn_log(c, "out of memory"); return -1; }
    c->in = b, c->incap = cap;
  }
  memcpy(c->in + c->inlen, p, n);
  c->inlen += n;
  return 0;
}

/* One recv per poll round, so a peer streaming garbage is caught by the
** header check before it has sent much. */
static int conn_read(conn *c, unsigned char *buf) {
  ssize_t n = recv(c->fd, buf, READ_CHUNK, 0);
  if (n > 0) return conn_append(c, buf, (size_t)n);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return 0;
  if (n < 0) conn_log(c, strerror(errno));
  return -1;  /* EOF: the client went away, nothing to log */
}

static int conn_flush(conn *c) {
  while (c->outoff < c->outlen) {
    ssize_t n = send(c->fd, c->out + c->outoff, c->outlen - c->outoff, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return 0;
      return -1;
    }
    c->outoff += (size_t)n;
  }
  c->outoff = c->outlen = 0;
  return 0;
}

static conn *conn_new(int fd, const char *peer) {
  conn *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->fd = fd;
  snprintf(c->peer, sizeof c->peer, "%s", peer);
  return c;
}

static void server_accept(server *s) {
  for (int i = 0; i < 64; i++) {  /* bounded: the others come next round */
    struct sockaddr_in a;
    socklen_t al = sizeof a;
    int fd = accept4(s->lfd, (struct sockaddr *)&a, &al, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    char peer[64], ip[INET_ADDRSTRLEN] = "?";
    inet_ntop(AF_INET, &a.sin_addr, ip, sizeof ip);
    snprintf(peer, sizeof peer, "%s:%d", ip, ntohs(a.sin_port));
    if (s->nconns == s->capconns) {
      int cap = s->capconns ? s->capconns * 2 : 16;
      conn **cs = realloc(s->conns, (size_t)cap * sizeof *cs);
      if (!cs) { close(fd); return; }
      s->conns = cs, s->capconns = cap;
    }
    conn *c = conn_new(fd, peer);
    if (!c) { close(fd); return; }
    s->conns[s->nconns++] = c;
  }
}

static void *server_main(void *arg) {
  server *s = arg;
  struct pollfd *pfd = NULL;
  int pcap = 0;
  while (!atomic_load(&s->stop)) {
    int np = 2 + s->nconns;
    if (np > pcap) {
      struct pollfd *p = realloc(pfd, (size_t)np * 2 * sizeof *p);
      if (!p) { fprintf(stderr, "ddplua store: out of memory; server stops\n"); break; }
      pfd = p, pcap = np * 2;
    }
    pfd[0] = (struct pollfd){ .fd = s->wake[0], .events = POLLIN };
    pfd[1] = (struct pollfd){ .fd = s->lfd, .events = POLLIN };
    for (int i = 0; i < s->nconns; i++) {
      conn *c = s->conns[i];
      pfd[2 + i] = (struct pollfd){ .fd = c->fd,
        .events = (short)(POLLIN | (c->outoff < c->outlen ? POLLOUT : 0)) };
    }
    int nc = s->nconns;
    if (poll(pfd, (nfds_t)np, 1000) < 0) {
      if (errno == EINTR) continue;
      fprintf(stderr, "ddplua store: poll: %s; server stops\n", strerror(errno));
      break;
    }
    if (pfd[0].revents) {
      char drain[64];
      while (read(s->wake[0], drain, sizeof drain) > 0) {}
    }
    for (int i = 0; i < nc; i++) {
      conn *c = s->conns[i];
      short re = pfd[2 + i].revents;
      if ((re & (POLLIN | POLLHUP | POLLERR)) && conn_read(c, s->rbuf)) c->dead = 1;
      if (!c->dead && (re & POLLOUT) && conn_flush(c)) c->dead = 1;
    }
    if (pfd[1].revents & POLLIN) server_accept(s);
    /* A set may unpark connections that already hold their next request:
    ** repeat until no connection makes progress (each pass consumes input). */
    for (int progress = 1; progress;) {
      progress = 0;
      for (int i = 0; i < s->nconns; i++) {
        conn *c = s->conns[i];
        if (c->dead) continue;
        int n = conn_process(s, c);
        if (n < 0) c->dead = 1;
        else progress |= n > 0;
      }
    }
    int j = 0;
    for (int i = 0; i < s->nconns; i++) {
      conn *c = s->conns[i];
      if (!c->dead && conn_flush(c)) c->dead = 1;
      if (c->dead) conn_free(c);
      else s->conns[j++] = c;
    }
    s->nconns = j;
  }
  free(pfd);
  return NULL;
}

static void server_free(server *s) {
  if (!s) return;
  if (s->started) {
    atomic_store(&s->stop, 1);
    if (write(s->wake[1], "x", 1) < 0) {}  /* the 1 s poll timeout also ends it */
    pthread_join(s->thread, NULL);
  }
  for (int i = 0; i < s->nconns; i++) conn_free(s->conns[i]);
  free(s->conns);
  if (s->lfd >= 0) close(s->lfd);
  if (s->wake[0] >= 0) close(s->wake[0]);
  if (s->wake[1] >= 0) close(s->wake[1]);
  tab_free(&s->tab);
  free(s->rbuf);
  free(s->token);
  free(s);
}

DL_HIDDEN int store_fuzz_feed(const uint8_t *data, size_t n, size_t chunk) {
  server s = { .lfd = -1, .wake = { -1, -1 } };
  conn *c = conn_new(-1, "fuzz");
  int rc = 0;
  if (!c) return 0;
  s.token = (char *)"tok", s.tlen = 3;
  s.conns = &c, s.nconns = 1;
  if (!chunk) chunk = n ? n : 1;
  for (size_t off = 0; off < n && rc == 0; off += chunk) {
    size_t m = n - off < chunk ? n - off : chunk;
    if (conn_append(c, data + off, m) || conn_process(&s, c) < 0) rc = -1;
    c->outoff = c->outlen = 0;  /* replies go nowhere */
  }
  c->fd = -1;
  conn_free(c);
  s.token = NULL;
  tab_free(&s.tab);
  return rc;
}

/* -- Client ------------------------------------------------------------ */

struct dl_store {
  server *srv;          /* set on the server's own handle */
  int fd, port;
  char host[256];
  char *token;
  double timeout;
  pthread_mutex_t mu;   /* one request at a time per handle */
};

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
  if (rh[0] > ST_ERR || n > STORE_MAX_VALUE) { errno = EPROTO; return IO_LOST; }
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
  double hs_deadline = deadline > now_s() + 1 ? deadline : now_s() + 1;
  int rc = exchange(s, OP_AUTH, tok, strlen(tok), NULL, 0, NULL, 0, hs_deadline, &st, &body, &blen);
  free(body);
  if (rc || st != ST_OK) {
    drop(s);
    return dl_err(EM_STORE_REFUSED, op, s->host, s->port);
  }
  return 0;
}

/* A dead connection shows as readable while no reply is due. */
static int stale(int fd) {
  struct pollfd p = { .fd = fd, .events = POLLIN };
  return poll(&p, 1, 0) != 0;
}

/* One request with the store's reconnect rule: a connection found broken
** is replaced once; a request lost after it was sent is resent only when
** it is idempotent (an add may have been applied).  On timeout the
** connection is dropped (its late reply would be misread) and the error
** names key.  Error replies become DL_ESTATE errors. */
static int call(dl_store *s, const char *op, int code, const char *key,
                const void *v1, size_t n1, const void *v2, size_t n2,
                double timeout, int idempotent, char **body, size_t *blen) {
  size_t kn = key ? strlen(key) : 0;
  if (kn > STORE_MAX_KEY) return dl_err(EM_STORE_LIMIT, op, "key", (long long)kn, STORE_MAX_KEY);
  if (n1 + n2 > STORE_MAX_VALUE)
    return dl_err(EM_STORE_LIMIT, op, "value", (long long)(n1 + n2), STORE_MAX_VALUE);
  if (timeout <= 0) timeout = s->timeout;
  double deadline = now_s() + timeout;
  int rc = 0, st = 0;
  pthread_mutex_lock(&s->mu);
  for (int attempt = 0; attempt < 2; attempt++) {
    if (s->fd >= 0 && stale(s->fd)) drop(s);
    if (s->fd < 0 && (rc = client_connect(s, op, s->timeout))) goto done;
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
  }
  if (st != ST_OK) {
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
  const char *op = "store.server";
  if (port < 0 || port > 65535) return dl_errp(EM_BADVALUE, op, "port must be in 0..65535");
  server *sv = calloc(1, sizeof *sv);
  if (!sv) return dl_errp(EM_NOMEM, op, (long long)sizeof *sv, 0ll);
  sv->lfd = sv->wake[0] = sv->wake[1] = -1;
  if (!host || !*host) host = "127.0.0.1";
  struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
  int one = 1;
  socklen_t al = sizeof a;
  if (inet_pton(AF_INET, host, &a.sin_addr) != 1) {
    server_free(sv);
    return dl_errp(EM_STORE_OS, op, host, "not an IPv4 address");
  }
  if (token && *token && !(sv->token = strdup(token))) goto os;
  sv->tlen = sv->token ? strlen(sv->token) : 0;
  if ((sv->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)) < 0) goto os;
  setsockopt(sv->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(sv->lfd, (struct sockaddr *)&a, sizeof a) < 0) goto os;
  if (listen(sv->lfd, 512) < 0) goto os;
  if (getsockname(sv->lfd, (struct sockaddr *)&a, &al) < 0) goto os;
  sv->port = ntohs(a.sin_port);
  if (pipe2(sv->wake, O_NONBLOCK | O_CLOEXEC) < 0) goto os;
  if (!(sv->rbuf = malloc(READ_CHUNK))) goto os;
  int e = pthread_create(&sv->thread, NULL, server_main, sv);
  if (e) { errno = e; goto os; }
  sv->started = 1;
  /* The server's own handle talks to it as a client, over loopback when it
  ** listens on every interface. */
  dl_store *s = handle_new(strcmp(host, "0.0.0.0") ? host : "127.0.0.1", sv->port, token);
  if (!s) { server_free(sv); return NULL; }
  s->srv = sv;
  return s;
os:;
  char where[300];
  snprintf(where, sizeof where, "%s:%d", host, port);
  dl_err(EM_STORE_OS, op, where, strerror(errno));
  server_free(sv);
  return NULL;
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

DL_API int dl_store_port(const dl_store *s) {
  if (!s) return dl_err(EM_NULLARG, "store.port", "store");
  return s->srv ? s->srv->port : s->port;
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
  server_free(s->srv);
  pthread_mutex_destroy(&s->mu);
  free(s->token);
  free(s);
}

DL_API void dl_store_free(void *p) { free(p); }

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

/* The value as a NUL-terminated malloc'd buffer (free with dl_store_free),
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
