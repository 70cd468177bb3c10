#!/usr/bin/python3
"""psar simulate against psar train's own measured steps (docs/simulate.md,
"Validation"): every allreduce algorithm, the parameter server (S = 1, 2, 4;
N = 2, 4, 8), tensor parallelism (t = 2, 4), every pipeline schedule and a
3D (2, 2, 2) grid, each run under mpirun behind the emulated network
(net.bandwidth = 1 Gbit/s, net.latency = 50 us) and then simulated with the
compute rate measured in that same run.

    experiments/sim_validation.py measure [--rows a,b] [--repeat 2] [--batch-s 540]
                                          [--reference | --exploratory]
    experiments/sim_validation.py report [--reference]

`measure` runs psar train --repeat times for every row (or the named ones)
into runs/simulate/validation_runs/<row>/r<i>/ (results/simulate/ with
--reference), the repeats of a row
back to back, holding /tmp/psar-measure.lock per
batch of rows (a batch ends once it has run for --batch-s seconds), and
notes each batch's machine state in runs.json. `report` simulates every
measured row and writes validation.{md,csv,png} beside validation_runs/.

What is measured: the median over the steps of all repeats (the first
WARMUP of each dropped) of the slowest rank's step_s. The calibration, the only input taken from the run:
one compute rate R (FLOP/s per rank) = the simulator's FLOPs of the rank's
actions / the measured compute time without the tensor-parallel all-reduces
(compute_s − tp_s of steps.csv and axes.csv; per stage, the slowest rank of
the stage, summed over the stages). Everything else — collectives, the
parameter server, TP all-reduces, transfers, the schedule's replay — is the
simulator's. A row outside 10 % is reported with its reason, not tuned.
"""

import csv
import fcntl
import json
import os
import statistics
import tempfile
import time

from psar_exp import ROOT
from psar_exp.generated import fill_blocks
from psar_exp.io import csv_text, md_table, read_csv, write_text
from psar_exp.runner import (Launcher, RunError, cpu_times, machine_state, main_guard,
                              mpirun_prefix, psar_binary, run, steal_share)

RUNS = "validation_runs"  # under the output folder: runs/simulate, or results/simulate
SIM_CONFIG = os.path.join(ROOT, "experiments", "simulate", "validation_gpt_dp.yaml")
TRAIN_CONFIG = os.path.join(ROOT, "experiments", "gpt_tiny.yaml")
LOCK = "/tmp/psar-measure.lock"
WARMUP = 2
STEPS = 10
TARGET = 0.10
R0 = 1e9  # the rate of the simulator's FLOP count run (efficiency 1, no kernel cost)

# The model of every row (and of experiments/simulate/validation_gpt_dp.yaml).
MODEL = ["model.d_model=256", "model.layers=4", "model.heads=4", "model.seq_len=32",
         "model.dropout=0", "train.batch_size=16", f"train.steps={STEPS}",
         "train.eval_every=0", "train.log_every=100"]
NET = ["net.bandwidth=1Gbit", "net.latency=50us"]


