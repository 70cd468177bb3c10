#!/usr/bin/python3
"""Where each wins: the time to a target test accuracy of the parameter
server and of the allreduce backends, homogeneous, with stragglers and with
a failure (results/where_ps_wins/).

    python3 -m psar_exp where_ps_wins measure [--psar PATH] [--reps 3] [--rows ROW,...]
                                              [--reference | --exploratory]
    python3 -m psar_exp where_ps_wins report [--out DIR]

measure runs experiments/where_ps_wins.yaml (d = 4 workers) for every row
(regime) and its columns (backends) below, `--reps` times (each rep a
pass over every cell, so that the host's drift spreads over the cells),
each cell's run (with its relaunch) holding /tmp/psar-measure.lock (as
`flock` does), and appends one line per run
to data/runs.csv:

  row,backend,rep,status,target_step,time_to_target_s,final_accuracy,lost_s,restarts,
  compute_s,bytes_sent

report writes table.md from every data/*.csv of the folder (no runs), so
other experiments add rows or columns to the same table by committing a CSV
beside runs.csv with its first nine columns (compute_s and bytes_sent, which
feed the α-β prediction, may be left out): their backends appear as
columns, their rows as rows.

Columns: ps_bsp, ps_ssp (staleness 2), ps_asp, ps_backup (bsp with
ps.backup_workers 1: 5 workers of which the first 4 pushes of each clock
count), ring, halving_doubling, hierarchical, zero (the ring with
sync.zero 1: the optimizer state sharded). The PS has one dedicated
server rank. halving_doubling and hierarchical, the same synchronous
barrier as the ring at d = 4 on one host, are measured in the homogeneous
and 2x rows only.

Rows: homogeneous; one worker 2x and 4x slow (hetero.slow_ranks: its
compute sleeps (k - 1) x its measured compute); random delays after every
worker's compute, exponential and Pareto (shape 1.5) with mean 50 ms (half
a step's compute); and a worker killed (SIGKILL, hetero.kill_rank) at 30 %
of the run (step KILL_STEP): the PS with ps.on_worker_failure continue under
mpirun --enable-recovery, the allreduce backends relaunched onto 3 ranks
from their latest checkpoint (psar_exp.runner.run_with_restarts) with a
checkpoint every 5 (row fail_ckpt5) or 500 (fail_ckpt500: none before the
kill) steps — the issue's 50 and 500 for a run ten times this one's 30
steps: 50 scaled to 5, 500 left as it is, past the run's end either way.

Time to target: worker 0's step_s (steps.csv) summed up to the first
evaluation (eval.csv, every 5 steps) whose test accuracy reaches TARGET.
After a relaunch: the killed attempt's summed step_s, plus the relaunched
attempt's overhead (its wall seconds, start-up, restore and evaluation
included, minus its summed step_s), plus its step_s from the checkpoint to
the target. `lost_s`: for the relaunch, the killed attempt's steps past its
checkpoint (done twice) plus the overhead; for the PS, worker 0's excess
over its median step, summed over the steps after the kill (the servers'
ps.timeout and the workers' sync.timeout before they drop the dead
worker). A cell is the median over the reps that reached the target; the
winner of each row is marked in bold.

α-β prediction (table.md's second table): the time to target of a
synchronous cell is its target step x (the expected compute of the worker
each clock waits for + one sync). The compute: the cell's own median
compute_s of a worker that is neither slowed nor killed (c), times k for
the BSP and allreduce columns of the k-x slow rows (the slowest of N) and c
for ps_backup (the N-th of N + 1: a fast one); in the delay rows plus the
expected maximum of N draws (BSP, allreduce) or the N-th smallest of N + 1
(backup), closed forms of the order statistics. The sync: `psar cost`'s
ring α-β-γ form (halving_doubling's and hierarchical's for their columns;
ZeRO stage 1 moves the ring's bytes) at α and β fitted to
results/collective_cost's d = 4 ring sweep, its γ; the PS, costs.ps_time
at the same α and 1/β as the bandwidth. SSP and ASP have none.
"""

import csv
import fcntl
import glob
import math
import os
import statistics
import time

import yaml

from psar_exp import ROOT, costs, runner
from psar_exp.io import read_csv, write_text

