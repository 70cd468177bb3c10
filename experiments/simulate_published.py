#!/usr/bin/env python3
"""Published large-scale runs predicted by `psar simulate` (docs/simulate.md),
with no constant fitted on them: the rows of experiments/simulate/published.csv
(each with its source: paper and table), simulated from the A100 or H100
cluster of experiments/simulate/ with the row's model and grid, into
results/simulate/published/: table.md (source, configuration, published,
predicted, error) and rows.csv.

The constants are the configs' own: on A100 cluster.gpu.gemm_efficiency as
experiments/simulate_tables.py fitted it on Megatron's 145.6B weak-scaling
row (megatron_145p6b.yaml; that row is not one of these); on H100 the
measured GEMM table cluster.gpu.gemm_table = h100_sxm (sim/gemm/README.md);
kernel_overhead 10 us (set by hand), the SM counts, tiles, memory and link
bandwidths the hardware's. Nothing is refitted here.

usage: experiments/simulate_published.py [--reference] [--out DIR]
"""

import csv
import json
import os
import tempfile

import yaml

from psar_exp import ROOT
from psar_exp.io import md_table, write_text
from psar_exp.runner import Launcher, launch, main_guard

CONFIGS = os.path.join(ROOT, "experiments", "simulate")
DATA = os.path.join(CONFIGS, "published.csv")
BASE = {"a100": "megatron_145p6b.yaml", "h100": "llama3_405b_8192.yaml"}
# The band each source's rows are held to (None: predicted and reported, no target).
# Strong scaling's target: the simulated loss within this many points of the paper's.
STRONG_SCALING_POINTS = 3.0
# v = best tries at most this many chunks per stage.
MAX_CHUNKS = 8
TARGET = {"Narayanan": 5.0, "Korthikanti": 8.0, "Llama": None, "NVIDIA Megatron-LM README": None,
          "MosaicML": None}


def chunk_choices(row):
    """The v values a row is simulated at: its own, or for v = best every v
    up to MAX_CHUNKS that divides the layers per stage (the fastest is kept)."""
    if row["v"] != "best":
        return [int(row["v"])]
    per_stage = int(row["layers"]) // int(row["p"])
    return [v for v in range(1, min(per_stage, MAX_CHUNKS) + 1) if per_stage % v == 0]


def sets(row, v):
    """--set overrides for one row on its GPU's base config, at v chunks."""
    gpus, t, p = int(row["gpus"]), int(row["t"]), int(row["p"])
    d = gpus // (t * p)
    m = int(row["batch"]) // (d * int(row["b"]))
    extra = [x for x in row["sets"].split(";") if x]
    return [f"model.layers={row['layers']}", f"model.d_model={row['hidden']}",
            f"model.heads={row['heads']}", f"model.seq_len={row['seq']}",
            f"model.vocab={row['vocab']}", f"simulate.kv_heads={row['kv_heads']}",
            f"simulate.ffn={row['ffn']}", f"simulate.mlp={row['mlp']}",
            f"cluster.nodes={gpus // 8}", f"parallel.tp={t}", f"parallel.pp={p}",
            f"train.batch_size={row['batch']}", f"parallel.microbatches={m}",
            f"parallel.schedule={'interleaved' if v > 1 else '1f1b'}", f"parallel.chunks={v}",
            f"train.recompute={row['recompute']}", f"parallel.sequence_parallel={row['sp']}",
            f"sync.zero={row['zero']}", f"simulate.flash_attention={row['flash']}"] + extra


def simulate(psar, row):
    """The row's prediction: at its v, or the fastest of chunk_choices."""
    best = None
    for v in chunk_choices(row):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "r.json")
            cmd = [psar, "simulate", os.path.join(CONFIGS, BASE[row["gpu"]]), "--json", out]
            for s in sets(row, v):
                cmd += ["--set", s]
            done = launch(cmd, echo=False)
            if done.returncode != 0:
                if row["v"] == "best":
                    continue  # a v the schedule does not admit
                raise RuntimeError(f"{DATA}: row {row['id']}: psar simulate failed: {done.stderr}")
            with open(out) as f:
                r = json.load(f)
        if best is None or r["step_s"] < best["step_s"]:
            best = r
    if best is None:
        raise RuntimeError(f"{DATA}: row {row['id']}: no v admitted")
    return best


def predicted(row, r):
    """The simulated figure in the row's metric."""
    metric = row["metric"]
    if metric == "tflops":
        return r["tflops_per_gpu"]
    if metric == "iter_s":
        return r["step_s"]
    if metric == "mfu":
        return 100 * r["mfu"]
    if metric == "model_tflops":  # the model's FLOPs (no recomputation) per GPU-second
        return r["model_flops"] / (r["step_s"] * r["gpus"]) / 1e12
    if metric == "tokens_per_gpu_s":  # B·s tokens per step, per GPU-second
        return int(row["batch"]) * int(row["seq"]) / (r["step_s"] * r["gpus"])
    raise ValueError(f"{DATA}: row {row['id']}: unknown metric '{metric}'")


