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
# The commit psar was built from, and the tracked files that differed from it
# (results/ and runs/ aside): the harness pins every run to it
# (experiments/psar_exp/runner.py, binary_build). Written only when this
# build included psar, so a build of other targets cannot vouch for it.
targets=() in_targets=0
for arg in "$@"; do  # --target a b ... (cmake takes several)
  if [[ $arg == --target || $arg == -t ]]; then in_targets=1
  elif [[ $arg == -* ]]; then in_targets=0
  elif ((in_targets)); then targets+=("$arg"); fi
done
if ((${#targets[@]} == 0)) || [[ " ${targets[*]} " == *" psar "* || " ${targets[*]} " == *" all "* ]]; then
  { git -C "$root" rev-parse HEAD
    git -C "$root" status --porcelain --untracked-files=no -- . ':(exclude)results' ':(exclude)runs' | cut -c4-
  } > "$build/psar_build.txt" 2>/dev/null || rm -f "$build/psar_build.txt"
fi
