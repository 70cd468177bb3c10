#!/usr/bin/env bash
# Configures and builds psar (Release) into ${PSAR_BUILD_DIR:-build}.
# Extra arguments go to `cmake --build` (e.g. --target psar).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${PSAR_BUILD_DIR:-$root/build}
jobs=${PSAR_JOBS:-$(nproc)}
if [[ ! -f $build/CMakeCache.txt ]]; then
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release ${PSAR_CMAKE_ARGS:-}
fi
# One build at a time on this machine: builds from several shells queue here.
exec 9>/tmp/psar-build.lock
flock 9
cmake --build "$build" -j "$jobs" "$@"
