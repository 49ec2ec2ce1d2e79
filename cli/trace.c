/*
** trace.c -- one timeline of every rank: the ranks' trace files
** (DIR/rank<N>.json, JSON arrays of Chrome trace events written by
** lua/ddp/trace.lua, each rank its own process row, on rank 0's clock)
** merged into DIR/trace.json, which opens in ui.perfetto.dev and
** chrome://tracing.  The launcher merges at the end of a job (--trace DIR,
** and every folder a rank's ddp.trace.start named in the store);
** `ddplua trace DIR` merges files copied from a cluster.
*/
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "job.h"

typedef struct rank_file {
  int rank;
  char *text;  /* the array's elements, without its brackets */
  size_t len;
} rank_file;

static int by_rank(const void *a, const void *b) {
  return ((const rank_file *)a)->rank - ((const rank_file *)b)->rank;
}

/* The file's bytes (NUL-terminated), or NULL. */
static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 1 << 16, n = 0;
  char *b = malloc(cap);
  while (b) {
    size_t r = fread(b + n, 1, cap - n - 1, f);
    n += r;
    if (n + 1 < cap) break;
    char *nb = realloc(b, cap * 2);
    if (!nb) { free(b); b = NULL; break; }
    b = nb;
    cap *= 2;
  }
  fclose(f);
  if (!b) return NULL;
  b[n] = '\0';
  *len = n;
  return b;
}

/* The elements of a JSON array text: in place, between its brackets; -1
** when text is not one (a file cut short). */
static int elements(char *text, size_t len, char **start, size_t *n) {
  size_t a = 0, b = len;
  while (a < b && (text[a] == ' ' || text[a] == '\n' || text[a] == '\r' || text[a] == '\t')) a++;
  while (b > a && (text[b - 1] == ' ' || text[b - 1] == '\n' || text[b - 1] == '\r' || text[b - 1] == '\t')) b--;
  if (b - a < 2 || text[a] != '[' || text[b - 1] != ']') return -1;
  a++;
  b--;
  while (a < b && (text[a] == '\n' || text[a] == ' ')) a++;
  while (b > a && (text[b - 1] == '\n' || text[b - 1] == ' ')) b--;
  *start = text + a;
  *n = b - a;
  return 0;
}

/* Merges dir's rank files into dir/trace.json; world > 0 names the ranks
** that left none; since > 0 leaves out files older than that (Unix time:
** an earlier run's, into the same folder).  Says what it did (prefix
** "ddplua: " through job_say when say_job, else plain lines on stdout);
** the number merged, -1 on failure. */
static int merge(const char *dir, int world, int say_job, double since) {
  DIR *d = opendir(dir);
  if (!d) {
    job_say("trace: cannot read %s: %s", dir, strerror(errno));
    return -1;
  }
  rank_file *rs = NULL;
  int n = 0, cap = 0;
  int stale = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    int r, used = 0;
    if (sscanf(e->d_name, "rank%d.json%n", &r, &used) != 1 || e->d_name[used] != '\0' || r < 0) continue;
    char path[PATH_MAX + 300];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    struct stat sb;
    if (since > 0 && stat(path, &sb) == 0 && (double)sb.st_mtime + 1 < since) {
      stale++;
      continue;
    }
    size_t len = 0;
    char *text = slurp(path, &len);
    char *start;
    size_t sn;
    if (!text || elements(text, len, &start, &sn) != 0) {
      job_say("trace: %s is not a JSON array of events (cut short?); left out", path);
      free(text);
      continue;
    }
    if (n == cap) {
      cap = cap ? cap * 2 : 16;
      rank_file *nr = realloc(rs, (size_t)cap * sizeof *rs);
      if (!nr) { free(text); break; }
      rs = nr;
    }
    memmove(text, start, sn);
    rs[n++] = (rank_file){r, text, sn};
  }
  closedir(d);
  if (stale > 0)
    job_say("trace: left out %d rank file%s in %s from an earlier run", stale, stale == 1 ? "" : "s", dir);
  if (n == 0) {
    job_say("trace: no rank files (rank<N>.json) in %s", dir);
    free(rs);
    return -1;
  }
  qsort(rs, (size_t)n, sizeof *rs, by_rank);
  char out[PATH_MAX + 32];
  snprintf(out, sizeof out, "%s/trace.json", dir);
  static const char head[] = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n", tail[] = "\n]}\n";
  dl_file *f = dl_file_create(out, -1, "trace");
  int rc = f ? dl_file_write(f, head, sizeof head - 1) : -1;
  int written = 0;
  for (int i = 0; i < n && rc == 0; i++) {
    if (rs[i].len == 0) continue;
    if (written++ && (rc = dl_file_write(f, ",\n", 2))) break;
    rc = dl_file_write(f, rs[i].text, rs[i].len);
  }
  if (rc == 0) rc = dl_file_write(f, tail, sizeof tail - 1);
  if (f) rc = rc == 0 ? dl_file_commit(f) : (dl_file_abort(f), -1);
  if (rc != 0) {
    job_say("trace: %s", dl_last_error());
    for (int i = 0; i < n; i++) free(rs[i].text);
    free(rs);
    return -1;
  }
  char missing[256] = "";
  if (world > 0) {
    size_t m = 0;
    int k = 0, count = 0;
    for (int r = 0; r < world; r++) {
      while (k < n && rs[k].rank < r) k++;
      if (k < n && rs[k].rank == r) continue;
      count++;
      if (m < sizeof missing - 24)
        m += (size_t)snprintf(missing + m, sizeof missing - m, "%s%d", m ? ", " : "; no file from rank ", r);
    }
    if (count > 0 && m >= sizeof missing - 24) snprintf(missing + m, sizeof missing - m, " ...");
  }
  if (say_job)
    job_say("trace of %d rank%s: %s (open it in https://ui.perfetto.dev or chrome://tracing)%s", n,
            n == 1 ? "" : "s", out, missing);
  else
    printf("trace of %d rank%s: %s (open it in https://ui.perfetto.dev or chrome://tracing)%s\n", n,
           n == 1 ? "" : "s", out, missing);
  for (int i = 0; i < n; i++) free(rs[i].text);
  free(rs);
  return n;
}

