#!/usr/bin/python3
"""The notes' rule of thumb on the virtual cluster — tensor parallelism inside
a host, pipeline parallelism across hosts — measured: 2 hosts × 2 ranks,
(p, t, d) = (2, 2, 1) with the TP pairs inside the hosts (parallel.order
tp-dp-pp, Megatron's) and across them (pp-tp-dp), alternating, step time and
per-axis time (docs/parallelism_3d.md, docs/network.md).

    scripts/cluster.sh up --hosts 2 --link 1Gbit
    experiments/cluster_placement.py [--reps 5] [--out results/cluster/placement]
    scripts/cluster.sh down
"""

import os
import statistics

from psar_exp import ROOT
from psar_exp.io import md_table, read_csv, write_text
from psar_exp.runner import Launcher, main_guard, run

ORDERS = {"tp-dp-pp": "TP pairs inside each host", "pp-tp-dp": "TP pairs across the hosts"}
WARMUP = 2


def summarize(folder):
    steps = [r for r in read_csv(os.path.join(folder, "steps.csv")) if int(r["step"]) > WARMUP]
    axes = [r for r in read_csv(os.path.join(folder, "axes.csv")) if int(r["step"]) > WARMUP]
    return {"step": statistics.median(float(r["step_s"]) for r in steps),
            "tp_s": statistics.fmean(float(r["tp_s"]) for r in axes),
            "pp_s": statistics.fmean(float(r["pp_s"]) for r in axes),
            "tp_mib": max(int(r["tp_bytes_sent"]) for r in axes) / 2**20,
            "pp_mib": max(int(r["pp_bytes_sent"]) for r in axes) / 2**20}


def measure(args):
    psar, state = args.psar, args.state
    exp = os.path.join(ROOT, "experiments", "gpt_3d.yaml")
    cluster = os.path.join(ROOT, "scripts", "cluster.sh")
    load = [os.getloadavg()[0]]
    got = {o: [] for o in ORDERS}
    for r in range(1, args.reps + 1):
        for order in ORDERS:
            out = os.path.join(args.out, f"{order}_r{r}")
            run([cluster, "mpirun", "-np", "4", "--per-host", "2", "--", psar, "train", exp,
                 "--out", out, "--overwrite", "--quiet", "--set", "parallel.pp=2", "--set", "parallel.tp=2",
                 "--set", "parallel.microbatches=16", "--set", f"parallel.order={order}",
                 "--set", "train.steps=12"])
            got[order].append(summarize(out))
    load.append(os.getloadavg()[0])
    commit = (state["commit"] or "unknown")[:12] + (" (exploratory)" if state["problems"] else "")
    rows = []
    for order, runs in got.items():
        med = {k: statistics.median(x[k] for x in runs) for k in runs[0]}
        rows.append([f"`{order}`", ORDERS[order], f"{1000 * med['step']:.0f}",
                     " ".join(f"{1000 * x['step']:.0f}" for x in runs),
                     f"{1000 * med['tp_s']:.0f}", f"{1000 * med['pp_s']:.0f}",
                     f"{med['tp_mib']:.2f}", f"{med['pp_mib']:.2f}"])
    text = ("# TP inside a host, PP across hosts — measured on the virtual cluster\n\n"
            "`experiments/cluster_placement.py` on `scripts/cluster.sh up --hosts 2 --link 1Gbit`"
            f" (2 hosts × 2 ranks), commit {commit}: the GPT of `experiments/gpt_3d.yaml` at "
            "(p, t, d) = (2, 2, 1), m = 16, 12 steps, medians over steps 3–12 and then over "
            f"{args.reps} alternating runs per order. TP and PP seconds are the mean rank's "
            "per step (axes.csv); MiB are sent per step by the busiest rank.\n\n"
            + md_table(["order", "placement", "step ms (median)", "step ms per run",
                        "TP ms", "PP ms", "TP MiB", "PP MiB"], rows)
            + f"\n\nMachine: 2 cores shared by the 4 ranks (and other work: 1-minute load "
            f"average {load[0]:.2f} before, {load[1]:.2f} after).\n")
    write_text(os.path.join(args.out, "placement.md"), text)
    print(text)


def launcher():
    launch = Launcher(__doc__, os.path.join("cluster", "placement"), runs={"measure": measure})
    launch.parser.add_argument("--reps", type=int, default=5)
    return launch


if __name__ == "__main__":
    main_guard("cluster_placement.py", launcher().main)