YAML = os.path.join(ROOT, "experiments", "where_ps_wins.yaml")
TARGET = 0.84
WORKERS = 4
PS_BACKENDS = {
    "ps_bsp": [],
    "ps_ssp": ["ps.consistency=ssp", "ps.staleness=2"],
    "ps_asp": ["ps.consistency=asp"],
    "ps_backup": ["ps.backup_workers=1"],
}
ALLREDUCE_BACKENDS = {"ring": ["sync.backend=ring"],
                      "halving_doubling": ["sync.backend=halving_doubling"],
                      "hierarchical": ["sync.backend=hierarchical"],
                      "zero": ["sync.backend=ring", "sync.zero=1"]}
COLUMNS = list(PS_BACKENDS) + list(ALLREDUCE_BACKENDS)
# Columns other experiments fill (their CSVs beside runs.csv); shown empty until then.
SIBLING_COLUMNS = {"ps_sparse": "sparse PS (its own experiment)"}
DELAY_MEAN_S = 0.05
PARETO_SHAPE = 1.5
ROWS = {
    "homogeneous": [],
    "slow_2x": ["hetero.slow_factor=2"],
    "slow_4x": ["hetero.slow_factor=4"],
    "delay_exponential": ["hetero.delay.distribution=exponential",
                          f"hetero.delay.mean={DELAY_MEAN_S * 1000:g}ms"],
    "delay_pareto": ["hetero.delay.distribution=pareto", f"hetero.delay.mean={DELAY_MEAN_S * 1000:g}ms",
                     f"hetero.delay.pareto_shape={PARETO_SHAPE}"],
    "fail_ckpt5": [],
    "fail_ckpt500": [],
}
CHECKPOINT_EVERY = {"fail_ckpt5": 5, "fail_ckpt500": 500}
SAME_AS_RING = ["halving_doubling", "hierarchical"]


def row_columns(row):
    """The columns measured in `row`."""
    if row == "fail_ckpt500":  # the PS checkpoints nothing: fail_ckpt5's runs are its cells
        return ["ring", "zero"]
    if row in ("homogeneous", "slow_2x"):
        return COLUMNS
    return [c for c in COLUMNS if c not in SAME_AS_RING]


# The order of a pass: the rows the targets read first.
ORDER = ["homogeneous", "slow_2x", "fail_ckpt5", "fail_ckpt500", "slow_4x", "delay_exponential",
         "delay_pareto"]
FIELDS = ["row", "backend", "rep", "status", "target_step", "time_to_target_s", "final_accuracy",
          "lost_s", "restarts", "compute_s", "bytes_sent"]


def workload():
    """(steps, eval_every) of the workload."""
    with open(YAML) as f:
        train = yaml.safe_load(f)["train"]
    return int(train["steps"]), int(train["eval_every"])


STEPS, EVAL_EVERY = workload()
KILL_STEP = int(0.3 * STEPS)


def sets_for(row, backend):
    """(ranks, --set list) of one cell."""
    ps = backend in PS_BACKENDS
    workers = WORKERS + (1 if backend == "ps_backup" else 0)
    ranks = workers + (1 if ps else 0)
    sets = (["sync.backend=ps"] + PS_BACKENDS[backend]) if ps else list(ALLREDUCE_BACKENDS[backend])
    if row.startswith("slow_"):
        sets.append(f"hetero.slow_ranks=[{slow_rank(backend)}]")
    sets += ROWS.get(row, [])
    if row.startswith("fail_"):
        sets += [f"hetero.kill_rank={ranks - 1}", f"hetero.kill_step={KILL_STEP}"]
        if ps:
            sets += ["ps.on_worker_failure=continue", "ps.timeout=4s", "sync.timeout=2s"]
        else:
            sets.append(f"train.checkpoint_every={CHECKPOINT_EVERY[row]}")
    return ranks, sets


def slow_rank(backend):
    """World rank of the straggler: the last of the first WORKERS workers
    (after the PS's server rank)."""
    return WORKERS if backend in PS_BACKENDS else WORKERS - 1


def worker0(run_dir, upto=None):
    """{step: step_s} of worker 0, steps ≤ upto."""
    out = {}
    for r in read_csv(os.path.join(run_dir, "steps.csv")):
        if r["rank"] == "0" and (upto is None or int(r["step"]) <= upto):
            out[int(r["step"])] = float(r["step_s"])
    return out


