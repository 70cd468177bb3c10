#!/usr/bin/python3
"""The hybrid CNN (docs/cnn.md): plain data parallelism against Krizhevsky's
scheme (conv data-parallel, FC tensor-parallel) on the CNN of
experiments/cnn_fmnist.yaml.

    experiments/hybrid_cnn.py accuracy   [--psar PATH]
    experiments/hybrid_cnn.py compare    [--psar PATH] [--steps N]
    experiments/hybrid_cnn.py crossover  [--psar PATH] [--steps N]
    experiments/hybrid_cnn.py report     [--out FOLDER]

Every run goes through `flock /tmp/psar-measure.lock` (one benchmark at a
time on the shared machine). Writes into results/hybrid_cnn/:

  accuracy: the accuracy curve to the target, serial and hybrid at n = 4
    (train.epochs of the YAML, evaluated every train.eval_every steps):
      accuracy.csv   run,step,epoch,train_s,test_loss,test_accuracy
  compare: plain DP vs hybrid vs hybrid with the FC replicated
    (parallel.hybrid_fc) at n = 2, 4, 8, with the network off and
    emulated at 10 and 1 Gbit/s (net.bandwidth; net.latency 20us), a few
    steps each (the first two dropped as warm-up):
      compare.csv    scheme,n,net,step_s,compute_s,sync_s,dp_floats,
                     tp_floats,gather_floats,dp_bytes,tp_bytes (per step,
                     the mean over ranks and steps; step_s the slowest rank)
      split.csv      parameters and forward FLOPs per layer kind (the line
                     psar prints at the start of a CNN run)
  machine_<part>.md: the commit, the load average before and after and the
    steal time of that part's runs

crossover writes into its own folder, results/hybrid_cnn_crossover/
(runs/ without --reference): plain DP vs hybrid at n = 2 on the emulated
1 Gbit/s network over batch sizes 32..512, where the alpha-beta model puts
the crossover (hybrid's traffic grows with the batch, plain DP's does not),
and then its tables.md and crossover.png:
      crossover.csv  scheme,n,batch,step_s,comm_s,dp_bytes,tp_bytes,
                     predicted_comm_s (comm_s: the seconds inside the
                     collectives, tp_s + dp_s of axes.csv, per step and
                     rank, the mean over ranks and steps after two warm-up)
  report: figures and tables.md from the CSVs above (no runs):
      accuracy.png, bytes.png, step_time.png, tables.md

The alpha-beta prediction (per rank, NIC bandwidth B, latency a; ring
algorithms; 4-byte floats): plain DP all-reduces all P parameters:
2(n-1)(a + 4P/(nB)). FC replicated: the conv all-reduce and the
all-gather below. Hybrid: the conv parameters P_c the same way, the
features of the batch b*F all-gathered ((n-1)(a + 4bF/(nB))), their
gradient all-reduced by f (2(n-1)(a + 4bF/(nB))) and the logits by g
(2(n-1)(a + 4bC/(nB))). Predicted step = the measured step time with the
network off + the predicted communication time on the emulated network.
Equating hybrid's communication with plain DP's (F features per sample, C
classes) puts the crossover at the batch
b* = (8(P - P_c) - 5anB) / (12F + 8C): hybrid communicates less below it.
"""

import os
import re
import statistics
import sys

from psar_exp import ROOT, runner
from psar_exp.io import md_table, read_csv, write_csv, write_text

YAML = os.path.join(ROOT, "experiments", "cnn_fmnist.yaml")
# The networks of compare: name, net.bandwidth (None: emulation off), bytes/s.
NETS = [("off", None, None), ("10gbit", "10Gbit", 10e9 / 8), ("1gbit", "1Gbit", 1e9 / 8)]
NET_BYTES_PER_S = {name: bytes_per_s for name, _, bytes_per_s in NETS if bytes_per_s}
LATENCY_S = 20e-6
RANKS = [2, 4, 8]
# crossover: n, the emulated network and the batch sizes swept.
CROSSOVER_RANKS = 2
CROSSOVER_NET = ("1gbit", "1Gbit", 1e9 / 8)  # name, net.bandwidth, bytes/s
CROSSOVER_BATCHES = [32, 64, 128, 256, 512]
# Plain data parallelism, hybrid (FC tensor-parallel), hybrid with the FC replicated.
SCHEMES = ["dp", "hybrid", "fc_replicated"]


