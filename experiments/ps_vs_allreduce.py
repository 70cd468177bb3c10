#!/usr/bin/python3
"""Runs experiments/ps_vs_allreduce.yaml: the parameter server against the
allreduce algorithms as the number of workers N grows, and SSP/ASP against
BSP. Every point is one `psar train` under mpirun.

    experiments/ps_vs_allreduce.py [EXPERIMENT.yaml] [--results DIR] [--quick] [--dry-run]
                                   [--set KEY=VALUE ...] [--networks A,B] [--name NAME]

Writes into results/<experiment.name>/:
  <point>/          the run directory of every point (steps.csv, summary.csv, ...)
  scaling.csv/.md   per network, method and N: median time per step (the slowest
                    rank's), median sync time, bytes through the busiest endpoint per
                    step measured and by formula
  scaling.png       time per step and busiest-endpoint bytes vs N
  consistency.csv/.md/.png   loss vs step and vs time for bsp, ssp, asp

Busiest endpoint: for the PS, the busiest server shard — payload bytes in + out,
from the line each shard logs when it is done (PSAR_LOG=info); for an
allreduce, the rank with the most bytes sent + received (steps.csv). Formulas
per step, n = 4·M bytes: PS shard 2·N·n/S (psar_exp.costs); an allreduce
twice the busiest rank's bytes sent of `psar cost` (each of these schedules
receives on that rank what it sends there, exactly so when the vector divides
into N chunks). `mpi` is invisible to psar's counters.
--quick runs N = 1, 2 and fewer steps (a smoke test of the script).
"""

import os
import re
import shutil
import statistics
from collections import defaultdict

from psar_exp import ROOT, costs, report, runner
from psar_exp.io import csv_text, read_csv, write_csv, write_text
from psar_exp.units import parse_bandwidth, parse_bytes, parse_seconds

SHARD_LINE = re.compile(r"shard (\d+) served: payload_bytes_in=(\d+) payload_bytes_out=(\d+)")


def run_point(binary, exp_path, out, ranks, sets, dry_run):
    cmd = runner.train_command(binary or "psar", exp_path, out, runner.Point(out, ranks, sets))
    print(f"  {' '.join(cmd)}", flush=True)
    if dry_run:
        return None
    if os.path.isdir(out):
        shutil.rmtree(out)
    env = dict(os.environ, PSAR_LOG="info", PSAR_LOG_SUBSYS="ps")
    p = runner.launch(cmd, env=env, echo=False)
    if p.returncode != 0:
        raise runner.RunError(f"point {out} failed (exit code {p.returncode}):\n"
                              f"{p.stdout[-4000:]}{p.stderr[-4000:]}")
    with open(os.path.join(out, "psar.log"), "w") as f:
        f.write(p.stderr)
    return p.stderr


def step_stats(run_dir, skip=3):
    """Median over steps (after `skip` warm-up steps) of the slowest rank's step and sync time,
    and of the busiest rank's bytes sent + received."""
    by_step = defaultdict(list)
    for r in read_csv(os.path.join(run_dir, "steps.csv")):
        by_step[int(r["step"])].append(r)
    steps = sorted(by_step)[skip:] or sorted(by_step)
    step_s = statistics.median(max(float(r["step_s"]) for r in by_step[s]) for s in steps)
    sync_s = statistics.median(max(float(r["sync_s"]) for r in by_step[s]) for s in steps)
    # The rank that reaches the sync last waits for nobody: its sync time is
    # the collective itself, the figure to set beside the alpha-beta model.
    sync_last_s = statistics.median(min(float(r["sync_s"]) for r in by_step[s]) for s in steps)
    rank_bytes = statistics.median(
        max(int(r["bytes_sent"]) + int(r["bytes_recv"]) for r in by_step[s]) for s in steps)
    return step_s, sync_s, sync_last_s, rank_bytes, len(by_step)


def formula(method, n_workers, servers, n_bytes, table):
    """Bytes in + out of the busiest endpoint per step, or None."""
    if method == "ps":
        return costs.ps_shard_bytes(n_workers, servers, n_bytes)
    sent = table.sent_busiest(method, n_workers, n_bytes)
    return None if sent is None else 2 * sent


