/*
** nn/embedding_dropout.c -- embedding lookups and dropout masks, forward and backward.
** The embedding gradient adds each row's contributions in index order (no
** atomics), and dropout draws its mask from the Philox stream, so both give
** the same bits for the same inputs and seed, whatever the thread count.
*/
#include <string.h>

#include "nn/nn.h"
#include "core/philox.h"

/* -- Embedding --------------------------------------------------------------- */

DL_HIDDEN int nn_check_rows(const char *op, const int64_t *idx, int64_t n, int64_t rows) {
  for (int64_t i = 0; i < n; i++)
    if (idx[i] < 0 || idx[i] >= rows)
      return dl_err(EM_NN_INDEX_RANGE, op, (long long)idx[i], (long long)rows, (long long)i);
  return 0;
}

DL_HIDDEN void nn_sort_by_index(const int64_t *idx, int64_t n, int64_t rows, int64_t *start) {
  int64_t *order = start + rows + 1;
  memset(start, 0, sizeof(int64_t) * (size_t)(rows + 1));
  for (int64_t i = 0; i < n; i++) start[idx[i] + 1]++;
  for (int64_t v = 0; v < rows; v++) start[v + 1] += start[v];
  for (int64_t i = 0; i < n; i++) order[start[idx[i]]++] = i;
  for (int64_t v = rows; v > 0; v--) start[v] = start[v - 1];
  start[0] = 0;
}

typedef struct {
  const char *w;
  const int64_t *idx;
  char *out;
  size_t row;  /* bytes */
} gather_ctx;

static void gather_rows(void *p, int64_t i0, int64_t i1) {
  const gather_ctx *c = p;
  for (int64_t i = i0; i < i1; i++)
    memcpy(c->out + (size_t)i * c->row, c->w + (size_t)c->idx[i] * c->row, c->row);
}

DL_API dl_tensor *dl_embedding(const dl_tensor *weight,
                               const dl_tensor *indices) {
  const char *op = "embedding";
  if (!weight) return dl_errp(EM_NULLARG, op, "weight");
  if (check_tensor_any(op, weight) || nn_check_index(op, "indices", indices)) return NULL;
  if (weight->ndim != 2)
    return dl_errp(EM_NN_NDIM, op, "a 2-D weight [num_embeddings, dim]",
                   "a weight", fmt_tshape(weight));
  if (indices->ndim + 1 > DL_MAX_DIMS)
    return dl_errp(EM_NDIM_MAX, op, indices->ndim + 1);
  int64_t D = weight->shape[1], s[DL_MAX_DIMS];
  for (int i = 0; i < indices->ndim; i++) s[i] = indices->shape[i];
  s[indices->ndim] = D;
  int dev = nn_device(op, weight, indices, NULL, NULL, NULL);
  if (dev < -1) return NULL;
  const dl_device *dv = device_get(op, dev);
  return dv ? dv->embedding(op, weight, indices, s, indices->ndim + 1) : NULL;
}

/* The CPU's kernel (core/device.h): rows of weight [V, D] at indices, into
** a new tensor of the given shape (the indices' shape, then D). */
DL_HIDDEN dl_tensor *cpu_embedding(const char *op, const dl_tensor *weight,
                                   const dl_tensor *indices, const int64_t *shape, int ndim) {
  int64_t V = weight->shape[0], D = weight->shape[1];
  dl_tensor *ci = nn_prep_index(indices), *cw = NULL, *out = NULL;
  if (!ci) return NULL;
  const int64_t *idx = (const int64_t *)tensor_first(ci);
  int64_t n = dl_tensor_numel(ci);
  if (nn_check_rows(op, idx, n, V) || !(cw = nn_prep(weight, weight->dtype)) ||
      !(out = tensor_new(weight->dtype, shape, ndim)))
    goto done;
  gather_ctx c = {tensor_first(cw), idx, tensor_first(out),
                  (size_t)D * (size_t)dl_dtype_sizes[weight->dtype]};
  if (c.row) parallel_for(n, nn_max64(1, PAR_GRAIN / nn_max64(1, D)), gather_rows, &c);
done:
  dl_tensor_release(ci);
  dl_tensor_release(cw);
  return out;
}