def train(psar, n, run_dir, sets):
    return runner.locked_train(psar, n, YAML, run_dir, sets)


def accuracy(args):
    results_dir = args.out
    rows = []
    before = runner.machine_state()
    for name, n, sets in [("serial", 1, []), ("hybrid_n4", 4, ["parallel.hybrid=true"])]:
        run_dir = os.path.join(results_dir, "runs", name)
        train(args.psar, n, run_dir, sets)
        steps = read_csv(os.path.join(run_dir, "steps.csv"))
        # Training time to step k: the slowest rank's step times summed.
        slowest = {}
        for r in steps:
            k = int(r["step"])
            slowest[k] = max(slowest.get(k, 0.0), float(r["step_s"]))
        for e in read_csv(os.path.join(run_dir, "eval.csv")):
            k = int(e["step"])
            rows.append({"run": name, "step": k, "epoch": e["epoch"],
                         "train_s": f"{sum(v for s, v in slowest.items() if s <= k):.3f}",
                         "test_loss": e["test_loss"], "test_accuracy": e["test_accuracy"]})
    write_csv(os.path.join(results_dir, "accuracy.csv"), rows)
    write_text(os.path.join(results_dir, "machine_accuracy.md"), runner.machine_note(before) + "\n")


def mean(xs):
    return statistics.fmean(xs) if xs else 0.0


def compare(args):
    results_dir = args.out
    rows, split = [], None
    before = runner.machine_state()
    for n in RANKS:
        for net, bandwidth_setting, _ in NETS:
            for scheme in SCHEMES:
                run_dir = os.path.join(results_dir, "runs", f"{scheme}_n{n}_{net}")
                out = train(args.psar, n, run_dir,
                            timing_run_sets(args.steps, scheme, bandwidth_setting))
                summary_line = re.search(r"^cnn: .*$", out, re.M)
                if summary_line and split is None:
                    split = summary_line.group(0)
                means, axes = per_step_means(run_dir)
                rows.append({
                    "scheme": scheme, "n": n, "net": net,
                    **{k: f"{means[k]:.6f}" for k in ["step_s", "compute_s", "sync_s"]},
                    "dp_floats": axes["dp_floats"],
                    "tp_floats": axes["tp_floats"],
                    "gather_floats": axes["tp_gather_floats"],
                    **{k: f"{means[k]:.0f}" for k in ["dp_bytes", "tp_bytes"]},
                })
                write_csv(os.path.join(results_dir, "compare.csv"), rows)
    write_csv(os.path.join(results_dir, "split.csv"), parse_split(split))
    write_text(os.path.join(results_dir, "machine_compare.md"), runner.machine_note(before) + "\n")


def timing_run_sets(steps, scheme, bandwidth_setting):
    """The --set values of a timing run: `steps` steps without evaluation,
    `scheme` (one of SCHEMES), the network emulated at `bandwidth_setting`
    (None: off)."""
    sets = [f"train.steps={steps}", "train.epochs=null", "train.eval_every=0",
            "data.test_limit=64", f"parallel.hybrid={'false' if scheme == 'dp' else 'true'}",
            f"parallel.hybrid_fc={'replicated' if scheme == 'fc_replicated' else 'tensor'}"]
    if bandwidth_setting:
        sets += [f"net.bandwidth={bandwidth_setting}", f"net.latency={int(LATENCY_S * 1e6)}us"]
    return sets


