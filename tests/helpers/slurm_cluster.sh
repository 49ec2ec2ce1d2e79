#!/usr/bin/env bash
# tests/helpers/slurm_cluster.sh: a real SLURM 22.05 cluster of two nodes,
# n1 and n2, on this host (two slurmd beside one slurmctld and munged), for
# the specs that launch ddplua under srun, sbatch and mpirun.
#
#   bash tests/helpers/slurm_cluster.sh up       # start it (idempotent)
#   bash tests/helpers/slurm_cluster.sh status   # "up" (exit 0) or why not
#   bash tests/helpers/slurm_cluster.sh down     # stop what up started
#   bash tests/helpers/slurm_cluster.sh env      # the line to eval: SLURM_CONF=...
#
# Everything lives under $DDPLUA_SLURM_DIR (/tmp/ddplua-slurm): slurm.conf,
# spool and state, logs, pid files.  Clients find the configuration through
# SLURM_CONF (slurm.lua and run-tests.sh export it), and /etc/slurm/slurm.conf
# links to it when that file does not exist, so a bare `srun` works too.
#
# up exits 77 ("skip") when the cluster cannot run here (not root, packages
# missing and not installable, a daemon that does not start or a node that
# does not come up), printing "slurm_cluster: skip: <reason>" first, then the
# daemons' log tails, and stopping what it started.  The machines are gVisor
# containers without cgroups, hence proctrack/linuxproc and task/affinity
# (docs in the shared notes, clusters.md).
set -uo pipefail

D=${DDPLUA_SLURM_DIR:-/tmp/ddplua-slurm}
CONF=$D/slurm.conf
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
SKIP=77
CTLD_PORT=${DDPLUA_SLURM_PORT:-6917}   # n1, n2 listen on the next two
NODES="n1 n2"
export SLURM_CONF=$CONF

