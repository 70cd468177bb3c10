#!/usr/bin/python3
"""Activation recomputation's extra compute, measured (docs/tensor_parallel.md):
the GPT of experiments/recompute.yaml trained on one rank with
train.recompute none, selective and full, beside the forms from its shapes.

    experiments/recompute.py measure [--psar PATH] [--reps R] [--reference|--exploratory]
    experiments/recompute.py report

Every run goes through `flock /tmp/psar-measure.lock`. Writes into
results/recompute/ (--reference) or runs/recompute/:

  measure: R repetitions; in each, for model.dropout 0.1 (the yaml's) and
    0, the three modes take turns (the order reversed every other
    repetition), one `psar train` each:
      steps.csv   rep,dropout,mode,compute_s,median_s,forward_s,backward_s,
                  steps (steps.csv's compute_s — the forward and backward of
                  a step — over the steps after the first two: compute_s
                  their minimum, the step least disturbed by other work on a
                  shared host, median_s their median; forward_s and
                  backward_s: that least step's forward and backward spans
                  in the run's trace.json, full recomputation's rerun inside
                  the backward; the run's own rows name the mode, and the
                  script checks them)
      machine.md  the load before and after and the steal time
  report: tables.md from steps.csv and the yaml's shapes (no runs)

The forms (N = b·s rows of the batch, h = d_model, L blocks, V the
vocabulary; forward GEMM FLOPs, the backward twice them): a block's forward
24·N·h² + 4·N·s·h (linears, Q·Kᵀ and P·V), the head's 2·N·h·V. psar's
selective reruns Q·Kᵀ (2·N·s·h per block: it keeps the context, whose
backward needs only P and V), full the whole block; the paper's
(Korthikanti et al. 2022) selective reruns Q·Kᵀ and P·V (4·N·s·h per
block), full the whole block. The extra is each over the forward and
backward of `none`, 3 × the forward. tests/trainer/seqpar_test.cc holds the
trainer's counted forward FLOPs (GptComputeCounts::forward_flops) to psar's
form exactly; here the time is measured.
"""

import json
import os
import statistics

import yaml

from psar_exp import ROOT, runner
from psar_exp.io import md_table, read_csv, write_csv, write_text

YAML = os.path.join(ROOT, "experiments", "recompute.yaml")
MODES = ("none", "selective", "full")
DROPOUTS = ("0.1", "0")  # model.dropout: the yaml's, and none (no masks to regenerate)
WARMUP = 2  # steps left out of the median


def shapes(path=YAML):
    """(N, s, h, L, V) of the yaml's GPT: N = batch · seq_len rows."""
    with open(path) as f:
        c = yaml.safe_load(f)
    m = c["model"]
    return (c["train"]["batch_size"] * m["seq_len"], m["seq_len"], m["d_model"], m["layers"],
            m["vocab"])


def forms(N, s, h, L, V):
    """{mode: (psar's extra FLOPs, the paper's extra FLOPs)} and the forward
    and backward FLOPs of `none`, from the shapes (forward GEMMs; backward
    twice them)."""
    block = 24 * N * h * h + 4 * N * s * h
    forward = L * block + 2 * N * h * V
    extra = {"none": (0, 0), "selective": (L * 2 * N * s * h, L * 4 * N * s * h),
             "full": (L * block, L * block)}
    return extra, 3 * forward


def measure(args):
    rows = []
    before = runner.machine_state()
    for rep in range(args.reps):
        for dropout in DROPOUTS:
            order = list(MODES) if rep % 2 == 0 else list(reversed(MODES))
            for mode in order:
                run_dir = os.path.join(args.out, "runs", f"{mode}_p{dropout}_r{rep}")
                runner.locked_train(args.psar, 1, YAML, run_dir,
                                    [f"train.recompute={mode}", f"model.dropout={dropout}",
                                     "train.trace=true"])
                steps = read_csv(os.path.join(run_dir, "steps.csv"))
                if any(r["recompute"] != mode for r in steps):
                    raise runner.RunError(f"{run_dir}/steps.csv does not name recompute {mode}")
                compute = {int(r["step"]): float(r["compute_s"]) for r in steps
                           if int(r["step"]) > WARMUP}
                least = min(compute, key=compute.get)
                forward, backward = spans(os.path.join(run_dir, "trace.json"))[least - 1]
                rows.append({"rep": rep, "dropout": dropout, "mode": mode,
                             "compute_s": f"{compute[least]:.6f}",
                             "median_s": f"{statistics.median(compute.values()):.6f}",
                             "forward_s": f"{forward:.6f}", "backward_s": f"{backward:.6f}",
                             "steps": len(compute)})
                write_csv(os.path.join(args.out, "steps.csv"), rows)
    write_text(os.path.join(args.out, "machine.md"), runner.machine_note(before) + "\n")


