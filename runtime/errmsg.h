/*
** errmsg.h -- every error message of the runtime, in one table.
** ERRDEF(name, status code, printf format).  Formats start with the op name
** so the Lua side can show "ddp.add: ..." at the user's line.
*/

/* General */
ERRDEF(NULLARG, DL_EINVAL, "%s: argument %s is nil")
ERRDEF(FREED, DL_ESTATE, "%s: tensor was freed with t:free() and cannot be used any more")
ERRDEF(NOMEM, DL_ENOMEM, "%s: out of memory allocating %lld bytes (%lld bytes live)")
ERRDEF(BADDTYPE, DL_EDTYPE, "%s: unknown dtype %d")
ERRDEF(DTYPE_UNSUP, DL_EDTYPE, "%s: not supported for dtype %s")
ERRDEF(DTYPE_NEED_FLOAT, DL_EDTYPE, "%s: expected a floating point tensor, got %s")
ERRDEF(DTYPE_NEED_INT, DL_EDTYPE, "%s: expected an integer tensor (int64 or int32) for %s, got %s")
ERRDEF(DTYPE_NEED_BOOL, DL_EDTYPE, "%s: expected a bool tensor for %s, got %s")
ERRDEF(DTYPE_MISMATCH, DL_EDTYPE, "%s: dtypes %s and %s do not match")
ERRDEF(INPLACE_DTYPE, DL_EDTYPE, "%s: result dtype %s cannot be stored in place into a tensor of dtype %s")
ERRDEF(DEVICE_UNSUP, DL_EDEVICE, "%s: tensor is on cuda:%d; this op runs on the cpu only for now")
ERRDEF(BADVALUE, DL_EINVAL, "%s: %s")

/* Shapes and dims */
ERRDEF(NDIM_MAX, DL_ESHAPE, "%s: %d dims given, at most 8 are supported")
ERRDEF(NEG_SIZE, DL_ESHAPE, "%s: negative size %lld in shape %s")
ERRDEF(TOO_BIG, DL_ESHAPE, "%s: shape %s has too many elements")
ERRDEF(DIM_RANGE, DL_EINDEX, "%s: dim %d out of range for a %d-dim tensor (expected %d to %d)")
ERRDEF(DIM_REPEAT, DL_EINDEX, "%s: dim %d given twice")
ERRDEF(BCAST, DL_ESHAPE, "%s: shapes %s and %s cannot be broadcast (dim %d: %lld vs %lld)")
ERRDEF(BCAST_TO, DL_ESHAPE, "%s: shape %s cannot be broadcast to %s")
ERRDEF(INPLACE_SHAPE, DL_ESHAPE, "%s: in-place result would have shape %s but the tensor has shape %s")
ERRDEF(VIEW_NUMEL, DL_ESHAPE, "%s: shape %s is invalid for a tensor of %lld elements (shape %s)")
ERRDEF(VIEW_INFER, DL_ESHAPE, "%s: only one dim can be inferred (-1) in %s")
ERRDEF(VIEW_STRIDE, DL_ESHAPE, "%s: view shape %s is not compatible with the tensor's strides (shape %s, strides %s); use reshape, or contiguous first")
ERRDEF(EXPAND, DL_ESHAPE, "%s: cannot expand shape %s to %s (dim %d: %lld to %lld)")
ERRDEF(PERMUTE, DL_ESHAPE, "%s: %s is not a permutation of the %d dims")
ERRDEF(NARROW, DL_EINDEX, "%s: start %lld, length %lld out of range for dim %d of size %lld")
ERRDEF(INDEX_RANGE, DL_EINDEX, "%s: index %lld out of range for dim %d of size %lld")
ERRDEF(LINEAR_RANGE, DL_EINDEX, "%s: element %lld out of range for a tensor of %lld elements")
ERRDEF(SQUEEZE, DL_ESHAPE, "%s: dim %d has size %lld, not 1")
ERRDEF(STRIDED, DL_EINDEX, "%s: view (shape %s, strides %s, offset %lld) reaches outside the storage of %lld elements")
ERRDEF(ITEM, DL_ESHAPE, "%s: a tensor with %lld elements cannot be converted to a number (need exactly 1)")
ERRDEF(ARANGE, DL_EINVAL, "%s: invalid range start=%g end=%g step=%g: %s")
ERRDEF(FLATTEN_ORDER, DL_EINDEX, "%s: start_dim %d comes after end_dim %d (for a %d-dim tensor)")
ERRDEF(NEG_COUNT, DL_EINVAL, "%s: %s must be non-negative, got %lld")
ERRDEF(LOW_HIGH, DL_EINVAL, "%s: expected low < high, got low=%lld high=%lld")
ERRDEF(INT_DIV_ZERO, DL_EINVAL, "%s: integer division by zero (dtype %s)")
ERRDEF(INT_NEG_POW, DL_EINVAL, "%s: integers to negative integer powers are not allowed (dtype %s)")
ERRDEF(NEG_BOOL, DL_EDTYPE, "%s: negation (-) of a bool tensor is not supported; use logical_not() or ~ instead")

