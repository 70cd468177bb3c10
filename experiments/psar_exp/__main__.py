"""python3 -m psar_exp (from experiments/): the harness's one entry point.

    check [--results DIR] [--write] [FOLDER ...]
        every results folder against what its committed data regenerates;
        exit 1 naming each difference; --write writes the regenerated texts
        instead (no experiment runs)
    COMMAND [ARGS ...]
        one of the experiment scripts below, with its own flags. A launcher
        runs psar through runner.Launcher: it takes --psar, --out,
        --reference (write results/) and --exploratory (run from a dirty
        tree; never under results/), writes under runs/ otherwise, and
        records its provenance; a report tool only reads data already
        written and starts no psar

Launchers (experiments/<COMMAND>.py): {launchers}
Report tools: {reports}
"""

import argparse
import os
import runpy
import sys

from psar_exp import ROOT, check

# The scripts of experiments/ that run psar: each defines launcher(), a
# runner.Launcher with its own flags added.
LAUNCHERS = ("run", "pp_measure", "gpt_3d", "auto_tuning", "net_scaling", "cluster_net_scaling",
             "cluster_placement", "overlap", "ps_vs_allreduce", "report_collectives",
             "sim_validation", "simulate_tables", "pp_schedule_tables", "ps_curve", "ps_lite",
             "hybrid_cnn", "where_ps_wins", "zero", "sparse_ps", "simulate_published", "pp_hop",
             "spare_servers", "collective_engine", "recompute")
# The scripts that only read what runs wrote (tables, plots) and start no psar.
REPORTS = ("pp_report", "tp_report", "sync_table", "plot")
USAGE = __doc__.format(launchers=", ".join(LAUNCHERS), reports=", ".join(REPORTS))


def launch(name, args):
    """Runs experiments/<name>.py as its own __main__ with `args`."""
    sys.argv = [os.path.join(ROOT, "experiments", name + ".py"), *args]
    try:
        runpy.run_path(sys.argv[0], run_name="__main__")
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in LAUNCHERS + REPORTS:
        return launch(argv[0], argv[1:])
    ap = argparse.ArgumentParser(prog="psar_exp", description=USAGE,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    c = sub.add_parser("check", help="regenerate every results folder from its data and diff")
    c.add_argument("--results", help="the results root (default: the repository's results/)")
    c.add_argument("--write", action="store_true",
                   help="write the regenerated texts instead of comparing (no experiment runs)")
    c.add_argument("folders", nargs="*", help="folder names under the results root (default: all)")
    args = ap.parse_args(argv)
    names, problems = check.check(args.results, args.folders or None, args.write)
    for name, reason in check.unchecked_folders(names):
        print(f"not regenerated: {name}: {reason}")
    for p in problems:
        print(p)
    print(f"psar_exp check: {len(names)} folder(s), "
          f"{'no difference' if not problems else f'{len(problems)} difference(s)'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
