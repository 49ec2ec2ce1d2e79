/* launch_env.c -- who started this process and where it stands in the job: the launch layout read from the variables of ddplua's launcher, MPI, SLURM, torchrun or env://. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ddplua.h"
#include "core/internal.h"
#include "dist/nodelist.h"

/* Where no launcher serves the store, rank 0 serves it on a port every
** rank derives alike from the job's id: STORE_PORT_BASE + (a hash of the
** id) mod STORE_PORT_SPAN, below Linux's ephemeral ports (32768 and up),
** so that no outgoing connection of the node holds it by chance.  Two
** steps of one job have two ids (the step id is part of it), so two
** ports.  MASTER_PORT (DDP_STORE_PORT under torchrun) overrides it. */
#define STORE_PORT_BASE 15000
#define STORE_PORT_SPAN 15000

static const char *var(const char *name) {
  const char *v = getenv(name);
  return v && *v ? v : NULL;
}

static int bad(const char *fmt, ...) {
  char msg[600];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return dl_err(EM_BADVALUE, "ddp", msg);
}

/* The integer variable name (>= min) in *out, dflt when unset; -1 after
** naming it. */
static int int_var(const char *name, int dflt, int min, int *out) {
  const char *s = var(name);
  if (!s) {
    *out = dflt;
    return 0;
  }
  char *end;
  long v = strtol(s, &end, 10);
  if (end == s || *end || v < min || v > (1 << 30))
    return bad("environment variable %s=\"%.100s\" is not an integer >= %d", name, s, min);
  *out = (int)v;
  return 0;
}

/* Appends "NAME=value " for each name set, for messages. */
static void note_vars(dl_launch *l, const char *const *names) {
  size_t n = strlen(l->vars);
  for (; *names; names++) {
    const char *v = var(*names);
    if (!v || n >= sizeof l->vars - 1) continue;
    n += (size_t)snprintf(l->vars + n, sizeof l->vars - n, "%s%s=%.60s", n ? " " : "", *names, v);
    if (n >= sizeof l->vars) n = sizeof l->vars - 1;
  }
}

