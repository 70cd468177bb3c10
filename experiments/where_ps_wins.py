#!/usr/bin/python3
"""Where each wins: the time to a target test accuracy of the parameter
server and of the allreduce backends, homogeneous, with stragglers and with
a failure (results/where_ps_wins/).

    python3 -m psar_exp where_ps_wins measure [--psar PATH] [--reps 3] [--rows ROW,...]
                                              [--reference | --exploratory]
    python3 -m psar_exp where_ps_wins report [--out DIR]

measure runs experiments/where_ps_wins.yaml (d = 4 workers) for every row
(regime) and column (backend) below, `--reps` times, each run under
`flock /tmp/psar-measure.lock`, and appends one line per run to
data/runs.csv:

  row,backend,rep,status,target_step,time_to_target_s,final_accuracy,lost_s,restarts

report writes table.md from every data/*.csv of the folder (no runs), so
other experiments may add rows or columns to the same table by committing
a CSV of the same columns beside runs.csv (e.g. a sparse PS or ZeRO column):
their backends appear as columns, their rows as rows.

Columns: ps_bsp, ps_ssp (staleness 2), ps_asp, ps_backup (bsp with
ps.backup_workers 1: 5 workers of which the first 4 pushes of each clock
count), ring, halving_doubling, hierarchical. The PS has one dedicated
server rank.

Rows: homogeneous; one worker 2x and 4x slow (hetero.slow_ranks: its
compute sleeps (k - 1) x its measured compute); random delays after every
worker's compute, exponential and Pareto (shape 1.5) with mean 5 ms; and a
worker killed (SIGKILL, hetero.kill_rank) at 30 % of the run: the PS with
ps.on_worker_failure continue under mpirun --enable-recovery, the
allreduce backends with a checkpoint every 10 (row fail_ckpt10) or 500
(fail_ckpt500: none before the kill) steps — the issue's 50 and 500 scaled
to this 80-step run, whose target falls near step 30 and a relaunch onto 3 ranks
from the latest checkpoint (psar_exp.runner.run_with_restarts).

Time to target: worker 0's step_s (steps.csv) summed up to the first
evaluation (eval.csv, every 10 steps) whose test accuracy reaches TARGET.
After a relaunch: the killed attempt's summed step_s, plus the relaunched
attempt's overhead (its wall seconds, start-up, restore and evaluation
included, minus its summed step_s), plus its step_s up to the target; the
`lost_s` column is the first two. A cell is the median over the reps that
reached the target; the winner of each row is marked in bold.
"""

import argparse
import csv
import glob
import os
import statistics
import time

from psar_exp import ROOT, runner
from psar_exp.io import read_csv, write_text

YAML = os.path.join(ROOT, "experiments", "where_ps_wins.yaml")
TARGET = 0.85
STEPS = 80
WORKERS = 4
KILL_STEP = int(0.3 * STEPS)
PS_BACKENDS = {
    "ps_bsp": [],
    "ps_ssp": ["ps.consistency=ssp", "ps.staleness=2"],
    "ps_asp": ["ps.consistency=asp"],
    "ps_backup": ["ps.backup_workers=1"],
}
ALLREDUCE_BACKENDS = ["ring", "halving_doubling", "hierarchical"]
COLUMNS = list(PS_BACKENDS) + ALLREDUCE_BACKENDS
# Columns other experiments fill (their CSVs beside runs.csv); shown empty until then.
SIBLING_COLUMNS = {"ps_sparse": "sparse PS (its own experiment)",
                   "zero": "ZeRO (its own experiment)"}
SLOW = str(WORKERS)  # the straggler: the last worker's world rank (1 + 3 with the PS's server)
ROWS = {
    "homogeneous": [],
    "slow_2x": ["hetero.slow_factor=2"],
    "slow_4x": ["hetero.slow_factor=4"],
    "delay_exponential": ["hetero.delay.distribution=exponential", "hetero.delay.mean=5ms"],
    "delay_pareto": ["hetero.delay.distribution=pareto", "hetero.delay.mean=5ms",
                     "hetero.delay.pareto_shape=1.5"],
    "fail_ckpt10": [],
    "fail_ckpt500": [],
}
FIELDS = ["row", "backend", "rep", "status", "target_step", "time_to_target_s", "final_accuracy",
          "lost_s", "restarts"]


