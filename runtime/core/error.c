/*
** error.c -- thread-local error state and the helpers that format messages
** (shapes, dtypes, dims) for it.
*/
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/internal.h"

static const struct { int code; const char *fmt; } errdefs[EM__MAX] = {
#define ERRDEF(name, code, fmt) {code, fmt},
#include "core/errmsg.h"
#undef ERRDEF
};

static _Thread_local char err_msg[1024];
static _Thread_local int err_code;

DL_API const char *dl_last_error(void) { return err_msg; }
DL_API int dl_last_error_code(void) { return err_code; }
DL_API void dl_clear_error(void) { err_msg[0] = 0; err_code = 0; }
DL_API const char *dl_version(void) { return "0.1.0"; }

static int set_error(dl_errmsg em, va_list ap) {
  vsnprintf(err_msg, sizeof err_msg, errdefs[em].fmt, ap);
  err_code = errdefs[em].code;
  return err_code;
}

DL_HIDDEN int dl_err(dl_errmsg em, ...) {
  va_list ap;
  va_start(ap, em);
  int code = set_error(em, ap);
  va_end(ap);
  return code;
}

DL_HIDDEN void *dl_errp(dl_errmsg em, ...) {
  va_list ap;
  va_start(ap, em);
  set_error(em, ap);
  va_end(ap);
  return NULL;
}

DL_HIDDEN int dl_err_set(int code, const char *msg) {
  snprintf(err_msg, sizeof err_msg, "%s", msg);
  err_code = code;
  return code;
}

/* -- Formatting for messages --------------------------------------------- */

/* Rotating buffers so one message can show several shapes. */
static char *next_buf(void) {
  static _Thread_local char bufs[6][192];
  static _Thread_local int next;
  next = (next + 1) % 6;
  return bufs[next];
}

DL_HIDDEN const char *fmt_shape(const int64_t *shape, int ndim) {
  char *b = next_buf();
  size_t n = 0, cap = 192;
  n += (size_t)snprintf(b + n, cap - n, "[");
  for (int i = 0; i < ndim && n < cap; i++)
    n += (size_t)snprintf(b + n, cap - n, i ? ", %lld" : "%lld",
                          (long long)shape[i]);
  if (n < cap) snprintf(b + n, cap - n, "]");
  return b;
}

DL_HIDDEN const char *fmt_tshape(const dl_tensor *t) {
  return fmt_shape(t->shape, t->ndim);
}

DL_HIDDEN const char *fmt_dtype(int dtype) { return dl_dtype_name(dtype); }

DL_HIDDEN int norm_dim(const char *op, int dim, int ndim, int *out) {
  int n = ndim > 0 ? ndim : 1;  /* 0-dim tensors accept dim 0 and -1 */
  if (dim < -n || dim >= n)
    return dl_err(EM_DIM_RANGE, op, dim, ndim, -n, n - 1);
  *out = dim < 0 ? dim + n : dim;
  return 0;
}

DL_HIDDEN int norm_dim_incl(const char *op, int dim, int ndim, int *out) {
  int n = ndim + 1;
  if (dim < -n || dim >= n)
    return dl_err(EM_DIM_RANGE, op, dim, ndim, -n, n - 1);
  *out = dim < 0 ? dim + n : dim;
  return 0;
}

DL_HIDDEN int check_tensor_any(const char *op, const dl_tensor *t) {
  if (!t) return dl_err(EM_NULLARG, op, "tensor");
  if (t->flags & TF_FREED) return dl_err(EM_FREED, op);
  return 0;
}

