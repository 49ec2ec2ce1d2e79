/*
** preempt.c -- pre-emption requests: the signals a scheduler sends before
** it kills a job (SLURM's --signal=USR1@T, SIGTERM at the time limit or on
** scancel) set a process-wide flag instead of killing the process, and the
** training loop polls it (ddp.should_stop) to save a checkpoint and exit.
**
** Nothing changes until dl_preempt_arm: a process that never asks keeps
** each signal's default action.  Once armed, every later signal of the set
** is absorbed, never fatal -- SLURM signals every process of a step and the
** ddplua launcher passes the signal on too, so a worker gets it twice, and
** a second one must not kill it halfway through its save.  The one
** exception is the launcher's own "stop now" after another rank failed:
** the same signal sent with sigqueue and DL_PREEMPT_STOP_NOW as its value
** takes the default action (the process dies of it, as an unarmed one).
*/
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/internal.h"

/* What a handler may touch: sig_atomic_t, written without locks. */
static volatile sig_atomic_t first_sig;  /* the first request's signal, 0: none */
static volatile sig_atomic_t nrequests;  /* how many arrived (the later ones absorbed) */
static unsigned long long armed;         /* bit s: signal s is handled here */

/* The signals that may mean "save and stop", and those refused with why. */
static const struct {
  const char *name;
  int sig;
  const char *refused; /* NULL: allowed */
} known[] = {
  {"TERM", SIGTERM, NULL},
  {"USR1", SIGUSR1, NULL},
  {"HUP", SIGHUP, NULL},
  {"QUIT", SIGQUIT, NULL},
  {"ALRM", SIGALRM, NULL},
  {"XCPU", SIGXCPU, NULL},
  {"PWR", SIGPWR, NULL},
  {"USR2", SIGUSR2, "it is reserved for the flight recorder's dump"},
  {"INT", SIGINT, "Ctrl-C (SIGINT) keeps its meaning, stop now"},
  {"KILL", SIGKILL, "it cannot be caught"},
  {"STOP", SIGSTOP, "it cannot be caught"},
};
#define NKNOWN (sizeof known / sizeof known[0])
#define ALLOWED "TERM, USR1, HUP, QUIT, ALRM, XCPU or PWR"

DL_API const char *dl_preempt_signal_name(int sig) {
  static const char *const full[] = {"SIGTERM", "SIGUSR1", "SIGHUP", "SIGQUIT", "SIGALRM",
                                     "SIGXCPU", "SIGPWR", "SIGUSR2", "SIGINT", "SIGKILL", "SIGSTOP"};
  for (size_t i = 0; i < NKNOWN; i++)
    if (known[i].sig == sig) return full[i];
  return NULL;
}

/* Parses list into out (at most cap signals, each once); where names the
** list in messages ("signals", "DDP_PREEMPT_SIGNALS"). */
static int parse(const char *where, const char *list, int *out, int cap) {
  char msg[256];
  int n = 0;
  const char *p = list;
  for (;;) {
    while (*p == ' ' || *p == ',') p++;
    if (!*p) break;
    const char *start = p;
    while (*p && *p != ',' && *p != ' ') p++;
    size_t len = (size_t)(p - start);
    /* "SIGTERM" and "term" name TERM too, as kill(1) takes them */
    const char *name = start;
    if (len > 3 && strncasecmp(name, "SIG", 3) == 0) name += 3, len -= 3;
    size_t k = 0;
    for (; k < NKNOWN; k++)
      if (strlen(known[k].name) == len && strncasecmp(known[k].name, name, len) == 0) break;
    if (k == NKNOWN) {
      snprintf(msg, sizeof msg, "unknown signal %.*s (expected names such as TERM,USR1: " ALLOWED ")",
               (int)(p - start), start);
      return dl_err(EM_PREEMPT_SIGNALS, where, list, msg);
    }
    if (known[k].refused) {
      snprintf(msg, sizeof msg, "%s cannot mean save and stop: %s", known[k].name, known[k].refused);
      return dl_err(EM_PREEMPT_SIGNALS, where, list, msg);
    }
    int dup = 0;
    for (int i = 0; i < n; i++) dup |= out[i] == known[k].sig;
    if (dup) continue;
    if (n == cap) return dl_err(EM_PREEMPT_SIGNALS, where, list, "too many signals");
    out[n++] = known[k].sig;
  }
  if (n == 0)
    return dl_err(EM_PREEMPT_SIGNALS, where, list, "no signal named (expected names such as TERM,USR1)");
  return n;
}

DL_API int dl_preempt_parse(const char *signals, int *out, int cap) {
  if (!signals) return dl_err(EM_NULLARG, "dl_preempt_parse", "signals");
  if (!out || cap < 1) return dl_err(EM_NULLARG, "dl_preempt_parse", "out");
  return parse("signals", signals, out, cap);
}

static void on_request(int sig, siginfo_t *info, void *ctx) {
  (void)ctx;
  if (info && info->si_code == SI_QUEUE && info->si_value.sival_int == DL_PREEMPT_STOP_NOW) {
    /* stop now: die of it as an unarmed process would, once the handler
    ** returns (the signal is blocked until then) */
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigaction(sig, &dfl, NULL);
    raise(sig);
    return;
  }
  if (first_sig == 0) first_sig = sig;
  if (nrequests < 1 << 30) nrequests++;
}

DL_API int dl_preempt_arm(const char *signals) {
  const char *where = "signals";
  if (!signals || !*signals) {
    signals = getenv("DDP_PREEMPT_SIGNALS");
    where = "DDP_PREEMPT_SIGNALS";
    if (!signals || !*signals) signals = "TERM,USR1";
  }
  int sigs[NKNOWN];
  int n = parse(where, signals, sigs, (int)NKNOWN);
  if (n < 0) return n;
  for (int i = 0; i < n; i++) {
    if (armed >> sigs[i] & 1) continue;
    struct sigaction act;
    memset(&act, 0, sizeof act);
    act.sa_sigaction = on_request;
    /* SA_RESTART: a read or write the signal lands in goes on */
    act.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&act.sa_mask);
    if (sigaction(sigs[i], &act, NULL) != 0)
      return dl_err(EM_PG_OS, "dl_preempt_arm", dl_preempt_signal_name(sigs[i]), strerror(errno));
    armed |= 1ULL << sigs[i];
  }
  return 0;
}

DL_API int dl_preempt_requested(void) { return (int)first_sig; }

DL_API int dl_preempt_count(void) { return (int)nrequests; }
