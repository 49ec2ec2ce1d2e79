/*
** view.c -- views: new shapes and strides over the same storage.  Only
** reshape (when it must) and contiguous copy data.
*/
#include <string.h>

#include "core/internal.h"

/* Replaces one -1 with the size that makes numel match; checks the rest. */
static int infer_shape(const char *op, const dl_tensor *t, const int64_t *in,
                       int ndim, int64_t *out) {
  if (ndim < 0 || ndim > DL_MAX_DIMS) return dl_err(EM_NDIM_MAX, op, ndim);
  int64_t numel = dl_tensor_numel(t), known = 1;
  int infer = -1;
  for (int i = 0; i < ndim; i++) {
    out[i] = in[i];
    if (in[i] == -1) {
      if (infer >= 0) return dl_err(EM_VIEW_INFER, op, fmt_shape(in, ndim));
      infer = i;
    } else if (in[i] < 0) {
      return dl_err(EM_NEG_SIZE, op, (long long)in[i], fmt_shape(in, ndim));
    } else {
      known *= in[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || numel % known)
      return dl_err(EM_VIEW_NUMEL, op, fmt_shape(in, ndim), (long long)numel,
                    fmt_tshape(t));
    out[infer] = numel / known;
  } else if (known != numel) {
    return dl_err(EM_VIEW_NUMEL, op, fmt_shape(in, ndim), (long long)numel,
                  fmt_tshape(t));
  }
  /* the products above may have wrapped around: check the sizes properly */
  return check_shape(op, out, ndim);
}

/* Strides for viewing t as shape without copying, or -1 when the layout
** does not allow it: dims merge only within chunks that are contiguous
** among themselves (PyTorch's computeStride). */
static int view_strides(const dl_tensor *t, const int64_t *shape, int ndim,
                        int64_t *stride) {
  if (dl_tensor_numel(t) == 0) {
    contiguous_strides(shape, ndim, stride);
    return 0;
  }
  int64_t one = 1;
  const int64_t *os = t->ndim ? t->shape : &one;
  const int64_t *ost = t->ndim ? t->stride : &one;
  int on = t->ndim ? t->ndim : 1;
  int vd = ndim - 1;
  int64_t base = ost[on - 1], tnumel = 1, vnumel = 1;
  for (int td = on - 1; td >= 0; td--) {
    tnumel *= os[td];
    if (td == 0 || (os[td - 1] != 1 && ost[td - 1] != tnumel * base)) {
      while (vd >= 0 && (vnumel < tnumel || shape[vd] == 1)) {
        stride[vd] = vnumel * base;
        vnumel *= shape[vd];
        vd--;
      }
      if (vnumel != tnumel) return -1;
      if (td > 0) {
        base = ost[td - 1];
        tnumel = 1;
        vnumel = 1;
      }
    }
  }
  return vd == -1 ? 0 : -1;
}

static const char *fmt_strides(const dl_tensor *t) {
  return fmt_shape(t->stride, t->ndim);
}

DL_HIDDEN dl_tensor *fw_view(const dl_tensor *t, const int64_t *shape, int ndim) {
  int64_t s[DL_MAX_DIMS], st[DL_MAX_DIMS];
  if (check_tensor_any("view", t) || infer_shape("view", t, shape, ndim, s))
    return NULL;
  if (view_strides(t, s, ndim, st))
    return dl_errp(EM_VIEW_STRIDE, "view", fmt_shape(s, ndim), fmt_tshape(t),
                   fmt_strides(t));
  return tensor_alias(t, s, st, ndim, t->offset);
}

DL_HIDDEN dl_tensor *fw_reshape(const dl_tensor *t, const int64_t *shape,
                             int ndim) {
  int64_t s[DL_MAX_DIMS], st[DL_MAX_DIMS];
  if (check_tensor_any("reshape", t) || infer_shape("reshape", t, shape, ndim, s))
    return NULL;
  if (!view_strides(t, s, ndim, st))
    return tensor_alias(t, s, st, ndim, t->offset);
  dl_tensor *c = fw_contiguous(t);
  dl_tensor *r = c ? fw_view(c, s, ndim) : NULL;
  dl_tensor_release(c);
  return r;
}

DL_HIDDEN dl_tensor *fw_contiguous(const dl_tensor *t) {
  if (check_tensor_any("contiguous", t)) return NULL;
  if (dl_tensor_is_contiguous(t)) {
    dl_tensor_retain((dl_tensor *)t);
    return (dl_tensor *)t;
  }
  return fw_clone(t);
}

DL_HIDDEN dl_tensor *fw_transpose(const dl_tensor *t, int d0, int d1) {
  int a, b;
  if (check_tensor_any("transpose", t) || norm_dim("transpose", d0, t->ndim, &a) ||
      norm_dim("transpose", d1, t->ndim, &b))
    return NULL;
  int64_t s[DL_MAX_DIMS], st[DL_MAX_DIMS];
  memcpy(s, t->shape, sizeof s);
  memcpy(st, t->stride, sizeof st);
  if (t->ndim) {
    s[a] = t->shape[b], s[b] = t->shape[a];
    st[a] = t->stride[b], st[b] = t->stride[a];
  }
  return tensor_alias(t, s, st, t->ndim, t->offset);
}

DL_HIDDEN dl_tensor *fw_permute(const dl_tensor *t, const int *perm, int ndim) {
  if (check_tensor_any("permute", t)) return NULL;
  int seen[DL_MAX_DIMS] = {0}, p[DL_MAX_DIMS];
  int ok = ndim == t->ndim && (ndim == 0 || perm);
  for (int i = 0; ok && i < ndim; i++) {
    ok = !norm_dim("permute", perm[i], ndim, &p[i]) && !seen[p[i]]++;
  }
  if (!ok) {
    int64_t shown[DL_MAX_DIMS];
    int n = ndim < 0 ? 0 : ndim > DL_MAX_DIMS ? DL_MAX_DIMS : ndim;
    for (int i = 0; i < n; i++) shown[i] = perm ? perm[i] : 0;
    return dl_errp(EM_PERMUTE, "permute", fmt_shape(shown, n), t->ndim);
  }
  int64_t s[DL_MAX_DIMS], st[DL_MAX_DIMS];
  for (int i = 0; i < ndim; i++) s[i] = t->shape[p[i]], st[i] = t->stride[p[i]];
  return tensor_alias(t, s, st, ndim, t->offset);
}

DL_HIDDEN dl_tensor *fw_narrow(const dl_tensor *t, int dim, int64_t start,
                            int64_t length) {
  int d;
  if (check_tensor_any("narrow", t)) return NULL;
  if (t->ndim == 0)
    return dl_errp(EM_BADVALUE, "narrow", "cannot narrow a 0-dim tensor");
  if (norm_dim("narrow", dim, t->ndim, &d)) return NULL;
  int64_t size = t->shape[d];
  if (start < 0 && start >= -size) start += size;
  if (start < 0 || length < 0 || start > size || length > size - start)
    return dl_errp(EM_NARROW, "narrow", (long long)start, (long long)length, d,
                   (long long)size);
  int64_t s[DL_MAX_DIMS];
  memcpy(s, t->shape, sizeof s);
  s[d] = length;
  return tensor_alias(t, s, t->stride, t->ndim, t->offset + start * t->stride[d]);
}

DL_HIDDEN dl_tensor *fw_select(const dl_tensor *t, int dim, int64_t index) {
  int d;
  if (check_tensor_any("select", t)) return NULL;
  if (t->ndim == 0)
    return dl_errp(EM_BADVALUE, "select", "cannot index a 0-dim tensor");
  if (norm_dim("select", dim, t->ndim, &d)) return NULL;
  int64_t size = t->shape[d];
  if (index < -size || index >= size)
    return dl_errp(EM_INDEX_RANGE, "select", (long long)index, d, (long long)size);
  if (index < 0) index += size;
  int64_t s[DL_MAX_DIMS], st[DL_MAX_DIMS];
  int n = 0;
  for (int i = 0; i < t->ndim; i++)
    if (i != d) s[n] = t->shape[i], st[n++] = t->stride[i];
  return tensor_alias(t, s, st, n, t->offset + index * t->stride[d]);
}

static dl_tensor *drop_dims(const dl_tensor *t, const int *drop) {
  int64_t s[DL_MAX_DIMS], st[DL_MAX_DIMS];
  int n = 0;
  for (int i = 0; i < t->ndim; i++)
    if (!drop[i]) s[n] = t->shape[i], st[n++] = t->stride[i];
  return tensor_alias(t, s, st, n, t->offset);
}

/* As PyTorch: squeezing a dim whose size is not 1 leaves the tensor as is. */
DL_HIDDEN dl_tensor *fw_squeeze(const dl_tensor *t, int dim) {
  int d, drop[DL_MAX_DIMS] = {0};
  if (check_tensor_any("squeeze", t) || norm_dim("squeeze", dim, t->ndim, &d))
    return NULL;
  if (t->ndim) drop[d] = t->shape[d] == 1;
  return drop_dims(t, drop);
}

DL_HIDDEN dl_tensor *fw_squeeze_all(const dl_tensor *t) {
  int drop[DL_MAX_DIMS] = {0};
  if (check_tensor_any("squeeze", t)) return NULL;
  for (int i = 0; i < t->ndim; i++) drop[i] = t->shape[i] == 1;
  return drop_dims(t, drop);
}

DL_HIDDEN dl_tensor *fw_unsqueeze(const dl_tensor *t, int dim) {
  int d;
  if (check_tensor_any("unsqueeze", t) || norm_dim_incl("unsqueeze", dim, t->ndim, &d))
    return NULL;
  if (t->ndim >= DL_MAX_DIMS)
    return dl_errp(EM_NDIM_MAX, "unsqueeze", t->ndim + 1);
  int64_t s[DL_MAX_DIMS], st[DL_MAX_DIMS];
  for (int i = 0, j = 0; i <= t->ndim; i++) {
    if (i == d) {
      s[i] = 1;
      st[i] = d < t->ndim ? t->shape[d] * t->stride[d] : 1;
    } else {
      s[i] = t->shape[j], st[i] = t->stride[j++];
    }
  }
  return tensor_alias(t, s, st, t->ndim + 1, t->offset);
}

DL_HIDDEN dl_tensor *fw_expand(const dl_tensor *t, const int64_t *shape,
                            int ndim) {
  if (check_tensor_any("expand", t)) return NULL;
  if (ndim < t->ndim || ndim > DL_MAX_DIMS || (ndim && !shape))
    return dl_errp(EM_BCAST_TO, "expand", fmt_tshape(t),
                   shape ? fmt_shape(shape, ndim < 0 ? 0 : ndim > 8 ? 8 : ndim) : "nil");
  int64_t s[DL_MAX_DIMS], st[DL_MAX_DIMS];
  int lead = ndim - t->ndim;
  for (int i = 0; i < ndim; i++) {
    int j = i - lead;
    int64_t want = shape[i];
    if (j < 0) {
      if (want < 0)
        return dl_errp(EM_NEG_SIZE, "expand", (long long)want, fmt_shape(shape, ndim));
      s[i] = want, st[i] = 0;
      continue;
    }
    int64_t have = t->shape[j];
    if (want == -1) want = have;
    if (want == have) {
      s[i] = have, st[i] = t->stride[j];
    } else if (have == 1 && want >= 0) {
      s[i] = want, st[i] = 0;
    } else {
      return dl_errp(EM_EXPAND, "expand", fmt_tshape(t), fmt_shape(shape, ndim),
                     i, (long long)have, (long long)want);
    }
  }
  if (check_shape("expand", s, ndim)) return NULL;
  return tensor_alias(t, s, st, ndim, t->offset);
}

DL_HIDDEN dl_tensor *fw_flatten(const dl_tensor *t, int start_dim, int end_dim) {
  int a, b;
  if (check_tensor_any("flatten", t)) return NULL;
  if (t->ndim == 0) {
    int64_t one = 1;
    return fw_reshape(t, &one, 1);
  }
  if (norm_dim("flatten", start_dim, t->ndim, &a) ||
      norm_dim("flatten", end_dim, t->ndim, &b))
    return NULL;
  if (a > b)
    return dl_errp(EM_FLATTEN_ORDER, "flatten", start_dim, end_dim, t->ndim);
  int64_t s[DL_MAX_DIMS];
  int n = 0;
  for (int i = 0; i < t->ndim; i++) {
    if (i <= a || i > b)
      s[n++] = t->shape[i];
    else
      s[n - 1] *= t->shape[i];
  }
  return fw_reshape(t, s, n);
}

DL_HIDDEN dl_tensor *fw_as_strided(const dl_tensor *t, const int64_t *shape,
                                const int64_t *strides, int ndim,
                                int64_t offset) {
  if (check_tensor_any("as_strided", t) || check_shape("as_strided", shape, ndim))
    return NULL;
  if (ndim > 0 && !strides) return dl_errp(EM_NULLARG, "as_strided", "strides");
  /* lowest and highest element reached; a product or sum that overflows
  ** int64 is out of range too (wrapping would let it pass the check) */
  int64_t hi = offset, lo = offset;
  int wrap = 0;
  for (int i = 0; i < ndim; i++) {
    if (!shape[i]) { hi = lo = offset; wrap = 0; break; }
    int64_t span;
    wrap |= __builtin_mul_overflow(shape[i] - 1, strides[i], &span);
    wrap |= span > 0 ? __builtin_add_overflow(hi, span, &hi)
                     : __builtin_add_overflow(lo, span, &lo);
  }
  int64_t cap = (int64_t)(t->storage->nbytes / (size_t)dl_dtype_sizes[t->dtype]);
  if (wrap || lo < 0 || (shape_numel(shape, ndim) && hi >= cap))
    return dl_errp(EM_STRIDED, "as_strided", fmt_shape(shape, ndim),
                   fmt_shape(strides, ndim), (long long)offset, (long long)cap);
  return tensor_alias(t, shape, strides, ndim, offset);
}
