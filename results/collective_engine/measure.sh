#!/usr/bin/env bash
# Measures the collective engine against the hand-written executors it
# replaced, and bf16 against fp32 on the wire at an emulated 1 Gbit/s.
#
#   results/collective_engine/measure.sh OLD_PSAR NEW_PSAR OUT_DIR [PART...]
#
# PART: engine2, engine4 (old vs new at np = 2, 4), aa2, aa4 (old against
# itself, the same runs with OLD on both sides: how far two runs of one
# binary differ in this sitting), dtype2, dtype4 (fp32 vs bf16 at np = 2, 4);
# default engine2 engine4 dtype2 dtype4, in that order. Run the parts in
# separate calls to keep each one short; they append to OUT_DIR.
# REPS=K (environment, default 3): runs of each binary per np.
#
# OLD_PSAR: psar built at the commit before the engine; NEW_PSAR: psar at the
# engine's commit. Runs `psar bench allreduce` at np = 2 and 4, 4 KiB–64 MiB,
# REPS times each, old and new alternating (new first on even runs), each
# run under flock /tmp/psar-measure.lock; then fp32 and bf16 (sync.dtype) at
# net.bandwidth=1Gbit, 1–16 MiB, with the byte counters (--volume-csv).
# Writes the CSVs, each run's output and the machine state into OUT_DIR;
# table.py turns them into table.md.
set -euo pipefail
old=$1 new=$2 out=$3
shift 3
reps=${REPS:-3}
[[ $reps =~ ^[1-9][0-9]*$ ]] || { echo "measure.sh: REPS '$reps': expected a positive integer" >&2; exit 2; }
parts=("$@")
(( ${#parts[@]} )) || parts=(engine2 engine4 dtype2 dtype4)
mkdir -p "$out"
algos=ring,tree,butterfly,halving_doubling,naive,hierarchical
mpirun=(mpirun --allow-run-as-root --oversubscribe)
state() { { echo "## $1 $(date -u +%FT%TZ)"; uptime; vmstat 1 3; } >> "$out/machine.txt"; }
[[ -f $out/machine.txt ]] ||
  echo "# nproc $(nproc); $(grep -m1 'model name' /proc/cpuinfo)" > "$out/machine.txt"
# engine NP PREFIX A B BIN_A BIN_B: REPS runs of each side, alternating.
engine() {
  local np=$1 prefix=$2 a=$3 b=$4 bin_a=$5 bin_b=$6
  for ((rep = 1; rep <= reps; ++rep)); do
    sides=("$a" "$b")
    (( rep % 2 == 0 )) && sides=("$b" "$a")
    for side in "${sides[@]}"; do
      bin=$bin_a
      [[ $side == "$b" ]] && bin=$bin_b
      state "$prefix np=$np rep=$rep $side"
      flock /tmp/psar-measure.lock "${mpirun[@]}" -np "$np" "$bin" bench allreduce \
        --algos "$algos" -b 4K -e 64M -f 4 -n 10 -w 2 -c 1 \
        --csv "$out/${prefix}_${side}_np${np}_rep${rep}.csv" > "$out/${prefix}_${side}_np${np}_rep${rep}.txt"
    done
  done
}
dtype() {
  local np=$1
  for dtype in fp32 bf16; do
    state "dtype np=$np $dtype"
    flock /tmp/psar-measure.lock "${mpirun[@]}" -np "$np" "$new" bench allreduce \
      --algos ring,tree,butterfly,halving_doubling,naive -b 1M -e 16M -f 4 -n 5 -w 1 -c 1 \
      --set net.bandwidth=1Gbit --set sync.dtype=$dtype \
      --csv "$out/dtype_${dtype}_np${np}.csv" --volume-csv "$out/dtype_${dtype}_np${np}_volume.csv" \
      > "$out/dtype_${dtype}_np${np}.txt"
  done
}
for part in "${parts[@]}"; do
  case $part in
    engine2 | engine4) engine "${part#engine}" engine old new "$old" "$new" ;;
    aa2 | aa4) engine "${part#aa}" aa a b "$old" "$old" ;;
    dtype2 | dtype4) dtype "${part#dtype}" ;;
    *) echo "measure.sh: unknown part '$part' (engine2, engine4, aa2, aa4, dtype2, dtype4)" >&2; exit 2 ;;
  esac
  state "end $part"
done
