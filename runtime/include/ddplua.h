/*
** ddplua.h -- the public API of the ddplua runtime, in parts by layer:
**
**   ddplua_base.h      errors, the export macro
**   ddplua_tensor.h    dtypes, tensors, creation, random, views, tensor ops
**   ddplua_autograd.h  grad mode, backward, hooks
**   ddplua_nn.h        network kernels, differentiable ops, optimizer steps,
**                      image transforms
**   ddplua_io.h        safetensors checkpoints, IDX data files
**   ddplua_dist.h      store, process groups and collectives, DDP reducer
**   ddplua_flight.h    the flight recorder: each rank's last collectives
**   ddplua_trace.h     the trace: spans the runtime records while it is on
**   ddplua_cuda.h      CUDA devices and their memory
**
** ddplua_binding.h is for language bindings with a garbage collector and is
** not included here.  Read by C programs and, through scripts/gen_cdef.sh,
** by LuaJIT's ffi.cdef: opaque structs, enums, fixed-width integers and
** plain prototypes (no macros inside prototypes, no inline functions).
** Contract of every call: 0 (or a pointer) on success; a negative DL_E*
** code (or NULL) on failure, with a message for dl_last_error().  Functions
** that return a dl_tensor* hand the caller a new reference: release it with
** dl_tensor_release().  Tensor arguments are borrowed.
*/
#ifndef DDPLUA_H
#define DDPLUA_H

#include "ddplua_base.h"
#include "ddplua_tensor.h"
#include "ddplua_workers.h"
#include "ddplua_autograd.h"
#include "ddplua_nn.h"
#include "ddplua_io.h"
#include "ddplua_dist.h"
#include "ddplua_flight.h"
#include "ddplua_trace.h"
#include "ddplua_cuda.h"

#endif /* DDPLUA_H */
