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

#if !defined(DL_CDEF) && defined(__cplusplus)
}
#endif

#endif /* DDPLUA_AUTOGRAD_H */
