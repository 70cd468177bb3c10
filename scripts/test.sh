#!/usr/bin/env bash
# The README's test command: installs what is missing, builds, runs every test
# (CTest, then the experiment harness's pytest suite against the built psar).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/deps.sh"
"$root/scripts/build.sh"
build=${PSAR_BUILD_DIR:-$root/build}
cd "$build"
# Two at a time by default (the tests labelled mpi run alone: RUN_SERIAL).
ctest --output-on-failure --timeout 600 -j "${PSAR_TEST_JOBS:-$(nproc)}" "$@"

# Every results folder against what its committed data regenerates (no
# experiment runs; psar only answers cost and simulate queries).
cd "$root/experiments"
PSAR_BIN="$build/trainer/psar" /usr/bin/python3 -m psar_exp check

# pytest exits 5 when it collected no tests: that is a broken suite, not a pass.
cd "$root"
status=0
PSAR_BIN="$build/trainer/psar" /usr/bin/python3 -m pytest -q -p no:cacheprovider experiments/tests \
  || status=$?
if ((status == 5)); then
  echo "psar: pytest collected no tests under experiments/tests" >&2
fi
exit "$status"