def network(spec, exp):
    """'1Gbit' (latency from the experiment's net.latency) or '10Gbit@5us' or 'off':
    (label, --set arguments)."""
    spec = str(spec)
    if spec == "off":
        return "off", []
    bandwidth, _, latency = spec.partition("@")
    latency = latency or str(exp.get("net", {}).get("latency", "0us"))
    return f"{bandwidth}@{latency}", [f"net.bandwidth={bandwidth}", f"net.latency={latency}"]


def predicted_sync(net, method, N, S, n_bytes, exp, table):
    """The alpha-beta time of one synchronization of n_bytes (experiments/net_scaling.py)."""
    if net == "off" or method == "mpi" or (N == 1 and method != "ps"):
        return None
    bandwidth, _, latency = net.partition("@")
    B, alpha = parse_bandwidth(bandwidth), parse_seconds(latency)
    if method == "ps":
        chunk = parse_bytes(exp.get("ps", {}).get("chunk_bytes", "1M"))  # schema default 1M
        return costs.ps_time(N, S, n_bytes, B, alpha, chunk)
    return table.time(method, N, n_bytes, alpha, 1 / B)


def param_count(run_dir):
    # Every worker pushes M floats per step: bytes_sent of a PS worker / 4.
    rows = read_csv(os.path.join(run_dir, "steps.csv"))
    return int(rows[-1]["bytes_sent"]) // 4


def scaling(exp, exp_path, out_root, binary, quick, dry_run, extra_sets=(), networks=None):
    sweep = exp["experiment"]["sweep"]
    workers = [1, 2] if quick else sweep["workers"]
    rows = []
    for net_spec in networks or sweep["networks"]:
        net, net_sets = network(net_spec, exp)
        methods = [("ps", s) for s in sweep["ps_servers"]]
        methods += [(a, 0) for a in sweep["allreduce"] if not (a == "mpi" and net_sets)]
        for N in workers:
            # One worker communicates with nobody: one allreduce row is enough.
            points = [m for m in methods if N > 1 or m[0] == "ps" or m == methods[len(sweep["ps_servers"])]]
            for method, S in points:
                name = f"{method}{S if S else ''}_n{N}_net-{net.replace('@', '-')}"
                ranks = N + S
                sets = net_sets + [f"sync.backend={method}"] + list(extra_sets)
                if method == "ps":
                    sets.append(f"ps.servers={S}")
                if quick:
                    sets.append("train.steps=8")
                print(f"[scaling] {name}", flush=True)
                load = os.getloadavg()[0]  # host load when the point started: noise to expect
                log = run_point(binary, exp_path, os.path.join(out_root, name), ranks, sets, dry_run)
                if dry_run:
                    continue
                run_dir = os.path.join(out_root, name)
                step_s, sync_s, sync_last_s, rank_bytes, steps = step_stats(run_dir)
                busiest = rank_bytes
                if method == "ps":
                    shards = [(int(a), int(b)) for _, a, b in SHARD_LINE.findall(log)]
                    if len(shards) != S:
                        raise runner.RunError(f"{name}: expected {S} shard lines in the log")
                    busiest = max(a + b for a, b in shards) / steps
                    M = param_count(run_dir)
                rows.append({"network": net, "method": method, "servers": S or "",
                             "workers": N, "ranks": ranks, "step_ms": 1e3 * step_s,
                             "sync_ms": 1e3 * sync_s, "sync_last_ms": 1e3 * sync_last_s,
                             "busiest_bytes_per_step": int(busiest),
                             "load1": round(load, 2)})
    if dry_run:
        return
    n_bytes = 4 * M
    ar = exp.get("sync", {})
    table = costs.query(sorted({r["workers"] for r in rows}), [n_bytes],
                        algos=[a for a in sweep["allreduce"]],
                        segment_bytes=ar.get("segment_bytes", "512K"), psar=binary)
    for r in rows:
        f = formula(r["method"], r["workers"], r["servers"] or 1, n_bytes, table)
        r["formula_bytes_per_step"] = "" if f is None or r["method"] == "mpi" else int(f)
        p = predicted_sync(str(r["network"]), r["method"], r["workers"], r["servers"] or 1,
                           n_bytes, exp, table)
        r["predicted_sync_ms"] = "" if p is None else round(1e3 * p, 3)
    write_table(rows, out_root, "scaling", M)
    plot_scaling(rows, os.path.join(out_root, "scaling.png"), M)


