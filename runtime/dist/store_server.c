/*
** store_server.c -- the rendezvous store's server (store.c has the
** clients): a poll loop on its own thread over non-blocking connections,
** a chained hash of byte-string keys (dist/store_table.c, with the bound
** on what it holds), and requests parked until the key they wait for is
** set.  All store state lives on the server thread, so it
** needs no lock.
*/
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "dist/store.h"
#include "dist/store_table.h"

/* Bytes a parked connection (blocked in get or wait) may send before it
** is a protocol violation: a real client sends nothing until it has its
** reply. */
enum { PARKED_SLACK = 1 << 20, READ_CHUNK = 256 * 1024 };

/* Connections that have not presented the token cost the server only what
** it chooses: at most UNAUTH_MAX of them at once (a new one closes the
** oldest; authenticated clients are never counted or dropped), each buffering
** at most UNAUTH_BUF bytes (one auth frame: the token is at most
** UNAUTH_BUF - HDR bytes), for at most the handshake deadline
** (DDPLUA_STORE_HANDSHAKE_TIMEOUT seconds, default HANDSHAKE_S). */
enum { UNAUTH_MAX = 256, UNAUTH_BUF = 4096, HANDSHAKE_S = 10 };
#define EVICT_AGE_S 0.5  /* out of descriptors, unauthenticated ones this old go first */

/* Log lines about refused or closed connections: at most LOG_BURST per
** second, then one summary, so a flood of bad peers cannot flood the log. */
enum { LOG_BURST = 5 };

static double mono_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* -- Server: connections and frames ----------------------------------- */

typedef struct conn {
  int fd, authed, dead;
  double born;          /* mono_s() at accept: the handshake deadline counts from it */
  char peer[64];
  unsigned char *in, *out;
  size_t inoff, inlen, incap, outoff, outlen, outcap;
  int wait_op;          /* OP_GET or OP_WAIT while parked on wait_key */
  char *wait_key;
  uint32_t wait_klen;
  double wait_until;    /* mono_s() when a parked request gets ST_NOTYET; 0: never */
} conn;

struct store_server {
  int lfd, wake[2], port, started;
  atomic_int stop;
  char *token;
  size_t tlen;
  store_table tab;
  conn **conns;
  int nconns, capconns;
  int nunauth;          /* live connections still owing the token */
  double hs_timeout;    /* seconds a connection has to present the token */
  int spare;            /* /dev/null, given up to accept-and-refuse on EMFILE */
  double lpause_until;  /* listening socket not polled before this (fd exhaustion) */
  unsigned char *rbuf;  /* READ_CHUNK bytes, for the server thread's recv */
  atomic_long accepted, authed;  /* store_server_counts */
  pthread_t thread;
};
typedef store_server server;

/* One rate limiter for every server in the process (there is usually one;
** tests run several), so it needs a lock; only error paths take it. */
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static double log_t0;
static int log_n;
static long log_dropped;

/* Prints the summary of suppressed lines once their second is over. */
static void log_flush_locked(double now) {
  if (now - log_t0 < 1.0) return;
  if (log_dropped)
    fprintf(stderr, "ddplua store: %ld more refused or closed connections in the last %.0f s\n",
            log_dropped, now - log_t0 < 2 ? 1.0 : now - log_t0);
  log_t0 = now, log_n = 0, log_dropped = 0;
}

static void log_flush(void) {
  pthread_mutex_lock(&log_mu);
  if (log_dropped) log_flush_locked(mono_s());
  pthread_mutex_unlock(&log_mu);
}

__attribute__((format(printf, 1, 2)))
static void slog(const char *fmt, ...) {
  pthread_mutex_lock(&log_mu);
  log_flush_locked(mono_s());
  if (log_n < LOG_BURST) {
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    log_n++;
  } else {
    log_dropped++;
  }
  pthread_mutex_unlock(&log_mu);
}

