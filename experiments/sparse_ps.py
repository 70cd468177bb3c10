#!/usr/bin/python3
"""The sparse parameter server (docs/sparse.md) against dense sync on the
DLRM of experiments/sparse_ps.yaml: bytes per step and time to a target
test accuracy (results/sparse_ps/).

    python3 -m psar_exp sparse_ps measure [--psar PATH] [--reps 3] [--rows 100000,...]
                                          [--skews 0.6,1.2] [--workers 4]
                                          [--backends ps_sparse,...]
                                          [--reference | --exploratory]
    python3 -m psar_exp sparse_ps sweep [--psar PATH] [--reps 3] [--reference | --exploratory]
    python3 -m psar_exp sparse_ps report [--out DIR]
    python3 -m psar_exp sparse_ps where [--out DIR]

measure trains, for every table size (model.tables[0] rows of 4 floats)
and Zipf skew, each backend below `--reps` times (the backends take turns
within a repetition), each run under `flock /tmp/psar-measure.lock`, with
N = --workers workers (--backends: only those), and appends one line per
run to runs.csv, replacing an earlier line of the same rows, skew, backend
and rep:

  rows,skew,backend,rep,status,target_step,time_to_target_s,final_accuracy,
  step_s,bytes_sent,bytes_recv,floats

Backends: ps_sparse (--sync ps, ps.sparse: true, one dedicated server),
ps_dense (the same, ps.sparse: false), ring (sync.sparse_tables: dense),
ring_gather (ring, the all-gather of (ids, rows) where cheaper) and hybrid
(the sparse server for the tables, ring for the dense layers). step_s,
bytes_sent and bytes_recv: worker 0's medians over the steps after the
first two (steps.csv); floats: the model's parameters (axes.csv dp_floats).
Time to target: worker 0's step_s summed up to the first evaluation
(eval.csv, every 10 steps) whose test accuracy reaches TARGET.

state_held, state_allocated: the shards' optimizer state and touched-row
index in bytes (their `served:` log lines; empty without servers).

sweep trains every backend on one table of SWEEP_ROWS rows with uniform
ids, the batch growing from 64 to 131072 samples (each worker touching
~0.2 % to ~96 % of the rows), and appends to sweep.csv:

  batch,backend,rep,step_s,bytes_sent,bytes_recv,floats

report's last section: per batch the density, bytes and step times, and
the density from which the dense ring's (and dense server's) bytes and step
time stop losing to the sparse server's.

It also appends the machine state before and after each invocation, and
the commit, to machine.md (load average, steal). where (and measure --reference) writes
results/where_ps_wins/data/runs_sparse.csv from runs.csv in that table's
columns (row = sparse_<rows>_s<skew>; lost_s = restarts = 0).

report writes tables.md from runs.csv (no runs): per (rows, skew, backend)
the medians over the reps, and the crossover density — the touched rows
per worker per step (from ps_sparse's pushed bytes: n = (bytes_sent −
4·dense floats)/(8 + 4·dim)) over the table's rows — at which the sparse
server's bytes per worker equal the dense ring's (linear in the density
between the measured points, on the measured bytes per touched row).
"""

import argparse
import os
import re
import statistics

from psar_exp import ROOT, runner
from psar_exp.io import md_table, read_csv, write_csv, write_text

YAML = os.path.join(ROOT, "experiments", "sparse_ps.yaml")
TARGET = 0.75
DIM = 4
SMALL_TABLE = 1000  # the second table's rows (sparse_ps.yaml)
ROWS = [100000, 1000000, 10000000]
SKEWS = [0.6, 1.2]
BACKENDS = {
    "ps_sparse": (1, ["sync.backend=ps", "ps.sparse=true"]),
    "ps_dense": (1, ["sync.backend=ps"]),
    "ring": (0, ["sync.backend=ring", "sync.sparse_tables=dense"]),
    "ring_gather": (0, ["sync.backend=ring"]),
    "hybrid": (1, ["sync.backend=hybrid", "sync.algorithm=ring"]),
}
COLUMNS = ["rows", "skew", "backend", "rep", "status", "target_step", "time_to_target_s",
           "final_accuracy", "step_s", "bytes_sent", "bytes_recv", "floats", "state_held",
           "state_allocated"]
