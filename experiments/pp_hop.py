#!/usr/bin/python3
"""The pipeline points that miss the 10 % bubble target (interleaved v = 4
and ZB-H1 at m = 32, p = 4, the synthetic stages of pp_interleaved_m.yaml
and pp_bubble_m.yaml), run by two psar binaries in one sitting: a base
binary and the tree's own, alternating (the tree's first on even
repetitions), each run under the host's measurement lock, with the load
average, vmstat's steal column and the CPU pressure over the run recorded
beside it. Writes each run's pipeline.csv under data/, one row per run in
data/runs.csv and README.md's table (medians of the repetitions).

    experiments/pp_hop.py --base PSAR [--base-no-overwrite] [--reps 3]
                          [--high-priority] [--trace]
                          [--reference | --exploratory] [--out DIR]

--base-no-overwrite runs a base binary from before `psar train` had
--overwrite (before the one-model redesign): its run directories are
removed first and the flag is left out of its command.

--trace adds one traced run per binary and point (train.trace) and, from
the traces, where a hop's microseconds go: the producer's compute end to its
send posted, the send, the consumer noticing the message, the consumer's
compute start. --high-priority runs psar in its own autogroup at nice -19
(runner.run), which other sessions' work does not outrank.
"""

import json
import os
import shutil
import statistics
import time
from collections import Counter, defaultdict

from psar_exp import generated, runner
from psar_exp.io import read_csv, write_csv
from pp_measure import stall_us

HERE = os.path.dirname(os.path.abspath(__file__))
# (label, experiment yaml, --set overrides)
POINTS = [("interleaved v=4 m=32", "pp_interleaved_m", ["parallel.chunks=4", "parallel.microbatches=32"]),
          ("zb_h1 m=32", "pp_bubble_m", ["parallel.schedule=zb_h1", "parallel.microbatches=32"])]
TOLERANCE = 0.10  # the target: measured bubble within 10 % of the closed form
FIELDS = ["point", "side", "commit", "rep", "bubble", "bubble_formula", "bubble_sim",
          "bubble_sim_hop", "hop_latency_s", "send_s", "recv_wait_s", "compute_s",
          "cpu_pressure", "load1", "steal"]
COMPUTE = ("forward", "backward", "backward_input", "backward_weight")


def slug(label):
    return label.replace(" ", "_").replace("=", "")


def vmstat_steal():
    """The steal column (%) of `vmstat 1 3`'s last line, or '' without vmstat."""
    try:
        out = runner.run(["vmstat", "1", "3"], echo=False)
    except OSError:
        return ""
    lines = out.splitlines()
    head, last = lines[1].split(), lines[-1].split()
    return last[head.index("st")] if "st" in head else ""


def run_once(binary, label, exp, sets, out, high_priority, trace, no_overwrite=False):
    """One run of a point; returns its pipeline row (stage 'all'), CPU pressure, load, steal.
    `no_overwrite`: the binary predates --overwrite; `out` is removed instead."""
    load = os.getloadavg()[0]
    steal = vmstat_steal()
    point = runner.Point(os.path.basename(out), 4, sets + (["train.trace=true"] if trace else []))
    cmd = ["flock", runner.MEASURE_LOCK] + runner.train_command(
        binary, os.path.join(HERE, exp + ".yaml"), out, point, ["--quiet"])
    if no_overwrite:
        cmd.remove("--overwrite")
        shutil.rmtree(out, ignore_errors=True)
    total0, t0 = stall_us()[0], time.time()
    runner.run(cmd, high_priority=high_priority)
    pressure = 100 * (stall_us()[0] - total0) / 1e6 / (time.time() - t0)
    row = next(r for r in read_csv(os.path.join(out, "pipeline.csv")) if r["stage"] == "all")
    return row, pressure, load, steal


def hop_parts(trace_path):
    """Medians (µs) of the parts of a hop in one trace: compute end -> send
    posted, the send, send posted -> receive seen (receivers that were
    waiting), receive seen -> compute start."""
    with open(trace_path) as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    by = defaultdict(list)
    for e in events:
        by[e["pid"]].append(e)
    to_send, send, seen_to_start, notice = [], [], [], []
    sends = defaultdict(list)
    for pid, es in by.items():
        es.sort(key=lambda e: (e["ts"], e["cat"] not in COMPUTE))
        for a, b in zip(es, es[1:]):
            if a["cat"] in COMPUTE and b["cat"] == "send":
                to_send.append(b["ts"] - (a["ts"] + a["dur"]))
            if a["cat"] == "recv" and b["cat"] in COMPUTE:
                seen_to_start.append(b["ts"] - (a["ts"] + a["dur"]))
        for e in es:
            if e["cat"] == "send" and "args" in e:
                send.append(e["dur"])
                a = e["args"]
                sends[(pid, a["peer"], a["microbatch"], a["from_vstage"])].append(e)
    for pid, es in by.items():
        seen = Counter()
        for e in es:
            if e["cat"] != "recv" or "args" not in e:
                continue
            a = e["args"]
            key = (a["peer"], pid, a["microbatch"], a["from_vstage"])
            k, seen[key] = seen[key], seen[key] + 1
            if k < len(sends[key]) and e["ts"] < sends[key][k]["ts"]:  # it waited
                s = sends[key][k]
                notice.append(e["ts"] + e["dur"] - (s["ts"] + s["dur"]))
    med = lambda xs: statistics.median(xs) if xs else float("nan")  # noqa: E731
    return {"compute_end_to_send": med(to_send), "send": med(send),
            "send_to_seen": med(notice), "seen_to_start": med(seen_to_start),
            "hops_waited": len(notice)}


