#!/usr/bin/env bash
# The README's main command: installs what is missing, builds, and runs the
# quick-start experiment (4 ranks train an MLP on Fashion-MNIST), leaving CSV
# and a PNG plot under results/quickstart/.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/deps.sh"
"$root/scripts/build.sh" --target psar
cd "$root"
/usr/bin/python3 experiments/run.py experiments/quickstart.yaml "$@"
/usr/bin/python3 experiments/plot.py results/quickstart
echo "psar: results in results/quickstart/ (summary.csv, steps.csv per run, quickstart.png)"
