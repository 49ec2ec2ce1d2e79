/* preflight.c -- what a launch will get and what is wrong with it, checked before any worker starts: the launcher's warnings and `ddplua doctor`. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "job.h"

/* One check: its level, what it found and, unless it is ok, the fix. */
typedef enum { PF_OK, PF_WARNING, PF_ERROR } pf_level;
typedef struct pf_check {
  pf_level level;
  const char *name;
  char text[640];
  char fix[400];
} pf_check;

enum { NCHECKS = 8 };
typedef struct pf_report {
  pf_check c[NCHECKS];
  int n;
} pf_report;

static pf_check *add(pf_report *r, const char *name, pf_level level) {
  pf_check *c = &r->c[r->n++];
  memset(c, 0, sizeof *c);
  c->name = name;
  c->level = level;
  return c;
}

static const char *s_(long n) { return n == 1 ? "" : "s"; }

/* "512 KiB", "64 MiB", "1.5 GiB" */
static void fmt_bytes(char *out, size_t cap, double b) {
  if (b >= 1024.0 * 1024 * 1024) snprintf(out, cap, "%.1f GiB", b / (1024.0 * 1024 * 1024));
  else if (b >= 1024.0 * 1024) snprintf(out, cap, "%.*f MiB", b < 10.0 * 1024 * 1024, b / (1024.0 * 1024));
  else snprintf(out, cap, "%.0f KiB", b / 1024.0);
}

/* -- CPUs ------------------------------------------------------------------ */

/* The CPUs SLURM allocated to this process, 0 when it says nothing:
** --cpus-per-task, else the job's CPUs on this node (SLURM_CPUS_ON_NODE,
** or this node's entry of SLURM_JOB_CPUS_PER_NODE, "72(x2),36").  SLURM
** binds a task to them only with task/affinity or task/cgroup; without,
** the affinity mask shows the whole machine (the seed's CPUAlloc=1 of
** CPUTot=2), so the mask alone would oversubscribe the allocation. */
static int slurm_cpus(const char **var, char *val, size_t cap) {
  static const char *const names[] = {"SLURM_CPUS_PER_TASK", "SLURM_CPUS_ON_NODE"};
  for (int i = 0; i < 2; i++) {
    const char *v = getenv(names[i]);
    if (v && atoi(v) > 0) {
      *var = names[i];
      snprintf(val, cap, "%s", v);
      return atoi(v);
    }
  }
  const char *list = getenv("SLURM_JOB_CPUS_PER_NODE");
  if (!list || !*list) return 0;
  const char *nid = getenv("SLURM_NODEID");
  int node = nid ? atoi(nid) : 0;
  for (const char *p = list; *p;) {
    char *end;
    long cpus = strtol(p, &end, 10), times = 1;
    if (end == p) return 0;
    if (strncmp(end, "(x", 2) == 0) times = strtol(end + 2, &end, 10), end += *end == ')';
    if (node < times) {
      *var = "SLURM_JOB_CPUS_PER_NODE";
      snprintf(val, cap, "%s", list);
      return cpus > 0 ? (int)cpus : 0;
    }
    node -= (int)times;
    p = *end == ',' ? end + 1 : end;
  }
  return 0;
}

