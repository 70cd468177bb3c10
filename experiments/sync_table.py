#!/usr/bin/python3
"""Per run of an experiment: median step time, median sync time, the share of
the step spent in gradient synchronization, bytes sent per rank per step, and
the final test accuracy — as a Markdown table (results/<exp>/sync_table.md),
beside the plot of the accuracy curves (plot.py).

    experiments/sync_table.py results/<experiment>
"""

import os
import statistics
import sys

from psar_exp.io import read_csv, write_text


def table(folder):
    """sync_table.md of the runs under `folder`."""
    rows = []
    for run in sorted(os.listdir(folder)):
        path = os.path.join(folder, run)
        if not os.path.exists(os.path.join(path, "steps.csv")):
            continue
        steps = read_csv(os.path.join(path, "steps.csv"))
        # Skip the first steps of each rank: warm-up (allocation, first touches).
        steady = [r for r in steps if int(r["step"]) > 5] or steps
        step_s = statistics.median(float(r["step_s"]) for r in steady)
        sync_s = statistics.median(float(r["sync_s"]) for r in steady)
        sent = int(statistics.median(int(r["bytes_sent"]) for r in steady))
        summary = read_csv(os.path.join(path, "summary.csv"))[0]
        rows.append((summary["sync"], step_s, sync_s, sent, float(summary["test_accuracy"]),
                     float(summary["final_loss"])))
    if not rows:
        raise FileNotFoundError(f"sync_table.py: no runs under {folder}")
    lines = ["| sync | step (ms, median) | sync (ms, median) | sync share | bytes sent / rank / step | final loss | test accuracy |",
             "|---|---|---|---|---|---|---|"]
    for name, step_s, sync_s, sent, acc, loss in rows:
        lines.append(f"| {name} | {step_s * 1e3:.2f} | {sync_s * 1e3:.2f} | {100 * sync_s / step_s:.0f}% | "
                     f"{sent:,} | {loss:.4f} | {100 * acc:.2f}% |")
    lines.append("")
    lines.append("`mpi` calls MPI_Allreduce, which bypasses psar's Comm counters: its bytes read 0. "
                 "Times are medians over steps 6 and later of every rank; the host has 2 cores for 4 ranks.")
    return "\n".join(lines) + "\n"


def regenerate(folder, results=None):
    return {"sync_table.md": table(folder)}


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    folder = sys.argv[1].rstrip("/")
    try:
        text = table(folder)
    except FileNotFoundError as e:
        sys.exit(str(e))
    write_text(os.path.join(folder, "sync_table.md"), text)
    print(text)


if __name__ == "__main__":
    main()
