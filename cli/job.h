/* job.h -- the launcher's job and workers, shared by launcher.c (starting and watching them) and repl_dist.c (the prompt over them). */
#ifndef DDPLUA_JOB_H
#define DDPLUA_JOB_H

#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <sched.h>
#include <sys/types.h>

#include "cli.h"
#include "ddplua.h"

#define TAIL_LINES 10
#define LINE_MAX_BYTES 65536 /* a longer line is passed on in pieces */

/* -- Workers --------------------------------------------------------------- */

typedef struct line_buf {
  int fd; /* read end of the pipe; -1 once at end of file */
  char *buf;
  size_t len;
} line_buf;

typedef struct worker {
  int rank, local_rank;
  pid_t pid;      /* 0 once reaped */
  int status;     /* from waitpid */
  line_buf out, err;
  int log;        /* --log-dir file, or -1 */
  char *tail[TAIL_LINES]; /* the last lines of stderr, a ring */
  int ntail;
  /* the control channel (cli/link.c): commands to it, frames from it */
  int ctl_w;      /* -1 when closed */
  line_buf ctl;
  double ctl_progress; /* job_now() when its last control bytes came */
  int ctl_off;    /* its frames no longer parse: what comes is read and dropped */
  int ready;      /* serves the prompt (said "ready") */
  int bp_calls;   /* how many times it reached ddp.breakpoint */
  int bp_waiting; /* waits for "continue" */
  /* what it prints while a prompt's chunk runs is kept here, not shown */
  int capture;
  char *cap;
  size_t cap_len;
  /* its answer to the current request (seq) */
  int replied, reply_ok;
  char *reply;
  size_t reply_len;
  int reported;   /* the prompt told that it died */
  int busy;       /* runs a chunk typed at the prompt */
  long last_err_shown; /* job.shown after its last stderr line on the terminal */
} worker;

typedef struct job {
  int nproc, nnodes, node_rank, world;
  char master_addr[256];
  int master_port; /* the one asked for; 0: a free one */
  int port;        /* the one workers get */
  const char *bind_addr;
  char token[33], job_id[33];
  char launch_id[17];   /* this launch on this node: names its /dev/shm files */
  char shm_prefix[96];  /* "ddplua-<job_id>-<launch_id>-", as dist/pg_shm.c names them */
  int guard_fd;         /* to the guardian (guardian.c), or -1 */
  pid_t guard_pid;
  double grace;
  int max_restarts, restart;
  int prefix, quiet_ranks, bind_cores;
  const char *log_dir;
  int dump_on_exit;      /* --dump-on-exit: the flight recorder's rings at the end too */
  int dumped;            /* this group's rings were collected after a failure */
  long dumps_handled;    /* SIGUSR2s to the launcher served */
  char *flight_report;   /* what the rings said when the group failed, or NULL */
  char trace_dir[PATH_MAX]; /* --trace DIR (or DDP_TRACE), absolute; "" when none */
  int trace_ops;         /* --trace-ops (or DDP_TRACE_OPS=1) */
  double trace_since;    /* Unix time the job began: older rank files are an earlier run's */
  char exe[PATH_MAX];
  char **argv;
  cpu_set_t cpus;
  int ncpus;
  char threads[16]; /* the budget to set, "" when the user set one */
  dl_store *store;       /* node 0: the store it serves */
  dl_store *exit_client; /* other nodes: a client of it, to record exits */
  int exit_client_failed;
  worker *w;
  /* the prompt over ranks (cli/repl_dist.c) */
  int interactive;       /* --nproc N with no script, or -i */
  int per_task;          /* ddplua doctor started as one rank of srun/mpirun/...: no launcher */
  int per_task_local;    /* ... and the ranks on its node, which share /dev/shm */
  char *script;          /* the script read from stdin, or NULL */
  size_t script_len;
  int session;           /* a prompt is on: Ctrl-C and deaths are its */
  int interrupts;        /* Ctrl-Cs the prompt has not seen yet */
  int abort_session;     /* SIGTERM (or every rank gone): end the prompt */
  int at_prompt;         /* the terminal shows the prompt: clear it first */
  int prompt_dirty;      /* output went over the prompt: redraw it */
  long seq;              /* the current request */
  int bp_target;         /* index of a worker that opened a breakpoint, or -1 */
  char bp_where[256];
  int bp_done;           /* breakpoint prompts ended */
  /* pre-emption (cli/preempt.c): --signals, --save-grace */
  int pre_sigs[16], npre;
  char pre_list[128];    /* their names, "TERM,USR1": the workers' DDP_PREEMPT_SIGNALS */
  double save_grace;
  char *memory_report;   /* memory_collect's, from the last run of the group */
  int preempted;         /* the signal passed on to the workers, 0: none yet */
  int pre_logged;        /* a later one was logged (once) */
  long pre_handled;
  /* the watch loop's state */
  long shown;            /* lines written to the terminal */
  int first_failed, stopping, killed, forwarded, handled;
  double deadline, drain_until;
  struct pollfd *pfds;   /* job_turn's, 3 per worker and the wake pipe */
  struct worker **pfw;
} job;

/* launcher.c: the value a rank left under key in the job's store (node 0),
** cut to cap - 1 bytes and NUL-terminated; -1 when there is none. */
int job_store_read(job *j, const char *key, char *out, size_t cap);