def per_step_means(run_dir):
    """A run's step time (the slowest rank's, mean over steps), compute and
    sync seconds (steps.csv), seconds inside the collectives (tp_s + dp_s of
    axes.csv) and bytes sent per axis (the last four: means over ranks and
    steps), steps 1 and 2 dropped as warm-up; and the first axes.csv row."""
    steps = [r for r in read_csv(os.path.join(run_dir, "steps.csv")) if int(r["step"]) > 2]
    axes = [r for r in read_csv(os.path.join(run_dir, "axes.csv")) if int(r["step"]) > 2]
    if not steps or not axes:
        sys.exit(f"hybrid_cnn.py: {run_dir} has no step after the two warm-up steps "
                 "(raise --steps)")
    slowest = {}
    for r in steps:
        slowest[int(r["step"])] = max(slowest.get(int(r["step"]), 0.0), float(r["step_s"]))
    return {"step_s": mean(list(slowest.values())),
            "compute_s": mean([float(r["compute_s"]) for r in steps]),
            "sync_s": mean([float(r["sync_s"]) for r in steps]),
            "comm_s": mean([float(r["tp_s"]) + float(r["dp_s"]) for r in axes]),
            "dp_bytes": mean([float(r["dp_bytes_sent"]) for r in axes]),
            "tp_bytes": mean([float(r["tp_bytes_sent"]) for r in axes])}, axes[0]


def crossover(args):
    results_dir = args.out
    rows = []
    before = runner.machine_state()
    n, (net, bandwidth_setting, bandwidth) = CROSSOVER_RANKS, CROSSOVER_NET
    for batch in CROSSOVER_BATCHES:
        for scheme in ["dp", "hybrid"]:
            run_dir = os.path.join(results_dir, "runs", f"{scheme}_n{n}_{net}_b{batch}")
            train(args.psar, n, run_dir, timing_run_sets(args.steps, scheme, bandwidth_setting) +
                  [f"train.batch_size={batch}"])
            m, axes = per_step_means(run_dir)
            row = {"scheme": scheme, "n": n, "batch": batch, "dp_floats": axes["dp_floats"],
                   "tp_floats": axes["tp_floats"], "gather_floats": axes["tp_gather_floats"]}
            rows.append({"scheme": scheme, "n": n, "batch": batch,
                         "step_s": f"{m['step_s']:.6f}", "comm_s": f"{m['comm_s']:.6f}",
                         "dp_bytes": f"{m['dp_bytes']:.0f}", "tp_bytes": f"{m['tp_bytes']:.0f}",
                         "predicted_comm_s": f"{predicted_comm_s(row, bandwidth):.6f}"})
            write_csv(os.path.join(results_dir, "crossover.csv"), rows)
    write_text(os.path.join(results_dir, "machine_crossover.md"),
               runner.machine_note(before) + "\n")
    report(args)


def crossing_batch(rows, column):
    """The batch size at which hybrid's `column` meets plain DP's, by linear
    interpolation between the two swept batch sizes around the first sign
    change of hybrid − dp; None if it does not change sign."""
    by = {(r["scheme"], int(r["batch"])): float(r[column]) for r in rows}
    batches = sorted({int(r["batch"]) for r in rows})
    gaps = [(b, by[("hybrid", b)] - by[("dp", b)]) for b in batches
            if ("hybrid", b) in by and ("dp", b) in by]
    for (b0, g0), (b1, g1) in zip(gaps, gaps[1:]):
        if g0 <= 0 < g1 or g0 >= 0 > g1:
            return b0 + (b1 - b0) * g0 / (g0 - g1)
    return None


