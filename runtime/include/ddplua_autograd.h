/*
** ddplua_autograd.h -- the autograd engine: grad mode, leaves, backward, hooks.
** Part of the public API: include ddplua.h, which includes every part.
*/
#ifndef DDPLUA_AUTOGRAD_H
#define DDPLUA_AUTOGRAD_H

#include "ddplua_base.h"

#if !defined(DL_CDEF) && defined(__cplusplus)
extern "C" {
#endif

/* -- Autograd ------------------------------------------------------------- */

/* Ops record a graph while grad mode is on and an input requires grad;
** dl_backward walks it in reverse.  Returns the previous mode. */
DL_API int dl_set_grad_enabled(int enabled);
DL_API int dl_is_grad_enabled(void);
/* Only floating point leaves (tensors no op produced) can require grad. */
DL_API int dl_requires_grad_(dl_tensor *t, int requires);
DL_API int dl_requires_grad(const dl_tensor *t);
DL_API int dl_is_leaf(const dl_tensor *t);
/* The accumulated gradient (new reference), or NULL without an error. */
DL_API dl_tensor *dl_grad(const dl_tensor *t);
/* Replaces the gradient (g == NULL clears it).  Later backward passes add
** into g in place, so g may be a view (of a DDP bucket, say). */
DL_API int dl_set_grad(dl_tensor *t, dl_tensor *g);
/* A tensor sharing t's data, outside any graph. */
DL_API dl_tensor *dl_detach(const dl_tensor *t);
/* Name of the op that produced t ("MulBackward"), or "" for leaves. */
DL_API const char *dl_grad_fn_name(const dl_tensor *t);
/* Backpropagates from root; grad may be NULL for a one-element root.  The
** graph is freed unless retain_graph. */
DL_API int dl_backward(dl_tensor *root, const dl_tensor *grad,
                       int retain_graph);
/* Called (in C, on the thread running backward) once a leaf's gradient of
** this backward pass has been fully accumulated into its .grad. */
typedef void (*dl_grad_hook)(void *ctx, dl_tensor *leaf);
DL_API int dl_add_grad_hook(dl_tensor *leaf, dl_grad_hook fn, void *ctx);
DL_API int dl_remove_grad_hook(dl_tensor *leaf, dl_grad_hook fn, void *ctx);
DL_API int dl_clear_grad_hooks(dl_tensor *leaf);
/* Called at the end of every successful backward pass, in the order
** added; a nonzero return (with the error set) fails that dl_backward. */
typedef int (*dl_backward_hook)(void *ctx);
DL_API int dl_add_backward_hook(dl_backward_hook fn, void *ctx);
DL_API int dl_remove_backward_hook(dl_backward_hook fn, void *ctx);

/* -- Passes that pause, and checkpoints ------------------------------------ */

/* A backward pass the caller drives, so that a checkpoint's recompute (in
** Lua) runs inside it with no call from C into Lua.  stop_seq < 0: a pass
** as dl_backward's, into .grad with hooks; stop_seq >= 0: a capturing
** pass, which stops at every leaf and at every node created before
** stop_seq (a dl_autograd_next_seq() read before a recompute) and keeps
** the gradients arriving there instead (no .grad, no hook).  NULL with the
** error set on bad arguments. */
typedef struct dl_grad_pass dl_grad_pass;
DL_API dl_grad_pass *dl_pass_begin(dl_tensor *root, const dl_tensor *grad, int retain_graph,
                                   double stop_seq);
/* Runs until the pass is done (0), or reaches a checkpoint node (1):
** dl_pass_node_id and dl_pass_node_grad then say which and give its
** output's gradient (new reference, NULL for none), the caller recomputes
** and hands the gradients of its capturing pass over with dl_pass_give,
** and calls dl_pass_run again.  -1 with the error set. */
DL_API int dl_pass_run(dl_grad_pass *p);
DL_API int64_t dl_pass_node_id(const dl_grad_pass *p);
DL_API dl_tensor *dl_pass_node_grad(const dl_grad_pass *p);
DL_API int dl_pass_retains(const dl_grad_pass *p);
DL_API int dl_pass_give(dl_grad_pass *p, const dl_grad_pass *inner);
/* Frees the pass (ok = 0: the caller failed, partial sums are dropped);
** after a whole pass into .grad, runs the end-of-backward hooks.  Returns
** 0, or -1 with the error set. */
DL_API int dl_pass_end(dl_grad_pass *p, int ok);

/* A checkpointed forward on this thread: between begin and end, ops
** record their graph but save no tensor for backward (nests).  begin
** returns the creation number of the first node it will make. */
DL_API double dl_checkpoint_begin(void);
DL_API void dl_checkpoint_end(void);
/* out, computed since mark, gets a checkpoint node (grad_fn
** CheckpointBackward, id the caller's key) in place of the graph made
** since: its inputs are that graph's boundary, every leaf and every older
** node it reached.  Returns the number of inputs (0: out needs no
** gradient from here, nothing done), -1 with the error set. */
DL_API int dl_checkpoint_attach(dl_tensor *out, double mark, int64_t id);
/* The ids of checkpoint nodes freed since the last call (at most max);
** how many were written. */
DL_API int dl_checkpoint_freed(int64_t *out, int max);

#if !defined(DL_CDEF) && defined(__cplusplus)
}
#endif

#endif /* DDPLUA_AUTOGRAD_H */
