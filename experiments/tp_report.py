#!/usr/bin/python3
"""Tensor-parallel tables from measured runs, beside the formulas (docs/tensor_parallel.md).

    experiments/run.py experiments/tp_comm.yaml
    experiments/run.py experiments/tp_step.yaml
    build/bench/bench_tp_gemm --benchmark_min_time=0.2 --benchmark_format=json > results/tp/gemm.json
    experiments/tp_report.py [--results results] [--out results/tp]

Reads every run directory (config.yaml, steps.csv, axes.csv, tp.csv) under
results/tp_comm and results/tp_step, and results/tp/gemm.json; writes
results/tp/tables.md (per-layer communication, DP vs TP volume, parallel GEMM,
step-time split) and results/tp/step_split.png.

The per-axis numbers come from axes.csv, which every run writes (trainer/axes.h,
docs/outputs.md): tp_* for the TP group's all-reduces, dp_* for the gradient
sync. steps.csv's bytes_sent counts every communicator of the rank (TP + DP),
so it is not the DP traffic. tp.csv is written only when t > 1 and is read only
for what axes.csv lacks (the all-gather count); with t = 1 the TP traffic is
axes.csv's, measured as zero, never assumed. A run without axes.csv is an error.
"""

import argparse
import json
import os
import statistics
import sys
from collections import defaultdict

import yaml

from psar_exp import ROOT
from psar_exp.io import read_csv, write_text

WARMUP = 3  # steps left out of timing medians


def runs(folder):
    """(path, config, steps rows, axes rows, tp rows or None) of every run directory under folder."""
    out = []
    for dirpath, _, files in sorted(os.walk(folder)):
        if "steps.csv" not in files or "config.yaml" not in files:
            continue
        if "axes.csv" not in files:
            sys.exit(f"tp_report.py: {dirpath} has no axes.csv (the per-axis counters every "
                     "psar train run writes): run the experiment again with the current trainer")
        with open(os.path.join(dirpath, "config.yaml")) as f:
            cfg = yaml.safe_load(f)
        tp = os.path.join(dirpath, "tp.csv")
        out.append((dirpath, cfg, read_csv(os.path.join(dirpath, "steps.csv")),
                    read_csv(os.path.join(dirpath, "axes.csv")),
                    read_csv(tp) if os.path.exists(tp) else None))
    return out


def by_split_and_t(run):
    return run[1]["parallel"].get("tp_split", ""), int(run[1]["parallel"]["tp"])


def axis_mean(axes, key, per=1):
    """Mean over axes.csv's rows (every rank, every step) of key / per."""
    return mean([int(r[key]) / per for r in axes])


def shape(cfg, world):
    m, p = cfg["model"], cfg["parallel"]
    t = int(p["tp"])
    d = world // t
    B_local = int(cfg["train"]["batch_size"]) // d
    return dict(t=t, d=d, L=int(m["layers"]), dm=int(m["d_model"]), T=int(m["seq_len"]),
                B=B_local, split=p.get("tp_split", "column_row"))


def world_of(steps):
    return len({r["rank"] for r in steps})


def ring_allreduce_bytes(t, n):
    """Bytes one rank sends in a ring all-reduce of n floats (mean over ranks)."""
    return 2 * (t - 1) / t * n * 4


def ring_all_gather_bytes(t, n):
    return (t - 1) / t * n * 4


def per_layer_formula(s):
    """(all-reduces, floats per all-reduce, bytes sent per rank) per layer per step."""
    t, n = s["t"], s["B"] * s["T"] * s["dm"]
    if t == 1:
        return 0, "-", 0.0
    if s["split"] == "column_row":
        return 4, f"{n}", 4 * ring_allreduce_bytes(t, n)
    bytes_ = (2 * ring_allreduce_bytes(t, n) + 2 * ring_allreduce_bytes(t, 4 * n)
              + 2 * ring_all_gather_bytes(t, n))
    return 4, f"2×{n} + 2×{4 * n}", bytes_


def tp_floats_per_layer(s):
    """Floats handed to the TP all-reduces per layer per step: 4·B·T·d (column_row),
    2·B·T·d + 2·B·T·4d (row_column: the MLP's two are [B·T, 4d]); 0 with t = 1."""
    n = s["B"] * s["T"] * s["dm"]
    if s["t"] == 1:
        return 0
    return 4 * n if s["split"] == "column_row" else 2 * n + 2 * 4 * n