def rows():
    """(name, label, ranks, train --sets, simulate --sets)."""
    out = []
    for alg, n in [("ring", 2), ("ring", 4), ("ring", 8), ("tree", 4), ("butterfly", 4),
                   ("halving_doubling", 4), ("naive", 4), ("hierarchical", 4), ("mpi", 4)]:
        out.append((f"dp_{alg}_n{n}", f"DP {alg}, N = {n}", n, [f"sync.backend={alg}"],
                    [f"cluster.nodes={n}", f"sync.backend={alg}"]))
    for s in (1, 2, 4):
        for n in (2, 4, 8):
            out.append((f"ps_s{s}_n{n}", f"PS S = {s}, N = {n}", n + s,
                        ["sync.backend=ps", f"ps.servers={s}"],
                        [f"cluster.nodes={n}", "sync.backend=ps", f"ps.servers={s}"]))
    for t in (2, 4):
        out.append((f"tp_t{t}", f"TP t = {t}", t, ["sync.backend=ring", f"parallel.tp={t}"],
                    ["cluster.nodes=1", f"cluster.gpus_per_node={t}", f"parallel.tp={t}"]))
    for sched, v in [("gpipe", 1), ("1f1b", 1), ("interleaved", 2), ("zb_h1", 1)]:
        pp = ["parallel.pp=2", "parallel.microbatches=4", f"parallel.schedule={sched}",
              f"parallel.chunks={v}"]
        out.append((f"pp_{sched}", f"PP {sched}, p = 2, m = 4" + (f", v = {v}" if v > 1 else ""),
                    2, ["sync.backend=ring"] + pp, ["cluster.nodes=2"] + pp))
    grid = ["parallel.pp=2", "parallel.tp=2", "parallel.microbatches=4"]
    out.append(("3d_p2_t2_d2", "3D p = 2, t = 2, d = 2 (1F1B, m = 4)", 8,
                ["sync.backend=ring"] + grid,
                ["cluster.nodes=4", "cluster.gpus_per_node=2"] + grid))
    return out


def sets_args(sets):
    args = []
    for s in sets:
        args += ["--set", s]
    return args


def measure(args):
    """Every row asked for, in batches that each hold the measurement lock;
    the provenance goes to the runs' folder, with the machine state before
    the first batch."""
    psar, runs = args.psar, os.path.join(args.out, RUNS)
    wanted = set(args.rows.split(",")) if args.rows else None
    todo = [r for r in rows() if wanted is None or r[0] in wanted]
    os.makedirs(runs, exist_ok=True)
    log_path = os.path.join(runs, "runs.json")
    log = json.load(open(log_path)) if os.path.exists(log_path) else {}
    first = None
    while todo:
        with open(args.lock or os.devnull, "w") as lock:
            if args.lock:
                fcntl.flock(lock, fcntl.LOCK_EX)  # the same lock flock(1) takes
            t0, before = time.monotonic(), machine_state()
            first = first or before
            while todo and time.monotonic() - t0 < args.batch_s:
                name, label, ranks, train_sets, _ = todo.pop(0)
                state = machine_state()
                try:
                    for i in range(args.repeat):
                        out = os.path.join(runs, name, f"r{i}")
                        cmd = mpirun_prefix(ranks) + [psar, "train", TRAIN_CONFIG, "--out", out, "--overwrite",
                                                      "--quiet"] + sets_args(MODEL + NET + train_sets)
                        run(cmd, high_priority=True)
                except RunError as e:  # the other rows still run; a row keeps its finished repeats
                    print(f"{name} failed: {e}")
                    log[name] = {"load_before": state["load"], "load_after": os.getloadavg()[0],
                                 "steal": None, "ranks": ranks, "repeats": i,
                                 "failed": f"repeat r{i}: {str(e).splitlines()[0][:200]}",
                                 "command": " ".join(cmd)}
                    write_text(log_path, json.dumps(log, indent=1) + "\n")
                    continue
                steal = steal_share(state["cpu"], cpu_times())
                log[name] = {"load_before": state["load"], "load_after": os.getloadavg()[0],
                             "steal": steal, "ranks": ranks, "repeats": args.repeat,
                             "command": " ".join(cmd)}
                write_text(log_path, json.dumps(log, indent=1) + "\n")
            if args.lock:
                fcntl.flock(lock, fcntl.LOCK_UN)
        print(f"batch done in {time.monotonic() - t0:.0f} s")
    readme = os.path.join(runs, "README.md")
    if not os.path.exists(readme):
        write_text(readme, "# validation_runs\n\nThe psar train runs of "
                   "`/usr/bin/python3 experiments/sim_validation.py measure` (results/simulate/"
                   "validation.md): one folder per row, r0, r1 the repeats; runs.json holds each "
                   "row's command and the load before and after it.\n")
    args.state.update(first or {})
    return [runs]


