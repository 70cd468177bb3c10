#!/usr/bin/python3
"""Regenerates results/pp_schedules/: the simulator's predictions for the
pipeline schedules beside their closed forms (docs/pipeline.md) — bubble vs m
for fixed p, vs p for fixed m, vs v, ZB-H1 under several cost ratios, and the
peak in-flight activations per stage — plus text and PNG grids of every
schedule at p = 4, m = 8. Runs only the `psar schedule` subcommand.

    experiments/pp_schedule_tables.py [--psar build/trainer/psar] [--reference | --exploratory]
                                      [--out DIR]

Writes runs/pp_schedules, or results/pp_schedules with --reference;
python3 -m psar_exp check holds the README's tables and grids.txt to psar.
"""

import os

from psar_exp import runner
from psar_exp.io import md_table as table
from psar_exp.generated import update_readme
from psar_exp.io import write_text

SCHEDULES = ["gpipe", "1f1b", "interleaved", "zb_h1"]


def run(psar, kind, p, m, v=1, costs=(1, 1, 1), extra=()):
    """psar schedule ...; returns (stdout, {key: [values]}) from its `key value ...` lines."""
    cmd = [psar, "schedule", "--kind", kind, "--stages", str(p), "--microbatches", str(m),
           "--chunks", str(v), "--tf", str(costs[0]), "--tb", str(costs[1]),
           "--tw", str(costs[2]), *extra]
    out = runner.run(cmd, echo=False)
    values = {}
    for line in out.splitlines():
        parts = line.split()
        if parts and parts[0] in ("bubble_fraction", "bubble_formula", "idle_share", "makespan",
                                  "peak_activations", "peak_formula"):
            values[parts[0]] = parts[1:]
    return out, values


def fmt(x):
    return f"{float(x):.4f}"


def bubble_row(psar, kind, p, m, v, costs=(1, 1, 1)):
    _, r = run(psar, kind, p, m, v, costs)
    sim, formula = float(r["bubble_fraction"][0]), float(r["bubble_formula"][0])
    return [kind, str(p), str(m), str(v), fmt(sim), fmt(formula), r["bubble_formula"][1],
            fmt(r["idle_share"][0]), "yes" if abs(sim - formula) <= 1e-12 * max(1, formula) else "NO"]


BUBBLE_HEADER = ["schedule", "p", "m", "v", "simulated bubble", "formula", "closed form",
                 "idle share of makespan", "equal"]


def kind_v(kind, v):
    return v if kind == "interleaved" else 1


def tables(psar):
    """README.md's generated block and grids.txt, from `psar schedule` alone;
    `bad`: the rows where the simulator and the formula disagree."""
    vs_m = [bubble_row(psar, k, 4, m, kind_v(k, 2)) for k in SCHEDULES for m in (4, 8, 16, 32, 64)]
    vs_p = [bubble_row(psar, k, p, 16, kind_v(k, 2)) for k in SCHEDULES for p in (2, 4, 8, 16)]
    vs_v = [bubble_row(psar, "interleaved", 4, 16, v) for v in (1, 2, 3, 4, 8)]
    zb = []
    for costs in ((1, 1, 1), (1, 2, 1), (2, 1, 1), (1, 1, 0.5), (1, 2, 2), (1, 1, 0)):
        for kind in ("1f1b", "zb_h1"):
            row = bubble_row(psar, kind, 4, 16, 1, costs)
            zb.append([f"{costs[0]:g}, {costs[1]:g}, {costs[2]:g}"] + row)

    peaks = []
    for kind in SCHEDULES:
        for m in (8, 16):
            _, r = run(psar, kind, 4, m, kind_v(kind, 2))
            sim, formula = r["peak_activations"][:4], r["peak_formula"][:4]
            peaks.append([kind, str(kind_v(kind, 2)), str(m), " ".join(sim), " ".join(formula),
                          "yes" if sim == formula else "NO"])

    cmd = "experiments/pp_schedule_tables.py --psar BUILD_DIR/trainer/psar"
    md = [
        f"Regenerate with `{cmd}` (runs `psar schedule` only; seconds).",
        "Unit costs t_f = t_b = t_w = 1 per stage and micro-batch unless a table says otherwise "
        "(a fused backward costs t_b + t_w; an interleaved chunk 1/v of each), equal stages, "
        "free communication. Bubble = idle time over compute time per stage (the lecture notes' "
        "(p-1)/m); idle share = idle / (p x makespan) = (p-1)/(m+p-1) for GPipe and 1F1B. "
        "See docs/pipeline.md for the definitions and the memory convention.",
        "",
        "## Bubble vs m (p = 4; interleaved with v = 2)",
        "",
        table(BUBBLE_HEADER, vs_m),
        "## Bubble vs p (m = 16; interleaved with v = 2)",
        "",
        table(BUBBLE_HEADER, vs_p),
        "## Bubble vs v (interleaved, p = 4, m = 16)",
        "",
        table(BUBBLE_HEADER, vs_v),
        "## ZB-H1 against 1F1B under other cost ratios (p = 4, m = 16)",
        "",
        "ZB-H1 idles (p-1)(t_f + t_b - t_w) per stage in the paper's regime t_w <= t_f, t_b, "
        "a third of 1F1B's (p-1)(t_f + t_b + t_w) at equal costs; the simulator finds "
        "(p-1)(t_f + t_b - min(t_f, t_b, t_w)) beyond that regime.",
        "",
        table(["t_f, t_b, t_w"] + BUBBLE_HEADER, zb),
        "## Peak in-flight activations per stage (p = 4; interleaved with v = 2)",
        "",
        "A micro-batch's activation counts from its forward until the backward that frees it "
        "(the fused backward, or W when the backward is split). Interleaved counts chunk "
        "activations, 1/v of a stage's each.",
        "",
        table(["schedule", "v", "m", "simulated, stages 0..3", "formula", "equal"], peaks),
    ]
    grids = []
    for kind in SCHEDULES:
        out, _ = run(psar, kind, 4, 8, kind_v(kind, 2))
        grids.append(f"$ psar schedule --kind {kind} --stages 4 --microbatches 8"
                     f"{' --chunks 2' if kind == 'interleaved' else ''}\n{out}\n")
    bad = [r for r in vs_m + vs_p + vs_v + zb if r[-1] != "yes"] + [r for r in peaks if r[-1] != "yes"]
    return {"README.md#tables": "\n".join(md), "grids.txt": "".join(grids)}, bad


def regenerate(folder, results=None):
    return tables(runner.psar_binary())[0]


def write_tables(args):
    """The tables, the grids and one PNG per schedule; args.bad: whether a
    table broke its check."""
    texts, args.bad = tables(args.psar)
    update_readme(args.out, {"tables": texts.pop("README.md#tables")})
    for name, text in texts.items():
        write_text(os.path.join(args.out, name), text)
    for kind in SCHEDULES:
        png = os.path.join(args.out, f"{kind}_p4_m8.png")
        run(args.psar, kind, 4, 8, kind_v(kind, 2), extra=("--png", png))
        os.remove(os.path.splitext(png)[0] + ".json")
    print(f"wrote {args.out}/README.md, grids.txt and {len(SCHEDULES)} PNGs")


def launcher():
    return runner.Launcher(__doc__, "pp_schedules", runs={"tables": write_tables})


def main():
    """Exit status 1 when a table broke its check."""
    args = launcher().main()
    return 1 if args.bad else 0


if __name__ == "__main__":
    runner.main_guard("pp_schedule_tables.py", main)
