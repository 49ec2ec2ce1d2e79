/* launcher.c -- `ddplua --nproc N script.lua`: starts and watches a job's local workers, after torchrun. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "ddplua.h"

extern char **environ;

#include "job.h"

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

static const char *signal_name(int sig) {
  static const struct { int sig; const char *name; } names[] = {
    {SIGHUP, "SIGHUP"}, {SIGINT, "SIGINT"}, {SIGQUIT, "SIGQUIT"},
    {SIGILL, "SIGILL"}, {SIGTRAP, "SIGTRAP"}, {SIGABRT, "SIGABRT"},
    {SIGBUS, "SIGBUS"}, {SIGFPE, "SIGFPE"}, {SIGKILL, "SIGKILL"},
    {SIGUSR1, "SIGUSR1"}, {SIGSEGV, "SIGSEGV"}, {SIGUSR2, "SIGUSR2"},
    {SIGPIPE, "SIGPIPE"}, {SIGALRM, "SIGALRM"}, {SIGTERM, "SIGTERM"},
    {SIGXCPU, "SIGXCPU"}, {SIGXFSZ, "SIGXFSZ"}, {SIGSYS, "SIGSYS"},
  };
  static char other[32];
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (names[i].sig == sig) return names[i].name;
  snprintf(other, sizeof other, "signal %d", sig);
  return other;
}

/* The status a shell would show: the code, or 128 + the signal. */
static int exit_code(int status) {
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WEXITSTATUS(status);
}

static int failed(int status) {
  return WIFSIGNALED(status) || WEXITSTATUS(status) != 0;
}

/* -- Signals ------------------------------------------------------------- */

/* SIGINT, SIGTERM and SIGCHLD only write to this pipe; the poll loop does
** the work, outside the handler. */
static int wake_pipe[2] = {-1, -1};
static volatile sig_atomic_t got_signal; /* the last SIGINT or SIGTERM */
static volatile sig_atomic_t nsignals;   /* how many came */

static void on_signal(int sig) {
  int saved = errno;
  if (sig != SIGCHLD) {
    got_signal = sig;
    nsignals++;
  }
  if (write(wake_pipe[1], "x", 1) < 0) { /* full: a wake-up is pending */ }
  errno = saved;
}

