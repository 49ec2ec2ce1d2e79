/* repl_dist.c -- one prompt on the launcher's terminal for every rank of a job: each chunk runs on all ranks (or some), their outputs come back grouped. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>

#include "job.h"

/* A chunk that runs longer than this shows its output as it comes, rank
** by rank, instead of grouped at its end. */
#define STREAM_AFTER_S 2.0
/* How long Tab waits for a rank's candidates. */
#define COMPLETE_WAIT_S 2.0

typedef struct session {
  job *j;
  int target;   /* the worker of a breakpoint, or -1: all */
  char *mask;   /* nproc flags: the ranks a chunk runs on */
} session;

/* -- Ranks --------------------------------------------------------------------- */

/* "0-3", "0,2", "0-1,3": the ranks flagged in on (worker indices). */
static void format_ranks(const job *j, const char *on, char *out, size_t cap) {
  size_t n = 0;
  out[0] = '\0';
  for (int i = 0; i < j->nproc; i++) {
    if (!on[i]) continue;
    int k = i;
    while (k + 1 < j->nproc && on[k + 1]) k++;
    int w;
    if (k == i)
      w = snprintf(out + n, cap - n, "%s%d", n ? "," : "", j->w[i].rank);
    else
      w = snprintf(out + n, cap - n, "%s%d-%d", n ? "," : "", j->w[i].rank, j->w[k].rank);
    if (w < 0 || (size_t)w >= cap - n) break;
    n += (size_t)w;
    i = k;
  }
}

/* "@1 chunk", "@0,2-3 chunk": the ranks to run on, flagged in mask; returns
** the chunk after the prefix, or NULL after saying what is wrong. */
static const char *parse_target(job *j, const char *text, char *mask) {
  if (text[0] != '@') {
    for (int i = 0; i < j->nproc; i++) mask[i] = 1;
    return text;
  }
  memset(mask, 0, (size_t)j->nproc);
  const char *p = text + 1;
  int first = j->node_rank * j->nproc;
  for (;;) {
    char *end;
    long a = strtol(p, &end, 10), b;
    if (end == p) break;
    b = a;
    p = end;
    if (*p == '-') {
      b = strtol(p + 1, &end, 10);
      if (end == p + 1) break;
      p = end;
    }
    if (a > b || a < first || b >= first + j->nproc) {
      job_say("@%ld-%ld: no such rank here (this node has ranks %d to %d)", a, b, first,
              first + j->nproc - 1);
      return NULL;
    }
    for (long r = a; r <= b; r++) {
      if (j->w[r - first].pid <= 0) {
        job_say("rank %ld has exited", r);
        return NULL;
      }
      mask[r - first] = 1;
    }
    if (*p != ',') break;
    p++;
  }
  if (*p != ' ' && *p != '\t' && *p != '\n') {
    job_say("a chunk for some ranks starts with @RANKS and a space: @1 x, @0,2-3 print(x)");
    return NULL;
  }
  return p + 1;
}

/* -- Deaths ---------------------------------------------------------------------- */

/* Tells, once each, the ranks that died since; the number still alive. */
static int report_deaths(job *j) {
  int live = 0;
  for (int i = 0; i < j->nproc; i++) {
    worker *w = &j->w[i];
    if (w->pid > 0) {
      live++;
    } else if (!w->reported) {
      w->reported = 1;
      job_drain_worker(j, w);
      if (j->at_prompt && !j->prompt_dirty) {
        fputs("\r\033[K", stdout);
        fflush(stdout);
        j->prompt_dirty = 1;
      }
      job_say("rank %d exited (%s); the prompt goes on without it%s", w->rank,
              job_describe(w->status),
              j->world > 1 ? " (collectives need every rank: Ctrl-D and start again)" : "");
    }
  }
  return live;
}

/* -- The terminal's hooks ----------------------------------------------------- */

static int hook_fill(void *ud, struct pollfd *fds, int max) {
  session *s = ud;
  return job_fds(s->j, fds, max);
}

