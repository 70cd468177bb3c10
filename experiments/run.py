#!/usr/bin/python3
"""Runs an experiment: expands its sweep, runs each point under mpirun, and
gathers the run directories under results/<experiment>/.

    experiments/run.py experiments/quickstart.yaml [--set key=value ...]
                       [--results DIR] [--dry-run] [--np N]

The experiment YAML is an ordinary psar config. Two keys are the harness's:
  experiment.ranks   world size (mpirun -np), default 4
  experiment.sweep   mapping of keys to lists; the cartesian product is run.
                     A key is a dotted config key (sync.backend) or `ranks`.
Each point runs as
  mpirun --allow-run-as-root --oversubscribe -np N psar train EXP.yaml \
         --out results/<name>/<point> --set key=value ...
and results/<name>/summary.csv collects every point's summary row with the
swept values in front.
"""

import argparse
import csv
import itertools
import os
import shutil
import subprocess
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def psar_binary():
    path = os.environ.get("PSAR_BIN", os.path.join(ROOT, "build", "trainer", "psar"))
    if not os.path.exists(path):
        sys.exit(f"run.py: psar binary not found at {path} (run scripts/build.sh, or set PSAR_BIN)")
    return path


def mpirun_prefix(ranks):
    mpirun = shutil.which("mpirun")
    if not mpirun:
        sys.exit("run.py: mpirun not found (install openmpi-bin, or run scripts/deps.sh)")
    # Root needs --allow-run-as-root; beyond the core count, --oversubscribe
    # (Open MPI then yields when idle; never force busy-polling).
    return [mpirun, "--allow-run-as-root", "--oversubscribe", "-np", str(ranks)]


def expand(sweep):
    """Cartesian product of {key: [values]} as a list of [(key, value), ...]."""
    if not sweep:
        return [[]]
    if not isinstance(sweep, dict):
        sys.exit("run.py: experiment.sweep must map keys to lists of values")
    keys = list(sweep)
    lists = []
    for k in keys:
        v = sweep[k]
        lists.append(v if isinstance(v, list) else [v])
    return [list(zip(keys, combo)) for combo in itertools.product(*lists)]


def point_name(point, ranks, backend):
    parts = [] if any(k == "sync.backend" for k, _ in point) else [backend]
    for k, v in point:
        if k == "ranks":
            continue
        parts.append(f"{k.split('.')[-1]}-{v}")
    parts.append(f"n{ranks}")
    return "_".join(str(p).replace("/", "-").replace(" ", "") for p in parts)


def yaml_scalar(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, dict)):
        return yaml.safe_dump(v, default_flow_style=True).strip()
    return str(v)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("experiment")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override passed to every point")
    ap.add_argument("--results", default=os.path.join(ROOT, "results"))
    ap.add_argument("--np", type=int, help="world size for every point (overrides experiment.ranks)")
    ap.add_argument("--dry-run", action="store_true", help="print the commands only")
    args = ap.parse_args()

    try:
        with open(args.experiment) as f:
            exp = yaml.safe_load(f) or {}
    except OSError as e:
        sys.exit(f"run.py: cannot read {args.experiment}: {e.strerror}")
    except yaml.YAMLError as e:
        sys.exit(f"run.py: {args.experiment} is not valid YAML: {e}")
    meta = exp.get("experiment") or {}
    name = meta.get("name") or os.path.splitext(os.path.basename(args.experiment))[0]
    base_ranks = args.np or int(meta.get("ranks", 4))
    points = expand(meta.get("sweep"))
    out_root = os.path.join(args.results, name)
    os.makedirs(out_root, exist_ok=True)
    binary = None if args.dry_run else psar_binary()

    rows, header = [], None
    for i, point in enumerate(points, 1):
        ranks = base_ranks
        sets = list(args.set)
        for k, v in point:
            if k == "ranks":
                ranks = int(v)
            else:
                sets.append(f"{k}={yaml_scalar(v)}")
        run_name = point_name(point, ranks, (exp.get("sync") or {}).get("backend", "mpi"))
        out = os.path.join(out_root, run_name)
        cmd = mpirun_prefix(ranks) + [binary or "psar", "train", args.experiment, "--out", out]
        for s in sets:
            cmd += ["--set", s]
        print(f"[{i}/{len(points)}] {run_name}: {' '.join(cmd)}", flush=True)
        if args.dry_run:
            continue
        if os.path.isdir(out):
            shutil.rmtree(out)  # a point's directory always holds one complete run
        rc = subprocess.call(cmd)
        if rc != 0:
            sys.exit(f"run.py: point {run_name} failed (exit code {rc}); results so far in {out_root}")
        with open(os.path.join(out, "summary.csv")) as f:
            for row in csv.DictReader(f):
                swept = {("ranks" if k == "ranks" else k): str(v) for k, v in point}
                row = {"run": run_name, **swept, **row}
                header = header or list(row)
                rows.append(row)

    if rows:
        tmp = os.path.join(out_root, "summary.csv.tmp")
        with open(tmp, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=header)
            w.writeheader()
            w.writerows(rows)
        os.replace(tmp, os.path.join(out_root, "summary.csv"))
        print(f"run.py: {len(rows)} run(s) -> {out_root}/summary.csv")


if __name__ == "__main__":
    main()
