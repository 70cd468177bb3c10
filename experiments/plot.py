#!/usr/bin/python3
"""Plots that compare runs, and the timeline of one traced run.

    experiments/plot.py FOLDER [FOLDER...] [--smooth W] [--out FILE.png]
    experiments/plot.py --timeline RUN_DIR/trace.json [--out FILE.png]

Runs: every run directory (one holding steps.csv) under the folders, one
line per run in four panels: training loss (mean over the ranks' rows of a
step) by step and by wall time, test accuracy by step and by wall time. The
wall time of step k is the sum over steps 1..k of the slowest rank's step_s,
so runs of different speed separate on the right-hand panels even where
their losses coincide step by step (bitwise-equal backends). Every run has a
colour of its own (tab10 up to 10 runs, tab20 up to 20, then evenly spaced
on a perceptual colour map) and one of four dash patterns, so lines that lie
on each other still show; the legend sits below the panels, in as many
columns as fit. A run's legend entry names its mode when steps.csv records
one other than the defaults (sequence parallelism, train.recompute; older
files without those columns read as the defaults). --smooth W draws a moving average over W steps (the
unsmoothed curve faint behind it) and says so on the axis; the default
draws the rows as they are.

Timeline: one track per rank and thread, labelled with the rank's (p, t, d)
coordinate from the run's axes.csv and its role (the compute thread, the
communication thread of an overlapped sync, its pulls in flight); one colour
per kind of action; titled with the run directory, its grid, schedule and
sync backend from config.yaml; the legend to the right of the axes.
"""

import argparse
import json
import os
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import yaml  # noqa: E402

from psar_exp.io import read_csv  # noqa: E402

DASHES = ["-", "--", "-.", ":"]


def runs_in(folder):
    """Run directories (those holding steps.csv) under folder, itself included."""
    found = []
    for dirpath, _, files in os.walk(folder):
        if "steps.csv" in files:
            found.append(dirpath)
    return sorted(found)


def run_colors(n):
    """n distinct colours: tab10 up to 10, tab20 up to 20, then evenly spaced on turbo."""
    if n <= 10:
        return [plt.get_cmap("tab10")(i) for i in range(n)]
    if n <= 20:
        return [plt.get_cmap("tab20")(i) for i in range(n)]
    cmap = plt.get_cmap("turbo")
    return [cmap(0.05 + 0.9 * i / (n - 1)) for i in range(n)]


def moving_average(values, window):
    """Mean over the last `window` values (fewer at the start)."""
    out, acc = [], 0.0
    for i, v in enumerate(values):
        acc += v
        if i >= window:
            acc -= values[i - window]
        out.append(acc / min(i + 1, window))
    return out


def run_mode(row):
    """The modes a steps.csv row records that differ from the defaults, as
    words ("" for the defaults and for files older than the columns)."""
    words = []
    if row.get("sequence_parallel", "0") == "1":
        words.append("sequence-parallel")
    if row.get("recompute", "none") not in ("none", "", None):
        words.append(f"recompute {row['recompute']}")
    return ", ".join(words)


def read_run(run):
    """Per step (sorted): mean loss over the ranks' rows and the wall time at
    its end (cumulative slowest step_s); eval rows as (step, accuracy %); the
    run's mode (run_mode) from its rows."""
    losses, step_s, modes = defaultdict(list), defaultdict(float), set()
    for row in read_csv(os.path.join(run, "steps.csv")):
        modes.add(run_mode(row))
        s = int(row["step"])
        losses[s].append(float(row["loss"]))
        step_s[s] = max(step_s[s], float(row["step_s"]))
    steps = sorted(losses)
    wall, t = {}, 0.0
    for s in steps:
        t += step_s[s]
        wall[s] = t
    evals = []
    eval_path = os.path.join(run, "eval.csv")
    if os.path.exists(eval_path):
        evals = [(int(r["step"]), 100 * float(r["test_accuracy"])) for r in read_csv(eval_path)]
    return {"steps": steps, "loss": [sum(losses[s]) / len(losses[s]) for s in steps],
            "wall": [wall[s] for s in steps], "evals": [(s, a, wall.get(s)) for s, a in evals],
            "mode": "; ".join(sorted(m for m in modes if m))}


