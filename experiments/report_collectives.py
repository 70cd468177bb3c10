#!/usr/bin/python3
"""Regenerates the allreduce reports from `psar bench allreduce` runs under
mpirun:

  experiments/report_collectives.py experiments/comm_volume.yaml
      -> results/comm_volume/{volume.csv, table.md}
  experiments/report_collectives.py experiments/collective_cost.yaml
      -> results/collective_cost/{bench_n<N>.csv, busbw_<algo>.png,
         busbw_n<N>.png, table.md}

Options: --psar PATH (default $PSAR_BIN or build/trainer/psar), --bench-reduce
PATH (default build/bench/bench_reduce: gamma, the seconds per byte reduced, is
measured there, so that the fit of alpha and beta per algorithm is not
confounded with it), --out DIR, --reuse (re-report from the CSVs already in
--out without running a benchmark; `psar cost` still supplies the formulas),
--high-priority (run the benchmarks in a scheduler group of their own at
nice -19: on a host shared with other work).

The cost forms and exact byte counts are psar's own (`psar cost`, the
registry of allreduce/registry.cc; docs/algorithms.md). alpha and beta >= 0
are fitted per algorithm and N by least squares on relative errors (times
span four decades), gamma held at the measured kernel rate; `mpi` is fitted
to the ring's form (Open MPI picks its own algorithm).
"""

import os
import time

from psar_exp import ROOT, collectives, costs, report, runner
from psar_exp.io import read_csv, write_text
from psar_exp.units import parse_bytes


def report_text(exp, out, psar=None):
    """table.md of either report from the files the runs left in `out`."""
    if exp["report"] == "volume":
        bench = exp["bench"]
        table = costs.query(bench["ranks"], [parse_bytes(bench["size"])], algos=bench["algos"],
                            segment_bytes=bench["segment_bytes"], psar=psar)
        return collectives.volume_table(
            read_csv(os.path.join(out, "volume.csv")), table,
            "The counts do not depend on the machine; README.md says which commit produced them.")
    with open(os.path.join(out, "gamma.txt")) as f:
        gamma = float(f.read())
    with open(os.path.join(out, "run_note.txt")) as f:
        return collectives.cost_table(exp, out, gamma, f.read().strip(), psar)


def regenerate(folder, results=None, experiment=None):
    """table.md from the committed CSVs (psar cost gives the cost forms)."""
    exp = report.load(os.path.join(ROOT, "experiments", experiment + ".yaml"))
    return {"table.md": report_text(exp, folder, runner.psar_binary())}


def experiment(args):
    """The experiment, a volume or a cost report."""
    exp = runner.experiment(args)
    if exp.get("report") not in ("volume", "cost"):
        raise report.SchemaError(f"{args.experiment}: report: expected volume or cost")
    return exp


def measure(args):
    """The benchmarks of the report, then its table."""
    exp, out = experiment(args), args.out
    if exp["report"] == "volume":
        collectives.report_volume(exp, args.psar, out, args.high_priority)
    else:
        collectives.run_sweeps(exp, args.psar, out, args.high_priority)
        collectives.run_forced_mpi(exp, args.psar, out, args.high_priority)
        gamma = collectives.measure_gamma(args.bench_reduce, args.high_priority)
        write_text(os.path.join(out, "gamma.txt"), f"{gamma:.6e}\n")
        # The conditions of the runs, kept for --reuse.
        write_text(os.path.join(out, "run_note.txt"),
                   runner.provenance_text(args.state, args.high_priority) + "\n")
    write_report(args)


def write_report(args):
    """table.md (and the cost report's plots) from the CSVs in args.out."""
    exp, start = experiment(args), time.time()
    psar = runner.psar_binary(args.psar)
    if exp["report"] == "cost":
        collectives.plot_cost(exp, args.out)
    write_text(os.path.join(args.out, "table.md"), report_text(exp, args.out, psar))
    print(f"report_collectives.py: {args.out}/table.md ({time.time() - start:.0f} s)")


def launcher():
    launch = runner.Launcher(__doc__, lambda args: experiment(args)["experiment"]["name"],
                             runs={"measure": measure}, reports={"reuse": write_report},
                             flags={"--reuse": ("reuse", "re-report from the CSVs in --out")},
                             out_help="default runs/<experiment.name>, or results/... with "
                                      "--reference")
    ap = launch.parser
    ap.add_argument("experiment")
    ap.add_argument("--bench-reduce", default=os.path.join(ROOT, "build", "bench", "bench_reduce"))
    ap.add_argument("--high-priority", action="store_true",
                    help="run the benchmarks at autogroup nice -19 (root; for a shared host)")
    return launch


if __name__ == "__main__":
    runner.main_guard("report_collectives.py", launcher().main)
