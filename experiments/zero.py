#!/usr/bin/python3
"""Sharded training state (docs/zero.md): ZeRO stages 0, 1 and 2 of psar's
ring backend on the GPT of experiments/zero.yaml.

    experiments/zero.py memory [--psar PATH] [--reference|--exploratory]
    experiments/zero.py step   [--psar PATH] [--steps N] [--reps R] [--reference|--exploratory]
    experiments/zero.py report

Every run goes through `flock /tmp/psar-measure.lock`. Writes into
results/zero/ (--reference) or runs/zero/:

  memory: one step at N = 1..8 ranks for each stage (batch 840, every N a
    whole slice), the training state's bytes per rank from axes.csv
    (params_bytes, grads_bytes, optimizer_bytes):
      memory.csv   stage,N,rank,psi,params_bytes,grads_bytes,optimizer_bytes
  step: N = 4 and 8 at an emulated 1 and 10 Gbit/s (net.bandwidth, 20 us
    latency): ZeRO-0, stage 1, ZeRO-0 with overlap and stage 2 with overlap,
    the variants taking turns within each repetition:
      steps.csv    net,N,variant,rep,step_s,dp_bytes_max (step_s: the median
                   over steps after the first two of the slowest rank's step)
  machine_<part>.md: the load before and after and the steal time
  report: tables.md from the CSVs above (no runs)

The forms beside the measured bytes (Ψ parameters, fp32 Adam, N ranks,
P_r = Partition{Ψ, N}.size(r), the largest ⌈Ψ/N⌉): ZeRO-0 16Ψ; stage 1
4Ψ + 4Ψ + 8·P_r (the ZeRO paper's 8Ψ + 8Ψ/N up to the rounding); stage 2
the paper's 4Ψ + 12Ψ/N, which psar does not reach (its gradient arena stays
whole, docs/zero.md) — so the table shows it beside the measured bytes.
"""

import argparse
import os
import statistics

from psar_exp import ROOT, runner
from psar_exp.io import md_table, read_csv, write_csv, write_text

YAML = os.path.join(ROOT, "experiments", "zero.yaml")
NETS = [("1gbit", "1Gbit"), ("10gbit", "10Gbit")]
LATENCY = "20us"
STEP_RANKS = [4, 8]
# name -> the --set list of the variant
VARIANTS = {
    "zero0": ["sync.zero=0"],
    "zero1": ["sync.zero=1"],
    "zero0_overlap": ["sync.zero=0", "sync.overlap=true"],
    "zero2_overlap": ["sync.zero=2", "sync.overlap=true"],
}


def train(psar, n, run_dir, sets):
    return runner.locked_train(psar, n, YAML, run_dir, sets)


def memory(args):
    rows = []
    before = runner.machine_state()
    for stage in (0, 1, 2):
        for n in range(1, 9):
            run_dir = os.path.join(args.out, "runs", f"memory_s{stage}_n{n}")
            sets = [f"sync.zero={stage}", "train.steps=1", "train.batch_size=840"]
            if stage == 2:
                sets.append("sync.overlap=true")
            train(args.psar, n, run_dir, sets)
            for r in read_csv(os.path.join(run_dir, "axes.csv")):
                rows.append({"stage": stage, "N": n, "rank": r["rank"], "psi": r["dp_floats"],
                             "params_bytes": r["params_bytes"], "grads_bytes": r["grads_bytes"],
                             "optimizer_bytes": r["optimizer_bytes"]})
    write_csv(os.path.join(args.out, "memory.csv"), rows)
    write_text(os.path.join(args.out, "machine_memory.md"), runner.machine_note(before) + "\n")


def step(args):
    rows = []
    before = runner.machine_state()
    for net, bw in NETS:
        for n in STEP_RANKS:
            for rep in range(args.reps):
                names = list(VARIANTS)
                if rep % 2:
                    names.reverse()
                for name in names:
                    run_dir = os.path.join(args.out, "runs", f"step_{net}_n{n}_{name}_r{rep}")
                    train(args.psar, n, run_dir,
                          VARIANTS[name] + [f"train.steps={args.steps}", f"net.bandwidth={bw}",
                                            f"net.latency={LATENCY}"])
                    slowest = {}
                    for r in read_csv(os.path.join(run_dir, "steps.csv")):
                        k = int(r["step"])
                        if k > 2:
                            slowest[k] = max(slowest.get(k, 0.0), float(r["step_s"]))
                    sent = max(int(r["dp_bytes_sent"])
                               for r in read_csv(os.path.join(run_dir, "axes.csv")))
                    rows.append({"net": net, "N": n, "variant": name, "rep": rep,
                                 "step_s": f"{statistics.median(slowest.values()):.6f}",
                                 "dp_bytes_max": sent})
                    write_csv(os.path.join(args.out, "steps.csv"), rows)
    write_text(os.path.join(args.out, "machine_step.md"), runner.machine_note(before) + "\n")


def piece(psi, n, r):
    return psi // n + (1 if r < psi % n else 0)