def load_data():
    with open(DATA) as f:
        return list(csv.DictReader(f))


def render(folder):
    """table.md from the folder's rows.csv, the published figures and the
    configs' constants."""
    with open(os.path.join(folder, "rows.csv")) as f:
        sim = {r["id"]: r for r in csv.DictReader(f)}
    rows = load_data()
    constants, yaml_cluster = {}, {}
    for gpu, name in BASE.items():
        with open(os.path.join(CONFIGS, name)) as f:
            yaml_cluster[gpu] = yaml.safe_load(f)["cluster"]
            constants[gpu] = yaml_cluster[gpu]["gpu"]
    table, misses = [], []
    for row in rows:
        r = sim[row["id"]]
        pub, pred = float(row["published"]), float(r["predicted"])
        err = 100 * (pred - pub) / pub
        target = next(v for k, v in TARGET.items() if row["source"].startswith(k))
        ok = target is None or abs(err) <= target
        if not ok:
            misses.append(row["id"])
        config = (f"L={row['layers']} h={row['hidden']} a={row['heads']}"
                  + (f" kv={row['kv_heads']} ffn={row['ffn']} {row['mlp']}"
                     if row["mlp"] != "gelu" else "")
                  + f", {row['gpus']} {row['gpu'].upper()}, t={row['t']} p={row['p']} "
                  f"d={r['dp']} v={r['chunks']}{' (best)' if row['v'] == 'best' else ''} B={row['batch']} b={row['b']}, "
                  f"recompute {row['recompute']}" + (", SP" if row["sp"] == "true" else "")
                  + (f", ZeRO-{row['zero']}" if row["zero"] != "0" else ""))
        unit = {"tflops": "TFLOP/s/GPU", "iter_s": "s/iteration", "mfu": "MFU %",
                "model_tflops": "model TFLOP/s/GPU",
                "tokens_per_gpu_s": "tokens/s/GPU"}[row["metric"]]
        table.append([row["id"], row["source"], row["checked"], config, unit, f"{pub:g}", f"{pred:.4g}",
                      f"{err:+.1f} %", "no target" if target is None else f"±{target:g} %: {'met' if ok else 'missed'}",
                      row["assumed"] or "-"])
    consts = md_table(["GPU", "base config", "constant", "value", "provenance"], [
        [gpu.upper(), BASE[gpu], "gemm_table", constants[gpu]["gemm_table"],
         "measured: cuBLAS bf16 GEMMs timed on one H100 SXM by tools/gemm_sweep.py "
         "(sim/gemm/README.md: card, driver, PyTorch, date, command), interpolated by shape "
         "and layout in place of peak x efficiency x waves; not fitted on any row here"]
        if "gemm_table" in constants[gpu] else
        [gpu.upper(), BASE[gpu], "gemm_efficiency", constants[gpu]["gemm_efficiency"],
         "fitted by experiments/simulate_tables.py on Megatron-LM's weak-scaling 145.6B row "
         "(Narayanan et al. 2021, Table 1: 148 TFLOP/s), not on any row here"]
        for gpu in BASE] + [
        [gpu.upper(), BASE[gpu], "kernel_overhead", constants[gpu]["kernel_overhead"],
         "set by hand (a round prior), not fitted"] for gpu in BASE] + [
        [gpu.upper(), BASE[gpu], "cluster.inter.efficiency",
         ", ".join(yaml_cluster[gpu]["inter"].get("efficiency", [])) or "ideal",
         "the NICs' bus efficiency by collective size, from the published nccl-tests all_reduce "
         "curve of 16 A100s in two nodes (docs/simulate.md, \"Bus efficiency\"); not fitted"]
        for gpu in BASE] + [
        [gpu.upper(), BASE[gpu], "peak, SMs, memory bandwidth",
         f"{constants[gpu]['peak_flops']}, {constants[gpu]['sms']}, "
         f"{constants[gpu]['memory_bandwidth']}", "the GPU's data sheet"] for gpu in BASE])
    return ("# Published runs, predicted by psar simulate\n\n"
            f"`experiments/simulate_published.py` from {os.path.relpath(DATA, ROOT)}. Each row: "
            "its source, the configuration simulated, the published figure, the prediction, "
            "the error and the target it is held to; `assumed` lists what the source does not "
            "state and this repository chose. Sequence 2048 and vocabulary 51200 on A100 "
            "(DGX A100 nodes, 8 x 200 Gbit/s InfiniBand, hierarchical all-reduce of fp32 "
            "gradients after the backward, each pipeline stage waiting on its sends as Megatron's "
            "2021-2022 schedules do: simulate.blocking_p2p), Llama 3 and the Megatron-LM README's weak-scaling rows "
            "on H100 (each GEMM at the measured cuBLAS rate of its shape and layout, "
            "sim/gemm/h100_sxm.csv; 8 x 400 Gbit/s, flash attention; the README's rows at sequence 4096, "
            "vocabulary 131072, v the best of those dividing L/p where unstated; their "
            "pipeline sends overlapped and, with sequence parallelism, their TP communication "
            "overlapped with the GEMMs, simulate.tp_comm_overlap, as the README states). Every "
            "row pays the embedding's kernels and TP collective and, with p > 1, the tied "
            "embedding's gradient all-reduce between the first and last stage. The NICs run "
            "at the bus efficiency of a published nccl-tests curve (docs/simulate.md). "
            "TFLOP/s per GPU counts the recomputed FLOPs (Megatron's 96·B·s·l·h² form with "
            "full recomputation); MFU and model TFLOP/s do not. `figure checked against` names "
            "the copy of the source each published figure was re-checked against.\n\n" +
            md_table(["id", "source", "figure checked against", "configuration", "metric", "published", "predicted",
                      "error", "target", "assumed"], table) +
            f"\nRows outside their target: {', '.join(misses) if misses else 'none'} "
            f"({len(misses)} of {len(rows)}).\n\n" + strong_scaling(rows, sim) +
            "## Constants\n\n" + consts)


