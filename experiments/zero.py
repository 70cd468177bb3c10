#!/usr/bin/python3
"""Sharded training state (docs/zero.md): ZeRO stages 0 to 3 of psar's
ring backend on the GPT of experiments/zero.yaml.

    experiments/zero.py memory [--psar PATH] [--reference|--exploratory]
    experiments/zero.py step   [--psar PATH] [--steps N] [--reps R] [--reference|--exploratory]
    experiments/zero.py step3  [--psar PATH] [--steps N] [--reps R] [--reference|--exploratory]
    experiments/zero.py report

Every run goes through `flock /tmp/psar-measure.lock`. Writes into
results/zero/ (--reference) or runs/zero/:

  memory: one step at N = 1..8 ranks for each stage (batch 840, every N a
    whole slice; stage 3 without prefetch), the training state's bytes per
    rank from axes.csv (params_bytes, grads_bytes, optimizer_bytes, and
    stage 3's gathered_bytes):
      memory.csv   stage,N,rank,psi,params_bytes,grads_bytes,optimizer_bytes,
                   gathered_bytes
  step: N = 4 and 8 at an emulated 1 and 10 Gbit/s (net.bandwidth, 20 us
    latency): ZeRO-0, stage 1, ZeRO-0 with overlap, stage 2 with overlap,
    the variants taking turns within each repetition:
      steps.csv    net,N,variant,rep,step_s,dp_bytes_max[,compute_s] (step_s,
                   compute_s: the median over steps after the first two of
                   the slowest rank's)
  step3: the same for ZeRO-0 and stage 3 without and with prefetch
    (steps3.csv), and stage 3's α-β prediction (prediction.csv: net,N,
    comm_s,first_s, the collectives' times from `psar cost` at the emulated
    α and β)
  machine_<part>.md: the load before and after and the steal time
  report: tables.md from the CSVs above (no runs)

The forms beside the measured bytes (Ψ parameters, fp32 Adam, N ranks,
P_r = Partition{Ψ, N}.size(r), the largest ⌈Ψ/N⌉): ZeRO-0 16Ψ; stage 1
4Ψ + 4Ψ + 8·P_r (the ZeRO paper's 8Ψ + 8Ψ/N up to the rounding); stage 2
the paper's 4Ψ + 12Ψ/N, which psar does not reach (its gradient arena stays
whole, docs/zero.md) — so the table shows it beside the measured bytes;
stage 3 4·P_r + 8·P_r (no gradient shard) plus the gathered layers
(gathered_form), beside the paper's 16Ψ/N.
"""

import os
import statistics

from psar_exp import ROOT, costs, runner
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
    "zero3": ["sync.zero=3"],
    "zero3_prefetch": ["sync.zero=3", "sync.overlap=true"],
}
# Each step part: its variants and its CSV.
STEP_PARTS = {"step": (["zero0", "zero1", "zero0_overlap", "zero2_overlap"], "steps.csv"),
              "step3": (["zero0", "zero3", "zero3_prefetch"], "steps3.csv")}
BANDWIDTH = {"1gbit": 1e9 / 8, "10gbit": 10e9 / 8}  # bytes/s
LATENCY_S = 20e-6
STAGES = (0, 1, 2, 3)


def train(psar, n, run_dir, sets):
    return runner.locked_train(psar, n, YAML, run_dir, sets)


def memory(args):
    rows = []
    before = runner.machine_state()
    for stage in STAGES:
        for n in range(1, 9):
            run_dir = os.path.join(args.out, "runs", f"memory_s{stage}_n{n}")
            sets = [f"sync.zero={stage}", "train.steps=1", "train.batch_size=840"]
            if stage == 2:
                sets.append("sync.overlap=true")
            train(args.psar, n, run_dir, sets)
            for r in read_csv(os.path.join(run_dir, "axes.csv")):
                rows.append({"stage": stage, "N": n, "rank": r["rank"], "psi": r["dp_floats"],
                             "params_bytes": r["params_bytes"], "grads_bytes": r["grads_bytes"],
                             "optimizer_bytes": r["optimizer_bytes"],
                             "gathered_bytes": r["gathered_bytes"]})
    write_csv(os.path.join(args.out, "memory.csv"), rows)
    write_text(os.path.join(args.out, "machine_memory.md"), runner.machine_note(before) + "\n")


