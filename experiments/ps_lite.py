#!/usr/bin/python3
"""psar's parameter server against ps-lite (github.com/dmlc/ps-lite), the
key-value parameter server of MXNet's days: per push_pull size and worker
count, ps-lite's time over psar's (> 1: psar is faster), from runs that
took turns on the same host.

    experiments/ps_lite.py DIR [--reference]   take in a measured sweep from DIR and write
                                               the tables (runs/ps_lite; results/ps_lite
                                               with --reference)
    experiments/ps_lite.py --table-only [--out FOLDER]
                                               the tables again from the committed data

This script neither builds nor runs ps-lite, which this repository does not
contain: results/ps_lite/README.md says how it was built and driven. DIR
holds what one measuring session wrote (every file of run r with N workers):
  psar_nw<N>_run<r>.csv    `psar bench ps --servers 1 --csv` (mode ps and
                           its ZeroMQ echo, zmq_raw) with N workers
  before_nw<N>_run<r>.csv  the same benchmark with an earlier psar binary
                           (optional: the effect of a change)
  pslite_nw<N>_run<r>.txt  ps-lite's workers' lines `T rank size round µs`
                           (each round's mean time per ZPushPull)
  machine.txt              `== run r nw N PROGRAM TIME`, then `uptime`,
                           `vmstat 1 3` and /proc/stat's cpu line before each
                           program, and once more at the end
They become data/psar.csv, data/before.csv, data/pslite.csv and
data/machine.txt. A time is `psar bench ps`'s definition on both sides: per
round the slowest worker's mean time per call, then the median over rounds.
A point's ratio is ps-lite's time over psar's in the same run r; the table
gives the median over runs and every run's ratio.
"""

import os
import re
import shutil
import statistics
from collections import defaultdict

from psar_exp import runner
from psar_exp.io import md_table, read_csv, write_csv, write_text

NAME = "ps_lite"
WORKERS = (1, 2, 4)
SIZES = tuple(4096 << k for k in range(13))  # 4 KiB ... 16 MiB, the target's range
TARGET = 1.0  # ps-lite time / psar time at every point
FILE = re.compile(r"(psar|before|pslite)_nw(\d+)_run(\d+)\.(csv|txt)$")


def human(size):
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} B"


def take_in(src, data):
    """DIR's files as data/*.csv (and machine.txt copied)."""
    rows = {"psar": [], "before": [], "pslite": []}
    for name in sorted(os.listdir(src)):
        m = FILE.match(name)
        if not m:
            continue
        kind, nw, run = m.group(1), int(m.group(2)), int(m.group(3))
        path = os.path.join(src, name)
        if kind == "pslite":
            with open(path) as f:
                for line in f:
                    p = line.split()
                    if len(p) == 5 and p[0] == "T":
                        rows[kind].append({"run": run, "workers": nw, "rank": int(p[1]),
                                           "size": int(p[2]), "round": int(p[3]), "time_us": p[4]})
        else:
            for r in read_csv(path):
                rows[kind].append({"run": run, **r})
    if not rows["psar"] or not rows["pslite"]:
        raise runner.RunError(f"{src}: no psar_nw*_run*.csv or no pslite_nw*_run*.txt")
    os.makedirs(data, exist_ok=True)
    for kind, r in rows.items():
        if r:
            write_csv(os.path.join(data, f"{kind}.csv"), r)
    shutil.copy(os.path.join(src, "machine.txt"), os.path.join(data, "machine.txt"))


def psar_times(path):
    """{(run, workers, size): (ps µs, echo µs)} of a psar.csv / before.csv."""
    out = defaultdict(dict)
    if not os.path.exists(path):
        return {}
    for r in read_csv(path):
        out[(int(r["run"]), int(r["workers"]), int(r["size"]))][r["mode"]] = float(r["time_us"])
    return {k: (v["ps"], v["zmq_raw"]) for k, v in out.items()}


def pslite_times(path):
    """{(run, workers, size): µs}: per round the slowest worker, then the median over rounds."""
    rounds = defaultdict(lambda: defaultdict(float))
    for r in read_csv(path):
        key = (int(r["run"]), int(r["workers"]), int(r["size"]))
        rounds[key][int(r["round"])] = max(rounds[key][int(r["round"])], float(r["time_us"]))
    return {k: statistics.median(v.values()) for k, v in rounds.items()}


def machine(path):
    """Per program run: (run, workers, program, 1-minute load, steal %) from machine.txt."""
    out, head, lines = [], None, []

    def close():
        if head is None or head[2] == "end":
            return
        load = next((float(m.group(1)) for line in lines
                     if (m := re.search(r"load average: ([\d.]+)", line))), float("nan"))
        vm = [line.split() for line in lines if re.match(r"\s*\d+(\s+\d+){15,}\s*$", line)]
        steal = statistics.mean(float(v[16]) for v in vm[1:]) if len(vm) > 1 else float("nan")
        out.append((*head, load, steal))

    with open(path) as f:
        for line in f:
            if line.startswith("== "):
                close()
                p = line.split()
                head = (int(p[2]), int(p[4]), p[5]) if p[1] == "run" else (0, 0, "end")
                lines = []
            else:
                lines.append(line)
    close()
    return out