def measure(args, commit_of):
    data = os.path.join(args.out, "data")
    os.makedirs(data, exist_ok=True)
    machine = os.path.join(data, "machine.txt")
    rows, trace_rows = [], []
    sides = {"base": args.base, "new": args.psar}
    for rep in range(1, args.reps + 1):
        for label, exp, sets in POINTS:
            for side in (["new", "base"] if rep % 2 == 0 else ["base", "new"]):
                out = os.path.join(args.tmp, f"{slug(label)}_{side}_rep{rep}")
                with open(machine, "a") as f:
                    f.write(f"## {label} {side} rep {rep}\n")
                    f.write(runner.run(["uptime"], echo=False))
                row, pressure, load, steal = run_once(sides[side], label, exp, sets, out,
                                                      args.high_priority, False,
                                                      side == "base" and args.base_no_overwrite)
                shutil.copy(os.path.join(out, "pipeline.csv"),
                            os.path.join(data, f"{slug(label)}_{side}_rep{rep}.csv"))
                rows.append({"point": label, "side": side, "commit": commit_of[side], "rep": rep,
                             **{k: row[k] for k in FIELDS[4:12]},
                             "cpu_pressure": f"{pressure:.2f}", "load1": f"{load:.2f}",
                             "steal": steal})
                write_csv(os.path.join(data, "runs.csv"), rows, FIELDS)
    if args.trace:
        for label, exp, sets in POINTS:
            for side in ("base", "new"):
                out = os.path.join(args.tmp, f"{slug(label)}_{side}_trace")
                _, pressure, load, steal = run_once(sides[side], label, exp, sets, out,
                                                    args.high_priority, True,
                                                    side == "base" and args.base_no_overwrite)
                parts = hop_parts(os.path.join(out, "trace.json"))
                trace_rows.append({"point": label, "side": side, "commit": commit_of[side],
                                   **{k + "_us": f"{parts[k]:.2f}" for k in (
                                       "compute_end_to_send", "send", "send_to_seen",
                                       "seen_to_start")},
                                   "hops_waited": parts["hops_waited"],
                                   "cpu_pressure": f"{pressure:.2f}", "load1": f"{load:.2f}",
                                   "steal": steal})
                write_csv(os.path.join(data, "hops.csv"), trace_rows)


def table(folder):
    """README's tables from data/runs.csv (and data/hops.csv)."""
    rows = read_csv(os.path.join(folder, "data", "runs.csv"))
    by = defaultdict(list)
    for r in rows:
        by[(r["point"], r["side"])].append(r)
    med = lambda rs, k: statistics.median(float(r[k]) for r in rs)  # noqa: E731
    out = ["| point | binary | commit | runs | measured bubble (median) | closed form | "
           "vs closed form | within 10 % | hop latency (µs) | send_s per step (ms) | "
           "simulated + hop latency | CPU pressure (%) | load |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for (point, side), rs in sorted(by.items(), key=lambda kv: (kv[0][0], kv[0][1] != "base")):
        bubble, formula = med(rs, "bubble"), med(rs, "bubble_formula")
        err = bubble / formula - 1
        out.append(f"| {point} | {side} | {rs[0]['commit'][:7]} | {len(rs)} | {bubble:.4f} | "
                   f"{formula:.4f} | {100 * err:+.1f}% | {'yes' if abs(err) <= TOLERANCE else 'no'} | "
                   f"{1e6 * med(rs, 'hop_latency_s'):.0f} | {1e3 * med(rs, 'send_s'):.3f} | "
                   f"{med(rs, 'bubble_sim_hop'):.4f} | {med(rs, 'cpu_pressure'):.1f} | "
                   f"{med(rs, 'load1'):.2f} |")
    text = "\n".join(out) + "\n"
    hops = os.path.join(folder, "data", "hops.csv")
    if os.path.exists(hops):
        text += ("\nWhere a hop's µs go (one traced run per binary and point; medians over the "
                 "hops of the run):\n\n| point | binary | compute end → send posted (µs) | "
                 "send (µs) | send posted → receive seen, receiver waiting (µs) | receive seen → "
                 "compute start (µs) | waited hops | CPU pressure (%) |\n"
                 "|---|---|---|---|---|---|---|---|\n")
        for r in read_csv(hops):
            text += (f"| {r['point']} | {r['side']} | {r['compute_end_to_send_us']} | "
                     f"{r['send_us']} | {r['send_to_seen_us']} | {r['seen_to_start_us']} | "
                     f"{r['hops_waited']} | {r['cpu_pressure']} |\n")
    return text


def regenerate(folder, results=None):
    """README.md's table from the committed CSVs (psar_exp check)."""
    return {"README.md#table": table(folder)}


def measure_both(args):
    measure(args, {"base": runner.base_commit(args.base), "new": args.state["binary"]})
    generated.update_readme(args.out, {"table": table(args.out)})


def launcher():
    launch = runner.Launcher(__doc__, "pp_hop", runs={"measure": measure_both})
    ap = launch.parser
    ap.add_argument("--base", required=True, help="the psar binary to compare against")
    ap.add_argument("--base-no-overwrite", action="store_true",
                    help="the base binary predates psar train's --overwrite")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--high-priority", action="store_true")
    ap.add_argument("--trace", action="store_true")
    ap.add_argument("--tmp", default="/tmp/psar_pp_hop", help="where the runs themselves go")
    return launch


if __name__ == "__main__":
    runner.main_guard("pp_hop.py", launcher().main)
