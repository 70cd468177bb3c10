#!/usr/bin/env bash
# Why two single-rank hosts reached half the link (results/cluster/README.md):
# on 2 (and 4) hosts of the virtual cluster at 1 Gbit/s,
#  1. one TCP connection, one direction vs both at once (tcp_duplex.py);
#  2. psar's ring at 16 MiB with its default 512 KiB segments (above Open
#     MPI's TCP eager limit of 64 KiB: rendezvous), with 32 and 60 KiB
#     segments (eager), with 4 MiB segments, and with the eager limit raised
#     to 1 MiB; Open MPI's MPI_Allreduce beside it.
# The eager limit of each run is given explicitly (PSAR_CLUSTER_TCP_EAGER),
# so the script shows the same whatever cluster.sh sets by default.
# Run as root from the repository root after scripts/build.sh, under
#   flock /tmp/psar-measure.lock results/cluster/duplex/run.sh   (README.md: the recorded run)
set -u
root=$(cd "$(dirname "$0")/../../.." && pwd)
here=$root/results/cluster/duplex
C="$root/scripts/cluster.sh --name psar-n"
P=$root/build/trainer/psar
trap '$C down >/dev/null 2>&1 || true' EXIT
echo "commit: $(git -C "$root" rev-parse --short HEAD)"
echo "before: $(uptime)"
$C up --hosts 4 --link 1Gbit --subnet 10.99.220.0/24 >/dev/null
for mode in uni bidi uni bidi; do
  $C exec 2 -- python3 "$here/tcp_duplex.py" $mode server 10.99.220.2 33554432 &
  sleep 0.5
  $C exec 1 -- python3 "$here/tcp_duplex.py" $mode client 10.99.220.2 33554432
  wait
done
# label NP EAGER_BYTES -- psar bench args
b() {
  local label=$1 np=$2 eager=$3
  shift 4
  echo "== $label (eager limit $eager B)"
  PSAR_CLUSTER_TCP_EAGER=$eager $C mpirun -np "$np" --per-host 1 -- \
    "$P" bench allreduce -b 16M -e 16M -n 5 -w 1 -c 1 "$@" 2>&1 | grep -v '^#'
}
b "2 hosts x 1, 512K segments" 2 65536 -- --algos ring,mpi
b "2 hosts x 1, 32K segments" 2 65536 -- --algos ring --set sync.segment_bytes=32K
b "2 hosts x 1, 60K segments" 2 65536 -- --algos ring --set sync.segment_bytes=60K
b "2 hosts x 1, 4M segments" 2 65536 -- --algos ring --set sync.segment_bytes=4M
b "2 hosts x 1, 512K segments" 2 1048576 -- --algos ring,mpi
b "4 hosts x 1, 512K segments" 4 65536 -- --algos ring,mpi,butterfly
b "4 hosts x 1, 512K segments" 4 1048576 -- --algos ring,mpi,butterfly
echo "after: $(uptime)"
