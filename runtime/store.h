/*
** store.h -- what the rendezvous store (store.c) shares with its fuzzer
** (tests/fuzz/fuzz_store.c): the wire format's limits and the parser hook.
*/
#ifndef DL_STORE_H
#define DL_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "internal.h"

/* Checked before anything is allocated for a frame, so a peer cannot make
** the server reserve memory it has not sent. */
enum { STORE_MAX_KEY = 64 * 1024, STORE_MAX_VALUE = 256 * 1024 * 1024 };

/* Feeds bytes to a fresh in-memory server as if one connection had sent
** them (in chunks of at most `chunk` bytes, 0 = all at once), running the
** real frame parser and handlers.  Returns 0 when the connection survives,
** -1 when the server would close it.  For the fuzz target only. */
DL_HIDDEN int store_fuzz_feed(const uint8_t *data, size_t n, size_t chunk);

#endif