def scaling_md(rows, M):
    """scaling.md of the rows of scaling.csv."""
    lines = [f"# PS vs allreduce: time per step and busiest endpoint (M = {M} parameters, "
             f"{4 * M / 2**20:.2f} MiB)", "",
             "Median over steps of the slowest rank; busiest endpoint = payload bytes in + out "
             "per step (PS: the busiest server shard; allreduce: the busiest rank). Sync: "
             "the slowest rank's (it includes waiting for the others' compute); last in: "
             "the sync time of the rank that arrived last, which waits for nobody — the "
             "collective itself, set beside the prediction.", "",
             "Load: the host's 1-minute load average when the point started (2 cores; other "
             "jobs share them, so points with a high load are noisy).", "",
             "Predicted sync: the alpha-beta time of one synchronization of the 4·M gradient "
             "bytes under the emulated network (experiments/net_scaling.py: docs/algorithms.md "
             "for the allreduce algorithms; for the PS the busiest NIC's bytes plus the last "
             "chunk's replies); none without emulation.", "",
             "| network | method | S | N | step (ms) | sync (ms) | sync, last in (ms) "
             "| predicted sync (ms) | busiest endpoint (MB/step) | formula (MB/step) | load |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        f = r["formula_bytes_per_step"]
        pred = "" if r.get("predicted_sync_ms", "") == "" else f"{float(r['predicted_sync_ms']):.1f}"
        lines.append(f"| {r['network']} | {r['method']} | {r['servers']} | {r['workers']} "
                     f"| {float(r['step_ms']):.1f} | {float(r['sync_ms']):.1f} | {float(r['sync_last_ms']):.1f} "
                     f"| {pred} "
                     f"| {int(r['busiest_bytes_per_step']) / 1e6:.2f} "
                     f"| {'' if f == '' else f'{int(f) / 1e6:.2f}'} | {r['load1']} |")
    return "\n".join(lines) + "\n"


def write_table(rows, out_root, stem, M):
    write_csv(os.path.join(out_root, stem + ".csv"), rows)
    write_text(os.path.join(out_root, stem + ".md"), scaling_md(rows, M))


def model_params(rows):
    """M: the parameter count, from the PS's busiest bytes at N = 1, S = 1 (2·4·M)."""
    return max(int(r["busiest_bytes_per_step"]) for r in rows if r["method"] == "ps"
               and int(r["workers"]) == 1 and str(r["servers"]) == "1") // 8


def readme_blocks(rows, curves):
    """The README's figures, from scaling.csv's rows and the consistency curves."""
    nets = list(dict.fromkeys(r["network"] for r in rows))
    first = nets[0]
    label = lambda r: f"ps, S = {r['servers']}" if r["method"] == "ps" else r["method"]  # noqa: E731
    get = {(r["network"], label(r), int(r["workers"])): r for r in rows}
    Ns = sorted({int(r["workers"]) for r in rows})
    methods = list(dict.fromkeys(label(r) for r in rows if r["network"] == first))
    ms = lambda x: f"{float(x):.1f}"  # noqa: E731

    def cell(net, m, n):
        r = get.get((net, m, n))
        if r is None or r["predicted_sync_ms"] == "":  # an allreduce over one rank moves nothing
            return ""
        return f"{ms(r['sync_last_ms'])} \\| {ms(r['predicted_sync_ms'])}"
    table = ["| method | " + " | ".join(f"N = {n}" for n in Ns) + " |", "|---" * (len(Ns) + 1) + "|"]
    table += [f"| {m} | " + " | ".join(cell(first, m, n) for n in Ns) + " |" for m in methods]

    def last(net, m, n):
        return float(get[(net, m, n)]["sync_last_ms"])

    def pred(net, m, n):
        return float(get[(net, m, n)]["predicted_sync_ms"])
    lo, hi = Ns[1], Ns[-1]
    servers = sorted({int(r["servers"]) for r in rows if r["method"] == "ps"})
    allreduce = [m for m in methods if not m.startswith("ps")]
    dev = lambda rs: max(abs(last(first, m, n) / pred(first, m, n) - 1) for m, n in rs)  # noqa: E731
    ar_points = [(m, n) for m in allreduce for n in Ns
                 if (first, m, n) in get and get[(first, m, n)]["predicted_sync_ms"] != ""]
    s1_points = [("ps, S = 1", n) for n in Ns]
    faster = "; ".join(
        f"S = {x} at N = " + ", ".join(str(n) for n in Ns
                                       if last(first, f"ps, S = {x}", n) < pred(first, f"ps, S = {x}", n))
        for x in servers if x > 1)
    equal = [r for r in rows if r["formula_bytes_per_step"] != ""]
    off_by = [abs(int(r["busiest_bytes_per_step"]) - int(r["formula_bytes_per_step"])) for r in equal]
    unequal = sorted({f"{label(r)} at N = {r['workers']}" for r in equal
                      if r["busiest_bytes_per_step"] != r["formula_bytes_per_step"]})
    step = lambda m: float(get[(first, m, hi)]["step_ms"])  # noqa: E731
    bullets = [
        f"- With one shard the last-in sync at {first} grows with N: " +
        " → ".join(f"{last(first, 'ps, S = 1', n):.0f}" for n in Ns) +
        f" ms (N = {', '.join(map(str, Ns))}), {last(first, 'ps, S = 1', hi) / last(first, 'ps, S = 1', lo):.1f}× "
        f"from N = {lo} to {hi}; the ring grows {last(first, 'ring', hi) / last(first, 'ring', lo):.1f}× "
        "over the same range.",
        f"- At N = {hi}, S = {', '.join(map(str, servers))}: " +
        ", ".join(f"{last(first, f'ps, S = {x}', hi):.0f}" for x in servers) + " ms; with S = "
        f"{servers[-1]} the PS is {last(first, f'ps, S = {servers[-1]}', hi) / last(first, 'ring', hi):.1f}× "
        f"the ring's sync at N = {hi}, at the cost of S extra server ranks.",
        f"- Measured ÷ predicted − 1: every allreduce point within {100 * dev(ar_points):.0f} %, "
        f"the PS with S = 1 within {100 * dev(s1_points):.0f} %; with S ≥ 2 the measurement is below "
        f"the prediction for {faster}.",
        f"- Step time (slowest rank) at {first}, N = {hi}: " +
        ", ".join(f"{m} {step(m):.0f} ms" for m in ("ps, S = 1", f"ps, S = {servers[-1]}", "ring", "naive")) + ".",
        f"- Busiest endpoint's bytes beside the formula, {len(equal)} points: "
        f"{sum(1 for x in off_by if x == 0)} equal, the others off by "
        f"{min(x for x in off_by if x)}–{max(off_by)} bytes ({'; '.join(unequal)}: the "
        f"{model_params(rows):,} floats do not split evenly there)." if any(off_by) else
        f"- Busiest endpoint's bytes equal the formula at all {len(equal)} points."]
    fast = []
    for net in nets[1:]:
        at = [r for r in rows if r["network"] == net]
        small = [r for r in at if int(r["workers"]) <= 4]
        big = [r for r in at if int(r["workers"]) == hi]
        preds = [float(r["predicted_sync_ms"]) for r in small if r["predicted_sync_ms"] != ""]
        by = {}
        for r in big:
            by.setdefault(r["method"], []).append(float(r["sync_last_ms"]))
        fast.append(f"- {net}: last-in sync {min(float(r['sync_last_ms']) for r in small):.1f}–"
                    f"{max(float(r['sync_last_ms']) for r in small):.1f} ms at N ≤ 4" +
                    (f" (predictions {min(preds):.1f}–{max(preds):.1f} ms)" if preds else "") +
                    f"; at N = {hi}: " + ", ".join(f"{m} {min(v):.1f}" + (f"–{max(v):.1f}" if len(v) > 1 else "")
                                                   for m, v in by.items()) + " ms.")
    steps = {m: len(c) / c[-1][2] for m, c in curves.items()}
    cons = ["| consistency | final loss (mean of the last 10 steps) | time for the steps | steps/s |",
            "|---|---|---|---|"]
    for m, c in curves.items():
        tail = statistics.mean(l for _, l, _ in c[-10:])
        cons.append(f"| {m} | {tail:.3f} | {c[-1][2]:.1f} s ({len(c)} steps) | {steps[m]:.1f} |")
    base = steps.get("bsp")
    if base:
        cons += ["", "Steps per second against BSP: " +
                 ", ".join(f"{m} {v / base:.2f}×" for m, v in steps.items() if m != "bsp") +
                 " (single runs; SSP and ASP are not deterministic)."]
    return {"README.md#onegbit": "\n".join(table) + "\n", "README.md#bullets": "\n".join(bullets) + "\n",
            "README.md#fast": "\n".join(fast) + "\n", "README.md#consistency": "\n".join(cons) + "\n"}


def regenerate(folder, results=None):
    exp = report.load(os.path.join(ROOT, "experiments", "ps_vs_allreduce.yaml"), "ps_vs_allreduce")
    c = exp["experiment"]["sweep"]["consistency"]
    net, _ = network(exp["experiment"]["sweep"]["networks"][0], exp)
    rows = read_csv(os.path.join(folder, "scaling.csv"))
    texts = {"scaling.md": scaling_md(rows, model_params(rows))}
    if os.path.exists(os.path.join(folder, "consistency.csv")):  # not a --only scaling run
        curves = consistency_curves(folder, c["workers"], c["servers"], c["models"])
        texts.update(**consistency_texts(curves, c["workers"], c["servers"], net),
                     **readme_blocks(rows, curves))
    return texts





def plot_scaling(rows, path, M):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    labels = sorted({f"ps S={r['servers']}" if r["method"] == "ps" else r["method"] for r in rows})
    color = {label: plt.cm.tab10(i % 10) for i, label in enumerate(labels)}
    nets = list(dict.fromkeys(str(r["network"]) for r in rows))  # in the experiment's order
    fig, axes = plt.subplots(len(nets), 2, figsize=(11, 4 * len(nets)), squeeze=False)
    for i, net in enumerate(nets):
        lines = defaultdict(list)
        for r in rows:
            if str(r["network"]) == net:
                label = f"ps S={r['servers']}" if r["method"] == "ps" else r["method"]
                lines[label].append(r)
        for label, rs in sorted(lines.items()):
            # An allreduce over one rank moves nothing: no point on a log axis.
            rs = sorted((r for r in rs if r["workers"] > 1 or label.startswith("ps")),
                        key=lambda r: r["workers"])
            xs = [r["workers"] for r in rs]
            style = "-o" if label.startswith("ps") else "--s"
            axes[i][0].plot(xs, [float(r["sync_last_ms"]) for r in rs], style, label=label,
                            color=color[label])
            pred = [(r["workers"], float(r["predicted_sync_ms"])) for r in rs
                    if r.get("predicted_sync_ms", "") != ""]
            if pred:
                axes[i][0].plot([x for x, _ in pred], [y for _, y in pred], ":", linewidth=1,
                                color=color[label])
            if label != "mpi":
                axes[i][1].plot(xs, [r["busiest_bytes_per_step"] / 1e6 for r in rs], style,
                                label=label, color=color[label])
        axes[i][0].set(title=f"sync per step, last rank in (network {net}; dotted: α-β)",
                       xlabel="workers N", ylabel="ms (median over steps; log)", yscale="log")
        axes[i][1].set(title=f"busiest endpoint (M = {M})", xlabel="workers N",
                       ylabel="MB in + out per step")
        for ax in axes[i]:
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def consistency_curves(out_root, N, S, models):
    """{model: [(step, mean loss over workers, cumulative slowest step time)]}
    of the consistency runs under out_root."""
    curves = {}
    for model in models:
        by_step = defaultdict(list)
        for r in read_csv(os.path.join(out_root, f"consistency_{model}_n{N}_s{S}", "steps.csv")):
            by_step[int(r["step"])].append(r)
        t, curve = 0.0, []
        for s in sorted(by_step):
            t += max(float(r["step_s"]) for r in by_step[s])
            curve.append((s, statistics.mean(float(r["loss"]) for r in by_step[s]), t))
        curves[model] = curve
    return curves


def consistency_texts(curves, N, S, net):
    """consistency.csv and consistency.md of consistency_curves()."""
    table = csv_text([{"consistency": model, "step": s, "loss": f"{loss:.6f}", "time_s": f"{t:.4f}"}
                      for model, curve in curves.items() for s, loss, t in curve])
    lines = [f"# SSP and ASP against BSP (N = {N} workers, S = {S} shard, network {net})", "",
             "Loss: mean over workers of each worker's batch loss (last 10 steps averaged); "
             "time: sum over steps of the slowest worker's step time.", "",
             "| consistency | steps | final loss | time (s) | steps/s |", "|---|---|---|---|---|"]
    for model, curve in curves.items():
        tail = statistics.mean(l for _, l, _ in curve[-10:])
        lines.append(f"| {model} | {len(curve)} | {tail:.4f} | {curve[-1][2]:.2f} "
                     f"| {len(curve) / curve[-1][2]:.1f} |")
    return {"consistency.csv": table, "consistency.md": "\n".join(lines) + "\n"}


def consistency(exp, exp_path, out_root, binary, quick, dry_run):
    c = exp["experiment"]["sweep"]["consistency"]
    N, S = (2, 1) if quick else (c["workers"], c["servers"])
    net, net_sets = network(exp["experiment"]["sweep"]["networks"][0], exp)
    for model in c["models"]:
        name = f"consistency_{model}_n{N}_s{S}"
        sets = net_sets + ["sync.backend=ps", f"ps.servers={S}", f"ps.consistency={model}",
                           f"train.steps={8 if quick else c['steps']}"]
        print(f"[consistency] {name}", flush=True)
        run_point(binary, exp_path, os.path.join(out_root, name), N + S, sets, dry_run)
    if dry_run:
        return
    curves = consistency_curves(out_root, N, S, c["models"])
    for name, text in consistency_texts(curves, N, S, net).items():
        write_text(os.path.join(out_root, name), text)
    print(open(os.path.join(out_root, "consistency.md")).read())
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for model, curve in curves.items():
        axes[0].plot([s for s, _, _ in curve], [l for _, l, _ in curve], label=model)
        axes[1].plot([t for _, _, t in curve], [l for _, l, _ in curve], label=model)
    axes[0].set(xlabel="step", ylabel="loss (mean over workers)", title="loss vs step")
    axes[1].set(xlabel="seconds (sum of the slowest worker's steps)", ylabel="loss",
                title="loss vs time")
    for ax in axes:
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out_root, "consistency.png"), dpi=110)


