#!/usr/bin/python3
"""The sparse parameter server (docs/sparse.md) against dense sync on the
DLRM of experiments/sparse_ps.yaml: bytes per step and time to a target
test accuracy (results/sparse_ps/).

    python3 -m psar_exp sparse_ps measure [--psar PATH] [--reps 3] [--rows 100000,...]
                                          [--skews 0.6,1.2] [--workers 4]
                                          [--reference | --exploratory]
    python3 -m psar_exp sparse_ps report [--out DIR]
    python3 -m psar_exp sparse_ps where [--out DIR]

measure trains, for every table size (model.tables[0] rows of 4 floats)
and Zipf skew, each backend below `--reps` times (the backends take turns
within a repetition), each run under `flock /tmp/psar-measure.lock`, with
N = --workers workers, and appends one line per run to runs.csv:

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

It also appends the machine state before and after each invocation to
machine.md (load average, steal). where (and measure --reference) writes
results/where_ps_wins/data/runs_sparse.csv from runs.csv in that table's
columns (row = sparse_<rows>_s<skew>; lost_s = restarts = 0).

report writes tables.md from runs.csv (no runs): per (rows, skew, backend)
the medians over the reps, and the crossover density — the touched rows
per worker per step (from ps_sparse's pushed bytes: n = (bytes_sent −
4·dense floats)/(8 + 4·dim)) over the table's rows — at which the sparse
server's bytes per worker equal the dense ring's (linear in the density
between the measured points, on the measured bytes per touched row).
"""

import os
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
           "final_accuracy", "step_s", "bytes_sent", "bytes_recv", "floats"]
WHERE_COLUMNS = ["row", "backend", "rep", "status", "target_step", "time_to_target_s",
                 "final_accuracy", "lost_s", "restarts"]


def one_run(args, rows, skew, backend, rep):
    servers, sets = BACKENDS[backend]
    run_dir = os.path.join(args.out, "runs", f"r{rows}_s{skew}_{backend}_{rep}")
    runner.locked_train(args.psar, args.workers + servers, YAML, run_dir,
                        sets + [f"model.tables=[{rows}, {SMALL_TABLE}]", f"data.zipf_skew={skew}",
                                f"train.steps={args.steps}"])
    steps = [r for r in read_csv(os.path.join(run_dir, "steps.csv")) if int(r["rank"]) == 0]
    step_s = {int(r["step"]): float(r["step_s"]) for r in steps}
    later = [r for r in steps if int(r["step"]) > 2] or steps
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
            "floats": floats}


def where_rows(rows):
    return [{"row": f"sparse_{r['rows']}_s{r['skew']}", "backend": r["backend"], "rep": r["rep"],
             "status": r["status"], "target_step": r["target_step"],
             "time_to_target_s": r["time_to_target_s"], "final_accuracy": r["final_accuracy"],
             "lost_s": 0, "restarts": 0} for r in rows]


def measure(args):
    path = os.path.join(args.out, "runs.csv")
    rows = read_csv(path) if os.path.exists(path) else []
    before = runner.machine_state()
    for n in args.rows:
        for skew in args.skews:
            for rep in range(1, args.reps + 1):
                names = list(BACKENDS)
                if rep % 2 == 0:
                    names.reverse()
                for backend in names:
                    rows.append(one_run(args, n, skew, backend, rep))
                    write_csv(path, rows, COLUMNS)
    # One line per invocation (a folder may combine several: e.g. 10^7 rows at fewer reps).
    note = os.path.join(args.out, "machine.md")
    earlier = open(note).read() if os.path.exists(note) else ""
    write_text(note, earlier + f"- rows {','.join(map(str, args.rows))}, skews "
               f"{','.join(map(str, args.skews))}, {args.reps} reps, {args.steps} steps: "
               + runner.machine_note(before) + "\n")
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
                    "floats": int(rs[0]["floats"])}
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
                    f"{m['reached']}/{m['reps']}"])
    return md_table(["rows", "skew", "backend", "reps", "touched rows / rows (per worker-step)",
                     "MB sent+received per step (worker 0)", "÷ ring", "step ms", "÷ ring",
                     f"s to test accuracy {TARGET}", "reached"], out)


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


def tables(folder):
    path = os.path.join(folder, "runs.csv")
    parts = ["# Sparse parameter server: tables\n\n",
             "Written by `python3 -m psar_exp sparse_ps report` from runs.csv. Medians over "
             "the reps; \"÷ ring\" is against the dense ring in the same (rows, skew).\n\n"]
    if os.path.exists(path):
        med = medians(read_csv(path))
        parts += [table_rows(med), "\n## Crossover density (bytes)\n\n", crossover(med)]
    return "".join(parts)


def regenerate(folder, results=None):
    """tables.md from the committed runs.csv (psar_exp check)."""
    return {"tables.md": tables(folder)}


def report(args):
    write_text(os.path.join(args.out, "tables.md"), tables(args.out))


def measure_and_report(args):
    measure(args)
    report(args)


def launcher():
    launch = runner.Launcher(
        __doc__, "sparse_ps", runs={"measure": measure_and_report},
        reports={"report": report,
                 "where": lambda args: write_where(read_csv(os.path.join(args.out, "runs.csv")))})
    ap = launch.parser
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--rows", default=",".join(map(str, ROWS)),
                    type=lambda text: [int(x) for x in text.split(",")])
    ap.add_argument("--skews", default=",".join(map(str, SKEWS)),
                    type=lambda text: [float(x) for x in text.split(",")])
    return launch


if __name__ == "__main__":
    runner.main_guard("sparse_ps.py", launcher().main)
