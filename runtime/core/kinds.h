/*
** kinds.h -- the enums a kernel is told what to compute by, written once for
** the op files, the device tables (core/device.h) and the CUDA kernels
** (cuda/dlc.h).  Plain C with no includes: cc, g++ (the emulator) and nvcc
** all read it.
*/
#ifndef DL_CORE_KINDS_H
#define DL_CORE_KINDS_H

/* A reduction's pass (ops/reduce.c plans a user op as one or two passes):
** sums of a map of x (K_SUM .. K_EXP, K_POW with the pass's parameter),
** then the products, extremes and counts.  K_COUNT counts the set bytes
** of a bool or uint8 x. */
typedef enum reduce_pass {
  K_SUM, K_ABS, K_SQ, K_NZ, K_SQDEV, K_EXP, K_POW, K_PROD, K_MAX, K_MIN, K_MAXABS, K_MINABS,
  K_COUNT
} reduce_pass;

/* What a scan kernel computes along the middle dim of [outer, n, inner]. */
typedef enum scan_kind { SCAN_CUMSUM, SCAN_CUMPROD } scan_kind;

/* The distribution a Philox fill draws from (core/random.c): uniform in
** [a, b), normal (mean a, std b), integers low + r % range. */
typedef enum philox_kind { PHILOX_UNIFORM, PHILOX_NORMAL, PHILOX_INT } philox_kind;

/* What a class loss kernel reads: log-probabilities (nll_loss) or logits
** (cross_entropy, which takes their log-softmax on the way). */
typedef enum cls_input { CLS_LOG_PROBS, CLS_LOGITS } cls_input;

#endif
