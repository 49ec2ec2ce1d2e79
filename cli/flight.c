/* flight.c -- the flight recorder's reader: collects the rings of a node's ranks (asking the live ones for their Lua stacks), writes them to the log directory, and says in a few lines which collective diverged; `ddplua analyze DIR` reads such dumps again. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "job.h"

/* One rank's ring, as read (a private copy: a live rank goes on writing). */
typedef struct ring {
  dl_flight_header *h;   /* NULL: none could be read */
  size_t bytes;
  int rank;
  const char *why;       /* why there is none */
} ring;

static double wall_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void flight_path(const job *j, int rank, char *out, size_t cap) {
  snprintf(out, cap, "/dev/shm/%sf%d", j->shm_prefix, rank);
}

static const dl_flight_entry *entry_at(const dl_flight_header *h, int64_t k) {
  return (const dl_flight_entry *)((const char *)h + h->header_bytes) + k % h->capacity;
}

/* The ring in a file, checked; NULL with *why set. */
static dl_flight_header *read_ring(const char *path, size_t *bytes, const char **why) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    *why = errno == ENOENT ? "no ring (it never reached ddp.init)" : strerror(errno);
    return NULL;
  }
  struct stat st;
  dl_flight_header *h = NULL;
  *why = "not a flight recorder ring (bad header)";
  if (fstat(fd, &st) == 0 && st.st_size >= (off_t)sizeof *h && st.st_size < ((off_t)1 << 32) &&
      (h = malloc((size_t)st.st_size))) {
    size_t got = 0;
    while (got < (size_t)st.st_size) {
      ssize_t n = read(fd, (char *)h + got, (size_t)st.st_size - got);
      if (n <= 0) break;
      got += (size_t)n;
    }
    if (got != (size_t)st.st_size || memcmp(h->magic, "DDPLUAFR", 8) != 0 || h->version != DL_FLIGHT_VERSION ||
        h->header_bytes != (int32_t)sizeof *h || h->entry_bytes != (int32_t)sizeof(dl_flight_entry) ||
        h->capacity < 1 || (size_t)h->header_bytes + (size_t)h->capacity * sizeof(dl_flight_entry) > got) {
      free(h);
      h = NULL;
    } else {
      *bytes = got;
    }
  }
  close(fd);
  return h;
}

/* -- The verdict ------------------------------------------------------------- */

/* "rank 3", "ranks 0-2", "ranks 0, 2, 5-7" for the ranks flagged in set. */
static void rank_list(const int *set, int n, const ring *rs, char *out, size_t cap) {
  int cnt = 0;
  for (int i = 0; i < n; i++) cnt += set[i];
  size_t len = (size_t)snprintf(out, cap, cnt == 1 ? "rank " : "ranks ");
  int first = 1;
  for (int i = 0; i < n && len < cap - 24; i++) {
    if (!set[i]) continue;
    int k = i;
    while (k + 1 < n && set[k + 1] && rs[k + 1].rank == rs[k].rank + 1) k++;
    const char *sep = first ? "" : ", ";
    if (k > i) len += (size_t)snprintf(out + len, cap - len, "%s%d-%d", sep, rs[i].rank, rs[k].rank);
    else len += (size_t)snprintf(out + len, cap - len, "%s%d", sep, rs[i].rank);
    first = 0;
    i = k;
  }
}

/* The entries of group g in rank r's ring, oldest first (consecutive call
** numbers: every call of a group counts). */
typedef struct calls {
  const dl_flight_entry **e;
  int n;
} calls;

static calls calls_of(const dl_flight_header *h, int g) {
  calls c = {NULL, 0};
  if (!h) return c;
  int64_t head = h->head, lo = head > h->capacity ? head - h->capacity : 0;
  c.e = calloc((size_t)(head - lo) + 1, sizeof *c.e);
  if (!c.e) return c;
  for (int64_t k = lo; k < head; k++) {
    const dl_flight_entry *e = entry_at(h, k);
    if (e->slot != k || e->state == DL_FS_EMPTY || e->group != g) continue;
    if (c.n > 0 && e->seq != c.e[c.n - 1]->seq + 1) c.n = 0;  /* a gap: keep the newest run */
    c.e[c.n++] = e;
  }
  return c;
}

