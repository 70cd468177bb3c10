#!/usr/bin/env bash
# Every psar allreduce on the 4-host virtual cluster (one rank per host, links
# shaped to 1 Gbit/s) against the same benchmark on 4 ranks of this host with
# the network emulator at net.bandwidth=1Gbit, 2-32 MiB, three repetitions,
# the side that goes first alternating; every run under the measurement lock,
# the cluster brought up before and taken down after each of its runs.
#
#   results/cluster_emulator/measure.sh PSAR OUT_DIR [REP...]
#
# REP: the repetitions to run (default 1 2 3), so that a sitting can be split
# into several invocations; odd ones run the cluster first.
set -uo pipefail
psar=$1 out=$2
shift 2
reps=("$@")
(($#)) || reps=(1 2 3)
root=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$out"
algos=ring,tree,butterfly,halving_doubling,naive,hierarchical
bench=(bench allreduce --algos $algos -b 2M -e 32M -f 4 -n 4 -w 1 -c 1)
state() { { echo "## $1 $(date -u +%FT%TZ)"; uptime; vmstat 1 3; } >> "$out/machine.txt"; }
emulator() {
  state "emulator rep $1"
  flock /tmp/psar-measure.lock mpirun --allow-run-as-root --oversubscribe -np 4 "$psar" "${bench[@]}" \
    --set net.bandwidth=1Gbit --csv "$out/emulator_rep$1.csv" > "$out/emulator_rep$1.txt" 2>&1
}
cluster() {
  "$root/scripts/cluster.sh" --name psar-p4 up --hosts 4 --link 1Gbit --subnet 10.99.214.0/24 ||
    { "$root/scripts/cluster.sh" --name psar-p4 down; return 1; }
  state "cluster rep $1"
  flock /tmp/psar-measure.lock "$root/scripts/cluster.sh" --name psar-p4 mpirun -np 4 --per-host 1 -- \
    "$psar" "${bench[@]}" --csv "$out/cluster_rep$1.csv" > "$out/cluster_rep$1.txt" 2>&1
  "$root/scripts/cluster.sh" --name psar-p4 down
}
for k in "${reps[@]}"; do
  if ((k % 2)); then cluster "$k"; emulator "$k"; else emulator "$k"; cluster "$k"; fi
done
state end