/* Rows [v0, v1) of grad_weight: row v is the sum of the gradient rows at
** the positions order[start[v] .. start[v + 1]), in position order. */
typedef struct {
  int64_t D, padding_idx;
  int scale;
  const int64_t *start, *order;
  const char *gout;
  char *gw;
} scatter_ctx;

#define DEF_SCATTER(T, SFX)                                                  \
  static void scatter_rows_##SFX(void *p, int64_t v0, int64_t v1) {         \
    const scatter_ctx *c = p;                                                \
    for (int64_t v = v0; v < v1; v++) {                                      \
      T *dst = (T *)c->gw + v * c->D;                                        \
      memset(dst, 0, (size_t)c->D * sizeof(T));                              \
      int64_t a = c->start[v], b = c->start[v + 1];                          \
      if (v == c->padding_idx || a == b) continue;                           \
      for (int64_t k = a; k < b; k++) {                                      \
        const T *src = (const T *)c->gout + c->order[k] * c->D;              \
        for (int64_t j = 0; j < c->D; j++) dst[j] += src[j];                 \
      }                                                                      \
      if (c->scale) {                                                        \
        T f = (T)(b - a);                                                    \
        for (int64_t j = 0; j < c->D; j++) dst[j] /= f;                      \
      }                                                                      \
    }                                                                        \
  }
DEF_SCATTER(float, f32)
DEF_SCATTER(double, f64)

DL_API dl_tensor *dl_embedding_backward(const dl_tensor *grad_out,
                                        const dl_tensor *indices,
                                        int64_t num_weights,
                                        int64_t padding_idx,
                                        int scale_grad_by_freq) {
  const char *op = "embedding_backward";
  if (nn_check_float(op, "grad_out", grad_out, -1) ||
      nn_check_index(op, "indices", indices))
    return NULL;
  if (num_weights < 0)
    return dl_errp(EM_NEG_COUNT, op, "num_weights", (long long)num_weights);
  if (padding_idx < -1 || padding_idx >= nn_max64(num_weights, 0)) {
    char v[32];
    snprintf(v, sizeof v, "%lld", (long long)padding_idx);
    return dl_errp(EM_NN_PARAM, op, "padding_idx", "a row of the weight or -1", v);
  }
  int nd = indices->ndim;
  if (grad_out->ndim != nd + 1 || !nn_same_shape(indices, grad_out->shape, nd)) {
    char want[240];
    snprintf(want, sizeof want, "the indices' shape %s followed by the embedding dim",
             fmt_tshape(indices));
    return dl_errp(EM_NN_SHAPE, op, "grad_out", fmt_tshape(grad_out), want);
  }
  int dev = nn_device(op, grad_out, indices, NULL, NULL, NULL);
  if (dev < -1) return NULL;
  const dl_device *dv = device_get(op, dev);
  return dv ? dv->embedding_backward(op, grad_out, indices, num_weights, padding_idx,
                                     scale_grad_by_freq)
            : NULL;
}

