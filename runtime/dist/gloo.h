/*
** gloo.h -- the Gloo transport (gloo.cc): one Gloo context, a full TCP mesh
** among `world` ranks, behind a plain C API for the process-group backends.
**
** Contract: every call returns 0, or -1 with a message in err (errlen bytes,
** always NUL-terminated) naming the call; a timeout's message contains
** "timed out" and Gloo's own text.  A timeout or a dead peer poisons the
** context: every later call fails at once with the first reason (rebuild
** the context under a new prefix).  Calls are blocking and every rank must
** make the same calls in the same order, with the same sizes; one thread
** at a time per context.  No C++ exception ever leaves these functions.
*/
#ifndef DL_GLOO_H
#define DL_GLOO_H

#include <stddef.h>
#include <stdint.h>

#include "ddplua.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Internal to the library (the C unit test links build/libddplua.a). */
#define DLG_API __attribute__((visibility("hidden")))

typedef struct dlg dlg;

/* Connects through store: all keys go under prefix (unique per group, say
** "ddp/gloo/<jobid>/<k>").  host: the address to bind and advertise
** ("127.0.0.1" when NULL or empty).  timeout_s bounds the connection and
** each later call.  NULL with a message in err on failure. */
DLG_API dlg *dlg_new(dl_store *store, const char *prefix, int rank, int world,
                     const char *host, double timeout_s, char *err, size_t errlen);
DLG_API void dlg_free(dlg *g);
DLG_API void dlg_set_timeout(dlg *g, double timeout_s);
DLG_API int dlg_rank(const dlg *g);
DLG_API int dlg_world(const dlg *g);

/* In place, n elements of dtype (a dl_dtype).  op: a dl_pg_op; avg is
** sum / world (floating dtypes only).  bool: sum and max are or, prod and
** min are and; integer sums and products wrap; max and min propagate NaN;
** bfloat16 and float16 are reduced in float32, rounded at each step.  Every
** rank ends with the same bits. */
DLG_API int dlg_all_reduce(dlg *g, void *buf, int64_t n, int dtype, int op,
                           char *err, size_t errlen);
/* In place: src's nbytes on every rank. */
DLG_API int dlg_broadcast(dlg *g, void *buf, int64_t nbytes, int src,
                          char *err, size_t errlen);
/* out: world * nbytes, the ranks' in in rank order (in may lie inside out). */
DLG_API int dlg_all_gather(dlg *g, void *out, const void *in, int64_t nbytes,
                           char *err, size_t errlen);
/* in: world * n_per_rank elements; out (n_per_rank) gets block `rank` of
** the reduction (op as in dlg_all_reduce). */
DLG_API int dlg_reduce_scatter(dlg *g, void *out, const void *in, int64_t n_per_rank,
                               int dtype, int op, char *err, size_t errlen);
/* Point to point: send #k from a to b meets recv #k at b from a; sizes
** must agree. */
DLG_API int dlg_send(dlg *g, const void *buf, int64_t nbytes, int dst,
                     char *err, size_t errlen);
DLG_API int dlg_recv(dlg *g, void *buf, int64_t nbytes, int src,
                     char *err, size_t errlen);
DLG_API int dlg_barrier(dlg *g, char *err, size_t errlen);
/* The first message of a call, which makes a mismatch of the ranks' calls
** an error instead of garbage or a crash: this rank sends head (hlen <= 64
** bytes, the same hlen on every rank) and dlen <= dlg_inline_max bytes of
** data to every peer -- peer q gets data + q * stride, or data itself for
** stride 0 -- and waits until every peer's message arrived (a barrier).
** Messages may differ in size between ranks: each arrives whole, into a
** slot of its own, and dlg_msg(g, r) is rank r's (head, then data; this
** rank's own too), valid until the next dlg_first.  Compare the heads
** before using the data.  what names the call in messages. */
DLG_API int dlg_first(dlg *g, const char *what, const void *head, size_t hlen, const void *data,
                      size_t dlen, size_t stride, char *err, size_t errlen);
DLG_API const void *dlg_msg(const dlg *g, int r);
/* The most data dlg_first carries: 64 KiB, less from 9 ranks up (the same
** on every rank of a context). */
DLG_API size_t dlg_inline_max(const dlg *g);
/* out (n elements of dtype) = the reduction by op (as dlg_all_reduce) of the
** n elements at byte off of every rank's dlg_msg, in rank order: the same
** bits on every rank. */
DLG_API int dlg_reduce_msgs(dlg *g, void *out, size_t off, int64_t n, int dtype, int op,
                            char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif /* DL_GLOO_H */
