#!/usr/bin/env bash
# worker_failure.sh PSAR MPIRUN CONFIG
#
# A parameter-server job (4 ranks: the server, workers 0..2 on world ranks
# 1..3) in which world rank 3 — worker 2 — kills itself with SIGKILL at the
# start of 0-based step K (hetero.kill_rank), under mpirun --enable-recovery:
#  1. ps.on_worker_failure: continue — the job exits 0 within 90 s; steps.csv
#     holds workers 0 and 1's rows of every step 1..S, their `workers` column
#     3 for steps 1..K and 2 from step K + 1 on (clock K is the first the
#     server averaged without the dead worker); worker 2's rows end at or
#     before step K; summary.csv and eval.csv are written.
#  2. continue with backup workers (ps.backup_workers 1, 4 workers on world
#     ranks 1..4, world rank 4 killed): no clock ever waits for the dead
#     worker, so the servers drop it only at the end, and its death can keep
#     MPI_Finalize's closing fence waiting (comm/mpi_comm.h): the job still
#     exits 0 within 60 s, the survivors' rows reach step S.
#  3. abort (the default), launched as usual (no --enable-recovery: under it
#     Open MPI 4.1's mpirun exits 0 even after an MPI_Abort) — the same kill
#     ends the job non-zero within 10 s, mpirun naming the killed rank.
set -uo pipefail
psar=$1 mpirun=$2 config=$3
S=20 K=6
work=$(mktemp -d /tmp/psar_worker_failure.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "worker_failure: FAIL: $*"; exit 1; }
np=4 kill=3
launch() {
  timeout --kill-after=5 "$1" "$mpirun" --allow-run-as-root --oversubscribe $recovery \
    -np $np "$psar" train "$config" --quiet --sync ps --set train.steps=$S --set train.log_every=1 \
    --set train.eval_every=$S --set ps.timeout=4s --set sync.timeout=2s \
    --set hetero.kill_rank=$kill --set hetero.kill_step=$K "${@:2}"
}

# ---- 1. continue ----------------------------------------------------------------
start=$SECONDS
recovery=--enable-recovery
launch 90 --set ps.on_worker_failure=continue --out "$work/run" >"$work/continue.log" 2>&1
rc=$?
cat "$work/continue.log" | tail -n 20
echo "worker_failure: continue: exit code $rc after $((SECONDS - start)) s"
[[ $rc -eq 0 ]] || fail "continue: exit code $rc, expected 0"
grep -q "killing itself at the start of step $K" "$work/continue.log" || fail "rank 3 did not die"
[[ -s $work/run/summary.csv ]] || fail "no summary.csv"
[[ -s $work/run/eval.csv ]] || fail "no eval.csv"
awk -F, -v S=$S -v K=$K '
  NR == 1 { for (i = 1; i <= NF; ++i) col[$i] = i; next }
  {
    r = $col["rank"]; s = $col["step"]; n = $col["workers"]
    if (r == 2) { if (s > K) { print "worker 2 has a row of step " s; bad = 1 } next }
    seen[r, s] = 1
    want = s <= K ? 3 : 2
    if (n != want) { print "worker " r " step " s ": workers " n ", expected " want; bad = 1 }
  }
  END {
    for (r = 0; r < 2; ++r)
      for (s = 1; s <= S; ++s)
        if (!seen[r, s]) { print "worker " r " has no row of step " s; bad = 1 }
    exit bad
  }' "$work/run/steps.csv" || fail "continue: steps.csv (above)"

# ---- 2. continue with a backup worker ---------------------------------------------
start=$SECONDS
np=5 kill=4
launch 90 --set ps.on_worker_failure=continue --set ps.backup_workers=1 --out "$work/backup" \
  >"$work/backup.log" 2>&1
rc=$?
elapsed=$((SECONDS - start))
tail -n 5 "$work/backup.log"
echo "worker_failure: continue with a backup worker: exit code $rc after $elapsed s"
[[ $rc -eq 0 ]] || fail "backup: exit code $rc, expected 0 (124: it hung)"
(( elapsed <= 60 )) || fail "backup: took $elapsed s, more than 60 s"
grep -q "killing itself at the start of step $K" "$work/backup.log" || fail "backup: rank 4 did not die"
awk -F, -v S=$S '
  NR == 1 { for (i = 1; i <= NF; ++i) col[$i] = i; next }
  $col["rank"] < 3 && $col["step"] == S { ++last }
  END { exit last == 3 ? 0 : 1 }' "$work/backup/steps.csv" ||
  fail "backup: workers 0..2 do not all have a row of step $S"

# ---- 3. abort -------------------------------------------------------------------
start=$SECONDS
np=4 kill=3
recovery=
launch 60 --out "$work/abort" >"$work/abort.log" 2>&1
rc=$?
elapsed=$((SECONDS - start))
tail -n 10 "$work/abort.log"
echo "worker_failure: abort: exit code $rc after $elapsed s"
[[ $rc -ne 0 ]] || fail "abort: the job succeeded"
# (137 is mpirun's own code for a rank killed by SIGKILL; a hang is the 60 s timeout's 124.)
[[ $rc -ne 124 ]] || fail "abort: the job hung and was killed"
(( elapsed <= 10 )) || fail "abort: took $elapsed s, more than 10 s"
grep -qE "rank 3 .*exited on signal 9" "$work/abort.log" || fail "abort: no line names rank 3's death"
echo "worker_failure: ok"