def strong_scaling(rows, sim):
    """Narayanan et al.'s Table 2 is strong scaling at a fixed batch: per model, each
    row's throughput loss against the smallest GPU count, paper and simulated, held
    to within STRONG_SCALING_POINTS percentage points."""
    groups = {}
    for row in rows:
        if row["source"].startswith("Narayanan"):
            groups.setdefault((row["layers"], row["hidden"], row["batch"]), []).append(row)
    table, worst = [], 0.0
    for group in groups.values():
        group.sort(key=lambda r: int(r["gpus"]))
        base = group[0]
        pub0, pred0 = float(base["published"]), float(sim[base["id"]]["predicted"])
        for row in group[1:]:
            pub_loss = 100 * (1 - float(row["published"]) / pub0)
            pred_loss = 100 * (1 - float(sim[row["id"]]["predicted"]) / pred0)
            worst = max(worst, abs(pred_loss - pub_loss))
            table.append([row["id"], f"{base['gpus']} -> {row['gpus']}", f"{pub_loss:.1f} %",
                          f"{pred_loss:.1f} %", f"{pred_loss - pub_loss:+.2f}"])
    return ("## Strong scaling at a fixed batch (Narayanan et al. 2021, Table 2)\n\n"
            "Throughput per GPU lost against the model's smallest GPU count, paper and simulated; "
            f"the largest difference is {worst:.2f} points (target: {STRONG_SCALING_POINTS:g} "
            f"points, {'met' if worst <= STRONG_SCALING_POINTS else 'missed'}).\n\n" +
            md_table(["id", "GPUs", "paper loss", "simulated loss", "difference (points)"], table)
            + "\n")


def regenerate(folder, results):
    """For psar_exp check: table.md from the committed rows.csv."""
    return {"table.md": render(folder)}


def predict(args):
    psar = args.psar
    out_rows = []
    for row in load_data():
        r = simulate(psar, row)
        out_rows.append({"id": row["id"], "dp": r["dp"], "chunks": r["chunks"], "predicted": f"{predicted(row, r):.6g}",
                         "step_s": f"{r['step_s']:.6g}", "mfu": f"{r['mfu']:.6g}",
                         "tflops_per_gpu": f"{r['tflops_per_gpu']:.6g}",
                         "bubble": f"{r['bubble_fraction']:.4f}",
                         "sync_exposed_s": f"{r['sync_exposed_s']:.6g}"})
    with open(os.path.join(args.out, "rows.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(out_rows[0]))
        w.writeheader()
        w.writerows(out_rows)
    write_text(os.path.join(args.out, "table.md"), render(args.out))
    write_text(os.path.join(args.out, "README.md"),
               "# results/simulate/published\n\nRegenerate with `scripts/build.sh && "
               "/usr/bin/python3 experiments/simulate_published.py --reference`. table.md: every "
               "row of experiments/simulate/published.csv (source, configuration, published, "
               "predicted, error, target) and the constants with their provenance; rows.csv: "
               "the same predictions with the step's bubble and exposed data-parallel sync.\n")


def launcher():
    return Launcher(__doc__, os.path.join("simulate", "published"), runs={"predict": predict})


if __name__ == "__main__":
    main_guard("simulate_published", launcher().main)