static int mask_cpus(cpu_set_t *set) {
  if (sched_getaffinity(0, sizeof *set, set) != 0) {
    CPU_ZERO(set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    for (long c = 0; c < n && c < CPU_SETSIZE; c++) CPU_SET(c, set);
  }
  int n = CPU_COUNT(set);
  return n < 1 ? 1 : n;
}

void preflight_cpus(job *j) {
  const char *var;
  char val[128];
  j->ncpus = mask_cpus(&j->cpus);
  int alloc = slurm_cpus(&var, val, sizeof val);
  if (alloc > 0 && alloc < j->ncpus) { /* the first `alloc` of the mask (--bind-cores) */
    int kept = 0;
    for (int c = 0; c < CPU_SETSIZE; c++)
      if (CPU_ISSET(c, &j->cpus) && kept++ >= alloc) CPU_CLR(c, &j->cpus);
    j->ncpus = alloc;
  }
}

/* The largest thread count the user set, and its variable; 0 if none. */
static int user_threads(const char **name) {
  static const char *const names[] = {"DDPLUA_NUM_THREADS", "OMP_NUM_THREADS",
                                      "OPENBLAS_NUM_THREADS"};
  int most = 0;
  for (int t = 0; t < 3; t++) {
    const char *v = getenv(names[t]);
    if (v && *v && (most == 0 || atoi(v) > most)) {
      most = atoi(v) > 0 ? atoi(v) : 1;
      *name = names[t];
    }
  }
  return most;
}

static void check_cpus(const job *j, pf_report *r) {
  cpu_set_t set;
  int mask = mask_cpus(&set), n = j->ncpus, nproc = j->nproc;
  const char *var = NULL, *tname = NULL;
  char val[128], why[256] = "", more[200] = "";
  int alloc = slurm_cpus(&var, val, sizeof val);
  int by_slurm = alloc > 0 && alloc <= mask;
  if (by_slurm) {
    snprintf(why, sizeof why, "SLURM's %d-CPU allocation: %s=%s", alloc, var, val);
  }
  int most = user_threads(&tname);
  int per = n / nproc > 0 ? n / nproc : 1;
  long want = (long)nproc * (most ? most : 1);
  if (by_slurm)
    snprintf(more, sizeof more, ", or ask SLURM for %ld CPUs (#SBATCH --cpus-per-task=%ld; srun -c %ld)",
             want, want, want);
  pf_check *c;
  if (most && (long)most * nproc > n) {
    c = add(r, "cpus", PF_WARNING);
    snprintf(c->text, sizeof c->text, "%d worker%s x %d threads (%s=%d) = %ld threads on %d CPU%s%s%s%s: "
             "the cores are oversubscribed and every step gets slower", nproc, s_(nproc), most, tname,
             most, want, n, s_(n), *why ? " (" : "", why, *why ? ")" : "");
    snprintf(c->fix, sizeof c->fix, "unset %s (the launcher then gives each worker %d) or set it to at "
             "most %d%s", tname, per, per, more);
  } else if (!most && nproc > n) {
    c = add(r, "cpus", PF_WARNING);
    snprintf(c->text, sizeof c->text, "%d workers on %d CPU%s (%s): several workers share each core "
             "and every step gets slower", nproc, n, s_(n), *why ? why
             : "this process may use only those: taskset, cgroup or SLURM's --cpus-per-task");
    snprintf(c->fix, sizeof c->fix, "use --nproc %d or fewer%s", n,
             *more ? more : ", or give the job more CPUs");
  } else {
    c = add(r, "cpus", PF_OK);
    int t = most ? most : per;
    int k = snprintf(c->text, sizeof c->text, "%d worker%s x %d thread%s%s on %d CPU%s (affinity mask: %d",
                     nproc, s_(nproc), t, s_(t), most ? " (yours)" : "", n, s_(n), mask);
    if (alloc > 0 && alloc < mask)
      snprintf(c->text + k, sizeof c->text - k, "; SLURM allocated %d of them, %s=%s: the budget "
               "follows SLURM's)", alloc, var, val);
    else if (alloc > 0)
      snprintf(c->text + k, sizeof c->text - k, "; SLURM: %s=%s)", var, val);
    else
      snprintf(c->text + k, sizeof c->text - k, ")");
  }
}

/* -- GPUs ------------------------------------------------------------------ */

static void check_gpus(const job *j, pf_report *r) {
  int ndev = dl_cuda_device_count();
  const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
  char vis[160] = "";
  if (cvd) snprintf(vis, sizeof vis, " (CUDA_VISIBLE_DEVICES=%.120s)", cvd);
  pf_check *c;
  if (ndev <= 0) {
    c = add(r, "gpus", PF_OK);
    snprintf(c->text, sizeof c->text, "none visible%s: the workers compute on the CPU (%.200s)", vis,
             dl_cuda_status());
  } else if (j->nproc > ndev) {
    c = add(r, "gpus", PF_WARNING);
    snprintf(c->text, sizeof c->text, "%d workers on %d GPU%s%s: ranks share GPUs (their memory, and "
             "NCCL wants a GPU of its own per rank)", j->nproc, ndev, s_(ndev), vis);
    snprintf(c->fix, sizeof c->fix, "--nproc auto starts one worker per GPU (here %d), or use --nproc "
             "%d or fewer", ndev, ndev);
  } else {
    c = add(r, "gpus", PF_OK);
    snprintf(c->text, sizeof c->text, "%d GPU%s visible%s for %d worker%s (%.300s)", ndev, s_(ndev), vis,
             j->nproc, s_(j->nproc), dl_cuda_status());
  }
}

/* -- /dev/shm -------------------------------------------------------------- */

/* What dist/pg_shm.c maps for n ranks with slots of `slot` bytes: a control
** line per rank after a header line, page-rounded, then two sets of a slot
** (plus 320 bytes of padding) per rank. */
static double arena_bytes(int n, double slot) {
  double ctl = (double)(((size_t)128 * (1 + n) + 4095) & ~(size_t)4095);
  return ctl + 2.0 * n * (slot + 320);
}

static void check_shm(const job *j, pf_report *r) {
  int n = j->per_task ? j->per_task_local : j->nproc;
  struct statvfs sv;
  pf_check *c;
  if (statvfs("/dev/shm", &sv) != 0) {
    if (n == 1) {
      c = add(r, "shm", PF_OK);
      snprintf(c->text, sizeof c->text, "/dev/shm is missing (%s); one rank on this node needs none",
               strerror(errno));
      return;
    }
    c = add(r, "shm", PF_ERROR);
    snprintf(c->text, sizeof c->text, "/dev/shm is missing (%s): the %d ranks of this node cannot "
             "share memory, and ddp.init fails", strerror(errno), n);
    snprintf(c->fix, sizeof c->fix, "mount a tmpfs on /dev/shm (docker run --shm-size=1g, or --ipc=host)");
    return;
  }
  double avail = (double)sv.f_bavail * sv.f_frsize, total = (double)sv.f_blocks * sv.f_frsize;
  char a[32], t[32], w[32], ar[32];
  fmt_bytes(a, sizeof a, avail);
  fmt_bytes(t, sizeof t, total);
  if (n == 1) {
    c = add(r, "shm", PF_OK);
    snprintf(c->text, sizeof c->text, "/dev/shm: %s free of %s; one rank on this node needs none", a, t);
    return;
  }
  /* can we make a segment at all (read-only, noexec, full of inodes)? */
  char name[64];
  snprintf(name, sizeof name, "/ddplua-doctor-%ld", (long)getpid());
  int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
  int err = fd < 0 ? errno : 0;
  if (fd >= 0) {
    close(fd);
    shm_unlink(name);
  }
  const char *sb = getenv("DDP_SHM_SLOT_BYTES");
  double slot = sb && atoll(sb) >= 4096 ? (double)(atoll(sb) & ~63LL) : 512.0 * 1024;
  double full = arena_bytes(n, slot), least = arena_bytes(n, 64.0 * 1024);
  /* rank 0 halves the slots while the arena takes more than half of what
  ** is free; ddp.DDP on the CPU then maps each bucket (25 MiB a rank by
  ** default) only where it takes at most half of what is left */
  double bucket = n * (25.0 * 1024 * 1024 + 4096 + 320);
  double need = 2 * full > full + 2 * bucket ? 2 * full : full + 2 * bucket;
  fmt_bytes(w, sizeof w, need);
  fmt_bytes(ar, sizeof ar, full);
  const char *fix = "give it more room: docker run --shm-size=1g (or --ipc=host); Kubernetes: an "
                    "emptyDir with medium: Memory mounted on /dev/shm";
  if (err || avail < least) {
    c = add(r, "shm", PF_ERROR);
    if (err)
      snprintf(c->text, sizeof c->text, "/dev/shm (%s free of %s) refuses a new segment (%s): the %d "
               "ranks of this node cannot share memory, and ddp.init fails", a, t, strerror(err), n);
    else
      snprintf(c->text, sizeof c->text, "/dev/shm has %s free of %s, less than the smallest arena of "
               "%d ranks: ddp.init fails", a, t, n);
    snprintf(c->fix, sizeof c->fix, "%s", fix);
  } else if (avail < need) {
    c = add(r, "shm", PF_WARNING);
    snprintf(c->text, sizeof c->text, "/dev/shm has %s free of %s; %d local ranks want %s (the "
             "collectives' arena, %s, and a 25 MiB gradient bucket per rank): the collectives use "
             "smaller slots or private copies and get slower", a, t, n, w, ar);
    snprintf(c->fix, sizeof c->fix, "%s", fix);
  } else {
    c = add(r, "shm", PF_OK);
    snprintf(c->text, sizeof c->text, "/dev/shm: %s free of %s; %d local ranks want %s", a, t, n, w);
  }
}

/* -- Open files -------------------------------------------------------------- */

/* The launcher keeps 4 pipe ends per worker (and its --log-dir file), about
** a dozen of its own, and on node 0 the store's connection per rank of the
** job (52 in all for 8 workers, counted in /proc); a worker needs one per
** rank for Gloo ("gloo" connects every pair) and some of its own. */
static void check_files(const job *j, pf_report *r) {
  struct rlimit rl;
  pf_check *c;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
    c = add(r, "files", PF_OK);
    snprintf(c->text, sizeof c->text, "ulimit -n unknown (%s)", strerror(errno));
    return;
  }
  long launcher = 12 + (j->log_dir ? 5L : 4L) * j->nproc + (j->node_rank == 0 ? j->world : 1);
  long worker = j->world + 32;
  long want = (launcher > worker ? launcher : worker) + 64;
  char hard[32], soft[32];
  if (rl.rlim_max == RLIM_INFINITY) snprintf(hard, sizeof hard, "unlimited");
  else snprintf(hard, sizeof hard, "%llu", (unsigned long long)rl.rlim_max);
  if (rl.rlim_cur == RLIM_INFINITY) snprintf(soft, sizeof soft, "unlimited");
  else snprintf(soft, sizeof soft, "%llu", (unsigned long long)rl.rlim_cur);
  const char *fix = "raise the hard limit where the job starts: ulimit -Hn as root, "
                    "/etc/security/limits.conf, docker run --ulimit nofile=65536:65536";
  if (rl.rlim_max != RLIM_INFINITY && (long long)rl.rlim_max < launcher) {
    c = add(r, "files", PF_ERROR);
    snprintf(c->text, sizeof c->text, "ulimit -n: the hard limit is %s, and the launcher alone needs "
             "about %ld descriptors (pipes to %d workers%s): the job cannot start", hard, launcher,
             j->nproc, j->node_rank == 0 ? ", the store's connection per rank" : "");
    snprintf(c->fix, sizeof c->fix, "%s", fix);
  } else if (rl.rlim_max != RLIM_INFINITY && (long long)rl.rlim_max < want) {
    c = add(r, "files", PF_WARNING);
    snprintf(c->text, sizeof c->text, "ulimit -n: the hard limit is %s, the job wants about %ld (a "
             "store connection per rank on node 0, Gloo's per rank, pipes per worker): ranks beyond "
             "it cannot connect", hard, want);
    snprintf(c->fix, sizeof c->fix, "%s", fix);
  } else {
    c = add(r, "files", PF_OK);
    snprintf(c->text, sizeof c->text, "ulimit -n: soft %s, hard %s (the launcher raises the soft one "
             "to the hard one); the job wants about %ld", soft, hard, want);
  }
}

