/*
** autograd/optim_foreach.c -- the optimizers' step over a whole parameter
** group in one call (PyTorch's foreach, ddp.optim's default: lua/ddp/optim/
** foreach.lua): each parameter's gradient read here, where gradients live,
** those without one skipped, and the list stepped by nn/optim.c in one
** pass of the thread pool (one launch per 32 tensors on CUDA).  A call per
** parameter from Lua cost ~1 us a tensor in handles and checks; this one
** 0.18 us (bench/RESULTS.md, issue 25).
*/
#include <stdio.h>
#include <stdlib.h>

#include "autograd/autograd.h"
#include "nn/optim.h"

/* "adamw: parameter 3", for a group's errors */
static const char *item_op(char *buf, size_t cap, const char *op, int i) {
  snprintf(buf, cap, "%s: parameter %d", op, i);
  return buf;
}

/* The gradient of p as the kernels take it (contiguous), a new reference;
** *none = 1 and NULL when it has none, NULL with the error set on failure. */
static dl_tensor *grad_of(const dl_tensor *p, int *none) {
  dl_tensor *g = dl_grad(p);
  *none = g == NULL;
  if (!g || dl_tensor_is_contiguous(g)) return g;
  dl_tensor *c = fw_contiguous(g);
  dl_tensor_release(g);
  return c;
}

/* The parameters of a group that have a gradient: their places in the
** group's arrays, their gradients (new references, contiguous), and room
** for the items the step fills in for them (item_size each). */
typedef struct group_grads {
  int n;
  int *at;
  dl_tensor **g;
  void *items;
} group_grads;

static void grads_release(group_grads *gg) {
  for (int j = 0; j < gg->n; j++) dl_tensor_release(gg->g[j]);
  free(gg->at);
  free(gg->g);
  free(gg->items);
}

static int grads_collect(const char *op, dl_tensor *const *params, int n, size_t item_size,
                         group_grads *gg) {
  gg->n = 0;
  gg->at = malloc(sizeof *gg->at * (size_t)n);
  gg->g = malloc(sizeof *gg->g * (size_t)n);
  gg->items = calloc((size_t)n, item_size);
  if (!gg->at || !gg->g || !gg->items) {
    grads_release(gg);
    return dl_err(EM_NOMEM, op, (long long)(sizeof *gg->g * (size_t)n), (long long)dl_mem_allocated());
  }
  for (int i = 0; i < n; i++) {
    if (!params[i]) {
      grads_release(gg);
      return dl_err(EM_BADVALUE, op, "a parameter is NULL");
    }
    int none;
    dl_tensor *g = grad_of(params[i], &none);
    if (none) continue;
    if (!g) {
      grads_release(gg);
      return -1;
    }
    gg->at[gg->n] = i;
    gg->g[gg->n++] = g;
  }
  return 0;
}

DL_API int dl_grads_present(dl_tensor *const *params, int n, uint8_t *mask) {
  int count = 0;
  for (int i = 0; i < n; i++) {
    if (!params[i]) return dl_err(EM_BADVALUE, "optimizer step", "a parameter is NULL");
    dl_tensor *g = dl_grad(params[i]);
    mask[i] = g != NULL;
    count += g != NULL;
    if (g) dl_tensor_release(g);
  }
  return count;
}

DL_API int dl_sgd_step_foreach(dl_tensor *const *params, dl_tensor *const *bufs,
                               const uint8_t *first, int n, double lr, double momentum,
                               double dampening, double weight_decay, int nesterov,
                               int maximize) {
  const char *op = "sgd";
  group_grads gg;
  if (n <= 0) return 0;
  if (grads_collect(op, params, n, sizeof(sgd_item), &gg)) return -1;
  sgd_item *items = gg.items;
  int rc = -1;
  char ob[96];
  for (int j = 0; j < gg.n; j++) {
    int i = gg.at[j];
    items[j] = (sgd_item){params[i], bufs ? bufs[i] : NULL, gg.g[j], first ? first[i] : 0};
    if (optim_sgd_check(op, &items[j], bufs != NULL)) {
      optim_sgd_check(item_op(ob, sizeof ob, op, i), &items[j], bufs != NULL);  /* the message, naming it */
      goto out;
    }
  }
  rc = optim_sgd_items(op, items, gg.n, lr, momentum, dampening, weight_decay, nesterov, maximize);
out:
  grads_release(&gg);
  return rc;
}

