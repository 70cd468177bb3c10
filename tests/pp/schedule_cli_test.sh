#!/bin/sh
# `psar schedule` end to end. Usage: schedule_cli_test.sh PSAR_BINARY SOURCE_DIR
psar=$1
src=$2
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# expect CODE PATTERN... -- ARGS...: exit status CODE, every PATTERN in stdout+stderr.
expect() {
  code=$1; shift
  patterns=""
  while [ "$1" != "--" ]; do patterns="$patterns
$1"; shift; done
  shift
  "$psar" schedule "$@" >"$tmp/out" 2>&1
  got=$?
  if [ "$got" -ne "$code" ]; then
    echo "FAIL: psar schedule $*: exit $got, expected $code"; cat "$tmp/out"; fail=1; return
  fi
  echo "$patterns" | while IFS= read -r p; do
    [ -z "$p" ] && continue
    grep -qF -- "$p" "$tmp/out" || { echo "FAIL: psar schedule $*: no '$p' in:"; cat "$tmp/out"; exit 1; }
  done || fail=1
}

expect 0 "bubble_fraction 0.375" "peak_activations 4 3 2 1" "stage 3 | .  .  .  F0 B0 -" \
  -- --kind 1f1b --stages 4 --microbatches 8
expect 0 "bubble_fraction 0.375" "peak_activations 8 8 8 8" "idle_share 0.272727" \
  -- --kind gpipe --stages 4 --microbatches 8
expect 0 "bubble_fraction 0.1875" "F0a" "F0b" "one column = 0.5 time units" \
  -- --kind interleaved --stages 4 --microbatches 8 --chunks 2
expect 0 "bubble_fraction 0.125" "peak_activations 4 4 4 4" "W7" \
  -- --kind zb_h1 --stages=4 --microbatches=8 --tf 1 --tb 1 --tw 1
expect 0 "bubble_fraction 0.25" "bubble_formula 0.25" "idle_share 0.2 " \
  -- --kind zb_h1 --stages 3 --microbatches 4 --tf 2 --tb 1 --tw 1
expect 2 "must be a multiple of the number of stages (6 % 4 = 2)" \
  -- --kind interleaved --stages 4 --microbatches 6 --chunks 2
expect 2 "needs at least as many micro-batches as stages (m=2 < p=4)" \
  -- --kind 1f1b --stages 4 --microbatches 2
expect 2 "more virtual stages (p·v = 8) than model layers (6)" \
  -- --kind interleaved --stages 4 --microbatches 8 --chunks 2 --layers 6
expect 2 "unknown pipeline schedule 'pipedream'" -- --kind pipedream
expect 2 "unknown option '--stage'" -- --stage 4
expect 2 "--microbatches needs an integer, got 'eight'" -- --microbatches eight
expect 2 "t_w = -1 must be a finite, non-negative time" -- --tw -1

# --json always; --png where matplotlib is installed.
expect 0 'bubble_fraction 0.5' -- --kind 1f1b --stages 2 --microbatches 2 --json "$tmp/s.json"
grep -q '"kind": "1f1b"' "$tmp/s.json" || { echo "FAIL: --json wrote no schedule"; fail=1; }
py=${PSAR_PYTHON:-/usr/bin/python3}
[ -x "$py" ] || py=python3
if "$py" -c 'import matplotlib' 2>/dev/null; then
  (cd "$src" && "$psar" schedule --kind zb_h1 --stages 4 --microbatches 8 --png "$tmp/g.png") \
    >"$tmp/out" 2>&1 || { echo "FAIL: --png"; cat "$tmp/out"; fail=1; }
  [ "$(head -c 4 "$tmp/g.png" | od -An -c | tr -d ' ')" = "211PNG" ] ||
    { echo "FAIL: --png wrote no PNG"; fail=1; }
fi
[ $fail -eq 0 ] && echo "all psar schedule checks passed"
exit $fail
