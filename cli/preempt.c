/* preempt.c -- the launcher's side of pre-emption: --signals (which signals mean "save and stop") and --save-grace, passing such a signal on to every worker once, naming and killing those still running after the grace, and the exit status afterwards. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "job.h"

/* --signals (else DDP_PREEMPT_SIGNALS, else TERM,USR1) and --save-grace
** (30 s: SLURM's default KillWait, from SIGTERM to SIGKILL). */
int preempt_setup(job *j, const char *signals, const char *save_grace) {
  const char *from = "--";
  if (!signals) {
    signals = getenv("DDP_PREEMPT_SIGNALS");
    from = "DDP_PREEMPT_SIGNALS: ";
    if (!signals || !*signals) signals = "TERM,USR1";
  }
  int n = dl_preempt_parse(signals, j->pre_sigs, (int)(sizeof j->pre_sigs / sizeof j->pre_sigs[0]));
  if (n < 0) {
    /* "--signals "TERM,USR2": USR2 cannot mean save and stop: ..." */
    job_say("%s%s", from, dl_last_error());
    return -1;
  }
  j->npre = n;
  j->pre_list[0] = '\0';
  for (int i = 0; i < n; i++) {
    size_t len = strlen(j->pre_list);
    snprintf(j->pre_list + len, sizeof j->pre_list - len, "%s%s", i ? "," : "",
             dl_preempt_signal_name(j->pre_sigs[i]) + 3);
  }
  j->save_grace = 30;
  if (save_grace) {
    char *end;
    j->save_grace = strtod(save_grace, &end);
    if (end == save_grace || *end || !(j->save_grace >= 0 && j->save_grace <= 86400)) {
      job_say("--save-grace expects seconds (0..86400), got '%s'", save_grace);
      return -1;
    }
  }
  return 0;
}

/* A "save and stop" signal reached the launcher (from SLURM, which also
** signals every worker itself, or from kill/scancel).  The first one goes
** on to each worker once -- the worker only, not its children, which the
** request is not for -- and the workers get --save-grace to exit; any
** later one is absorbed, and said once. */
void preempt_request(job *j, int sig) {
  const char *name = job_signal_name(sig);
  if (!j->preempted && !j->stopping) {
    job_say("got %s: asking every worker to save and stop (--save-grace %g s)", name, j->save_grace);
    for (int i = 0; i < j->nproc; i++)
      if (j->w[i].pid > 0) kill(j->w[i].pid, sig);
    j->preempted = sig;
    j->stopping = 1;
    j->deadline = job_now() + j->save_grace;
    return;
  }
  if (j->pre_logged) return;
  j->pre_logged = 1;
  if (j->preempted)
    job_say("got %s again: the workers were already asked to save and stop; ignoring it", name);
  else
    job_say("got %s while the workers are stopping; ignoring it", name);
}

/* The grace is over: the workers still running are named (the caller
** then sends SIGKILL). */
void preempt_overdue(job *j) {
  for (int i = 0; i < j->nproc; i++) {
    const worker *w = &j->w[i];
    if (w->pid > 0)
      job_say("rank %d (local rank %d, pid %ld) did not exit within --save-grace %g s of %s: sending SIGKILL",
              w->rank, w->local_rank, (long)w->pid, j->save_grace, job_signal_name(j->preempted));
  }
}

/* After a pre-emption the launcher exits as its workers did: 0 when every
** one exited 0 (the job saved and stopped: no failure, so a requeued job
** is not counted as failed), else the first failure's code (128 + signal). */
int preempt_status(job *j) {
  if (j->first_failed < 0) {
    job_say("every worker exited 0 after %s", job_signal_name(j->preempted));
    return 0;
  }
  const worker *w = &j->w[j->first_failed];
  job_say("after %s, rank %d (local rank %d) ended with %s", job_signal_name(j->preempted), w->rank,
          w->local_rank, job_describe(w->status));
  return job_exit_code(w->status);
}
