/*
** pg_autograd.c -- the differentiable all-reduce (dl_pg_all_reduce_grad):
** out-of-place, recorded by autograd, its backward the same all-reduce of
** the gradient, as torch.distributed.nn.functional.all_reduce.  What
** SyncBatchNorm's statistics go through (lua/ddp/nn/sync_bn.lua).
*/
#include <stdint.h>

#include "autograd/autograd.h"
#include "dist/pg.h"

/* Every rank's loss depends on every rank's input through the sum, so the
** gradient of input r is the sum (avg: the mean) of the ranks' gradients
** of the output.  Runs on the thread running backward, in the engine's
** order, which is the same on every rank for the same graph.  The node's
** own backward (AllReduceBackward in autograd/rules.h). */
static int all_reduce_backward(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  if (!n->needs[0]) return 0;
  dl_pg *pg = (dl_pg *)(intptr_t)n->iarg[0];
  dl_tensor *r = NULL;
  NOGRAD(r = dl_clone(g));
  if (!r) return -1;
  if (dl_pg_all_reduce(pg, r, (dl_pg_op)n->iarg[1]) != 0) {
    dl_tensor_release(r);
    return -1;
  }
  gin[0] = r;
  return 0;
}

DL_API dl_tensor *dl_pg_all_reduce_grad(dl_pg *pg, const dl_tensor *t, dl_pg_op op) {
  if (!pg) return dl_errp(EM_NULLARG, "all_reduce_grad", "pg");
  if (!t) return dl_errp(EM_NULLARG, "all_reduce_grad", "t");
  if (op != DL_PG_SUM && op != DL_PG_AVG) return dl_errp(EM_PG_GRAD_OP, "all_reduce_grad", (int)op);
  dl_tensor *out = NULL;
  NOGRAD(out = dl_clone(t));
  if (!out) return NULL;
  if (dl_pg_all_reduce(pg, out, op) != 0) {
    dl_tensor_release(out);
    return NULL;
  }
  dl_tensor *ins[1] = {(dl_tensor *)t};
  ag_node *n = NULL;
  out = ag_record(out, AG_ALL_REDUCE, ins, 1, NULL, 0, &n);
  if (n) {
    n->backward = all_reduce_backward;
    n->iarg[0] = (int64_t)(intptr_t)pg;
    n->iarg[1] = op;
  }
  return out;
}
