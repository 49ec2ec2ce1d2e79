/* guardian.c -- a small process beside the launcher that outlives it: when the launcher dies, even by kill -9, it kills what the workers left running and removes the launch's /dev/shm files. */
/*
** Workers die with the launcher (PR_SET_PDEATHSIG), but nothing kills the
** processes a worker started (`os.execute("cmd &")`), and a file in
** /dev/shm that one rank made and the others had not mapped yet (an arena,
** a half-made send/recv link) stays until someone unlinks it.  So the
** launcher forks this guardian first.  It holds the read end of a pipe
** whose only writer is the launcher: end of file means the launcher is
** gone, however it went.  Through the pipe the launcher tells it each
** worker it starts (+pid) and reaps (-pid); at end of file the guardian
** sends SIGKILL to the process group of every worker still listed (each
** worker leads its own group, and its children stay in it unless they
** leave it: setsid, a shell's job control), waits briefly for those
** groups to empty, removes the files named after this launch (the launch
** id makes them this launch's only), and exits.
** After a normal end the list is empty and the files are gone: it just
** exits, and the launcher waits for it.
**
** It runs in its own process group, ignoring the terminal's and a group's
** signals (Ctrl-C, `timeout`'s SIGTERM and SIGKILL to the launcher's group)
** and a scheduler's warnings (SLURM's --signal=USR1@T reaches every process
** of the job), which are the launcher's to handle.  Forked from a process that may have
** threads (OpenBLAS starts its own), it makes only system calls.
*/
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "job.h"

/* Removes the files in /dev/shm named "<prefix><n>" or, for point-to-point
** links, "<prefix><n>p<g>x<a>x<b>" (dist/pg_shm.c): this launch's, never
** another's.  System calls only, so the guardian may call it. */
void job_remove_shm(const char *prefix) {
  size_t n = strlen(prefix);
  int d = open("/dev/shm", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (d < 0) return;
  _Alignas(8) char buf[8192];
  ssize_t got;
  while ((got = getdents64(d, buf, sizeof buf)) > 0) {
    for (ssize_t off = 0; off < got;) {
      struct dirent64 *e = (struct dirent64 *)(buf + off);
      off += e->d_reclen;
      const char *k = e->d_name + n;
      if (strncmp(e->d_name, prefix, n) != 0 || !*k || strspn(k, "0123456789pxf") != strlen(k))
        continue;
      unlinkat(d, e->d_name, 0);
    }
  }
  close(d);
}

static void pause_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

/* The guardian's life: the pids the pipe lists, then the cleaning. */
static _Noreturn void guard(int fd, const char *prefix, pid_t *pids, int max) {
  /* and what a scheduler sends every process of a job before it ends it
  ** (SLURM's --signal: USR1 and the like), which the launcher handles */
  static const int ignored[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGTSTP, SIGTTIN, SIGTTOU, SIGPIPE,
                                SIGUSR1, SIGUSR2, SIGALRM, SIGXCPU, SIGPWR, SIGVTALRM, SIGPROF};
  for (size_t i = 0; i < sizeof ignored / sizeof ignored[0]; i++) signal(ignored[i], SIG_IGN);
  signal(SIGCHLD, SIG_DFL);
  setpgid(0, 0);
  prctl(PR_SET_NAME, "ddplua-guard");
  /* hold no terminal and no pipe of whoever started the launcher: a reader
  ** of its output sees the end when the launcher ends */
  int null = open("/dev/null", O_RDWR);
  if (null >= 0) {
    dup2(null, STDIN_FILENO);
    dup2(null, STDOUT_FILENO);
    dup2(null, STDERR_FILENO);
  }
  if (fd != 3 && dup2(fd, 3) == 3) fd = 3;
  close_range(4, ~0U, 0);
  int n = 0;
  int32_t recs[256];
  size_t have = 0; /* bytes of recs filled */
  for (;;) {
    ssize_t r = read(fd, (char *)recs + have, sizeof recs - have);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break; /* the launcher is gone */
    have += (size_t)r;
    size_t whole = have / sizeof recs[0];
    for (size_t i = 0; i < whole; i++) {
      pid_t p = recs[i] > 0 ? recs[i] : -recs[i];
      int at = -1;
      for (int k = 0; k < n && at < 0; k++)
        if (pids[k] == p) at = k;
      if (recs[i] > 0 && at < 0 && n < max) pids[n++] = p;
      else if (recs[i] < 0 && at >= 0) pids[at] = pids[--n];
    }
    have -= whole * sizeof recs[0];
    memmove(recs, recs + whole, have);
  }
  for (int k = 0; k < n; k++) kill(-pids[k], SIGKILL);
  /* until every group is empty, so that no process of it is still making
  ** a file; at most 250 ms, as zombies count and not every container's
  ** init reaps them (a killed process ends its system call and dies in far
  ** less) */
  for (int t = 0; t < 25; t++) {
    int left = 0;
    for (int k = 0; k < n; k++) left += kill(-pids[k], 0) == 0;
    if (!left) break;
    pause_ms(10);
  }
  job_remove_shm(prefix);
  _exit(0);
}

int guardian_start(job *j) {
  j->guard_fd = -1;
  j->guard_pid = 0;
  int p[2];
  /* twice the workers: a restarted group's pids come before the old ones go */
  pid_t *pids = calloc((size_t)j->nproc * 2, sizeof *pids);
  if (!pids || pipe2(p, O_CLOEXEC) != 0) {
    free(pids);
    return -1;
  }
  pid_t pid = fork();
  if (pid == 0) {
    close(p[1]);
    guard(p[0], j->shm_prefix, pids, j->nproc * 2);
  }
  int saved = errno;
  free(pids);
  close(p[0]);
  if (pid < 0) {
    close(p[1]);
    errno = saved;
    return -1;
  }
  /* never block the launcher: a record lost to a stopped guardian only
  ** weakens the cleaning */
  fcntl(p[1], F_SETFL, O_NONBLOCK);
  j->guard_fd = p[1];
  j->guard_pid = pid;
  return 0;
}

static void tell(job *j, int32_t rec) {
  if (j->guard_fd < 0) return;
  ssize_t r;
  do r = write(j->guard_fd, &rec, sizeof rec); /* 4 bytes: one atomic write */
  while (r < 0 && errno == EINTR);
}

void guardian_watch(job *j, pid_t pid) { tell(j, (int32_t)pid); }
void guardian_forget(job *j, pid_t pid) { tell(j, -(int32_t)pid); }

void guardian_stop(job *j) {
  if (j->guard_fd >= 0) close(j->guard_fd);
  j->guard_fd = -1;
  if (j->guard_pid > 0)
    while (waitpid(j->guard_pid, NULL, 0) < 0 && errno == EINTR) {}
  j->guard_pid = 0;
}

/* -- Orphans: what a worker's children leave behind ------------------------ */

/* A process that leaves its worker's group (setsid, a daemon) escapes the
** group kill at a worker's end.  As the launcher is the workers' child
** subreaper, such a process, once its parent ends, is the launcher's child
** rather than init's: job_reap_orphans reaps those that end during the
** job, and job_kill_orphans, once every worker has ended, kills the rest
** (and what they leave in turn, which comes to us too). */
void job_adopt_orphans(void) { prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); }

