#!/usr/bin/env python3
"""Writes table.md from the CSVs of the psar-vs-Gloo sitting in a directory.

    results/gloo_tcp/table.py DIR > table.md
    results/gloo_tcp/table.py DIR --cluster > table_cluster.md

DIR holds psar_np{N}_rep{K}.csv (`psar bench allreduce --csv`, Open MPI's
tcp BTL on loopback) and gloo_np{N}_rep{K}.csv (algo,size,time_us,wrong:
torch.distributed's Gloo all_reduce timed the same way: median over rounds
of the max over ranks). Per (np, size): each psar algorithm's median over
the repetitions, the best of psar's own algorithms (mpi, Open MPI's
MPI_Allreduce, shown apart), Gloo's median, and Gloo/psar (≥ 1: psar at
least as fast; the target). --cluster: the runs were on the virtual
cluster (one rank per host, 1 Gbit/s links) instead of loopback; psar's
algorithms there are those the sitting ran (no `mpi`: its column reads —).
"""
import csv
import glob
import os
import re
import statistics
import sys


def main():
    d = sys.argv[1]
    cluster = sys.argv[2:] == ["--cluster"]
    if sys.argv[2:] and not cluster:
        sys.exit(f"table.py: unknown arguments {sys.argv[2:]} (DIR [--cluster])")
    times = {}  # (np, algo, size) -> [us]
    wrong = 0
    for path in sorted(glob.glob(os.path.join(d, "*_np*_rep*.csv"))):
        side, np_ = re.search(r"(psar|gloo)_np(\d+)_rep\d+\.csv$", path).groups()
        with open(path) as f:
            for r in csv.DictReader(f):
                times.setdefault((int(np_), r["algo"], int(r["size"])), []).append(float(r["time_us"]))
                wrong += int(r["wrong"]) if r.get("wrong", "0") not in ("", "N/A") else 0
    print("# psar vs Gloo allreduce over TCP (" +
          ("the virtual cluster: one rank per host, 1 Gbit/s links" if cluster else "loopback") +
          ")\n")
    print("Median over the repetitions of each side (each run: median over rounds of the max "
          "over ranks); psar's best of its own algorithms per size. Machine state before each "
          f"run: {os.path.basename(os.path.normpath(d))}/machine.txt. Commands: README.md.\n")
    print(f"Elements wrong in the checked calls, all runs: {wrong}.\n")
    print("| np | size | best psar algorithm | psar µs | mpi µs | Gloo µs | Gloo/psar | ≥ 1.0 | runs |")
    print("|---|---|---|---|---|---|---|---|---|")
    for np_, size in sorted({(k[0], k[2]) for k in times}):
        mine = {a: statistics.median(v) for (n, a, s), v in times.items()
                if n == np_ and s == size and a not in ("gloo", "mpi")}
        gloo = times.get((np_, "gloo", size))
        if not mine or not gloo:
            continue
        algo = min(mine, key=mine.get)
        g = statistics.median(gloo)
        mpi = times.get((np_, "mpi", size))
        ratio = g / mine[algo]
        print(f"| {np_} | {size} | {algo} | {mine[algo]:.0f} | "
              f"{f'{statistics.median(mpi):.0f}' if mpi else '—'} | {g:.0f} | {ratio:.2f} | "
              f"{'yes' if ratio >= 1.0 else 'no'} | {len(gloo)} |")


if __name__ == "__main__":
    main()
