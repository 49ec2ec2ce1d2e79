/* workers.c -- a job's worker processes: starting them, passing on their output, their control frames, and the watch loop that notices exits and signals. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "job.h"

extern char **environ;

/* "ddplua: msg" on stderr, after what stdout holds. */
void job_say(const char *fmt, ...) {
  va_list ap;
  char msg[1024];
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fflush(stdout);
  fprintf(stderr, "%s: %s\n", CLI_NAME, msg);
  fflush(stderr);
}

void out_say(out_buf *o, const char *fmt, ...) {
  char line[2048];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  size_t len = strlen(line);
  if (o->len + len + 2 > o->cap) {
    size_t cap = (o->cap + len + 2) * 2;
    char *s = realloc(o->s, cap);
    if (!s) return;
    o->s = s, o->cap = cap;
  }
  memcpy(o->s + o->len, line, len);
  o->len += len;
  o->s[o->len++] = '\n';
  o->s[o->len] = '\0';
}

double job_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Writes all of buf; a closed terminal or a full disk must not stop the
** job, so errors are dropped. */
static void write_all(int fd, const char *buf, size_t len) {
  while (len > 0) {
    ssize_t n = write(fd, buf, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    buf += n;
    len -= (size_t)n;
  }
}

const char *job_signal_name(int sig) {
  static const struct { int sig; const char *name; } names[] = {
    {SIGHUP, "SIGHUP"}, {SIGINT, "SIGINT"}, {SIGQUIT, "SIGQUIT"},
    {SIGILL, "SIGILL"}, {SIGTRAP, "SIGTRAP"}, {SIGABRT, "SIGABRT"},
    {SIGBUS, "SIGBUS"}, {SIGFPE, "SIGFPE"}, {SIGKILL, "SIGKILL"},
    {SIGUSR1, "SIGUSR1"}, {SIGSEGV, "SIGSEGV"}, {SIGUSR2, "SIGUSR2"},
    {SIGPIPE, "SIGPIPE"}, {SIGALRM, "SIGALRM"}, {SIGTERM, "SIGTERM"},
    {SIGXCPU, "SIGXCPU"}, {SIGXFSZ, "SIGXFSZ"}, {SIGSYS, "SIGSYS"}, {SIGPWR, "SIGPWR"},
  };
  static char other[32];
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (names[i].sig == sig) return names[i].name;
  snprintf(other, sizeof other, "signal %d", sig);
  return other;
}

/* The status a shell would show: the code, or 128 + the signal. */
int job_exit_code(int status) {
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WEXITSTATUS(status);
}

static int failed(int status) {
  return WIFSIGNALED(status) || WEXITSTATUS(status) != 0;
}

/* -- Signals ------------------------------------------------------------- */

/* SIGINT, SIGTERM, SIGCHLD and the --signals only write to this pipe; the
** poll loop does the work, outside the handler. */
static int wake_pipe[2] = {-1, -1};
static volatile sig_atomic_t got_signal; /* the last SIGINT or SIGTERM */
static volatile sig_atomic_t nsignals;   /* how many came */
static unsigned long long preempt_set;   /* bit s: signal s means "save and stop" */
static volatile sig_atomic_t got_preempt; /* the last of those */
static volatile sig_atomic_t npreempts;
static volatile sig_atomic_t ndumps;     /* SIGUSR2: dump the flight recorder's rings */

static void on_signal(int sig) {
  int saved = errno;
  if (sig == SIGUSR2) {
    ndumps++;
  } else if (sig < 64 && (preempt_set >> sig & 1)) {
    got_preempt = sig;
    npreempts++;
  } else if (sig != SIGCHLD) {
    got_signal = sig;
    nsignals++;
  }
  if (write(wake_pipe[1], "x", 1) < 0) { /* full: a wake-up is pending */ }
  errno = saved;
}

static void catch_signal(int sig, struct sigaction *saved) {
  struct sigaction act;
  memset(&act, 0, sizeof act);
  act.sa_handler = on_signal;
  act.sa_flags = SA_RESTART;
  sigemptyset(&act.sa_mask);
  sigaction(sig, &act, saved);
}

int job_install_signals(const job *j) {
  if (pipe2(wake_pipe, O_CLOEXEC | O_NONBLOCK) != 0) return -1;
  for (int i = 0; i < j->npre; i++)
    if (j->pre_sigs[i] > 0 && j->pre_sigs[i] < 64) preempt_set |= 1ULL << j->pre_sigs[i];
  catch_signal(SIGINT, NULL);
  catch_signal(SIGTERM, NULL);
  catch_signal(SIGCHLD, NULL);
  catch_signal(SIGUSR2, NULL);
  for (int i = 0; i < j->npre; i++) catch_signal(j->pre_sigs[i], NULL);
  signal(SIGPIPE, SIG_IGN); /* a closed terminal: write fails instead */
  return 0;
}

int job_signal(void) { return (int)got_signal; }

/* -- Output -------------------------------------------------------------- */

static void tail_add(worker *w, const char *line, size_t len) {
  if (len > 500) len = 500;
  char *copy = malloc(len + 1);
  if (!copy) return;
  memcpy(copy, line, len);
  copy[len] = '\0';
  int slot = w->ntail % TAIL_LINES;
  free(w->tail[slot]);
  w->tail[slot] = copy;
  w->ntail++;
}

/* One line (len bytes, the newline not included: added here) to the
** terminal in one write, so lines of different ranks never mix, and to the
** rank's log.  A line ended by a carriage return (a progress bar redrawing
** itself) goes to the terminal only, ended the same way. */
static void emit(job *j, worker *w, int is_err, const char *line, size_t len, char end) {
  if (is_err && end == '\n') tail_add(w, line, len);
  int show = !(j->quiet_ranks && w->rank != 0);
  int log = w->log >= 0 && end == '\n';
  if (w->capture && end == '\r') return; /* a progress bar's redraw: the last line will do */
  if (w->capture) { /* a prompt's chunk: shown with the other ranks' at its end */
    char *grown = realloc(w->cap, w->cap_len + len + 1);
    if (grown) {
      w->cap = grown;
      memcpy(w->cap + w->cap_len, line, len);
      w->cap[w->cap_len + len] = '\n';
      w->cap_len += len + 1;
    }
    show = 0;
  }
  if (!log && !show) return;
  if (show && j->at_prompt && !j->prompt_dirty) { /* over the prompt line: clear it */
    write_all(STDOUT_FILENO, "\r\033[K", 4);
    j->prompt_dirty = 1;
  }
  char pre[24] = "";
  int plen = j->prefix ? snprintf(pre, sizeof pre, "[%d] ", w->rank) : 0;
  char *buf = malloc((size_t)plen + len + 1);
  if (!buf) return; /* no memory: this line is lost, the job goes on */
  memcpy(buf, pre, (size_t)plen);
  memcpy(buf + plen, line, len);
  buf[plen + len] = end;
  if (log) write_all(w->log, buf + plen, len + 1);
  if (show) {
    write_all(is_err ? STDERR_FILENO : STDOUT_FILENO, buf, (size_t)plen + len + 1);
    j->shown++;
    if (is_err && end == '\n') w->last_err_shown = j->shown;
  }
  free(buf);
}

/* Reads what the pipe holds and passes on each complete line; at end of
** file, the unfinished last line gets a newline. */
static int drain(job *j, worker *w, line_buf *lb, int is_err) {
  char chunk[8192];
  ssize_t n = read(lb->fd, chunk, sizeof chunk);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return 0;
  if (n > 0) {
    char *grown = realloc(lb->buf, lb->len + (size_t)n + 1);
    if (!grown) return 0;
    lb->buf = grown;
    memcpy(lb->buf + lb->len, chunk, (size_t)n);
    lb->len += (size_t)n;
    size_t start = 0;
    for (size_t i = 0; i < lb->len; i++)
      if (lb->buf[i] == '\n') {
        emit(j, w, is_err, lb->buf + start, i - start, '\n');
        start = i + 1;
      } else if (lb->buf[i] == '\r' && (i + 1 == lb->len || lb->buf[i + 1] != '\n')) {
        emit(j, w, is_err, lb->buf + start, i - start, '\r');
        start = i + 1;
      } else if (i + 1 - start >= LINE_MAX_BYTES) { /* a runaway line: in pieces */
        emit(j, w, is_err, lb->buf + start, i + 1 - start, '\n');
        start = i + 1;
      }
    memmove(lb->buf, lb->buf + start, lb->len - start);
    lb->len -= start;
    return 1;
  }
  if (lb->len > 0) { /* end of file (or an error) after a partial line */
    emit(j, w, is_err, lb->buf, lb->len, '\n');
    lb->len = 0;
  }
  close(lb->fd);
  lb->fd = -1;
  return 0;
}

/* -- The control channel ------------------------------------------------- */

int job_send(worker *w, const char *kind, long seq, const char *payload, size_t len) {
  if (w->ctl_w < 0 || w->pid <= 0) return -1;
  return frame_write(w->ctl_w, kind, seq, payload, len);
}

/* Releases the ranks waiting at a breakpoint whose prompt has ended. */
static void release_breakpoints(job *j) {
  for (int i = 0; i < j->nproc; i++) {
    worker *w = &j->w[i];
    if (w->bp_waiting && w->bp_calls <= j->bp_done) {
      job_send(w, "continue", 0, "", 0);
      w->bp_waiting = 0;
    }
  }
}

static void on_frame(job *j, worker *w, const frame *f) {
  if (strcmp(f->kind, "ready") == 0) {
    w->ready = 1;
  } else if (strcmp(f->kind, "bp") == 0) {
    w->bp_calls++;
    w->bp_waiting = 1;
    int local = f->seq >= (long)j->node_rank * j->nproc && f->seq < (long)(j->node_rank + 1) * j->nproc;
    if (w->busy) { /* ddp.breakpoint in a chunk typed at the prompt */
      job_say("rank %d: ddp.breakpoint inside a prompt's chunk does nothing", w->rank);
      w->bp_calls = j->bp_done;
      job_send(w, "continue", 0, "", 0);
      w->bp_waiting = 0;
    } else if (f->seq == w->rank) {
      j->bp_target = (int)(w - j->w);
      snprintf(j->bp_where, sizeof j->bp_where, "%.*s", (int)f->len, f->payload);
    } else if (!local) { /* its prompt is another node's: nothing to wait for here */
      w->bp_calls = j->bp_done;
      release_breakpoints(j);
    } else {
      release_breakpoints(j); /* one that arrives after the prompt ended */
    }
  } else if (f->seq == j->seq && !w->replied &&
             (strcmp(f->kind, "ok") == 0 || strcmp(f->kind, "error") == 0 ||
              strcmp(f->kind, "completion") == 0)) {
    free(w->reply);
    w->reply = malloc(f->len + 1);
    if (w->reply) {
      memcpy(w->reply, f->payload, f->len);
      w->reply[f->len] = '\0';
    }
    w->reply_len = w->reply ? f->len : 0;
    w->reply_ok = strcmp(f->kind, "error") != 0;
    w->replied = 1;
    w->busy = 0;
    /* what it printed before answering is in its pipes: take it all now */
    while (w->out.fd >= 0 && drain(j, w, &w->out, 0)) {}
    while (w->err.fd >= 0 && drain(j, w, &w->err, 1)) {}
    for (int e = 0; e < 2; e++) {
      line_buf *lb = e ? &w->err : &w->out;
      if (w->capture && lb->len > 0) { /* io.write without a newline */
        emit(j, w, e, lb->buf, lb->len, '\n');
        lb->len = 0;
      }
    }
  }
}

int job_nproc_limit(unsigned long long *lim) {
  struct rlimit np;
  if (getrlimit(RLIMIT_NPROC, &np) != 0 || np.rlim_cur == RLIM_INFINITY) return 0;
  *lim = (unsigned long long)np.rlim_cur;
  return 1;
}

/* A worker's control channel is of no more use (a garbled frame, one cut
** off): what comes on it is dropped from now on (read, so the worker's
** writes neither block nor meet a closed pipe), and a request it was
** running is answered for it, so the prompt goes on with the other ranks. */
static void ctl_lost(worker *w, const char *why) {
  job_say("rank %d: %s; its prompt is off", w->rank, why);
  w->ctl_off = 1;
  w->ctl.len = 0;
  if (w->busy && !w->replied) {
    char msg[200];
    int n = snprintf(msg, sizeof msg, "this rank's prompt is off: %s", why);
    free(w->reply);
    w->reply = strdup(msg);
    w->reply_len = w->reply ? (size_t)n : 0;
    w->reply_ok = 0;
    w->replied = 1;
    w->busy = 0;
  }
}

/* Seconds a frame begun on a control pipe may wait for its next bytes: a
** worker writes a frame in one go, so a pause this long is one that never
** ends (DDPLUA_CTL_STALL_S for tests). */
static double ctl_stall_s(void) {
  static double s;  /* read once: job_turn asks for every worker, every turn */
  if (s == 0) {
    const char *v = getenv("DDPLUA_CTL_STALL_S");
    s = v && atof(v) > 0 ? atof(v) : 10.0;
  }
  return s;
}

/* Reads frames from a worker's control pipe, each handled when whole. */
static int drain_ctl(job *j, worker *w) {
  line_buf *lb = &w->ctl;
  char chunk[8192];
  ssize_t n = read(lb->fd, chunk, sizeof chunk);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return 0;
  if (n <= 0) {
    close(lb->fd);
    lb->fd = -1;
    lb->len = 0;
    return 0;
  }
  if (w->ctl_off) return 1;
  char *grown = realloc(lb->buf, lb->len + (size_t)n + 1);
  if (!grown) return 0;
  lb->buf = grown;
  memcpy(lb->buf + lb->len, chunk, (size_t)n);
  lb->len += (size_t)n;
  w->ctl_progress = job_now();
  for (;;) {
    frame f;
    int used = frame_parse(lb->buf, lb->len, &f);
    if (used == 0) break;
    if (used < 0) {
      ctl_lost(w, "garbled control frame");
      return 0;
    }
    on_frame(j, w, &f);
    memmove(lb->buf, lb->buf + used, lb->len - (size_t)used);
    lb->len -= (size_t)used;
  }
  return 1;
}

void job_drain_worker(job *j, worker *w) {
  while (w->out.fd >= 0 && drain(j, w, &w->out, 0)) {}
  while (w->err.fd >= 0 && drain(j, w, &w->err, 1)) {}
  while (w->ctl.fd >= 0 && drain_ctl(j, w)) {}
}

/* -- Starting ------------------------------------------------------------ */

/* The parent's environment less the names we set, plus ours: built before
** fork, since the store's thread makes malloc unsafe in the child. */
static char **worker_env(const job *j, const worker *w, int ctl_r, int ctl_w) {
  static const char *const ours[] = {
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK",
    "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT", "DDP_JOB_ID",
    "DDP_STORE_TOKEN", "DDP_RESTART_COUNT", "DDP_MAX_RESTARTS", "DDP_TTY",
    "DDPLUA_CTRL", "DDP_LAUNCH_ID", "DDP_PREEMPT_SIGNALS", "DDP_FLIGHT_FILE",
    "DDP_TRACE", "DDP_TRACE_OPS",
  };
  enum { NOURS = sizeof ours / sizeof ours[0] };
  char vals[NOURS][300];
  snprintf(vals[0], 300, "%d", w->rank);
  snprintf(vals[1], 300, "%d", w->local_rank);
  snprintf(vals[2], 300, "%d", j->world);
  snprintf(vals[3], 300, "%d", j->nproc);
  snprintf(vals[4], 300, "%d", j->node_rank);
  snprintf(vals[5], 300, "%d", j->node_rank);
  snprintf(vals[6], 300, "%s", j->master_addr);
  snprintf(vals[7], 300, "%d", j->port);
  snprintf(vals[8], 300, "%s", j->job_id);
  snprintf(vals[9], 300, "%s", j->token);
  snprintf(vals[10], 300, "%d", j->restart);
  snprintf(vals[11], 300, "%d", j->max_restarts);
  /* workers write into pipes: tell them whether their lines reach a
  ** terminal (progress bars redraw there, print plain lines elsewhere) */
  snprintf(vals[12], 300, "%d", isatty(STDOUT_FILENO) && !(j->quiet_ranks && w->rank != 0));
  /* the control channel's ends, in the worker (cli/link.c) */
  snprintf(vals[13], 300, "%d,%d", ctl_r, ctl_w);
  snprintf(vals[14], 300, "%s", j->launch_id);
  /* ddp.should_stop arms the worker for the same signals (dist/preempt.c) */
  snprintf(vals[15], 300, "%s", j->pre_list);
  /* the flight recorder's ring, a file the launcher reads too (cli/flight.c) */
  flight_path(j, w->rank, vals[16], 300);
  /* --trace: ddp.init starts it (lua/ddp/trace.lua); the path fits (launcher.c) */
  snprintf(vals[17], 300, "%.280s", j->trace_dir);
  snprintf(vals[18], 300, "%s", j->trace_ops ? "1" : "");

  size_t n = 0;
  while (environ[n]) n++;
  char **env = calloc(n + NOURS + 8, sizeof *env);
  if (!env) return NULL;
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    int skip = 0;
    for (int o = 0; o < NOURS && !skip; o++) {
      size_t len = strlen(ours[o]);
      skip = strncmp(environ[i], ours[o], len) == 0 && environ[i][len] == '=';
    }
    if (!skip) env[k++] = strdup(environ[i]);
  }
  for (int o = 0; o < NOURS; o++) {
    size_t len = strlen(ours[o]) + strlen(vals[o]) + 2;
    if ((env[k] = malloc(len))) snprintf(env[k++], len, "%s=%s", ours[o], vals[o]);
  }
  if (j->threads[0]) { /* the launcher's budget (the user set none) */
    static const char *const names[] = {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                        "DDPLUA_NUM_THREADS"};
    for (int t = 0; t < 3; t++) {
      size_t len = strlen(names[t]) + strlen(j->threads) + 2;
      if ((env[k] = malloc(len))) snprintf(env[k++], len, "%s=%s", names[t], j->threads);
    }
  }
  /* main.c re-execs itself to set these; the workers need not */
  if (!getenv("OPENBLAS_THREAD_TIMEOUT")) env[k++] = strdup("OPENBLAS_THREAD_TIMEOUT=4");
  if (!getenv("OMP_WAIT_POLICY") && !getenv("GOMP_SPINCOUNT"))
    env[k++] = strdup("OMP_WAIT_POLICY=PASSIVE");
  env[k] = NULL;
  return env;
}