DL_API int dl_adam_step_foreach(dl_tensor *const *params, dl_tensor *const *exp_avg,
                                dl_tensor *const *exp_avg_sq, dl_tensor *const *max_exp_avg_sq,
                                const int64_t *steps, int n, double lr, double beta1,
                                double beta2, double eps, double weight_decay, int decoupled,
                                int maximize) {
  const char *op = decoupled ? "adamw" : "adam";
  group_grads gg;
  if (n <= 0) return 0;
  if (grads_collect(op, params, n, sizeof(adam_item), &gg)) return -1;
  adam_item *items = gg.items;
  int rc = -1;
  char ob[96];
  for (int j = 0; j < gg.n; j++) {
    int i = gg.at[j];
    adam_item *it = &items[j];
    *it = (adam_item){params[i], exp_avg[i], exp_avg_sq[i], max_exp_avg_sq ? max_exp_avg_sq[i] : NULL, gg.g[j], 0, 0};
    if (optim_adam_check(op, it, max_exp_avg_sq != NULL, steps[i])) {
      optim_adam_check(item_op(ob, sizeof ob, op, i), it, max_exp_avg_sq != NULL, steps[i]);  /* naming it */
      goto out;
    }
    /* the parameters of a group mostly share their step count */
    if (j > 0 && steps[i] == steps[gg.at[j - 1]]) it->bc1 = items[j - 1].bc1, it->bc2_sqrt = items[j - 1].bc2_sqrt;
    else optim_bias_corrections(it, steps[i], beta1, beta2);
  }
  rc = optim_adam_items(op, items, gg.n, lr, beta1, beta2, eps, weight_decay, decoupled, maximize);
out:
  grads_release(&gg);
  return rc;
}

/* -- Gradient scaling (GradScaler's unscale_) ---------------------------------- */

/* Whether every element of g is finite, as a 0-dim bool on g's device. */
static dl_tensor *all_finite(const dl_tensor *g) {
  dl_tensor *f = dl_unary(DL_ISFINITE, g);
  dl_tensor *a = f ? dl_reduce(DL_ALL, f, NULL, 0, 0, 0) : NULL;
  dl_tensor_release(f);
  return a;
}

enum { AMP_DEVICES = 65 };  /* the CPU and cuda:0..63 */

DL_API int dl_amp_unscale_grads(dl_tensor *const *params, int n, double inv_scale, int allow_fp16,
                                int *found_inf) {
  const char *op = "GradScaler.unscale_";
  dl_tensor *ok[AMP_DEVICES] = {0}, *s = dl_scalar((double)(float)inv_scale, 1);
  int rc = s ? 0 : -1;
  *found_inf = 0;
  for (int i = 0; i < n && !rc; i++) {
    if (!params[i]) {
      rc = dl_err(EM_BADVALUE, op, "a parameter is NULL");
      break;
    }
    dl_tensor *g = dl_grad(params[i]);
    if (!g) continue;
    int slot = g->storage->device + 1;
    if (!dl_dtype_is_float(g->dtype))
      rc = dl_err(EM_BADVALUE, op, "a gradient is not floating point");
    else if (g->dtype == DL_FLOAT16 && !allow_fp16)
      rc = dl_err(EM_AMP_FP16, op, i);
    else if (slot < 0 || slot >= AMP_DEVICES)
      rc = dl_err(EM_BADVALUE, op, "a gradient lies on a device past cuda:63");
    dl_tensor *a = rc ? NULL : all_finite(g);
    if (!rc && !a) rc = -1;
    if (!rc && ok[slot]) {  /* one flag a device, read once at the end */
      dl_tensor *both = dl_binary(DL_LOGICAL_AND, ok[slot], a);
      dl_tensor_release(a);
      a = both;
      if (!a) rc = -1;
    }
    if (!rc) {
      dl_tensor_release(ok[slot]);
      ok[slot] = a;
      rc = dl_binary_(DL_MUL, g, s);  /* in place: the gradient the optimizer steps with */
    }
    dl_tensor_release(g);
  }
  for (int d = 0; d < AMP_DEVICES; d++) {
    if (!ok[d]) continue;
    double v = 1;
    if (!rc && dl_get_double(ok[d], 0, &v)) rc = -1;
    else if (!rc && v == 0) *found_inf = 1;
    dl_tensor_release(ok[d]);
  }
  dl_tensor_release(s);
  return rc;
}
