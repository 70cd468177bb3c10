#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for trying psar's sbatch template
# and srun launch (docs/slurm.md) and for the Slurm test: munged,
# slurmctld and slurmd from Debian's munge and slurm-wlm packages, every
# file (key, sockets, state, logs, pids) under DIR, nothing under /etc.
#
#   scripts/slurm/local_slurm.sh up DIR [--cpus N]   then: export SLURM_CONF=DIR/slurm.conf
#   scripts/slurm/local_slurm.sh down DIR
#
# The node is this host (`hostname -s`, reached at 127.0.0.1) with N CPUs
# (default: nproc); ports are free ones chosen at `up`. `up` returns once the
# node is idle (deadline 30 s) or fails saying why (exit 1, after `down`);
# `down` cancels this cluster's jobs, stops the three daemons it started (by
# their recorded pids) and is idempotent. Needs root (slurmd runs jobs as
# their user) and a munge key of its own, made at `up`.
set -euo pipefail

die() {
  echo "local_slurm.sh: $*" >&2
  exit 1
}
usage() { die "usage: local_slurm.sh up DIR [--cpus N] | down DIR"; }

cmd=${1:-}
dir=${2:-}
[[ -n $cmd && -n $dir ]] || usage
shift 2
conf=$dir/slurm.conf

# Stops what `up` started: pids recorded in DIR/pids, newest first.
down() {
  [[ -d $dir ]] || return 0
  if [[ -f $conf ]] && [[ -s $dir/pids ]]; then
    SLURM_CONF=$conf timeout 10 scancel --full --quiet --user="$(id -un)" 2>/dev/null || true
  fi
  [[ -f $dir/pids ]] || return 0
  local pids
  pids=$(tac "$dir/pids")
  for pid in $pids; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in $pids; do
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  done
  rm -f "$dir/pids"
}

free_port() {
  local port
  for _ in $(seq 50); do
    port=$((20000 + RANDOM % 30000))
    ss -Htln "sport = :$port" 2>/dev/null | grep -q . || { echo "$port"; return; }
  done
  die "no free TCP port found"
}

up() {
  local cpus
  cpus=$(nproc)
  while (($#)); do
    case $1 in
      --cpus) cpus=${2:?--cpus needs a value}; shift 2 ;;
      *) usage ;;
    esac
  done
  (($(id -u) == 0)) || die "needs root (slurmd starts the job steps)"
  for tool in munged slurmctld slurmd srun sinfo scancel; do
    command -v "$tool" >/dev/null || die "$tool not found (scripts/deps.sh installs slurm-wlm and munge)"
  done
  [[ ! -s $dir/pids ]] || die "$dir already holds a running cluster (down it first)"
  mkdir -p "$dir"/{munge,ctld,spool}
  chmod 711 "$dir/munge"
  trap 'echo "local_slurm.sh: up failed; stopping what started" >&2; down' ERR
  head -c 1024 /dev/urandom >"$dir/munge/munge.key"
  chmod 400 "$dir/munge/munge.key"
  local node ctld_port slurmd_port
  node=$(hostname -s)
  ctld_port=$(free_port)
  slurmd_port=$(free_port)
  cat >"$conf" <<CONF
# Written by scripts/slurm/local_slurm.sh: one node, state under $dir.
ClusterName=psarlocal
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/socket
CredType=cred/munge
StateSaveLocation=$dir/ctld
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
# No cgroups needed: processes are tracked by their parentage.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
MpiDefault=pmix
ReturnToService=2
# At a time limit or scancel: SIGTERM, then SIGKILL this many seconds later.
KillWait=30
InactiveLimit=0
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=psar Nodes=$node Default=YES MaxTime=INFINITE State=UP
CONF
  : >"$dir/pids"
  munged -F -f --socket="$dir/munge/socket" --key-file="$dir/munge/munge.key" \
    --log-file="$dir/munged.log" --pid-file="$dir/munge/munged.pid" \
    --seed-file="$dir/munge/seed" >"$dir/munged.out" 2>&1 &
  echo $! >>"$dir/pids"
  for _ in $(seq 50); do [[ -S $dir/munge/socket ]] && break; sleep 0.1; done
  [[ -S $dir/munge/socket ]] || { cat "$dir/munged.out" >&2; die "munged did not start"; }
  SLURM_CONF=$conf slurmctld -D -i >"$dir/slurmctld.out" 2>&1 &
  echo $! >>"$dir/pids"
  SLURM_CONF=$conf slurmd -D >"$dir/slurmd.out" 2>&1 &
  echo $! >>"$dir/pids"
  local state=""
  for _ in $(seq 300); do
    state=$(SLURM_CONF=$conf sinfo -h -N -o %T 2>/dev/null || true)
    [[ $state == idle ]] && break
    sleep 0.1
  done
  if [[ $state != idle ]]; then
    tail -n 5 "$dir"/slurmctld.out "$dir"/slurmd.out "$dir"/slurmctld.log "$dir"/slurmd.log >&2 2>/dev/null || true
    die "the node is '${state:-unknown}', not idle, 30 s after starting the daemons (logs above)"
  fi
  trap - ERR
  echo "local_slurm.sh: node $node ($cpus CPUs) idle; export SLURM_CONF=$conf"
}

case $cmd in
  up) up "$@" ;;
  down) down ;;
  *) usage ;;
esac