static const dl_flight_entry *call_no(const calls *c, int64_t seq) {
  if (c->n == 0) return NULL;
  int64_t i = seq - c->e[0]->seq;
  return i >= 0 && i < c->n ? c->e[i] : NULL;
}

static int same_call(const dl_flight_entry *a, const dl_flight_entry *b) {
  return a->kind == b->kind && a->arg == b->arg && a->dtype == b->dtype && a->numel == b->numel;
}

static void describe(const dl_flight_entry *e, char *out, size_t cap) {
  char d[160];
  dl_flight_describe(e, d, (int)sizeof d);
  const char *site = e->site[0] ? e->site : "?";
  if (e->note[0]) snprintf(out, cap, "%s (%.96s; %.88s)", d, site, e->note);
  else snprintf(out, cap, "%s (%.96s)", d, site);
}

static const char *state_word(int s) {
  return s == DL_FS_QUEUED ? "queued" : s == DL_FS_STARTED ? "waiting" : s == DL_FS_DONE ? "done" : "failed";
}

/* Whether the rank answered this dump's request for its stack (asked at
** most a second or so before the dump was taken). */
static int has_stack(const dl_flight_header *h) {
  return h->stack[0] && h->stack_ack == h->stack_req && h->t_stack >= h->t_dump - 2.0;
}

/* A rank's Lua stack, indented, when it gave one for this dump. */
static void stack_lines(out_buf *o, const dl_flight_header *h) {
  if (!has_stack(h)) return;
  char copy[DL_FLIGHT_STACK];
  snprintf(copy, sizeof copy, "%s", h->stack);
  int shown = 0;
  for (char *line = strtok(copy, "\n"); line && shown < 10; line = strtok(NULL, "\n")) {
    while (*line == '\t' || *line == ' ') line++;
    if (!*line || strcmp(line, "stack traceback:") == 0) continue;
    out_say(o, "    %s", line);
    shown++;
  }
}


