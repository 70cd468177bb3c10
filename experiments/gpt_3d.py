#!/usr/bin/python3
"""3D parallelism of the GPT: every (p, t, d) grid at n = 8 and n = 4 ranks with
a fixed global batch, with the network off and emulated at 1 Gbit/s; the
measured bubble beside (p − 1)/m and the notes' two forms of it, and the
per-axis traffic (axes.csv) beside its formulas; then scatter/gather on and
off for t = 2 and 4 at 1 Gbit/s (docs/parallelism_3d.md).

    experiments/gpt_3d.py [--reference | --exploratory] [--out DIR] [--steps 12] [--reuse]

The model is experiments/gpt_3d.yaml: 8 blocks, d_model 64, 8 heads,
context 32, on Debian's fortunes corpus; global batch B = 32 in
micro-batches of b = 2, so m = B/(b·d). Every run goes to
<out>/runs/<name>/; --reuse rebuilds the tables from those.
"""

import os
import statistics

from psar_exp import ROOT
from psar_exp.generated import update_readme
from psar_exp.io import csv_text, md_table, read_csv, write_text
from psar_exp.runner import Launcher, main_guard, mpirun_prefix, run

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
    cmd = mpirun_prefix(p * t * d) + [psar, "train", exp, "--out", out, "--overwrite", "--quiet"]
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
    row["steps"] = max(int(r["step"]) for r in steps)
    for axis, byte_key in (("tp", "tp_bytes_sent"), ("pp", "pp_bytes_sent"),
                           ("pp_gather", "pp_gather_bytes_sent"), ("dp", "dp_bytes_sent")):
        per_rank = {}
        for r in axes:
            per_rank.setdefault(r["rank"], []).append(r)
        row[f"{axis}_bytes"] = max(mean_after_warmup(rs, byte_key) for rs in per_rank.values())
        if axis != "pp_gather":
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


SG_GRIDS = ((2, 2, 1), (2, 4, 1))


def run_plan():
    """(section, n, net, sg, p, t, d) of every run, in table order."""
    out = []
    for net in NETWORKS:
        for n in (8, 4):
            out += [(f"n = {n}, network {net}", n, net, False, p, t, d) for p, t, d in grids(n)]
    for p, t, d in SG_GRIDS:
        for sg in (False, True):
            out.append(("sg", p * t * d, "1Gbit", sg, p, t, d))
    return out


def collect(runs_dir):
    """{(n, net, sg, p, t, d): summarize()} of every run of the plan."""
    return {(n, net, sg, p, t, d): summarize(os.path.join(runs_dir, run_name(p, t, d, net, sg)),
                                             p, t, d)
            for _, n, net, sg, p, t, d in run_plan()}


def tables(got):
    """tables.md and grid.csv from collect()'s rows."""
    steps = {r["steps"] for r in got.values()}
    steps_text = "/".join(str(s) for s in sorted(steps))
    sections = ["# 3D parallelism of the GPT: every (p, t, d)\n",
                "Generated by `experiments/gpt_3d.py` (model: `experiments/gpt_3d.yaml`, "
                f"B = {B}, b = {MICRO}, m = B/(b·d); {steps_text} steps per run). samples/s is "
                "psar's summary over every step, warm-up included; step (ms) the median "
                f"step time over steps {WARMUP + 1}–{steps_text}; bubble the mean over the "
                "pipeline's steps; bytes and seconds per axis are means over steps "
                f"{WARMUP + 1}–{steps_text}. Bytes are sent per step by the busiest rank of the "
                "kind; seconds are the mean rank's time in that axis's communication (TP: "
                "inside the all-reduces; PP: blocked on receives, posting and completing "
                "sends, scatter/gather's all-gathers; DP: the finalize step). `floats = "
                "formula`: every rank's TP, PP and DP floats equal docs/parallelism_3d.md's "
                "formulas in every step.\n"]
    all_rows, section, rows = [], None, []
    for name, n, net, sg, p, t, d in run_plan():
        if name == "sg":
            continue
        if name != section:
            if rows:
                sections.append(f"\n## {section}\n\n" + grid_table(rows))
            section, rows = name, []
        rows.append(got[(n, net, sg, p, t, d)])
        all_rows.append({"n": n, "network": net, **rows[-1]})
    sections.append(f"\n## {section}\n\n" + grid_table(rows))
    sg_rows = []
    for p, t, d in SG_GRIDS:
        off, on = (got[(p * t * d, "1Gbit", sg, p, t, d)] for sg in (False, True))
        sg_rows.append([p, t, d, mib(off["pp_bytes"]), mib(on["pp_bytes"]),
                        f"{off['pp_bytes'] / on['pp_bytes']:.2f}", mib(on["pp_gather_bytes"]),
                        mib(on["pp_bytes"] + on["pp_gather_bytes"]),
                        fmt(off["pp_s"]), fmt(on["pp_s"]),
                        f"{1000 * off['step_s']:.0f}", f"{1000 * on['step_s']:.0f}"])
    sections.append(
        "\n## Scatter/gather at 1 Gbit/s\n\n"
        "Boundary bytes are the point-to-point sends between stages; with scatter/gather "
        "each rank sends 1/t of the activation and the next stage's all-gather puts it "
        "back together, so the all-gather's bytes are part of the inter-stage traffic.\n\n" +
        md_table(["p", "t", "d", "PP MiB off", "boundary MiB on", "boundary ratio",
                  "all-gather MiB on", "PP + all-gather MiB on", "PP s off", "PP s on",
                  "step ms off", "step ms on"], sg_rows))
    return "".join(sections), csv_text(all_rows)