/* -- The store's address ------------------------------------------------------ */

/* getaddrinfo on a thread of its own, so a slow resolver costs at most
** `secs`: the thread is left to finish (and free) on its own after that. */
typedef struct resolve {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  char host[256];
  struct addrinfo *res;
  int rc, done, abandoned;
} resolve;

static void *resolve_main(void *arg) {
  resolve *q = arg;
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  int rc = getaddrinfo(q->host, NULL, &hints, &res);
  pthread_mutex_lock(&q->mu);
  q->rc = rc;
  q->res = res;
  q->done = 1;
  int gone = q->abandoned;
  pthread_cond_signal(&q->cv);
  pthread_mutex_unlock(&q->mu);
  if (gone) {
    if (res) freeaddrinfo(res);
    free(q);
  }
  return NULL;
}

/* 0 with *res, a getaddrinfo code, or EAI_AGAIN + 1000 after `secs`. */
static int resolve_bounded(const char *host, double secs, struct addrinfo **res) {
  resolve *q = calloc(1, sizeof *q);
  if (!q) return EAI_MEMORY;
  pthread_mutex_init(&q->mu, NULL);
  pthread_cond_init(&q->cv, NULL);
  snprintf(q->host, sizeof q->host, "%.255s", host);
  pthread_t t;
  if (pthread_create(&t, NULL, resolve_main, q) != 0) {
    free(q);
    return getaddrinfo(host, NULL, NULL, res); /* no thread: unbounded */
  }
  pthread_detach(t);
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += (time_t)secs;
  until.tv_nsec += (long)((secs - (double)(time_t)secs) * 1e9);
  if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
  pthread_mutex_lock(&q->mu);
  while (!q->done)
    if (pthread_cond_timedwait(&q->cv, &q->mu, &until) == ETIMEDOUT) break;
  int done = q->done, rc = q->rc;
  *res = q->res;
  q->abandoned = !done;
  pthread_mutex_unlock(&q->mu);
  if (!done) return EAI_AGAIN + 1000;
  free(q);
  return rc;
}