static void conn_log(const conn *c, const char *why) {
  slog("ddplua store: closing connection from %s: %s\n", c->peer, why);
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

/* Stores key = v: 0; else answers the client why not (out of memory, or
** the table's bound: dist/store_table.c): 1, or -1 when even that failed. */
static int put(server *s, conn *c, const char *k, uint32_t kn, const void *v, size_t vn) {
  char why[300];
  int rc = store_table_put(&s->tab, k, kn, v, vn, why, sizeof why);
  if (!rc) return 0;
  if (rc == -1) return reply_err(c, "out of memory storing key \"%.*s\"", k, kn) ? -1 : 1;
  char msg[600];
  int n = snprintf(msg, sizeof msg, "the store refused key \"%.*s\" (a value of %zu bytes): %s",
                   (int)(kn > 200 ? 200 : kn), k, vn, why);
  return reply(c, ST_ERR, msg, (size_t)(n < 0 ? 0 : n >= (int)sizeof msg ? (int)sizeof msg - 1 : n)) ? -1 : 1;
}

/* Answers every connection parked on key (the key now exists). */
static void notify(server *s, const store_entry *e) {
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

/* Parks c until key k is set; a request with a limit (v: 8 bytes, the
** milliseconds it may wait) gets ST_NOTYET when that passes, and its
** connection stays: a client waiting in slices never reconnects. */
static int park(conn *c, int op, const char *k, uint32_t n, const unsigned char *v, uint32_t vn) {
  double until = 0;
  if (vn == 8) {
    uint64_t ms = get64(v);
    if (ms == 0) return reply(c, ST_NOTYET, NULL, 0);
    until = mono_s() + (ms > 1000000000ull ? 1e6 : (double)ms / 1000);
  }
  if (!(c->wait_key = malloc(n ? n : 1))) { conn_log(c, "out of memory"); return -1; }
  memcpy(c->wait_key, k, n);
  c->wait_klen = n, c->wait_op = op, c->wait_until = until;
  return 0;
}

/* Answers ST_NOTYET to parked requests past their limit; returns the
** milliseconds until the next limit (at most 1000). */
static int expire_waits(server *s) {
  double now = mono_s(), next = 1.0;
  for (int i = 0; i < s->nconns; i++) {
    conn *c = s->conns[i];
    if (c->dead || !c->wait_key || !c->wait_until) continue;
    double left = c->wait_until - now;
    if (left <= 0) {
      free(c->wait_key);
      c->wait_key = NULL;
      if (reply(c, ST_NOTYET, NULL, 0)) c->dead = 1;
    } else if (left < next) {
      next = left;
    }
  }
  return (int)(next * 1000) + 1;
}

static int conn_flush(conn *c);

/* One complete frame.  Returns -1 to close the connection (logged). */
static int handle(server *s, conn *c, int op, const char *k, uint32_t kn,
                  const unsigned char *v, uint32_t vn) {
  store_entry *e;
  int pr;
  unsigned char b8[8];
  switch (op) {
  case OP_AUTH:
    if (c->authed) { conn_log(c, "second handshake"); return -1; }
    if (s->tlen && (kn != s->tlen || memcmp(k, s->token, kn))) {
      slog("ddplua store: refused connection from %s: wrong token\n", c->peer);
      /* said before closing, so the client knows it met a ddplua store
      ** of another job, not a stranger on the port */
      reply(c, ST_ERR, STORE_NOT_OURS, sizeof STORE_NOT_OURS - 1);
      conn_flush(c);
      return -1;
    }
    c->authed = 1;
    s->nunauth--;
    atomic_fetch_add(&s->authed, 1);
    return reply(c, ST_OK, STORE_HELLO, sizeof STORE_HELLO - 1);
  case OP_SET:
    if ((pr = put(s, c, k, kn, v, vn)) != 0) return pr < 0 ? -1 : 0;
    notify(s, store_table_find(&s->tab, k, kn));
    return reply(c, ST_OK, NULL, 0);
  case OP_GET:
    if ((e = store_table_find(&s->tab, k, kn))) return reply(c, ST_OK, e->val, e->vlen);
    return park(c, OP_GET, k, kn, v, vn);
  case OP_WAIT:
    if (store_table_find(&s->tab, k, kn)) return reply(c, ST_OK, NULL, 0);
    return park(c, OP_WAIT, k, kn, v, vn);
  case OP_ADD: {
    int64_t cur = 0, delta = (int64_t)get64(v), sum;
    if ((e = store_table_find(&s->tab, k, kn)) && parse_i64(e->val, e->vlen, &cur))
      return reply_err(c, "the value of key \"%.*s\" is not an integer", k, kn);
    if (__builtin_add_overflow(cur, delta, &sum))
      return reply_err(c, "the counter \"%.*s\" would overflow int64", k, kn);
    char txt[24];
    int n = snprintf(txt, sizeof txt, "%lld", (long long)sum);
    if ((pr = put(s, c, k, kn, txt, (size_t)n)) != 0) return pr < 0 ? -1 : 0;
    notify(s, store_table_find(&s->tab, k, kn));
    return reply(c, ST_OK, txt, (size_t)n);
  }
  case OP_CAS: {
    uint32_t en = get32(v);
    if (en > vn - 4) { conn_log(c, "compare_set: expected value runs past the frame"); return -1; }
    const unsigned char *exp = v + 4, *des = v + 4 + en;
    uint32_t dn = vn - 4 - en;
    e = store_table_find(&s->tab, k, kn);
    /* As PyTorch: a missing key is created only when expected is empty. */
    if ((!e && en == 0) || (e && e->vlen == en && !memcmp(e->val, exp, en))) {
      if ((pr = put(s, c, k, kn, des, dn)) != 0) return pr < 0 ? -1 : 0;
      e = store_table_find(&s->tab, k, kn);
      notify(s, e);
    }
    return e ? reply(c, ST_OK, e->val, e->vlen) : reply(c, ST_OK, NULL, 0);
  }
  case OP_CHECK:
    b8[0] = store_table_find(&s->tab, k, kn) != NULL;
    return reply(c, ST_OK, b8, 1);
  case OP_DELETE:
    b8[0] = (unsigned char)store_table_del(&s->tab, k, kn);
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
    else if (!c->authed && kn > UNAUTH_BUF - HDR)
      snprintf(why, sizeof why, "handshake with a token of %u bytes (limit %d)", kn, UNAUTH_BUF - HDR);
    else if ((op == OP_ADD && vn != 8) || (op == OP_CAS && vn < 4) ||
             ((op == OP_GET || op == OP_WAIT) && vn != 0 && vn != 8) ||
             (op != OP_SET && op != OP_ADD && op != OP_CAS && op != OP_GET && op != OP_WAIT &&
              vn != 0))
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
  size_t room = READ_CHUNK;
  if (!c->authed) {  /* at most one auth frame buffered before the token is checked */
    size_t held = c->inlen - c->inoff;
    if (held >= UNAUTH_BUF) { conn_log(c, "handshake larger than an auth frame"); return -1; }
    room = UNAUTH_BUF - held;
  }
  ssize_t n = recv(c->fd, buf, room, 0);
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

/* Closes the oldest connection still owing the token (connections are kept
** in accept order) if it has been waiting at least min_age seconds; 0 when
** there is none. */
static int evict_oldest_unauth(server *s, const char *why, double min_age) {
  double now = mono_s();
  for (int i = 0; i < s->nconns; i++) {
    conn *c = s->conns[i];
    if (c->authed || c->dead) continue;
    if (now - c->born < min_age) return 0;  /* the oldest is young: a client mid-handshake */
    conn_log(c, why);
    close(c->fd);  /* now: the descriptor may be what the caller needs */
    c->fd = -1, c->dead = 1;
    s->nunauth--;
    return 1;
  }
  return 0;
}

static void peer_name(const struct sockaddr_in *a, char *out, size_t n) {
  char ip[INET_ADDRSTRLEN] = "?";
  inet_ntop(AF_INET, &a->sin_addr, ip, sizeof ip);
  snprintf(out, n, "%s:%d", ip, ntohs(a->sin_port));
}

/* Out of descriptors with only authenticated clients: refuse the pending
** connection rather than leave it in the backlog, where it would keep the
** listening socket readable and the poll loop spinning.  The spare
** descriptor makes room for accept; the client is told why before the
** close, so a rank that cannot join names the cause. */
static void refuse_pending(server *s, int err) {
  if (s->spare >= 0) {
    close(s->spare);
    s->spare = -1;
  }
  struct sockaddr_in a;
  socklen_t al = sizeof a;
  int fd = accept4(s->lfd, (struct sockaddr *)&a, &al, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd >= 0) {
    char peer[64], msg[200];
    peer_name(&a, peer, sizeof peer);
    int n = snprintf(msg, sizeof msg,
                     "the store server is out of file descriptors (%s; %d connections): "
                     "raise ulimit -n where the launcher of node 0 runs",
                     strerror(err), s->nconns);
    unsigned char frame[RHDR + sizeof msg];
    frame[0] = ST_ERR;
    put32(frame + 1, (uint32_t)n);
    memcpy(frame + RHDR, msg, (size_t)n);
    char sink[256];
    while (recv(fd, sink, sizeof sink, 0) > 0) {}  /* unread input would turn close into a reset */
    if (send(fd, frame, RHDR + (size_t)n, MSG_NOSIGNAL) < 0) {}
    shutdown(fd, SHUT_WR);
    close(fd);
    slog("ddplua store: refused connection from %s: out of file descriptors (%s, %d open "
         "connections; raise ulimit -n)\n", peer, strerror(err), s->nconns);
  }
  s->spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
  /* Without a spare (or when accept still failed) the backlog cannot be
  ** drained: stop polling the listening socket for a moment instead. */
  if (s->spare < 0 || fd < 0) s->lpause_until = mono_s() + 0.1;
}

static void server_accept(server *s) {
  for (int i = 0; i < 64; i++) {  /* bounded: the others come next round */
    struct sockaddr_in a;
    socklen_t al = sizeof a;
    int fd = accept4(s->lfd, (struct sockaddr *)&a, &al, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      int err = errno;
      if (err == EMFILE || err == ENFILE) {
        /* accept takes the descriptor before the connection: EMFILE comes
        ** with an empty backlog too, and then there is nothing to do */
        struct pollfd lp = { .fd = s->lfd, .events = POLLIN };
        if (poll(&lp, 1, 0) != 1) return;
        /* an unauthenticated connection idle for a while is worth less
        ** than a new one; one younger is likely a rank mid-handshake */
        if (evict_oldest_unauth(s, "out of file descriptors; making room for a new connection",
                                EVICT_AGE_S))
          continue;
        refuse_pending(s, err);
      } else if (err == ENOBUFS || err == ENOMEM) {
        s->lpause_until = mono_s() + 0.1;
      }
      return;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    char peer[64];
    peer_name(&a, peer, sizeof peer);
    if (s->nconns == s->capconns) {
      int cap = s->capconns ? s->capconns * 2 : 16;
      conn **cs = realloc(s->conns, (size_t)cap * sizeof *cs);
      if (!cs) { close(fd); return; }
      s->conns = cs, s->capconns = cap;
    }
    conn *c = conn_new(fd, peer);
    if (!c) { close(fd); return; }
    if (s->nunauth >= UNAUTH_MAX) {  /* the count may include ones that died this round */
      s->nunauth = 0;
      for (int k = 0; k < s->nconns; k++) s->nunauth += !s->conns[k]->authed && !s->conns[k]->dead;
    }
    if (s->nunauth >= UNAUTH_MAX)
      evict_oldest_unauth(s, "too many connections without a handshake; closing the oldest", 0);
    c->born = mono_s();
    s->conns[s->nconns++] = c;
    s->nunauth++;
    atomic_fetch_add(&s->accepted, 1);
  }
}

/* Closes connections past the handshake deadline; returns the milliseconds
** until the next one expires (at most 1000). */
static int expire_handshakes(server *s) {
  double now = mono_s(), next = 1.0;
  for (int i = 0; i < s->nconns; i++) {
    conn *c = s->conns[i];
    if (c->authed || c->dead) continue;
    double left = c->born + s->hs_timeout - now;
    if (left <= 0) {
      char why[96];
      snprintf(why, sizeof why, "no handshake within %g s", s->hs_timeout);
      conn_log(c, why);
      c->dead = 1;
      s->nunauth--;
    } else if (left < next) {
      next = left;
    }
  }
  return (int)(next * 1000) + 1;
}

static void *server_main(void *arg) {
  server *s = arg;
  struct pollfd *pfd = NULL;
  int pcap = 0;
  int wait_ms = 1000;
  while (!atomic_load(&s->stop)) {
    log_flush();
    double lpause = s->lpause_until - mono_s();
    if (lpause > 0 && lpause * 1000 < wait_ms) wait_ms = (int)(lpause * 1000) + 1;
    int np = 2 + s->nconns;
    if (np > pcap) {
      struct pollfd *p = realloc(pfd, (size_t)np * 2 * sizeof *p);
      if (!p) { fprintf(stderr, "ddplua store: out of memory; server stops\n"); break; }
      pfd = p, pcap = np * 2;
    }
    pfd[0] = (struct pollfd){ .fd = s->wake[0], .events = POLLIN };
    pfd[1] = (struct pollfd){ .fd = lpause > 0 ? -1 : s->lfd, .events = POLLIN };
    for (int i = 0; i < s->nconns; i++) {
      conn *c = s->conns[i];
      pfd[2 + i] = (struct pollfd){ .fd = c->fd,
        .events = (short)(POLLIN | (c->outoff < c->outlen ? POLLOUT : 0)) };
    }
    int nc = s->nconns;
    if (poll(pfd, (nfds_t)np, wait_ms) < 0) {
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
    expire_waits(s);  /* before the frames: an answered wait may hold the next */
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
    wait_ms = expire_handshakes(s);
    int wms = expire_waits(s);  /* and the waits parked just now */
    if (wms < wait_ms) wait_ms = wms;
    int j = 0, unauth = 0;
    for (int i = 0; i < s->nconns; i++) {
      conn *c = s->conns[i];
      if (!c->dead && conn_flush(c)) c->dead = 1;
      if (c->dead) conn_free(c);
      else s->conns[j++] = c, unauth += !c->authed;
    }
    s->nconns = j, s->nunauth = unauth;
  }
  free(pfd);
  return NULL;
}

DL_HIDDEN void store_server_free(server *s) {
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
  if (s->spare >= 0) close(s->spare);
  store_table_free(&s->tab);
  free(s->rbuf);
  free(s->token);
  free(s);
}

/* Starts a server on host:port (0: a free port) accepting token (NULL or
** "": anyone); NULL with the error set. */
DL_HIDDEN store_server *store_server_start(const char *host, int port, const char *token) {
  const char *op = "store.server";
  server *sv = calloc(1, sizeof *sv);
  if (!sv) return dl_errp(EM_NOMEM, op, (long long)sizeof *sv, 0ll);
  sv->lfd = sv->wake[0] = sv->wake[1] = sv->spare = -1;
  sv->hs_timeout = HANDSHAKE_S;
  store_table_bound(&sv->tab);  /* DDP_STORE_MAX_MB, DDP_STORE_MAX_KEYS */
  const char *hs = getenv("DDPLUA_STORE_HANDSHAKE_TIMEOUT");  /* for tests */
  if (hs && atof(hs) > 0) sv->hs_timeout = atof(hs);
  struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
  int one = 1;
  socklen_t al = sizeof a;
  if (inet_pton(AF_INET, host, &a.sin_addr) != 1) {
    store_server_free(sv);
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
  sv->spare = open("/dev/null", O_RDONLY | O_CLOEXEC);  /* best effort: refuse_pending copes */
  int e = pthread_create(&sv->thread, NULL, server_main, sv);
  if (e) { errno = e; goto os; }
  sv->started = 1;
  return sv;
os:;
  char where[300];
  snprintf(where, sizeof where, "%s:%d", host, port);
  dl_err(EM_STORE_OS, op, where, strerror(errno));
  store_server_free(sv);
  return NULL;
}

DL_HIDDEN int store_server_port(const store_server *s) { return s->port; }

DL_HIDDEN void store_server_counts(const store_server *s, long *accepted, long *authed) {
  *accepted = s ? atomic_load(&s->accepted) : 0;
  *authed = s ? atomic_load(&s->authed) : 0;
}

DL_HIDDEN int store_fuzz_feed(const uint8_t *data, size_t n, size_t chunk) {
  server s = { .lfd = -1, .wake = { -1, -1 }, .spare = -1, .nunauth = 1 };
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
  store_table_free(&s.tab);
  return rc;
}
