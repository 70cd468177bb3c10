#!/usr/bin/env bash
# elastic_resume.sh PSAR MPIRUN SERVERS CONFIG [PSAR_TRAIN_ARGS...]
#
# --resume onto a different data-parallel size (core/checkpoint.h dp_resize):
#  1. d = 4 workers (plus SERVERS dedicated PS ranks) run to step C = 10,
#     where they checkpoint and exit (train.exit_at_step).
#  2. d = 3 workers resume that checkpoint and run to step S = 20.
#  3. A reference: d = 3 workers from step 0 to S.
# Passes when the resumed run's rows of steps C+1..S say `workers` 3 and
# their losses (each replica's loss on its own batch/3 rows) equal the
# reference's to a relative 1e-4: the same global batch, re-split, from
# the same parameters (the two histories up to C differ only in the order
# floats were summed). And a control that can fail: the d = 4 run's losses
# of the same steps differ from the reference's by more than that.
set -uo pipefail
psar=$1 mpirun=$2 servers=$3 config=$4
shift 4
C=10 S=20
work=$(mktemp -d /tmp/psar_elastic.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "elastic_resume: FAIL: $*"; exit 1; }
launch() {
  local np=$1
  shift
  timeout --kill-after=5 240 "$mpirun" --allow-run-as-root --oversubscribe -np "$np" "$psar" train \
    "$config" --quiet --set train.steps=$S --set train.log_every=1 --set train.checkpoint_every=$C \
    "$@"
}
launch $((servers + 4)) "$@" --set train.exit_at_step=$C --out "$work/d4" >"$work/d4.log" 2>&1 ||
  { cat "$work/d4.log"; fail "the d = 4 run"; }
launch $((servers + 3)) "$@" --resume "$work/d4" --out "$work/d3" >"$work/d3.log" 2>&1 ||
  { cat "$work/d3.log"; fail "the resume onto d = 3"; }
launch $((servers + 3)) "$@" --out "$work/ref" >"$work/ref.log" 2>&1 ||
  { cat "$work/ref.log"; fail "the d = 3 reference"; }
launch $((servers + 4)) "$@" --out "$work/d4full" >"$work/d4full.log" 2>&1 ||
  { cat "$work/d4full.log"; fail "the uninterrupted d = 4 run"; }

# compare RUN REF: rows of steps C+1..S, rank by rank; prints the largest
# relative loss difference, fails where a row lacks its partner or `workers`
# is not 3 in RUN.
compare() {
  awk -F, -v C=$C -v S=$S -v check_workers="$3" '
    FNR == 1 { for (i = 1; i <= NF; ++i) col[$i] = i; next }
    $col["step"] <= C || $col["step"] > S { next }
    FILENAME == ARGV[1] {
      loss[$col["rank"], $col["step"]] = $col["loss"]
      if (check_workers && $col["workers"] != 3) { print "step " $col["step"] ": workers " $col["workers"]; bad = 1 }
      next
    }
    {
      k = $col["rank"] SUBSEP $col["step"]
      if (!(k in loss)) next
      ++pairs
      d = loss[k] - $col["loss"]; if (d < 0) d = -d
      m = $col["loss"]; if (m < 0) m = -m
      if (m > 0 && d / m > worst) worst = d / m
    }
    END { if (pairs < 3 * (S - C)) { print "only " pairs " rows paired"; bad = 1 }
          printf "%.3g\n", worst; exit bad }' "$1" "$2"
}
resumed=$(compare "$work/d3/steps.csv" "$work/ref/steps.csv" 1) || fail "resumed vs reference: $resumed"
control=$(compare "$work/d4full/steps.csv" "$work/ref/steps.csv" 0) || fail "control: $control"
echo "elastic_resume: largest relative loss difference, resumed d = 3 vs reference d = 3: $resumed;" \
     "uninterrupted d = 4 vs reference: $control"
awk -v r="$resumed" 'BEGIN { exit !(r < 1e-4) }' || fail "resumed run differs from the reference ($resumed)"
awk -v c="$control" 'BEGIN { exit !(c > 1e-4) }' || fail "the control does not differ ($control)"
echo "elastic_resume: ok"