/* Output and deaths while the prompt waits for keys: shown over the
** prompt, which is then drawn again.  Returns 1 to end the input. */
static int hook_ready(void *ud, const struct pollfd *fds, int n) {
  session *s = ud;
  (void)fds;
  (void)n;
  job_turn(s->j, 0);
  int live = report_deaths(s->j);
  int gone = s->target >= 0 ? s->j->w[s->target].pid <= 0 : live == 0;
  if (gone || s->j->abort_session) return 1;
  if (s->j->prompt_dirty) {
    s->j->prompt_dirty = 0;
    repl_term_redisplay();
  }
  return 0;
}

static char **hook_complete(void *ud, const char *upto) {
  session *s = ud;
  job *j = s->j;
  worker *w = NULL;
  for (int i = 0; i < j->nproc && !w; i++)
    if (s->mask[i] && j->w[i].pid > 0) w = &j->w[i];
  if (!w) return NULL;
  j->seq++;
  w->replied = 0;
  if (job_send(w, "complete", j->seq, upto, strlen(upto)) != 0) return NULL;
  double until = job_now() + COMPLETE_WAIT_S;
  while (!w->replied && w->pid > 0 && job_now() < until) job_turn(j, 50);
  if (!w->replied) return NULL;
  int count = 0;
  for (size_t k = 0; k < w->reply_len; k++) count += w->reply[k] == '\n';
  char **out = calloc((size_t)count + 2, sizeof *out);
  if (!out) return NULL;
  int n = 0;
  char *save = NULL;
  for (char *tok = strtok_r(w->reply, "\n", &save); tok; tok = strtok_r(NULL, "\n", &save))
    out[n++] = strdup(tok);
  return out;
}

/* -- Running a chunk ------------------------------------------------------------- */

/* Writes text with "[ranks] " before every line. */
static void print_prefixed(FILE *f, const char *prefix, const char *text, size_t len) {
  size_t start = 0;
  for (size_t i = 0; i <= len; i++)
    if (i == len || text[i] == '\n') {
      if (i == len && i == start) break;
      fprintf(f, "%s%.*s\n", prefix, (int)(i - start), text + start);
      start = i + 1;
    }
}

/* What rank i printed and answered, as one text. */
static char *rank_text(worker *w, size_t *len) {
  size_t n = w->cap_len + w->reply_len + 1;
  char *t = malloc(n + 1);
  if (!t) return NULL;
  memcpy(t, w->cap ? w->cap : "", w->cap_len);
  size_t k = w->cap_len;
  if (w->replied && w->reply_len > 0) {
    memcpy(t + k, w->reply, w->reply_len);
    k += w->reply_len;
  }
  while (k > 0 && t[k - 1] == '\n') k--;
  t[k] = '\0';
  *len = k;
  return t;
}

/* Prints the ranks' texts, ranks with the same text (and outcome) once. */
static void print_grouped(job *j, const char *ran) {
  char *texts[j->nproc];
  size_t lens[j->nproc];
  char done[j->nproc], group[j->nproc];
  for (int i = 0; i < j->nproc; i++) {
    texts[i] = ran[i] ? rank_text(&j->w[i], &lens[i]) : NULL;
    done[i] = !texts[i];
  }
  fflush(stdout);
  for (int i = 0; i < j->nproc; i++) {
    if (done[i]) continue;
    worker *w = &j->w[i];
    int ok = !w->replied || w->reply_ok;
    memset(group, 0, (size_t)j->nproc);
    for (int k = i; k < j->nproc; k++) {
      worker *v = &j->w[k];
      if (!done[k] && (!v->replied || v->reply_ok) == ok && lens[k] == lens[i] &&
          memcmp(texts[k], texts[i], lens[i]) == 0) {
        group[k] = 1;
        done[k] = 1;
      }
    }
    if (lens[i] == 0) continue;
    char ranks[512], prefix[520] = "";
    format_ranks(j, group, ranks, sizeof ranks);
    if (j->prefix) snprintf(prefix, sizeof prefix, "[%s] ", ranks);
    FILE *f = ok ? stdout : stderr;
    print_prefixed(f, prefix, texts[i], lens[i]);
    fflush(f);
  }
  for (int i = 0; i < j->nproc; i++) free(texts[i]);
}