def parse_split(line):
    """split.csv rows from psar's start line: parameters and forward FLOP
    shares of conv and fc."""
    if not line:
        sys.exit("hybrid_cnn.py: psar printed no 'cnn:' line (run without --quiet)")
    m = re.match(r"cnn: (\d+) parameters, ([\d.]+)% in conv and ([\d.]+)% in fc; ([\d.e+]+) "
                 r"forward MFLOP per sample, ([\d.]+)% in conv and ([\d.]+)% in fc; (\d+) features",
                 line)
    if not m:
        sys.exit(f"hybrid_cnn.py: cannot read the line {line!r}")
    p, pc, pf, fl, fc, ff, feat = m.groups()
    return [{"kind": "conv", "params_share": pc, "flops_share": fc},
            {"kind": "fc", "params_share": pf, "flops_share": ff},
            {"kind": "total", "params_share": p, "flops_share": fl}] + [
            {"kind": "features", "params_share": feat, "flops_share": ""}]


def predicted_comm_s(row, bandwidth):
    """Alpha-beta communication seconds per step of one compare.csv row, at
    `bandwidth` bytes/s and LATENCY_S per message (ring algorithms)."""
    n = int(row["n"])

    def ring_allreduce_s(floats):
        return 2 * (n - 1) * (LATENCY_S + 4 * floats / (n * bandwidth)) if floats else 0.0

    def ring_all_gather_s(floats):
        return (n - 1) * (LATENCY_S + 4 * floats / (n * bandwidth)) if floats else 0.0

    gradient_s = ring_allreduce_s(int(row["dp_floats"]))
    if row["scheme"] == "dp":
        return gradient_s
    features = int(row["gather_floats"])  # b·F, the batch's features
    if row["scheme"] == "fc_replicated":
        return gradient_s + ring_all_gather_s(features)
    # tp_floats = f's all-reduce of the features' gradient (b·F) + g's of the logits (b·C).
    logits = int(row["tp_floats"]) - features
    return (gradient_s + ring_all_gather_s(features) + ring_allreduce_s(features) +
            ring_allreduce_s(logits))


def network_off_step_s(compare_rows):
    """(scheme, n) -> the step seconds measured with the network off."""
    return {(r["scheme"], r["n"]): float(r["step_s"]) for r in compare_rows if r["net"] == "off"}


def predicted_step_s(row, off_step_s):
    """The predicted step of a compare.csv row on an emulated network: its
    scheme's step measured with the network off (off_step_s) plus the
    alpha-beta communication time."""
    return (off_step_s[(row["scheme"], row["n"])] +
            predicted_comm_s(row, NET_BYTES_PER_S[row["net"]]))


def regenerate(folder, results=None):
    """tables.md from the committed CSVs (psar_exp check); no figure drawn."""
    return {"tables.md": tables(folder, draw=False)}


def report(args):
    write_text(os.path.join(args.out, "tables.md"), tables(args.out, draw=True))


