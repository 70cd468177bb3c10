#!/usr/bin/python3
"""The collective engine against the psar binary before it, and bf16
against fp32 on the wire (results/collective_engine).

    experiments/collective_engine.py measure --base OLD_PSAR [--parts engine2,engine4,dtype2,dtype4]
                                     [--psar NEW_PSAR] [--reference | --exploratory]
    experiments/collective_engine.py report [--reference]

measure, each run under `flock /tmp/psar-measure.lock`:
  engineN  `psar bench allreduce` at np = N, 4 KiB–64 MiB, every algorithm,
           three times per binary, --base and --psar alternating (--psar
           first on even runs);
  dtypeN   with --psar only, `sync.dtype` fp32 and bf16 at an emulated
           1 Gbit/s (net.bandwidth), 1–16 MiB, with the byte counters
           (--volume-csv).
Parts run in separate calls (to keep each one short) add to data/: each
run's CSV and printed output, machine.txt (uptime and `vmstat 1 3` before
every run) and binaries.csv (the commit each binary was built at, from
scripts/build.sh's stamps); then table.md is written again.
report: table.md from data/ alone (python3 -m psar_exp check holds it).
"""

import csv
import glob
import os
import re
import statistics
import time

from psar_exp import runner
from psar_exp.io import read_csv, write_csv, write_text

ALGOS = "ring,tree,butterfly,halving_doubling,naive,hierarchical"
DTYPE_ALGOS = "ring,tree,butterfly,halving_doubling,naive"
PARTS = ("engine2", "engine4", "dtype2", "dtype4")
TARGET = 0.97  # old/new time: the engine at least this fast


def bench(psar, np_, args):
    return (["flock", runner.MEASURE_LOCK] + runner.mpirun_prefix(np_) +
            [psar, "bench", "allreduce", *args])


def run_logged(data, label, cmd, printed):
    """`cmd`, its printed output into `printed`, the machine state before
    it into data/machine.txt."""
    with open(os.path.join(data, "machine.txt"), "a") as f:
        f.write(f"## {label} {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}\n" +
                "\n".join(runner.machine_lines()) + "\n")
    write_text(printed, runner.run(cmd))


def binaries(data, sides):
    """data/binaries.csv: the commit of each side; a part measured with
    other binaries than the parts already in data/ is refused."""
    path = os.path.join(data, "binaries.csv")
    if os.path.exists(path):
        kept = {r["side"]: r["commit"] for r in read_csv(path)}
        if kept != sides:
            raise runner.RunError(f"{path} holds {kept}, these binaries are {sides}: measure "
                                  "into a fresh --out")
    write_csv(path, [{"side": s, "commit": c} for s, c in sides.items()])


def measure(args):
    data = os.path.join(args.out, "data")
    os.makedirs(data, exist_ok=True)
    binaries(data, {"old": runner.base_commit(args.base), "new": args.state["binary"]})
    for part in args.parts.split(","):
        if part not in PARTS:
            raise runner.RunError(f"--parts: unknown part '{part}' ({', '.join(PARTS)})")
        np_ = int(part[-1])
        if part.startswith("engine"):
            for rep in (1, 2, 3):
                for side in ("new", "old") if rep % 2 == 0 else ("old", "new"):
                    name = os.path.join(data, f"engine_{side}_np{np_}_rep{rep}")
                    run_logged(data, f"engine np={np_} rep={rep} {side}", bench(
                        args.psar if side == "new" else args.base, np_,
                        ["--algos", ALGOS, "-b", "4K", "-e", "64M", "-f", "4", "-n", "10", "-w",
                         "2", "-c", "1", "--csv", name + ".csv"]), name + ".txt")
        else:
            for dtype in ("fp32", "bf16"):
                name = os.path.join(data, f"dtype_{dtype}_np{np_}")
                run_logged(data, f"dtype np={np_} {dtype}", bench(
                    args.psar, np_,
                    ["--algos", DTYPE_ALGOS, "-b", "1M", "-e", "16M", "-f", "4", "-n", "5", "-w",
                     "1", "-c", "1", "--set", "net.bandwidth=1Gbit", "--set", f"sync.dtype={dtype}",
                     "--csv", name + ".csv", "--volume-csv", name + "_volume.csv"]), name + ".txt")
    report(args)


def rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def table(folder):
    """table.md from the CSVs in folder/data."""
    d = os.path.join(folder, "data")
    commits = {r["side"]: r["commit"][:7] for r in read_csv(os.path.join(d, "binaries.csv"))}
    out = []
    times = {}  # (np, side, algo, size) -> [us]
    for path in glob.glob(os.path.join(d, "engine_*_np*_rep*.csv")):
        side, np_ = re.search(r"engine_(old|new)_np(\d+)_rep", path).groups()
        for r in rows(path):
            times.setdefault((int(np_), side, r["algo"], int(r["size"])), []).append(float(r["time_us"]))
    out.append("# Collective engine vs the hand-written executors\n")
    out.append(f"Old: psar at {commits['old']} (hand-written executors); new: psar at "
               f"{commits['new']} (programs run by the engine). `psar bench allreduce`, median "
               "over 3 runs of each binary (each run: median over rounds of the max over ranks), "
               "runs alternating. Machine state before each run: machine.txt. Commands: "
               "README.md.\n")
    out.append("| np | algorithm | size | old µs | new µs | old/new | ≥ 0.97 |")
    out.append("|---|---|---|---|---|---|---|")
    ratios = {}  # (np, algo) -> [old/new per size]
    for key in sorted(k for k in times if k[1] == "old"):
        np_, _, algo, size = key
        new = times.get((np_, "new", algo, size))
        if not new:
            continue
        o, n = statistics.median(times[key]), statistics.median(new)
        ratio = o / n
        ratios.setdefault((np_, algo), []).append(ratio)
        out.append(f"| {np_} | {algo} | {size} | {o:.1f} | {n:.1f} | {ratio:.3f} | "
                   f"{'yes' if ratio >= TARGET else 'no'} |")
    out.append("\nold/new per algorithm and np over the sizes:\n")
    out.append("| np | algorithm | min | median | max | sizes ≥ 0.97 |")
    out.append("|---|---|---|---|---|---|")
    for (np_, algo), rs in sorted(ratios.items()):
        out.append(f"| {np_} | {algo} | {min(rs):.3f} | {statistics.median(rs):.3f} | "
                   f"{max(rs):.3f} | {sum(r >= TARGET for r in rs)} of {len(rs)} |")
    every = [r for rs in ratios.values() for r in rs]
    if every:
        out.append(f"\nAll cells: {sum(r >= TARGET for r in every)} of {len(every)} at ≥ 0.97.")
    out.append("\n# bf16 vs fp32 on the wire, 1 Gbit/s emulated (net.bandwidth=1Gbit)\n")
    out.append("| np | algorithm | size | fp32 µs | bf16 µs | time bf16/fp32 | busiest bytes fp32 | "
               "bf16 | bytes bf16/fp32 | time within 10 % of 0.5 |")
    out.append("|---|---|---|---|---|---|---|---|---|---|")
    timing = []
    for np_ in (2, 4):
        f = os.path.join(d, f"dtype_fp32_np{np_}.csv")
        b = os.path.join(d, f"dtype_bf16_np{np_}.csv")
        if not (os.path.exists(f) and os.path.exists(b)):
            continue
        tf = {(r["algo"], int(r["size"])): float(r["time_us"]) for r in rows(f)}
        tb = {(r["algo"], int(r["size"])): float(r["time_us"]) for r in rows(b)}
        vf = {(r["algo"], int(r["size"])): int(r["bytes_sent_max_rank"])
              for r in rows(os.path.join(d, f"dtype_fp32_np{np_}_volume.csv"))}
        vb = {(r["algo"], int(r["size"])): int(r["bytes_sent_max_rank"])
              for r in rows(os.path.join(d, f"dtype_bf16_np{np_}_volume.csv"))}
        for key in sorted(tf):
            if key not in tb:
                continue
            t = tb[key] / tf[key]
            timing.append(t)
            out.append(f"| {np_} | {key[0]} | {key[1]} | {tf[key]:.0f} | {tb[key]:.0f} | "
                       f"{t:.3f} | {vf[key]} | {vb[key]} | {vb[key] / vf[key]:.3f} | "
                       f"{'yes' if abs(t - 0.5) <= 0.05 else 'no'} |")
    if timing:
        out.append(f"\nTime bf16/fp32 from {min(timing):.3f} to {max(timing):.3f}; "
                   f"{sum(abs(t - 0.5) <= 0.05 for t in timing)} of {len(timing)} rows within "
                   "10 % of 0.5.")
    return "\n".join(out) + "\n"


def regenerate(folder, results=None):
    """table.md from the committed data (psar_exp check)."""
    return {"table.md": table(folder)}


def report(args):
    write_text(os.path.join(args.out, "table.md"), table(args.out))
    print(f"collective_engine.py: {args.out}/table.md")


def launcher():
    launch = runner.Launcher(__doc__, "collective_engine", runs={"measure": measure},
                             reports={"report": report})
    launch.parser.add_argument("--base", help="measure: the psar binary before the engine "
                                              "(built by scripts/build.sh: its stamp names it)")
    launch.parser.add_argument("--parts", default=",".join(PARTS),
                               help=f"measure: these parts, in order (default: {','.join(PARTS)})")
    return launch


if __name__ == "__main__":
    runner.main_guard("collective_engine.py", launcher().main)