/* Says what group g's rings show: the first call the ranks disagree on,
** else who waits for whom, else that nothing diverged. */
static void verdict(out_buf *o, const ring *rs, int n, int g, double now) {
  calls *cs = calloc((size_t)n, sizeof *cs);
  int *set = calloc((size_t)n, sizeof *set);
  if (!cs || !set) { free(cs); free(set); return; }
  int64_t lo = INT64_MAX, hi = 0;
  int members = 0;
  for (int i = 0; i < n; i++) {
    cs[i] = calls_of(rs[i].h, g);
    if (cs[i].n == 0) continue;
    members++;
    if (cs[i].e[0]->seq < lo) lo = cs[i].e[0]->seq;
    if (cs[i].e[cs[i].n - 1]->seq > hi) hi = cs[i].e[cs[i].n - 1]->seq;
  }
  char gname[32] = "";
  if (g) snprintf(gname, sizeof gname, " of group %d", g);
  char who[256], d[400];
  if (members == 0) {
    out_say(o, "  no rank recorded a collective%s", gname);
    goto done;
  }
  /* 1. the first call number whose calls differ between ranks */
  for (int64_t s = lo; s <= hi; s++) {
    const dl_flight_entry *ref = NULL;
    int differ = 0;
    for (int i = 0; i < n; i++) {
      const dl_flight_entry *e = call_no(&cs[i], s);
      if (!e) continue;
      if (!ref) ref = e;
      else if (!same_call(ref, e)) differ = 1;
    }
    if (!differ) continue;
    out_say(o, "  collective #%lld%s differs between ranks (the ranks must make the same calls in the same order):",
        (long long)s, gname);
    int *done_ = calloc((size_t)n, sizeof *done_);
    for (int i = 0; done_ && i < n; i++) {
      const dl_flight_entry *e = call_no(&cs[i], s);
      if (!e || done_[i]) continue;
      memset(set, 0, sizeof *set * (size_t)n);
      for (int k = i; k < n; k++) {
        const dl_flight_entry *f = call_no(&cs[k], s);
        if (f && !done_[k] && same_call(e, f) && strcmp(e->site, f->site) == 0) set[k] = done_[k] = 1;
      }
      rank_list(set, n, rs, who, sizeof who);
      describe(e, d, sizeof d);
      out_say(o, "  %s called %s", who, d);
    }
    free(done_);
    goto done;
  }
  /* 2. who is at the newest call, and who never reached it */
  memset(set, 0, sizeof *set * (size_t)n);
  const dl_flight_entry *at = NULL;
  int behind = 0, open = 0;
  for (int i = 0; i < n; i++) {
    if (cs[i].n == 0) continue;
    const dl_flight_entry *e = cs[i].e[cs[i].n - 1];
    if (e->seq == hi) {
      set[i] = 1;
      if (!at) at = e;
      open += e->state != DL_FS_DONE;
    } else {
      behind++;
    }
  }
  /* a job that moves: every rank made or finished a call in the last
  ** second (the rings are read one after the other, so their newest
  ** calls differ) */
  int moving = 1;
  int64_t oldest = hi;
  for (int i = 0; i < n; i++) {
    if (cs[i].n == 0) continue;
    const dl_flight_entry *e = cs[i].e[cs[i].n - 1];
    double t = e->t_end > 0 ? e->t_end : e->t_start > 0 ? e->t_start : e->t_enqueue;
    if (e->state == DL_FS_FAILED || now - t > 1.0) moving = 0;
    if (e->seq < oldest) oldest = e->seq;
  }
  if (moving && (behind || open)) {
    out_say(o, "  every rank is making progress%s: their newest calls are #%lld to #%lld, each within the last second",
        gname, (long long)oldest, (long long)hi);
    goto done;
  }
  if (behind == 0 && open == 0) {
    describe(at, d, sizeof d);
    out_say(o, "  no collective%s diverged: every rank finished %s", gname, d);
  } else if (behind == 0) {
    describe(at, d, sizeof d);
    for (int i = 0; i < n; i++) set[i] = cs[i].n && cs[i].e[cs[i].n - 1]->state != DL_FS_DONE;
    rank_list(set, n, rs, who, sizeof who);
    out_say(o, "  every rank reached %s; %s did not finish it", d, who);
  } else {
    describe(at, d, sizeof d);
    rank_list(set, n, rs, who, sizeof who);
    double since = at->t_start > 0 ? (at->t_end > 0 ? at->t_end : now) - at->t_start : 0;
    if (at->state == DL_FS_DONE) out_say(o, "  %s finished %s", who, d);
    else if (at->state == DL_FS_FAILED) out_say(o, "  %s gave up in %s after %.1f s", who, d, since > 0 ? since : 0);
    else out_say(o, "  %s wait in %s, for %.1f s now", who, d, since > 0 ? since : 0);
  }
  for (int i = 0; i < n && behind; i++) {
    if (cs[i].n == 0 || cs[i].e[cs[i].n - 1]->seq == hi) continue;
    const dl_flight_entry *e = cs[i].e[cs[i].n - 1];
    const dl_flight_header *h = rs[i].h;
    describe(e, d, sizeof d);
    if (e->state == DL_FS_STARTED || e->state == DL_FS_QUEUED) {
      /* still in an earlier call the others left: it waits on its own side */
      out_say(o, "  rank %d is still in %s, which the others finished", rs[i].rank, d);
      continue;
    }
    char when[64] = "";
    if (e->state == DL_FS_DONE && e->t_end > 0) snprintf(when, sizeof when, " %.1f s before this report", now - e->t_end);
    char how[96] = "";
    if (h->status[0] && strcmp(h->status, "running") != 0) snprintf(how, sizeof how, " (it ended: %s)", h->status);
    out_say(o, "  rank %d never reached #%lld: its last was %s, %s%s%s", rs[i].rank, (long long)hi, d,
        e->state == DL_FS_DONE ? "finished" : state_word(e->state), when, how);
    if (has_stack(h)) {
      out_say(o, "  rank %d's Lua stack:", rs[i].rank);
      stack_lines(o, h);
    } else if (!h->status[0] || strcmp(h->status, "running") == 0) {
      out_say(o, "  rank %d gave no Lua stack within a second: it is blocked in a C call, or runs a loop the JIT "
             "compiled, which never stops to answer (jit.off() before a suspect loop lets it)", rs[i].rank);
    }
  }
done:
  for (int i = 0; i < n; i++) free(cs[i].e);
  free(cs);
  free(set);
}