# The density sweep: one table of SWEEP_ROWS rows, uniform ids (skew 0),
# the batch growing so that each worker touches from ~0.2 % to ~96 % of it.
SWEEP_ROWS = 10000
SWEEP_BATCHES = [64, 512, 4096, 32768, 131072]
SWEEP_STEPS = 12
SWEEP_COLUMNS = ["batch", "backend", "rep", "step_s", "bytes_sent", "bytes_recv", "floats"]
STATE_LINE = re.compile(r"served: .* state_bytes_held=(\d+) state_bytes_allocated=(\d+)")
WHERE_COLUMNS = ["row", "backend", "rep", "status", "target_step", "time_to_target_s",
                 "final_accuracy", "lost_s", "restarts"]


def train(args, backend, run_dir, sets):
    """One psar train of `backend`; returns the shards' state bytes (held,
    allocated), summed from their `served:` log lines ("" without servers)."""
    servers, backend_sets = BACKENDS[backend]
    cmd = runner.locked_train_command(args.psar, args.workers + servers, YAML, run_dir,
                                      backend_sets + sets)
    done = runner.launch(cmd, env=dict(os.environ, PSAR_LOG="info", PSAR_LOG_SUBSYS="ps"))
    if done.returncode != 0:
        raise runner.RunError(f"{run_dir} failed ({done.returncode}):\n{done.stdout[-4000:]}"
                              f"{done.stderr[-4000:]}")
    shards = [(int(a), int(b)) for a, b in STATE_LINE.findall(done.stderr)]
    if len(shards) != servers:
        raise runner.RunError(f"{run_dir}: {len(shards)} shard lines in the log, expected {servers}")
    if not servers:
        return "", ""
    return sum(a for a, _ in shards), sum(b for _, b in shards)


def worker0_steps(run_dir):
    """Worker 0's steps.csv rows, and those after the first two."""
    steps = [r for r in read_csv(os.path.join(run_dir, "steps.csv")) if int(r["rank"]) == 0]
    return steps, [r for r in steps if int(r["step"]) > 2] or steps


def one_run(args, rows, skew, backend, rep):
    run_dir = os.path.join(args.out, "runs", f"r{rows}_s{skew}_{backend}_{rep}")
    held, allocated = train(args, backend, run_dir,
                            [f"model.tables=[{rows}, {SMALL_TABLE}]", f"data.zipf_skew={skew}",
                             f"train.steps={args.steps}"])
    steps, later = worker0_steps(run_dir)
    step_s = {int(r["step"]): float(r["step_s"]) for r in steps}
    target_step, elapsed, final = "", "", ""
    for e in read_csv(os.path.join(run_dir, "eval.csv")):
        final = float(e["test_accuracy"])
        if target_step == "" and final >= TARGET:
            target_step = int(e["step"])
            elapsed = sum(s for k, s in step_s.items() if k <= target_step)
    floats = max(int(r["dp_floats"]) for r in read_csv(os.path.join(run_dir, "axes.csv")))
    return {"rows": rows, "skew": skew, "backend": backend, "rep": rep,
            "status": "ok" if target_step != "" else "no_target", "target_step": target_step,
            "time_to_target_s": f"{elapsed:.3f}" if elapsed != "" else "",
            "final_accuracy": f"{final:.4f}" if final != "" else "",
            "step_s": f"{statistics.median(float(r['step_s']) for r in later):.6f}",
            "bytes_sent": int(statistics.median(int(r["bytes_sent"]) for r in later)),
            "bytes_recv": int(statistics.median(int(r["bytes_recv"]) for r in later)),
            "floats": floats, "state_held": held, "state_allocated": allocated}