def simulate(psar, sets):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "r.json")
        run([psar, "simulate", SIM_CONFIG, "--json", out] + sets_args(sets), echo=False)
        with open(out) as f:
            return json.load(f)


def per_step(rows_, key, ranks=None):
    """{(repeat, step): max over the ranks (all, or `ranks`) of key}, after WARMUP."""
    out = {}
    for r in rows_:
        if int(r["step"]) <= WARMUP or (ranks is not None and int(r["rank"]) not in ranks):
            continue
        k = (r["repeat"], int(r["step"]))
        out[k] = max(out.get(k, 0.0), float(r[key]))
    return out


def measured(row_dir):
    """The row's step time (median, min, max over the steps of every repeat),
    and per stage the median of its slowest rank's compute time without TP
    all-reduces."""
    steps = []
    for rep in sorted(os.listdir(row_dir)):
        run_dir = os.path.join(row_dir, rep)
        if not os.path.exists(os.path.join(run_dir, "steps.csv")):
            continue
        axes = {(r["rank"], r["step"]): r for r in read_csv(os.path.join(run_dir, "axes.csv"))}
        for r in read_csv(os.path.join(run_dir, "steps.csv")):
            a = axes[(r["rank"], r["step"])]
            r["pure_s"] = float(r["compute_s"]) - float(a["tp_s"])
            r["tp_s"] = float(a["tp_s"])
            r["stage"] = int(a["pp"])
            r["repeat"] = rep
            steps.append(r)
    step = list(per_step(steps, "step_s").values())
    stages = sorted({r["stage"] for r in steps})
    pure = [statistics.median(per_step(steps, "pure_s",
                                       {int(r["rank"]) for r in steps if r["stage"] == s}).values())
            for s in stages]
    return {"step_s": statistics.median(step), "min": min(step), "max": max(step),
            "pure_s": pure, "tp_s": statistics.median(per_step(steps, "tp_s").values()),
            "sync_s": statistics.median(per_step(steps, "sync_s").values())}


def validation(folder, psar):
    """validation.csv, validation.md and validation_notes.md from the runs
    under folder/validation_runs and the simulator (`psar simulate`)."""
    runs = os.path.join(folder, RUNS)
    log = json.load(open(os.path.join(runs, "runs.json")))
    table, csv_rows, tp_predicted = [], [], {}
    for name, label, ranks, _, sim_sets in rows():
        row_dir = os.path.join(runs, name)
        if name not in log or not os.path.isdir(row_dir) or not log[name].get("repeats", 1):
            continue
        m = measured(row_dir)
        # The simulator's FLOPs per stage: its compute time at rate R0.
        flops = simulate(psar, sim_sets + [f"cluster.gpu.peak_flops={R0}"])
        stage_flops = [s["compute_s"] * R0 for s in flops["stages"]]
        rate = sum(stage_flops) / sum(m["pure_s"])
        r = simulate(psar, sim_sets + [f"cluster.gpu.peak_flops={rate}"])
        err = (r["step_s"] - m["step_s"]) / m["step_s"]
        st = log[name]
        parts = [f"compute {sum(s['compute_s'] for s in r['stages']):.3f}"]
        if r["tp"] > 1:
            tp_predicted[name] = sum(s['tp_s'] for s in r['stages']) / len(r['stages'])
            parts.append(f"TP {tp_predicted[name]:.3f}")
        if r["pp"] > 1:
            parts.append(f"idle {r['stages'][0]['idle_s']:.3f}")
        if r["dp"] > 1:
            parts.append(f"sync {r['sync_exposed_s']:.3f}")
        within = abs(err) <= TARGET
        load = lambda x: "—" if x is None else f"{x:.1f}"  # noqa: E731
        if st.get("failed"):
            label += f" ({st['repeats']} run; a repeat failed, see below)"
        table.append([label, ranks, f"{load(st['load_before'])} → {load(st['load_after'])}",
                      f"{rate:.3g}",
                      f"{m['step_s']:.3f} ({m['min']:.3f}–{m['max']:.3f})",
                      f"{r['step_s']:.3f} ({', '.join(parts)})",
                      f"{100 * err:+.1f} %" + ("" if within else " ✗")])
        csv_rows.append({"row": name, "ranks": ranks, "load_before": st["load_before"],
                         "load_after": st["load_after"], "rate_flops": rate,
                         "measured_step_s": m["step_s"], "measured_min_s": m["min"],
                         "measured_max_s": m["max"], "measured_sync_s": m["sync_s"],
                         "measured_tp_s": m["tp_s"], "predicted_step_s": r["step_s"],
                         "predicted_sync_s": r["sync_exposed_s"], "error": err})
    inside = sum(abs(c["error"]) <= TARGET for c in csv_rows)
    text = (HEAD.format(steps=STEPS, warmup=WARMUP) +
            md_table(["run", "ranks", "load (1 min)", "R (FLOP/s per rank)",
                      "measured step s (median; min–max)", "predicted s", "error"], table) +
            f"\n{inside} of {len(csv_rows)} rows within {100 * TARGET:.0f} % (✗: outside).\n")
    texts = {"validation.csv": csv_text(csv_rows), "validation.md": text}
    notes_path = os.path.join(folder, "validation_notes.md")
    if os.path.exists(notes_path):  # the hand-written reading, its figures generated
        with open(notes_path) as f:
            notes = fill_blocks(f.read(), note_blocks(csv_rows, tp_predicted, runs, log),
                                notes_path)
        texts.update({"validation.md": text + "\n" + notes, "validation_notes.md": notes})
    return texts