/* The whole report of rings rs[0..n). */
static void report(out_buf *o, const ring *rs, int n) {
  double now = 0;
  int groups = 0;
  for (int i = 0; i < n; i++) {
    const dl_flight_header *h = rs[i].h;
    if (!h) {
      out_say(o, "  rank %d: %s", rs[i].rank, rs[i].why ? rs[i].why : "no ring");
      continue;
    }
    if (h->t_dump > now) now = h->t_dump;
    int64_t head = h->head, lo = head > h->capacity ? head - h->capacity : 0;
    for (int64_t k = lo; k < head; k++) {
      const dl_flight_entry *e = entry_at(h, k);
      if (e->slot == k && e->group + 1 > groups && e->group < 64) groups = e->group + 1;
    }
  }
  int unread = 0;
  for (int i = 0; i < n; i++) unread += !rs[i].h;
  if (unread == n) return;
  if (unread) out_say(o, "  (what follows covers the %d readable ring%s of %d)", n - unread, n - unread == 1 ? "" : "s", n);
  if (now == 0) now = wall_now();
  if (groups == 0) groups = 1;
  for (int g = 0; g < groups; g++) verdict(o, rs, n, g, now);
}

/* -- Collecting ------------------------------------------------------------------ */

static int make_dirs(char *path) {
  for (char *p = path + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    int rc = mkdir(path, 0777);
    *p = '/';
    if (rc != 0 && errno != EEXIST) return -1;
  }
  return mkdir(path, 0777) != 0 && errno != EEXIST ? -1 : 0;
}

/* The directory dumps go to: --log-dir's flight/, else ddplua-logs/<job
** id>/flight in the working directory (shared across a cluster's nodes,
** unlike /tmp); made on first use. */
static int dump_dir(job *j, char *out, size_t cap) {
  char cwd[PATH_MAX] = "";
  const char *rel = j->log_dir ? j->log_dir : "ddplua-logs";
  if (rel[0] != '/' && !getcwd(cwd, sizeof cwd)) cwd[0] = '\0';
  int n;
  if (j->log_dir) n = snprintf(out, cap, "%s%s%s/flight", cwd, cwd[0] ? "/" : "", rel);
  else n = snprintf(out, cap, "%s%sddplua-logs/%s/flight", cwd, cwd[0] ? "/" : "", j->job_id[0] ? j->job_id : "job");
  if (n < 0 || (size_t)n >= cap) {
    errno = ENAMETOOLONG;
    return -1;
  }
  return make_dirs(out);
}

static int write_file(const char *path, const void *data, size_t n) {
  dl_file *f = dl_file_create(path, (int64_t)n, "flight recorder");
  if (!f) return -1;
  if (dl_file_write(f, data, n)) {
    dl_file_abort(f);
    return -1;
  }
  return dl_file_commit(f);
}

void flight_say(const char *text) {
  for (const char *line = text; line && *line;) {
    const char *end = strchr(line, '\n');
    job_say("%.*s", (int)(end ? end - line : (long)strlen(line)), line);
    line = end ? end + 1 : NULL;
  }
}

