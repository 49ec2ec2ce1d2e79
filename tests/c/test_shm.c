/* test_shm.c -- the shared-memory process group from C: a parent serves
** the store and forks ranks that each make the group and run collectives;
** each child exits with its number of failed checks. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

static int child(int port, int rank, int world) {
  dl_store *s = dl_store_connect("127.0.0.1", port, "t", 10);
  CHECK(s != NULL);
  if (!s) return 1;
  char id[32];
  snprintf(id, sizeof id, "ctest%d-w%d", (int)getppid(), world);
  dl_pg *pg = dl_pg_shm_new(s, rank, world, id, 10);
  CHECK(pg != NULL);
  if (!pg) return 1;
  int64_t n = 3000001;
  dl_tensor *t = dl_full(&n, 1, DL_FLOAT32, (double)(rank + 1));
  /* a tensor reduction's or a loss reduction's value is no collective op:
  ** refused on every rank before anything moves, never computed as another
  ** op (the enums share no values; the compiler flags it without the cast) */
  CHECK(dl_pg_all_reduce(pg, t, (dl_pg_op)DL_PROD) < 0 &&
            strstr(dl_last_error(), "unknown reduce op") != NULL,
        "%s", dl_last_error());
  CHECK(dl_pg_all_reduce(pg, t, (dl_pg_op)DL_LOSS_SUM) < 0);
  CHECK(dl_pg_reduce_scatter(pg, t, (dl_pg_op)DL_MEAN) == NULL);
  CHECK(dl_pg_all_reduce(pg, t, DL_PG_SUM) == 0);
  double want = world * (world + 1) / 2.0;
  float *p = dl_tensor_data(t);
  int bad = 0;
  for (int64_t i = 0; i < n; i++) bad += p[i] != (float)want;
  CHECK(bad == 0, "%d wrong of %lld", bad, (long long)n);
  CHECK(dl_pg_broadcast(pg, t, world - 1) == 0);
  CHECK(dl_pg_barrier(pg) == 0);
  dl_tensor *g = dl_pg_all_gather(pg, t);
  CHECK(g && dl_tensor_numel(g) == n * world);
  dl_tensor_release(g);
  dl_tensor_release(t);
  dl_pg_free(pg);
  dl_store_close(s);
  return failed;
}

int main(void) {
  dl_store *srv = dl_store_server("127.0.0.1", 0, "t");
  CHECK(srv != NULL);
  if (!srv) return check_report("test_shm");
  int port = dl_store_port(srv);
  for (int world = 1; world <= 3; world++) {
    pid_t pids[3];
    for (int r = 0; r < world; r++) {
      pids[r] = fork();
      if (pids[r] == 0) { int f = child(port, r, world); fflush(stdout); _exit(f ? 1 : 0); }
    }
    for (int r = 0; r < world; r++) {
      int st = 0;
      waitpid(pids[r], &st, 0);
      CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "world %d rank %d status %d", world, r, st);
    }
  }
  char cmd[128];
  snprintf(cmd, sizeof cmd, "ls /dev/shm | grep -q ddplua-ctest%d", (int)getpid());
  CHECK(system(cmd) != 0, "an arena is left in /dev/shm");
  dl_store_close(srv);
  return check_report("test_shm");
}