/* The folders to merge at the end of a job: --trace's, then each one a
** rank's ddp.trace.start left in the store ("ddp/trace/<rank>"), once. */
void trace_finish(job *j) {
  char dirs[8][PATH_MAX];
  int nd = 0;
  if (j->trace_dir[0]) snprintf(dirs[nd++], PATH_MAX, "%s", j->trace_dir);
  for (int r = 0; j->store && r < j->world && nd < 8; r++) {
    char key[64];
    snprintf(key, sizeof key, "ddp/trace/%d", r);
    char dir[PATH_MAX];
    if (job_store_read(j, key, dir, sizeof dir) != 0) continue;
    int seen = 0;
    for (int k = 0; k < nd && !seen; k++) seen = strcmp(dirs[k], dir) == 0;
    if (!seen) snprintf(dirs[nd++], PATH_MAX, "%s", dir);
  }
  /* another node's launcher: its ranks' files; node 0's merges them all */
  if (!j->store && j->nnodes > 1) return;
  for (int k = 0; k < nd; k++) merge(dirs[k], j->world, 1, j->trace_since);
}

/* `ddplua trace DIR [--world N]`: merges the rank files in DIR. */
int trace_command(int argc, char **argv) {
  const char *dir = NULL;
  int world = 0;
  for (int i = 0; i < argc; i++) {
    if (strcmp(argv[i], "--world") == 0 && i + 1 < argc) {
      char *end;
      long w = strtol(argv[++i], &end, 10);
      if (end == argv[i] || *end || w < 1 || w > 1 << 20) {
        fprintf(stderr, "%s: trace: --world expects a number of ranks, got '%s'\n", CLI_NAME, argv[i]);
        return 1;
      }
      world = (int)w;
    } else if (!dir && argv[i][0] != '-') {
      dir = argv[i];
    } else {
      fprintf(stderr, "%s: trace: unexpected '%s'\nusage: %s trace DIR [--world N]\n", CLI_NAME, argv[i],
              CLI_NAME);
      return 1;
    }
  }
  if (!dir) {
    fprintf(stderr, "usage: %s trace DIR [--world N]   merge the ranks' trace files in DIR\n", CLI_NAME);
    return 1;
  }
  return merge(dir, world, 0, 0) > 0 ? 0 : 1;
}
