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

import argparse
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


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("experiment")
    ap.add_argument("--psar", default=os.environ.get("PSAR_BIN", os.path.join(ROOT, "build", "trainer", "psar")))
    ap.add_argument("--bench-reduce", default=os.path.join(ROOT, "build", "bench", "bench_reduce"))
    ap.add_argument("--out", help="default runs/<experiment.name>, or results/... with --reference")
    ap.add_argument("--reuse", action="store_true", help="re-report from the CSVs in --out")
    ap.add_argument("--high-priority", action="store_true",
                    help="run the benchmarks at autogroup nice -19 (root; for a shared host)")
    runner.add_output_flags(ap)
    args = ap.parse_args()
    exp = report.load(args.experiment)
    kind = exp.get("report")
    if kind not in ("volume", "cost"):
        raise report.SchemaError(f"{args.experiment}: report: expected volume or cost")
    psar = runner.psar_binary(args.psar)
    out = args.out or os.path.join(runner.output_root(args), exp["experiment"]["name"])
    if not args.reuse:
        state = runner.begin(out, args.exploratory, psar, reference=args.reference)
    os.makedirs(out, exist_ok=True)
    start = time.time()
    note_file = os.path.join(out, "run_note.txt")  # the conditions of the runs, kept for --reuse
    if kind == "volume":
        if not args.reuse:
            collectives.report_volume(exp, psar, out, args.high_priority)
            runner.record_provenance(out, state)
    else:
        gamma_file = os.path.join(out, "gamma.txt")
        if not args.reuse:
            collectives.run_sweeps(exp, psar, out, args.high_priority)
            collectives.run_forced_mpi(exp, psar, out, args.high_priority)
            gamma = collectives.measure_gamma(args.bench_reduce, args.high_priority)
            write_text(gamma_file, f"{gamma:.6e}\n")
            write_text(note_file, runner.provenance_text(state, args.high_priority) + "\n")
            runner.record_provenance(out, state, args.high_priority)
        collectives.plot_cost(exp, out)
    write_text(os.path.join(out, "table.md"), report_text(exp, out, psar))
    print(f"report_collectives.py: {out}/table.md ({time.time() - start:.0f} s)")


if __name__ == "__main__":
    runner.main_guard("report_collectives.py", main)
