/*
** overlap.c -- whether two elements of a tensor share one memory location
** (an expanded view, or strides that collide), which every in-place write
** refuses as PyTorch does: the threads or GPU blocks writing those elements
** would race, and even one thread's result would depend on the order.
*/
#include "core/internal.h"

/* Nodes the exact search may visit before it gives up (and the write is
** let through, as PyTorch lets through what it cannot decide). */
enum { SEARCH_BUDGET = 1 << 14 };

typedef struct {
  int n;
  int64_t s[DL_MAX_DIMS];          /* |stride| > 0, largest first */
  int64_t u[DL_MAX_DIMS];          /* size - 1 */
  int64_t reach[DL_MAX_DIMS + 1];  /* reach[i] = sum over j >= i of s[j] * u[j] */
  int64_t g[DL_MAX_DIMS];          /* gcd of s[i..n-1] */
  int64_t budget;
} search_t;

static int64_t gcd64(int64_t a, int64_t b) {
  while (b) {
    int64_t r = a % b;
    a = b;
    b = r;
  }
  return a;
}

/* floor(a / b) and ceil(a / b) for b > 0 */
static int64_t floor_div(int64_t a, int64_t b) { return a / b - (a % b != 0 && a < 0); }
static int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0 && a > 0); }

/* Two elements at the same place are two index vectors whose difference x
** (|x[j]| <= u[j], not all 0) has sum x[j] * s[j] == 0.  Finds one: the
** x[j] for j >= i summing to r, the first nonzero one positive (x and -x
** are both solutions).  1 found, 0 none, -1 out of budget. */
static int search(search_t *p, int i, int64_t r, int any) {
  if (--p->budget < 0) return -1;
  if (i == p->n) return r == 0 && any;
  /* what dims i.. can still add up to: within reach, a multiple of their gcd */
  if (r > p->reach[i] || r < -p->reach[i] || r % p->g[i]) return 0;
  int64_t s = p->s[i], rest = p->reach[i + 1];
  int64_t lo = ceil_div(r - rest, s), hi = floor_div(r + rest, s);
  if (lo < -p->u[i]) lo = -p->u[i];
  if (hi > p->u[i]) hi = p->u[i];
  if (!any && lo < 0) lo = 0;
  for (int64_t x = lo; x <= hi; x++) {
    int rc = search(p, i + 1, r - x * s, any || x != 0);
    if (rc) return rc;
  }
  return 0;
}

DL_HIDDEN int tensor_internal_overlap(const dl_tensor *t, int *zero_dim) {
  if (zero_dim) *zero_dim = -1;
  /* the usual case first, as every in-place op asks: row-major contiguous
  ** (a size-1 dim may have any stride) */
  int64_t expect = 1;
  int c = t->ndim - 1;
  for (; c >= 0; c--) {
    if (t->shape[c] == 1) continue;
    if (t->stride[c] != expect) break;
    expect *= t->shape[c];
  }
  if (c < 0) return 0;
  for (int i = 0; i < t->ndim; i++)
    if (t->shape[i] == 0) return 0;  /* no elements, nothing shared */
  search_t p;
  p.n = 0;
  for (int i = 0; i < t->ndim; i++) {
    if (t->shape[i] == 1) continue;  /* any stride: one index only */
    if (t->stride[i] == 0) {         /* expanded: the usual case */
      if (zero_dim) *zero_dim = i;
      return 1;
    }
    /* insertion sort, largest stride first (at most 8 dims) */
    int64_t s = t->stride[i] < 0 ? -t->stride[i] : t->stride[i], u = t->shape[i] - 1;
    int j = p.n++;
    for (; j > 0 && p.s[j - 1] < s; j--) {
      p.s[j] = p.s[j - 1];
      p.u[j] = p.u[j - 1];
    }
    p.s[j] = s;
    p.u[j] = u;
  }
  /* Each stride beyond the reach of all the smaller ones (a contiguous
  ** tensor, a transpose, a narrow, a step) gives every element its own
  ** place, as the digits of a number in a mixed radix. */
  int apart = 1;
  p.reach[p.n] = 0;
  for (int i = p.n - 1; i >= 0; i--) {
    int64_t span;
    if (__builtin_mul_overflow(p.s[i], p.u[i], &span) ||
        __builtin_add_overflow(p.reach[i + 1], span, &p.reach[i]))
      return -1;  /* cannot happen within a storage; undecided */
    if (p.s[i] <= p.reach[i + 1]) apart = 0;
    p.g[i] = i + 1 < p.n ? gcd64(p.s[i], p.g[i + 1]) : p.s[i];
  }
  if (apart) return 0;
  /* Strides that interleave (as_strided, unfold) may or may not collide:
  ** (3, 2) with strides (2, 3) reach 0 2 4 3 5 7, (3, 3) with (2, 1)
  ** reach 2 twice.  The search decides it exactly, or gives up. */
  p.budget = SEARCH_BUDGET;
  return search(&p, 0, 0, 0);
}

DL_HIDDEN int tensor_check_overlap(const char *op, const dl_tensor *t) {
  int zd, rc = tensor_internal_overlap(t, &zd);
  if (rc <= 0) return 0;
  if (zd >= 0) return dl_err(EM_OVERLAP_EXPANDED, op, zd, (long long)t->shape[zd]);
  return dl_err(EM_OVERLAP_STRIDES, op, fmt_tshape(t), fmt_shape(t->stride, t->ndim));
}