def step(args):
    variants, csv_name = STEP_PARTS[args.part]
    rows = []
    before = runner.machine_state()
    for net, bw in NETS:
        for n in STEP_RANKS:
            for rep in range(args.reps):
                names = list(variants)
                if rep % 2:
                    names.reverse()
                for name in names:
                    run_dir = os.path.join(args.out, "runs", f"step_{net}_n{n}_{name}_r{rep}")
                    train(args.psar, n, run_dir,
                          VARIANTS[name] + [f"train.steps={args.steps}", f"net.bandwidth={bw}",
                                            f"net.latency={LATENCY}"])
                    slowest, compute = {}, {}
                    for r in read_csv(os.path.join(run_dir, "steps.csv")):
                        k = int(r["step"])
                        if k > 2:
                            slowest[k] = max(slowest.get(k, 0.0), float(r["step_s"]))
                            compute[k] = max(compute.get(k, 0.0), float(r["compute_s"]))
                    sent = max(int(r["dp_bytes_sent"])
                               for r in read_csv(os.path.join(run_dir, "axes.csv")))
                    rows.append({"net": net, "N": n, "variant": name, "rep": rep,
                                 "step_s": f"{statistics.median(slowest.values()):.6f}",
                                 "dp_bytes_max": sent,
                                 "compute_s": f"{statistics.median(compute.values()):.6f}"})
                    write_csv(os.path.join(args.out, csv_name), rows)
    write_text(os.path.join(args.out, f"machine_{args.part}.md"),
               runner.machine_note(before) + "\n")
    if args.part == "step3":
        write_csv(os.path.join(args.out, "prediction.csv"), prediction(args.psar))


BUDGET = 8e6  # bytes per rank
BUDGET_RANKS = 8


def zero_model():
    import yaml
    with open(YAML) as f:
        return yaml.safe_load(f)["model"]


def layer_floats():
    """The GPT's layers as stage 3 gathers them (Model::layer_ranges): the
    embeddings (V + T)·d, each block 12d² + 13d, the final layer norm 2d."""
    m = zero_model()
    d = m["d_model"]
    return [(m["vocab"] + m["seq_len"]) * d] + [12 * d * d + 13 * d] * m["layers"] + [2 * d]


def prediction(psar):
    """Stage 3's collectives per step at the emulated α and β: each layer
    all-gathered for the forward and the backward and reduce-scattered once,
    the embeddings twice more (the tied head); a ring reduce-scatter or
    all-gather is half the ring allreduce of `psar cost` (allreduce/sharded.h).
    first_s: the first layer's gather, which nothing hides."""
    layers = layer_floats()
    rows = []
    for net, _ in NETS:
        for n in STEP_RANKS:
            table = costs.query([n], sorted({4 * x for x in layers}), algos=["ring"],
                                alpha=LATENCY_S, beta=1 / BANDWIDTH[net], psar=psar)
            half = {x: table.time("ring", n, 4 * x, LATENCY_S, 1 / BANDWIDTH[net]) / 2
                    for x in layers}
            comm = sum(3 * half[x] for x in layers) + 2 * half[layers[0]]
            rows.append({"net": net, "N": n, "comm_s": f"{comm:.6f}",
                         "first_s": f"{half[layers[0]]:.6f}"})
    return rows


def piece(psi, n, r):
    return psi // n + (1 if r < psi % n else 0)


def state_bytes(stage, psi, n, r, gathered):
    """psar's exact bytes for rank r (docs/zero.md): params, grads, optimizer,
    gathered (stage 3: gathered_form's bytes)."""
    own = piece(psi, n, r)
    if stage == 0:
        return 4 * psi, 4 * psi, 8 * psi, 0
    if stage in (1, 2):
        return 4 * psi, 4 * psi, 8 * own, 0
    return 4 * own, 0, 8 * own, gathered


def paper_bytes(stage, psi, n):
    return {0: 16 * psi, 1: 8 * psi + 8 * psi / n, 2: 4 * psi + 12 * psi / n, 3: 16 * psi / n}[stage]


FIELDS = ("params_bytes", "grads_bytes", "optimizer_bytes", "gathered_bytes")


def gathered_form(layers):
    """Stage 3's gathered bytes at their largest in one step without prefetch
    (one micro-batch, the fused backward) of the zero.yaml GPT, layers =
    layer_floats(): [E, blocks..., lnf]. The forward holds one layer (the
    head two: the final layer norm and the tied embedding); a layer's
    backward its parameters and its gradient — and, from the head's backward
    to the embeddings', the embedding's gradient too (the tied head adds
    into it)."""
    emb, blocks, lnf = layers[0], layers[1:-1], layers[-1]
    phases = [max(layers), lnf + emb,           # forward
              2 * lnf + 2 * emb,                # the head's backward
              *(2 * b + emb for b in blocks),   # each block's
              2 * emb]                          # the embeddings'
    return 4 * max(phases)