def step_figures(run_dir, backend, row):
    """(median compute_s of the workers neither slowed nor killed, worker 0's
    median bytes sent per step) of a run."""
    rows = read_csv(os.path.join(run_dir, "steps.csv"))
    ps = backend in PS_BACKENDS
    skip = set()
    if row.startswith("slow_"):
        skip.add(slow_rank(backend) - (1 if ps else 0))  # steps.csv ranks are the workers'
    if row.startswith("fail_"):
        skip.add(WORKERS - 1 + (1 if backend == "ps_backup" else 0))
    compute = [float(r["compute_s"]) for r in rows if int(r["rank"]) not in skip]
    sent = [float(r["bytes_sent"]) for r in rows if r["rank"] == "0"]
    return statistics.median(compute), statistics.median(sent)


def time_to_target(run_dir, first_step=0):
    """(target step or None, worker 0's seconds of steps first_step+1..target, final accuracy)."""
    evals = read_csv(os.path.join(run_dir, "eval.csv")) if os.path.exists(
        os.path.join(run_dir, "eval.csv")) else []
    target = next((int(e["step"]) for e in evals if float(e["test_accuracy"]) >= TARGET), None)
    final = float(evals[-1]["test_accuracy"]) if evals else float("nan")
    steps = worker0(run_dir, target)
    return target, sum(v for k, v in steps.items() if k > first_step), final


def one(psar, row, backend, run_dir):
    """Runs one cell once; returns its CSV fields (status ok, no_target or failed)."""
    ranks, sets = sets_for(row, backend)
    fields = {"lost_s": "0", "restarts": "0"}

    def command(n, resume, extra=()):
        mca = [("orte_enable_recovery", 1)] if backend in PS_BACKENDS and row.startswith("fail_") else []
        cmd = runner.mpirun_prefix(n, mca) + [psar, "train", YAML, "--quiet", "--out", run_dir]
        cmd += ["--resume", run_dir] if resume else ["--overwrite"]
        for s in list(sets) + list(extra):
            cmd += ["--set", s]
        return cmd

    if row.startswith("fail_") and backend not in PS_BACKENDS:
        killed = {}

        def launch(cmd):
            start = time.monotonic()
            done = runner.launch(cmd, timeout=1800, echo=False)
            if done.returncode != 0:  # the killed attempt: its rows up to the kill
                killed["steps"] = worker0(run_dir)
            else:
                killed["wall"] = time.monotonic() - start
            return done

        attempts = runner.run_with_restarts(lambda n, resume: command(n, resume), ranks, run_dir,
                                            max_restarts=1, relaunch_sets=["hetero.kill_rank=-1"],
                                            launch=launch)
        resumed = attempts[-1].resumed_from or 0
        target, seconds, final = time_to_target(run_dir, resumed)
        redone = sum(v for k, v in killed.get("steps", {}).items() if k > resumed)
        overhead = max(killed.get("wall", 0) - sum(
            v for k, v in worker0(run_dir).items() if k > resumed), 0)
        fields.update(lost_s=f"{redone + overhead:.3f}", restarts=str(len(attempts) - 1))
        seconds += sum(killed.get("steps", {}).values()) + overhead
    else:
        runner.run(command(ranks, False))
        target, seconds, final = time_to_target(run_dir)
        if row.startswith("fail_"):
            steps = worker0(run_dir)
            typical = statistics.median(steps.values())
            fields["lost_s"] = f"{sum(max(v - typical, 0) for k, v in steps.items() if k > KILL_STEP):.3f}"
    compute, sent = step_figures(run_dir, backend, row)
    fields.update(status="ok" if target else "no_target", target_step=str(target or ""),
                  time_to_target_s=f"{seconds:.3f}" if target else "",
                  final_accuracy=f"{final:.4f}", compute_s=f"{compute:.5f}", bytes_sent=f"{sent:.0f}")
    return fields


