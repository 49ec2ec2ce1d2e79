/*
** trace.cuh -- spans of device work while a trace is on (trace.cu): each
** launcher call the table makes traced (scripts/gen_dlc_api.sh), each
** host-to-device copy on the copy stream, each NCCL collective on its
** communicator's stream, timed by a pair of CUDA events recorded around
** it on that stream.  Off, a hook is one relaxed load and a branch.
** Only cuda_runtime.h is needed, so nccl.cu (which has no common.cuh)
** includes it too.
*/
#ifndef DLC_TRACE_CUH
#define DLC_TRACE_CUH

#include <atomic>

#include <cuda_runtime.h>

/* The stream a span ran on: dlc_trace_span.stream (dlc.h). */
enum { DLC_TR_COMPUTE = 0, DLC_TR_COPY = 1, DLC_TR_NCCL = 2 };

extern std::atomic<int> dlc_tr_flag;
static inline bool dlc_tr_on(void) { return dlc_tr_flag.load(std::memory_order_relaxed) != 0; }

/* Records the start event of a span on stream st of device (which it
** makes current for the call); kernel names the launcher, the span's
** name is the runtime op the glue last labelled on this thread
** (dlc_trace_label), taken and cleared, else kernel.  Returns the span's handle for
** dlc_tr_end, or -1 (nothing recorded: off, over the bound, a CUDA error,
** which is dropped: a trace never fails an op). */
long long dlc_tr_begin(int device, int stream, cudaStream_t st, const char *kernel);
/* Records its end event on the same stream. */
void dlc_tr_end(long long span, cudaStream_t st);

#endif