def sweep_run(args, batch, backend, rep):
    run_dir = os.path.join(args.out, "runs", f"sweep_b{batch}_{backend}_{rep}")
    train(args, backend, run_dir,
          [f"model.tables=[{SWEEP_ROWS}]", "data.zipf_skew=0", f"train.batch_size={batch}",
           f"data.synthetic_samples={max(batch, 4096)}", f"train.steps={SWEEP_STEPS}",
           "train.eval_every=0"])
    _, later = worker0_steps(run_dir)
    floats = max(int(r["dp_floats"]) for r in read_csv(os.path.join(run_dir, "axes.csv")))
    return {"batch": batch, "backend": backend, "rep": rep,
            "step_s": f"{statistics.median(float(r['step_s']) for r in later):.6f}",
            "bytes_sent": int(statistics.median(int(r["bytes_sent"]) for r in later)),
            "bytes_recv": int(statistics.median(int(r["bytes_recv"]) for r in later)),
            "floats": floats}


def sweep(args):
    """The density sweep (sweep.csv): every backend at every batch of
    SWEEP_BATCHES, --reps times, the backends taking turns."""
    path = os.path.join(args.out, "sweep.csv")
    rows = read_csv(path) if os.path.exists(path) else []
    before = args.state
    for batch in SWEEP_BATCHES:
        for rep in range(args.first_rep, args.first_rep + args.reps):
            names = list(BACKENDS)
            if rep % 2 == 0:
                names.reverse()
            for backend in names:
                rows.append(sweep_run(args, batch, backend, rep))
                write_csv(path, rows, SWEEP_COLUMNS)
    note_machine(args, f"density sweep ({SWEEP_ROWS} rows, skew 0, batches "
                 f"{','.join(map(str, SWEEP_BATCHES))}), {args.reps} reps, {SWEEP_STEPS} steps",
                 before)


def note_machine(args, what, before):
    """One line per invocation in machine.md (a folder may combine several)."""
    note = os.path.join(args.out, "machine.md")
    earlier = open(note).read() if os.path.exists(note) else ""
    write_text(note, earlier + f"- {what}, at {(before.get('commit') or 'unknown')[:12]}: "
               + runner.machine_note(before) + "\n")


def where_rows(rows):
    return [{"row": f"sparse_{r['rows']}_s{r['skew']}", "backend": r["backend"], "rep": r["rep"],
             "status": r["status"], "target_step": r["target_step"],
             "time_to_target_s": r["time_to_target_s"], "final_accuracy": r["final_accuracy"],
             "lost_s": 0, "restarts": 0} for r in rows]


def measure(args):
    path = os.path.join(args.out, "runs.csv")
    rows = read_csv(path) if os.path.exists(path) else []
    before = args.state
    for n in args.rows:
        for skew in args.skews:
            for rep in range(args.first_rep, args.first_rep + args.reps):
                names = list(args.backends)
                if rep % 2 == 0:
                    names.reverse()
                for backend in names:
                    rows = [r for r in rows if (int(r["rows"]), float(r["skew"]), r["backend"],
                                                int(r["rep"])) != (n, skew, backend, rep)]
                    rows.append(one_run(args, n, skew, backend, rep))
                    write_csv(path, rows, COLUMNS)
    note_machine(args, f"rows {','.join(map(str, args.rows))}, skews "
                 f"{','.join(map(str, args.skews))}, backends {','.join(args.backends)}, reps "
                 f"{args.first_rep}..{args.first_rep + args.reps - 1}, {args.steps} steps", before)
    if args.reference:
        write_where(rows)


def write_where(rows):
    where = os.path.join(ROOT, "results", "where_ps_wins", "data", "runs_sparse.csv")
    write_csv(where, where_rows(rows), WHERE_COLUMNS)