def sets_for(row, backend):
    """(ranks, --set list) of one cell."""
    ps = backend in PS_BACKENDS
    workers = WORKERS + (1 if backend == "ps_backup" else 0)
    ranks = workers + (1 if ps else 0)
    sets = [f"sync.backend={'ps' if ps else backend}"] + PS_BACKENDS.get(backend, [])
    # The slow worker: world rank of the last of the first WORKERS workers.
    slow_rank = WORKERS if ps else WORKERS - 1
    if row.startswith("slow_"):
        sets.append(f"hetero.slow_ranks=[{slow_rank}]")
    sets += ROWS.get(row, [])
    if row.startswith("fail_"):
        sets += [f"hetero.kill_rank={ranks - 1}", f"hetero.kill_step={KILL_STEP}"]
        if ps:
            sets += ["ps.on_worker_failure=continue", "ps.timeout=4s", "sync.timeout=2s"]
        else:
            sets.append(f"train.checkpoint_every={10 if row == 'fail_ckpt10' else 500}")
    return ranks, sets


def worker0(run_dir, upto=None):
    """{step: step_s} of worker 0, steps ≤ upto."""
    out = {}
    for r in read_csv(os.path.join(run_dir, "steps.csv")):
        if r["rank"] == "0" and (upto is None or int(r["step"]) <= upto):
            out[int(r["step"])] = float(r["step_s"])
    return out


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
    lock = ["flock", runner.MEASURE_LOCK]
    fields = {"lost_s": "0", "restarts": "0"}

    def command(n, resume, extra=()):
        mca = [("orte_enable_recovery", 1)] if backend in PS_BACKENDS and row.startswith("fail_") else []
        cmd = lock + runner.mpirun_prefix(n, mca) + [psar, "train", YAML, "--quiet", "--out", run_dir]
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
                killed["s"] = sum(worker0(run_dir).values())
            else:
                killed["wall"] = time.monotonic() - start
            return done

        attempts = runner.run_with_restarts(lambda n, resume: command(n, resume), ranks, run_dir,
                                            max_restarts=1, relaunch_sets=["hetero.kill_rank=-1"],
                                            launch=launch)
        resumed = attempts[-1].resumed_from or 0
        target, seconds, final = time_to_target(run_dir, resumed)
        all_steps = sum(v for k, v in worker0(run_dir).items() if k > resumed)
        overhead = killed.get("wall", 0) - all_steps
        lost = killed.get("s", 0) + max(overhead, 0)
        fields.update(lost_s=f"{lost:.3f}", restarts=str(len(attempts) - 1))
        seconds += lost
    else:
        runner.run(command(ranks, False))
        target, seconds, final = time_to_target(run_dir)
    fields.update(status="ok" if target else "no_target", target_step=str(target or ""),
                  time_to_target_s=f"{seconds:.3f}" if target else "",
                  final_accuracy=f"{final:.4f}")
    return fields


def measure(args):
    data = os.path.join(args.out, "data")
    os.makedirs(data, exist_ok=True)
    path = os.path.join(data, "runs.csv")
    rows = [r for r in args.rows.split(",") if r] if args.rows else list(ROWS)
    before = runner.machine_state()
    start = time.monotonic()
    new = not os.path.exists(path)
    with open(path, "a", newline="") as f:
        w = csv.DictWriter(f, FIELDS)
        if new:
            w.writeheader()
        for rep in range(1, args.reps + 1):
            for row in rows:
                for backend in (args.columns.split(",") if args.columns else COLUMNS):
                    if row == "fail_ckpt500" and backend in PS_BACKENDS:
                        continue  # no checkpoints on the PS side: fail_ckpt10's runs
                    if args.budget_s and time.monotonic() - start > args.budget_s:
                        print(f"where_ps_wins: --budget-s {args.budget_s} spent; "
                              f"{row} {backend} rep {rep} and what follows not run")
                        break
                    run_dir = os.path.join(args.out, "runs", f"{row}_{backend}_{rep}")
                    try:
                        fields = one(args.psar, row, backend, run_dir)
                    except (runner.RunError, OSError, KeyError, ValueError) as e:
                        print(f"where_ps_wins: {row} {backend} rep {rep} failed: {e}"[:2000])
                        fields = {"status": "failed", "target_step": "", "time_to_target_s": "",
                                  "final_accuracy": "", "lost_s": "", "restarts": ""}
                    w.writerow({"row": row, "backend": backend, "rep": rep, **fields})
                    f.flush()
    write_text(os.path.join(data, "machine.txt"), runner.machine_note(before) + "\n")


