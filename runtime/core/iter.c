/*
** iter.c -- walking several broadcast operands at once: the shape and
** byte strides of each operand are put in one frame, dims reordered so the
** fastest runs innermost, coalesced, then split across threads.
*/
#include <string.h>

#include "core/internal.h"

DL_HIDDEN int broadcast_shape(const char *op, const int64_t *sa, int na,
                              const int64_t *sb, int nb, int64_t *out,
                              int *nout) {
  int n = na > nb ? na : nb;
  for (int i = 0; i < n; i++) {
    int ia = i - (n - na), ib = i - (n - nb);
    int64_t a = ia >= 0 ? sa[ia] : 1, b = ib >= 0 ? sb[ib] : 1;
    if (a != b && a != 1 && b != 1)
      return dl_err(EM_BCAST, op, fmt_shape(sa, na), fmt_shape(sb, nb), i,
                    (long long)a, (long long)b);
    out[i] = a == 1 ? b : a;
  }
  *nout = n;
  return 0;
}

DL_HIDDEN int iter_init(iter_t *it, const char *op, dl_tensor *const *ops,
                        int nops) {
  const dl_tensor *o = ops[0];
  int nd = o->ndim;
  memset(it, 0, sizeof *it);
  it->nops = nops;
  it->numel = dl_tensor_numel(o);
  /* per operand, strides over the output's dims (slowest first) */
  int64_t st[ITER_MAX_OPS][DL_MAX_DIMS];
  for (int k = 0; k < nops; k++) {
    const dl_tensor *t = ops[k];
    int lead = nd - t->ndim;
    if (lead < 0) goto bad;
    for (int i = 0; i < nd; i++) {
      int j = i - lead;
      if (j < 0) {
        st[k][i] = 0;
      } else if (t->shape[j] == o->shape[i]) {
        st[k][i] = t->stride[j] * dl_dtype_sizes[t->dtype];
      } else if (t->shape[j] == 1) {
        st[k][i] = 0;
      } else {
        goto bad;
      }
    }
    it->data[k] = tensor_first(t);
    continue;
  bad:
    return dl_err(EM_BCAST_TO, op, fmt_tshape(t), fmt_tshape(o));
  }
  /* order dims fastest first by the output's strides (stable) */
  int perm[DL_MAX_DIMS], np = 0;
  for (int i = nd - 1; i >= 0; i--) {
    if (o->shape[i] == 1) continue;
    int p = np++;
    while (p > 0) {
      int64_t a = st[0][perm[p - 1]], b = st[0][i];
      if (a < 0) a = -a;
      if (b < 0) b = -b;
      if (a <= b) break;
      perm[p] = perm[p - 1];
      p--;
    }
    perm[p] = i;
  }
  /* coalesce neighbours that are contiguous for every operand */
  int n = 0;
  for (int q = 0; q < np; q++) {
    int d = perm[q];
    int merge = n > 0;
    for (int k = 0; merge && k < nops; k++)
      merge = st[k][d] == it->strides[k][n - 1] * it->shape[n - 1];
    if (merge) {
      it->shape[n - 1] *= o->shape[d];
    } else {
      it->shape[n] = o->shape[d];
      for (int k = 0; k < nops; k++) it->strides[k][n] = st[k][d];
      n++;
    }
  }
  if (n == 0) {  /* a single element (or the 0-dim case) */
    it->shape[0] = it->numel ? 1 : 0;
    n = 1;
  }
  it->ndim = n;
  return 0;
}

/* Runs elements [begin, end) of the iteration space in row order of the
** coalesced frame. */
static void run_range(const iter_t *it, loop_fn fn, void *ctx, int64_t begin,
                      int64_t end) {
  int64_t idx[DL_MAX_DIMS] = {0}, rem = begin;
  char *ptr[ITER_MAX_OPS];
  int64_t inner[ITER_MAX_OPS];
  for (int k = 0; k < it->nops; k++) {
    ptr[k] = it->data[k];
    inner[k] = it->strides[k][0];
  }
  for (int d = 0; d < it->ndim; d++) {
    idx[d] = rem % it->shape[d];
    rem /= it->shape[d];
    for (int k = 0; k < it->nops; k++) ptr[k] += idx[d] * it->strides[k][d];
  }
  int64_t pos = begin;
  while (pos < end) {
    int64_t n = it->shape[0] - idx[0];
    if (n > end - pos) n = end - pos;
    fn(ptr, inner, n, ctx);
    pos += n;
    if (pos >= end) break;
    /* the inner dim is done: back to its start, carry into the outer dims */
    for (int k = 0; k < it->nops; k++) ptr[k] -= idx[0] * inner[k];
    idx[0] = 0;
    for (int d = 1; d < it->ndim; d++) {
      for (int k = 0; k < it->nops; k++) ptr[k] += it->strides[k][d];
      if (++idx[d] < it->shape[d]) break;
      for (int k = 0; k < it->nops; k++) ptr[k] -= it->shape[d] * it->strides[k][d];
      idx[d] = 0;
    }
  }
}

DL_HIDDEN void iter_run_serial(const iter_t *it, loop_fn fn, void *ctx) {
  if (it->numel > 0) run_range(it, fn, ctx, 0, it->numel);
}

typedef struct { const iter_t *it; loop_fn fn; void *ctx; } par_ctx;

static void par_body(void *p, int64_t begin, int64_t end) {
  par_ctx *c = p;
  run_range(c->it, c->fn, c->ctx, begin, end);
}

DL_HIDDEN void iter_run(const iter_t *it, loop_fn fn, void *ctx) {
  if (it->numel <= 0) return;
  if (it->numel < PAR_GRAIN * 2 || parallel_threads() == 1) {
    run_range(it, fn, ctx, 0, it->numel);
    return;
  }
  par_ctx c = {it, fn, ctx};
  parallel_for(it->numel, PAR_GRAIN, par_body, &c);
}