static int same_addr(const struct sockaddr *a, const struct sockaddr *b) {
  if (a->sa_family != b->sa_family) return 0;
  if (a->sa_family == AF_INET)
    return ((const struct sockaddr_in *)a)->sin_addr.s_addr == ((const struct sockaddr_in *)b)->sin_addr.s_addr;
  if (a->sa_family == AF_INET6)
    return memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr, &((const struct sockaddr_in6 *)b)->sin6_addr,
                  sizeof(struct in6_addr)) == 0;
  return 0;
}

static void addr_text(const struct sockaddr *sa, char *out, size_t cap) {
  const void *p = sa->sa_family == AF_INET ? (const void *)&((const struct sockaddr_in *)sa)->sin_addr
                                           : (const void *)&((const struct sockaddr_in6 *)sa)->sin6_addr;
  if (!inet_ntop(sa->sa_family, p, out, (socklen_t)cap)) snprintf(out, cap, "?");
}

/* The interface holding address sa, "" when no interface of this host has it. */
static void iface_of(const struct sockaddr *sa, char *out, size_t cap) {
  struct ifaddrs *ifs, *i;
  out[0] = '\0';
  if (getifaddrs(&ifs) != 0) return;
  for (i = ifs; i; i = i->ifa_next)
    if (i->ifa_addr && same_addr(i->ifa_addr, sa)) {
      snprintf(out, cap, "%s", i->ifa_name);
      break;
    }
  freeifaddrs(ifs);
}

