#!/usr/bin/env bash
# The README's main command: installs what is missing, builds, and runs the
# quick-start experiment (4 ranks train an MLP on Fashion-MNIST), leaving CSV
# and a PNG plot under runs/quickstart/ (ignored by git; experiments/run.py
# --reference writes the committed results/quickstart/ instead).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/deps.sh"
"$root/scripts/build.sh" --target psar
cd "$root"
/usr/bin/python3 experiments/run.py experiments/quickstart.yaml "$@"
out=runs/quickstart
for arg in "$@"; do [[ $arg == --reference ]] && out=results/quickstart; done
/usr/bin/python3 experiments/plot.py "$out"
echo "psar: results in $out/ (summary.csv, steps.csv per run, quickstart.png)"