/* steps.c: the ranks' step breakdowns (lua/ddp/core/steps.lua leaves them
** in the store): a straggler named during the job (steps_watch_turn, from
** the watch loop), the table of phases at its end (steps_report);
** steps_forget before the next group. */
void steps_watch_turn(job *j);
void steps_report(job *j);
void steps_forget(void);

/* memory.c: each rank's peak memory at the end of a job (the ranks leave
** theirs in the store: lua/ddp/core/memory.lua): memory_collect reads them
** while the store is open (a malloc'd text, NULL when none), memory_say
** prints it, after the failure's own lines where the job failed. */
char *memory_collect(job *j);
void memory_say(const char *text);

/* trace.c: merges the ranks' trace files at the end of a job (--trace's
** folder and those the ranks' ddp.trace.start named) into trace.json. */
void trace_finish(job *j);

/* workers.c */
enum { RUN_OK, RUN_FAILED, RUN_SIGNALED, RUN_PREEMPTED };
/* Starts the group and waits for it: all exited 0 (RUN_OK), one failed and
** the others were stopped (RUN_FAILED, *failed_ix names it), the launcher
** got SIGINT/SIGTERM (RUN_SIGNALED, job_signal() says which), or one of
** --signals, passed on for the workers to save and stop (RUN_PREEMPTED). */
int job_run_group(job *j, int *failed_ix);
/* SIGINT, SIGTERM, SIGCHLD and j's --signals go to the watch loop. */
int job_install_signals(const job *j);
int job_signal(void);
/* The status a shell would show: the code, or 128 + the signal. */
int job_exit_code(int status);
void job_say(const char *fmt, ...);
/* A text of lines built up for saying later (the flight recorder's
** verdict, the peaks at a job's end): out_say appends one line; s is NULL
** until the first, and short of a line where memory ran out. */
typedef struct out_buf {
  char *s;
  size_t len, cap;
} out_buf;
void out_say(out_buf *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
double job_now(void);
/* One turn of the watch loop: reaps, handles signals, passes on output and
** frames, waiting up to timeout_ms; 1 once every worker is gone. */
int job_turn(job *j, int timeout_ms);
/* Reads all a worker's pipes hold now (its output and frames). */
void job_drain_worker(job *j, worker *w);
/* The descriptors job_turn watches, for the prompt's own poll. */
int job_fds(job *j, struct pollfd *fds, int max);
/* Sends a frame to a worker; -1 if it is gone. */
int job_send(worker *w, const char *kind, long seq, const char *payload, size_t len);
/* Lets SIGINT reach the job (the prompt's own handler saved in *saved). */
void job_catch_sigint(struct sigaction *saved);
const char *job_describe(int status);

/* preempt.c: --signals LIST and --save-grace S (-1 after saying what is
** wrong); a "save and stop" signal passed on to every worker once (later
** ones absorbed); the workers left after the grace named before SIGKILL;
** the launcher's exit status afterwards (the workers': 0 when all exited 0). */
int preempt_setup(job *j, const char *signals, const char *save_grace);
void preempt_request(job *j, int sig);
void preempt_overdue(job *j);
int preempt_status(job *j);
const char *job_signal_name(int sig);

/* guardian.c: a process that outlives the launcher to kill what the
** workers left running and remove the launch's /dev/shm files.  Started
** before any worker; told of each worker started (watch) and reaped
** (forget); stop closes its pipe and waits for it. */
int guardian_start(job *j);
void guardian_watch(job *j, pid_t pid);
void guardian_forget(job *j, pid_t pid);
void guardian_stop(job *j);
/* Processes that left a worker's group (setsid): adopted as the workers'
** subreaper, reaped when they end, killed at the job's end (cli/guardian.c). */
void job_adopt_orphans(void);
/* 1 and the soft limit when the user's processes are bounded (ulimit -u):
** the cause of a fork's or a thread's EAGAIN (cli/workers.c). */
int job_nproc_limit(unsigned long long *lim);
void job_reap_orphans(job *j);
void job_kill_orphans(job *j);
/* Removes /dev/shm/<prefix><n> and point-to-point links <prefix><n>p<g>x<a>x<b>. */
void job_remove_shm(const char *prefix);

/* preflight.c: what the launch will get, checked before any worker starts.
** cpus fills j->cpus and j->ncpus (the affinity mask, cut to SLURM's
** allocation); launch says the warnings (stderr, and stdout too in a batch
** job) and errors, -1 on an error; doctor prints every check on stdout and
** returns the exit status (1 on an error). */
void preflight_cpus(job *j);
int preflight_launch(const job *j);
int preflight_doctor(const job *j);

/* flight.c: the flight recorder's rings.  flight_path: the file rank's ring
** lives in (its DDP_FLIGHT_FILE); flight_collect asks the live ranks for
** their Lua stacks, writes every ring to the log directory and says which
** collective diverged (why: what asked, for the message; keep: into
** j->flight_report instead of saying it now); flight_analyze
** is `ddplua analyze DIR [--entries N]`. */
void flight_path(const job *j, int rank, char *out, size_t cap);
int flight_collect(job *j, const char *why, int keep);
/* The report kept (keep: 1) goes out after the failure's summary. */
void flight_say(const char *text);

/* repl_dist.c: the prompt over ranks; target -1 for every rank, or the
** index of the worker at a breakpoint. */
void dist_session(job *j, int target);
#endif