/* Output kept so far goes out now, rank by rank, and the rest as it comes:
** a long chunk (a training loop typed at the prompt) shows progress. */
static void start_streaming(job *j, const char *ran) {
  fflush(stdout);
  for (int i = 0; i < j->nproc; i++) {
    worker *w = &j->w[i];
    if (!ran[i]) continue;
    char prefix[32] = "";
    if (j->prefix) snprintf(prefix, sizeof prefix, "[%d] ", w->rank);
    if (w->cap_len > 0) print_prefixed(stdout, prefix, w->cap, w->cap_len - 1);
    w->cap_len = 0;
    w->capture = 0;
  }
  fflush(stdout);
}

/* Why a collective cannot run in a chunk for some ranks only (the ranks
** left out never join it), into why; 0 when the chunk runs on every rank
** still alive.  The ranks put it up as a fence (dl_pg_set_fence) while the
** chunk runs, so such a collective fails at once instead of hanging. */
static int fence_text(const session *s, const char *ran, char *why, size_t cap) {
  job *j = s->j;
  if (j->world <= 1) return 0;
  char ranks[512];
  format_ranks(j, ran, ranks, sizeof ranks);
  if (s->target >= 0) {
    snprintf(why, cap,
             "at ddp.breakpoint() chunks run on rank %s alone while the other ranks wait in it, "
             "so a collective here would never complete; Ctrl-D lets every rank go on",
             ranks);
    return 1;
  }
  int left_out = 0, n = 0;
  for (int i = 0; i < j->nproc; i++) {
    left_out |= !ran[i] && j->w[i].pid > 0;
    n += ran[i];
  }
  if (!left_out) return 0;
  snprintf(why, cap,
           "this chunk runs on %s %s of %d (@%s), and a collective waits for every rank; "
           "type it without @ to run it on all of them",
           n == 1 ? "rank" : "ranks", ranks, j->world, ranks);
  return 1;
}

static void run_chunk(session *s, const char *text) {
  job *j = s->j;
  char ran[j->nproc];
  j->seq++;
  for (int i = 0; i < j->nproc; i++) {
    int off = j->w[i].ctl.fd < 0 || j->w[i].ctl_off;
    ran[i] = s->mask[i] && j->w[i].pid > 0 && !off;
    if (s->mask[i] && j->w[i].pid > 0 && off)
      job_say("rank %d's prompt is off (its control channel failed); the chunk runs without it",
              j->w[i].rank);
  }
  /* "runf": the fence's text, a newline, the chunk */
  char why[1400];
  size_t tlen = strlen(text), flen = 0;
  char *framed = NULL;
  if (fence_text(s, ran, why, sizeof why)) {
    flen = strlen(why);
    if ((framed = malloc(flen + 1 + tlen))) {
      memcpy(framed, why, flen);
      framed[flen] = '\n';
      memcpy(framed + flen + 1, text, tlen);
    }
  }
  for (int i = 0; i < j->nproc; i++) {
    worker *w = &j->w[i];
    w->replied = 0;
    w->reply_len = 0;
    w->cap_len = 0;
    if (!ran[i]) continue;
    w->capture = 1;
    w->busy = 1;
    int rc = framed ? job_send(w, "runf", j->seq, framed, flen + 1 + tlen)
                    : job_send(w, "run", j->seq, text, tlen);
    if (rc != 0) ran[i] = w->busy = 0;
  }
  free(framed);
  struct sigaction prompt_sigint;
  job_catch_sigint(&prompt_sigint);
  j->interrupts = 0;
  int asked = 0, streaming = 0;
  double start = job_now();
  for (;;) {
    int pending = 0;
    for (int i = 0; i < j->nproc; i++) pending += ran[i] && j->w[i].pid > 0 && !j->w[i].replied;
    if (pending == 0 || j->abort_session) break;
    job_turn(j, 100);
    if (j->interrupts > asked) { /* Ctrl-C: to every rank still running it */
      if (asked == 0) {
        fputs("\n", stdout); /* after the terminal's ^C */
        fflush(stdout);
      }
      asked = j->interrupts;
      for (int i = 0; i < j->nproc; i++) {
        worker *w = &j->w[i];
        if (ran[i] && w->pid > 0 && !w->replied) kill(w->pid, SIGINT);
      }
      if (asked == 2)
        job_say("a rank stuck in a C call (a collective another rank never joins) stops "
                "at its timeout; a third Ctrl-C kills the ranks still running");
      if (asked >= 3)
        for (int i = 0; i < j->nproc; i++) {
          worker *w = &j->w[i];
          if (ran[i] && w->pid > 0 && !w->replied) kill(-w->pid, SIGKILL);
        }
    }
    if (!streaming && job_now() - start > STREAM_AFTER_S) {
      streaming = 1;
      start_streaming(j, ran);
    }
  }
  sigaction(SIGINT, &prompt_sigint, NULL);
  for (int i = 0; i < j->nproc; i++) {
    worker *w = &j->w[i];
    if (ran[i]) job_drain_worker(j, w);
    w->capture = w->busy = 0;
  }
  print_grouped(j, ran);
  report_deaths(j);
}