int flight_collect(job *j, const char *why, int keep) {
  int n = j->nproc;
  const char *entries = getenv("DDP_FLIGHT_ENTRIES");
  if (entries && strtol(entries, NULL, 10) == 0 && *entries == '0') {
    if (!keep) job_say("flight recorder (%s): it is off in this job (DDP_FLIGHT_ENTRIES=0)", why);
    return 0;
  }
  ring *rs = calloc((size_t)n, sizeof *rs);
  int64_t *asked = calloc((size_t)n, sizeof *asked);
  if (!rs || !asked) { free(rs); free(asked); return -1; }
  /* the live ranks leave their Lua stacks (SIGUSR2: cli/main.c's hook) */
  char path[PATH_MAX];
  int waiting = 0;
  for (int i = 0; i < n; i++) {
    asked[i] = -1;
    worker *w = &j->w[i];
    flight_path(j, w->rank, path, sizeof path);
    size_t bytes;
    const char *why_not;
    dl_flight_header *h = w->pid > 0 ? read_ring(path, &bytes, &why_not) : NULL;
    if (h && h->pid == (int32_t)w->pid) {
      asked[i] = h->stack_ack;
      kill(w->pid, SIGUSR2);
      waiting++;
    }
    free(h);
  }
  for (int t = 0; t < 50 && waiting; t++) {  /* up to a second */
    struct timespec ts = {0, 20000000};
    nanosleep(&ts, NULL);
    waiting = 0;
    for (int i = 0; i < n; i++) {
      if (asked[i] < 0) continue;
      flight_path(j, j->w[i].rank, path, sizeof path);
      size_t bytes;
      const char *why_not;
      dl_flight_header *h = read_ring(path, &bytes, &why_not);
      if (h && h->stack_ack == asked[i] && j->w[i].pid > 0) waiting++;
      free(h);
    }
  }
  char dir[PATH_MAX];
  int dir_ok = dump_dir(j, dir, sizeof dir) == 0;
  int written = 0;
  double now = wall_now();
  for (int i = 0; i < n; i++) {
    worker *w = &j->w[i];
    rs[i].rank = w->rank;
    flight_path(j, w->rank, path, sizeof path);
    rs[i].h = read_ring(path, &rs[i].bytes, &rs[i].why);
    if (!rs[i].h) continue;
    rs[i].h->t_dump = now;
    snprintf(rs[i].h->status, sizeof rs[i].h->status, "%s", w->pid > 0 ? "running" : job_describe(w->status));
    if (!dir_ok) continue;
    char out[PATH_MAX + 32];
    snprintf(out, sizeof out, "%s/rank%d.bin", dir, w->rank);
    if (write_file(out, rs[i].h, rs[i].bytes) == 0) written++;
    else job_say("flight recorder: %s", dl_last_error());
  }
  out_buf o = {NULL, 0, 0};
  if (dir_ok && written)
    out_say(&o, "flight recorder (%s): what every rank did last; %d ring%s written to %s (ddplua analyze %s)", why,
        written, written == 1 ? "" : "s", dir, dir);
  else
    out_say(&o, "flight recorder (%s): what every rank did last (cannot write to %s: %s)", why, dir,
        dir_ok ? "see above" : strerror(errno));
  size_t head_len = o.len;
  report(&o, rs, n);
  if (dir_ok && o.s) {
    char out[PATH_MAX + 32];
    snprintf(out, sizeof out, "%s/report.txt", dir);
    write_file(out, o.s + head_len, o.len - head_len);
  }
  if (keep) {
    free(j->flight_report);
    j->flight_report = o.s;
    o.s = NULL;
  } else {
    flight_say(o.s);
  }
  free(o.s);
  for (int i = 0; i < n; i++) free(rs[i].h);
  free(rs);
  free(asked);
  return 0;
}

/* -- ddplua analyze DIR ------------------------------------------------------------ */

static int by_rank(const void *a, const void *b) {
  return ((const ring *)a)->rank - ((const ring *)b)->rank;
}

