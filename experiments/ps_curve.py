#!/usr/bin/python3
"""The cost of `ps.security: curve` (docs/ps.md): `psar bench ps` with the
plain parameter server beside the same benchmark under CURVE, per message
size, and the table of their ratio.

    experiments/ps_curve.py [--repeats R] [--reference]   measure, then write the table (runs/ps_curve;
                                                          results/ps_curve with --reference)
    experiments/ps_curve.py --table-only --reference      the table from the committed bench.csv again

Each repeat runs the benchmark twice, plain and curve, in alternating order
(so drifting background load hits both alike), with `uptime` and
`vmstat 1 3` recorded before each run (machine.txt). The whole measurement
holds /tmp/psar-measure.lock (flock), so no other measurement of this
machine runs in between; it waits for the lock at most --lock-wait seconds.
The rows of every run go to bench.csv (columns: repeat, security, then the
benchmark's own). README.md gets the table: per size, the median over
repeats of the PS time in each mode and their ratio curve / plain; and the
same ratio measured against the peer inside each run — both runs time the
same plain ZeroMQ echo of the same messages, so (curve / echo) / (plain /
echo) cancels the load the two runs saw differently.
"""

import fcntl
import os
import statistics
import signal
import tempfile
from collections import defaultdict

from psar_exp import runner
from psar_exp.io import md_table, read_csv, write_csv, write_text

RANKS = 3  # one server shard, two workers
BENCH = ["--servers", "1", "-b", "4K", "-e", "16M", "-f", "4", "-n", "20", "-w", "5"]
LOCK = "/tmp/psar-measure.lock"
MODES = {"none": "ps", "curve": "ps_curve"}


def bench_command(psar, security, csv):
    return (runner.mpirun_prefix(RANKS) +
            [psar, "bench", "ps", *BENCH, "--csv", csv, "--set", f"ps.security={security}"])


def hold_measure_lock(wait_s):
    """The machine's measurement lock, held until the returned file is
    closed. A blocking wait (a poller would lose the lock to every blocked
    waiter), ended by an alarm after wait_s."""
    f = open(LOCK, "a")

    def expired(*_):
        raise runner.RunError(f"{LOCK} still held by other measurements after {wait_s:.0f} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(max(1, int(wait_s)))
    try:
        fcntl.flock(f, fcntl.LOCK_EX)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    return f


def measure(args):
    """Every repeat, plain and curve, then the README's table."""
    out, psar = args.out, args.psar
    lock = hold_measure_lock(args.lock_wait)  # noqa: F841 (held while measuring)
    rows, notes = [], [f"commit {args.state['commit']}"]
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            order = ["none", "curve"] if r % 2 == 0 else ["curve", "none"]
            for security in order:
                csv = os.path.join(tmp, f"{r}_{security}.csv")
                cmd = bench_command(psar, security, csv)
                notes += [f"repeat {r}, ps.security {security}: {' '.join(cmd)}"] + runner.machine_lines()
                runner.run(cmd)
                rows += [{"repeat": r, "security": security, **row} for row in read_csv(csv)]
    notes += ["after the runs:"] + runner.machine_lines()
    write_csv(os.path.join(out, "bench.csv"), rows)
    write_text(os.path.join(out, "machine.txt"), "\n".join(notes) + "\n")
    write_readme(out)


def table(out):
    """Per size: medians over repeats and the ratios, as Markdown rows."""
    rows = read_csv(os.path.join(out, "bench.csv"))
    times = defaultdict(dict)  # (repeat, size) -> {(security, mode): time_us}
    for row in rows:
        times[(int(row["repeat"]), int(row["size"]))][(row["security"], row["mode"])] = float(row["time_us"])
    sizes = sorted({size for _, size in times})
    repeats = sorted({r for r, _ in times})
    body = []
    for size in sizes:
        runs = [times[(r, size)] for r in repeats if (r, size) in times]
        plain = [t[("none", "ps")] for t in runs]
        curve = [t[("curve", "ps_curve")] for t in runs]
        normalized = [(t[("curve", "ps_curve")] / t[("curve", "zmq_raw")]) /
                      (t[("none", "ps")] / t[("none", "zmq_raw")]) for t in runs]
        p, c = statistics.median(plain), statistics.median(curve)
        body.append([human(size), f"{p:.1f}", f"{c:.1f}", f"{c / p:.2f}",
                     f"{statistics.median(normalized):.2f}",
                     f"{min(normalized):.2f}–{max(normalized):.2f}"])
    header = ["size", "plain ps (µs)", "curve ps (µs)", "curve / plain",
              "curve / plain against the in-run echo", "range over repeats"]
    return md_table(header, body), len(repeats)


def human(size):
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} B"


def write_readme(out):
    text, repeats = table(out)
    command = " ".join(["experiments/ps_curve.py", "--repeats", str(repeats)])
    readme = f"""# The cost of an encrypted, authenticated parameter server

`ps.security: curve` (docs/ps.md) against the plain parameter server:
`mpirun -np {RANKS} psar bench ps {' '.join(BENCH)}` (one shard, two
workers, bsp push_pull of M floats, TCP loopback), once with
`--set ps.security=none` and once with `--set ps.security=curve` per repeat,
{repeats} repeats in alternating order, all of them holding
`{LOCK}` (no other measurement in between). A time is the benchmark's: the median over rounds of the
slowest worker's mean time per push_pull. Below, per size, the median over
repeats of each mode, their ratio, and the ratio taken against the plain
ZeroMQ echo of the same messages that each run times beside its PS
(`zmq_raw`; (curve / echo) / (plain / echo), median and range over repeats).

Produced by `{command}` (bench.csv: every row; machine.txt: the commands
and `uptime` / `vmstat 1 3` before each run and after the last).

<!-- generated:begin table -->
{text}<!-- generated:end -->
"""
    write_text(os.path.join(out, "README.md"), readme)


def regenerate(folder, results=None):
    """The README's table from the committed bench.csv (psar_exp check)."""
    return {"README.md#table": table(folder)[0]}


def table_only(args):
    """The README again from bench.csv, keeping the provenance the measuring
    run recorded."""
    with open(os.path.join(args.out, "README.md")) as f:
        kept = f.read().split(runner.PROVENANCE_BEGIN, 1)
    write_readme(args.out)
    if len(kept) == 2:
        with open(os.path.join(args.out, "README.md"), "a") as f:
            f.write("\n" + runner.PROVENANCE_BEGIN + kept[1])


def launcher():
    launch = runner.Launcher(__doc__, "ps_curve", runs={"measure": measure},
                             reports={"table": table_only},
                             flags={"--table-only": ("table", "only rewrite README.md from bench.csv")})
    launch.parser.add_argument("--repeats", type=int, default=5)
    launch.parser.add_argument("--lock-wait", type=float, default=1800,
                               help="seconds to wait for the lock")
    return launch


def main():
    args = launcher().main()
    print(f"ps_curve.py: {args.out}/README.md")


if __name__ == "__main__":
    runner.main_guard("ps_curve.py", main)
