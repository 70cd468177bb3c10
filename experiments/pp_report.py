#!/usr/bin/python3
"""Tables and plots of the measured pipeline runs: the
executor's bubble beside the closed forms (p-1)/m and (p-1)/(v*m) and the
simulator, vs m, vs p, vs v, for every schedule; peak activations per stage,
measured beside the prediction; throughput per schedule; the real MLP; and
timeline pictures of traced runs. Reads the run directories that
experiments/run.py wrote for experiments/pp_*.yaml (each run's pipeline.csv
and summary.csv) and writes results/pp_measured/.

    experiments/pp_report.py [--results results] [--out results/pp_measured]
"""

import argparse
import os
import re
import sys
from collections import defaultdict

import matplotlib
import yaml

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from psar_exp import runner  # noqa: E402
from psar_exp.io import md_table as table  # noqa: E402
from psar_exp.io import read_csv, write_text  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
NUMERIC = ["p", "m", "v", "layers", "compute_s", "idle_s", "makespan_s", "bubble", "idle_share",
           "bubble_sim", "idle_share_sim", "bubble_formula", "peak_activations",
           "peak_activations_sim", "peak_bytes", "peak_bytes_sim", "recv_wait_s", "send_s",
           "hop_latency_s", "bubble_sim_hop", "steps"]
TOLERANCE = 0.10  # the target: "within 10% of the formula"


def load(results, experiment):
    """One record per run of an experiment: the pipeline row averaged over replicas."""
    root = os.path.join(results, experiment)
    runs = []
    if not os.path.isdir(root):
        return runs
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name, "pipeline.csv")
        if not os.path.exists(path):
            continue
        rows = read_csv(path)
        whole = [r for r in rows if r["stage"] == "all"]
        run = {"run": name, "schedule": whole[0]["schedule"], "replicas": len(whole)}
        for k in NUMERIC:
            run[k] = sum(float(r[k]) for r in whole) / len(whole)
        for k in ("p", "m", "v"):
            run[k] = int(run[k])
        run["stages"] = [r for r in rows if r["stage"] != "all" and r["dp"] == "0"]
        summary = read_csv(os.path.join(root, name, "summary.csv"))[0]
        run["samples_per_s"] = float(summary["samples_per_s"])
        run["steps"], run["wall_s"] = summary["steps"], float(summary["wall_s"])
        with open(os.path.join(root, name, "config.yaml")) as f:
            run["batch"] = str(yaml.safe_load(f)["train"]["batch_size"])
        run["test_accuracy"] = float(summary["test_accuracy"])
        run["error"] = run["bubble"] / run["bubble_formula"] - 1 if run["bubble_formula"] else 0
        pressure = os.path.join(root, name, "cpu_pressure.txt")
        run["cpu_pressure"] = open(pressure).read().strip() if os.path.exists(pressure) else "-"
        runs.append(run)
    return runs


def label(run):
    return run["schedule"] + (f" v={run['v']}" if run["schedule"] == "interleaved" else "")


def bubble_rows(runs, first=label, extra=lambda r: []):
    rows = []
    for r in sorted(runs, key=lambda r: (first(r), r["p"], r["m"])):
        ok = abs(r["error"]) <= TOLERANCE if r["m"] >= r["p"] else None
        rows.append([first(r), r["p"], r["m"], f"{r['bubble']:.4f}", f"{r['bubble_formula']:.4f}",
                     f"{100 * r['error']:+.1f}%", f"{r['bubble_sim']:.4f}", f"{r['bubble_sim_hop']:.4f}",
                     f"{1e6 * r['hop_latency_s']:.0f}", f"{r['idle_share']:.4f}",
                     {True: "yes", False: "NO", None: "-"}[ok], r["cpu_pressure"]] + extra(r))
    return rows


BUBBLE_HEADER = ["schedule", "p", "m", "measured bubble", "closed form", "measured vs formula",
                 "simulated (measured costs)", "simulated (+ hop latency)", "hop latency (µs)",
                 "measured idle share", "within 10%", "CPU pressure (%)"]