static void free_env(char **env) {
  if (!env) return;
  for (char **e = env; *e; e++) free(*e);
  free(env);
}

/* This worker's share of the launcher's CPUs for --bind-cores: an equal
** slice, or one CPU (round robin) when there are more workers than CPUs. */
static void worker_cpus(const job *j, int local_rank, cpu_set_t *set) {
  int ids[CPU_SETSIZE], n = 0;
  for (int c = 0; c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, &j->cpus)) ids[n++] = c;
  CPU_ZERO(set);
  if (n == 0) return;
  int per = n / j->nproc;
  if (per < 1) {
    CPU_SET(ids[local_rank % n], set);
    return;
  }
  for (int i = local_rank * per; i < (local_rank + 1) * per; i++) CPU_SET(ids[i], set);
}

/* Forks and execs one worker; returns 0, or -1 after saying why. */
static int start_worker(job *j, worker *w) {
  /* stdout, stderr, commands to it, frames from it */
  int p[4][2], made = 0;
  for (; made < 4; made++)
    if (pipe2(p[made], O_CLOEXEC) != 0) break;
  if (made < 4) {
    int saved = errno;
    for (int k = 0; k < made; k++) { close(p[k][0]); close(p[k][1]); }
    errno = saved;
    goto fail_os;
  }
  int out[2] = {p[0][0], p[0][1]}, err[2] = {p[1][0], p[1][1]};
  int cmd_r = p[2][0], cmd_w = p[2][1], rep_r = p[3][0], rep_w = p[3][1];
  char **env = worker_env(j, w, cmd_r, rep_w);
  cpu_set_t set;
  worker_cpus(j, w->local_rank, &set);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    /* Only system calls from here to exec: the store's thread may have
    ** held a lock at the fork. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127); /* the launcher died before prctl */
    setpgid(0, 0); /* the terminal's Ctrl-C reaches the launcher only, once */
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigaction(SIGPIPE, &dfl, NULL);
    sigaction(SIGINT, &dfl, NULL);
    sigaction(SIGTERM, &dfl, NULL);
    sigaction(SIGCHLD, &dfl, NULL);
    int null = open("/dev/null", O_RDONLY);
    if (null >= 0) dup2(null, STDIN_FILENO);
    dup2(out[1], STDOUT_FILENO);
    dup2(err[1], STDERR_FILENO);
    fcntl(cmd_r, F_SETFD, 0); /* the control channel survives exec */
    fcntl(rep_w, F_SETFD, 0);
    if (j->bind_cores) sched_setaffinity(0, sizeof set, &set);
    if (env) execve(j->exe, j->argv, env);
    static const char msg[] = "ddplua: cannot start the worker program\n";
    write_all(STDERR_FILENO, msg, sizeof msg - 1);
    _exit(127);
  }
  int saved = errno;
  free_env(env);
  close(out[1]);
  close(err[1]);
  close(cmd_r);
  close(rep_w);
  if (pid < 0) {
    close(out[0]);
    close(err[0]);
    close(cmd_w);
    close(rep_r);
    errno = saved;
    goto fail_os;
  }
  setpgid(pid, pid); /* also here, so a signal sent right away finds the group */
  guardian_watch(j, pid);
  w->pid = pid;
  w->status = 0;
  w->out.fd = out[0];
  w->err.fd = err[0];
  w->ctl.fd = rep_r;
  w->ctl_w = cmd_w;
  fcntl(out[0], F_SETFL, O_NONBLOCK);
  fcntl(err[0], F_SETFL, O_NONBLOCK);
  fcntl(rep_r, F_SETFL, O_NONBLOCK);
  /* `ddplua --nproc N -`: the script read from our stdin, for its stdin */
  if (j->script) job_send(w, "script", 0, j->script, j->script_len);
  return 0;
