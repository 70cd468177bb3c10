#!/usr/bin/env bash
# slurm_test.sh MODE SRC PSAR MPIRUN CONFIG     (MODE: launch | sigterm)
#
# psar under Debian's Slurm on a one-node cluster of this machine
# (scripts/slurm/local_slurm.sh, state in a temp dir, every daemon stopped at
# the end). Skips (exit 77), saying why, only when Slurm cannot start here.
#
# launch: `srun -O -n 4 --mpi=pmix psar train` and the same run under
#   `mpirun -np 4` write the same step rows (times aside), S steps per rank,
#   and the same checkpoints byte for byte — with a ring allreduce, and with
#   the parameter server under ps.security curve (1 shard, 3 workers); the
#   sbatch template (scripts/slurm/psar.sbatch) runs the ring job to the
#   same checkpoint.
# sigterm: a job of the sbatch template, cancelled by Slurm the way a time
#   limit ends it (SIGTERM to every rank, SIGKILL KillWait = 30 s later),
#   leaves summary.csv with status terminated and rows up to its last step;
#   submitted again, it resumes from its checkpoint, and its final checkpoint
#   equals an uninterrupted run's byte for byte. Skipped while psar does not
#   handle SIGTERM (no `terminated` status in trainer/).
set -uo pipefail
mode=$1 src=$2 psar=$(realpath "$3") mpirun=$4 config=$(realpath "$5")
NP=4 S=20 K=10 L=5
work=$(mktemp -d /tmp/psar_slurm.XXXXXX)
cluster=$work/cluster
cleanup() {
  "$src/scripts/slurm/local_slurm.sh" down "$cluster" >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "slurm_test: FAIL: $*"; exit 1; }
skip() { echo "slurm_test: SKIPPED: $*"; exit 77; }

if [[ $mode == sigterm ]] && ! grep -rq '"terminated"' "$src/trainer"; then
  skip "psar does not yet stop cleanly on SIGTERM (no status 'terminated' in trainer/)"
fi
for tool in munged slurmctld slurmd srun sbatch; do
  command -v $tool >/dev/null || skip "$tool is not installed (scripts/deps.sh installs slurm-wlm and munge)"
done
(($(id -u) == 0)) || skip "slurmd needs root here"
"$src/scripts/slurm/local_slurm.sh" up "$cluster" --cpus 2 >"$work/up.log" 2>&1 ||
  skip "Slurm does not start here: $(tail -n 8 "$work/up.log" | tr '\n' ' ')"
export SLURM_CONF=$cluster/slurm.conf
srun --mpi=list 2>&1 | grep -q pmix || skip "this Slurm has no PMIx plugin (srun --mpi=list)"

