#!/usr/bin/env bash
# Link efficiency on the virtual cluster (scripts/cluster.sh, 1 Gbit/s tbf
# links): ring allreduce busbw as a fraction of the link rate at 16–64 MiB,
# Open MPI's MPI_Allreduce and the hierarchical allreduce in the same runs.
# Then the same bench under psar's emulator on one host (net.bandwidth=1Gbit).
# Writes results/cluster/{allreduce_*.csv,emulator_*.csv,efficiency.md,machine.txt}.
# Run as root from the repository root, on a quiet machine, after scripts/build.sh.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=$root/results/cluster
cluster="$root/scripts/cluster.sh --name psar-m"
psar=$root/build/trainer/psar
trap '$cluster down >/dev/null 2>&1 || true' EXIT

{
  echo "commit: $(git -C "$root" rev-parse HEAD)$(git -C "$root" diff --quiet HEAD -- . ':!results' || echo ' (with local changes)')"
  echo "date: $(date -u +%FT%TZ)"
  echo "before: $(uptime)"
  echo "steal (cpu line of /proc/stat, 8th value): $(awk '/^cpu / {print $9}' /proc/stat) jiffies"
  echo "cores: $(nproc)"
} >"$out/machine.txt"

$cluster up --hosts 4 --link 1Gbit --subnet 10.99.210.0/24
# name NP PER_HOST
run() {
  $cluster mpirun -np "$2" --per-host "$3" -- "$psar" bench allreduce \
    --algos ring,hierarchical,mpi -b 16M -e 64M -f 2 -n 10 -w 3 -c 1 --csv "$out/allreduce_$1.csv"
}
run 2hosts_x1 2 1
run 4hosts_x1 4 1
run 2hosts_x2 4 2
$cluster down
# psar's emulator at the same setting, one host: N ranks, a 1 Gbit/s NIC each.
for np in 2 4; do
  mpirun --allow-run-as-root --oversubscribe -np "$np" "$psar" bench allreduce \
    --algos ring,hierarchical -b 16M -e 64M -f 2 -n 10 -w 3 -c 1 --set net.bandwidth=1Gbit \
    --csv "$out/emulator_1Gbit_n$np.csv"
done
echo "after: $(uptime)" >>"$out/machine.txt"

# efficiency.md (busbw over the link rate) and the README's tables, from the
# CSVs just written, by the code psar_exp check holds them to.
(cd "$root/experiments" && /usr/bin/python3 -m psar_exp check --write cluster)
cat "$out/efficiency.md"