fail_os: {
  int e = errno;
  unsigned long long lim;
  if (e == EAGAIN && job_nproc_limit(&lim))
    job_say("cannot start rank %d: %s; the user's process and thread limit (ulimit -u %llu) "
            "counts every thread of every process (OpenBLAS's and ours included): raise it",
            w->rank, strerror(e), lim);
  else
    job_say("cannot start rank %d: %s", w->rank, strerror(e));
  return -1;
}
}

/* -- Watching ------------------------------------------------------------ */

static void signal_all(job *j, int sig) {
  for (int i = 0; i < j->nproc; i++)
    if (j->w[i].pid > 0) {
      /* SIGTERM here means stop now (a rank failed, or the launcher got it
      ** outside --signals): marked so, it stops even a worker that armed
      ** ddp.should_stop for SIGTERM (runtime/dist/preempt.c); sent first, so
      ** the plain one below, still pending, merges into it */
      if (sig == SIGTERM) sigqueue(j->w[i].pid, SIGTERM, (union sigval){.sival_int = DL_PREEMPT_STOP_NOW});
      kill(-j->w[i].pid, sig); /* the worker's children too */
      /* a stopped worker (SIGSTOP, Ctrl-Z) would keep SIGTERM pending
      ** through the whole grace period: let it run to take it */
      if (sig == SIGTERM) kill(-j->w[i].pid, SIGCONT);
    }
}

