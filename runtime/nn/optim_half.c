/*
** nn/optim_half.c -- the optimizers' steps for bfloat16 and float16
** parameters, as PyTorch steps them: state in the parameter's dtype, the
** arithmetic in float32.
**
** On the CPU each element follows PyTorch's single-tensor update op by op
** (its CPU default, foreach=False), rounding to the half type wherever
** PyTorch stores a half tensor (the decayed gradient, each in-place op on
** the state, the denominator's sqrt, division and eps): a rounding of the
** half type from PyTorch's at most, mostly its very bits.  Its scalars
** as PyTorch takes them: an add's alpha rounded to the half type, every
** other scalar float32.  Contraction into FMA is off here (PyTorch's
** kernels multiply and add apart) but for lerp, which fuses.
**
** A device without such kernels (dl_device.optim_half 0: CUDA) steps each
** chunk of a parameter, its gradient and its state in float32 through its
** own float32 kernel and rounds back once, as PyTorch's fused CUDA steps
** do.  Chunks bound the float32 copies (five of CHUNK elements), so a
** large parameter needs no float32 twin.
*/
#pragma GCC optimize("fp-contract=off")

#include <math.h>
#include <string.h>

#include "nn/nn.h"
#include "nn/optim.h"

enum { CHUNK = 1 << 20 };

/* -- The CPU's element loops ------------------------------------------------------ */

typedef struct {
  float (*ld)(uint16_t);
  uint16_t (*st)(float);
} half_io;

static uint16_t st_f16(float x) { return float_to_half(x); }
static float ld_f16(uint16_t h) { return half_to_float(h); }
static uint16_t st_bf16(float x) { return float_to_bf16(x); }
static float ld_bf16(uint16_t h) { return bf16_to_float(h); }

static half_io io_of(int bf16) {
  return bf16 ? (half_io){ld_bf16, st_bf16} : (half_io){ld_f16, st_f16};
}

/* a value as PyTorch stores it in a half tensor, read back */
#define RD(x) io.ld(io.st(x))

/* SGD: torch.optim.SGD's _single_tensor_sgd. */
static void sgd_loop(const sgd_ctx *c, half_io io, int64_t b, int64_t e) {
  uint16_t *P = (uint16_t *)c->p, *B = (uint16_t *)c->buf;
  const uint16_t *G = (const uint16_t *)c->g;
  /* PyTorch rounds an add's alpha to the tensors' dtype (-lr too), while
  ** mul_'s scalar stays float32 */
  const float wd = RD((float)c->wd), mom = (float)c->momentum, mom_a = RD(mom);
  const float damp1 = RD((float)(1 - c->dampening)), nlr = RD((float)-c->lr);
  for (int64_t i = b; i < e; i++) {
    float g = io.ld(G[i]), p = io.ld(P[i]);
    if (c->maximize) g = -g;
    if (c->wd != 0) g = RD(g + wd * p);                   /* grad.add(param, alpha=wd) */
    if (B) {
      float m = c->first ? g : RD(RD(io.ld(B[i]) * mom) + damp1 * g);  /* buf.mul_().add_() */
      B[i] = io.st(m);
      g = c->nesterov ? RD(g + mom_a * m) : m;            /* grad.add(buf, alpha=momentum) */
    }
    P[i] = io.st(p + nlr * g);                            /* param.add_(grad, alpha=-lr) */
  }
}

/* Adam and AdamW: torch.optim.Adam's _single_tensor_adam (AdamW is it with
** decoupled weight decay). */
static void adam_loop(const adam_ctx *c, half_io io, int64_t b, int64_t e) {
  uint16_t *P = (uint16_t *)c->p, *M = (uint16_t *)c->m, *V = (uint16_t *)c->v;
  uint16_t *VM = (uint16_t *)c->vmax;
  const uint16_t *G = (const uint16_t *)c->g;
  const float wd = RD((float)c->wd), decay = (float)(1 - c->lr * c->wd);  /* as SGD's */
  const float w1 = (float)(1 - c->b1), b2 = (float)c->b2, a2 = (float)(1 - c->b2);
  const float bc2s = (float)c->bc2_sqrt, eps = (float)c->eps, nstep = (float)-(c->lr / c->bc1);
  for (int64_t i = b; i < e; i++) {
    float g = io.ld(G[i]), p = io.ld(P[i]);
    if (c->maximize) g = -g;
    if (c->wd != 0) {
      if (c->decoupled) p = RD(p * decay);               /* param.mul_(1 - lr * wd) */
      else g = RD(g + wd * p);                           /* grad.add(param, alpha=wd) */
    }
    float m = io.ld(M[i]), d = g - m;                    /* exp_avg.lerp_(grad, 1 - beta1) */
    m = RD(fabsf(w1) < 0.5f ? fmaf(w1, d, m) : fmaf(w1 - 1.0f, d, g));  /* lerp_vec's fmadd */
    float v = RD(RD(io.ld(V[i]) * b2) + a2 * g * g);     /* exp_avg_sq.mul_(b2).addcmul_(g, g, 1 - b2) */
    M[i] = io.st(m);
    V[i] = io.st(v);
    if (VM) {                                            /* torch.maximum: NaN wins */
      float a = io.ld(VM[i]);
      v = (a > v || a != a) ? a : v;
      VM[i] = io.st(v);
    }
    float den = RD(RD(RD(sqrtf(v)) / bc2s) + eps);       /* (v.sqrt() / bc2_sqrt).add_(eps) */
    P[i] = io.st(p + nstep * (m / den));                 /* param.addcdiv_(m, den, -step_size) */
  }
}