static int is_ours(const job *j, pid_t pid) {
  if (pid == j->guard_pid) return 1;
  for (int i = 0; i < j->nproc; i++)
    if (j->w[i].pid == pid) return 1;
  return 0;
}

void job_reap_orphans(job *j) {
  for (int n = 0; n < 64; n++) {
    siginfo_t info;
    info.si_pid = 0;
    if (waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid == 0) return;
    if (is_ours(j, info.si_pid)) return;  /* reap() takes a worker's; the guardian is waited for */
    waitpid(info.si_pid, NULL, 0);
  }
}

/* The children of this process (its parent pid in /proc/PID/stat), but the
** guardian, into pids (cap): how many. */
static int children(const job *j, pid_t *pids, int cap) {
  DIR *d = opendir("/proc");
  if (!d) return 0;
  pid_t self = getpid();
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) && n < cap) {
    char *end;
    long pid = strtol(e->d_name, &end, 10);
    if (*end || pid <= 0 || pid == j->guard_pid) continue;
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ssize_t r = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (r <= 0) continue;
    buf[r] = '\0';
    char *paren = strrchr(buf, ')');  /* the name may hold spaces and parentheses */
    int ppid = 0;
    char state;
    if (paren && sscanf(paren + 1, " %c %d", &state, &ppid) == 2 && ppid == self) pids[n++] = (pid_t)pid;
  }
  closedir(d);
  return n;
}

void job_kill_orphans(job *j) {
  pid_t pids[256];
  for (int round = 0; round < 100; round++) {  /* 100 x 20 ms at most */
    int n = children(j, pids, 256);
    if (n == 0) return;
    for (int k = 0; k < n; k++) kill(pids[k], SIGKILL);
    for (int k = 0; k < n; k++) waitpid(pids[k], NULL, WNOHANG);
    pause_ms(20);
    for (int k = 0; k < n; k++) waitpid(pids[k], NULL, WNOHANG);
  }
}
