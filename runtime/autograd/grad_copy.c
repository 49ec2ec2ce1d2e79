/*
** grad_copy.c -- the in-place checks, and the public copies, casts and
** fills: each checks an in-place write (a tensor the graph needs is
** refused, else its version is bumped) or records the cast, around the
** forwards of core/ (tensor.c, view.c, random.c), which know nothing of
** autograd.
*/
#include "autograd/autograd.h"

/* -- In-place writes ------------------------------------------------------ */

DL_HIDDEN int ag_check_write(const char *op, dl_tensor *t) {
  if (dl_is_grad_enabled() && tensor_requires_grad(t)) {
    const ag_node *fn = ag_grad_fn(t);
    if (fn) return dl_err(EM_AG_INPLACE_GRAPH, op, fn->rule->name);
    return dl_err(EM_AG_INPLACE_LEAF, op);
  }
  tensor_bump_version(t);
  return 0;
}

/* Every public in-place op comes through here, on any device, so the
** refusal of a written-to tensor whose elements share memory is made once:
** it is about strides, not about a device's kernel. */
DL_HIDDEN int ag_check_inplace(const char *op, dl_tensor *t) {
  if (tensor_check_overlap(op, t)) return -1;
  return ag_check_write(op, t);
}

/* -- Copies, fills, casts --------------------------------------------------- */

DL_API int dl_copy_(dl_tensor *dst, const dl_tensor *src) {
  if (check_tensor_any("copy_", dst) || check_tensor_any("copy_", src)) return -1;
  if (ag_check_inplace("copy_", dst)) return -1;
  return fw_copy_(dst, src);
}

DL_API int dl_fill_(dl_tensor *t, double value) {
  if (check_tensor_any("fill_", t)) return -1;
  if (ag_check_inplace("fill_", t)) return -1;
  return fw_fill_(t, value);
}

/* One element is one place even in an expanded view: writing it is no race
** (PyTorch's t[i] = v writes a 0-dim view there too), so no overlap check. */
DL_API int dl_set_double(dl_tensor *t, int64_t linear, double value) {
  if (tensor_check_linear("set", t, linear) || ag_check_write("set", t)) return -1;
  return fw_set_double(t, linear, value);
}

DL_API int dl_uniform_(dl_tensor *t, double low, double high) {
  return fw_uniform_(t, low, high, ag_check_inplace);
}

DL_API int dl_normal_(dl_tensor *t, double mean, double std) {
  return fw_normal_(t, mean, std, ag_check_inplace);
}

/* A cast (or a clone) is differentiable: the gradient is cast back. */
DL_API dl_tensor *dl_to_dtype(const dl_tensor *t, dl_dtype dtype) {
  return ag_copy(fw_to_dtype(t, dtype), t);
}

DL_API dl_tensor *dl_clone(const dl_tensor *t) {
  if (check_tensor_any("clone", t)) return NULL;
  return dl_to_dtype(t, (dl_dtype)t->dtype);
}

/* t itself (a new reference) when already contiguous, else a clone. */
DL_API dl_tensor *dl_contiguous(const dl_tensor *t) {
  if (check_tensor_any("contiguous", t)) return NULL;
  if (dl_tensor_is_contiguous(t)) {
    dl_tensor_retain((dl_tensor *)t);
    return (dl_tensor *)t;
  }
  return dl_clone(t);
}
