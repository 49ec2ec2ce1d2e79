/*
** ddplua_flight.h -- the flight recorder: every rank's last collectives in a
** ring, and the file that ring is (runtime/dist/flight.c writes it, the
** launcher's cli/flight.c reads it; docs/observability.md documents it).
**
** Always on: each collective costs one entry written in place (no lock, no
** allocation).  Under the launcher the ring is a file in /dev/shm that the
** launcher maps too, so it reads the ring of a rank that hangs, or died of
** SIGKILL, without the rank's help; elsewhere it is private memory, written
** out by dl_flight_dump.  A dump is this same layout, host byte order
** (little-endian on every machine ddplua runs on), version 1:
**
**   dl_flight_header   at offset 0, header_bytes long
**   dl_flight_entry    capacity of them from header_bytes, entry_bytes each;
**                      the call numbered h (0-based, in record order) is
**                      entries[h % capacity]; head calls were recorded.
*/
#ifndef DDPLUA_FLIGHT_H
#define DDPLUA_FLIGHT_H

#include "ddplua_base.h"

#if !defined(DL_CDEF) && defined(__cplusplus)
extern "C" {
#endif

#define DL_FLIGHT_VERSION 1
#define DL_FLIGHT_SITE 96    /* "train.lua:88", the user's line that made the call */
#define DL_FLIGHT_NOTE 88    /* "bucket 2 of 5: fc2.weight .. fc1.bias (4)" */
#define DL_FLIGHT_STACK 4096 /* the Lua stack a rank left on request */
#define DL_FLIGHT_STEPS 64   /* the last steps' breakdown */

/* What an entry records.  Kinds follow the runtime's collectives. */
typedef enum dl_flight_kind {
  DL_FK_ALL_REDUCE = 0, DL_FK_BROADCAST, DL_FK_ALL_GATHER, DL_FK_BARRIER,
  DL_FK_REDUCE_SCATTER, DL_FK_SEND, DL_FK_RECV
} dl_flight_kind;
typedef enum dl_flight_state {
  DL_FS_EMPTY = 0, DL_FS_QUEUED, DL_FS_STARTED, DL_FS_DONE, DL_FS_FAILED
} dl_flight_state;

/* One collective, 256 bytes.  Times are CLOCK_REALTIME seconds; 0: not yet. */
typedef struct dl_flight_entry {
  int64_t seq;       /* the call's number in its group, from 1: the same call on every rank */
  int64_t numel;     /* elements of the tensor (all_gather: of one rank's part) */
  int32_t group;     /* the process group, in creation order: 0 is the world */
  int32_t kind;      /* dl_flight_kind */
  int32_t arg;       /* the reduction (dl_pg_op) or the src / dst rank; -1: none */
  int32_t dtype;     /* dl_dtype */
  int32_t state;     /* dl_flight_state, written last */
  int32_t bucket;    /* the DDP bucket, -1 for the script's own calls */
  int64_t slot;      /* the record number h this entry holds (torn-read check) */
  double t_enqueue, t_start, t_end;
  char site[DL_FLIGHT_SITE];
  char note[DL_FLIGHT_NOTE];
} dl_flight_entry;

/* One optimizer step's time in seconds, by phase (the rest is "other"). */
typedef struct dl_flight_step {
  int64_t step;      /* from 1 */
  double t_end, total, data, forward, backward, comm, optimizer;
} dl_flight_step;

typedef struct dl_flight_header {
  char magic[8];              /* "DDPLUAFR" */
  int32_t version, header_bytes, entry_bytes, capacity;
  int32_t rank, world, pid, local_rank;
  char host[64];
  char job_id[40];
  double t_open;
  int64_t head;               /* calls recorded so far */
  /* what the rank does now: the entry a blocking call of the main thread
  ** is in (h + 1; 0 when none) and when its last blocking call returned */
  int64_t in_call;
  double t_idle;
  /* its Lua stack, written on request: stack_ack reaches stack_req */
  int64_t stack_req, stack_ack;
  double t_stack;
  char stack[DL_FLIGHT_STACK];
  int64_t steps;              /* steps recorded; step[(n - 1) % DL_FLIGHT_STEPS] is the last */
  dl_flight_step step[DL_FLIGHT_STEPS];
  /* set in dumps: when it was taken, and how the rank stood ("running",
  ** "exit code 1", "signal SIGKILL"; "" when not known) */
  double t_dump;
  char status[32];
  char reserved[3848];        /* to 12288 bytes, room for later fields */
} dl_flight_header;

/* Maps the ring onto path (made or reused, sized for capacity entries;
** NULL or "": private memory) for rank of world; entries recorded before
** are kept.  capacity 0: DDP_FLIGHT_ENTRIES, else 2048; -1: off (nothing
** recorded, for measuring what it costs).  Called by
** ddp.init; a process that never calls it records into a private ring. */
DL_API int dl_flight_open(const char *path, int rank, int world, int local_rank,
                          const char *job_id, int capacity);
/* The user's line the next collectives of this thread come from ("" clears). */
DL_API void dl_flight_site(const char *site);
/* The ring, or NULL before anything was recorded. */
DL_API const dl_flight_header *dl_flight_get(void);
/* Writes the ring to path atomically (a dump), making its folders. */
DL_API int dl_flight_dump(const char *path);
/* The Lua stack asked for (stack_req): stored, and acknowledged. */
DL_API void dl_flight_set_stack(const char *text);
DL_API int dl_flight_stack_wanted(void);
/* Asks for the stack (from a signal handler: async-signal-safe). */
DL_API void dl_flight_want_stack(void);
/* Records one finished step (seconds per phase). */
DL_API void dl_flight_step_done(double total, double data, double forward, double backward,
                                double comm, double optimizer);
/* Seconds the calling process spent blocked in collectives so far (all threads'
** blocking calls plus waits for asynchronous ones), for the step breakdown. */
DL_API double dl_flight_comm_seconds(void);
/* "all_reduce(sum) #3 float32 x10" for an entry. */
DL_API int dl_flight_describe(const dl_flight_entry *e, char *out, int cap);

#if !defined(DL_CDEF) && defined(__cplusplus)
}
#endif

#endif /* DDPLUA_FLIGHT_H */
