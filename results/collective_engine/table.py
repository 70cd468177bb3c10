#!/usr/bin/env python3
"""Writes table.md from the CSVs measure.sh left in a directory.

    results/collective_engine/table.py DIR OLD_COMMIT NEW_COMMIT > table.md

Engine vs hand-written executors: per (np, algorithm, size) the median over
the runs of each binary's time, and old/new (≥ 1: the engine is as fast;
the target is ≥ 0.97). Old against itself (the aa parts, where measured):
the same ratio between two sides that both ran the old binary, so the
spread of one binary between runs of the same sitting. Beside each median
ratio, the ratio of each side's fastest run (the run least disturbed by the
rest of the host). bf16 vs fp32 at 1 Gbit/s emulated: the
busiest rank's bytes and the time, bf16/fp32 (targets: bytes 0.5, time
within 10 % of 0.5).
"""
import csv
import glob
import os
import re
import statistics
import sys


def rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def load(d, prefix, a, b):
    """(np, side, algo, size) -> [us] from PREFIX_{a,b}_npN_repK.csv."""
    times = {}
    for path in glob.glob(os.path.join(d, f"{prefix}_*_np*_rep*.csv")):
        side, np_ = re.search(rf"{prefix}_({a}|{b})_np(\d+)_rep", path).groups()
        for r in rows(path):
            times.setdefault((int(np_), side, r["algo"], int(r["size"])), []).append(float(r["time_us"]))
    return times


def main():
    d, old_commit, new_commit = sys.argv[1:4]
    times = load(d, "engine", "old", "new")
    runs = sorted({len(v) for v in times.values()})
    print("# Collective engine vs the hand-written executors\n")
    print(f"Old: psar at {old_commit} (hand-written executors); new: psar at {new_commit} "
          f"(programs run by the engine). `psar bench allreduce`, median over "
          f"{' or '.join(map(str, runs))} runs of each "
          "binary (each run: median over rounds of the max over ranks), runs alternating. "
          "Machine state before each run: machine.txt. Commands: README.md.\n")
    print("| np | algorithm | size | old µs | new µs | old/new | ≥ 0.97 | old/new of the fastest runs |")
    print("|---|---|---|---|---|---|---|---|")
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
        print(f"| {np_} | {algo} | {size} | {o:.1f} | {n:.1f} | {ratio:.3f} | "
              f"{'yes' if ratio >= 0.97 else 'no'} | {best:.3f} |")
    print("\nold/new per algorithm and np over the sizes (of the medians; last column: of "
          "each binary's fastest run, the one least disturbed by the host):\n")
    print("| np | algorithm | min | median | max | sizes ≥ 0.97 | fastest runs: sizes ≥ 0.97 |")
    print("|---|---|---|---|---|---|---|")
    for (np_, algo), rs in sorted(ratios.items()):
        fs = fastest[(np_, algo)]
        print(f"| {np_} | {algo} | {min(rs):.3f} | {statistics.median(rs):.3f} | {max(rs):.3f} | "
              f"{sum(r >= 0.97 for r in rs)} of {len(rs)} | {sum(r >= 0.97 for r in fs)} of {len(fs)} |")
    every = [r for rs in ratios.values() for r in rs]
    if every:
        best = [r for rs in fastest.values() for r in rs]
        print(f"\nAll cells: {sum(r >= 0.97 for r in every)} of {len(every)} at ≥ 0.97 "
              f"(medians); {sum(r >= 0.97 for r in best)} of {len(best)} (fastest runs, from "
              f"{min(best):.3f} to {max(best):.3f}).")
    aa = load(d, "aa", "a", "b")
    if aa:
        print(f"\n# Old against itself (A/A), same sitting\n")
        print(f"Both sides ran the old binary ({old_commit}), alternating as above, median over "
              f"{' or '.join(map(str, sorted({len(v) for v in aa.values()})))} runs per side: "
              "a/b is how far one binary's medians differ between runs here.\n")
        print("| np | algorithm | size | a µs | b µs | a/b | a/b of the fastest runs | old/new beside it |")
        print("|---|---|---|---|---|---|---|---|")
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
            print(f"| {np_} | {algo} | {size} | {statistics.median(aa[key]):.1f} | "
                  f"{statistics.median(b):.1f} | {ra:.3f} | {min(aa[key]) / min(b):.3f} | {beside} |")
        if spread:
            print(f"\nA/A ratio from {min(spread):.3f} to {max(spread):.3f}; "
                  f"{sum(abs(r - 1) > 0.03 for r in spread)} of {len(spread)} cells off 1 by more than 3 %.")
    print("\n# bf16 vs fp32 on the wire, 1 Gbit/s emulated (net.bandwidth=1Gbit)\n")
    print("| np | algorithm | size | fp32 µs | bf16 µs | time bf16/fp32 | busiest bytes fp32 | bf16 | bytes bf16/fp32 | time within 10 % of 0.5 |")
    print("|---|---|---|---|---|---|---|---|---|---|")
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
            print(f"| {np_} | {key[0]} | {key[1]} | {tf[key]:.0f} | {tb[key]:.0f} | "
                  f"{t:.3f} | {vf[key]} | {vb[key]} | {vb[key] / vf[key]:.3f} | "
                  f"{'yes' if abs(t - 0.5) <= 0.05 else 'no'} |")
    if timing:
        print(f"\nTime bf16/fp32 from {min(timing):.3f} to {max(timing):.3f}; "
              f"{sum(abs(t - 0.5) <= 0.05 for t in timing)} of {len(timing)} rows within 10 % of 0.5.")


if __name__ == "__main__":
    main()