def medians(rows):
    """(rows, skew, backend) -> {column: median over the reps}."""
    out = {}
    for r in rows:
        out.setdefault((int(r["rows"]), float(r["skew"]), r["backend"]), []).append(r)
    med = {}
    for key, rs in out.items():
        ok = [float(r["time_to_target_s"]) for r in rs if r["status"] == "ok"]
        med[key] = {"reps": len(rs), "reached": len(ok),
                    "time_to_target_s": statistics.median(ok) if ok else None,
                    "step_s": statistics.median(float(r["step_s"]) for r in rs),
                    "bytes": statistics.median(int(r["bytes_sent"]) + int(r["bytes_recv"])
                                               for r in rs),
                    "bytes_sent": statistics.median(int(r["bytes_sent"]) for r in rs),
                    "floats": int(rs[0]["floats"]),
                    "state": (statistics.median(int(r["state_held"]) for r in rs),
                              statistics.median(int(r["state_allocated"]) for r in rs))
                    if rs[0].get("state_held") else None}
    return med


def table_rows(med):
    out = []
    for (n, skew, backend), m in sorted(med.items()):
        ring = med.get((n, skew, "ring"))
        tables = (n + SMALL_TABLE) * DIM
        sparse = med.get((n, skew, "ps_sparse"))
        touched = ((sparse["bytes_sent"] - 4 * (sparse["floats"] - tables)) / (8 + 4 * DIM)
                   if sparse else None)
        out.append([str(n), f"{skew:g}", backend, f"{m['reps']}",
                    f"{touched / n:.2e}" if touched is not None else "",
                    f"{m['bytes'] / 1e6:.3f}",
                    f"{m['bytes'] / ring['bytes']:.3f}" if ring else "",
                    f"{1e3 * m['step_s']:.1f}",
                    f"{m['step_s'] / ring['step_s']:.3f}" if ring else "",
                    f"{m['time_to_target_s']:.2f}" if m["time_to_target_s"] is not None else "—",
                    f"{m['reached']}/{m['reps']}",
                    f"{m['state'][0] / 1e6:.3f} / {m['state'][1] / 1e6:.3f}" if m["state"] else ""])
    return md_table(["rows", "skew", "backend", "reps", "touched rows / rows (per worker-step)",
                     "MB sent+received per step (worker 0)", "÷ ring", "step ms", "÷ ring",
                     f"s to test accuracy {TARGET}", "reached",
                     "server state MB held / allocated"], out)


def crossover(med):
    """The touched density at which the sparse server's bytes per worker
    equal the dense ring's, per skew: ps_sparse's measured bytes per touched
    row (sent + received) against the ring's measured bytes per table row."""
    lines = []
    for skew in sorted({k[1] for k in med}):
        per_row, ring_per_row = [], []
        for (n, s, b), m in med.items():
            if s != skew or b != "ps_sparse" or (n, s, "ring") not in med:
                continue
            tables = (n + SMALL_TABLE) * DIM
            dense_bytes = 4 * (m["floats"] - tables)
            touched = (m["bytes_sent"] - dense_bytes) / (8 + 4 * DIM)
            if touched <= 0:
                continue
            per_row.append((m["bytes"] - 2 * dense_bytes) / touched)
            ring = med[(n, s, "ring")]  # its bytes split over the floats evenly
            ring_per_row.append(ring["bytes"] * tables / ring["floats"] / (n + SMALL_TABLE))
        if not per_row:
            continue
        c = statistics.median(per_row)
        d = statistics.median(ring_per_row)
        lines.append(f"- skew {skew:g}: the sparse server moves {c:.1f} bytes per row a worker "
                     f"touches (push and pull), the dense ring {d:.1f} bytes per table row: "
                     f"dense allreduce stops losing on bytes above a touched density of "
                     f"{d / c:.3f} of the table per worker-step.\n")
    return "".join(lines)