/* Tells the job's store that w ended and how ("ddp/exit/<rank>", counted
** in "ddp/exits"): a rank waiting in ddp.init or an object collective for
** one that exited -- with code 0 too -- names it within a second instead of
** waiting out its timeout (lua/ddp/dist/group.lua).  Node 0 serves the store;
** other nodes reach it as clients, briefly: a store that is gone is no
** reason to hold the launcher up. */
static void record_exit(job *j, const worker *w) {
  if (j->world <= 1) return;
  dl_store *s = j->store ? j->store : j->exit_client;
  if (!s && !j->exit_client_failed) {
    s = j->exit_client = dl_store_connect(j->master_addr, j->port, j->token[0] ? j->token : NULL, 2.0);
    j->exit_client_failed = s == NULL;
  }
  if (!s) return;
  char key[64], how[64];
  snprintf(key, sizeof key, "ddp/exit/%d", w->rank);
  snprintf(how, sizeof how, "%s", job_describe(w->status));
  dl_store_set_timeout(s, 2.0);
  if (dl_store_set(s, key, how, (int64_t)strlen(how)) == 0) dl_store_add(s, "ddp/exits", 1, NULL);
}

static void reap(job *j, int *first_failed) {
  for (int i = 0; i < j->nproc; i++) {
    worker *w = &j->w[i];
    int status;
    siginfo_t info;
    if (w->pid <= 0) continue;
    /* Look first (WNOWAIT): while it is a zombie its id cannot be reused,
    ** so its own children can be killed by group -- they hold the pipes
    ** open otherwise. */
    info.si_pid = 0;
    if (waitid(P_PID, (id_t)w->pid, &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid == 0)
      continue;
    kill(-w->pid, SIGKILL);
    if (waitpid(w->pid, &status, 0) != w->pid) continue;
    guardian_forget(j, w->pid);
    w->pid = 0;
    w->status = status;
    if (w->ctl_w >= 0) { close(w->ctl_w); w->ctl_w = -1; }
    if (failed(status) && *first_failed < 0) *first_failed = i;
    record_exit(j, w);
  }
}

/* The prompt's Ctrl-C goes to the job while a chunk runs (job_turn then
** counts it in j->interrupts). */
void job_catch_sigint(struct sigaction *saved) { catch_signal(SIGINT, saved); }

int job_fds(job *j, struct pollfd *fds, int max) {
  int n = 0;
  for (int i = 0; i < j->nproc; i++) {
    worker *w = &j->w[i];
    int fd[3] = {w->out.fd, w->err.fd, w->ctl.fd};
    for (int k = 0; k < 3; k++)
      if (fd[k] >= 0 && n < max) fds[n++] = (struct pollfd){fd[k], POLLIN, 0};
  }
  if (n < max) fds[n++] = (struct pollfd){wake_pipe[0], POLLIN, 0};
  return n;
}

/* Whether w's end concerns the ranks' collectives, so the flight recorder
** has something to say: it died of a signal (a rank killed, crashed), or
** its last lines are a collective's timeout, mismatch or lost peer.  A rank
** that stopped on an error of its own script is told plainly already. */
static int collective_trouble(job *j, worker *w) {
  static const char *const says[] = {"timed out after", "mismatched collectives", "has exited; gave up",
                                      "process group is unusable", "lost its connection",
                                      "Connection closed by peer", "Connection reset by peer"};
  if (WIFSIGNALED(w->status)) return 1;
  job_drain_worker(j, w);
  int n = w->ntail < TAIL_LINES ? w->ntail : TAIL_LINES;
  for (int k = w->ntail - n; k < w->ntail; k++)
    for (size_t s = 0; s < sizeof says / sizeof says[0]; s++)
      if (w->tail[k % TAIL_LINES] && strstr(w->tail[k % TAIL_LINES], says[s])) return 1;
  return 0;
}

int job_turn(job *j, int timeout_ms) {
  reap(j, &j->first_failed);
  job_reap_orphans(j);
  if (nsignals > j->handled) {
    if (j->session && got_signal == SIGINT) { /* the prompt's: it interrupts a chunk */
      j->interrupts += (int)(nsignals - j->handled);
    } else {
      if (j->session) j->abort_session = 1;
      if (!j->forwarded) {
        job_say("got %s, stopping the workers", job_signal_name(got_signal));
        signal_all(j, got_signal);
        j->forwarded = got_signal;
        if (!j->stopping) { j->stopping = 1; j->deadline = job_now() + j->grace; }
      } else if (!j->killed) { /* a second Ctrl-C: no more waiting */
        signal_all(j, SIGKILL);
        j->killed = 1;
      }
    }
    j->handled = nsignals;
  }
  if (npreempts > j->pre_handled) {
    if (j->session) j->abort_session = 1;
    preempt_request(j, (int)got_preempt);
    j->pre_handled = npreempts;
  }
  if (ndumps > j->dumps_handled) {
    j->dumps_handled = ndumps;
    flight_collect(j, "SIGUSR2; the job goes on", 0);
  }
  /* at a prompt a rank's death is told there, and the others go on */
  if (j->first_failed >= 0 && !j->stopping && !j->session) {
    /* before the others are stopped: the live ones can still say where
    ** they are (a rank that fails alone, world 1, has nobody to compare) */
    if (j->world > 1 && !j->dumped && collective_trouble(j, &j->w[j->first_failed])) {
      char why[64];
      snprintf(why, sizeof why, "rank %d failed", j->w[j->first_failed].rank);
      flight_collect(j, why, 1);
      j->dumped = 1;
    }
    j->stopping = 1;
    j->deadline = job_now() + j->grace;
    signal_all(j, SIGTERM);
  }
  if (j->stopping && !j->killed && job_now() >= j->deadline) {
    if (j->preempted && !j->forwarded) {
      preempt_overdue(j);
    } else {
      int left = 0;
      for (int i = 0; i < j->nproc; i++) left += j->w[i].pid > 0;
      if (left) job_say("%d worker%s still running after %g s, sending SIGKILL", left,
                        left == 1 ? "" : "s", j->grace);
    }
    signal_all(j, SIGKILL);
    j->killed = 1;
  }
  int running = 0, nfds = 0;
  for (int i = 0; i < j->nproc; i++) {
    worker *w = &j->w[i];
    running += w->pid > 0;
    if (w->ctl.fd >= 0 && !w->ctl_off && w->ctl.len > 0 && job_now() - w->ctl_progress > ctl_stall_s()) {
      char why[120];
      snprintf(why, sizeof why, "it sent part of a control frame and nothing more for %g s",
               ctl_stall_s());
      ctl_lost(w, why);
    }
    line_buf *lb[3] = {&w->out, &w->err, &w->ctl};
    for (int k = 0; k < 3; k++)
      if (lb[k]->fd >= 0) {
        j->pfds[nfds] = (struct pollfd){lb[k]->fd, POLLIN, 0};
        j->pfw[nfds++] = w;
      }
  }
  if (running == 0) {
    /* exited; what is left in the pipes still comes, for a moment */
    if (j->drain_until == 0) j->drain_until = job_now() + 2.0;
    if (nfds == 0 || job_now() >= j->drain_until) return 1;
  }
  j->pfds[nfds] = (struct pollfd){wake_pipe[0], POLLIN, 0};
  int timeout = timeout_ms;
  if (j->stopping && !j->killed && (int)((j->deadline - job_now()) * 1000) + 1 < timeout)
    timeout = (int)((j->deadline - job_now()) * 1000) + 1;
  if (running == 0 && timeout > 100) timeout = 100;
  if (timeout < 0) timeout = 0;
  int n = poll(j->pfds, (nfds_t)nfds + 1, timeout);
  if (n < 0 && errno != EINTR) return 1;
  if (n <= 0) return 0;
  if (j->pfds[nfds].revents) {
    char junk[64];
    while (read(wake_pipe[0], junk, sizeof junk) > 0) {}
  }
  for (int k = 0; k < nfds; k++)
    if (j->pfds[k].revents) {
      worker *w = j->pfw[k];
      int fd = j->pfds[k].fd;
      if (fd == w->ctl.fd) drain_ctl(j, w);
      else if (fd == w->out.fd) drain(j, w, &w->out, 0);
      else if (fd == w->err.fd) drain(j, w, &w->err, 1);
    }
  return 0;
}


/* Whether w's last stderr lines say only that another rank went away. */
static int peer_loss(const worker *w) {
  static const char *const says[] = {"lost its connection", "Connection closed by peer", "has exited",
                                      "Connection reset by peer"};
  int n = w->ntail < TAIL_LINES ? w->ntail : TAIL_LINES;
  for (int k = w->ntail - n; k < w->ntail; k++)
    for (size_t s = 0; s < sizeof says / sizeof says[0]; s++)
      if (w->tail[k % TAIL_LINES] && strstr(w->tail[k % TAIL_LINES], says[s])) return 1;
  return 0;
}

/* Whether w wrote an error of the program's ("ddplua: ..."). */
static int said_error(const worker *w) {
  int n = w->ntail < TAIL_LINES ? w->ntail : TAIL_LINES;
  for (int k = w->ntail - n; k < w->ntail; k++)
    if (w->tail[k % TAIL_LINES] && strncmp(w->tail[k % TAIL_LINES], CLI_NAME ": ", sizeof CLI_NAME + 1) == 0)
      return 1;
  return 0;
}

/* The rank to blame.  The first to be reaped may have failed only because
** another rank went first (a Gloo peer sees the connection close while the
** rank with the real error is still exiting): then a rank that failed on
** its own -- not stopped by our SIGTERM, and not merely reporting a lost
** peer -- is the cause. */
static int root_cause(job *j, int first) {
  if (first < 0 || !peer_loss(&j->w[first])) return first;
  for (int i = 0; i < j->nproc; i++) {
    const worker *w = &j->w[i];
    if (i == first || !failed(w->status) || peer_loss(w)) continue;
    /* stopped by us: the cause only if it had said an error of its own
    ** (our SIGTERM can catch a rank still exiting from it) */
    int ours = WIFSIGNALED(w->status) &&
               (WTERMSIG(w->status) == SIGTERM || (WTERMSIG(w->status) == SIGKILL && j->killed));
    if (!ours || said_error(w)) return i;
  }
  return first;
}

/* After the prompt over every rank: each live worker is told to quit, and
** gets a few seconds to do so. */
static void quit_workers(job *j) {
  for (int i = 0; i < j->nproc; i++) job_send(&j->w[i], "quit", 0, "", 0);
  if (!j->stopping) {
    j->stopping = 1;
    j->deadline = job_now() + (j->grace > 5 ? j->grace : 5);
  }
}

/* Starts the group and waits for it: all exited 0 (RUN_OK), one failed and
** the others were stopped (RUN_FAILED, *failed_ix names it), or the launcher
** got SIGINT/SIGTERM (RUN_SIGNALED).  Prompts open here: the one over every
** rank once all serve it (j->interactive), a breakpoint's when a rank asks. */
int job_run_group(job *j, int *failed_ix) {
  j->first_failed = -1;
  j->stopping = j->killed = j->forwarded = 0;
  j->dumped = 0;
  j->dumps_handled = ndumps;
  j->handled = nsignals;
  j->preempted = j->pre_logged = 0;
  j->pre_handled = npreempts;
  j->deadline = j->drain_until = 0;
  j->bp_target = -1;
  j->bp_done = 0;
  for (int i = 0; i < j->nproc; i++) {
    worker *w = &j->w[i];
    w->pid = 0;
    w->out.fd = w->err.fd = w->ctl.fd = w->ctl_w = -1;
    w->out.len = w->err.len = w->ctl.len = 0;
    for (int t = 0; t < TAIL_LINES; t++) { free(w->tail[t]); w->tail[t] = NULL; }
    w->ntail = 0;
    w->ready = w->bp_calls = w->bp_waiting = w->capture = w->replied = w->reported = w->busy = 0;
    w->last_err_shown = 0;
  }
  j->pfds = calloc((size_t)j->nproc * 3 + 1, sizeof *j->pfds);
  j->pfw = calloc((size_t)j->nproc * 3 + 1, sizeof *j->pfw);
  if (!j->pfds || !j->pfw) {
    job_say("out of memory");
    free(j->pfds);
    free(j->pfw);
    j->pfds = NULL;
    j->pfw = NULL;
    *failed_ix = -1;
    return RUN_SIGNALED;
  }
  for (int i = 0; i < j->nproc; i++)
    if (start_worker(j, &j->w[i]) != 0) {
      j->w[i].status = 127 << 8;
      j->first_failed = i;
      break;
    }
  int prompted = 0;
  while (!job_turn(j, 1000)) {
    if (j->stopping) continue;
    steps_watch_turn(j);
    if (j->interactive && !prompted) {
      int live = 0, ready = 0;
      for (int i = 0; i < j->nproc; i++) {
        live += j->w[i].pid > 0;
        ready += j->w[i].pid > 0 && j->w[i].ready;
      }
      if (live > 0 && ready == live) {
        prompted = 1;
        dist_session(j, -1);
        quit_workers(j);
      }
    }
    if (j->bp_target >= 0) {
      int t = j->bp_target;
      dist_session(j, t);
      j->bp_target = -1;
      j->bp_done++;
      release_breakpoints(j);
    }
  }
  for (int i = 0; i < j->nproc; i++) { /* pipes a grandchild kept open */
    worker *w = &j->w[i];
    if (w->out.fd >= 0) { close(w->out.fd); w->out.fd = -1; }
    if (w->err.fd >= 0) { close(w->err.fd); w->err.fd = -1; }
    if (w->ctl.fd >= 0) { close(w->ctl.fd); w->ctl.fd = -1; }
    if (w->ctl_w >= 0) { close(w->ctl_w); w->ctl_w = -1; }
    w->out.len = w->err.len = w->ctl.len = 0;
  }
  free(j->pfds);
  free(j->pfw);
  j->pfds = NULL;
  j->pfw = NULL;
  if (j->exit_client) dl_store_close(j->exit_client);
  j->exit_client = NULL;
  j->exit_client_failed = 0;
  *failed_ix = root_cause(j, j->first_failed);
  if (j->forwarded) return RUN_SIGNALED;
  if (j->preempted) return RUN_PREEMPTED;
  return j->first_failed >= 0 ? RUN_FAILED : RUN_OK;
}

/* "exit code 3" or "signal SIGSEGV", for the summary. */
const char *job_describe(int status) {
  static char buf[64];
  if (WIFSIGNALED(status))
    snprintf(buf, sizeof buf, "signal %s", job_signal_name(WTERMSIG(status)));
  else
    snprintf(buf, sizeof buf, "exit code %d", WEXITSTATUS(status));
  return buf;
}
