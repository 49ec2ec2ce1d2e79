/*
** steps.c -- the launcher's view of every rank's step breakdown: a line
** during the job when one rank's steps are persistently slower than the
** others' (naming the rank and the phase), and a table at its end (the
** median and the worst rank per phase).
**
** Each rank leaves a summary of its last steps in the job's store every
** couple of seconds and when it leaves ("ddp/steps/<rank>", written by
** lua/ddp/core/steps.lua): steps done, window length, the window's medians
** (total data forward backward comm optimizer other busy) and the sums of
** every phase over the job.  The launcher on node 0 serves the store, so
** it sees every node's ranks.
**
** In data-parallel training every rank's step takes as long as the
** slowest's: the others wait in their all-reduces.  So a straggler is told
** by its busy time (the step less its communication), not by the step.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "job.h"

enum { P_TOTAL, P_DATA, P_FORWARD, P_BACKWARD, P_COMM, P_OPT, P_OTHER, P_BUSY, NPHASE };

#define WATCH_EVERY 2.0   /* seconds between looks */
#define SLOW 1.20         /* busy over the others' median: a straggler ... */
#define CAUGHT_UP 1.10    /* ... and below this, no longer */
#define MIN_EXCESS 1e-3   /* seconds: differences below this are noise */
#define MIN_WINDOW 10     /* steps in a rank's window before it is judged */
#define MIN_STEPS_TABLE 20

typedef struct rank_steps {
  int have;
  long steps, window;
  double med[NPHASE];     /* the window's medians */
  double sum[P_OTHER + 1]; /* over every step */
  /* the watch's standing of the rank (read_rank leaves it alone) */
  long seen;              /* steps at the previous look */
  int slow_looks, fast_looks, named;
} rank_steps;

typedef struct steps_watch {
  double t_next;
  rank_steps *r;
  double *buf;            /* median_of's, world long */
} steps_watch;

static steps_watch watch;

static const char *const phase_names[NPHASE] = {"step", "data", "forward", "backward",
                                                "communication", "optimizer", "other", "busy"};