def run_label(run, folders):
    for folder in folders:
        if run != folder and run.startswith(folder.rstrip("/") + "/"):
            return os.path.relpath(run, folder)
    return os.path.basename(run)


def plot_runs(folders, out, smooth=1):
    runs = [r for f in folders for r in runs_in(f)]
    if not runs:
        sys.exit(f"plot.py: no run directories with steps.csv under {' '.join(folders)}")
    fig, axes = plt.subplots(2, 2, figsize=(13, 8.5))
    (ax_loss, ax_loss_t), (ax_acc, ax_acc_t) = axes
    colors = run_colors(len(runs))
    handles = []
    for i, run in enumerate(runs):
        data = read_run(run)
        style = {"color": colors[i], "linestyle": DASHES[i % len(DASHES)], "linewidth": 1.2}
        loss = data["loss"]
        if smooth > 1:
            for ax, x in ((ax_loss, data["steps"]), (ax_loss_t, data["wall"])):
                ax.plot(x, loss, color=colors[i], linewidth=0.6, alpha=0.25)
            loss = moving_average(loss, smooth)
        label = run_label(run, folders) + (f" ({data['mode']})" if data["mode"] else "")
        (line,) = ax_loss.plot(data["steps"], loss, label=label, **style)
        ax_loss_t.plot(data["wall"], loss, **style)
        handles.append(line)
        evals = [e for e in data["evals"] if e[2] is not None]
        if evals:
            marks = dict(style, marker="o", markersize=3)
            ax_acc.plot([e[0] for e in evals], [e[1] for e in evals], **marks)
            ax_acc_t.plot([e[2] for e in evals], [e[1] for e in evals], **marks)
    what = "training loss (mean over ranks"
    what += f", moving average over {smooth} steps)" if smooth > 1 else ")"
    ax_loss.set(xlabel="step", ylabel=what, title="loss by step")
    ax_loss_t.set(xlabel="wall time (s, slowest rank's steps summed)", ylabel=what,
                  title="loss by wall time")
    ax_acc.set(xlabel="step", ylabel="test accuracy (%)", title="accuracy by step")
    ax_acc_t.set(xlabel="wall time (s, slowest rank's steps summed)", ylabel="test accuracy (%)",
                 title="accuracy by wall time")
    for ax in axes.flat:
        ax.grid(alpha=0.3)
    # One legend for all panels, below them: as many columns as fit the width.
    longest = max(len(h.get_label()) for h in handles)
    ncol = max(1, min(len(handles), int(160 / (longest + 8))))
    rows = -(-len(handles) // ncol)
    legend_h = 0.22 * rows + 0.3  # inches
    fig.set_size_inches(13, 8.5 + legend_h)
    fig.legend(handles=handles, loc="lower center", ncol=ncol, fontsize=8, frameon=False)
    title = ", ".join(os.path.basename(os.path.abspath(f)) for f in folders)
    fig.suptitle(f"{title}: {len(runs)} run(s)")
    fig.tight_layout(rect=(0, legend_h / (8.5 + legend_h), 1, 1))
    fig.savefig(out, dpi=120)
    plt.close(fig)
    print(f"plot.py: {len(runs)} run(s) -> {out}")
    return fig


# One colour per kind of action (the trace's categories, modelpar/pp/executor.cc
# and trainer/trainer.cc); anything else is grey and named in the legend.
ACTION_COLORS = {
    "forward": "tab:blue",
    "backward": "tab:green",
    "backward_input": "tab:olive",
    "backward_weight": "tab:brown",
    "send": "tab:orange",
    "recv": "tab:red",
    "sync": "tab:purple",
    "comm": "tab:cyan",
}
OTHER_COLOR = "tab:gray"
THREAD_ROLES = {0: "compute", 1: "comm thread", 2: "pulls in flight"}


def run_context(run_dir):
    """(title, {rank: (p, t, d)}) of the run holding a trace: from its
    config.yaml and axes.csv when they are there."""
    coords = {}
    axes_path = os.path.join(run_dir, "axes.csv")
    if os.path.exists(axes_path):
        for row in read_csv(axes_path):
            coords[int(row["rank"])] = (int(row["pp"]), int(row["tp"]), int(row["dp"]))
    title = os.path.basename(os.path.abspath(run_dir))
    config_path = os.path.join(run_dir, "config.yaml")
    if os.path.exists(config_path):
        with open(config_path) as f:
            config = yaml.safe_load(f) or {}
        par, sync = config.get("parallel", {}), config.get("sync", {})
        name = config.get("experiment", {}).get("name")
        if name and name != title:
            title = f"{name}: {title}"
        parts = []
        if coords:
            grid = [1 + max(c[i] for c in coords.values()) for i in range(3)]
            parts.append("grid p×t×d = {}×{}×{}".format(*grid))
        if par.get("pp", 1) > 1:
            parts.append(f"schedule {par.get('schedule')}, {par.get('microbatches')} micro-batches")
        if sync.get("backend"):
            parts.append(f"sync {sync['backend']}" + (" (overlapped)" if sync.get("overlap") else ""))
        if parts:
            title += " — " + ", ".join(parts)
    return title, coords


def track_label(rank, tid, coords):
    where = "(p{}, t{}, d{})".format(*coords[rank]) if rank in coords else ""
    role = THREAD_ROLES.get(tid, f"thread {tid}")
    return " ".join(x for x in (f"rank {rank}", where, role) if x)


def plot_timeline(trace_path, out):
    with open(trace_path) as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    spans = [e for e in events if e.get("ph") == "X"]
    if not spans:
        sys.exit(f"plot.py: no spans in {trace_path}")
    title, coords = run_context(os.path.dirname(os.path.abspath(trace_path)))
    t0 = min(e["ts"] for e in spans)
    tracks = sorted({(e["pid"], e.get("tid", 0)) for e in spans})
    fig, ax = plt.subplots(figsize=(14, 1.2 + 0.45 * len(tracks)))
    kinds = []
    for e in spans:
        y = tracks.index((e["pid"], e.get("tid", 0)))
        kind = e.get("cat", e["name"])
        if kind not in kinds:
            kinds.append(kind)
        ax.broken_barh([((e["ts"] - t0) / 1e3, e["dur"] / 1e3)], (y - 0.4, 0.8),
                       facecolors=ACTION_COLORS.get(kind, OTHER_COLOR))
    ax.set_yticks(range(len(tracks)), [track_label(r, t, coords) for r, t in tracks], fontsize=8)
    ax.set_ylim(len(tracks) - 0.5, -0.5)
    ax.set_xlabel("time (ms)")
    ax.set_title(title, fontsize=10)
    shown = [k for k in ACTION_COLORS if k in kinds] + [k for k in kinds if k not in ACTION_COLORS]
    handles = [plt.Rectangle((0, 0), 1, 1, color=ACTION_COLORS.get(k, OTHER_COLOR)) for k in shown]
    ax.legend(handles, shown, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0),
              borderaxespad=0, frameon=False)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    print(f"plot.py: timeline -> {out}")
    return fig


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folders", nargs="*", help="results/<experiment> folders or run directories")
    ap.add_argument("--timeline", metavar="TRACE_JSON", help="draw a Chrome-trace timeline instead")
    ap.add_argument("--smooth", type=int, default=1, metavar="W",
                    help="moving average of the loss over W steps (default 1: none)")
    ap.add_argument("--out", help="PNG to write")
    args = ap.parse_args()
    if args.smooth < 1:
        ap.error("--smooth must be at least 1")
    if args.timeline:
        plot_timeline(args.timeline, args.out or os.path.splitext(args.timeline)[0] + ".png")
    elif args.folders:
        folders = [f.rstrip("/") for f in args.folders]
        default = os.path.join(folders[0], os.path.basename(os.path.abspath(folders[0])) + ".png")
        plot_runs(folders, args.out or default, args.smooth)
    else:
        ap.error("give results folders or --timeline TRACE")


if __name__ == "__main__":
    main()