def _one(got, **kw):
    (row,) = [r for k, r in got.items()
              if all(dict(zip(("n", "net", "sg", "p", "t", "d"), k))[a] == v
                     for a, v in kw.items())]
    return row


def reading(got):
    """The README's generated bullets: every figure from the runs."""
    plain = {k: r for k, r in got.items() if not k[2]}
    exact = sum(all(r[f"{a}_floats"] == r[f"{a}_formula"] for a in ("tp", "pp", "dp"))
                for r in got.values())
    dp = sorted((r["dp_bytes"], r["d"]) for r in plain.values() if r["dp_bytes"] > 0)
    lines = [f"- **Per-axis traffic equals its formula in {exact} of {len(got)} runs** "
             "(`floats = formula`: TP 4·b·T·h per block per micro-batch, PP b·T·h per "
             "boundary per micro-batch each way, DP the stage's parameter count; "
             "docs/parallelism_3d.md). The busiest rank's DP bytes follow the ring's "
             f"2(d−1)/d·params·4: {mib(dp[-1][0])} MiB at d = {dp[-1][1]} down to "
             f"{mib(dp[0][0])} MiB at d = {dp[0][1]}."]
    sg = []
    for p, t, d in SG_GRIDS:
        off, on = (got[(p * t * d, "1Gbit", s, p, t, d)] for s in (False, True))
        sg.append(f"at t = {t} the boundary sends drop {mib(off['pp_bytes'])} → "
                  f"{mib(on['pp_bytes'])} MiB (ratio {off['pp_bytes'] / on['pp_bytes']:.2f}) "
                  f"and the all-gather adds {mib(on['pp_gather_bytes'])} MiB, "
                  f"{mib(on['pp_bytes'] + on['pp_gather_bytes'])} MiB in all; inter-stage "
                  f"time {fmt(off['pp_s'])} → {fmt(on['pp_s'])} s")
    lines.append("- **Scatter/gather cuts the boundary sends t× but not the inter-stage "
                 "bytes**: " + "; ".join(sg) + ".")
    bub = []
    for p, t, d in ((2, 2, 2),) + SG_GRIDS:
        runs = sorted(((k[0], k[1], k[2]), r) for k, r in got.items() if k[3:] == (p, t, d))
        where = " / ".join(f"{r['bubble']:.3f} ({net}{', s/g' if s else ''}, n = {n})"
                           for (n, net, s), r in runs)
        bub.append(f"({p}, {t}, {d}) {where} vs (p − 1)/m = {runs[0][1]['bubble_formula']:.3f}")
    deep = [r for k, r in plain.items() if r["t"] == 1 and r["p"] >= 4]
    lines.append("- **Measured bubble beside (p − 1)/m**, every run of a grid: " +
                 "; ".join(bub) + f". With t = 1 and p ≥ 4: measured "
                 f"{min(r['bubble'] for r in deep):.1f}–{max(r['bubble'] for r in deep):.1f} "
                 f"against {min(r['bubble_formula'] for r in deep):.2f}–"
                 f"{max(r['bubble_formula'] for r in deep):.2f}.")

    def sps(net, p, t, d):
        return f"{_one(plain, n=8, net=net, p=p, t=t, d=d)['samples_per_s']:.0f}"
    lines.append(f"- **Throughput at n = 8** (samples/s): network off, (1, 1, 8) "
                 f"{sps('off', 1, 1, 8)} and (1, 8, 1) {sps('off', 1, 8, 1)}; at 1 Gbit/s "
                 f"(4, 1, 2) {sps('1Gbit', 4, 1, 2)}, (8, 1, 1) {sps('1Gbit', 8, 1, 1)}, "
                 f"(1, 1, 8) {sps('1Gbit', 1, 1, 8)} and (1, 8, 1) {sps('1Gbit', 1, 8, 1)}.")
    return "\n".join(lines) + "\n"


def regenerate(folder, results=None):
    """tables.md, grid.csv and the README's generated block from runs/."""
    got = collect(os.path.join(folder, "runs"))
    md, grid = tables(got)
    return {"tables.md": md, "grid.csv": grid, "README.md#reading": reading(got)}


def write_tables(args):
    """tables.md, grid.csv and the README's reading from the runs in args.out."""
    texts = regenerate(args.out)
    update_readme(args.out, {"reading": texts.pop("README.md#reading")})
    for name, text in texts.items():
        write_text(os.path.join(args.out, name), text)
    print(f"wrote {os.path.join(args.out, 'tables.md')}")


def measure(args):
    exp = os.path.join(ROOT, "experiments", "gpt_3d.yaml")
    for _, n, net, sg, p, t, d in run_plan():
        train(args.psar, exp, os.path.join(args.out, "runs", run_name(p, t, d, net, sg)),
              p, t, d, net, sg, args.steps)
    write_tables(args)


def launcher():
    launch = Launcher(__doc__, "gpt_3d", runs={"measure": measure}, reports={"reuse": write_tables},
                      flags={"--reuse": ("reuse", "rebuild the tables from existing runs")})
    launch.parser.add_argument("--steps", type=int, default=12)
    return launch


if __name__ == "__main__":
    main_guard("gpt_3d.py", launcher().main)
