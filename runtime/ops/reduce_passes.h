/*
** reduce_passes.h -- the passes a reduction is made of (ops/reduce.c plans
** them; a device's reduce kernel, core/device.h, runs them by number).
*/
#ifndef DL_OPS_REDUCE_PASSES_H
#define DL_OPS_REDUCE_PASSES_H

#include "core/device.h"

/* What a pass computes; a user op is one or two passes. */
enum { K_SUM, K_ABS, K_SQ, K_NZ, K_SQDEV, K_EXP, /* sums of a map of x */
       K_POW, K_PROD, K_MAX, K_MIN, K_MAXABS, K_MINABS, K_COUNT };

#endif
