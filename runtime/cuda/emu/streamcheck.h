/*
** streamcheck.h -- the emulator's stream checker, as emu.cc (streams,
** events, copies, launches) and racecheck.cc (kernels' loads and stores)
** drive it; streamcheck.cc says how it works.
*/
#ifndef DLC_EMU_STREAMCHECK_H
#define DLC_EMU_STREAMCHECK_H

#include <stddef.h>
#include <stdint.h>

namespace dlc_emu {
namespace sc {
enum { MAX_STREAMS = 64 };
/* A vector clock: how many operations of each stream are ordered before. */
struct vclock { uint32_t t[MAX_STREAMS]; };

/* A new stream's number (0 is the legacy default stream), or -1 when
** MAX_STREAMS have been made; blocking: created without
** cudaStreamNonBlocking, so it and the legacy stream wait for each other. */
int stream_new(bool blocking);
/* cudaEventRecord(ev, s) and cudaStreamWaitEvent(s, ev). */
void record(int s, vclock *ev);
void wait(int s, const vclock &ev);
/* The host waited for stream s (s < 0: every stream), or for an event. */
void host_wait(int s);
void host_wait_event(const vclock &ev);
/* An operation `what` on stream s reading [src, src + sn) and writing
** [dst, dst + dn); async: its write stays in flight until something
** orders it; host_waits: the call returns when it is done (cudaMemcpy).
** The report of its first access that nothing orders after an in-flight
** write of another stream (valid until the next call), or NULL. */
const char *op(int s, const char *what, const void *dst, size_t dn, const void *src, size_t sn,
               bool async, bool host_waits);
/* A kernel launched on stream s.  In the race checker's build every load
** and store of global memory is then passed to kernel_access while
** n_unordered (in-flight writes not ordered before the launch) is set. */
void launch_begin(int s);
extern int n_unordered;
void kernel_access(const void *p, size_t n, bool write, const void *pc);
/* The launch's first unordered access as a report naming kernel, or NULL. */
const char *launch_end(const void *kernel);
}  // namespace sc
}  // namespace dlc_emu

#endif