DL_HIDDEN void optim_sgd_half(void *ctx, int64_t b, int64_t e) {
  const sgd_ctx *c = ctx;
  sgd_loop(c, io_of(c->bf16), b, e);
}

DL_HIDDEN void optim_adam_half(void *ctx, int64_t b, int64_t e) {
  const adam_ctx *c = ctx;
  adam_loop(c, io_of(c->bf16), b, e);
}

/* -- Elsewhere: float32 chunks ---------------------------------------------------- */

/* Elements [start, start + len) of contiguous t, as a flat view. */
static dl_tensor *flat_part(const dl_tensor *t, int64_t start, int64_t len) {
  int64_t one = 1;
  return tensor_alias(t, &len, &one, 1, t->offset + start);
}

/* The float32 working copies of a chunk: part[i] views its own tensor
** src[i] (NULL: none), work[i] is the part in float32. */
typedef struct {
  dl_tensor *part[5], *work[5];
} chunk;

static void chunk_free(chunk *c) {
  for (int i = 0; i < 5; i++) {
    dl_tensor_release(c->part[i]);
    dl_tensor_release(c->work[i]);
  }
}

static int chunk_load(chunk *c, const dl_tensor *const *src, int64_t start, int64_t len) {
  memset(c, 0, sizeof *c);
  for (int i = 0; i < 5; i++) {
    if (!src[i]) continue;
    if (!(c->part[i] = flat_part(src[i], start, len)) ||
        !(c->work[i] = nn_copy(c->part[i], DL_FLOAT32)))
      return -1;
  }
  return 0;
}

/* The stepped values back into the tensors the step writes (not the
** gradient, src[grad]), each rounded once to their own dtype. */
static int chunk_store(chunk *c, int grad) {
  for (int i = 0; i < 5; i++)
    if (i != grad && c->part[i] && fw_copy_(c->part[i], c->work[i])) return -1;
  return 0;
}

/* Runs step on each chunk of n elements of the tensors src (p, g and the
** state; NULL: none), loaded in float32 and stored back rounded. */
static int in_chunks(const dl_tensor *const *src, int64_t n, int (*step)(chunk *, const void *),
                     const void *ctx) {
  for (int64_t s = 0; s < n; s += CHUNK) {
    chunk c;
    int64_t len = n - s < CHUNK ? n - s : CHUNK;
    int rc = chunk_load(&c, src, s, len) || step(&c, ctx) || chunk_store(&c, 1);
    chunk_free(&c);
    if (rc) return -1;
  }
  return 0;
}

typedef struct {
  const char *op;
  const dl_device *d;
  const void *it;
  double lr, a, b, c, wd;  /* SGD: momentum, dampening; Adam: beta1, beta2, eps */
  int f1, f2;              /* SGD: nesterov, maximize; Adam: decoupled, maximize */
} chunk_step;

static int sgd_chunk(chunk *c, const void *ctx) {
  const chunk_step *k = ctx;
  sgd_item w = {c->work[0], c->work[2], c->work[1], ((const sgd_item *)k->it)->first};
  return k->d->sgd(k->op, &w, 1, k->lr, k->a, k->b, k->wd, k->f1, k->f2);
}

static int adam_chunk(chunk *c, const void *ctx) {
  const chunk_step *k = ctx;
  const adam_item *it = k->it;
  adam_item w = {c->work[0], c->work[2], c->work[3], c->work[4], c->work[1], it->bc1, it->bc2_sqrt};
  return k->d->adam(k->op, &w, 1, k->lr, k->a, k->b, k->c, k->wd, k->f1, k->f2);
}

DL_HIDDEN int optim_chunks_sgd(const char *op, const dl_device *d, const sgd_item *it, double lr,
                               double momentum, double dampening, double wd, int nesterov,
                               int maximize) {
  const dl_tensor *src[5] = {it->p, it->g, it->buf, NULL, NULL};
  chunk_step k = {op, d, it, lr, momentum, dampening, 0, wd, nesterov, maximize};
  return in_chunks(src, dl_tensor_numel(it->p), sgd_chunk, &k);
}

DL_HIDDEN int optim_chunks_adam(const char *op, const dl_device *d, const adam_item *it, double lr,
                                double beta1, double beta2, double eps, double wd, int decoupled,
                                int maximize) {
  const dl_tensor *src[5] = {it->p, it->g, it->m, it->v, it->vmax};
  chunk_step k = {op, d, it, lr, beta1, beta2, eps, wd, decoupled, maximize};
  return in_chunks(src, dl_tensor_numel(it->p), adam_chunk, &k);
}