/* Rank r's summary from the store; 0 when it left one. */
static int read_rank(job *j, int r, rank_steps *out) {
  char key[64];
  snprintf(key, sizeof key, "ddp/steps/%d", r);
  out->have = 0;
  char buf[512];
  if (job_store_read(j, key, buf, sizeof buf) != 0) return -1;
  int version = 0;
  double *m = out->med, *s = out->sum;
  int n = sscanf(buf, "%d %ld %ld %lf %lf %lf %lf %lf %lf %lf %lf %lf %lf %lf %lf %lf %lf %lf", &version,
                 &out->steps, &out->window, &m[0], &m[1], &m[2], &m[3], &m[4], &m[5], &m[6], &m[7], &s[0],
                 &s[1], &s[2], &s[3], &s[4], &s[5], &s[6]);
  if (n != 18 || version != 1 || out->window <= 0) return -1;
  out->have = 1;
  return 0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* The median of phase p over the ranks that left a summary, but skip
** (-1: none); NAN when none is left. */
static double median_of(const rank_steps *rs, int world, int p, int skip, double *buf) {
  int n = 0;
  for (int r = 0; r < world; r++)
    if (rs[r].have && r != skip) buf[n++] = rs[r].med[p];
  if (n == 0) return NAN;
  qsort(buf, (size_t)n, sizeof *buf, cmp_double);
  return n % 2 ? buf[n / 2] : (buf[n / 2 - 1] + buf[n / 2]) / 2;
}

static double ms(double s) { return s * 1e3; }

/* What a phase's excess means, for the straggler line. */
static const char *phase_hint(int p) {
  switch (p) {
  case P_DATA: return "data loading: its DataLoader hands out batches late (more num_workers, faster "
                      "storage, lighter transforms; or its shard of the data is harder)";
  case P_FORWARD: return "compute (forward): a slower device or core, other work on it, or longer inputs";
  case P_BACKWARD: return "compute (backward): a slower device or core, other work on it, or longer inputs";
  case P_OPT: return "the optimizer step";
  default: return "outside forward, backward and the optimizer step (the script's own code between "
                  "steps: logging, item(), evaluation, sleeps)";
  }
}

/* One look at every rank's summary: names a rank that became a straggler
** (after two looks in a row), and says when it caught up. */
static void look(job *j) {
  steps_watch *w = &watch;
  int world = j->world;
  double *buf = w->buf;
  for (int r = 0; r < world; r++) read_rank(j, r, &w->r[r]);
  for (int r = 0; r < world; r++) {
    rank_steps *me = &w->r[r];
    /* judged only while it steps: a rank that stopped (an epoch's end,
    ** evaluation, the end) keeps its standing */
    if (!me->have || me->window < MIN_WINDOW || me->steps == me->seen) continue;
    me->seen = me->steps;
    double others = median_of(w->r, world, P_BUSY, r, buf);
    if (isnan(others)) continue;
    double busy = me->med[P_BUSY];
    int slow = busy > SLOW * others && busy - others > MIN_EXCESS;
    int fast = busy < CAUGHT_UP * others || busy - others <= MIN_EXCESS;
    me->slow_looks = slow ? me->slow_looks + 1 : 0;
    me->fast_looks = fast ? me->fast_looks + 1 : 0;
    if (!me->named && me->slow_looks >= 2) {
      int worst = P_OTHER;
      double excess = -1, theirs = 0;
      static const int phases[] = {P_DATA, P_FORWARD, P_BACKWARD, P_OPT, P_OTHER};
      for (size_t k = 0; k < sizeof phases / sizeof phases[0]; k++) {
        double o = median_of(w->r, world, phases[k], r, buf);
        if (me->med[phases[k]] - o > excess) excess = me->med[phases[k]] - o, worst = phases[k], theirs = o;
      }
      double their_comm = median_of(w->r, world, P_COMM, r, buf);
      job_say("rank %d is a straggler: %.1f ms of its own work a step against %.1f ms on the other ranks "
              "(medians of their last %ld steps); most of the difference is %s: %.1f ms against %.1f ms, "
              "%s; the other ranks wait for it in their collectives (%.1f ms a step)",
              r, ms(busy), ms(others), me->window, phase_names[worst], ms(me->med[worst]), ms(theirs),
              phase_hint(worst), ms(their_comm));
      me->named = 1;
    } else if (me->named && me->fast_looks >= 2) {
      job_say("rank %d caught up: %.1f ms of its own work a step against %.1f ms on the other ranks", r,
              ms(busy), ms(others));
      me->named = 0;
    }
  }
}

/* Called from the watch loop: a look every WATCH_EVERY seconds. */
void steps_watch_turn(job *j) {
  if (!j->store || j->world < 2) return;
  steps_watch *w = &watch;
  if (!w->r) {
    size_t n = (size_t)j->world;
    w->r = calloc(n, sizeof *w->r);
    w->buf = calloc(n, sizeof *w->buf);
    if (!w->r || !w->buf) {
      steps_forget();
      return;
    }
    w->t_next = job_now() + WATCH_EVERY;
  }
  if (job_now() < w->t_next) return;
  w->t_next = job_now() + WATCH_EVERY;
  look(j);
}

void steps_forget(void) {
  steps_watch *w = &watch;
  free(w->r);
  free(w->buf);
  memset(w, 0, sizeof *w);
}

/* At the end of a job that ran: per phase, the median over the ranks of
** each rank's median step, the worst rank, and the phase's share of every
** rank's steps together. */
void steps_report(job *j) {
  if (!j->store || j->world < 2) return;
  int world = j->world, have = 0;
  long steps = -1, fewest = 0;
  rank_steps *rs = calloc((size_t)world, sizeof *rs);
  double *buf = malloc(sizeof(double) * (size_t)world);
  if (!rs || !buf) goto out;
  for (int r = 0; r < world; r++) {
    if (read_rank(j, r, &rs[r]) != 0) continue;
    have++;
    if (steps < 0 || rs[r].steps < fewest) fewest = rs[r].steps;
    if (rs[r].steps > steps) steps = rs[r].steps;
  }
  if (have < 2 || fewest < MIN_STEPS_TABLE) goto out;
  double all = 0;
  for (int r = 0; r < world; r++)
    if (rs[r].have) all += rs[r].sum[P_TOTAL];
  long window = 0;
  for (int r = 0; r < world; r++)
    if (rs[r].have && rs[r].window > window) window = rs[r].window;
  char steps_said[96];
  if (fewest == steps) snprintf(steps_said, sizeof steps_said, "%ld steps each", steps);
  else snprintf(steps_said, sizeof steps_said, "%ld to %ld steps", fewest, steps);
  job_say("where the step time went (%d of %d ranks, %s; ms a step, each rank's median over its last %ld "
          "steps):", have, world, steps_said, window);
  fprintf(stderr, "  %-14s %9s %9s %-9s %6s\n", "phase", "median", "worst", "", "share");
  static const int order[] = {P_DATA, P_FORWARD, P_BACKWARD, P_COMM, P_OPT, P_OTHER, P_TOTAL};
  for (size_t k = 0; k < sizeof order / sizeof order[0]; k++) {
    int p = order[k], worst = -1;
    for (int r = 0; r < world; r++)
      if (rs[r].have && (worst < 0 || rs[r].med[p] > rs[worst].med[p])) worst = r;
    double sum = 0;
    for (int r = 0; r < world; r++)
      if (rs[r].have) sum += rs[r].sum[p];
    char who[24];
    snprintf(who, sizeof who, "(rank %d)", worst);
    fprintf(stderr, "  %-14s %9.2f %9.2f %-9s %5.0f%%\n", phase_names[p], ms(median_of(rs, world, p, -1, buf)),
            ms(rs[worst].med[p]), who, all > 0 ? 100 * sum / all : 0);
  }
  fprintf(stderr, "  (communication: time blocked in collectives, such as the wait for the all-reduce after "
                  "backward; other: the rest of the step)\n");
out:
  free(rs);
  free(buf);
}