/* Devices */
ERRDEF(CUDA_UNAVAIL, DL_EDEVICE, "%s: CUDA is not available: %s")
ERRDEF(CUDA_DEVICE, DL_EDEVICE, "%s: no CUDA device %d (%d device(s) found)")
ERRDEF(CUDA_CALL, DL_EDEVICE, "%s: CUDA failed on cuda:%d: %s")
ERRDEF(CUDA_OOM, DL_ENOMEM, "%s: out of CUDA memory on cuda:%d: %s")

/* Linear algebra and indexing */
ERRDEF(MM_SHAPE, DL_ESHAPE, "%s: shapes %s and %s cannot be multiplied (%lld vs %lld)")
ERRDEF(MM_NDIM, DL_ESHAPE, "%s: expected %s, got shapes %s and %s")
ERRDEF(MM_ZERO_DIM, DL_ESHAPE, "%s: both arguments need at least 1 dim, got shapes %s and %s")
ERRDEF(MM_BATCH, DL_ESHAPE, "%s: batch dims of shapes %s and %s do not match (%lld vs %lld)")
ERRDEF(MM_BLAS_SIZE, DL_ESHAPE, "%s: size %lld is too large for BLAS (at most %lld)")
ERRDEF(IDX_VECTOR, DL_ESHAPE, "%s: index must be 0-dim or 1-D, got shape %s")
ERRDEF(IDX_SCALAR, DL_EINDEX, "%s: a 0-dim tensor takes exactly 1 index, got %lld")
ERRDEF(IDX_NDIM, DL_ESHAPE, "%s: index (shape %s) must have as many dims as %s (shape %s)")
ERRDEF(IDX_SHAPE, DL_ESHAPE, "%s: index shape %s exceeds %s shape %s at dim %d (%lld > %lld)")
ERRDEF(CAT_ZERO_DIM, DL_ESHAPE, "%s: tensor %d is 0-dim and cannot be concatenated")
ERRDEF(CAT_NDIM, DL_ESHAPE, "%s: tensor %d has %d dims (shape %s) but tensor %d has %d (shape %s)")
ERRDEF(CAT_SHAPE, DL_ESHAPE, "%s: shapes %s (tensor %d) and %s (tensor %d) must match except in dim %d (dim %d: %lld vs %lld)")
ERRDEF(STACK_SHAPE, DL_ESHAPE, "%s: all tensors must have the same shape, got %s (tensor 0) and %s (tensor %d)")
ERRDEF(ONE_HOT_RANGE, DL_EINDEX, "%s: class value %lld out of range for num_classes %lld")

/* Reductions and sorting */
ERRDEF(REDUCE_OP, DL_EINVAL, "%s: unknown reduction op %d")
ERRDEF(REDUCE_EMPTY, DL_EINDEX, "%s: cannot reduce over dim %d of size 0 (shape %s): the operation has no identity")
ERRDEF(REDUCE_NUMEL0, DL_EINDEX, "%s: cannot reduce a tensor with no elements (shape %s) without a dim: the operation has no identity")
ERRDEF(TOPK_RANGE, DL_EINDEX, "%s: k = %lld out of range for dim %d of size %lld (shape %s)")
ERRDEF(NDIM_MIN, DL_ESHAPE, "%s: expected a tensor with at least %d dims, got shape %s")
