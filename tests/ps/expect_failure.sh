#!/usr/bin/env bash
# expect_failure.sh MAX_SECONDS PATTERN PROCESS_NAME COMMAND...
# Passes if COMMAND exits non-zero within MAX_SECONDS, its output matches the
# extended regular expression PATTERN, and afterwards no process named
# PROCESS_NAME is left running. A hang is cut off at 3×MAX_SECONDS.
set -u
max=$1 pattern=$2 name=$3
shift 3
start=$(date +%s%N)
out=$(timeout --kill-after=5 $((3 * max)) "$@" 2>&1)
rc=$?
elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))
printf '%s\n' "$out" | tail -n 30
echo "expect_failure: exit code $rc after ${elapsed_ms} ms (limit ${max} s)"
fail() { echo "expect_failure: FAIL: $*"; exit 1; }
[[ $rc -ne 0 ]] || fail "the command succeeded"
[[ $rc -ne 124 && $rc -ne 137 ]] || fail "the command hung and was killed"
(( elapsed_ms <= max * 1000 )) || fail "took ${elapsed_ms} ms, more than ${max} s"
grep -qE -- "$pattern" <<<"$out" || fail "no line matches '$pattern'"
for _ in 1 2 3 4 5; do
  pgrep -x "$name" >/dev/null || break
  sleep 1
done
! pgrep -x "$name" >/dev/null || fail "a '$name' process is still running"
echo "expect_failure: ok"
