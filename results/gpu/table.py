#!/usr/bin/env python3
"""Writes table.md from what results/gpu/measure.sh left in a directory.

    results/gpu/table.py DIR > table.md

DIR holds machine.txt, status.txt, one NAME.log per step (gtest output of
the GPU tests; each training run's output), runs/NAME/{summary,steps}.csv
and bench_cuda_gemm.log (Google Benchmark's console output). Each training run is set
beside its reference — the same configuration on the CPU (mlp_*, gpt_*) or
ZeRO-0 with the ring (zero*) — by the relative difference of its final
loss; the GEMM benchmark by each shape's median TFLOP/s through psar's op
seam, through the linear layer and through bare cublasSgemm, and
seam ÷ bare.
"""
import csv
import os
import re
import sys

GTEST = re.compile(r"\[\s+(OK|FAILED|SKIPPED)\s+\] (\S+?)(?:, where GetParam\(\).*)?(?: \(\d+ ms\))?$")


def gtest_results(path):
    """{test: set of statuses} from a gtest log (several ranks may print)."""
    found = {}
    with open(path, errors="replace") as f:
        for line in f:
            line = re.sub(r"\x1b\[[0-9;]*m", "", line.rstrip())
            m = GTEST.search(line)
            if m and "." in m.group(2):
                found.setdefault(m.group(2), set()).add(m.group(1))
    return found


def read_csv(path):
    with open(path) as f:
        return list(csv.DictReader(f))


REFERENCE = {"mlp": "mlp_cpu", "gpt": "gpt_cpu", "zero": "zero0_ring2"}


def main():
    d = sys.argv[1]
    status = dict(line.split() for line in open(os.path.join(d, "status.txt")) if line.strip())
    print("# psar on a CUDA device\n")
    print("Written by `results/gpu/table.py` from the files `results/gpu/measure.sh` left in "
          "`data/` (see README.md).\n")
    print("## Machine\n")
    for line in open(os.path.join(d, "machine.txt")):
        print("    " + line.rstrip())
    print("\n## Tests\n")
    print("| step | exit | passed | failed | skipped | failed tests |")
    print("|---|---|---|---|---|---|")
    for name in ("ops_cuda_test", "train_cuda_test", "nccl_per_device", "nccl_shared_device"):
        res = gtest_results(os.path.join(d, name + ".log"))
        failed = sorted(t for t, s in res.items() if "FAILED" in s)
        passed = [t for t, s in res.items() if s == {"OK"}]
        skipped = [t for t, s in res.items() if "SKIPPED" in s and "FAILED" not in s]
        print(f"| {name} | {status.get(name, '?')} | {len(passed)} | {len(failed)} | "
              f"{len(skipped)} | {', '.join(failed) or '—'} |")
    print("\nA test counts as passed when every rank that ran it printed OK.\n")
    print("## Training: the device against its reference\n")
    print("| run | device | sync | ranks | ZeRO | final loss | reference | relative difference "
          "| test accuracy | samples/s | exit |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    runs = {}
    for name in sorted(os.listdir(os.path.join(d, "runs"))):
        path = os.path.join(d, "runs", name, "summary.csv")
        if os.path.exists(path):
            runs[name] = read_csv(path)[-1]
    order = sorted(runs, key=lambda n: (n.split("_")[0].rstrip("0123"), n not in REFERENCE.values(), n))
    for name in order:
        r = runs[name]
        ref_name = next(v for k, v in REFERENCE.items() if name.startswith(k))
        ref = runs.get(ref_name)
        zero = re.match(r"zero(\d)", name)
        loss = float(r["final_loss"])
        diff = "—" if name == ref_name or ref is None else \
            f"{abs(loss - float(ref['final_loss'])) / abs(float(ref['final_loss'])):.1e}"
        print(f"| {name} | {r['device']} | {r['sync']} | {r['world_size']} | "
              f"{zero.group(1) if zero else 0} | {loss:.8f} | {ref_name} | {diff} | "
              f"{100 * float(r['test_accuracy']):.2f} % | {float(r['samples_per_s']):.0f} | "
              f"{status.get('train_' + name, '?')} |")
    print("\nsamples/s is the run's own figure (summary.csv): these models are small, so it "
          "measures per-step overheads more than the device's arithmetic.\n")
    bench = os.path.join(d, "bench_cuda_gemm.log")
    if os.path.exists(bench):
        # The console's medians (the JSON is written only at the end, so a
        # run stopped at its limit leaves none).
        rate = {}
        pattern = re.compile(r"^BM_(\w+)/N:(\d+)/d:(\d+)/t:(\d+)/w2:(\d)/real_time_median\s.*"
                             r"TFLOP/s=([0-9.]+)")
        with open(bench) as f:
            for line in f:
                m = pattern.match(line)
                if m:
                    rate[(m.group(1),) + tuple(int(x) for x in m.groups()[1:5])] = float(m.group(6))
        print("## GEMM: psar's op seam against bare cuBLAS (FP32, `bench/bench_cuda_gemm`)\n")
        ended = status.get("bench_cuda_gemm")
        print("Median of 3 repetitions; N tokens, width d, t shards; GEMM 1 is X·W1 "
              "(N × 4d/t, K = d), GEMM 2 is H·W2 (N × d, K = 4d/t); the linear layer adds "
              "its bias. " + (f"The benchmark exited with status {ended}." if ended == "0" else
                              "The benchmark did not finish (" +
                              (f"exit status {ended}" if ended else "stopped before it ended") +
                              "): a shape it had not reached shows —.") + "\n")
        print("| N | d | t | GEMM | seam TFLOP/s | linear TFLOP/s | bare cuBLAS TFLOP/s | seam ÷ bare |")
        print("|---|---|---|---|---|---|---|---|")
        for s in sorted({k[1:] for k in rate}):
            seam, lin, bare = (rate.get((w,) + s) for w in ("SeamGemm", "SeamLinear", "BareCublas"))
            fmt = lambda x: "—" if x is None else f"{x:.1f}"  # noqa: E731
            ratio = "—" if not (seam and bare) else f"{seam / bare:.3f}"
            print(f"| {s[0]} | {s[1]} | {s[2]} | {s[3] + 1} | {fmt(seam)} | {fmt(lin)} | "
                  f"{fmt(bare)} | {ratio} |")

if __name__ == "__main__":
    main()