/* The CPU's kernel (core/device.h): grad_weight [num_weights, D], each row
** the sum of its gradient rows in position order. */
DL_HIDDEN dl_tensor *cpu_embedding_backward(const char *op, const dl_tensor *grad_out,
                                            const dl_tensor *indices, int64_t num_weights,
                                            int64_t padding_idx, int scale_grad_by_freq) {
  int kd = nn_kdtype(grad_out->dtype);
  int64_t D = grad_out->shape[indices->ndim], n = dl_tensor_numel(indices);
  int64_t gs[2] = {num_weights, D}, ns = num_weights + 1 + n;
  dl_tensor *ci = nn_prep_index(indices), *cg = NULL, *gw = NULL, *tab = NULL;
  if (!ci) return NULL;
  const int64_t *idx = (const int64_t *)tensor_first(ci);
  if (nn_check_rows(op, idx, n, num_weights) || !(cg = nn_prep(grad_out, kd)) ||
      !(gw = tensor_new(kd, gs, 2)) || !(tab = tensor_new(DL_INT64, &ns, 1)))
    goto fail;
  int64_t *start = (int64_t *)tensor_first(tab), *order = start + num_weights + 1;
  nn_sort_by_index(idx, n, num_weights, start);
  scatter_ctx c = {D, padding_idx, scale_grad_by_freq, start, order,
                   tensor_first(cg), tensor_first(gw)};
  int64_t per = nn_max64(1, D * nn_max64(1, n / nn_max64(1, num_weights)));
  parallel_for(num_weights, nn_max64(1, PAR_GRAIN / per),
               kd == DL_FLOAT64 ? scatter_rows_f64 : scatter_rows_f32, &c);
  dl_tensor_release(ci);
  dl_tensor_release(cg);
  dl_tensor_release(tab);
  return nn_finish(gw, grad_out->dtype);
fail:
  dl_tensor_release(ci);
  dl_tensor_release(cg);
  dl_tensor_release(gw);
  dl_tensor_release(tab);
  return NULL;
}

/* -- Dropout ------------------------------------------------------------- */

typedef struct {
  uint64_t seed, base;
  int64_t n;
  double keep;       /* 1 - p */
  double scale;      /* 1 / (1 - p), 0 when p = 1 */
  const char *x;
  char *out;
  uint8_t *mask;
} drop_ctx;

/* Blocks [b0, b1) of 4 values: value i keeps when the float32 uniform
** rand() would give at i is below 1 - p. */
#define DEF_DROP(T, SFX)                                                     \
  static void drop_blocks_##SFX(void *p, int64_t b0, int64_t b1) {          \
    const drop_ctx *c = p;                                                   \
    const T *x = (const T *)c->x;                                            \
    T *out = (T *)c->out, scale = (T)c->scale;                               \
    uint32_t w[4];                                                           \
    for (int64_t b = b0; b < b1; b++) {                                      \
      philox(c->seed, c->base + (uint64_t)b, w);                             \
      for (int j = 0; j < 4; j++) {                                          \
        int64_t i = b * 4 + j;                                               \
        if (i >= c->n) break;                                                \
        double u = philox_unit24(w[j]);                                      \
        uint8_t m = u < c->keep;                                             \
        c->mask[i] = m;                                                      \
        out[i] = (x[i] * (T)m) * scale;                                      \
      }                                                                      \
    }                                                                        \
  }
DEF_DROP(float, f32)
DEF_DROP(double, f64)

DL_API int dl_dropout(const dl_tensor *x, double p, int training,
                      dl_tensor **out, dl_tensor **mask) {
  const char *op = "dropout";
  if (!out || !mask) return dl_err(EM_NULLARG, op, "out");
  *out = *mask = NULL;
  if (nn_check_float(op, "input", x, -1)) return -1;
  if (!(p >= 0 && p <= 1)) return dl_err(EM_NN_PROB, op, "p", p);
  if (!training || p == 0) {
    /* nothing dropped: a new header over the same data */
    *out = tensor_alias(x, x->shape, x->stride, x->ndim, x->offset);
    return *out ? 0 : -1;
  }
  const dl_device *dv = device_of(op, x);
  return dv ? dv->dropout(op, x, p, out, mask) : -1;
}