static uint64_t fnv1a(const char *s, uint64_t h) {
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

/* The store's token: DDP_STORE_TOKEN, else one every rank derives from the
** job's id.  It is no secret (the id is not): it keeps another job's
** processes, which meet this store on a port shared by chance, out. */
static void derive_token(dl_launch *l) {
  const char *t = var("DDP_STORE_TOKEN");
  if (t) {
    snprintf(l->token, sizeof l->token, "%.32s", t);
    return;
  }
  char seed[96];
  snprintf(seed, sizeof seed, "ddplua-store/%s", l->job_id);
  snprintf(l->token, sizeof l->token, "%016llx%016llx",
           (unsigned long long)fnv1a(seed, 14695981039346656037ull),
           (unsigned long long)fnv1a(seed, 1469598103934665603ull ^ 0x9e3779b97f4a7c15ull));
}

/* The store's port from `name` (if set), else derived from the job id. */
static void pick_port(dl_launch *l, const char *name, const char *why_derived) {
  const char *p = name ? var(name) : NULL;
  if (p) {
    char *end;
    long v = strtol(p, &end, 10);
    if (end == p || *end || v < 1 || v > 65535) {
      snprintf(l->problem, sizeof l->problem, "%s=\"%.40s\" is not a port (1..65535)", name, p);
      return;
    }
    l->master_port = (int)v;
    snprintf(l->port_from, sizeof l->port_from, "%s", name);
    return;
  }
  l->master_port = STORE_PORT_BASE + (int)(fnv1a(l->job_id, 14695981039346656037ull) % STORE_PORT_SPAN);
  snprintf(l->port_from, sizeof l->port_from, "derived from %s (%d + hash mod %d; MASTER_PORT overrides)",
           why_derived, STORE_PORT_BASE, STORE_PORT_SPAN);
}

/* Ranks numbered node by node (rank = node * per node + local rank), as
** the process group assumes; the launcher's word for what to change. */
static int check_block(dl_launch *l, const char *how) {
  if (l->world_size % l->local_world_size != 0)
    return bad("%s: %d ranks do not split into nodes of %d (%s): every node must run the same number of "
               "ranks", dl_launch_kind_name(l->kind), l->world_size, l->local_world_size, l->vars);
  l->nnodes = l->world_size / l->local_world_size;
  if (l->local_rank >= l->local_world_size || l->rank / l->local_world_size != l->node_rank ||
      l->rank % l->local_world_size != l->local_rank)
    return bad("%s: rank %d is local rank %d of %d on node %d, but ranks must be numbered node by node "
               "(rank = node x %d + local rank) (%s); %s", dl_launch_kind_name(l->kind), l->rank,
               l->local_rank, l->local_world_size, l->node_rank, l->local_world_size, l->vars, how);
  return 0;
}

/* -- ddplua's launcher, env:// and torchrun: RANK, WORLD_SIZE, ... --------- */

static int from_rank_vars(dl_launch *l) {
  const char *ws_s = var("WORLD_SIZE"), *rank_s = var("RANK");
  if (!ws_s && !rank_s) return 0;
  if (!ws_s || !rank_s)
    return bad("RANK and WORLD_SIZE must be set together (RANK=%s, WORLD_SIZE=%s); start the script with "
               "`ddplua --nproc N script.lua`, or unset both for a world of one",
               rank_s ? rank_s : "nil", ws_s ? ws_s : "nil");
  if (int_var("WORLD_SIZE", 1, 1, &l->world_size) || int_var("RANK", 0, 0, &l->rank)) return -1;
  if (l->rank >= l->world_size)
    return bad("RANK=%d is out of range for WORLD_SIZE=%d (ranks are 0..%d)", l->rank, l->world_size,
               l->world_size - 1);
  /* The launcher always says how many ranks a node runs.  Another caller
  ** that does not (a Kubernetes pod, a plain orchestrator) is taken as one
  ** rank per node: correct wherever the ranks are, only without shared
  ** memory between ranks that do share a node. */
  int lws_dflt = var("DDP_LAUNCH_ID") ? l->world_size : 1;
  if (int_var("LOCAL_WORLD_SIZE", lws_dflt, 1, &l->local_world_size)) return -1;
  if (int_var("LOCAL_RANK", l->rank % l->local_world_size, 0, &l->local_rank)) return -1;
  if (l->local_rank >= l->local_world_size)
    return bad("LOCAL_RANK=%d is out of range for LOCAL_WORLD_SIZE=%d", l->local_rank, l->local_world_size);
  if (l->local_world_size > l->world_size)
    return bad("LOCAL_WORLD_SIZE=%d is larger than WORLD_SIZE=%d", l->local_world_size, l->world_size);
  int group;
  if (int_var("GROUP_RANK", l->rank / l->local_world_size, 0, &group)) return -1;
  if (int_var("NODE_RANK", group, 0, &l->node_rank)) return -1;
  l->nnodes = (l->world_size + l->local_world_size - 1) / l->local_world_size;
  static const char *const names[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                      "MASTER_ADDR", "MASTER_PORT", NULL};
  note_vars(l, names);
  const char *addr = var("MASTER_ADDR");
  snprintf(l->master_addr, sizeof l->master_addr, "%s", addr ? addr : "127.0.0.1");
  const char *id = var("DDP_JOB_ID");
  if (var("DDP_LAUNCH_ID")) {
    l->kind = DL_LAUNCH_DDPLUA;
    snprintf(l->job_id, sizeof l->job_id, "%s", id ? id : "");
    const char *t = var("DDP_STORE_TOKEN");
    snprintf(l->token, sizeof l->token, "%.32s", t ? t : "");
    if (var("MASTER_PORT")) pick_port(l, "MASTER_PORT", "");
    else if (l->world_size > 1)
      snprintf(l->problem, sizeof l->problem, "MASTER_PORT must be set to the store's port (1..65535), got nil");
    return 0;
  }
  l->serves_store = 1;
  const char *run = var("TORCHELASTIC_RUN_ID");
  if (run) {
    /* torchrun's own store on MASTER_PORT is PyTorch's TCPStore, another
    ** protocol: rank 0 serves ours next to it. */
    l->kind = DL_LAUNCH_TORCHRUN;
    const char *rc = var("TORCHELASTIC_RESTART_COUNT");
    snprintf(l->job_id, sizeof l->job_id, "%.40s-%.10s", id ? id : run, rc ? rc : "0");
    static const char *const tn[] = {"TORCHELASTIC_RUN_ID", NULL};
    note_vars(l, tn);
    if (var("DDP_STORE_PORT")) {
      pick_port(l, "DDP_STORE_PORT", "");
    } else {
      pick_port(l, "MASTER_PORT", "");
      if (l->master_port > 0) {
        l->master_port = l->master_port < 65535 ? l->master_port + 1 : l->master_port - 1;
        snprintf(l->port_from, sizeof l->port_from, "MASTER_PORT+1 (torchrun's own store, PyTorch's "
                 "protocol, holds MASTER_PORT; DDP_STORE_PORT overrides)");
      }
    }
  } else {
    l->kind = DL_LAUNCH_ENV;
    if (id) snprintf(l->job_id, sizeof l->job_id, "%.60s", id);
    /* not MASTER_ADDR: a PyTorchJob gives rank 0 "localhost" and the
    ** others the master's service name, and all must derive one token */
    else snprintf(l->job_id, sizeof l->job_id, "env-%016llx",
                  (unsigned long long)fnv1a(var("MASTER_PORT") ? var("MASTER_PORT") : "",
                                            14695981039346656037ull));
    pick_port(l, "MASTER_PORT", "");
  }
  if (!var("MASTER_PORT") && !var("DDP_STORE_PORT") && l->world_size > 1)
    snprintf(l->problem, sizeof l->problem, "an env:// launch (RANK=%d, WORLD_SIZE=%d set by the caller) needs "
             "MASTER_PORT, the port rank 0 serves the store on (and MASTER_ADDR, rank 0's host)",
             l->rank, l->world_size);
  derive_token(l);
  return 0;
}

/* -- MPI: OpenMPI, or MPICH / Intel MPI (PMI) ---------------------------- */

static int from_mpi(dl_launch *l) {
  int ompi = var("OMPI_COMM_WORLD_SIZE") != NULL;
  const char *size = ompi ? "OMPI_COMM_WORLD_SIZE" : "PMI_SIZE";
  const char *rank = ompi ? "OMPI_COMM_WORLD_RANK" : "PMI_RANK";
  const char *lrank = ompi ? "OMPI_COMM_WORLD_LOCAL_RANK" : "MPI_LOCALRANKID";
  const char *lsize = ompi ? "OMPI_COMM_WORLD_LOCAL_SIZE" : "MPI_LOCALNRANKS";
  if (!var(size) || !var(rank)) return 0;
  l->kind = DL_LAUNCH_MPI;
  static const char *const on[] = {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                                   "OMPI_COMM_WORLD_LOCAL_SIZE", NULL};
  static const char *const pn[] = {"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", NULL};
  note_vars(l, ompi ? on : pn);
  if (int_var(size, 1, 1, &l->world_size) || int_var(rank, 0, 0, &l->rank)) return -1;
  if (l->rank >= l->world_size)
    return bad("%s=%d is out of range for %s=%d", rank, l->rank, size, l->world_size);
  if (int_var(lsize, l->world_size, 1, &l->local_world_size) ||
      int_var(lrank, l->rank % l->local_world_size, 0, &l->local_rank))
    return -1;
  l->node_rank = l->rank / l->local_world_size;
  if (check_block(l, "run mpirun with its default placement (--map-by slot), one node filled after the other"))
    return -1;
  l->serves_store = 1;
  /* the job's id: OpenMPI's, PMIx's namespace, or (on one node) mpirun's
  ** process, the parent of every rank */
  static const char *const ids[] = {"DDP_JOB_ID", "OMPI_MCA_ess_base_jobid", "OMPI_MCA_orte_ess_jobid",
                                    "PMIX_NAMESPACE", "PMI_KVSNAME", NULL};
  const char *id = NULL, *which = NULL;
  for (const char *const *n = ids; *n && !id; n++)
    if ((id = var(*n))) which = *n;
  if (id) {
    snprintf(l->job_id, sizeof l->job_id, "mpi-%.56s", id);
  } else if (l->nnodes == 1) {
    snprintf(l->job_id, sizeof l->job_id, "mpi-ppid%ld", (long)getppid());
    which = "mpirun's process id";
  }
  const char *addr = var("MASTER_ADDR");
  if (addr) snprintf(l->master_addr, sizeof l->master_addr, "%s", addr);
  else if (l->nnodes == 1) strcpy(l->master_addr, "127.0.0.1");
  else
    snprintf(l->problem, sizeof l->problem, "mpirun across %d nodes: set MASTER_ADDR to rank 0's host for "
             "every rank, e.g. `mpirun -x MASTER_ADDR=$(hostname) -x MASTER_PORT=29500 ...`", l->nnodes);
  if (!id && !var("MASTER_PORT")) {
    if (!l->problem[0])
      snprintf(l->problem, sizeof l->problem, "mpirun across %d nodes gives no job id to derive the store's "
               "port from: set MASTER_PORT for every rank (`mpirun -x MASTER_PORT=29500 ...`)", l->nnodes);
    return 0;
  }
  pick_port(l, "MASTER_PORT", which ? which : "");
  derive_token(l);
  return 0;
}

/* -- SLURM: a step of several tasks (srun, one task per rank) ------------- */

/* SLURM_STEP_TASKS_PER_NODE ("2(x3),1"): the tasks per node, when every
** node has the same number; 0 when they differ, -1 when unreadable. */
static int tasks_per_node(const char *s) {
  int per = -1;
  while (*s) {
    char *end;
    long n = strtol(s, &end, 10);
    if (end == s || n < 1) return -1;
    s = end;
    if (*s == '(') {
      if (s[1] != 'x') return -1;
      strtol(s + 2, &end, 10);
      if (*end != ')') return -1;
      s = end + 1;
    }
    if (per >= 0 && per != n) return 0;
    per = (int)n;
    if (*s == ',') s++;
    else if (*s) return -1;
  }
  return per;
}

static int from_slurm(dl_launch *l) {
  /* only srun's steps say how many tasks the step has: a batch script
  ** (SLURM_NTASKS and SLURM_PROCID=0 set too) is one process */
  const char *ntasks = var("SLURM_STEP_NUM_TASKS");
  if (!var("SLURM_PROCID") || !ntasks || strcmp(ntasks, "1") == 0) return 0;
  l->kind = DL_LAUNCH_SLURM;
  static const char *const names[] = {"SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID", "SLURM_NODEID",
                                      "SLURM_STEP_NUM_NODES", "SLURM_STEP_TASKS_PER_NODE", NULL};
  note_vars(l, names);
  if (int_var("SLURM_STEP_NUM_TASKS", 1, 1, &l->world_size) || int_var("SLURM_PROCID", 0, 0, &l->rank) ||
      int_var("SLURM_LOCALID", 0, 0, &l->local_rank) || int_var("SLURM_NODEID", 0, 0, &l->node_rank) ||
      int_var("SLURM_STEP_NUM_NODES", 1, 1, &l->nnodes))
    return -1;
  if (l->rank >= l->world_size)
    return bad("SLURM_PROCID=%d is out of range for SLURM_STEP_NUM_TASKS=%d", l->rank, l->world_size);
  const char *tpn = var("SLURM_STEP_TASKS_PER_NODE");
  int per = tpn ? tasks_per_node(tpn) : (l->world_size % l->nnodes == 0 ? l->world_size / l->nnodes : 0);
  if (per == 0)
    return bad("slurm: this step runs a different number of tasks on its nodes (SLURM_STEP_TASKS_PER_NODE=%s); "
               "every node must run the same number of ranks: srun --ntasks-per-node=K", tpn ? tpn : "?");
  if (per < 0) return bad("slurm: cannot read SLURM_STEP_TASKS_PER_NODE=\"%.60s\"", tpn);
  l->local_world_size = per;
  if (check_block(l, "use srun's default block distribution (-m block)")) return -1;
  /* SLURM_GTIDS lists this node's tasks: a rank numbered in place among
  ** others that are not (-m cyclic) must refuse too, or it waits for them */
  const char *g = var("SLURM_GTIDS");
  for (int i = 0; g && *g; i++) {
    char *end;
    long t = strtol(g, &end, 10);
    if (end == g) break;
    if (t != (long)l->node_rank * per + i)
      return bad("slurm: this node runs tasks %s, but ranks must be numbered node by node (node %d: ranks %d to "
                 "%d); use srun's default block distribution (-m block)", var("SLURM_GTIDS"), l->node_rank,
                 l->node_rank * per, l->node_rank * per + per - 1);
    g = *end == ',' ? end + 1 : end;
  }
  l->serves_store = 1;
  const char *job = var("SLURM_JOB_ID"), *step = var("SLURM_STEP_ID");
  if (!step) step = var("SLURM_STEPID");
  const char *id = var("DDP_JOB_ID");
  if (id) snprintf(l->job_id, sizeof l->job_id, "%.60s", id);
  else snprintf(l->job_id, sizeof l->job_id, "%.30s.%.20s", job ? job : "0", step ? step : "0");
  const char *addr = var("MASTER_ADDR");
  const char *list = var("SLURM_STEP_NODELIST");
  if (!list) list = var("SLURM_JOB_NODELIST");
  if (addr) {
    snprintf(l->master_addr, sizeof l->master_addr, "%s", addr);
  } else if (l->nnodes == 1) {
    strcpy(l->master_addr, "127.0.0.1");
  } else if (!list) {
    snprintf(l->problem, sizeof l->problem, "slurm: a step on %d nodes without SLURM_STEP_NODELIST: set "
             "MASTER_ADDR to rank 0's host", l->nnodes);
  } else if (nodelist_host(l->master_addr, (int)sizeof l->master_addr, list, 0) != 0) {
    snprintf(l->problem, sizeof l->problem, "SLURM_STEP_NODELIST: %s", nodelist_error());
  }
  char why[80];
  snprintf(why, sizeof why, "SLURM job %s step %s", job ? job : "?", step ? step : "?");
  pick_port(l, "MASTER_PORT", why);
  derive_token(l);
  return 0;
}

int dl_launch_detect(dl_launch *out) {
  if (!out) return dl_err(EM_NULLARG, "dl_launch_detect", "out");
  memset(out, 0, sizeof *out);
  out->world_size = out->local_world_size = out->nnodes = 1;
  strcpy(out->master_addr, "127.0.0.1");
  int rc;
  /* the launcher's variables win: its workers inherit SLURM's and MPI's */
  /* torchrun's workers inherit the SLURM step (or MPI job) of its agent */
  if (var("DDP_LAUNCH_ID") || (var("TORCHELASTIC_RUN_ID") && var("RANK"))) rc = from_rank_vars(out);
  /* MPI's before SLURM's: mpirun inside an allocation starts its ranks
  ** through a SLURM step of one task per node, whose SLURM_PROCID is not
  ** the rank */
  else if ((rc = from_mpi(out)) == 0 && out->kind == DL_LAUNCH_ALONE &&
           (rc = from_slurm(out)) == 0 && out->kind == DL_LAUNCH_ALONE)
    rc = from_rank_vars(out);
  if (rc) {
    dl_launch_kind k = out->kind;
    memset(out, 0, sizeof *out);
    out->kind = k;
    return rc;
  }
  if (out->kind == DL_LAUNCH_ALONE) out->world_size = out->local_world_size = out->nnodes = 1;
  return 0;
}

const char *dl_launch_kind_name(dl_launch_kind kind) {
  switch (kind) {
  case DL_LAUNCH_ALONE: return "alone";
  case DL_LAUNCH_DDPLUA: return "ddplua";
  case DL_LAUNCH_MPI: return "mpi";
  case DL_LAUNCH_SLURM: return "slurm";
  case DL_LAUNCH_TORCHRUN: return "torchrun";
  case DL_LAUNCH_ENV: return "env";
  }
  return "unknown";
}