skip() { echo "slurm_cluster: skip: $*"; exit $SKIP; }
# a daemon failed: stop what started, say why, show the logs
giveup() {
  stop_all quiet
  echo "slurm_cluster: skip: $*"
  tail_logs
  exit $SKIP
}
tail_logs() {
  local f
  for f in "$D"/log/*; do
    [ -s "$f" ] || continue
    echo "--- $f"; tail -n 15 "$f"
  done
}

pid_of() {  # $1: pid file -> the pid if that process lives
  local p
  [ -s "$1" ] || return 1
  p=$(cat "$1" 2>/dev/null)
  [ -n "$p" ] && kill -0 "$p" 2>/dev/null && echo "$p"
}

munge_ok() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }

# healthy: both daemons' pids alive, slurmctld answers, n1 and n2 take jobs
healthy() {
  pid_of "$D/run/slurmctld.pid" >/dev/null || { why="slurmctld not running"; return 1; }
  local n
  for n in $NODES; do
    pid_of "$D/run/slurmd-$n.pid" >/dev/null || { why="slurmd $n not running"; return 1; }
  done
  munge_ok || { why="munge does not answer"; return 1; }
  timeout 5 scontrol ping 2>/dev/null | grep -q 'is UP' || { why="slurmctld does not answer"; return 1; }
  local st
  st=$(timeout 5 sinfo -h -N -o '%N %T' 2>/dev/null)
  for n in $NODES; do
    grep -qE "^$n (idle|mixed|allocated|completing)" <<<"$st" ||
      { why="node $n is $(awk -v n="$n" '$1==n{print $2}' <<<"$st")"; return 1; }
  done
  return 0
}

write_conf() {
  local host cpus
  host=$(hostname -s)
  cpus=$(nproc)
  mkdir -p "$D"/{run,log,state} "$D"/spool/{n1,n2}
  cat >"$CONF" <<EOF
# written by tests/helpers/slurm_cluster.sh -- two nodes on this host
ClusterName=ddplua
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
# a requeued job may start again cred_expire s later (default 120)
AuthInfo=cred_expire=10
CredType=cred/munge
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool/%n
SlurmctldPidFile=$D/run/slurmctld.pid
SlurmdPidFile=$D/run/slurmd-%n.pid
SlurmctldLogFile=$D/log/slurmctld.log
SlurmdLogFile=$D/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
SwitchType=switch/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
SchedulerType=sched/builtin
# the main scheduling pass every second (default 60): a requeued job, once
# eligible again, starts without waiting a minute
SchedulerParameters=sched_interval=1
ReturnToService=2
# requeue allowed (scontrol requeue, --requeue); pre-emption specs need it
JobRequeue=1
# short waits so tests end quickly: SIGTERM -> SIGKILL after 3 s; finished
# jobs stay visible to scontrol show job for 10 minutes
KillWait=3
MinJobAge=600
InactiveLimit=30
MessageTimeout=10
SlurmdTimeout=60
SlurmctldTimeout=60
BatchStartTimeout=20
UnkillableStepTimeout=30
OverTimeLimit=0
NodeName=n1 NodeHostname=$host NodeAddr=127.0.0.1 Port=$((CTLD_PORT + 1)) CPUs=$cpus State=UNKNOWN
NodeName=n2 NodeHostname=$host NodeAddr=127.0.0.1 Port=$((CTLD_PORT + 2)) CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
}

start_munge() {
  munge_ok && return 0   # a munged already answers (ours or the system's)
  if [ ! -s /etc/munge/munge.key ]; then
    mungekey --create >/dev/null 2>&1 || { /usr/sbin/create-munge-key -f >/dev/null 2>&1 || true; }
    chown munge:munge /etc/munge/munge.key 2>/dev/null; chmod 0400 /etc/munge/munge.key 2>/dev/null
  fi
  mkdir -p /run/munge && chown munge:munge /run/munge && chmod 0755 /run/munge
  runuser -u munge -- /usr/sbin/munged >"$D/log/munged.start" 2>&1 ||
    giveup "munged does not start: $(tail -n 1 "$D/log/munged.start")"
  cp /run/munge/munged.pid "$D/run/munged.pid" 2>/dev/null
  local i
  for i in $(seq 50); do munge_ok && return 0; sleep 0.1; done
  giveup "munged started but does not answer"
}

up() {
  [ "$(id -u)" -eq 0 ] || skip "not root (slurmd must run as root)"
  if healthy; then echo "slurm cluster up (n1 n2, SLURM_CONF=$CONF)"; return 0; fi
  stop_all quiet
  local t0=$SECONDS
  rm -rf "$D"
  mkdir -p "$D/log"
  bash "$ROOT/scripts/install-deps.sh" slurmctld slurmd slurm-client munge openmpi-bin >"$D/log/install" 2>&1 ||
    skip "cannot install the SLURM packages: $(tail -n 1 "$D/log/install")"
  for b in slurmctld slurmd srun sbatch munged mpirun; do
    command -v "$b" >/dev/null || [ -x "/usr/sbin/$b" ] || skip "$b is not installed"
  done
  grep -qE '^127\.0\.0\.1([[:space:]].*)?[[:space:]]n1([[:space:]]|$)' /etc/hosts &&
    grep -qE '^127\.0\.0\.1([[:space:]].*)?[[:space:]]n2([[:space:]]|$)' /etc/hosts ||
    echo "127.0.0.1 n1 n2" >>/etc/hosts || skip "cannot add n1 n2 to /etc/hosts"
  write_conf
  [ -e /etc/slurm/slurm.conf ] || { mkdir -p /etc/slurm && ln -s "$CONF" /etc/slurm/slurm.conf; }
  start_munge
  # -c: a fresh start, no jobs from an earlier cluster
  /usr/sbin/slurmctld -c -f "$CONF" >"$D/log/slurmctld.start" 2>&1 ||
    giveup "slurmctld does not start: $(tail -n 1 "$D/log/slurmctld.start")"
  local n
  for n in $NODES; do
    /usr/sbin/slurmd -N "$n" -f "$CONF" >"$D/log/slurmd-$n.start" 2>&1 ||
      giveup "slurmd $n does not start: $(tail -n 1 "$D/log/slurmd-$n.start")"
  done
  local i
  for i in $(seq 150); do   # 15 s
    if healthy; then echo "slurm cluster up (n1 n2, SLURM_CONF=$CONF, $((SECONDS - t0)) s)"; return 0; fi
    # a daemon that died after forking (a port in use) does not come back
    [ "$i" -ge 30 ] && [[ $why == *"not running" ]] && giveup "$why"
    sleep 0.1
  done
  healthy || giveup "the cluster did not come up in 15 s: $why"
}

# TERM to the processes in the pid files given, KILL to those left after
# 3 s; returns when all are gone
stop_pids() {
  local f p i pids=()
  for f in "$@"; do
    p=$(pid_of "$f") && { pids+=("$p"); kill -TERM "$p" 2>/dev/null; }
    rm -f "$f"
  done
  [ ${#pids[@]} -eq 0 ] && return 0
  for i in $(seq 30); do alive "${pids[@]}" || return 0; sleep 0.1; done
  kill -KILL "${pids[@]}" 2>/dev/null
  for i in $(seq 30); do alive "${pids[@]}" || return 0; sleep 0.1; done
}
alive() { local p; for p; do kill -0 "$p" 2>/dev/null && return 0; done; return 1; }

stop_all() {
  local n i p
  # jobs first, so their steps (slurmstepd and the tasks) end with them:
  # SIGTERM now, SIGKILL KillWait (3 s) later
  if pid_of "$D/run/slurmctld.pid" >/dev/null; then
    timeout 5 scancel --quiet --user=root >/dev/null 2>&1
    for i in $(seq 60); do
      [ -z "$(timeout 2 squeue -h -t R,CG,S -o %i 2>/dev/null)" ] && ! pgrep -x slurmstepd >/dev/null && break
      sleep 0.1
    done
  fi
  stop_pids "$D/run/slurmctld.pid" "$D"/run/slurmd-*.pid
  # slurmstepd daemonizes away from slurmd: any left belong to our slurmds
  # (the cluster of this file is the only one on the host)
  for p in $(pgrep -x slurmstepd); do kill -KILL "$p" 2>/dev/null; done
  stop_pids "$D/run/munged.pid"   # only a munged this script started
  [ "$(readlink /etc/slurm/slurm.conf 2>/dev/null)" = "$CONF" ] && rm -f /etc/slurm/slurm.conf
  [ "${1:-}" = quiet ] || echo "slurm cluster down"
}

case ${1:-} in
  up) up ;;
  down) stop_all ;;
  status) if healthy; then echo up; else echo "down: $why"; exit 1; fi ;;
  env) echo "SLURM_CONF=$CONF" ;;
  *) echo "usage: $0 up|down|status|env" >&2; exit 2 ;;
esac
