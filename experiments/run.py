#!/usr/bin/python3
"""Runs an experiment: expands its sweep, runs each point under mpirun, and
gathers the run directories under runs/<experiment>/ (git ignores runs/),
or with --reference under results/<experiment>/, the committed reference.

    experiments/run.py experiments/quickstart.yaml [--set key=value ...]
                       [--reference | --exploratory] [--results DIR]
                       [--dry-run] [--np N]
                       [--cluster [--per-host K] [--cluster-name NAME]]

A run starts only from a clean tree with a psar built from its commit
(scripts/build.sh stamps the build); --exploratory runs anyway, says so in
the folder's provenance, and is never written under results/.

The experiment YAML is an ordinary psar config. Two keys are the harness's
(checked on load, psar_exp.report):
  experiment.ranks   world size (mpirun -np), default 4
  experiment.sweep   mapping of keys to lists; the cartesian product is run.
                     A key is a dotted config key (sync.backend) or `ranks`.
Each point runs as
  mpirun --allow-run-as-root --oversubscribe -np N psar train EXP.yaml \
         --out runs/<name>/<point> --set key=value ...
and runs/<name>/summary.csv collects every point's summary row with the
swept values in front. With --cluster every point runs on the virtual
cluster instead (scripts/cluster.sh up first; docs/network.md), through
`scripts/cluster.sh mpirun -np N [--per-host K] -- psar train ...`.
"""

import argparse
import os
import shutil

from psar_exp import report, runner
from psar_exp.io import write_csv


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("experiment")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override passed to every point")
    ap.add_argument("--results", help="the folder of the experiment folders (default: runs/, "
                                      "or results/ with --reference)")
    runner.add_output_flags(ap)
    ap.add_argument("--np", type=int, help="world size for every point (overrides experiment.ranks)")
    ap.add_argument("--dry-run", action="store_true", help="print the commands only")
    ap.add_argument("--cluster", action="store_true",
                    help="run every point on the virtual cluster (scripts/cluster.sh)")
    ap.add_argument("--per-host", type=int, help="with --cluster: ranks per host")
    ap.add_argument("--cluster-name", help="with --cluster: the cluster's --name")
    args = ap.parse_args()

    exp = report.load(args.experiment, "train")
    name = exp["experiment"]["name"] or os.path.splitext(os.path.basename(args.experiment))[0]
    points = runner.points(exp, args.np, args.set)
    out_root = os.path.join(args.results or runner.output_root(args), name)
    binary = "psar" if args.dry_run else runner.psar_binary()
    if (args.per_host or args.cluster_name) and not args.cluster:
        raise runner.RunError("--per-host and --cluster-name go with --cluster")
    cluster = {"per_host": args.per_host, "name": args.cluster_name} if args.cluster else None

    if not args.dry_run:
        state = runner.begin(out_root, args.exploratory, binary, reference=args.reference)
        os.makedirs(out_root, exist_ok=True)
    for i, point in enumerate(points, 1):
        out = os.path.join(out_root, point.name)
        cmd = runner.train_command(binary, args.experiment, out, point, cluster=cluster)
        print(f"[{i}/{len(points)}] {point.name}: {' '.join(cmd)}", flush=True)
        if args.dry_run:
            continue
        if os.path.isdir(out):
            shutil.rmtree(out)  # a point's directory always holds one complete run
        rc = runner.launch(cmd, stream=True, echo=False).returncode
        if rc != 0:
            raise runner.RunError(f"point {point.name} failed (exit code {rc}); results so far "
                                  f"in {out_root}")

    if not args.dry_run:
        rows = runner.summary_rows(exp, out_root, points)
        write_csv(os.path.join(out_root, "summary.csv"), rows)
        runner.record_provenance(out_root, state)
        print(f"run.py: {len(rows)} run(s) -> {out_root}/summary.csv")


if __name__ == "__main__":
    runner.main_guard("run.py", main)
