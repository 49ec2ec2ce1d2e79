/*
** ddplua_binding.h -- for a language binding with a garbage collector (the
** LuaJIT front end): memory pressure hints and owners kept alive by the host.
** An embedder from C does not need it; ddplua.h does not include it.
*/
#ifndef DDPLUA_BINDING_H
#define DDPLUA_BINDING_H

#include "ddplua.h"

#if !defined(DL_CDEF) && defined(__cplusplus)
extern "C" {
#endif

/* -- Garbage collection hints --------------------------------------------- */

/* 1 when enough has been allocated since the last dl_gc_done() that the
** Lua side should run its garbage collector (it sees pointers, not bytes). */
DL_API int dl_gc_hint(void);
DL_API void dl_gc_done(void);
/* For several Lua states in one process (the loop's and each loader
** worker's): a number that changes each time the live bytes grew by that
** much (and restarts the count).  A state that sees a new one collects
** once, then calls dl_gc_done(): a hint taken by one state would leave the
** others' garbage -- a worker's decoded images, the loop's used batches --
** to pile up unseen. */
DL_API int dl_gc_epoch(void);

/* -- Memory owned by the host language ------------------------------------ */

/* For owners that live in Lua (which C must never call back): when the
** storage dies it queues `anchor`, and Lua drops its reference to the owner
** after popping the id with dl_released_anchors. */
DL_API dl_tensor *dl_from_blob_anchored(void *data, dl_dtype dtype,
                                        const int64_t *shape,
                                        const int64_t *strides, int ndim,
                                        int64_t anchor);
DL_API int dl_released_anchors(int64_t *out, int max);  /* count popped */
DL_API int dl_anchors_pending(void);

#if !defined(DL_CDEF) && defined(__cplusplus)
}
#endif

#endif /* DDPLUA_BINDING_H */