def plot_lines(runs, x, path, title, group=label):
    fig, ax = plt.subplots(figsize=(7, 4.5))
    by = defaultdict(list)
    for r in runs:
        by[group(r)].append(r)
    for i, (name, rs) in enumerate(sorted(by.items())):
        rs.sort(key=lambda r: r[x])
        color = f"C{i}"
        ax.plot([r[x] for r in rs], [r["bubble"] for r in rs], "o-", color=color, label=f"{name} measured")
        ax.plot([r[x] for r in rs], [r["bubble_formula"] for r in rs], "--", color=color, alpha=0.7,
                label=f"{name} closed form")
    ax.set(xlabel=x, ylabel="bubble = idle / compute", title=title)
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted({r[x] for r in runs}), [str(v) for v in sorted({r[x] for r in runs})])
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def memory(runs, out, draw=True):
    """Peak activations per stage at p = 4, m = 8, measured beside predicted
    (memory.png too when `draw`)."""
    picked = [r for r in runs if r["p"] == 4 and r["m"] == 8]
    rows = []
    fig, ax = plt.subplots(figsize=(8, 4.5)) if draw else (None, None)
    width = 0.8 / max(1, len(picked))
    for i, r in enumerate(sorted(picked, key=label)):
        stages = sorted(r["stages"], key=lambda s: int(s["stage"]))
        xs = [int(s["stage"]) + (i - len(picked) / 2 + 0.5) * width for s in stages]
        if draw:
            ax.bar(xs, [float(s["peak_activations"]) for s in stages], width, color=f"C{i}",
                   label=label(r))
            ax.plot(xs, [float(s["peak_activations_sim"]) for s in stages], "k_", markersize=12)
        for s in stages:
            rows.append([label(r), s["stage"], int(float(s["peak_activations"])),
                         int(float(s["peak_activations_sim"])), int(float(s["peak_bytes"])),
                         int(float(s["peak_bytes_sim"])),
                         "yes" if s["peak_activations"] == s["peak_activations_sim"]
                         and s["peak_bytes"] == s["peak_bytes_sim"] else "NO"])
    result = table(["schedule", "stage", "peak activations", "predicted", "peak bytes",
                    "predicted bytes", "equal"], rows)
    if not draw:
        return result
    ax.set(xlabel="stage", ylabel="peak in-flight activations (chunks)",
           title="peak activations per stage, p = 4, m = 8 (bars measured, — predicted)")
    ax.set_xticks(range(4))
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "memory.png"), dpi=120)
    plt.close(fig)
    return result


def throughput(runs, out, draw=True):
    rows, by_m = [], defaultdict(dict)
    for r in runs:
        if r["p"] == 4:
            by_m[r["m"]][label(r)] = r["samples_per_s"]
    names = sorted({n for d in by_m.values() for n in d})
    for m in sorted(by_m):
        rows.append([m] + [f"{by_m[m][n]:.0f}" if n in by_m[m] else "-" for n in names])
    result = table(["m"] + [f"{n} (samples/s)" for n in names], rows)
    if not draw:
        return result
    fig, ax = plt.subplots(figsize=(7, 4.5))
    width = 0.8 / max(1, len(names))
    ms = sorted(by_m)
    for i, n in enumerate(names):
        ax.bar([j + (i - len(names) / 2 + 0.5) * width for j in range(len(ms))],
               [by_m[m].get(n, 0) for m in ms], width, label=n)
    ax.set_xticks(range(len(ms)), [str(m) for m in ms])
    ax.set(xlabel="micro-batches m", ylabel="samples / s", title="throughput per schedule, p = 4")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "throughput.png"), dpi=120)
    plt.close(fig)
    return result


def zero_bubble_gap(runs):
    """ZB-H1 below 1F1B by at least half the gap the simulator predicts?"""
    index = {(r["schedule"], r["v"], r["p"], r["m"]): r for r in runs}
    rows = []
    for (kind, v, p, m), zb in sorted(index.items()):
        ref = index.get(("1f1b", 1, p, m))
        if kind != "zb_h1" or not ref:
            continue
        measured = ref["bubble"] - zb["bubble"]
        predicted = ref["bubble_sim"] - zb["bubble_sim"]
        rows.append([p, m, f"{ref['bubble']:.4f}", f"{zb['bubble']:.4f}", f"{measured:.4f}",
                     f"{predicted:.4f}", "yes" if measured >= predicted / 2 else "NO"])
    return table(["p", "m", "1F1B measured", "ZB-H1 measured", "measured gap",
                  "simulated gap (measured costs)", "gap ≥ half the simulated"], rows)


def timelines(results, out, draw=True):
    """The timeline PNGs of results/pp_timeline's traces (drawn when `draw`)."""
    root = os.path.join(results, "pp_timeline")
    drawn = []
    if not os.path.isdir(root):
        return drawn
    for name in sorted(os.listdir(root)):
        trace = os.path.join(root, name, "trace.json")
        if os.path.exists(trace):
            png = os.path.join(out, f"timeline_{name}.png")
            if draw:
                runner.run([sys.executable, os.path.join(HERE, "plot.py"), "--timeline", trace,
                            "--out", png], echo=False)
            drawn.append(os.path.basename(png))
    return drawn


