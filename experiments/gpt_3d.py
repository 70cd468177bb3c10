#!/usr/bin/python3
"""3D parallelism of the GPT: every (p, t, d) grid at n = 8 and n = 4 ranks with
a fixed global batch, with the network off and emulated at 1 Gbit/s; the
measured bubble beside (p − 1)/m and the notes' two forms of it, and the
per-axis traffic (axes.csv) beside its formulas; then scatter/gather on and
off for t = 2 and 4 at 1 Gbit/s (docs/parallelism_3d.md).

    experiments/gpt_3d.py [--out results/gpt_3d] [--steps 12] [--reuse]

The model is experiments/gpt_3d.yaml: 8 blocks, d_model 64, 8 heads,
context 32, on Debian's fortunes corpus; global batch B = 32 in
micro-batches of b = 2, so m = B/(b·d). Every run goes to
<out>/runs/<name>/; --reuse rebuilds the tables from those.
"""

import argparse
import os
import statistics

from psar_exp import ROOT
from psar_exp.io import md_table, read_csv, write_csv, write_text
from psar_exp.runner import (machine_note, machine_state, main_guard, mpirun_prefix, psar_binary,
                              record_provenance, run)

B, MICRO = 32, 2
NETWORKS = {"off": [], "1Gbit": ["net.bandwidth=1Gbit", "net.latency=50us"]}
WARMUP = 2  # steps left out of the means