/* -- The session ------------------------------------------------------------------- */

void dist_session(job *j, int target) {
  if (repl_term_background()) {
    if (target >= 0)
      job_say("rank %d stopped at ddp.breakpoint() in %s, but %s; the ranks go on", j->w[target].rank,
              j->bp_where, REPL_BACKGROUND_WHY);
    else
      job_say("the prompt over ranks does not open: %s", REPL_BACKGROUND_WHY);
    return;
  }
  session s = {j, target, calloc((size_t)j->nproc, 1)};
  lua_State *P = luaL_newstate(); /* the parser alone: is a chunk whole? */
  if (!s.mask || !P) {
    job_say("out of memory for the prompt");
    free(s.mask);
    if (P) lua_close(P);
    return;
  }
  repl_hooks hooks = {hook_fill, hook_ready, hook_complete, &s};
  char all[j->nproc], ranks[512], prompt[540];
  for (int i = 0; i < j->nproc; i++) all[i] = s.mask[i] = target < 0 || i == target;
  format_ranks(j, all, ranks, sizeof ranks);
  j->session = 1;
  j->abort_session = 0;
  fflush(stdout);
  if (target < 0)
    printf("%s %s -- one prompt for ranks %s: a chunk runs on every rank, \"@1 chunk\" on "
           "some. Ctrl-C interrupts, Ctrl-D ends.\n", CLI_NAME, dl_version(), ranks);
  else
    printf("%s: rank %d stopped at ddp.breakpoint() in %s; the other ranks wait. Its locals "
           "are in scope; Ctrl-D continues every rank.\n", CLI_NAME, j->w[target].rank, j->bp_where);
  fflush(stdout);
  repl_term_open(&hooks);
  for (;;) {
    if (report_deaths(j) == 0 || j->abort_session) break;
    if (target >= 0 && j->w[target].pid <= 0) break;
    char *chunk;
    for (int i = 0; i < j->nproc; i++) /* the live ranks a chunk reaches */
      all[i] = s.mask[i] = (target < 0 || i == target) && j->w[i].pid > 0;
    format_ranks(j, all, ranks, sizeof ranks);
    snprintf(prompt, sizeof prompt, "[%s]> ", ranks);
    j->at_prompt = 1;
    j->prompt_dirty = 0;
    int status = repl_read_chunk(P, prompt, ">> ", &chunk);
    j->at_prompt = 0;
    if (status == REPL_EOF) break;
    if (status == REPL_INTR) {
      fputs("\n", stdout);
      fflush(stdout);
      continue;
    }
    const char *code = chunk;
    if (target >= 0) {
      if (chunk[0] == '@') {
        job_say("at a breakpoint chunks run on rank %d only", j->w[target].rank);
        code = NULL;
      } else {
        memset(s.mask, 0, (size_t)j->nproc);
        s.mask[target] = 1;
      }
    } else {
      code = parse_target(j, chunk, s.mask);
    }
    if (code && code[strspn(code, " \t\n")] != '\0') run_chunk(&s, code);
    free(chunk);
  }
  repl_term_close();
  fputs("\n", stdout);
  fflush(stdout);
  lua_close(P);
  free(s.mask);
  j->session = 0;
  /* deaths told at the prompt are not the job's failure */
  if (j->first_failed >= 0 && j->w[j->first_failed].reported) j->first_failed = -1;
}