def gpt_note(gpt):
    """Why the GPT's measured bubble is not (p−1)/m, every figure from the runs."""
    def span(xs, f):
        return f"{f(min(xs))}–{f(max(xs))}"

    p2 = [r for r in gpt if r["p"] == 2]
    p4 = [r for r in gpt if r["p"] == 4]
    pressure = lambda rs: [float(r["cpu_pressure"]) for r in rs if r["cpu_pressure"] != "-"]  # noqa: E731

    def first_over_last(r):
        st = sorted(r["stages"], key=lambda s: int(s["stage"]))
        return float(st[0]["compute_s"]) / float(st[-1]["compute_s"])
    ratio = [first_over_last(r) for r in p2]
    lines = ["Why the measured bubble is not (p−1)/m here. The closed form assumes p stages of "
             "equal cost and free transfers; Σ idle / Σ compute then grows whenever the stages "
             "differ, because the others wait for the slowest in every steady-state round."]
    if p2:
        lines.append(
            f"With p = 2 (a core per rank; CPU pressure {span(pressure(p2), '{:.1f}'.format)} %) the "
            "\"simulated (measured costs)\" column, which replays the schedule with every "
            "action's measured duration, differs from the measured bubble by "
            f"{span([abs(r['bubble'] - r['bubble_sim']) for r in p2], '{:.3f}'.format)}; stage "
            f"0's compute is {span(ratio, '{:.2f}'.format)}× the last stage's across the p = 2 runs "
            f"({sum(x > 1 for x in ratio)} of {len(ratio)} slower), although by FLOPs the last "
            "stage is the heavier one (LN_f and the tied head). At m = 16 the micro-batches are "
            "2 sequences, so a few-percent inequality between the stages is large against "
            "(p−1)/m = 0.0625.")
    if p4:
        lines.append(
            f"With p = 4, four ranks share the two cores (CPU pressure "
            f"{span(pressure(p4), '{:.0f}'.format)} %): a rank that is runnable waits for a core, "
            f"which shows as hop latency ({span([1e3 * r['hop_latency_s'] for r in p4], '{:.1f}'.format)}"
            " ms) and as idle time; the measured bubble there measures CPU contention more than "
            "the schedule (as for the MLP).")
    lines.append("ZB-H1's formula further assumes the weight gradients fill the bubbles exactly.")
    return " ".join(lines) + "\n"