def tables(results_dir, draw):
    """tables.md's text from the CSVs in results_dir; with `draw`, the PNGs too."""
    parts = ["# Hybrid CNN: tables\n",
             "Written by `experiments/hybrid_cnn.py report` from the CSVs of this folder.\n"]
    acc_path = os.path.join(results_dir, "accuracy.csv")
    accuracy_rows = read_csv(acc_path) if os.path.exists(acc_path) else None
    if accuracy_rows:
        rows = []
        for run in sorted({r["run"] for r in accuracy_rows}):
            rs = [r for r in accuracy_rows if r["run"] == run]
            first90 = next((r for r in rs if float(r["test_accuracy"]) >= 0.90), None)
            best = max(float(r["test_accuracy"]) for r in rs)
            rows.append([run, f"{float(rs[-1]['test_accuracy']):.4f}", f"{best:.4f}",
                         "yes" if best >= 0.91 else "no",
                         f"{float(first90['train_s']):.0f} s (step {first90['step']})"
                         if first90 else "not reached",
                         f"{float(rs[-1]['train_s']):.0f} s"])
        parts += ["\n## Accuracy (accuracy.csv, accuracy.png)\n\n",
                  md_table(["run", "final test acc.", "best", ">= 91 %", "train time to 90 %",
                            "train time"], rows)]
    cmp_path = os.path.join(results_dir, "compare.csv")
    compare_rows = read_csv(cmp_path) if os.path.exists(cmp_path) else None
    if compare_rows:
        off_step_s = network_off_step_s(compare_rows)
        rows = []
        for r in compare_rows:
            pred = ""
            if r["net"] in NET_BYTES_PER_S and (r["scheme"], r["n"]) in off_step_s:
                pred = f"{1e3 * predicted_step_s(r, off_step_s):.1f}"
            rows.append([r["scheme"], r["n"], r["net"], r["dp_floats"], r["gather_floats"],
                         r["tp_floats"], f"{float(r['dp_bytes']) / 1e6:.3f}",
                         f"{float(r['tp_bytes']) / 1e6:.3f}", f"{1e3 * float(r['step_s']):.1f}",
                         pred])
        parts += ["\n## Plain DP vs hybrid (compare.csv)\n\n"
                  "Per step and rank. Floats: what each axis hands its collectives (dp: the "
                  "gradient all-reduce; gather: the features all-gathered; tp: f's and g's "
                  "all-reduces). MB: bytes this rank sent. Predicted: the step time with the "
                  "network off plus the alpha-beta communication time (see the script's "
                  "docstring).\n\n",
                  md_table(["scheme", "n", "net", "dp floats", "gather floats", "tp floats",
                            "dp MB", "tp MB", "step ms", "predicted ms"], rows)]
    cross_path = os.path.join(results_dir, "crossover.csv")
    crossover_rows = read_csv(cross_path) if os.path.exists(cross_path) else None
    if crossover_rows:
        def at(column):
            b = crossing_batch(crossover_rows, column)
            return "no crossing in the swept range" if b is None else f"batch {b:.0f}"
        rows = [[r["scheme"], r["n"], r["batch"], f"{float(r['dp_bytes']) / 1e6:.3f}",
                 f"{float(r['tp_bytes']) / 1e6:.3f}", f"{1e3 * float(r['comm_s']):.1f}",
                 f"{1e3 * float(r['predicted_comm_s']):.1f}", f"{1e3 * float(r['step_s']):.1f}"]
                for r in crossover_rows]
        parts += [f"\n## Crossover over the batch size (crossover.csv, crossover.png)\n\n"
                  f"n = {crossover_rows[0]['n']}, network emulated at {CROSSOVER_NET[0]} "
                  f"(latency {LATENCY_S * 1e6:.0f} us). Communication ms: the seconds inside the "
                  "collectives per step and rank, measured (tp_s + dp_s of axes.csv) and "
                  "predicted by the alpha-beta model from the floats each axis hands its "
                  "collectives.\n\n",
                  md_table(["scheme", "n", "batch", "dp MB", "tp MB", "comm ms",
                            "predicted comm ms", "step ms"], rows),
                  "\nHybrid's communication equals plain DP's at: predicted "
                  f"{at('predicted_comm_s')}; measured {at('comm_s')} (communication), "
                  f"{at('step_s')} (whole step).\n"]
    split_path = os.path.join(results_dir, "split.csv")
    if os.path.exists(split_path):
        split_rows = read_csv(split_path)
        parts += ["\n## Parameters and FLOPs per layer kind (split.csv)\n\n",
                  md_table(["kind", "parameters (share %, or total)",
                            "forward FLOPs (share %, or MFLOP per sample)"],
                           [[r["kind"], r["params_share"], r["flops_share"]] for r in split_rows])]
    if draw:
        draw_figures(results_dir, accuracy_rows, compare_rows)
        if crossover_rows:
            draw_crossover(results_dir, crossover_rows)
    return "".join(p if p.endswith("\n") else p + "\n" for p in parts)