def measure(args):
    data = os.path.join(args.out, "data")
    os.makedirs(data, exist_ok=True)
    path = os.path.join(data, args.csv)
    rows = [r for r in args.rows.split(",") if r] if args.rows else ORDER
    before = runner.machine_state()
    states = [f"Before the runs ({time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}):\n"
              + "\n".join(runner.machine_lines())]
    start = time.monotonic()
    new = not os.path.exists(path)
    with open(path, "a", newline="") as f:
        w = csv.DictWriter(f, FIELDS)
        if new:
            w.writeheader()
        for rep in range(1, args.reps + 1):
            for row in rows:
                for backend in row_columns(row):
                    if args.columns and backend not in args.columns.split(","):
                        continue
                    if args.budget_s and time.monotonic() - start > args.budget_s:
                        print(f"where_ps_wins: --budget-s {args.budget_s} spent; "
                              f"{row} {backend} rep {rep} and what follows not run")
                        break
                    run_dir = os.path.join(args.out, "runs", f"{row}_{backend}_{rep}")
                    try:
                        # One hold of the lock for the whole cell: a relaunch's
                        # overhead counts no wait for other benchmarks.
                        with open(runner.MEASURE_LOCK, "a") as lock:
                            fcntl.flock(lock, fcntl.LOCK_EX)
                            fields = one(args.psar, row, backend, run_dir)
                    except (runner.RunError, OSError, KeyError, ValueError,
                            runner.TimeoutExpired) as e:
                        print(f"where_ps_wins: {row} {backend} rep {rep} failed: {e}"[:2000])
                        fields = {k: "" for k in FIELDS[4:]}
                        fields["status"] = "failed"
                    w.writerow({"row": row, "backend": backend, "rep": rep, **fields})
                    f.flush()
    states.append(f"After the runs ({time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}):\n"
                  + "\n".join(runner.machine_lines()))
    stem = os.path.splitext(args.csv)[0]
    write_text(os.path.join(data, "machine.txt" if stem == "runs" else f"machine_{stem}.txt"),
               runner.machine_note(before) + "\n\n" + "\n\n".join(states) + "\n")


def cells_of(folder):
    """{(row, backend): [CSV rows]} of every data/*.csv of `folder`."""
    cells = {}
    for path in sorted(glob.glob(os.path.join(folder, "data", "*.csv"))):
        for r in read_csv(path):
            cells.setdefault((r["row"], r["backend"]), []).append(r)
    return cells


def median_of(runs, key):
    values = [float(r[key]) for r in runs if r["status"] == "ok" and r.get(key)]
    return statistics.median(values) if values else None


# ---- the α-β prediction -------------------------------------------------------

def order_statistic(k, n, row):
    """E[the k-th smallest of n per-step delays] of a delay row: closed forms
    (exponential of mean m: m Σ_{i=n-k+1..n} 1/i; Pareto of shape a, scale
    x_m = m (a - 1)/a: x_m Γ(n+1) Γ(n-k+1-1/a) / (Γ(n-k+1) Γ(n+1-1/a)))."""
    m = DELAY_MEAN_S
    if row == "delay_exponential":
        return m * sum(1 / i for i in range(n - k + 1, n + 1))
    a = PARETO_SHAPE
    xm = m * (a - 1) / a
    lg = math.lgamma
    return xm * math.exp(lg(n + 1) + lg(n - k + 1 - 1 / a) - lg(n - k + 1) - lg(n + 1 - 1 / a))


def waited_compute(row, backend, c):
    """Expected compute (with injected delay) of the worker a clock waits for."""
    n = WORKERS + (1 if backend == "ps_backup" else 0)
    if row.startswith("slow_"):
        return c if backend == "ps_backup" else c * float(row[len("slow_"):-1])
    if row.startswith("delay_"):
        return c + order_statistic(WORKERS, n, row)
    return c


def alpha_beta(folder, psar=None):
    """(α, β, γ) fitted to the d = 4 ring sweep of results/collective_cost,
    and `psar cost`'s table for the sizes asked later (a function of n)."""
    cc = os.path.join(os.path.dirname(os.path.normpath(folder)), "collective_cost")
    with open(os.path.join(cc, "gamma.txt")) as f:
        gamma = float(f.read().split()[0])
    sweep = [(int(r["size"]), float(r["time_us"]) * 1e-6)
             for r in read_csv(os.path.join(cc, "bench_n4.csv")) if r["algo"] == "ring"]
    table = costs.query([WORKERS], sorted({n for n, _ in sweep}), algos=["ring"], psar=psar)
    alpha, beta = costs.fit_alpha_beta([table.terms("ring", WORKERS, n) + (t,) for n, t in sweep],
                                       gamma)
    return alpha, beta, gamma