static void check_store(const job *j, const dl_launch *l, pf_report *r) {
  pf_check *c;
  const char *host = j->master_addr, *what = "--master-addr";
  int port = j->master_port, node0 = j->node_rank == 0;
  if ((j->per_task || (j->nnodes == 1 && l && l->kind != DL_LAUNCH_ALONE && l->kind != DL_LAUNCH_DDPLUA &&
                        l->world_size > l->local_world_size)) && l && l->master_addr[0]) {
    /* doctor under srun/mpirun/torchrun: where the ranks of the job meet */
    host = l->master_addr, what = "the launch's master address", port = l->master_port;
    node0 = l->serves_store && l->rank == 0;
  } else if (j->nnodes == 1) {
    c = add(r, "store", PF_OK);
    snprintf(c->text, sizeof c->text, "one node: the launcher serves it on %s, %s", j->bind_addr,
             j->master_port ? "the port given" : "a free port");
    return;
  }
  struct addrinfo *res = NULL;
  int rc = resolve_bounded(host, 1.0, &res);
  if (rc != 0) {
    c = add(r, "store", PF_WARNING);
    if (rc == EAI_AGAIN + 1000)
      snprintf(c->text, sizeof c->text, "%s %.200s: no answer from the resolver within 1 s", what, host);
    else
      snprintf(c->text, sizeof c->text, "%s %.200s does not resolve (%s): the ranks cannot reach the store "
               "there", what, host, gai_strerror(rc));
    snprintf(c->fix, sizeof c->fix, "check the name (getent hosts %.200s); on Kubernetes the master's "
             "service name may resolve only once its pod runs", host);
    return;
  }
  /* the first IPv4 address, as the store's clients connect to */
  struct addrinfo *pick = res;
  for (struct addrinfo *a = res; a; a = a->ai_next)
    if (a->ai_family == AF_INET) { pick = a; break; }
  struct sockaddr_storage remote, local;
  memcpy(&remote, pick->ai_addr, pick->ai_addrlen);
  socklen_t rlen = pick->ai_addrlen, llen = sizeof local;
  freeaddrinfo(res);
  if (remote.ss_family == AF_INET) ((struct sockaddr_in *)&remote)->sin_port = htons(port ? port : 29500);
  else ((struct sockaddr_in6 *)&remote)->sin6_port = htons(port ? port : 29500);
  char ra[INET6_ADDRSTRLEN], la[INET6_ADDRSTRLEN] = "?", rif[64], lif[64];
  addr_text((struct sockaddr *)&remote, ra, sizeof ra);
  /* a UDP connect sends nothing: it only asks the kernel for the route */
  int s = socket(remote.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  int e = s < 0 ? errno : connect(s, (struct sockaddr *)&remote, rlen) ? errno : 0;
  if (!e && getsockname(s, (struct sockaddr *)&local, &llen) != 0) e = errno;
  if (s >= 0) close(s);
  if (e) {
    c = add(r, "store", PF_WARNING);
    snprintf(c->text, sizeof c->text, "%s %.200s is %s, but no route reaches it from this node (%s)", what,
             host, ra, strerror(e));
    snprintf(c->fix, sizeof c->fix, "check the network between the nodes (ip route get %s)", ra);
    return;
  }
  addr_text((struct sockaddr *)&local, la, sizeof la);
  iface_of((struct sockaddr *)&remote, rif, sizeof rif);
  iface_of((struct sockaddr *)&local, lif, sizeof lif);
  int loop = remote.ss_family == AF_INET && (ntohl(((struct sockaddr_in *)&remote)->sin_addr.s_addr) >> 24) == 127;
  int here = loop || rif[0] != '\0' || same_addr((struct sockaddr *)&remote, (struct sockaddr *)&local);
  if (node0 && !here) {
    c = add(r, "store", PF_WARNING);
    snprintf(c->text, sizeof c->text, "this node serves the store (node 0), but %s %.200s is %s, not an "
             "address of this host: the other nodes will look for it there", what, host, ra);
    snprintf(c->fix, sizeof c->fix, "run node rank 0 on %.200s, or give --master-addr this host's name", host);
    return;
  }
  c = add(r, "store", PF_OK);
  snprintf(c->text, sizeof c->text, "%s %.200s is %s%s, reached through %s (%s), port %d%s", what, host, ra,
           here ? " (this host)" : "", lif[0] ? lif : "?", la, port ? port : 29500,
           node0 ? "; this node serves it" : "");
}

/* -- The launch ------------------------------------------------------------- */

static void check_launch(const job *j, dl_launch *l, int *have, pf_report *r) {
  pf_check *c;
  *have = dl_launch_detect(l) == 0;
  if (!*have) {
    c = add(r, "launch", PF_ERROR);  /* as ddp.init would refuse it */
    snprintf(c->text, sizeof c->text, "%s", dl_last_error());
    snprintf(c->fix, sizeof c->fix, "unset the variables that contradict each other (docs/launching.md)");
    return;
  }
  c = add(r, "launch", PF_OK);
  if (l->kind == DL_LAUNCH_ALONE) {
    snprintf(c->text, sizeof c->text, "alone: no launcher's variables around this process");
    return;
  }
  if (!j->per_task && (l->kind == DL_LAUNCH_SLURM || l->kind == DL_LAUNCH_MPI)) {
    /* a launcher in a step of one task per node (several per node are
    ** refused before the checks) */
    snprintf(c->text, sizeof c->text, "%s, one task per node: this launcher is node %d of %d and starts its "
             "%d workers (%s)", dl_launch_kind_name(l->kind), j->node_rank, j->nnodes, j->nproc, l->vars);
    return;
  }
  int k = snprintf(c->text, sizeof c->text, "%s%s: rank %d of %d, local rank %d of %d, node %d of %d",
                   j->per_task ? "one rank of " : "",
                   dl_launch_kind_name(l->kind), l->rank, l->world_size, l->local_rank,
                   l->local_world_size, l->node_rank, l->nnodes);
  if (l->master_addr[0] && k < (int)sizeof c->text)
    k += snprintf(c->text + k, sizeof c->text - k, ", store at %s:%d%s", l->master_addr, l->master_port,
                  l->serves_store ? " (rank 0 serves it)" : "");
  if (l->vars[0] && k < (int)sizeof c->text)
    snprintf(c->text + k, sizeof c->text - k, " (%s)", l->vars);
}

static void run_checks(const job *j, pf_report *r) {
  dl_launch l;
  int have;
  r->n = 0;
  check_launch(j, &l, &have, r);
  check_cpus(j, r);
  check_gpus(j, r);
  check_shm(j, r);
  check_files(j, r);
  check_store(j, have ? &l : NULL, r);
}

/* -- Reports -------------------------------------------------------------- */

int preflight_launch(const job *j) {
  pf_report r;
  run_checks(j, &r);
  /* in a batch job stderr is the .err file few read: say it in .out too */
  int batch = getenv("SLURM_JOB_ID") && *getenv("SLURM_JOB_ID") && !isatty(STDOUT_FILENO);
  int errors = 0;
  for (int i = 0; i < r.n; i++) {
    const pf_check *c = &r.c[i];
    if (c->level == PF_OK) continue;
    const char *lv = c->level == PF_ERROR ? "error" : "warning";
    job_say("%s: %s; fix: %s", lv, c->text, c->fix);
    if (batch) {
      printf("%s: %s: %s; fix: %s\n", CLI_NAME, lv, c->text, c->fix);
      fflush(stdout);
    }
    errors += c->level == PF_ERROR;
  }
  if (errors)
    job_say("no worker started: %d error%s above (ddplua doctor --nproc %d checks again)", errors,
            s_(errors), j->nproc);
  return errors ? -1 : 0;
}

int preflight_doctor(const job *j) {
  pf_report r;
  run_checks(j, &r);
  int errors = 0, warnings = 0;
  for (int i = 0; i < r.n; i++) {
    const pf_check *c = &r.c[i];
    static const char *const lv[] = {"ok", "warning", "error"};
    if (c->level == PF_OK) printf("%-7s %-6s %s\n", lv[c->level], c->name, c->text);
    else printf("%-7s %-6s %s; fix: %s\n", lv[c->level], c->name, c->text, c->fix);
    errors += c->level == PF_ERROR;
    warnings += c->level == PF_WARNING;
  }
  printf("%s doctor: %d worker%s x %d node%s: %d error%s, %d warning%s\n", CLI_NAME, j->nproc,
         s_(j->nproc), j->nnodes, s_(j->nnodes), errors, s_(errors), warnings, s_(warnings));
  fflush(stdout);
  return errors ? 1 : 0;
}