train_args=(--quiet --set train.checkpoint_every=$K --set train.log_every=$L)
untimed() { cut -d, -f1-4,8-10 "$1" | sort; }  # steps.csv without step_s, compute_s, sync_s, exposed_sync_s
complete_checkpoints() { ls -d "$1"/checkpoints/step_*/MANIFEST 2>/dev/null | sed -E 's|.*/step_0*([0-9]+)/MANIFEST|\1|' | sort -n; }
# Every rank-checkpoint and shard file of step $3 in run $1 equals run $2's.
same_checkpoint() {
  local dir files=0
  dir=$(printf 'checkpoints/step_%08d' "$3")
  [[ -e $1/$dir/MANIFEST ]] || fail "$1 has no complete checkpoint at step $3"
  for f in "$2/$dir"/*.ckpt; do
    cmp -s "$f" "$1/$dir/$(basename "$f")" || fail "$(basename "$f") of step $3 differs between $1 and $2"
    files=$((files + 1))
  done
  ((files == NP)) || fail "$files checkpoint files at step $3 in $2, expected $NP"
}
# Whole rows 1..$2 for each of the $3 ranks in run $1.
rows_complete() {
  awk -F, -v np="$3" -v s="$2" 'NR > 1 { n[$1]++; if ($2 != last[$1] + 1) bad = 1; last[$1] = $2 }
    END { for (r = 0; r < np; r++) if (n[r] != s || last[r] != s) bad = 1; exit bad }' "$1/steps.csv"
}

# srun and mpirun run the same job ($1: a name; $2: the ranks that write
# rows; the rest: psar train arguments): the same rows, checkpoints and summary.
same_under_srun_and_mpirun() {
  local name=$1 rows=$2
  shift 2
  timeout 300 srun -O -n $NP --mpi=pmix "$psar" train "$config" "${train_args[@]}" \
    --set train.steps=$S --out "$work/srun_$name" "$@" >"$work/srun_$name.log" 2>&1 ||
    { cat "$work/srun_$name.log"; fail "$name: srun -n $NP psar train failed"; }
  timeout 300 "$mpirun" --allow-run-as-root --oversubscribe -np $NP "$psar" train "$config" \
    "${train_args[@]}" --set train.steps=$S --out "$work/mpirun_$name" "$@" >"$work/mpirun_$name.log" 2>&1 ||
    { cat "$work/mpirun_$name.log"; fail "$name: mpirun -np $NP psar train failed"; }
  local srun=$work/srun_$name ref=$work/mpirun_$name
  grep -q "^[^,]*,[^,]*,$NP,$S,.*,finished$" "$srun/summary.csv" ||
    fail "$name: srun's summary.csv is not a finished run of $NP ranks and $S steps: $(cat "$srun/summary.csv")"
  rows_complete "$srun" $S "$rows" || fail "$name: srun's steps.csv does not hold rows 1..$S for each of $rows ranks"
  diff <(untimed "$ref/steps.csv") <(untimed "$srun/steps.csv") >/dev/null ||
    fail "$name: the step rows under srun differ from those under mpirun"
  [[ $(complete_checkpoints "$srun" | tr '\n' ' ') == "$(complete_checkpoints "$ref" | tr '\n' ' ')" ]] ||
    fail "$name: srun kept checkpoints $(complete_checkpoints "$srun"), mpirun $(complete_checkpoints "$ref")"
  for c in $(complete_checkpoints "$ref"); do same_checkpoint "$srun" "$ref" "$c"; done
  echo "slurm_test: $name: srun and mpirun: same rows of $rows ranks × $S steps, same checkpoints $(complete_checkpoints "$srun" | tr '\n' ' ')"
}

if [[ $mode == launch ]]; then
  same_under_srun_and_mpirun ring $NP --sync ring
  # The parameter server, encrypted: endpoints and keys exchanged under srun's PMIx.
  same_under_srun_and_mpirun ps_curve $((NP - 1)) --sync ps --set ps.security=curve

  # The sbatch template, --overcommit for 4 tasks on 2 CPUs.
  job=$(cd "$work" && PSAR=$psar sbatch --parsable --wait -O -n $NP -o "$work/sbatch.out" \
          "$src/scripts/slurm/psar.sbatch" "$config" "$work/sbatch" "${train_args[@]}" \
          --set train.steps=$S) || { cat "$work/sbatch.out"; fail "sbatch psar.sbatch failed"; }
  rows_complete "$work/sbatch" $S $NP || fail "the sbatch job's steps.csv is not whole"
  same_checkpoint "$work/sbatch" "$work/mpirun_ring" $S
  echo "slurm_test: sbatch job $job: same rows and final checkpoint as mpirun"
  echo "slurm_test: ok"
  exit 0
fi

# ---- sigterm: the scheduler ends a job, a second submission resumes it ------------------
run=$work/run
job=$(cd "$work" && PSAR=$psar sbatch --parsable -O -n $NP -o "$work/job1.out" \
        "$src/scripts/slurm/psar.sbatch" "$config" "$run" "${train_args[@]}" \
        --set train.steps=1000000) || fail "sbatch failed"
deadline=$((SECONDS + 120))
until [[ -n $(complete_checkpoints "$run") ]]; do
  ((SECONDS < deadline)) || fail "no checkpoint within 120 s: $(cat "$work/job1.out")"
  sleep 0.2
done
# What a time limit does: SIGCONT + SIGTERM to every process of the job, SIGKILL after KillWait.
scancel "$job"
deadline=$((SECONDS + 60))
while squeue -h -j "$job" 2>/dev/null | grep -q .; do
  ((SECONDS < deadline)) || fail "job $job still there 60 s after scancel"
  sleep 0.2
done
[[ -e $run/summary.csv ]] || fail "no summary.csv after SIGTERM: $(tail -n 5 "$work/job1.out")"
grep -q ",terminated" "$run/summary.csv" || fail "summary.csv does not say terminated: $(cat "$run/summary.csv")"
last=$(complete_checkpoints "$run" | tail -1)
stopped=$(awk -F, 'NR > 1 && $2 > m { m = $2 } END { print m + 0 }' "$run/steps.csv")
((stopped >= last)) || fail "rows end at $stopped, before the checkpoint $last"
rows_complete "$run" "$stopped" $NP || fail "steps.csv is not whole up to step $stopped"
target=$(((last / K + 1) * K))  # the first checkpoint step after the one resumed from
(cd "$work" && PSAR=$psar sbatch --parsable --wait -O -n $NP -o "$work/job2.out" \
   "$src/scripts/slurm/psar.sbatch" "$config" "$run" "${train_args[@]}" --set train.steps=$target) >/dev/null ||
  { cat "$work/job2.out"; fail "the resubmitted job failed"; }
grep -q -- "--resume" "$work/job2.out" || fail "the resubmitted job did not resume: $(cat "$work/job2.out")"
timeout 300 "$mpirun" --allow-run-as-root --oversubscribe -np $NP "$psar" train "$config" \
  "${train_args[@]}" --set train.steps=$target --out "$work/ref" >"$work/ref.log" 2>&1 ||
  { cat "$work/ref.log"; fail "the uninterrupted run failed"; }
same_checkpoint "$run" "$work/ref" $target
echo "slurm_test: job $job terminated at step $stopped (checkpoint $last), resumed to $target bitwise"
echo "slurm_test: ok"
