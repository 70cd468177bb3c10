#!/usr/bin/env bash
# kill_resume.sh PSAR MPIRUN NP CONFIG [PSAR_TRAIN_ARGS...]
#
# One rank of a `psar train` job killed with SIGKILL mid-run, then --resume:
#  1. The job runs "forever" (train.steps 10^6) with a checkpoint every K = 10
#     steps and a flush every L = 5. Once a checkpoint is complete and
#     steps.csv holds rows past it, the rank started last gets SIGKILL.
#  2. mpirun must exit non-zero within 10 s. The run directory must hold, for
#     every rank, whole step rows 1..S with S a flush boundary at or past the
#     checkpoint, no summary.csv and no temporary file.
#  3. `--resume` continues from the latest complete checkpoint C to C + K;
#     an uninterrupted run of C + K steps must write the same final
#     checkpoint, byte for byte (every rank's parameters and optimizer state,
#     every shard's), and the same step rows (times aside).
set -uo pipefail
psar=$1 mpirun=$2 np=$3 config=$4
shift 4
K=10 L=5
work=$(mktemp -d /tmp/psar_kill.XXXXXX)
trap 'rm -rf "$work"' EXIT
run="$work/run" ref="$work/ref"
launch() { "$mpirun" --allow-run-as-root --oversubscribe -np "$np" "$psar" train "$config" --quiet \
             --set train.checkpoint_every=$K --set train.log_every=$L "$@"; }
fail() { echo "kill_resume: FAIL: $*"; exit 1; }
complete_checkpoints() { ls -d "$1"/checkpoints/step_*/MANIFEST 2>/dev/null | sed -E 's|.*/step_0*([0-9]+)/MANIFEST|\1|' | sort -n; }

# ---- 1. a long run, killed once it checkpointed and flushed beyond --------------
launch "$@" --set train.steps=1000000 --out "$run" >"$work/killed.log" 2>&1 &
job=$!
deadline=$((SECONDS + 120))
while :; do
  (( SECONDS < deadline )) || { kill -9 $job; fail "no checkpoint within 120 s"; }
  kill -0 $job 2>/dev/null || { cat "$work/killed.log"; fail "the job ended before the kill"; }
  c=$(complete_checkpoints "$run" | tail -1)
  if [[ -n $c ]] && awk -F, -v c="$c" 'NR > 1 && $2 > c { found = 1 } END { exit !found }' "$run/steps.csv" 2>/dev/null; then
    break
  fi
  sleep 0.05
done
# $job is the subshell; its child is mpirun, whose children are the ranks.
victim=$(pgrep -x psar -P "$(pgrep -d, -P $job)" 2>/dev/null | sort -n | tail -1)
[[ -n $victim ]] || { kill -9 $job; fail "no psar rank found under mpirun"; }
killed_at=$(date +%s%N)
kill -9 "$victim"
wait $job
rc=$?
elapsed_ms=$(( ($(date +%s%N) - killed_at) / 1000000 ))
echo "kill_resume: killed rank pid $victim; mpirun exited with $rc after ${elapsed_ms} ms"
(( rc != 0 )) || fail "mpirun exited 0 after a rank was killed"
(( elapsed_ms <= 10000 )) || fail "mpirun took ${elapsed_ms} ms (> 10 s) to end the job"
for _ in 1 2 3 4 5; do
  pgrep -f -- "--out $run" >/dev/null || break
  sleep 1
done
! pgrep -f -- "--out $run" >/dev/null || fail "a rank of the killed job is still running"

# ---- 2. what the killed run left ---------------------------------------------------
tmp=$(find "$run" -name '*.tmp*')
[[ -z $tmp ]] || fail "temporary files left behind: $tmp"
[[ ! -e $run/summary.csv ]] || fail "summary.csv written by a killed run"
[[ -s $run/steps.csv && $(tail -c1 "$run/steps.csv" | od -An -c | tr -d ' ') == '\n' ]] ||
  fail "steps.csv missing or ends in a partial line"
checkpoint=$(complete_checkpoints "$run" | tail -1)
awk -F, -v np="$np" -v L=$L -v c="$checkpoint" '
  NR == 1 { next }
  { if ($2 != last[$1] + 1) { printf "rank %s: step %s after %s\n", $1, $2, last[$1]; bad = 1 }
    last[$1] = $2 }
  END {
    for (r in last) {
      n++
      if (S == "") S = last[r]
      if (last[r] != S) { print "ranks end at different steps"; bad = 1 }
    }
    if (S % L != 0) { print "last row " S " is not a flush boundary"; bad = 1 }
    if (S < c) { print "rows end at " S ", before the checkpoint " c; bad = 1 }
    printf "kill_resume: %d ranks with rows 1..%d on disk, latest checkpoint %d\n", n, S, c
    exit bad
  }' "$run/steps.csv" || fail "steps.csv is not whole"

# ---- 3. resume to C + K vs an uninterrupted run of C + K steps ------------------------
target=$((checkpoint + K))
launch "$@" --set train.steps=$target --resume "$run" >"$work/resumed.log" 2>&1 ||
  { cat "$work/resumed.log"; fail "the resumed run failed"; }
launch "$@" --set train.steps=$target --out "$ref" >"$work/ref.log" 2>&1 ||
  { cat "$work/ref.log"; fail "the reference run failed"; }
[[ -e $run/summary.csv ]] || fail "the resumed run wrote no summary.csv"
final=$(printf 'checkpoints/step_%08d' $target)
files=0
for f in "$ref/$final"/*.ckpt; do
  cmp -s "$f" "$run/$final/$(basename "$f")" || fail "$(basename "$f") of step $target differs from the uninterrupted run's"
  files=$((files + 1))
done
(( files >= np - 1 )) || fail "only $files checkpoint files at step $target"
untimed() { cut -d, -f1-4,8-10 "$1" | sort; }  # without step_s, compute_s, sync_s, exposed_sync_s
diff <(untimed "$ref/steps.csv") <(untimed "$run/steps.csv") >/dev/null ||
  fail "the resumed run's steps.csv differs from the uninterrupted one's"
echo "kill_resume: resumed from step $checkpoint to $target: $files checkpoint files bitwise equal to the uninterrupted run's"
echo "kill_resume: ok"
