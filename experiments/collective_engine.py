#!/usr/bin/python3
"""The collective engine against the psar binary before it, and bf16
against fp32 on the wire (results/collective_engine).

    experiments/collective_engine.py measure --base OLD_PSAR [--parts engine2,engine4,dtype2,dtype4]
                                     [--reps 3] [--psar NEW_PSAR] [--reference | --exploratory]
    experiments/collective_engine.py report [--reference]

measure, each run under `flock /tmp/psar-measure.lock`:
  engineN  `psar bench allreduce` at np = N, 4 KiB–64 MiB, every algorithm,
           --reps times per binary, --base and --psar alternating (--psar
           first on even runs);
  aaN      the same with --base on both sides (a, b): how far two runs of
           one binary differ in this sitting;
  dtypeN   with --psar only, `sync.dtype` fp32 and bf16 at an emulated
           1 Gbit/s (net.bandwidth), 1–16 MiB, with the byte counters
           (--volume-csv).
Parts run in separate calls (to keep each one short) add to data/: each
run's CSV and printed output, machine.txt (uptime and `vmstat 1 3` before
every run) and binaries.csv (the commit each binary was built at, from
scripts/build.sh's stamps); then table.md is written again.
report: table.md from data/ alone (python3 -m psar_exp check holds it).
"""

import glob
import os
import re
import statistics
import time

from psar_exp import runner
from psar_exp.io import read_csv, write_csv, write_text