def tp_allreduces(runs, name):
    """(all-reduces per step, bytes of one) of a row, from rank 0's tp.csv of its first run."""
    rows_ = read_csv(os.path.join(runs, name, "r0", "tp.csv"))
    r = next(r for r in rows_ if r["rank"] == "0")
    n = int(r["allreduces"])
    return n, 4 * int(r["allreduce_floats"]) // n


def note_blocks(csv_rows, tp_predicted, runs, log):
    """The figures of validation_notes.md, each from the rows."""
    by = {c["row"]: c for c in csv_rows}
    ms = lambda name: f"{1000 * by[name]['measured_sync_s']:.1f}"  # noqa: E731
    pct = lambda name: f"{100 * by[name]['error']:+.1f} %"  # noqa: E731
    pp = [c for c in csv_rows if c["row"].startswith("pp_")]
    sync = sorted(1000 * c["measured_sync_s"] for c in pp)
    out = {"finalize": f"{sync[0]:.1f}–{sync[-1]:.1f} ms per step in the pipeline rows "
                       f"({', '.join(c['row'] + ' ' + ms(c['row']) for c in pp)})"}
    tp_rows = [c["row"] for c in csv_rows if c["row"].startswith("tp_")]
    calls = {name: tp_allreduces(runs, name) for name in tp_rows}
    desc = "; ".join(f"{name}: {n} per step of {b / 1024:g} KiB" for name, (n, b) in calls.items())
    outside = [c for c in csv_rows if abs(c["error"]) > TARGET and c["row"] != "dp_mpi_n4"]
    tp_lines = ", ".join(f"{c['row']} ({pct(c['row'])})" for c in outside)
    compare = "; ".join(f"{name} measured {by[name]['measured_tp_s']:.3f} s against "
                        f"{tp_predicted[name]:.3f} s predicted"
                        for name in tp_rows + ["3d_p2_t2_d2"] if name in tp_predicted)
    out["tp"] = (f"Outside 10 % beside DP mpi: {tp_lines}. The tensor-parallel all-reduces "
                 f"(the [b, s, h] stream; {desc}) wait for peers that are descheduled when "
                 f"more ranks than cores share the host, so the measured `tp_s` exceeds the "
                 f"wire time the simulator charges per step: {compare}.")
    short = [c for c in csv_rows if -TARGET <= c["error"] <= -0.07]
    loads = [v for c in log.values() for v in (c.get("load_before"), c.get("load_after"))
             if v is not None]
    out["short"] = (f"Within 10 % but short by 7–10 % ({len(short)} rows): " +
                    ", ".join(f"{c['row']} ({pct(c['row'])})" for c in short) +
                    f". The 1-minute load average of the host ranged {min(loads):.1f}–"
                    f"{max(loads):.1f} over the batch (runs.json).")
    return out