def table(folder):
    """table.md's text from every data/*.csv of `folder`."""
    cells = {}
    for path in sorted(glob.glob(os.path.join(folder, "data", "*.csv"))):
        for r in read_csv(path):
            cells.setdefault((r["row"], r["backend"]), []).append(r)
    rows = [r for r in ROWS if any(k[0] == r for k in cells)]
    rows += sorted({k[0] for k in cells} - set(rows))
    columns = COLUMNS + [c for c in SIBLING_COLUMNS] + sorted(
        {k[1] for k in cells} - set(COLUMNS) - set(SIBLING_COLUMNS))
    out = ["# Where each wins: time to a target test accuracy\n",
           f"Written by `python3 -m psar_exp where_ps_wins report` from data/*.csv. Each cell: "
           f"seconds of worker 0's steps until the first evaluation at test accuracy ≥ "
           f"{TARGET:.2f} ({STEPS} steps, evaluated every 10; experiments/where_ps_wins.yaml, "
           f"d = {WORKERS} workers), the median over the runs that reached it, with "
           f"(reached/runs); **bold**: the row's fastest. Failure rows: a worker killed at step "
           f"{KILL_STEP} — the PS goes on without it (ps.on_worker_failure continue), an "
           f"allreduce backend is relaunched onto {WORKERS - 1} ranks from its latest checkpoint "
           f"(every 10 steps, or 500: none, from step 0), its time including the killed "
           f"attempt's steps and the relaunch; the PS, which checkpoints nothing there, is "
           f"measured in fail_ckpt10 only. `—`: not measured. "
           + ", ".join(f"`{c}`: {why}" for c, why in SIBLING_COLUMNS.items())
           + ": columns other experiments fill. Machine state: data/machine.txt.\n"]
    out.append("| regime | " + " | ".join(columns) + " |")
    out.append("|---|" + "---|" * len(columns))
    for row in rows:
        medians = {}
        for c in columns:
            runs = cells.get((row, c), [])
            times = [float(r["time_to_target_s"]) for r in runs if r["status"] == "ok"]
            if times:
                medians[c] = (statistics.median(times), len(times), len(runs))
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
    lost = {}
    for (row, c), runs in cells.items():
        for r in runs:
            if row.startswith("fail_") and r.get("lost_s"):
                lost.setdefault((row, c), []).append(float(r["lost_s"]))
    if lost:
        out.append("\nTime lost to the failure, allreduce relaunch (median s: the killed "
                   "attempt's steps + the relaunch overhead):\n")
        out.append("| regime | backend | lost s | runs |")
        out.append("|---|---|---|---|")
        for (row, c), v in sorted(lost.items()):
            if any(x > 0 for x in v):
                out.append(f"| {row} | {c} | {statistics.median(v):.2f} | {len(v)} |")
    return "\n".join(out) + "\n"


def regenerate(folder, results=None):
    """table.md from the committed CSVs (psar_exp check); no runs."""
    return {"table.md": table(folder)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("part", choices=["measure", "report"])
    ap.add_argument("--psar", default=None)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rows", default="", help="comma-separated rows (default: all)")
    ap.add_argument("--columns", default="", help="comma-separated backends (default: all)")
    ap.add_argument("--budget-s", type=float, default=0,
                    help="start no run after this many seconds (0: no limit); the table counts "
                         "the runs each cell got")
    ap.add_argument("--out", help="default: runs/where_ps_wins, or results/where_ps_wins "
                                  "with --reference")
    runner.add_output_flags(ap)
    args = ap.parse_args()
    args.out = args.out or os.path.join(runner.output_root(args), "where_ps_wins")
    os.makedirs(args.out, exist_ok=True)
    if args.part == "report":
        write_text(os.path.join(args.out, "table.md"), table(args.out))
        return
    args.psar = runner.psar_binary(args.psar)
    state = runner.begin(args.out, args.exploratory, args.psar, reference=args.reference)
    measure(args)
    write_text(os.path.join(args.out, "table.md"), table(args.out))
    runner.record_provenance(args.out, state)


if __name__ == "__main__":
    runner.main_guard("where_ps_wins.py", main)