def memory_table(rows):
    """Per stage and N: the largest rank's bytes measured beside the forms."""
    out = []
    for stage in (0, 1, 2):
        for n in range(1, 9):
            at = [r for r in rows if int(r["stage"]) == stage and int(r["N"]) == n]
            if not at:
                continue
            psi = int(at[0]["psi"])
            worst = max(at, key=lambda r: int(r["params_bytes"]) + int(r["grads_bytes"]) +
                        int(r["optimizer_bytes"]))
            measured = (int(worst["params_bytes"]) + int(worst["grads_bytes"]) +
                        int(worst["optimizer_bytes"]))
            # Exact, per rank: what the buffers must hold.
            exact = all(int(r["params_bytes"]) == 4 * psi and int(r["grads_bytes"]) == 4 * psi and
                        int(r["optimizer_bytes"]) ==
                        8 * (psi if stage == 0 else piece(psi, n, int(r["rank"])))
                        for r in at)
            paper = {0: 16 * psi, 1: 8 * psi + 8 * psi / n, 2: 4 * psi + 12 * psi / n}[stage]
            out.append([str(stage), str(n), f"{psi}", f"{int(worst['params_bytes']) / 1e6:.3f}",
                        f"{int(worst['grads_bytes']) / 1e6:.3f}",
                        f"{int(worst['optimizer_bytes']) / 1e6:.3f}", f"{measured / 1e6:.3f}",
                        f"{paper / 1e6:.3f}", f"{measured / paper:.3f}",
                        "yes" if exact else "**no**"])
    return md_table(["stage", "N", "Ψ", "params MB", "grads MB", "optimizer MB", "total MB",
                     "ZeRO form MB", "measured ÷ form", "every rank = exact form"], out)


def step_table(rows):
    out = []
    med = {}
    for r in rows:
        med.setdefault((r["net"], int(r["N"]), r["variant"]), []).append(float(r["step_s"]))
    for (net, n, variant), xs in sorted(med.items()):
        base_name = "zero0_overlap" if variant == "zero2_overlap" else "zero0"
        base = statistics.median(med.get((net, n, base_name), [float("nan")]))
        plain = statistics.median(med.get((net, n, "zero0"), [float("nan")]))
        m = statistics.median(xs)
        sent = max(int(r["dp_bytes_max"]) for r in rows
                   if r["net"] == net and int(r["N"]) == n and r["variant"] == variant)
        target = "" if variant.startswith("zero0") else (
            "met" if m / plain <= 1.05 else "**missed**")
        out.append([net, str(n), variant, f"{1e3 * m:.1f}", str(len(xs)),
                    f"{m / base:.3f}" if variant != base_name else "",
                    f"{m / plain:.3f}", target, f"{sent / 1e6:.3f}"])
    return md_table(["net", "N", "variant", "step ms (median of reps)", "reps",
                     "÷ same-overlap ZeRO-0", "÷ ZeRO-0", "≤ 1.05× ZeRO-0", "dp MB sent (max rank)"],
                    out)


def tables(folder):
    parts = ["# ZeRO: tables\n",
             "Written by `experiments/zero.py report` from the CSVs of this folder.\n"]
    mem = os.path.join(folder, "memory.csv")
    if os.path.exists(mem):
        parts += ["\n## Training state per rank vs N (memory.csv)\n\n"
                  "Bytes of the largest rank (parameters, gradients, Adam's m and v), "
                  "measured from the buffers each rank allocated; the ZeRO paper's form for "
                  "fp32 Adam beside them (stage 0: 16Ψ, stage 1: 8Ψ + 8Ψ/N, stage 2: "
                  "4Ψ + 12Ψ/N). The last column checks every rank's three buffers against "
                  "psar's exact form (4Ψ, 4Ψ, 8Ψ or 8·P_r with P_r = Partition{Ψ, N}.size(r)). "
                  "Stage 3 is not implemented.\n\n", memory_table(read_csv(mem))]
    st = os.path.join(folder, "steps.csv")
    if os.path.exists(st):
        parts += ["\n## Step time at an emulated network (steps.csv)\n\n"
                  f"The slowest rank's step (median over the steps after the first two, then "
                  f"over the repetitions), ring, net.latency {LATENCY}. Target: stage 1 and 2 "
                  "≤ 1.05× ZeRO-0.\n\n", step_table(read_csv(st))]
    return "".join(p if p.endswith("\n") else p + "\n" for p in parts)


def regenerate(folder, results=None):
    """tables.md from the committed CSVs (psar_exp check)."""
    return {"tables.md": tables(folder)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("part", choices=["memory", "step", "report"])
    ap.add_argument("--psar", default=None)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", help="default: runs/zero, or results/zero with --reference")
    runner.add_output_flags(ap)
    args = ap.parse_args()
    args.out = args.out or os.path.join(runner.output_root(args), "zero")
    os.makedirs(args.out, exist_ok=True)
    if args.part == "report":
        write_text(os.path.join(args.out, "tables.md"), tables(args.out))
        return
    args.psar = runner.psar_binary(args.psar)
    state = runner.begin(args.out, args.exploratory, args.psar, reference=args.reference)
    {"memory": memory, "step": step}[args.part](args)
    runner.record_provenance(args.out, state)


if __name__ == "__main__":
    runner.main_guard("zero.py", main)
