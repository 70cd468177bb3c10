#!/usr/bin/env bash
# sigterm_resume.sh PSAR MPIRUN NP CONFIG [PSAR_TRAIN_ARGS...]
#
# SIGTERM to mpirun in the middle of a `psar train` job (what a scheduler
# sends at a job's time limit), then --resume:
#  1. The job runs "forever" (train.steps 10^6, rows flushed every L = 5
#     steps, checkpoints on). Once steps.csv holds rows past step 20, mpirun
#     gets SIGTERM. Open MPI's mpirun passes it on to the ranks
#     odls_base_sigkill_timeout seconds later and kills them as many seconds
#     after that (docs/checkpoints.md); this test gives them 5 s.
#  2. The job must end within 20 s. The run directory must hold summary.csv
#     with status "terminated" and steps S, every rank's step rows 1..S
#     (S the step the ranks agreed to stop after, not necessarily a flush
#     boundary), a complete checkpoint at S and no temporary file.
#  3. `--resume` continues from S to S + K; an uninterrupted run of S + K
#     steps must write the same final checkpoint, byte for byte, and the same
#     step rows (times aside).
set -uo pipefail
psar=$1 mpirun=$2 np=$3 config=$4
shift 4
K=10 L=5
work=$(mktemp -d /tmp/psar_sigterm.XXXXXX)
trap 'rm -rf "$work"' EXIT
run="$work/run" ref="$work/ref"
launch() { "$mpirun" --allow-run-as-root --oversubscribe --mca odls_base_sigkill_timeout 5 \
             -np "$np" "$psar" train "$config" --quiet \
             --set train.checkpoint_every=1000000 --set train.log_every=$L "$@"; }
fail() { echo "sigterm_resume: FAIL: $*"; exit 1; }

# ---- 1. a long run, SIGTERM to mpirun once rows past step 20 are on disk -------------
launch "$@" --set train.steps=1000000 --out "$run" >"$work/stopped.log" 2>&1 &
job=$!
deadline=$((SECONDS + 120))
while :; do
  (( SECONDS < deadline )) || { kill -9 $job; fail "no rows past step 20 within 120 s"; }
  kill -0 $job 2>/dev/null || { cat "$work/stopped.log"; fail "the job ended before the signal"; }
  awk -F, 'NR > 1 && $2 > 20 { found = 1 } END { exit !found }' "$run/steps.csv" 2>/dev/null && break
  sleep 0.05
done
# $job is the subshell running mpirun (launch is a function): signal mpirun itself.
mpirun_pid=$(pgrep -P $job | head -1)
[[ -n $mpirun_pid ]] || fail "no mpirun under the job"
start=$(date +%s%N)
kill -TERM "$mpirun_pid"
wait $job
rc=$?
elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))
echo "sigterm_resume: SIGTERM to mpirun; it exited with $rc after ${elapsed_ms} ms"
(( elapsed_ms <= 20000 )) || fail "the job took ${elapsed_ms} ms (> 20 s) to end"

# ---- 2. what the stopped run left -------------------------------------------------
[[ -e $run/summary.csv ]] || { cat "$work/stopped.log"; fail "no summary.csv"; }
status=$(awk -F, 'NR == 2 { print $NF }' "$run/summary.csv")
S=$(awk -F, 'NR == 1 { for (i = 1; i <= NF; ++i) if ($i == "steps") c = i } NR == 2 { print $c }' "$run/summary.csv")
[[ $status == terminated ]] || fail "summary.csv status '$status', expected terminated"
(( S > 20 )) || fail "summary.csv says $S steps"
tmp=$(find "$run" -name '*.tmp*')
[[ -z $tmp ]] || fail "temporary files left behind: $tmp"
awk -F, -v np="$np" -v S="$S" '
  NR == 1 { next }
  { if ($2 != last[$1] + 1) { printf "rank %s: step %s after %s\n", $1, $2, last[$1]; bad = 1 }
    last[$1] = $2 }
  END {
    for (r in last) {
      n++
      if (last[r] != S) { printf "rank %s ends at step %s, the summary at %s\n", r, last[r], S; bad = 1 }
    }
    if (n < np - 1) { print "rows of only " n " ranks"; bad = 1 }
    exit bad
  }' "$run/steps.csv" || fail "steps.csv does not hold every rank's rows 1..$S"
checkpoint=$(printf '%s/checkpoints/step_%08d/MANIFEST' "$run" "$S")
[[ -e $checkpoint ]] || fail "no complete checkpoint at step $S"
echo "sigterm_resume: status terminated after step $S: every rank's rows 1..$S, a checkpoint at $S"

# ---- 3. resume to S + K vs an uninterrupted run of S + K steps ----------------------------
target=$((S + K))
# Both end with a checkpoint at the target step, to compare byte for byte.
launch "$@" --set train.steps=$target --set train.checkpoint_every=$target --resume "$run" \
  >"$work/resumed.log" 2>&1 || { cat "$work/resumed.log"; fail "the resumed run failed"; }
launch "$@" --set train.steps=$target --set train.checkpoint_every=$target --out "$ref" \
  >"$work/ref.log" 2>&1 || { cat "$work/ref.log"; fail "the reference run failed"; }
final=$(printf 'checkpoints/step_%08d' $target)
files=0
for f in "$ref/$final"/*.ckpt; do
  cmp -s "$f" "$run/$final/$(basename "$f")" ||
    fail "$(basename "$f") of step $target differs from the uninterrupted run's"
  files=$((files + 1))
done
(( files >= np - 1 )) || fail "only $files checkpoint files at step $target"
untimed() { cut -d, -f1-4,8-10 "$1" | sort; }
diff <(untimed "$ref/steps.csv") <(untimed "$run/steps.csv") >/dev/null ||
  fail "the resumed run's steps.csv differs from the uninterrupted one's"
echo "sigterm_resume: resumed from step $S to $target: $files checkpoint files bitwise equal to the uninterrupted run's"
echo "sigterm_resume: ok"
