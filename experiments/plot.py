#!/usr/bin/python3
"""Plots every run of an experiment: training loss per step (mean over ranks)
and test accuracy per evaluation, one line per run, into one PNG.

    experiments/plot.py results/<experiment> [--out FILE.png]
    experiments/plot.py --timeline RUN_DIR/trace.json [--out FILE.png]
"""

import argparse
import json
import os
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from psar_exp.io import read_csv  # noqa: E402


def runs_in(folder):
    """Run directories (those holding steps.csv) under folder, itself included."""
    found = []
    for dirpath, _, files in os.walk(folder):
        if "steps.csv" in files:
            found.append(dirpath)
    return sorted(found)


def smooth(values, window):
    if window <= 1 or len(values) < window:
        return values
    out, acc = [], 0.0
    for i, v in enumerate(values):
        acc += v
        if i >= window:
            acc -= values[i - window]
        out.append(acc / min(i + 1, window))
    return out


def plot_runs(folder, out):
    runs = runs_in(folder)
    if not runs:
        sys.exit(f"plot.py: no run directories with steps.csv under {folder}")
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(12, 4.5))
    for run in runs:
        label = os.path.relpath(run, folder) if run != folder else os.path.basename(run)
        per_step = defaultdict(list)
        for row in read_csv(os.path.join(run, "steps.csv")):
            per_step[int(row["step"])].append(float(row["loss"]))
        steps = sorted(per_step)
        loss = [sum(per_step[s]) / len(per_step[s]) for s in steps]
        ax_loss.plot(steps, smooth(loss, max(1, len(steps) // 100)), label=label, linewidth=1)
        eval_path = os.path.join(run, "eval.csv")
        if os.path.exists(eval_path):
            ev = read_csv(eval_path)
            ax_acc.plot([int(r["step"]) for r in ev], [100 * float(r["test_accuracy"]) for r in ev],
                        marker="o", markersize=3, label=label)
    ax_loss.set(xlabel="step", ylabel="training loss (mean over ranks, smoothed)", title="loss")
    ax_acc.set(xlabel="step", ylabel="test accuracy (%)", title="accuracy")
    for ax in (ax_loss, ax_acc):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(os.path.basename(os.path.abspath(folder)))
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print(f"plot.py: {len(runs)} run(s) -> {out}")


def plot_timeline(trace_path, out):
    with open(trace_path) as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    spans = [e for e in events if e.get("ph") == "X"]
    if not spans:
        sys.exit(f"plot.py: no spans in {trace_path}")
    colors = {"forward": "tab:blue", "backward": "tab:green", "backward_input": "tab:green",
              "backward_weight": "tab:olive", "send": "tab:orange", "recv": "tab:red",
              "sync": "tab:purple", "optimizer": "tab:gray", "comm": "tab:cyan"}
    t0 = min(e["ts"] for e in spans)
    tracks = sorted({e["pid"] * 1000 + e.get("tid", 0) for e in spans})
    fig, ax = plt.subplots(figsize=(14, 0.5 + 0.45 * len(tracks)))
    for e in spans:
        y = tracks.index(e["pid"] * 1000 + e.get("tid", 0))
        cat = e.get("cat", e["name"])
        ax.broken_barh([((e["ts"] - t0) / 1e3, e["dur"] / 1e3)], (y - 0.4, 0.8),
                       facecolors=colors.get(cat, "tab:cyan"))
    ax.set_yticks(range(len(tracks)), [f"rank {t // 1000}" + (f".{t % 1000}" if t % 1000 else "") for t in tracks])
    ax.invert_yaxis()
    ax.set_xlabel("time (ms)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in colors.values()]
    ax.legend(handles, list(colors), ncol=len(colors), fontsize=7, loc="upper center",
              bbox_to_anchor=(0.5, -0.35 if len(tracks) < 4 else -0.15), frameon=False)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print(f"plot.py: timeline -> {out}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", nargs="?", help="results/<experiment> or one run directory")
    ap.add_argument("--timeline", metavar="TRACE_JSON", help="draw a Chrome-trace timeline instead")
    ap.add_argument("--out", help="PNG to write")
    args = ap.parse_args()
    if args.timeline:
        plot_timeline(args.timeline, args.out or os.path.splitext(args.timeline)[0] + ".png")
    elif args.folder:
        folder = args.folder.rstrip("/")
        plot_runs(folder, args.out or os.path.join(folder, os.path.basename(os.path.abspath(folder)) + ".png"))
    else:
        ap.error("give a results folder or --timeline TRACE")


if __name__ == "__main__":
    main()