static int install_signals(void) {
  if (pipe2(wake_pipe, O_CLOEXEC | O_NONBLOCK) != 0) return -1;
  struct sigaction act;
  memset(&act, 0, sizeof act);
  act.sa_handler = on_signal;
  act.sa_flags = SA_RESTART;
  sigemptyset(&act.sa_mask);
  sigaction(SIGINT, &act, NULL);
  sigaction(SIGTERM, &act, NULL);
  sigaction(SIGCHLD, &act, NULL);
  signal(SIGPIPE, SIG_IGN); /* a closed terminal: write fails instead */
  return 0;
}

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
  if (show) write_all(is_err ? STDERR_FILENO : STDOUT_FILENO, buf, (size_t)plen + len + 1);
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
  char *grown = realloc(lb->buf, lb->len + (size_t)n + 1);
  if (!grown) return 0;
  lb->buf = grown;
  memcpy(lb->buf + lb->len, chunk, (size_t)n);
  lb->len += (size_t)n;
  for (;;) {
    frame f;
    int used = frame_parse(lb->buf, lb->len, &f);
    if (used == 0) break;
    if (used < 0) {
      job_say("rank %d: garbled control frame; its prompt is off", w->rank);
      close(lb->fd);
      lb->fd = -1;
      lb->len = 0;
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

/* 32 hex digits from the kernel's random source, "" if it cannot be read. */
static void random_hex(char out[33]) {
  unsigned char bytes[16];
  out[0] = '\0';
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ssize_t n = read(fd, bytes, sizeof bytes);
  close(fd);
  if (n != (ssize_t)sizeof bytes) return;
  for (int i = 0; i < 16; i++) snprintf(out + 2 * i, 3, "%02x", bytes[i]);
}

/* The parent's environment less the names we set, plus ours: built before
** fork, since the store's thread makes malloc unsafe in the child. */
static char **worker_env(const job *j, const worker *w, int ctl_r, int ctl_w) {
  static const char *const ours[] = {
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK",
    "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT", "DDP_JOB_ID",
    "DDP_STORE_TOKEN", "DDP_RESTART_COUNT", "DDP_MAX_RESTARTS", "DDP_TTY",
    "DDPLUA_CTRL",
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
  /* main.c re-execs itself to set this; the workers need not */
  if (!getenv("OPENBLAS_THREAD_TIMEOUT")) env[k++] = strdup("OPENBLAS_THREAD_TIMEOUT=4");
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
fail_os:
  job_say("cannot start rank %d: %s", w->rank, strerror(errno));
  return -1;
}

/* -- Watching ------------------------------------------------------------ */

static void signal_all(job *j, int sig) {
  for (int i = 0; i < j->nproc; i++)
    if (j->w[i].pid > 0) kill(-j->w[i].pid, sig); /* the worker's children too */
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
    w->pid = 0;
    w->status = status;
    if (w->ctl_w >= 0) { close(w->ctl_w); w->ctl_w = -1; }
    if (failed(status) && *first_failed < 0) *first_failed = i;
  }
}

/* The prompt's Ctrl-C goes to the job while a chunk runs (job_turn then
** counts it in j->interrupts). */
void job_catch_sigint(struct sigaction *saved) {
  struct sigaction act;
  memset(&act, 0, sizeof act);
  act.sa_handler = on_signal;
  act.sa_flags = SA_RESTART;
  sigemptyset(&act.sa_mask);
  sigaction(SIGINT, &act, saved);
}

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

int job_turn(job *j, int timeout_ms) {
  reap(j, &j->first_failed);
  if (nsignals > j->handled) {
    if (j->session && got_signal == SIGINT) { /* the prompt's: it interrupts a chunk */
      j->interrupts += (int)(nsignals - j->handled);
    } else {
      if (j->session) j->abort_session = 1;
      if (!j->forwarded) {
        job_say("got %s, stopping the workers", signal_name(got_signal));
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
  /* at a prompt a rank's death is told there, and the others go on */
  if (j->first_failed >= 0 && !j->stopping && !j->session) {
    j->stopping = 1;
    j->deadline = job_now() + j->grace;
    signal_all(j, SIGTERM);
  }
  if (j->stopping && !j->killed && job_now() >= j->deadline) {
    int left = 0;
    for (int i = 0; i < j->nproc; i++) left += j->w[i].pid > 0;
    if (left) job_say("%d worker%s still running after %g s, sending SIGKILL", left,
                      left == 1 ? "" : "s", j->grace);
    signal_all(j, SIGKILL);
    j->killed = 1;
  }
  int running = 0, nfds = 0;
  for (int i = 0; i < j->nproc; i++) {
    worker *w = &j->w[i];
    running += w->pid > 0;
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

enum { RUN_OK, RUN_FAILED, RUN_SIGNALED };

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
static int run_group(job *j, int *failed_ix) {
  j->first_failed = -1;
  j->stopping = j->killed = j->forwarded = 0;
  j->handled = nsignals;
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
  *failed_ix = j->first_failed;
  if (j->forwarded) return RUN_SIGNALED;
  return j->first_failed >= 0 ? RUN_FAILED : RUN_OK;
}

/* "exit code 3" or "signal SIGSEGV", for the summary. */
const char *job_describe(int status) {
  static char buf[64];
  if (WIFSIGNALED(status))
    snprintf(buf, sizeof buf, "signal %s", signal_name(WTERMSIG(status)));
  else
    snprintf(buf, sizeof buf, "exit code %d", WEXITSTATUS(status));
  return buf;
}

static void summary(const job *j, int ix) {
  const worker *w = &j->w[ix];
  job_say("rank %d (local rank %d) failed with %s", w->rank, w->local_rank, job_describe(w->status));
  if (j->nproc > 1) job_say("stopped the other %d worker%s", j->nproc - 1, j->nproc == 2 ? "" : "s");
  if (w->ntail == 0) {
    job_say("rank %d wrote nothing to stderr", w->rank);
    return;
  }
  job_say("the last lines rank %d wrote to stderr:", w->rank);
  int n = w->ntail < TAIL_LINES ? w->ntail : TAIL_LINES;
  for (int k = w->ntail - n; k < w->ntail; k++)
    fprintf(stderr, "  [%d] %s\n", w->rank, w->tail[k % TAIL_LINES]);
  fflush(stderr);
}

/* -- Setup ----------------------------------------------------------------- */

/* A whole non-negative decimal number in [min, max], or -1 after saying why. */
static int parse_int(const char *opt, const char *s, int min, int max) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < min || v > max) {
    job_say("%s expects an integer in %d..%d, got '%s'", opt, min, max, s);
    return -1;
  }
  return (int)v;
}

/* Node count, node rank and master host from the options, else from SLURM. */
static int setup_nodes(job *j, const launch_opts *o) {
  const char *sn = getenv("SLURM_JOB_NUM_NODES");
  if (!sn || !*sn) sn = getenv("SLURM_NNODES");
  const char *nodes = o->nnodes ? o->nnodes : (sn && *sn ? sn : "1");
  if ((j->nnodes = parse_int("--nnodes", nodes, 1, 1 << 20)) < 0) return -1;
  const char *sr = getenv("SLURM_NODEID");
  const char *nr = o->node_rank ? o->node_rank : (sr && *sr && j->nnodes > 1 ? sr : "0");
  if ((j->node_rank = parse_int("--node-rank", nr, 0, j->nnodes - 1)) < 0) return -1;
  j->master_addr[0] = '\0';
  if (o->master_addr) {
    snprintf(j->master_addr, sizeof j->master_addr, "%s", o->master_addr);
  } else if (j->nnodes > 1) {
    const char *list = getenv("SLURM_JOB_NODELIST");
    if (!list || !*list) list = getenv("SLURM_NODELIST");
    if (!list || !*list) {
      job_say("--nnodes %d needs --master-addr HOST (the host of node 0)", j->nnodes);
      return -1;
    }
    if (nodelist_host(j->master_addr, (int)sizeof j->master_addr, list, 0) != 0) {
      job_say("SLURM_JOB_NODELIST: %s", nodelist_error());
      return -1;
    }
  } else {
    strcpy(j->master_addr, "127.0.0.1");
  }
  /* Other nodes cannot learn a port the kernel picked: fix one. */
  const char *port = o->master_port ? o->master_port : (j->nnodes > 1 ? "29500" : "0");
  if ((j->master_port = parse_int("--master-port", port, 0, 65535)) < 0) return -1;
  if (j->nnodes > 1 && j->master_port == 0) {
    job_say("--nnodes %d needs a fixed --master-port", j->nnodes);
    return -1;
  }
  struct in_addr a;
  if (j->nnodes == 1)
    j->bind_addr = inet_pton(AF_INET, j->master_addr, &a) == 1 ? j->master_addr : "127.0.0.1";
  else
    j->bind_addr = "0.0.0.0";
  return 0;
}

/* One budget for every pool of a worker (ours, OpenMP, OpenBLAS), unless
** the user chose: then the user's value fills the names left unset. */
static void setup_threads(job *j) {
  if (sched_getaffinity(0, sizeof j->cpus, &j->cpus) != 0) {
    CPU_ZERO(&j->cpus);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    for (long c = 0; c < n && c < CPU_SETSIZE; c++) CPU_SET(c, &j->cpus);
  }
  j->ncpus = CPU_COUNT(&j->cpus);
  if (j->ncpus < 1) j->ncpus = 1;
  static const char *const names[] = {"DDPLUA_NUM_THREADS", "OMP_NUM_THREADS",
                                      "OPENBLAS_NUM_THREADS"};
  const char *user = NULL;
  for (int t = 0; t < 3 && !user; t++) {
    const char *v = getenv(names[t]);
    if (v && *v) user = v;
  }
  if (user) {
    /* the user's budget: the largest pool any of the names sets */
    int most = 0;
    const char *name = names[0];
    for (int t = 0; t < 3; t++) {
      const char *v = getenv(names[t]);
      if (v && *v && atoi(v) > most) { most = atoi(v); name = names[t]; }
    }
    for (int t = 0; t < 3; t++) {
      const char *v = getenv(names[t]);
      if (!v || !*v) setenv(names[t], user, 1);
    }
    j->threads[0] = '\0';
    if ((long)most * j->nproc > j->ncpus)
      job_say("warning: %d worker%s x %d threads (%s=%d) = %ld threads on %d CPU%s: the "
              "cores are oversubscribed and every step gets slower; unset %s (the launcher then "
              "gives each worker %d) or set it to at most %d",
              j->nproc, j->nproc == 1 ? "" : "s", most, name, most, (long)most * j->nproc,
              j->ncpus, j->ncpus == 1 ? "" : "s", name,
              j->ncpus / j->nproc > 0 ? j->ncpus / j->nproc : 1,
              j->ncpus / j->nproc > 0 ? j->ncpus / j->nproc : 1);
    return;
  }
  int per = j->ncpus / j->nproc;
  if (per < 1) per = 1;
  snprintf(j->threads, sizeof j->threads, "%d", per);
  job_say("%d worker%s, %d thread%s each (%d core%s)", j->nproc, j->nproc == 1 ? "" : "s",
      per, per == 1 ? "" : "s", j->ncpus, j->ncpus == 1 ? "" : "s");
  if (j->nproc > j->ncpus)
    job_say("warning: %d workers on %d CPU%s (this process may use only those: taskset, cgroup "
            "or SLURM's --cpus-per-task): several workers share each core and every step gets "
            "slower; use --nproc %d or fewer, or give the job more CPUs",
            j->nproc, j->ncpus, j->ncpus == 1 ? "" : "s", j->ncpus);
}

/* Node 0 serves the store the workers rendezvous on. */
static int open_store(job *j) {
  if (j->node_rank != 0) {
    j->port = j->master_port;
    return 0;
  }
  j->store = dl_store_server(j->bind_addr, j->master_port, j->token);
  if (!j->store) {
    if (j->master_port)
      job_say("cannot serve the rendezvous store on %s:%d (is the port in use? --master-port 0 "
          "picks a free one): %s", j->bind_addr, j->master_port, dl_last_error());
    else
      job_say("cannot serve the rendezvous store on %s: %s", j->bind_addr, dl_last_error());
    return -1;
  }
  j->port = dl_store_port(j->store);
  return 0;
}

/* Removes the shared-memory arenas of this job's process groups
** ("/ddplua-<job_id>-<n>" and point-to-point links, see dist/pg_shm.c).  Rank 0 unlinks each once every
** rank mapped it, but a rank that dies in between leaves it: with every
** worker gone, nothing can use it any more. */
static void remove_arenas(const job *j) {
  char prefix[64];
  int n = snprintf(prefix, sizeof prefix, "ddplua-%s-", j->job_id);
  for (char *c = prefix + 7; *c && c < prefix + n - 1; c++)
    if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
          *c == '-' || *c == '_' || *c == '.')) *c = '_';
  DIR *d = opendir("/dev/shm");
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (strncmp(e->d_name, prefix, (size_t)n) != 0) continue;
    /* only "<prefix><n>" and pair links "<prefix><n>p<g>x<a>x<b>": not another job's */
    const char *k = e->d_name + n;
    if (!*k || strspn(k, "0123456789px") != strlen(k)) continue;
    char name[300];
    snprintf(name, sizeof name, "/%s", e->d_name);
    shm_unlink(name);
  }
  closedir(d);
}

static int open_logs(job *j) {
  if (!j->log_dir) return 0;
  if (mkdir(j->log_dir, 0777) != 0 && errno != EEXIST) {
    job_say("cannot create --log-dir %s: %s", j->log_dir, strerror(errno));
    return -1;
  }
  for (int i = 0; i < j->nproc; i++) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/rank%d.log", j->log_dir, j->w[i].rank);
    j->w[i].log = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (j->w[i].log < 0) {
      job_say("cannot open %s: %s", path, strerror(errno));
      return -1;
    }
  }
  return 0;
}

/* `ddplua --nproc N -` (or a pipe): the launcher reads the script, every
** worker gets it through its control channel. */
static int read_script(job *j) {
  size_t cap = 0;
  for (;;) {
    if (j->script_len + 65536 > cap) {
      char *grown = realloc(j->script, cap = cap * 2 + 65536);
      if (!grown) {
        job_say("out of memory reading the script from stdin");
        return -1;
      }
      j->script = grown;
    }
    ssize_t n = read(STDIN_FILENO, j->script + j->script_len, cap - j->script_len);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      job_say("cannot read the script from stdin: %s", strerror(errno));
      return -1;
    }
    if (n == 0) break;
    j->script_len += (size_t)n;
  }
  return 0;
}