def sync_time(backend, n, fit, psar=None):
    alpha, beta, gamma = fit
    if backend in PS_BACKENDS:
        workers = WORKERS + (1 if backend == "ps_backup" else 0)
        return costs.ps_time(workers, 1, n, 1 / beta, alpha, n)
    algo = "ring" if backend == "zero" else backend
    return costs.query([WORKERS], [n], algos=[algo], psar=psar).time(algo, WORKERS, n, alpha, beta,
                                                                     gamma)


PREDICTED = ["ps_bsp", "ps_backup", "ring", "halving_doubling", "hierarchical", "zero"]


def prediction_table(cells, rows, fit, psar=None):
    """Markdown lines: predicted / measured time to target of the synchronous cells."""
    ps_bytes = [median_of(cells.get((r, "ps_bsp"), []), "bytes_sent") for r in rows]
    ps_bytes = [b for b in ps_bytes if b]
    if not ps_bytes:
        return []
    n = int(statistics.median(ps_bytes))  # one push of the gradient (+ its small header)
    syncs = {b: sync_time(b, n, fit, psar) for b in PREDICTED}
    out = ["", "α-β prediction / measurement (s) of the synchronous cells: target step × "
           "(expected compute of the worker each clock waits for + the α-β sync; the "
           "docstring of experiments/where_ps_wins.py defines it), at "
           f"α = {fit[0] * 1e6:.2f} µs, β = {fit[1] * 1e12:.1f} ps/byte, γ = {fit[2] * 1e12:.1f} "
           f"ps/byte and n = {n} bytes: one sync is predicted at "
           + ", ".join(f"{b} {t * 1e3:.2f} ms" for b, t in syncs.items())
           + "; measured/predicted in parentheses.", "",
           "| regime | " + " | ".join(PREDICTED) + " |", "|---|" + "---|" * len(PREDICTED)]
    for row in rows:
        if row.startswith("fail_") or row not in ROWS:
            continue
        line = []
        for b in PREDICTED:
            runs = cells.get((row, b), [])
            t, step, c = (median_of(runs, k) for k in ("time_to_target_s", "target_step",
                                                        "compute_s"))
            if t is None or c is None:
                line.append("—")
                continue
            pred = step * (waited_compute(row, b, c) + syncs[b])
            line.append(f"{pred:.2f} / {t:.2f} ({t / pred:.2f})")
        out.append(f"| {row} | " + " | ".join(line) + " |")
    return out