def spans(trace_path):
    """[(forward s, backward s)] per step of a one-rank, one-micro-batch
    run's trace, in order."""
    with open(trace_path) as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    f = [e["dur"] / 1e6 for e in events if e.get("ph") == "X" and e.get("cat") == "forward"]
    b = [e["dur"] / 1e6 for e in events if e.get("ph") == "X" and e.get("cat") == "backward"]
    if len(f) != len(b):
        raise runner.RunError(f"{trace_path}: {len(f)} forwards, {len(b)} backwards")
    return list(zip(f, b))


def ratios(rows):
    """{mode: [compute_s of the mode / compute_s of none, per repetition]}
    (rows of one dropout)."""
    by = {(int(r["rep"]), r["mode"]): float(r["compute_s"]) for r in rows}
    reps = sorted({k[0] for k in by})
    return {m: [by[(k, m)] / by[(k, "none")] for k in reps] for m in MODES}


def tables(folder):
    all_rows = read_csv(os.path.join(folder, "steps.csv"))
    N, s, h, L, V = shapes()
    extra, total = forms(N, s, h, L, V)
    pct = lambda x: f"{100 * x:+.1f} %"  # noqa: E731
    table = []
    for dropout in DROPOUTS:
        rows = [r for r in all_rows if r["dropout"] == dropout]
        got = ratios(rows)
        fwd = statistics.median(float(x["forward_s"]) for x in rows if x["mode"] == "none")
        bwd = statistics.median(float(x["backward_s"]) for x in rows if x["mode"] == "none")
        for m in MODES:
            r = got[m]
            seconds = statistics.median(float(x["compute_s"]) for x in rows if x["mode"] == m)
            table.append([dropout, m, f"{1e3 * seconds:.1f}", f"{statistics.median(r):.3f}",
                          f"{min(r):.3f} – {max(r):.3f}", pct(statistics.median(r) - 1),
                          pct(extra[m][0] / total), pct(extra[m][1] / total),
                          pct(fwd / (fwd + bwd)) if m == "full" else ""])
    reps = len({r["rep"] for r in all_rows})
    return "".join([
        "# Activation recomputation: measured extra compute\n\n",
        "Written by `experiments/recompute.py report` from steps.csv and "
        "experiments/recompute.yaml.\n\n",
        f"The GPT of recompute.yaml on one rank: N = b·s = {N} rows, s = {s}, h = {h}, "
        f"L = {L}, V = {V}, with and without dropout. compute: forward and backward of a "
        f"step, the least over a run's steps after the first {WARMUP} (the median over the "
        f"repetitions in the table); the ratio is against `none` in the same repetition, "
        f"its median and range over {reps} repetitions. The forms are forward "
        "GEMM FLOPs recomputed over the forward and backward GEMM FLOPs of `none` "
        f"({total / 1e9:.3f} GFLOP per step): psar's selective reruns Q·Kᵀ, the paper's "
        "Q·Kᵀ and P·V; full reruns each block's forward in both.\n\n",
        "The last column is full recomputation's extra if it cost one forward of `none` as "
        "measured (its forward span over its forward and backward spans, medians): on this "
        "CPU the forward's elementwise work (layer norms, GeLU, softmax, dropout masks) "
        "makes it more than the third of the step its GEMM FLOPs are.\n\n",
        md_table(["dropout", "mode", "compute (ms)", "ratio to none (median)", "range",
                  "measured extra", "psar's form", "paper's form",
                  "one measured forward of none"], table)])


def regenerate(folder, results=None):
    """tables.md from the committed CSV (psar_exp check)."""
    return {"tables.md": tables(folder)}


def report(args):
    write_text(os.path.join(args.out, "tables.md"), tables(args.out))


def launcher():
    launch = runner.Launcher(__doc__, "recompute", runs={"measure": measure},
                             reports={"report": report})
    launch.parser.add_argument("--reps", type=int, default=5)
    return launch


if __name__ == "__main__":
    runner.main_guard("recompute.py", launcher().main)