def folder(args):
    """--name or experiment.name, under --results when given."""
    name = args.name or runner.experiment(args, "ps_vs_allreduce")["experiment"]["name"]
    return runner.under_results(args, name)


def replot(args):
    """scaling.png again from scaling.csv."""
    rows = read_csv(os.path.join(args.out, "scaling.csv"))
    for r in rows:
        r.update(workers=int(r["workers"]), step_ms=float(r["step_ms"]),
                 sync_ms=float(r["sync_ms"]),
                 busiest_bytes_per_step=int(r["busiest_bytes_per_step"]))
    plot_scaling(rows, os.path.join(args.out, "scaling.png"), model_params(rows))


def run_parts(args, binary=None, dry_run=False):
    """The parts --only names (default: both), or with dry_run their commands."""
    exp, out_root = runner.experiment(args, "ps_vs_allreduce"), args.out
    if dry_run:
        os.makedirs(out_root, exist_ok=True)
    if args.only != "consistency":
        scaling(exp, args.experiment, out_root, binary, args.quick, dry_run, args.set,
                args.networks.split(",") if args.networks else None)
    if args.only != "scaling":
        consistency(exp, args.experiment, out_root, binary, args.quick, dry_run)


def launcher():
    launch = runner.Launcher(
        __doc__, folder, runs={"run": lambda args: run_parts(args, args.psar)},
        reports={"dry": lambda args: run_parts(args, dry_run=True), "replot": replot},
        flags={"--dry-run": ("dry", "print the commands only"),
               "--replot": ("replot", "redraw scaling.png from scaling.csv without running "
                                      "anything")},
        out_help="the experiment's folder (default: RESULTS/<experiment.name>)")
    ap = launch.parser
    ap.add_argument("experiment", nargs="?",
                    default=os.path.join(ROOT, "experiments", "ps_vs_allreduce.yaml"))
    ap.add_argument("--results", help="default: runs/, or results/ with --reference")
    ap.add_argument("--quick", action="store_true", help="N = 1, 2 and 8 steps: a smoke test")
    ap.add_argument("--only", choices=["scaling", "consistency"], help="run one part")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="scaling: a config override for every point (e.g. sync.overlap=true)")
    ap.add_argument("--networks", help="scaling: these networks (comma-separated) instead of "
                                       "the experiment's")
    ap.add_argument("--name", help="results folder name instead of experiment.name")
    return launch


if __name__ == "__main__":
    runner.main_guard("ps_vs_allreduce.py", launcher().main)
