/* launcher.c -- `ddplua --nproc N script.lua`: sets up a job (nodes, threads, store, logs) and runs its workers until done, after torchrun. */
#include <arpa/inet.h>
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
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "job.h"

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


static void summary(const job *j, int ix) {
  const worker *w = &j->w[ix];
  if (ix != j->first_failed && j->first_failed >= 0)  /* workers.c's root_cause */
    job_say("rank %d (local rank %d) failed: it wrote the error below and was stopped (%s) while exiting; "
            "rank %d only lost its connection to it", w->rank, w->local_rank, job_describe(w->status),
            j->w[j->first_failed].rank);
  else
    job_say("rank %d (local rank %d) failed with %s", w->rank, w->local_rank, job_describe(w->status));
  if (j->nproc > 1) job_say("stopped the other %d worker%s", j->nproc - 1, j->nproc == 2 ? "" : "s");
  if (w->ntail == 0) {
    job_say("rank %d wrote nothing to stderr", w->rank);
    return;
  }
  /* its last words are the terminal's last lines already (a usage error,
  ** a short traceback): no need to say them twice */
  if (w->last_err_shown > 0 && w->last_err_shown == j->shown) return;
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

/* A launcher is one per node.  Started as several tasks of one SLURM step
** or MPI job on a node (`srun --ntasks-per-node=2 ddplua --nproc 2`), each
** would run a world of its own where one was meant: refused, with the
** lines that work.  -1 after saying so. */
static int check_one_per_node(const dl_launch *l) {
  if ((l->kind != DL_LAUNCH_SLURM && l->kind != DL_LAUNCH_MPI) || l->local_world_size <= 1) return 0;
  if (l->kind == DL_LAUNCH_SLURM)
    job_say("this SLURM step runs %d tasks on each node (%s) and each task is a launcher (ddplua --nproc): "
            "%d independent worlds per node instead of one job. Either one launcher per node: "
            "`srun --ntasks-per-node=1 ddplua --nproc K train.lua` (sbatch: #SBATCH --ntasks-per-node=1, "
            "--cpus-per-task=<cores>), or one task per rank without a launcher: `srun --ntasks-per-node=K "
            "ddplua train.lua` (docs/clusters.md)", l->local_world_size, l->vars, l->local_world_size);
  else
    job_say("mpirun started %d copies of the launcher on this node (%s): %d independent worlds instead of one "
            "job. Either `mpirun -np N ddplua train.lua` (one process per rank, no --nproc), or one launcher "
            "per node: `mpirun --map-by ppr:1:node ddplua --nproc K train.lua` (docs/clusters.md)",
            l->local_world_size, l->vars, l->local_world_size);
  return -1;
}

/* Node count, node rank and master host from the options, else from SLURM. */
static int setup_nodes(job *j, const launch_opts *o) {
  dl_launch l;
  if (dl_launch_detect(&l) != 0) {
    job_say("%s", dl_last_error());
    return -1;
  }
  if (check_one_per_node(&l) != 0) return -1;
  /* an srun step of one task per node: its own nodes (the step may use
  ** fewer than the allocation) */
  int step = l.kind == DL_LAUNCH_SLURM;
  char step_nodes[16], step_node[16];
  snprintf(step_nodes, sizeof step_nodes, "%d", l.nnodes);
  snprintf(step_node, sizeof step_node, "%d", l.node_rank);
  const char *sn = step ? step_nodes : getenv("SLURM_JOB_NUM_NODES");
  if (!sn || !*sn) sn = getenv("SLURM_NNODES");
  const char *nodes = o->nnodes ? o->nnodes : (sn && *sn ? sn : "1");
  if ((j->nnodes = parse_int("--nnodes", nodes, 1, 1 << 20)) < 0) return -1;
  const char *sr = step ? step_node : getenv("SLURM_NODEID");
  const char *nr = o->node_rank ? o->node_rank : (sr && *sr && j->nnodes > 1 ? sr : "0");
  if ((j->node_rank = parse_int("--node-rank", nr, 0, j->nnodes - 1)) < 0) return -1;
  j->master_addr[0] = '\0';
  if (o->master_addr) {
    snprintf(j->master_addr, sizeof j->master_addr, "%s", o->master_addr);
  } else if (j->nnodes > 1 && step && !o->nnodes) {
    snprintf(j->master_addr, sizeof j->master_addr, "%s", l.master_addr);
  } else if (j->nnodes > 1) {
    const char *list = getenv("SLURM_JOB_NODELIST");
    if (!list || !*list) list = getenv("SLURM_NODELIST");
    if (!list || !*list) {
      job_say("--nnodes %d needs --master-addr HOST (the host of node 0)", j->nnodes);
      return -1;
    }
    if (dl_slurm_nodelist_host(j->master_addr, (int)sizeof j->master_addr, list, 0) != 0) {
      job_say("SLURM_JOB_NODELIST: %s", dl_last_error());
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
** the user chose: then the user's value fills the names left unset.  The
** CPUs (j->ncpus) are preflight_cpus'. */
static void setup_threads(job *j) {
  static const char *const names[] = {"DDPLUA_NUM_THREADS", "OMP_NUM_THREADS",
                                      "OPENBLAS_NUM_THREADS"};
  const char *user = NULL;
  for (int t = 0; t < 3 && !user; t++) {
    const char *v = getenv(names[t]);
    if (v && *v) user = v;
  }
  if (user) {
    /* the user's budget (preflight.c warns if it oversubscribes the CPUs) */
    for (int t = 0; t < 3; t++) {
      const char *v = getenv(names[t]);
      if (!v || !*v) setenv(names[t], user, 1);
    }
    j->threads[0] = '\0';
    return;
  }
  int per = j->ncpus / j->nproc;
  if (per < 1) per = 1;
  snprintf(j->threads, sizeof j->threads, "%d", per);
  job_say("%d worker%s, %d thread%s each (%d core%s)", j->nproc, j->nproc == 1 ? "" : "s",
      per, per == 1 ? "" : "s", j->ncpus, j->ncpus == 1 ? "" : "s");
}

/* Node 0 serves the store the workers rendezvous on. */
static int open_store(job *j) {
  if (j->node_rank != 0) {
    j->port = j->master_port;
    return 0;
  }
  j->store = dl_store_server(j->bind_addr, j->master_port, j->token);
  if (!j->store) {
    char why[512];
    snprintf(why, sizeof why, "%s", dl_last_error());
    if (!j->master_port) {
      unsigned long long lim;
      int nproc = strstr(why, "Resource temporarily unavailable") && job_nproc_limit(&lim);
      job_say("cannot serve the rendezvous store on %s: %s%s", j->bind_addr, why,
              nproc ? " (its thread: the user's process and thread limit, ulimit -u, is reached; raise it)" : "");
      return -1;
    }
    /* who holds the port: this job's store (two launchers as node 0),
    ** another job's, or another program */
    dl_store *other = strstr(why, "in use") ? dl_store_connect("127.0.0.1", j->master_port,
                                                               j->token[0] ? j->token : NULL, 1.0) : NULL;
    const char *probe = other ? "" : dl_last_error();
    if (other) {
      dl_store_close(other);
      job_say("cannot serve the rendezvous store on %s:%d: a launcher of this same job already serves it "
              "on this node -- two launchers are node 0 of one job (started twice, or two steps sharing "
              "--master-port); start one launcher per node (docs/clusters.md)", j->bind_addr, j->master_port);
    } else if (strstr(why, "in use") && strstr(probe, "belongs to another job")) {
      job_say("cannot serve the rendezvous store on %s:%d: another ddplua job's store holds the port; give "
              "this job its own --master-port (or MASTER_PORT)", j->bind_addr, j->master_port);
    } else if (strstr(why, "in use") && strstr(probe, "is not a ddplua store")) {
      job_say("cannot serve the rendezvous store on %s:%d: another program holds the port (not a ddplua "
              "store); choose another --master-port (0 picks a free one on one node)", j->bind_addr,
              j->master_port);
    } else {
      job_say("cannot serve the rendezvous store on %s:%d (is the port in use? --master-port 0 "
              "picks a free one): %s", j->bind_addr, j->master_port, why);
    }
    return -1;
  }
  j->port = dl_store_port(j->store);
  return 0;
}

/* The job id and a launch id of this launcher's own: workers get both
** (DDP_JOB_ID, DDP_LAUNCH_ID), and dist/pg_shm.c names its files
** "/ddplua-<job_id>-<launch_id>-<n>...", so that two launches sharing a job
** id (SLURM job steps of one allocation share SLURM_JOB_ID) never use, or
** clean up, each other's.  The launch id is per node: every node has its
** own /dev/shm, and only one node's workers (all started by this launcher)
** share a name; the job id, which keys the store across nodes, is the same
** on every node. */
static void setup_ids(job *j) {
  const char *id = getenv("DDP_JOB_ID");
  if (!id || !*id) id = getenv("SLURM_JOB_ID");
  if (id && *id) snprintf(j->job_id, sizeof j->job_id, "%.32s", id);
  else random_hex(j->job_id);
  char r[33];
  random_hex(r);
  if (r[0]) snprintf(j->launch_id, sizeof j->launch_id, "%.16s", r);
  else /* no /dev/urandom: our pid is unique on this node while we live */
    snprintf(j->launch_id, sizeof j->launch_id, "p%ld", (long)getpid());
  /* as pg_clean_id spells the id in names: other bytes become '_' */
  int n = snprintf(j->shm_prefix, sizeof j->shm_prefix, "ddplua-%s-%s-", j->job_id, j->launch_id);
  for (char *c = j->shm_prefix + 7; c < j->shm_prefix + n - 1; c++)
    if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
          *c == '-' || *c == '_' || *c == '.')) *c = '_';
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

/* The store holds a descriptor per rank (and node 0's launcher serves all
** of them), so the usual soft limit of 1,024 caps a job near 1,000 ranks:
** raise it to the hard limit, as a job scheduler would not.  Best effort;
** workers inherit it. */
static void raise_nofile(void) {
  struct rlimit r;
  if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    setrlimit(RLIMIT_NOFILE, &r);
  }
}

/* --trace DIR (or DDP_TRACE from the environment): made, and named by its
** absolute path for the workers (DDP_TRACE), which start the trace at
** ddp.init; --trace-ops (or DDP_TRACE_OPS=1).  -1 after saying what failed. */
static int setup_trace(job *j, const launch_opts *o) {
  const char *dir = o->trace_dir ? o->trace_dir : getenv("DDP_TRACE");
  const char *ops = getenv("DDP_TRACE_OPS");
  j->trace_ops = o->trace_ops || (ops && strcmp(ops, "1") == 0);
  j->trace_dir[0] = '\0';
  j->trace_since = (double)time(NULL);
  if (!dir || !*dir) {
    if (o->trace_ops) {
      job_say("--trace-ops adds to a trace: give --trace DIR too");
      return -1;
    }
    return 0;
  }
  if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
    job_say("cannot create the --trace folder %s: %s", dir, strerror(errno));
    return -1;
  }
  char abs[PATH_MAX];
  if (!realpath(dir, abs)) {
    job_say("--trace %s: %s", dir, strerror(errno));
    return -1;
  }
  if (strlen(abs) > 280) {
    job_say("--trace %s: the folder's path is too long (%zu bytes; at most 280)", dir, strlen(abs));
    return -1;
  }
  snprintf(j->trace_dir, sizeof j->trace_dir, "%s", abs);
  return 0;
}

/* The job's own options (--grace, --signals, --save-grace, --max-restarts,
** --nproc) and its nodes;
** -1 after saying which is wrong. */
static int setup_options(job *j, const launch_opts *o, char **argv) {
  j->argv = argv;
  j->prefix = !o->no_prefix;
  j->quiet_ranks = o->quiet_ranks;
  j->bind_cores = o->bind_cores;
  j->log_dir = o->log_dir;
  j->dump_on_exit = o->dump_on_exit;
  if (setup_trace(j, o) != 0) return -1;
  j->interactive = o->interactive;
  j->grace = 5;
  if (o->grace) {
    char *end;
    j->grace = strtod(o->grace, &end);
    if (end == o->grace || *end || !(j->grace >= 0 && j->grace <= 86400)) {
      job_say("--grace expects seconds (0..86400), got '%s'", o->grace);
      return -1;
    }
  }
  if (preempt_setup(j, o->signals, o->save_grace) != 0) return -1;
  if (o->max_restarts &&
      (j->max_restarts = parse_int("--max-restarts", o->max_restarts, 0, 1000000)) < 0)
    return -1;
  if (!o->nproc || strcmp(o->nproc, "auto") == 0) {
    int ndev = dl_cuda_device_count();
    j->nproc = ndev > 0 ? ndev : 1;
  } else if ((j->nproc = parse_int("--nproc", o->nproc, 1, 4096)) < 0) {
    return -1;
  }
  if (setup_nodes(j, o) != 0) return -1;
  j->world = j->nnodes * j->nproc;
  j->prefix = j->prefix && j->world > 1;
  return 0;
}

/* The program the workers run: this one (/proc/self/exe). */
static int find_program(job *j) {
  ssize_t n = readlink("/proc/self/exe", j->exe, sizeof j->exe - 1);
  if (n <= 0) {
    job_say("cannot find the program itself (/proc/self/exe): %s", strerror(errno));
    return -1;
  }
  j->exe[n] = '\0';
  return 0;
}

/* The store's token and the job's ids.  Every node must agree on the
** token, so it can come from outside (DDP_STORE_TOKEN); a single node
** makes its own. */
static void setup_token(job *j) {
  const char *tok = getenv("DDP_STORE_TOKEN");
  if (tok && *tok) snprintf(j->token, sizeof j->token, "%.32s", tok);
  else if (j->nnodes == 1) random_hex(j->token);
  else {
    /* the launchers of one srun step (one per node) agree on the token
    ** dist/launch_env.c derives from the step's id: another job's
    ** launchers on the port are refused, and told apart */
    dl_launch l;
    if (dl_launch_detect(&l) == 0 && l.kind == DL_LAUNCH_SLURM)
      snprintf(j->token, sizeof j->token, "%s", l.token);
  }
  setup_ids(j);
}

/* This node's workers, none started yet. */
static int alloc_workers(job *j) {
  j->w = calloc((size_t)j->nproc, sizeof *j->w);
  if (!j->w) {
    job_say("out of memory");
    return -1;
  }
  for (int i = 0; i < j->nproc; i++) {
    j->w[i].local_rank = i;
    j->w[i].rank = j->node_rank * j->nproc + i;
    j->w[i].log = -1;
    j->w[i].out.fd = j->w[i].err.fd = j->w[i].ctl.fd = j->w[i].ctl_w = -1;
  }
  return 0;
}

/* What comes before any worker: the guardian first (if this process is
** killed, it cleans up), the script from stdin, the signals and the log
** files.  -1 after saying what failed. */
static int prepare_start(job *j, const launch_opts *o) {
  if (guardian_start(j) != 0)
    job_say("warning: cannot start the guardian process (%s); if the launcher is killed, "
            "processes its workers started and files in /dev/shm may be left", strerror(errno));
  job_adopt_orphans();  /* after the guardian: it is no worker's */
  if (o->stdin_script && read_script(j) != 0) return -1;
  if (job_install_signals(j) != 0) {
    job_say("cannot set up signals: %s", strerror(errno));
    return -1;
  }
  return open_logs(j);
}

int job_store_read(job *j, const char *key, char *out, size_t cap) {
  const char *keys[1] = {key};
  if (!j->store || cap == 0 || dl_store_check(j->store, keys, 1) != 1) return -1;
  int64_t len = 0;
  char *v = dl_store_get(j->store, key, 1.0, &len);
  if (!v) return -1;
  size_t n = (size_t)len < cap - 1 ? (size_t)len : cap - 1;
  memcpy(out, v, n);
  out[n] = '\0';
  free(v);
  return 0;
}

/* The end-of-job warning of a job that waited for its data: each rank's
** DataLoaders leave their wait in the store ("ddp/data/<rank>": wait_s
** total_s batches, lua/ddp/data/loader.lua); a rank whose loop spent more
** than a tenth of its time waiting is named, with the fix.  Only the
** launcher that serves the store sees every rank. */
static void data_wait_report(job *j) {
  if (!j->store) return;
  int slow = 0, worst = -1;
  double worst_frac = 0, worst_wait = 0;
  for (int r = 0; r < j->world; r++) {
    char key[64];
    snprintf(key, sizeof key, "ddp/data/%d", r);
    char buf[128];
    if (job_store_read(j, key, buf, sizeof buf) != 0) continue;
    double wait = 0, total = 0;
    long batches = 0;
    if (sscanf(buf, "%lf %lf %ld", &wait, &total, &batches) != 3 || total <= 0 || batches < 20) continue;
    double frac = wait / total;
    if (frac <= 0.10) continue;
    slow++;
    if (frac > worst_frac) worst_frac = frac, worst = r, worst_wait = wait;
  }
  if (slow == 0) return;
  job_say("%d of %d rank%s spent more than 10%% of the training loop waiting for data (rank %d: %.0f%%, %.1f s): "
          "give the DataLoader more workers (num_workers = 2 or more) or faster data (tar shards, a local copy, "
          "smaller images)", slow, j->world, j->world == 1 ? "" : "s", worst, 100 * worst_frac, worst_wait);
}

/* One run of the group, on a fresh store each time: keys (and half-done
** barriers) of a failed group must not leak into the next.  RUN_* (-1: no
** store); *ix names the failed worker. */
static int run_once(job *j, int *ix) {
  if (open_store(j) != 0) return -1;
  *ix = -1;
  int r = job_run_group(j, ix);
  free(j->memory_report);
  /* after a failure too (said after its lines): a rank that ran out of
  ** memory left its last look */
  j->memory_report = r == RUN_OK || r == RUN_FAILED ? memory_collect(j) : NULL;
  if (r == RUN_OK) {
    steps_report(j);
    data_wait_report(j);
    memory_say(j->memory_report);
  }
  steps_forget();
  if (j->dump_on_exit) flight_collect(j, "--dump-on-exit", 0);
  trace_finish(j);
  /* a rank that died between making a file and every rank mapping it
  ** left it; with every worker gone, nothing can use it any more */
  job_remove_shm(j->shm_prefix);
  if (j->store) {
    dl_store_close(j->store);
    j->store = NULL;
  }
  return r;
}

/* The exit status of a group that failed for good, after its summary. */
static int give_up(job *j, int ix) {
  summary(j, ix);
  if (j->flight_report) flight_say(j->flight_report);
  memory_say(j->memory_report);
  /* a blamed rank we stopped has no code of its own: the first one's */
  return job_exit_code(j->w[ix != j->first_failed && j->first_failed >= 0 ? j->first_failed : ix].status);
}

/* Runs the group until it succeeds, is signalled, or fails with no
** restart left (--max-restarts); the launcher's exit status. */
static int run_with_restarts(job *j) {
  for (;;) {
    int ix = -1;
    int r = run_once(j, &ix);
    if (r < 0) return 1;
    if (r == RUN_OK) return 0;
    if (r == RUN_SIGNALED) return 128 + job_signal();
    if (r == RUN_PREEMPTED) return preempt_status(j);  /* never restarted: the job is ending */
    if (j->restart >= j->max_restarts) return give_up(j, ix);
    if (j->flight_report) flight_say(j->flight_report);
    free(j->flight_report);
    j->flight_report = NULL;
    j->restart++;
    job_say("rank %d failed with %s; restarting all workers (restart %d of %d)", j->w[ix].rank,
            job_describe(j->w[ix].status), j->restart, j->max_restarts);
  }
}

/* Closes the log files and frees what the workers' records hold. */
static void free_job(job *j) {
  free(j->flight_report);
  free(j->memory_report);
  for (int i = 0; i < j->nproc; i++) {
    if (j->w[i].log >= 0) close(j->w[i].log);
    free(j->w[i].out.buf);
    free(j->w[i].err.buf);
    free(j->w[i].ctl.buf);
    free(j->w[i].cap);
    free(j->w[i].reply);
    for (int t = 0; t < TAIL_LINES; t++) free(j->w[i].tail[t]);
  }
  free(j->w);
  free(j->script);
}

int launcher_run(const launch_opts *o, char **argv) {
  raise_nofile();
  job j;
  memset(&j, 0, sizeof j);
  j.guard_fd = -1;
  if (setup_options(&j, o, argv) != 0 || find_program(&j) != 0) return 1;
  setup_token(&j);
  if (alloc_workers(&j) != 0) return 1;
  /* the checks, before anything is started and before the thread budget
  ** fills the thread variables the user left unset */
  preflight_cpus(&j);
  if (preflight_launch(&j) != 0) {
    free_job(&j);
    return 1;
  }
  setup_threads(&j);
  int status = prepare_start(&j, o) == 0 ? run_with_restarts(&j) : 1;
  job_kill_orphans(&j);
  guardian_stop(&j);
  free_job(&j);
  return status;
}

/* `ddplua doctor [launcher options]`: the launch's checks, every one shown. */
int launcher_doctor(const launch_opts *o) {
  job j;
  memset(&j, 0, sizeof j);
  j.guard_fd = -1;
  dl_launch l;
  if (!o->nproc && !o->nnodes && dl_launch_detect(&l) == 0 && l.world_size > 1 && l.kind != DL_LAUNCH_DDPLUA) {
    /* `srun --ntasks-per-node=8 ddplua doctor`: srun (mpirun, torchrun)
    ** starts every rank, so this process is one of them, not a launcher */
    j.per_task = 1;
    j.per_task_local = l.local_world_size;
    j.nproc = 1;
    j.nnodes = l.nnodes;
    j.node_rank = l.node_rank;
    j.world = l.world_size;
    snprintf(j.master_addr, sizeof j.master_addr, "%s", l.master_addr);
    j.master_port = l.master_port;
    j.bind_addr = "0.0.0.0";
  } else if (setup_options(&j, o, NULL) != 0) {
    return 1;
  }
  preflight_cpus(&j);
  return preflight_doctor(&j);
}
