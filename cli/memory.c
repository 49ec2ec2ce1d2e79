/*
** memory.c -- the launcher's end-of-job line of each rank's peak memory:
** the tensors ddplua allocated on the CPU, the process's resident memory
** (what an out-of-memory killer or a cgroup limit counts), and on a GPU
** its peak allocated and reserved bytes.
**
** Each rank leaves "ddp/mem/<rank>" in the job's store with its step
** summary (every couple of seconds while it steps, and when it leaves:
** lua/ddp/core/memory.lua's line), so a rank that was killed still has
** its last look there.  The launcher on node 0 serves the store and sees
** every node's ranks.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "job.h"

enum { MAX_ROWS = 32 };  /* a row per rank up to this; beyond, the largest */

typedef struct rank_mem {
  int have, device;        /* device: the CUDA index, -1 when none */
  long long cpu, resident, cuda, reserved;
} rank_mem;

static int read_mem(job *j, int r, rank_mem *out) {
  char key[64], buf[256];
  snprintf(key, sizeof key, "ddp/mem/%d", r);
  memset(out, 0, sizeof *out);
  if (job_store_read(j, key, buf, sizeof buf) != 0) return -1;
  int version = 0;
  if (sscanf(buf, "%d %lld %lld %d %lld %lld", &version, &out->cpu, &out->resident, &out->device, &out->cuda,
             &out->reserved) != 6 || version != 1)
    return -1;
  out->have = 1;
  return 0;
}

/* 1536 -> "1.5 KiB" */
static const char *human(long long n, char *buf, size_t cap) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)n;
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, u++;
  if (u == 0) snprintf(buf, cap, "%lld B", n);
  else snprintf(buf, cap, v < 10 ? "%.2f %s" : v < 100 ? "%.1f %s" : "%.0f %s", v, units[u]);
  return buf;
}

/* One rank's peaks, "12.3 MiB CPU tensors, 85 MiB resident[, 1.20 GiB on
** cuda:0 (2.00 GiB reserved)]". */
static void describe(const rank_mem *m, char *out, size_t cap) {
  char a[32], b[32], c[32], d[32];
  int n = 0;
  if (m->device >= 0)
    n = snprintf(out, cap, "%s on cuda:%d (%s reserved), ", human(m->cuda, c, sizeof c), m->device,
                 human(m->reserved, d, sizeof d));
  if (n < 0 || (size_t)n >= cap) return;
  snprintf(out + n, cap - (size_t)n, "%s CPU tensors, %s resident", human(m->cpu, a, sizeof a),
           m->resident > 0 ? human(m->resident, b, sizeof b) : "?");
}

static long long weight(const rank_mem *m) { return m->device >= 0 ? m->cuda : m->resident; }

/* Each rank's peaks from the store, as the text memory_say prints: one
** line for a few ranks, a row each for more, past MAX_ROWS the largest;
** NULL when no rank left its line. */
char *memory_collect(job *j) {
  if (!j->store || j->world < 2) return NULL;
  int world = j->world, have = 0;
  rank_mem *ms = calloc((size_t)world, sizeof *ms);
  char *picked = calloc((size_t)world, 1);
  out_buf t = {NULL, 0, 0};
  if (!ms || !picked) goto out;
  for (int r = 0; r < world; r++)
    if (read_mem(j, r, &ms[r]) == 0) have++;
  if (have == 0) goto out;
  char line[200];
  if (world <= 4) {
    char all[4 * 200 + 32] = "";
    size_t n = 0;
    for (int r = 0; r < world; r++) {
      if (!ms[r].have) continue;
      describe(&ms[r], line, sizeof line);
      int k = snprintf(all + n, sizeof all - n, "%srank %d: %s", n ? "; " : "", r, line);
      if (k < 0 || (size_t)k >= sizeof all - n) break;
      n += (size_t)k;
    }
    out_say(&t, "peak memory per rank: %s", all);
    goto out;
  }
  int shown = have < MAX_ROWS ? have : MAX_ROWS;
  out_say(&t, "peak memory per rank (%d of %d ranks left theirs%s):", have, world,
          shown < have ? "; the largest" : "");
  for (int k = 0; k < shown; k++) {
    int best = -1;
    for (int r = 0; r < world; r++) {
      if (!ms[r].have || picked[r]) continue;
      if (shown == have) { best = r; break; }  /* all of them: in rank order */
      if (best < 0 || weight(&ms[r]) > weight(&ms[best])) best = r;
    }
    if (best < 0) break;
    picked[best] = 1;
    describe(&ms[best], line, sizeof line);
    out_say(&t, "  rank %-5d %s", best, line);
  }
out:
  free(ms);
  free(picked);
  return t.s;
}

/* Each line ends in a newline (out_say's). */
void memory_say(const char *text) {
  if (!text) return;
  fflush(stdout);
  fprintf(stderr, "%s: %s", CLI_NAME, text);
  fflush(stderr);
}