def memory_table(rows, gathered):
    """Per stage and N: the largest rank's bytes measured beside the forms.
    gathered: stage 3's gathered bytes (gathered_form)."""
    out = []
    for stage in STAGES:
        for n in range(1, 9):
            at = [r for r in rows if int(r["stage"]) == stage and int(r["N"]) == n]
            if not at:
                continue
            psi = int(at[0]["psi"])
            total = lambda r: sum(int(r.get(k) or 0) for k in FIELDS)
            worst = max(at, key=total)
            measured = total(worst)
            # Exact, per rank: what the buffers must hold.
            exact = all(tuple(int(r.get(k) or 0) for k in FIELDS) ==
                        state_bytes(stage, psi, n, int(r["rank"]), gathered) for r in at)
            paper = paper_bytes(stage, psi, n)
            out.append([str(stage), str(n), f"{psi}",
                        *(f"{int(worst.get(k) or 0) / 1e6:.3f}" for k in FIELDS),
                        f"{measured / 1e6:.3f}", f"{paper / 1e6:.3f}", f"{measured / paper:.3f}",
                        "yes" if exact else "**no**"])
    return md_table(["stage", "N", "Ψ", "params MB", "grads MB", "optimizer MB", "gathered MB",
                     "total MB", "ZeRO form MB", "measured ÷ form", "every rank = exact form"],
                    out)


def gpt_floats(layers, d, vocab, seq_len):
    return (vocab + seq_len) * d + layers * (12 * d * d + 13 * d) + 2 * d


def budget_table(budget, n, d, vocab, seq_len):
    """The most blocks of the zero.yaml GPT (d_model d) whose training state
    fits `budget` bytes per rank at N = n: psar's exact forms (the memory
    table holds every measured rank to them) beside the paper's."""
    out = []
    for stage in STAGES:
        row = [str(stage)]
        for form in ("psar", "paper"):
            best = 0
            for blocks in range(1, 100000):
                psi = gpt_floats(blocks, d, vocab, seq_len)
                gathered = gathered_form([(vocab + seq_len) * d] + [12 * d * d + 13 * d] * blocks +
                                         [2 * d])
                need = (max(sum(state_bytes(stage, psi, n, r, gathered)) for r in range(n))
                        if form == "psar" else paper_bytes(stage, psi, n))
                if need > budget:
                    break
                best = blocks
            psi = gpt_floats(best, d, vocab, seq_len)
            row += [str(best), f"{psi / 1e6:.2f}"]
        out.append(row)
    return md_table(["stage", "blocks (psar)", "Ψ M (psar)", "blocks (paper form)",
                     "Ψ M (paper form)"], out)


def step_table(rows, predicted=()):
    out = []
    med = {}
    comp = {}
    for r in rows:
        med.setdefault((r["net"], int(r["N"]), r["variant"]), []).append(float(r["step_s"]))
        if r.get("compute_s"):
            comp.setdefault((r["net"], int(r["N"]), r["variant"]), []).append(float(r["compute_s"]))
    pred = {(p["net"], int(p["N"])): p for p in predicted}
    for (net, n, variant), xs in sorted(med.items()):
        base_name = "zero0_overlap" if variant == "zero2_overlap" else "zero0"
        base = statistics.median(med.get((net, n, base_name), [float("nan")]))
        plain = statistics.median(med.get((net, n, "zero0"), [float("nan")]))
        m = statistics.median(xs)
        sent = max(int(r["dp_bytes_max"]) for r in rows
                   if r["net"] == net and int(r["N"]) == n and r["variant"] == variant)
        model = ""
        target = ""
        if variant.startswith("zero3") and (net, n) in pred and (net, n, "zero0") in comp:
            # α-β: ZeRO-0's compute, plus the collectives (without prefetch
            # all exposed; with it all but the first gather hidden under
            # the compute as far as it reaches).
            c0 = statistics.median(comp[(net, n, "zero0")])
            comm, first = float(pred[(net, n)]["comm_s"]), float(pred[(net, n)]["first_s"])
            p = c0 + comm if variant == "zero3" else first + max(c0, comm - first)
            model = f"{1e3 * p:.1f} ({m / p:.2f}×)"
            if variant == "zero3_prefetch":
                ok = m / plain <= 1.5 and abs(m / p - 1) <= 0.15
                target = "met" if ok else "**missed**"
        elif variant in ("zero1", "zero2_overlap"):
            target = "met" if m / plain <= 1.05 else "**missed**"
        out.append([net, str(n), variant, f"{1e3 * m:.1f}", str(len(xs)),
                    f"{m / base:.3f}" if variant != base_name else "",
                    f"{m / plain:.3f}", model, target, f"{sent / 1e6:.3f}"])
    return md_table(["net", "N", "variant", "step ms (median of reps)", "reps",
                     "÷ same-overlap ZeRO-0", "÷ ZeRO-0", "α-β prediction ms (measured ÷ it)",
                     "target", "dp MB sent (max rank)"], out)