def table(folder, psar=None):
    """table.md's text from every data/*.csv of `folder`."""
    cells = cells_of(folder)
    rows = [r for r in ROWS if any(k[0] == r for k in cells)]
    rows += sorted({k[0] for k in cells} - set(rows))
    columns = COLUMNS + [c for c in SIBLING_COLUMNS] + sorted(
        {k[1] for k in cells} - set(COLUMNS) - set(SIBLING_COLUMNS))
    out = ["# Where each wins: time to a target test accuracy\n",
           f"Written by `python3 -m psar_exp where_ps_wins report` from data/*.csv. Each cell: "
           f"seconds of worker 0's steps until the first evaluation at test accuracy ≥ "
           f"{TARGET:.2f} ({STEPS} steps, evaluated every {EVAL_EVERY}; "
           f"experiments/where_ps_wins.yaml, d = {WORKERS} workers), the median over the runs "
           f"that reached it, with (reached/runs); **bold**: the row's fastest. Failure rows: a "
           f"worker killed at step {KILL_STEP} — the PS goes on without it "
           f"(ps.on_worker_failure continue), an allreduce backend is relaunched onto "
           f"{WORKERS - 1} ranks from its latest checkpoint (every 5 steps, or 500: none, from "
           f"step 0), its time including the killed attempt's steps and the relaunch; the PS, "
           f"which checkpoints nothing there, is measured in fail_ckpt5 only. `—`: not measured. "
           + ", ".join(f"`{c}`: {why}" for c, why in SIBLING_COLUMNS.items())
           + ": a column another experiment fills. Rows only a sibling CSV fills are that "
           "experiment's own workload and target (sparse_<rows>_s<skew>: the DLRM of "
           "results/sparse_ps at its target, with the columns hybrid, ps_dense and "
           "ring_gather). Machine state: data/machine*.txt.\n"]
    out.append("| regime | " + " | ".join(columns) + " |")
    out.append("|---|" + "---|" * len(columns))
    for row in rows:
        medians = {}
        for c in columns:
            runs = cells.get((row, c), [])
            t = median_of(runs, "time_to_target_s")
            if t is not None:
                medians[c] = (t, sum(r["status"] == "ok" for r in runs), len(runs))
        best = min((m[0] for m in medians.values()), default=None)
        line = []
        for c in columns:
            runs = cells.get((row, c), [])
            if c not in medians:
                failed = sum(r["status"] == "failed" for r in runs)
                line.append("—" if not runs else f"failed ({failed}/{len(runs)})" if failed
                            else f"not reached (0/{len(runs)})")
                continue
            t, ok, n = medians[c]
            text = f"{t:.2f} s ({ok}/{n})"
            line.append(f"**{text}**" if t == best else text)
        out.append(f"| {row} | " + " | ".join(line) + " |")
    out += straggler_lines(cells)
    lost = {}
    for (row, c), runs in cells.items():
        for r in runs:
            if row.startswith("fail_") and r.get("lost_s"):
                lost.setdefault((row, c), []).append(float(r["lost_s"]))
    if lost:
        out.append("\nTime lost to the failure (median s; allreduce: the killed attempt's steps "
                   "past its checkpoint + the relaunch's overhead; PS: worker 0's excess over "
                   "its median step after the kill, the deadlines before the dead worker is "
                   "dropped):\n")
        out.append("| regime | backend | lost s | runs |")
        out.append("|---|---|---|---|")
        for (row, c), v in sorted(lost.items()):
            out.append(f"| {row} | {c} | {statistics.median(v):.2f} | {len(v)} |")
    try:
        fit = alpha_beta(folder, psar)
    except (OSError, runner.RunError, KeyError, ValueError) as e:
        out.append(f"\nNo α-β prediction: {e}")
    else:
        out += prediction_table(cells, rows, fit, psar)
    return "\n".join(out) + "\n"


def straggler_lines(cells):
    """The issue's straggler target, read off the medians: with one rank 2x
    slow, the best of SSP and BSP + backup against BSP and the ring."""
    t = {c: median_of(cells.get(("slow_2x", c), []), "time_to_target_s")
         for c in ("ps_ssp", "ps_backup", "ps_bsp", "ring")}
    if t["ps_bsp"] is None or t["ring"] is None:
        return []
    best = min((c for c in ("ps_ssp", "ps_backup") if t[c] is not None), key=lambda c: t[c],
               default=None)
    if best is None:
        return ["\nslow_2x: neither SSP nor BSP + backup reached the target."]
    ratios = {c: t[c] / t[best] for c in ("ps_bsp", "ring")}
    met = all(r >= 1.3 for r in ratios.values())
    return [f"\nslow_2x: {best} reaches the target {ratios['ps_bsp']:.2f}x sooner than ps_bsp "
            f"and {ratios['ring']:.2f}x sooner than ring (target ≥ 1.3x: "
            f"{'met' if met else 'missed'})."]


def regenerate(folder, results=None):
    """table.md from the committed CSVs (psar_exp check); no runs."""
    return {"table.md": table(folder)}


def report(args):
    write_text(os.path.join(args.out, "table.md"), table(args.out, args.psar))


def measure_and_report(args):
    measure(args)
    report(args)


def launcher():
    launch = runner.Launcher(__doc__, "where_ps_wins", runs={"measure": measure_and_report},
                             reports={"report": report})
    ap = launch.parser
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rows", default="", help="comma-separated rows (default: all)")
    ap.add_argument("--columns", default="", help="comma-separated backends (default: all)")
    ap.add_argument("--csv", default="runs.csv",
                    help="the file under data/ the runs are appended to (another name: a "
                         "sibling CSV, its machine state in data/machine_<name>.txt)")
    ap.add_argument("--budget-s", type=float, default=0,
                    help="start no run after this many seconds (0: no limit); the table counts "
                         "the runs each cell got")
    return launch


if __name__ == "__main__":
    runner.main_guard("where_ps_wins.py", launcher().main)