/* The CPU's kernel (core/device.h): the mask drawn from the Philox stream
** by blocks of four, so the bits do not depend on the thread count. */
DL_HIDDEN int cpu_dropout(const char *op, const dl_tensor *x, double p, dl_tensor **out,
                          dl_tensor **mask) {
  (void)op;
  int kd = nn_kdtype(x->dtype);
  int64_t n = dl_tensor_numel(x), blocks = (n + 3) / 4;
  dl_tensor *cx = nn_prep(x, kd), *o = NULL, *m = NULL;
  if (!cx || !(o = tensor_new(kd, x->shape, x->ndim)) ||
      !(m = tensor_new(DL_UINT8, x->shape, x->ndim))) {
    dl_tensor_release(cx);
    dl_tensor_release(o);
    return -1;
  }
  drop_ctx c = {0, 0, n, 1 - p, p < 1 ? 1 / (1 - p) : 0, tensor_first(cx),
                tensor_first(o), (uint8_t *)tensor_first(m)};
  c.base = rng_reserve((uint64_t)blocks, &c.seed);
  parallel_for(blocks, PAR_GRAIN / 4, kd == DL_FLOAT64 ? drop_blocks_f64 : drop_blocks_f32, &c);
  dl_tensor_release(cx);
  if (!(*out = nn_finish(o, x->dtype))) {
    dl_tensor_release(m);
    return -1;
  }
  *mask = m;
  return 0;
}

typedef struct {
  const char *g;
  const uint8_t *mask;
  char *out;
  double scale;
} drop_bwd_ctx;

#define DEF_DROP_BWD(T, SFX)                                                 \
  static void drop_bwd_##SFX(void *p, int64_t i0, int64_t i1) {             \
    const drop_bwd_ctx *c = p;                                               \
    const T *g = (const T *)c->g;                                            \
    T *out = (T *)c->out, scale = (T)c->scale;                               \
    for (int64_t i = i0; i < i1; i++)                                        \
      out[i] = (g[i] * (T)(c->mask[i] != 0)) * scale;                        \
  }
DEF_DROP_BWD(float, f32)
DEF_DROP_BWD(double, f64)

DL_API dl_tensor *dl_dropout_backward(const dl_tensor *grad_out,
                                      const dl_tensor *mask, double p) {
  const char *op = "dropout_backward";
  if (nn_check_float(op, "grad_out", grad_out, -1)) return NULL;
  if (!(p >= 0 && p <= 1)) return dl_errp(EM_NN_PROB, op, "p", p);
  if (!mask)  /* forward dropped nothing */
    return tensor_alias(grad_out, grad_out->shape, grad_out->stride,
                        grad_out->ndim, grad_out->offset);
  if (check_tensor_any(op, mask)) return NULL;
  if (!nn_same_shape(mask, grad_out->shape, grad_out->ndim))
    return dl_errp(EM_NN_SHAPE, op, "mask", fmt_tshape(mask), fmt_tshape(grad_out));
  int dev = nn_device(op, grad_out, mask, NULL, NULL, NULL);
  if (dev < -1) return NULL;
  const dl_device *dv = device_get(op, dev);
  return dv ? dv->dropout_backward(op, grad_out, mask, p) : NULL;
}

/* The CPU's kernel (core/device.h). */
DL_HIDDEN dl_tensor *cpu_dropout_backward(const char *op, const dl_tensor *grad_out,
                                          const dl_tensor *mask, double p) {
  (void)op;
  int kd = nn_kdtype(grad_out->dtype);
  dl_tensor *cg = nn_prep(grad_out, kd), *cm = cg ? nn_prep(mask, DL_UINT8) : NULL;
  dl_tensor *o = cm ? tensor_new(kd, grad_out->shape, grad_out->ndim) : NULL;
  if (o) {
    drop_bwd_ctx c = {tensor_first(cg), (const uint8_t *)tensor_first(cm),
                      tensor_first(o), p < 1 ? 1 / (1 - p) : 0};
    parallel_for(dl_tensor_numel(o), PAR_GRAIN,
                 kd == DL_FLOAT64 ? drop_bwd_f64 : drop_bwd_f32, &c);
  }
  dl_tensor_release(cg);
  dl_tensor_release(cm);
  return nn_finish(o, grad_out->dtype);
}
