/*
** racecheck.h -- the emulator's shared-memory race checker, as emu.cc
** drives it (racecheck.cc says how it works).
**
** Only libddplua_cudaemu_race.so checks: its kernel files are compiled
** with -fsanitize=thread, so every load and store they make calls a hook
** in racecheck.cc.  In the plain emulator the same calls cost a test of
** a flag nobody sets.
*/
#ifndef DLC_EMU_RACECHECK_H
#define DLC_EMU_RACECHECK_H

#include <stddef.h>

#include <string>

namespace dlc_emu {
namespace rc {
extern bool on;  /* set by the instrumented objects' constructors */
inline bool enabled(void) { return on; }
/* A launch of kernel (the function) with dynamic shared memory
** [dyn, dyn + n); the checker's state is locked until launch_end. */
void launch_begin(const void *kernel, unsigned char *dyn, size_t n);
void block_begin(int nthreads);
/* A barrier completed: warp's __syncwarp or shuffle, or (warp < 0) the
** block's __syncthreads, which begins a new barrier interval. */
void synced(int warp);
/* Thread idx reached the __syncthreads at site while thread other
** waits at other_site, or (other_site NULL) had finished. */
void divergent(int idx, const void *site, int other, const void *other_site);
void block_end(void);
/* The first hazard of the launch (NULL if none), valid until the next. */
const char *launch_end(void);
/* "file:line (function)" of a code address (ret: a return address, whose
** call is meant), as the reports name them. */
std::string site(const void *pc, bool ret);
}  // namespace rc
}  // namespace dlc_emu

#endif
