/*
** store.h -- what the rendezvous store's client (store.c), server
** (store_server.c) and fuzzer (tests/fuzz/fuzz_store.c) share: the wire
** format, its limits and the parser hook.
*/
#ifndef DL_STORE_H
#define DL_STORE_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "core/internal.h"

/* The wire format (store.c's header comment). */
enum { OP_AUTH = 1, OP_SET, OP_GET, OP_ADD, OP_CAS, OP_WAIT, OP_CHECK,
       OP_DELETE, OP_NUMKEYS, OP__END };
/* ST_NOTYET: a get or wait that carried a limit (an 8-byte value: the
** milliseconds it may park) found no key in that time; the connection stays
** open for the next request. */
enum { HDR = 9, RHDR = 5, ST_OK = 0, ST_ERR = 1, ST_NOTYET = 2 };
/* The server answers a handshake with STORE_HELLO (ok) or, for a token
** not its own, an error starting STORE_NOT_OURS, so a client tells a
** ddplua store of another job, and a port some other program holds (such
** as torchrun's own store, PyTorch's protocol), from its own store. */
#define STORE_HELLO "ddplua-store 1"
#define STORE_NOT_OURS "ddplua-store: wrong token"
/* A ddplua store answers a handshake at once; a client gives it this long
** before it calls the port some other program's. */
#define STORE_HANDSHAKE_S 5.0

static inline void put32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static inline uint32_t get32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
         (uint32_t)p[3] << 24;
}
static inline void put64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static inline uint64_t get64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}



/* A strict decimal int64, as add stores its counters; -1 when p is not one. */
static inline int parse_i64(const char *p, size_t n, int64_t *out) {
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

/* store_server.c: the server of a dl_store_server handle. */
typedef struct store_server store_server;
DL_HIDDEN store_server *store_server_start(const char *host, int port, const char *token);
DL_HIDDEN int store_server_port(const store_server *s);
DL_HIDDEN void store_server_free(store_server *s);
/* Connections accepted and handshakes passed since the start (for tests:
** a wait in slices must not reconnect); a dl_store_server handle's server. */
DL_HIDDEN void store_server_counts(const store_server *s, long *accepted, long *authed);
DL_HIDDEN const store_server *store_server_of(const dl_store *s);

/* Checked before anything is allocated for a frame, so a peer cannot make
** the server reserve memory it has not sent. */
enum { STORE_MAX_KEY = 64 * 1024, STORE_MAX_VALUE = 256 * 1024 * 1024 };

/* Feeds bytes to a fresh in-memory server as if one connection had sent
** them (in chunks of at most `chunk` bytes, 0 = all at once), running the
** real frame parser and handlers.  Returns 0 when the connection survives,
** -1 when the server would close it.  For the fuzz target only. */
DL_HIDDEN int store_fuzz_feed(const uint8_t *data, size_t n, size_t chunk);

#endif