def mean(xs):
    return sum(xs) / len(xs) if xs else float("nan")


def comm_table(rows):
    lines = ["| split | t | d | B·T·d (floats) | all-reduces / layer (measured) | formula | "
             "floats / all-reduce (measured) | formula | all-gathers / layer | "
             "bytes sent / rank / layer (measured) | formula (ring) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for path, cfg, steps, axes, tp in sorted(rows, key=by_split_and_t):
        s = shape(cfg, world_of(steps))
        f_ar, f_floats, f_bytes = per_layer_formula(s)
        n = s["B"] * s["T"] * s["dm"]
        L = s["L"]
        ar = axis_mean(axes, "tp_allreduces", L)
        floats = [int(r["tp_floats"]) / int(r["tp_allreduces"]) for r in axes if int(r["tp_allreduces"])]
        if s["split"] == "row_column" and floats:
            floats_txt = f"{mean(floats):.0f} (mean)"
        else:
            floats_txt = f"{mean(floats):.0f}" if floats else "-"
        # The all-gather count is only in tp.csv, which a t = 1 run does not write.
        ag = f"{mean([int(r['all_gathers']) / L for r in tp]):g}" if tp else "-"
        sent = axis_mean(axes, "tp_bytes_sent", L)
        lines.append(f"| {s['split']} | {s['t']} | {s['d']} | {n} | {ar:g} | {f_ar} | {floats_txt} | "
                     f"{f_floats} | {ag} | {sent:.0f} | {f_bytes:.0f} |")
    return "\n".join(lines)


def vocab_of(cfg):
    """The GPT's vocabulary as psar derives it (workloads/text_data.h)."""
    m, data = cfg["model"], cfg["data"]
    if int(m.get("vocab", 0)) > 0:
        return int(m["vocab"])
    if data["dataset"] == "synthetic_tokens":
        return 64
    path = data.get("path", "")
    path = path if os.path.isfile(path) else "/usr/share/games/fortunes/fortunes"
    with open(path, "rb") as f:
        return len(set(f.read()))


def params_per_rank(s, vocab):
    """Floats of one rank's shard of the GPT, in closed form from its layout (workloads/gpt.h):
    replicated wte [V, d], wpe [T, d], lnf (2d) and per block ln1, ln2 (4d); per block,
    sharded over t: QKV weight 3d², bias 3d (columns), attention proj weight d² (rows) with
    its bias d replicated; the MLP (hidden 4d) column_row: fc weight 4d², bias 4d (columns),
    proj weight 4d² (rows), bias d replicated; row_column: fc by rows (bias 4d replicated),
    proj by columns (bias d sharded)."""
    dm, t, L, T = s["dm"], s["t"], s["L"], s["T"]
    attention = (3 * dm * dm + 3 * dm) // t + dm * dm // t + dm
    if s["split"] == "column_row":
        mlp = (4 * dm * dm + 4 * dm) // t + 4 * dm * dm // t + dm
    else:
        mlp = 4 * dm * dm // t + 4 * dm + (4 * dm * dm + dm) // t
    layer = attention + mlp + 4 * dm
    return vocab * dm + T * dm + L * layer + 2 * dm


def volume_table(rows, vocab):
    lines = ["| split | t | d | DP: gradient floats / rank / step (measured) | closed form | "
             "DP bytes sent / rank / step (measured) | ring formula | "
             "TP: activation floats / layer / step (measured) | formula | "
             "TP bytes sent / rank / step (measured) | ring formula |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for path, cfg, steps, axes, tp in sorted(rows, key=by_split_and_t):
        s = shape(cfg, world_of(steps))
        P = params_per_rank(s, vocab)
        dp_floats = axis_mean(axes, "dp_floats")
        dp_meas = axis_mean(axes, "dp_bytes_sent")
        dp_formula = ring_allreduce_bytes(s["d"], P) if s["d"] > 1 else 0
        tp_floats = axis_mean(axes, "tp_floats", s["L"])
        tp_meas = axis_mean(axes, "tp_bytes_sent")
        tp_formula = s["L"] * per_layer_formula(s)[2]
        lines.append(f"| {s['split']} | {s['t']} | {s['d']} | {dp_floats:.0f} | {P} | {dp_meas:.0f} | "
                     f"{dp_formula:.0f} | {tp_floats:.0f} | {tp_floats_per_layer(s)} | "
                     f"{tp_meas:.0f} | {tp_formula:.0f} |")
    return "\n".join(lines)


def volume_section(name, rows):
    """The DP vs TP table of one experiment's runs, with the model it is about."""
    cfg = rows[0][1]
    m, vocab = cfg["model"], vocab_of(cfg)
    return [f"## DP gradient sync vs TP activations, whole model, per rank per step ({name})", "",
            f"GPT of experiments/{name}.yaml: {m['layers']} layers, d_model {m['d_model']}, context "
            f"{m['seq_len']}, vocabulary V = {vocab}, global batch {cfg['train']['batch_size']}. "
            "Measured columns are means over ranks and steps of axes.csv: dp_floats (the floats "
            "of the rank's parameters handed to the data-parallel all-reduce), dp_bytes_sent and "
            "tp_bytes_sent (what the DP and TP communicators sent), tp_floats / layers. The closed "
            "form of the gradient floats is V·d + T·d + 2d + L·(attention + MLP + 4d), each block's "
            "sharded weights and biases over t (tp_report.py, params_per_rank); bytes are those "
            "of a ring all-reduce, 2(n−1)/n·floats·4 over the group of n ranks (n = d for DP, "
            "t for TP). With d = 1 there is no DP traffic, with t = 1 no TP traffic: both measured "
            "as zero.", "",
            volume_table(rows, vocab), ""]


def linear_volume_table(s):
    """y = W·x for the MLP's first GEMM of this config: DP vs TP floats per step."""
    B = s["B"] * s["T"]
    rows = ["| layer y = W·x | C_in | C_out | B (tokens / rank, t = 1) | DP: \\|W\\| once per batch | "
            "TP forward: B·C_out per layer | TP backward: B·C_in per layer |",
            "|---|---|---|---|---|---|---|"]
    for name, cin, cout in (("attention QKV", s["dm"], 3 * s["dm"]), ("MLP fc", s["dm"], 4 * s["dm"]),
                            ("MLP proj", 4 * s["dm"], s["dm"])):
        rows.append(f"| {name} | {cin} | {cout} | {B} | {cin * cout} | {B * cout} | {B * cin} |")
    return "\n".join(rows)


def gemm_table(path):
    if not os.path.exists(path):
        return f"(no {os.path.relpath(path, ROOT)}: run bench_tp_gemm first)"
    with open(path) as f:
        bench = json.load(f)
    lines = ["| n | p | FLOPs 2n³/p | bytes 2n²(1+2/p) (fp16) | intensity n/(2+p) | serial ratio: "
             "FLOPs 1/p, bytes (1+2/p)/3, intensity 3/(2+p) | measured GFLOP/s (1 core) |",
             "|---|---|---|---|---|---|---|"]
    for b in bench["benchmarks"]:
        if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
            continue
        name = b["name"]
        n = int(name.split("n:")[1].split("/")[0])
        p = int(name.split("p:")[1].split("/")[0])
        lines.append(f"| {n} | {p} | {2 * n**3 / p:.3g} | {2 * n * n * (1 + 2 / p):.3g} | "
                     f"{n / (2 + p):.1f} | {1 / p:.3f}, {(1 + 2 / p) / 3:.3f}, {3 / (2 + p):.3f} | "
                     f"{b['GFLOP/s']:.1f} |")
    return "\n".join(lines)


def split_rows(rows):
    """Per (t, d): medians over steps (after warm-up), averaged over ranks."""
    out = []
    for path, cfg, steps, axes, tp in sorted(rows, key=lambda r: int(r[1]["parallel"]["tp"])):
        s = shape(cfg, world_of(steps))
        by_rank = defaultdict(list)
        for r in steps:
            if int(r["step"]) > WARMUP:
                by_rank[r["rank"]].append(r)
        axes_by_rank = defaultdict(list)
        for r in axes:
            if int(r["step"]) > WARMUP:
                axes_by_rank[r["rank"]].append(r)
        med = lambda rs, k: statistics.median(float(x[k]) for x in rs)
        step = mean([med(rs, "step_s") for rs in by_rank.values()])
        compute = mean([med(rs, "compute_s") for rs in by_rank.values()])
        sync = mean([med(rs, "sync_s") for rs in by_rank.values()])
        tpc = mean([med(rs, "tp_s") for rs in axes_by_rank.values()])
        out.append(dict(t=s["t"], d=s["d"], step=step, compute=compute - tpc,
                        tp=tpc, sync=sync, other=step - compute - sync))
    return out


def split_table(rows):
    lines = ["| t | d | step (ms) | compute (ms) | TP comm (ms) | DP sync + update (ms) | other (ms) |",
             "|---|---|---|---|---|---|---|"]
    for r in split_rows(rows):
        lines.append(f"| {r['t']} | {r['d']} | {1e3 * r['step']:.1f} | {1e3 * r['compute']:.1f} | "
                     f"{1e3 * r['tp']:.1f} | {1e3 * r['sync']:.1f} | {1e3 * r['other']:.1f} |")
    return "\n".join(lines)


def plot_split(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    data = split_rows(rows)
    if not data:
        return
    labels = [f"t={r['t']}, d={r['d']}" for r in data]
    fig, ax = plt.subplots(figsize=(6, 4))
    bottom = [0.0] * len(data)
    for key, name in (("compute", "compute"), ("tp", "TP all-reduces"), ("sync", "DP sync + update"),
                      ("other", "other")):
        vals = [1e3 * max(0.0, r[key]) if r[key] == r[key] else 0.0 for r in data]
        ax.bar(labels, vals, bottom=bottom, label=name)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_ylabel("ms per step (median)")
    ax.set_title("GPT step time split on 4 ranks")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=4, fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def tables(results, out, plot=False):
    """tables.md from the runs under results/tp_comm and results/tp_step and
    out/gemm.json; `plot` also draws step_split.png."""
    comm = runs(os.path.join(results, "tp_comm"))
    step = runs(os.path.join(results, "tp_step"))
    if not comm and not step:
        raise FileNotFoundError(f"no runs under {results}/tp_comm or tp_step "
                                "(run experiments/run.py experiments/tp_comm.yaml first)")
    doc = ["# Tensor parallelism: measured beside the formulas", "",
           "Generated by `experiments/tp_report.py`; see docs/tensor_parallel.md for how each "
           "number is measured.", ""]
    if comm:
        doc += ["## All-reduces and bytes per transformer layer per step (forward + backward)", "",
                "Measured from axes.csv (tp_allreduces, tp_floats, tp_bytes_sent over the layers, "
                "mean over ranks and steps); t = 1 has no TP group and measures zero. The all-gather "
                "count is only in tp.csv, which t = 1 runs do not write (`-`).", "",
                comm_table(comm), ""]
        s = shape(comm[0][1], world_of(comm[0][2]))
        doc += ["## DP vs TP volume for y = W·x (floats per step, this GPT's GEMMs, formula)", "",
                linear_volume_table(s), ""]
        doc += volume_section("tp_comm", comm)
    if step:
        doc += volume_section("tp_step", step)
    doc += ["## Parallel GEMM Y = X·A, A split by columns over p (one shard, one core)", "",
            gemm_table(os.path.join(out, "gemm.json")), ""]
    if step:
        doc += ["## Time per step and its split (medians after warm-up, mean over ranks)", "",
                "4 ranks shared the measuring host's cores (results/tp_step/README.md). "
                "`compute` is forward+backward without the TP all-reduces; `TP comm` is the "
                "time inside them (axes.csv's tp_s, zero with t = 1), waiting for the slowest rank "
                "included; `DP sync + update` is steps.csv's sync_s.", "",
                split_table(step), "", "![step split](step_split.png)", ""]
        if plot:
            plot_split(step, os.path.join(out, "step_split.png"))
    return "\n".join(doc)


def regenerate(folder, results):
    return {"tables.md": tables(results, folder)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", default=os.path.join(ROOT, "results"))
    ap.add_argument("--out", default=None, help="folder of the tables (default RESULTS/tp)")
    args = ap.parse_args()
    out = args.out or os.path.join(args.results, "tp")
    os.makedirs(out, exist_ok=True)
    try:
        text = tables(args.results, out, plot=True)
    except FileNotFoundError as e:
        sys.exit(f"tp_report.py: {e}")
    write_text(os.path.join(out, "tables.md"), text)
    print(f"tp_report.py: wrote {os.path.join(out, 'tables.md')}")


if __name__ == "__main__":
    main()