def draw_figures(results_dir, accuracy_rows, compare_rows):
    """accuracy.png, step_time.png and bytes.png from the CSVs' rows."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    if accuracy_rows:
        fig, ax = plt.subplots(figsize=(6, 4))
        for run in sorted({r["run"] for r in accuracy_rows}):
            rs = [r for r in accuracy_rows if r["run"] == run]
            ax.plot([float(r["epoch"]) for r in rs], [float(r["test_accuracy"]) for r in rs],
                    marker="o", label=run)
        ax.axhline(0.91, color="gray", ls="--", lw=0.8, label="91 % target")
        ax.set_xlabel("epoch")
        ax.set_ylabel("test accuracy")
        ax.set_ylim(0.8, 0.95)
        ax.legend()
        ax.set_title("Fashion-MNIST CNN: serial vs hybrid on 4 ranks")
        fig.tight_layout()
        fig.savefig(os.path.join(results_dir, "accuracy.png"), dpi=120)
    if not compare_rows:
        return
    off_step_s = network_off_step_s(compare_rows)
    fig, axs = plt.subplots(1, 3, figsize=(13, 4), sharey=False)
    for ax, (net, _, _) in zip(axs, NETS):
        for scheme, color in zip(SCHEMES, ["C0", "C1", "C2"]):
            rs = [r for r in compare_rows if r["net"] == net and r["scheme"] == scheme]
            ns = [int(r["n"]) for r in rs]
            ax.plot(ns, [1e3 * float(r["step_s"]) for r in rs], marker="o", color=color,
                    label=f"{scheme} measured")
            if net in NET_BYTES_PER_S:
                ax.plot(ns, [1e3 * predicted_step_s(r, off_step_s) for r in rs], ls="--",
                        color=color, label=f"{scheme} alpha-beta")
        ax.set_title(f"network {net}")
        ax.set_xlabel("ranks n")
        ax.set_ylabel("step time (ms)")
        ax.set_xticks(RANKS)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(results_dir, "step_time.png"), dpi=120)
    fig, ax = plt.subplots(figsize=(6, 4))
    labels, dp, tp = [], [], []
    for r in compare_rows:
        if r["net"] != "off":
            continue
        labels.append(f"{r['scheme']}\nn={r['n']}")
        dp.append(float(r["dp_bytes"]) / 1e6)
        tp.append(float(r["tp_bytes"]) / 1e6)
    ax.bar(labels, dp, label="dp (gradient all-reduce)")
    ax.bar(labels, tp, bottom=dp, label="tp (features all-gather, f, g)")
    ax.set_ylabel("MB sent per step and rank")
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(results_dir, "bytes.png"), dpi=120)


def draw_crossover(results_dir, crossover_rows):
    """crossover.png: communication seconds per step against the batch size,
    measured and predicted, both schemes."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 4))
    for scheme, color in [("dp", "C0"), ("hybrid", "C1")]:
        rs = [r for r in crossover_rows if r["scheme"] == scheme]
        bs = [int(r["batch"]) for r in rs]
        ax.plot(bs, [1e3 * float(r["comm_s"]) for r in rs], marker="o", color=color,
                label=f"{scheme} measured")
        ax.plot(bs, [1e3 * float(r["predicted_comm_s"]) for r in rs], ls="--", color=color,
                label=f"{scheme} alpha-beta")
    ax.set_xscale("log", base=2)
    ax.set_xticks(CROSSOVER_BATCHES, [str(b) for b in CROSSOVER_BATCHES])
    ax.set_xlabel("global batch size")
    ax.set_ylabel("communication ms per step and rank")
    ax.set_title(f"plain DP vs hybrid, n = {crossover_rows[0]['n']}, {CROSSOVER_NET[0]} emulated")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(results_dir, "crossover.png"), dpi=120)


def launcher():
    launch = runner.Launcher(
        __doc__, lambda args: "hybrid_cnn_crossover" if args.part == "crossover" else "hybrid_cnn",
        runs={"accuracy": accuracy, "compare": compare, "crossover": crossover},
        reports={"report": report},
        out_help="default: runs/hybrid_cnn (crossover: runs/hybrid_cnn_crossover), or the same "
                 "under results/ with --reference")
    launch.parser.add_argument("--steps", type=int, default=12)
    return launch


if __name__ == "__main__":
    runner.main_guard("hybrid_cnn.py", launcher().main)