ALGOS = "ring,tree,butterfly,halving_doubling,naive,hierarchical"
DTYPE_ALGOS = "ring,tree,butterfly,halving_doubling,naive"
PARTS = ("engine2", "engine4", "aa2", "aa4", "dtype2", "dtype4")
DEFAULT_PARTS = ("engine2", "engine4", "dtype2", "dtype4")
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
        if not part.startswith("dtype"):
            # engine: old against new; aa: the old binary against itself.
            prefix, a, b = ("engine", "old", "new") if part.startswith("engine") else ("aa", "a", "b")
            binary = {"old": args.base, "new": args.psar, "a": args.base, "b": args.base}
            for rep in range(1, args.reps + 1):
                for side in (b, a) if rep % 2 == 0 else (a, b):
                    name = os.path.join(data, f"{prefix}_{side}_np{np_}_rep{rep}")
                    run_logged(data, f"{prefix} np={np_} rep={rep} {side}", bench(
                        binary[side], np_,
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


def load(d, prefix, a, b):
    """(np, side, algo, size) -> [us] from PREFIX_{a,b}_npN_repK.csv."""
    times = {}
    for path in glob.glob(os.path.join(d, f"{prefix}_*_np*_rep*.csv")):
        side, np_ = re.search(rf"{prefix}_({a}|{b})_np(\d+)_rep", path).groups()
        for r in read_csv(path):
            times.setdefault((int(np_), side, r["algo"], int(r["size"])), []).append(float(r["time_us"]))
    return times


def table(folder):
    """table.md from the CSVs in folder/data."""
    d = os.path.join(folder, "data")
    commits = {r["side"]: r["commit"][:7] for r in read_csv(os.path.join(d, "binaries.csv"))}
    old_commit, new_commit = commits["old"], commits["new"]
    out = []
    times = load(d, "engine", "old", "new")
    runs = sorted({len(v) for v in times.values()})
    out.append("# Collective engine vs the hand-written executors\n")
    out.append(f"Old: psar at {old_commit} (hand-written executors); new: psar at {new_commit} "
          f"(programs run by the engine). `psar bench allreduce`, median over "
          f"{' or '.join(map(str, runs))} runs of each "
          "binary (each run: median over rounds of the max over ranks), runs alternating. "
          "Machine state before each run: machine.txt. Commands: README.md.\n")
    out.append(f"| np | algorithm | size | old µs | new µs | old/new | ≥ {TARGET} | old/new of the fastest runs |")
    out.append("|---|---|---|---|---|---|---|---|")
    ratios, fastest = {}, {}  # (np, algo) -> [old/new per size]
    for key in sorted(k for k in times if k[1] == "old"):
        np_, _, algo, size = key
        new = times.get((np_, "new", algo, size))
        if not new:
            continue
        o, n = statistics.median(times[key]), statistics.median(new)
        ratio, best = o / n, min(times[key]) / min(new)
        ratios.setdefault((np_, algo), []).append(ratio)
        fastest.setdefault((np_, algo), []).append(best)
        out.append(f"| {np_} | {algo} | {size} | {o:.1f} | {n:.1f} | {ratio:.3f} | "
              f"{'yes' if ratio >= TARGET else 'no'} | {best:.3f} |")
    out.append("\nold/new per algorithm and np over the sizes (of the medians; last column: of "
          "each binary's fastest run, the one least disturbed by the host):\n")
    out.append(f"| np | algorithm | min | median | max | sizes ≥ {TARGET} | fastest runs: sizes ≥ {TARGET} |")
    out.append("|---|---|---|---|---|---|---|")
    for (np_, algo), rs in sorted(ratios.items()):
        fs = fastest[(np_, algo)]
        out.append(f"| {np_} | {algo} | {min(rs):.3f} | {statistics.median(rs):.3f} | {max(rs):.3f} | "
              f"{sum(r >= TARGET for r in rs)} of {len(rs)} | {sum(r >= TARGET for r in fs)} of {len(fs)} |")
    every = [r for rs in ratios.values() for r in rs]
    if every:
        best = [r for rs in fastest.values() for r in rs]
        out.append(f"\nAll cells: {sum(r >= TARGET for r in every)} of {len(every)} at ≥ {TARGET} "
              f"(medians); {sum(r >= TARGET for r in best)} of {len(best)} (fastest runs, from "
              f"{min(best):.3f} to {max(best):.3f}).")
    aa = load(d, "aa", "a", "b")
    if aa:
        out.append("\n# Old against itself (A/A), same sitting\n")
        out.append(f"Both sides ran the old binary ({old_commit}), alternating as above, median over "
              f"{' or '.join(map(str, sorted({len(v) for v in aa.values()})))} runs per side: "
              "a/b is how far one binary's medians differ between runs here.\n")
        out.append("| np | algorithm | size | a µs | b µs | a/b | a/b of the fastest runs | old/new beside it |")
        out.append("|---|---|---|---|---|---|---|---|")
        spread = []
        for key in sorted(k for k in aa if k[1] == "a"):
            np_, _, algo, size = key
            b = aa.get((np_, "b", algo, size))
            if not b:
                continue
            ra = statistics.median(aa[key]) / statistics.median(b)
            spread.append(ra)
            o, n = times.get((np_, "old", algo, size)), times.get((np_, "new", algo, size))
            beside = f"{statistics.median(o) / statistics.median(n):.3f}" if o and n else "—"
            out.append(f"| {np_} | {algo} | {size} | {statistics.median(aa[key]):.1f} | "
                  f"{statistics.median(b):.1f} | {ra:.3f} | {min(aa[key]) / min(b):.3f} | {beside} |")
        if spread:
            out.append(f"\nA/A ratio from {min(spread):.3f} to {max(spread):.3f}; "
                  f"{sum(abs(r - 1) > 0.03 for r in spread)} of {len(spread)} cells off 1 by more than 3 %.")
    out.append("\n# bf16 vs fp32 on the wire, 1 Gbit/s emulated (net.bandwidth=1Gbit)\n")
    out.append("| np | algorithm | size | fp32 µs | bf16 µs | time bf16/fp32 | busiest bytes fp32 | bf16 | bytes bf16/fp32 | time within 10 % of 0.5 |")
    out.append("|---|---|---|---|---|---|---|---|---|---|")
    timing = []
    for np_ in (2, 4):
        f = os.path.join(d, f"dtype_fp32_np{np_}.csv")
        b = os.path.join(d, f"dtype_bf16_np{np_}.csv")
        if not (os.path.exists(f) and os.path.exists(b)):
            continue
        tf = {(r["algo"], int(r["size"])): float(r["time_us"]) for r in read_csv(f)}
        tb = {(r["algo"], int(r["size"])): float(r["time_us"]) for r in read_csv(b)}
        vf = {(r["algo"], int(r["size"])): int(r["bytes_sent_max_rank"])
              for r in read_csv(os.path.join(d, f"dtype_fp32_np{np_}_volume.csv"))}
        vb = {(r["algo"], int(r["size"])): int(r["bytes_sent_max_rank"])
              for r in read_csv(os.path.join(d, f"dtype_bf16_np{np_}_volume.csv"))}
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
              f"{sum(abs(t - 0.5) <= 0.05 for t in timing)} of {len(timing)} rows within 10 % of 0.5.")
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
    launch.parser.add_argument("--parts", default=",".join(DEFAULT_PARTS),
                               help=f"measure: these parts, in order, of {','.join(PARTS)} "
                                    f"(default: {','.join(DEFAULT_PARTS)})")
    launch.parser.add_argument("--reps", type=int, default=3,
                               help="measure: runs of each binary per np (engine, aa parts)")
    return launch


if __name__ == "__main__":
    runner.main_guard("collective_engine.py", launcher().main)
