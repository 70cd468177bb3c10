#!/usr/bin/env python3
"""Writes table.md from the CSVs of the cluster-vs-emulator sitting in a directory.

    results/cluster_emulator/table.py DIR > table.md

DIR holds cluster_rep{K}.csv (`psar bench allreduce --csv` on 4 hosts of
scripts/cluster.sh, one rank each, links shaped to 1 Gbit/s) and
emulator_rep{K}.csv (the same benchmark as 4 ranks on the host with the
network emulator at net.bandwidth=1Gbit). Per (algorithm, size): each
side's median over the repetitions and cluster/emulator (the target:
≤ 1.2 from 2 to 32 MiB).
"""
import csv
import glob
import os
import re
import statistics
import sys


def main():
    d = sys.argv[1]
    times, wrong = {}, 0
    for path in sorted(glob.glob(os.path.join(d, "*_rep*.csv"))):
        side = re.search(r"(cluster|emulator)_rep\d+\.csv$", path).group(1)
        with open(path) as f:
            for r in csv.DictReader(f):
                times.setdefault((side, r["algo"], int(r["size"])), []).append(float(r["time_us"]))
                wrong += int(r["wrong"]) if r["wrong"] not in ("", "N/A") else 0
    print("# Virtual cluster (4 hosts × 1 rank) vs the network emulator, 1 Gbit/s\n")
    print("Median over the repetitions of each side (each run: median over rounds of the max "
          "over ranks). Machine state before each run: data/machine.txt. Commands: README.md.\n")
    print(f"Elements wrong in the checked calls, all runs: {wrong}.\n")
    print("| algorithm | size | cluster µs | emulator µs | cluster/emulator | ≤ 1.2 | runs |")
    print("|---|---|---|---|---|---|---|")
    worst = {}
    for (side, algo, size) in sorted(k for k in times if k[0] == "cluster"):
        emu = times.get(("emulator", algo, size))
        if not emu:
            continue
        c, e = statistics.median(times[(side, algo, size)]), statistics.median(emu)
        worst[algo] = max(worst.get(algo, 0), c / e)
        print(f"| {algo} | {size} | {c:.0f} | {e:.0f} | {c / e:.2f} | "
              f"{'yes' if c / e <= 1.2 else 'no'} | {min(len(emu), len(times[(side, algo, size)]))} |")
    print("\nWorst cluster/emulator per algorithm:\n")
    print("| algorithm | worst |")
    print("|---|---|")
    for algo, r in sorted(worst.items()):
        print(f"| {algo} | {r:.2f} |")


if __name__ == "__main__":
    main()