/* Prints the last k entries of a ring, oldest first. */
static void list_entries(const ring *r, int k) {
  const dl_flight_header *h = r->h;
  int64_t head = h->head, lo = head > h->capacity ? head - h->capacity : 0;
  if (head - lo > k) lo = head - k;
  printf("rank %d (pid %d on %s): %lld collectives recorded, the last %lld:\n", r->rank, h->pid, h->host,
         (long long)h->head, (long long)(head - lo));
  for (int64_t x = lo; x < head; x++) {
    const dl_flight_entry *e = entry_at(h, x);
    if (e->slot != x) continue;
    char d[400];
    describe(e, d, sizeof d);
    double took = e->t_end > 0 && e->t_start > 0 ? e->t_end - e->t_start : -1;
    if (took >= 0) printf("  %s  %s, %.3f ms\n", d, state_word(e->state), took * 1e3);
    else printf("  %s  %s\n", d, state_word(e->state));
  }
}

int flight_analyze(int argc, char **argv) {
  const char *dir = NULL;
  int entries = 0;
  for (int i = 0; i < argc; i++) {
    const char *num = NULL;
    if (strcmp(argv[i], "--entries") == 0 && i + 1 < argc) num = argv[++i];
    else if (strncmp(argv[i], "--entries=", 10) == 0) num = argv[i] + 10;
    if (num) {
      char *end;
      long v = strtol(num, &end, 10);
      if (end == num || *end || v < 0 || v > (1 << 20)) {
        fprintf(stderr, "ddplua analyze: --entries %s: not a whole number from 0 to 1048576\n", num);
        return 2;
      }
      entries = (int)v;
    } else if (!dir && argv[i][0] != '-') dir = argv[i];
    else {
      fprintf(stderr, "usage: ddplua analyze DIR [--entries N]   (DIR: the dumps' directory, or the --log-dir)\n");
      return 2;
    }
  }
  if (!dir) {
    fprintf(stderr, "usage: ddplua analyze DIR [--entries N]   (DIR: the dumps' directory, or the --log-dir)\n");
    return 2;
  }
  char base[PATH_MAX];
  snprintf(base, sizeof base, "%s", dir);
  DIR *d = opendir(base);
  if (!d) {
    fprintf(stderr, "ddplua analyze: %s: %s\n", dir, strerror(errno));
    return 1;
  }
  ring *rs = NULL;
  int n = 0, cap = 0;
  for (int pass = 0; pass < 2 && n == 0; pass++) {
    if (pass == 1) {  /* a --log-dir: its flight/ */
      closedir(d);
      snprintf(base, sizeof base, "%s/flight", dir);
      if (!(d = opendir(base))) break;
    }
    struct dirent *de;
    while ((de = readdir(d))) {
      int rank;
      char tail[8];
      if (sscanf(de->d_name, "rank%d.bi%1s", &rank, tail) != 2 || strcmp(tail, "n") != 0) continue;
      if (n == cap) {
        cap = cap ? cap * 2 : 16;
        ring *m = realloc(rs, sizeof *rs * (size_t)cap);
        if (!m) break;
        rs = m;
      }
      char path[PATH_MAX + 256];
      snprintf(path, sizeof path, "%s/%s", base, de->d_name);
      rs[n].rank = rank;
      rs[n].h = read_ring(path, &rs[n].bytes, &rs[n].why);
      if (!rs[n].h) fprintf(stderr, "ddplua analyze: %s: %s\n", path, rs[n].why);
      n++;
    }
  }
  if (d) closedir(d);
  if (n == 0) {
    fprintf(stderr, "ddplua analyze: no flight recorder dumps (rank<N>.bin) in %s or %s/flight\n", dir, dir);
    free(rs);
    return 1;
  }
  qsort(rs, (size_t)n, sizeof *rs, by_rank);
  out_buf o = {NULL, 0, 0};
  report(&o, rs, n);
  printf("%d ring%s in %s:\n%s", n, n == 1 ? "" : "s", base, o.s ? o.s : "");
  int readable = 0;
  for (int i = 0; i < n; i++) readable += rs[i].h != NULL;
  for (int i = 0; entries > 0 && i < n; i++)
    if (rs[i].h) list_entries(&rs[i], entries);
  free(o.s);
  for (int i = 0; i < n; i++) free(rs[i].h);
  free(rs);
  return readable ? 0 : 1;
}