def grids(n):
    """Every (p, t, d) with p·t·d = n."""
    out = []
    p = 1
    while p <= n:
        t = 1
        while p * t <= n:
            out.append((p, t, n // (p * t)))
            t *= 2
        p *= 2
    return out


def run_name(p, t, d, net, sg):
    return f"p{p}_t{t}_d{d}_{net}" + ("_sg" if sg else "")


def train(psar, exp, out, p, t, d, net, sg, steps):
    m = B // (MICRO * d)
    sets = [f"parallel.pp={p}", f"parallel.tp={t}", f"parallel.microbatches={m}",
            f"parallel.scatter_gather={'true' if sg else 'false'}", f"train.steps={steps}",
            *NETWORKS[net]]
    cmd = mpirun_prefix(p * t * d) + [psar, "train", exp, "--out", out, "--quiet"]
    for s in sets:
        cmd += ["--set", s]
    run(cmd)


def mean_after_warmup(rows, key):
    vals = [float(r[key]) for r in rows if int(r["step"]) > WARMUP]
    return statistics.fmean(vals) if vals else 0.0


def summarize(folder, p, t, d):
    """One table row's numbers from a run directory."""
    m = B // (MICRO * d)
    summary = read_csv(os.path.join(folder, "summary.csv"))[0]
    axes = read_csv(os.path.join(folder, "axes.csv"))
    steps = read_csv(os.path.join(folder, "steps.csv"))
    row = {"p": p, "t": t, "d": d, "m": m,
           "samples_per_s": float(summary["samples_per_s"]),
           "step_s": statistics.median(float(r["step_s"]) for r in steps
                                       if int(r["step"]) > WARMUP)}
    bubble = None
    pipe = os.path.join(folder, "pipeline.csv")
    if os.path.exists(pipe):
        alls = [r for r in read_csv(pipe) if r["stage"] == "all"]
        bubble = statistics.fmean(float(r["bubble"]) for r in alls)
    row["bubble"] = bubble if bubble is not None else 0.0
    row["bubble_formula"] = (p - 1) / m
    row["form_d1"] = (p * t // t - 1) / m if d == 1 else None  # n = p·t at d = 1
    row["form_t1"] = (p * d - d) / (B / MICRO) if t == 1 else None
    # Per axis: bytes sent per step and rank (max over ranks), seconds (mean over ranks).
    for axis, byte_key in (("tp", "tp_bytes_sent"), ("pp", "pp_bytes_sent"),
                           ("dp", "dp_bytes_sent")):
        per_rank = {}
        for r in axes:
            per_rank.setdefault(r["rank"], []).append(r)
        row[f"{axis}_bytes"] = max(mean_after_warmup(rs, byte_key) for rs in per_rank.values())
        row[f"{axis}_s"] = statistics.fmean(mean_after_warmup(rs, f"{axis}_s")
                                            for rs in per_rank.values())
    # The formulas: floats per step, equal on every rank of a kind (max over ranks).
    for axis in ("tp", "pp", "dp"):
        key = "tp_floats" if axis == "tp" else ("pp_floats_sent" if axis == "pp" else "dp_floats")
        row[f"{axis}_floats"] = max(int(r[key]) for r in axes)
        row[f"{axis}_formula"] = max(int(r[f"{axis}_floats_formula"]) for r in axes)
    return row


def fmt(x, digits=3):
    if x is None:
        return "—"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)


def mib(x):
    return f"{x / 2**20:.2f}"


def grid_table(rows):
    header = ["p", "t", "d", "m", "samples/s", "step (ms)", "bubble", "(p−1)/m",
              "(n/t−1)/m at d = 1", "(n−d)/(B/b) at t = 1",
              "TP MiB", "TP s", "PP MiB", "PP s", "DP MiB", "DP s", "floats = formula"]
    body = []
    for r in rows:
        exact = all(r[f"{a}_floats"] == r[f"{a}_formula"] for a in ("tp", "pp", "dp"))
        body.append([r["p"], r["t"], r["d"], r["m"], f"{r['samples_per_s']:.0f}",
                     f"{1000 * r['step_s']:.0f}", fmt(r["bubble"]), fmt(r["bubble_formula"]),
                     fmt(r["form_d1"]), fmt(r["form_t1"]),
                     mib(r["tp_bytes"]), fmt(r["tp_s"]), mib(r["pp_bytes"]), fmt(r["pp_s"]),
                     mib(r["dp_bytes"]), fmt(r["dp_s"]), "yes" if exact else "NO"])
    return md_table(header, body)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "results", "gpt_3d"))
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--reuse", action="store_true", help="rebuild the tables from existing runs")
    args = ap.parse_args()
    exp = os.path.join(ROOT, "experiments", "gpt_3d.yaml")
    psar = None if args.reuse else psar_binary()
    load_before = machine_state()

    def folder(name):
        return os.path.join(args.out, "runs", name)

    all_rows = []
    sections = ["# 3D parallelism of the GPT: every (p, t, d)\n",
                "Generated by `experiments/gpt_3d.py` (model: `experiments/gpt_3d.yaml`, "
                f"B = {B}, b = {MICRO}, m = B/(b·d); means over steps {WARMUP + 1}–{args.steps}). "
                "Bytes are sent per step by the busiest rank of the kind; seconds are the mean "
                "rank's time in that axis's communication (TP: inside the all-reduces; PP: "
                "blocked on receives, posting and completing sends, scatter/gather's "
                "all-gathers; DP: the finalize step). `floats = formula`: every rank's TP, PP "
                "and DP floats equal docs/parallelism_3d.md's formulas in every step.\n"]
    for net in NETWORKS:
        for n in (8, 4):
            rows = []
            for p, t, d in grids(n):
                name = run_name(p, t, d, net, False)
                if not args.reuse:
                    train(psar, exp, folder(name), p, t, d, net, False, args.steps)
                rows.append(summarize(folder(name), p, t, d))
                all_rows.append({"n": n, "network": net, **rows[-1]})
            sections.append(f"\n## n = {n}, network {net}\n\n" + grid_table(rows))

    sg_rows = []
    for p, t, d in ((2, 2, 1), (2, 4, 1)):
        got = {}
        for sg in (False, True):
            name = run_name(p, t, d, "1Gbit", sg)
            if not args.reuse:
                train(psar, exp, folder(name), p, t, d, "1Gbit", sg, args.steps)
            got[sg] = summarize(folder(name), p, t, d)
        sg_rows.append([p, t, d, mib(got[False]["pp_bytes"]), mib(got[True]["pp_bytes"]),
                        f"{got[False]['pp_bytes'] / got[True]['pp_bytes']:.2f}",
                        fmt(got[False]["pp_s"]), fmt(got[True]["pp_s"]),
                        f"{1000 * got[False]['step_s']:.0f}", f"{1000 * got[True]['step_s']:.0f}"])
    sections.append("\n## Scatter/gather at 1 Gbit/s\n\n" + md_table(
        ["p", "t", "d", "PP MiB off", "PP MiB on", "ratio", "PP s off", "PP s on",
         "step ms off", "step ms on"], sg_rows))
    sections.append("\n" + machine_note(None if args.reuse else load_before) + "\n")
    write_text(os.path.join(args.out, "tables.md"), "".join(sections))
    write_csv(os.path.join(args.out, "grid.csv"), all_rows)
    if not args.reuse:
        record_provenance(args.out, load_before)
    print(f"wrote {os.path.join(args.out, 'tables.md')}")


if __name__ == "__main__":
    main_guard("gpt_3d.py", main)