/* -- Main ---------------------------------------------------------------- */

int launcher_run(const launch_opts *o, char **argv) {
  job j;
  memset(&j, 0, sizeof j);
  int status = 1;
  j.argv = argv;
  j.prefix = !o->no_prefix;
  j.quiet_ranks = o->quiet_ranks;
  j.bind_cores = o->bind_cores;
  j.log_dir = o->log_dir;
  j.grace = 5;
  if (o->grace) {
    char *end;
    j.grace = strtod(o->grace, &end);
    if (end == o->grace || *end || !(j.grace >= 0 && j.grace <= 86400)) {
      job_say("--grace expects seconds (0..86400), got '%s'", o->grace);
      return 1;
    }
  }
  if (o->max_restarts &&
      (j.max_restarts = parse_int("--max-restarts", o->max_restarts, 0, 1000000)) < 0)
    return 1;
  if (!o->nproc || strcmp(o->nproc, "auto") == 0) {
    int ndev = dl_cuda_device_count();
    j.nproc = ndev > 0 ? ndev : 1;
  } else if ((j.nproc = parse_int("--nproc", o->nproc, 1, 4096)) < 0) {
    return 1;
  }
  if (setup_nodes(&j, o) != 0) return 1;
  j.world = j.nnodes * j.nproc;
  j.prefix = j.prefix && j.world > 1;
  ssize_t n = readlink("/proc/self/exe", j.exe, sizeof j.exe - 1);
  if (n <= 0) {
    job_say("cannot find the program itself (/proc/self/exe): %s", strerror(errno));
    return 1;
  }
  j.exe[n] = '\0';

  /* Every node must agree on these, so they can come from outside. */
  const char *tok = getenv("DDP_STORE_TOKEN");
  if (tok && *tok) snprintf(j.token, sizeof j.token, "%.32s", tok);
  else if (j.nnodes == 1) random_hex(j.token);
  const char *id = getenv("DDP_JOB_ID");
  if (!id || !*id) id = getenv("SLURM_JOB_ID");
  if (id && *id) snprintf(j.job_id, sizeof j.job_id, "%.32s", id);
  else random_hex(j.job_id);

  j.w = calloc((size_t)j.nproc, sizeof *j.w);
  if (!j.w) {
    job_say("out of memory");
    return 1;
  }
  for (int i = 0; i < j.nproc; i++) {
    j.w[i].local_rank = i;
    j.w[i].rank = j.node_rank * j.nproc + i;
    j.w[i].log = -1;
    j.w[i].out.fd = j.w[i].err.fd = j.w[i].ctl.fd = j.w[i].ctl_w = -1;
  }
  j.interactive = o->interactive;
  if (o->stdin_script && read_script(&j) != 0) goto done;
  setup_threads(&j);
  if (install_signals() != 0) {
    job_say("cannot set up signals: %s", strerror(errno));
    goto done;
  }
  if (open_logs(&j) != 0) goto done;

  for (;;) {
    /* A fresh store each start: keys (and half-done barriers) of a failed
    ** group must not leak into the next. */
    if (open_store(&j) != 0) goto done;
    int ix = -1;
    int r = run_group(&j, &ix);
    remove_arenas(&j);
    if (j.store) {
      dl_store_close(j.store);
      j.store = NULL;
    }
    if (r == RUN_OK) {
      status = 0;
      break;
    }
    if (r == RUN_SIGNALED) {
      status = 128 + (int)got_signal;
      break;
    }
    if (j.restart < j.max_restarts) {
      j.restart++;
      job_say("rank %d failed with %s; restarting all workers (restart %d of %d)", j.w[ix].rank,
          job_describe(j.w[ix].status), j.restart, j.max_restarts);
      continue;
    }
    summary(&j, ix);
    status = exit_code(j.w[ix].status);
    break;
  }
done:
  for (int i = 0; i < j.nproc; i++) {
    if (j.w[i].log >= 0) close(j.w[i].log);
    free(j.w[i].out.buf);
    free(j.w[i].err.buf);
    free(j.w[i].ctl.buf);
    free(j.w[i].cap);
    free(j.w[i].reply);
    for (int t = 0; t < TAIL_LINES; t++) free(j.w[i].tail[t]);
  }
  free(j.w);
  free(j.script);
  return status;
}