HEAD = """# Validation: psar simulate against psar train's own measured steps

Produced by `/usr/bin/python3 experiments/sim_validation.py measure` then
`report`; the runs, their commands, each
run's load and the runs' commit and machine state are in validation_runs/
(runs.json, README.md). Emulated
network: `net.bandwidth=1Gbit`, `net.latency=50us`, every rank (and every
dedicated parameter-server shard) its own NIC. The model: experiments/gpt_tiny.yaml
widened to d_model 256, 4 layers, 4 heads, context 32, dropout 0 (3,188,224
parameters, 12.75 MB of fp32 gradients), global batch 16, {steps} steps per
run, the first {warmup} dropped, two runs per row. The simulator's config is
experiments/simulate/validation_gpt_dp.yaml (every link 1 Gbit/s and 50 us,
fp32 activations and gradients) with the row's grid and backend.

Measured step: the median over steps of the slowest rank's `step_s`.
Calibration, the only input taken from the run: R = the simulator's FLOPs of
a rank's actions / the measured compute without tensor-parallel all-reduces
(`compute_s` − `tp_s`; per pipeline stage the slowest rank, summed over the
stages). The rest — every collective's step list on the links, the parameter
server's pipelined pushes and pulls through its shards' NICs, the TP
all-reduces, the activation transfers and the schedule's replay — is the
simulator's. Ranks beyond 2 share this host's 2 cores (N = 8 and the PS rows
with N + S ranks are time-shared), so R falls with the rank count.
In "predicted": compute is a rank's (the sum over stages with p > 1), TP
the TP all-reduces per stage, idle stage 0's pipeline idle time, sync the
exposed data-parallel sync.

"""


def plot(csv_rows, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(8, 0.28 * len(csv_rows) + 1.5))
    names = [c["row"] for c in csv_rows]
    ys = range(len(names))
    ax.barh([y + 0.2 for y in ys], [float(c["measured_step_s"]) for c in csv_rows], 0.4,
            label="measured (median)")
    ax.barh([y - 0.2 for y in ys], [float(c["predicted_step_s"]) for c in csv_rows], 0.4,
            label="psar simulate")
    ax.set_yticks(list(ys), names, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("step time (s), 1 Gbit/s emulated network")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def regenerate(folder, results=None):
    return validation(folder, psar_binary())


def report(args):
    for name, text in validation(args.out, psar_binary(args.psar)).items():
        write_text(os.path.join(args.out, name), text)
    with open(os.path.join(args.out, "validation.csv")) as f:
        plot(list(csv.DictReader(f)), os.path.join(args.out, "validation.png"))


def list_rows(args):
    for r in rows():
        print(r[0], r[2], " ".join(r[3]))


def launcher():
    launch = Launcher(__doc__, "simulate", runs={"measure": measure},
                      reports={"report": report, "list": list_rows})
    m = launch.parser.add_argument_group("measure")
    m.add_argument("--rows", default="", help="comma-separated row names (default: all)")
    m.add_argument("--lock", default=LOCK,
                   help="the measurement lock to hold per batch ('': the caller holds it, "
                        "e.g. under flock(1))")
    m.add_argument("--repeat", type=int, default=2, help="runs per row")
    m.add_argument("--batch-s", type=float, default=540,
                   help="seconds after which a batch releases the measurement lock")
    return launch


if __name__ == "__main__":
    main_guard("sim_validation", launcher().main)