def report(results, out, draw=True):
    """README.md of pp_measured from the runs under `results`; the PNGs too
    when `draw`."""
    vs_m = load(results, "pp_bubble_m") + [
        r for r in load(results, "pp_interleaved_m") if r["v"] > 1]
    vs_v = load(results, "pp_interleaved_m")
    vs_p = load(results, "pp_bubble_p") + load(results, "pp_interleaved_p")
    act = load(results, "pp_activation")
    mlp = load(results, "pp_mlp") + load(results, "pp_mlp_p4")
    gpt = load(results, "pp_gpt") + load(results, "pp_gpt_p4")
    if not (vs_m or vs_p or vs_v):
        raise FileNotFoundError(f"no pipeline runs under {results}/pp_* (run "
                                "experiments/run.py experiments/pp_bubble_m.yaml first)")

    doc = ["# Pipeline bubbles and memory, measured\n",
           "Written by `experiments/pp_report.py` from the runs of `experiments/pp_*.yaml` "
           "(commands in docs/pipeline.md). Bubble = Σ idle / Σ compute over the stages, idle = "
           "makespan of the batch's pipeline phase − the stage's compute, from the executor's own "
           "timers, mean over the steps after the first; closed form: (p−1)/m, (p−1)/(v·m), and "
           "ZB-H1's (p−1)(t_f+t_b−min)/(m(t_f+t_b+t_w)) at the measured costs. The simulated "
           "columns replay each schedule with every action's measured mean duration, with free "
           "transfers and with each transfer delayed by the measured median hop latency. CPU "
           "pressure: the share of the run's time that runnable tasks on the machine waited for a "
           "core (/proc/pressure/cpu, recorded by experiments/pp_measure.py): the ranks' own "
           "10 µs polls while they wait and their compute on the real models count, and so do "
           "other jobs on the 2 cores. Target: on the synthetic workload, measured "
           f"within {100 * TOLERANCE:.0f}% of the closed form for every schedule and m ≥ p.\n"]
    for title, runs, x, png in (("vs m (p = 4)", vs_m, "m", "bubble_vs_m.png"),
                                ("vs p (m = 16, 8 ranks, d = 8/p)", vs_p, "p", "bubble_vs_p.png")):
        if runs:
            if draw:
                plot_lines(runs, x, os.path.join(out, png), f"pipeline bubble {title}")
            doc += [f"## Bubble {title}\n", f"![]({png})\n", table(BUBBLE_HEADER, bubble_rows(runs))]
    if vs_v:
        if draw:
            plot_lines(vs_v, "v", os.path.join(out, "bubble_vs_v.png"),
                       "interleaved 1F1B: bubble vs v (p = 4)", group=lambda r: f"m={r['m']}")
        doc += ["## Bubble vs v (interleaved, p = 4)\n", "![](bubble_vs_v.png)\n",
                table(BUBBLE_HEADER, bubble_rows(vs_v))]
    doc += ["## ZB-H1 against 1F1B\n", zero_bubble_gap(vs_m + vs_p)]
    if act:
        size = lambda r: re.search(r"activation_bytes-([^_]+)", r["run"]).group(1)  # noqa: E731
        doc += ["## Activation size (1F1B, p = 4, m = 16)\n",
                table(["activation bytes"] + BUBBLE_HEADER[1:],
                      bubble_rows(sorted(act, key=lambda r: r["peak_bytes"]), first=size))]
    doc += ["## Peak activations per stage (p = 4, m = 8)\n", "![](memory.png)\n", memory(vs_m, out, draw)]
    doc += ["## Throughput per schedule (p = 4)\n", "![](throughput.png)\n", throughput(vs_m, out, draw)]
    if mlp:
        doc += ["## The real model: MLP, 8 layers of 1024, Fashion-MNIST (p = 2 on 2 ranks, "
                "p = 4 on 4 ranks, 2 cores)\n",
                table(BUBBLE_HEADER + ["samples/s", "test accuracy"],
                      bubble_rows(mlp, extra=lambda r: [f"{r['samples_per_s']:.0f}",
                                                        f"{r['test_accuracy']:.3f}"]))]
    if gpt:
        per_stage = lambda r: " / ".join(  # noqa: E731
            f"{1e3 * float(st['compute_s']):.0f}" for st in sorted(r["stages"], key=lambda st: int(st["stage"])))
        doc += ["## The real model: GPT, 8 blocks of d_model 128, fortunes (p = 2 on 2 ranks, "
                "p = 4 on 4 ranks, 2 cores)\n",
                "Stage 0 also embeds (wte, wpe); the last stage also runs LN_f, the head tied to "
                "wte (its own copy; the two gradients are summed between the first and the last "
                "stage before the step, inside the sync span, outside the measured makespan) and "
                "the softmax cross-entropy. Compute per stage: mean seconds of one batch's "
                "actions on each stage, first to last. Measured by the commands in "
                "results/pp_gpt/README.md and results/pp_gpt_p4/README.md ("
                f"{'/'.join(sorted({r['steps'] for r in gpt}))} steps of a "
                f"{'/'.join(sorted({r['batch'] for r in gpt}))}-sequence batch per point, "
                f"{min(r['wall_s'] for r in gpt):.0f}–{max(r['wall_s'] for r in gpt):.0f} s "
                "each).\n",
                table(BUBBLE_HEADER + ["compute per stage (ms)", "samples/s", "test accuracy"],
                      bubble_rows(gpt, extra=lambda r: [per_stage(r), f"{r['samples_per_s']:.0f}",
                                                        f"{r['test_accuracy']:.3f}"])),
                gpt_note(gpt)]
    drawn = timelines(results, out, draw)
    if drawn:
        doc += ["## Timelines (p = 4, m = 8)\n"] + [f"![]({png})\n" for png in drawn]
    doc += [runner.PROVENANCE_BEGIN, "## Produced by\n",
            "Command: `experiments/pp_report.py`, from the committed runs of results/pp_* alone (no "
            "psar binary); "
            "the command, commit and machine state of each run are in that folder's README.md.",
            runner.PROVENANCE_END, ""]
    return "\n".join(doc)


def regenerate(folder, results):
    return {"README.md": report(results, folder, draw=False)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", default=os.path.join(os.path.dirname(HERE), "results"))
    ap.add_argument("--out", help="default: RESULTS/pp_measured")
    args = ap.parse_args()
    out = args.out or os.path.join(args.results, "pp_measured")
    os.makedirs(out, exist_ok=True)
    try:
        text = report(args.results, out)
    except FileNotFoundError as e:
        sys.exit(f"pp_report.py: {e}")
    write_text(os.path.join(out, "README.md"), text)
    print(f"pp_report.py: -> {out}/README.md")


if __name__ == "__main__":
    main()