def ratio_cells(runs):
    return f"**{statistics.median(runs):.2f}**", " ".join(f"{x:.2f}" for x in runs)


def tables(folder):
    """The README's blocks: a table per worker count with the verdict, and the machine."""
    data = os.path.join(folder, "data")
    ps = psar_times(os.path.join(data, "psar.csv"))
    before = psar_times(os.path.join(data, "before.csv"))
    lite = pslite_times(os.path.join(data, "pslite.csv"))
    runs = sorted({k[0] for k in ps})
    text, met, points, missed = "", 0, 0, []
    for nw in WORKERS:
        body = []
        for size in SIZES:
            keys = [(r, nw, size) for r in runs if (r, nw, size) in ps and (r, nw, size) in lite]
            if not keys:
                continue
            mine = [ps[k][0] for k in keys]
            theirs = [lite[k] for k in keys]
            ratios = [lite[k] / ps[k][0] for k in keys]
            med, each = ratio_cells(ratios)
            ok = statistics.median(ratios) >= TARGET
            points += 1
            met += ok
            if not ok:
                missed.append(f"{human(size)} with {nw}")
            row = [human(size), f"{statistics.median(mine):.0f}", f"{statistics.median(theirs):.0f}",
                   med, each, "yes" if ok else "**no**",
                   f"{statistics.median(ps[k][1] / ps[k][0] for k in keys):.2f}"]
            if before:
                old = [k for k in keys if k in before]
                row += [f"{statistics.median(before[k][0] for k in old):.0f}",
                        ratio_cells([lite[k] / before[k][0] for k in old])[0],
                        f"{statistics.median(before[k][0] / ps[k][0] for k in old):.2f}"] if old else ["—"] * 3
            body.append(row)
        if not body:
            continue
        header = ["size", "psar µs", "ps-lite µs", "ps-lite / psar", "runs", f"≥ {TARGET:.1f}",
                  "echo / psar"]
        if before:
            header += ["earlier psar µs", "ps-lite / earlier psar", "earlier / psar"]
        text += f"\n#### {nw} worker{'s' if nw > 1 else ''}\n\n" + md_table(header, body)
    verdict = (f"\nps-lite / psar ≥ {TARGET:.1f} (median of {len(runs)} runs) at {met} of {points} "
               f"points" + (": **met**." if met == points else
                            f"; missed at {', '.join(missed)} workers."))
    rows = machine(os.path.join(data, "machine.txt"))
    loads = [r[3] for r in rows]
    steals = [r[4] for r in rows if r[4] == r[4]]
    mtext = (f"{len(rows)} program runs; 1-minute load average before each: "
             f"{min(loads):.2f}–{max(loads):.2f} (median {statistics.median(loads):.2f}) on "
             f"this machine's cores; vmstat steal (st, %): "
             + (f"{min(steals):.1f}–{max(steals):.1f}" if steals else "not reported") + ".\n")
    return text.lstrip("\n") + verdict + "\n", mtext


def regenerate(folder, results=None):
    """The README's generated blocks from the committed data (psar_exp check)."""
    table, state = tables(folder)
    return {"README.md#table": table, "README.md#machine": state}


def write_readme(out):
    from psar_exp.generated import fill_blocks
    path = os.path.join(out, "README.md")
    if not os.path.exists(path):
        write_text(path, "# psar against ps-lite\n\n<!-- generated:begin table -->\n"
                         "<!-- generated:end -->\n\n<!-- generated:begin machine -->\n"
                         "<!-- generated:end -->\n")
    with open(path) as f:
        text = f.read()
    blocks = regenerate(out)
    write_text(path, fill_blocks(text, {k.split("#")[1]: v for k, v in blocks.items()}, path))


def take_in_and_write(args):
    if not args.source:
        raise runner.RunError("give the measuring session's folder, or --table-only")
    take_in(args.source, os.path.join(args.out, "data"))
    write_readme(args.out)


def launcher():
    launch = runner.Launcher(__doc__, NAME, runs={"take_in": take_in_and_write},
                             reports={"table": lambda args: write_readme(args.out)},
                             flags={"--table-only": ("table", "only rewrite the README's tables "
                                                              "from the committed data")})
    launch.parser.add_argument("source", nargs="?", help="the measuring session's folder")
    return launch


def main():
    args = launcher().main()
    print(f"ps_lite.py: {args.out}/README.md")


if __name__ == "__main__":
    runner.main_guard("ps_lite.py", main)