def sweep_table(rows):
    """Per batch: worker 0's touched density (from ps_sparse's pushed bytes),
    every backend's bytes and step time (medians over the reps), and the
    density at which the dense ring's step time first stops losing to the
    sparse server's."""
    runs = {}
    for r in rows:
        runs.setdefault((int(r["batch"]), r["backend"]), []).append(r)
    med = {k: {"step_s": statistics.median(float(r["step_s"]) for r in rs),
               "bytes": statistics.median(int(r["bytes_sent"]) + int(r["bytes_recv"]) for r in rs),
               "bytes_sent": statistics.median(int(r["bytes_sent"]) for r in rs),
               "floats": int(rs[0]["floats"]), "reps": len(rs)} for k, rs in runs.items()}
    tables = SWEEP_ROWS * DIM
    out, density = [], {}
    for batch in sorted({b for b, _ in med}):
        sparse = med.get((batch, "ps_sparse"))
        if not sparse:
            continue
        touched = (sparse["bytes_sent"] - 4 * (sparse["floats"] - tables)) / (8 + 4 * DIM)
        density[batch] = touched / SWEEP_ROWS
        for backend in BACKENDS:
            m = med.get((batch, backend))
            if m:
                out.append([str(batch), f"{density[batch]:.4f}", backend, str(m["reps"]),
                            f"{m['bytes'] / 1e3:.1f}", f"{m['bytes'] / sparse['bytes']:.3f}",
                            f"{1e3 * m['step_s']:.2f}", f"{m['step_s'] / sparse['step_s']:.3f}"])
    text = md_table(["batch", "touched rows / rows (per worker-step)", "backend", "reps",
                     "kB sent+received per step (worker 0)", "÷ ps_sparse", "step ms",
                     "÷ ps_sparse"], out)
    for dense in ("ring", "ps_dense"):
        for what, key in (("bytes", "bytes"), ("step time", "step_s")):
            won = [b for b in sorted(density) if (b, dense) in med and
                   med[(b, dense)][key] <= med[(b, "ps_sparse")][key]]
            lost = [f"{density[b]:.4f}" for b in sorted(density)
                    if (b, dense) in med and b not in won]
            text += (f"\n- {dense} {what}: at or below the sparse server's first at a touched "
                     f"density of {density[won[0]]:.4f} (batch {won[0]})" if won else
                     f"\n- {dense} {what}: never at or below the sparse server's")
            text += (f"; above it at the densities {', '.join(lost)}." if lost else
                     "; never above it.")
    return text + "\n"


def tables(folder):
    path = os.path.join(folder, "runs.csv")
    parts = ["# Sparse parameter server: tables\n\n",
             "Written by `python3 -m psar_exp sparse_ps report` from runs.csv. Medians over "
             "the reps; \"÷ ring\" is against the dense ring in the same (rows, skew).\n\n"]
    if os.path.exists(path):
        med = medians(read_csv(path))
        parts += [table_rows(med), "\n## Crossover density (bytes)\n\n", crossover(med)]
    path = os.path.join(folder, "sweep.csv")
    if os.path.exists(path):
        parts += [f"\n## Density sweep ({SWEEP_ROWS} rows, uniform ids, the batch growing)\n\n",
                  sweep_table(read_csv(path))]
    return "".join(parts)


def regenerate(folder, results=None):
    """tables.md from the committed runs.csv (psar_exp check)."""
    return {"tables.md": tables(folder)}


def report(args):
    write_text(os.path.join(args.out, "tables.md"), tables(args.out))


def measure_and_report(args):
    measure(args)
    report(args)


def sweep_and_report(args):
    sweep(args)
    report(args)


def backend_list(text):
    names = text.split(",")
    unknown = [b for b in names if b not in BACKENDS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown {','.join(unknown)} (known: {','.join(BACKENDS)})")
    return names


def launcher():
    launch = runner.Launcher(
        __doc__, "sparse_ps", runs={"measure": measure_and_report, "sweep": sweep_and_report},
        reports={"report": report,
                 "where": lambda args: write_where(read_csv(os.path.join(args.out, "runs.csv")))})
    ap = launch.parser
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--first-rep", type=int, default=1, help="number the reps from here "
                    "(a later invocation adding reps to a folder)")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--rows", default=",".join(map(str, ROWS)),
                    type=lambda text: [int(x) for x in text.split(",")])
    ap.add_argument("--skews", default=",".join(map(str, SKEWS)),
                    type=lambda text: [float(x) for x in text.split(",")])
    ap.add_argument("--backends", default=",".join(BACKENDS), type=backend_list,
                    help="measure only these (comma-separated, in this order)")
    return launch


if __name__ == "__main__":
    runner.main_guard("sparse_ps.py", launcher().main)
