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

import os
import shutil

from psar_exp import runner
from psar_exp.io import write_csv


def experiment(args):
    """The experiment, and its points in args.points."""
    if not hasattr(args, "points"):
        if (args.per_host or args.cluster_name) and not args.cluster:
            raise runner.RunError("--per-host and --cluster-name go with --cluster")
        args.points = runner.points(runner.experiment(args, "train"), args.np, args.set)
    return args.exp


def folder(args):
    """<experiment.name>, under --results when given."""
    exp = experiment(args)
    name = exp["experiment"]["name"] or os.path.splitext(os.path.basename(args.experiment))[0]
    return runner.under_results(args, name)


def commands(args, binary):
    """(point, run directory, command) of every point."""
    cluster = {"per_host": args.per_host, "name": args.cluster_name} if args.cluster else None
    for point in args.points:
        out = os.path.join(args.out, point.name)
        yield point, out, runner.train_command(binary, args.experiment, out, point, cluster=cluster)


def dry_run(args):
    experiment(args)
    for i, (point, _, cmd) in enumerate(commands(args, "psar"), 1):
        print(f"[{i}/{len(args.points)}] {point.name}: {' '.join(cmd)}", flush=True)


def run_points(args):
    exp = experiment(args)
    for i, (point, out, cmd) in enumerate(commands(args, args.psar), 1):
        print(f"[{i}/{len(args.points)}] {point.name}: {' '.join(cmd)}", flush=True)
        if os.path.isdir(out):
            shutil.rmtree(out)  # a point's directory always holds one complete run
        rc = runner.launch(cmd, stream=True, echo=False).returncode
        if rc != 0:
            raise runner.RunError(f"point {point.name} failed (exit code {rc}); results so far "
                                  f"in {args.out}")
    rows = runner.summary_rows(exp, args.out, args.points)
    write_csv(os.path.join(args.out, "summary.csv"), rows)
    print(f"run.py: {len(rows)} run(s) -> {args.out}/summary.csv")


def launcher():
    launch = runner.Launcher(__doc__, folder, runs={"run": run_points}, reports={"dry": dry_run},
                             flags={"--dry-run": ("dry", "print the commands only")},
                             out_help="the experiment's folder (default: RESULTS/<experiment.name>)")
    ap = launch.parser
    ap.add_argument("experiment")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override passed to every point")
    ap.add_argument("--results", help="the folder of the experiment folders (default: runs/, "
                                      "or results/ with --reference)")
    ap.add_argument("--np", type=int, help="world size for every point (overrides experiment.ranks)")
    ap.add_argument("--cluster", action="store_true",
                    help="run every point on the virtual cluster (scripts/cluster.sh)")
    ap.add_argument("--per-host", type=int, help="with --cluster: ranks per host")
    ap.add_argument("--cluster-name", help="with --cluster: the cluster's --name")
    return launch


if __name__ == "__main__":
    runner.main_guard("run.py", launcher().main)