def tables(folder):
    model = zero_model()
    parts = ["# ZeRO: tables\n",
             "Written by `experiments/zero.py report` from the CSVs of this folder.\n"]
    mem = os.path.join(folder, "memory.csv")
    if os.path.exists(mem):
        parts += ["\n## Training state per rank vs N (memory.csv)\n\n"
                  "Bytes of the largest rank (parameters, gradients, Adam's m and v), "
                  "measured from the buffers each rank allocated; the ZeRO paper's form for "
                  "fp32 Adam beside them (stage 0: 16Ψ, stage 1: 8Ψ + 8Ψ/N, stage 2: "
                  "4Ψ + 12Ψ/N, stage 3: 16Ψ/N plus the gather buffers). The last column "
                  "checks every rank's buffers against psar's exact form (4Ψ, 4Ψ, 8Ψ or "
                  "8·P_r with P_r = Partition{Ψ, N}.size(r); stage 3: 4·P_r, 0, 8·P_r and "
                  "the gathered layers: a block's parameters and gradient with the tied "
                  "embedding's gradient, 4·(2·n_block + E), one step without prefetch).\n\n",
                  memory_table(read_csv(mem), gathered_form(layer_floats())),
                  "\n### The largest GPT per stage in a budget\n\n"
                  f"Blocks of the zero.yaml GPT (d_model {model['d_model']}) whose training "
                  f"state fits {BUDGET / 1e6:.0f} MB per rank at N = {BUDGET_RANKS}, from "
                  "psar's exact forms (held to every measured rank above) and from the "
                  "paper's.\n\n",
                  budget_table(BUDGET, BUDGET_RANKS, model["d_model"], model["vocab"],
                               model["seq_len"])]
    st = os.path.join(folder, "steps.csv")
    st3 = os.path.join(folder, "steps3.csv")
    pred = os.path.join(folder, "prediction.csv")
    if os.path.exists(st):
        parts += ["\n## Step time at an emulated network (steps.csv)\n\n"
                  f"The slowest rank's step (median over the steps after the first two, then "
                  f"over the repetitions), ring, net.latency {LATENCY}. Target: stage 1 and 2 "
                  "≤ 1.05× ZeRO-0.\n\n", step_table(read_csv(st))]
    if os.path.exists(st3):
        parts += ["\n## Stage 3 step time (steps3.csv)\n\n"
                  "As above, ZeRO-0 and stage 3 without and with prefetch taking turns. "
                  "Target: stage 3 with prefetch ≤ 1.5× ZeRO-0 and within 15 % of its α-β "
                  "prediction (ZeRO-0's measured compute, and the collectives of "
                  "prediction.csv: all exposed without prefetch; with it all but the first "
                  "gather hidden under the compute as far as it reaches).\n\n",
                  step_table(read_csv(st3), read_csv(pred) if os.path.exists(pred) else [])]
    return "".join(p if p.endswith("\n") else p + "\n" for p in parts)


def regenerate(folder, results=None):
    """tables.md from the committed CSVs (psar_exp check)."""
    return {"tables.md": tables(folder)}


def report(args):
    write_text(os.path.join(args.out, "tables.md"), tables(args.out))


def launcher():
    launch = runner.Launcher(__doc__, "zero", runs={"memory": memory, "step": step, "step3": step},
                             reports={"report": report})
    launch.parser.add_argument("--steps", type=int, default=20)
    launch.parser.add_argument("--reps", type=int, default=3)
    return launch


if __name__ == "__main__":
    runner.main_guard("zero.py", launcher().main)
