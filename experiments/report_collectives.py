#!/usr/bin/python3
"""Regenerates the allreduce reports of REPRODUCE.md from `psar bench allreduce`
runs under mpirun:

  experiments/report_collectives.py experiments/comm_volume.yaml      (R1)
      -> results/comm_volume/{volume.csv, table.md}
  experiments/report_collectives.py experiments/collective_cost.yaml  (R2)
      -> results/collective_cost/{bench_n<N>.csv, busbw_<algo>.png,
         busbw_n<N>.png, table.md}

Options: --psar PATH (default $PSAR_BIN or build/trainer/psar), --bench-reduce
PATH (default build/bench/bench_reduce: gamma, the seconds per byte reduced, is
measured there, so that the fit of alpha and beta per algorithm is not
confounded with it), --out DIR, --reuse (re-plot from the CSVs already in
--out without running anything), --high-priority (run the benchmarks in a
scheduler group of their own at nice -19: on a host shared with other work).

Cost forms (p ranks, n bytes, coefficients of alpha, beta, gamma), those of
docs/algorithms.md: p2 = largest power of two <= p, L = log2 p2, f = 1 when
p is not a power of two (one fold step in and one out):
  ring              2(p-1),       2(p-1)/p n,          (p-1)/p n
  halving_doubling  2L + 2f,      2(p2-1)/p2 n + 2fn,  (p2-1)/p2 n + fn
  butterfly         L + 2f,       L n + 2fn,           L n + fn
  tree              2(D+S-1),     2(kS+f) n/S,         (kS+f) n/S
                    (D = floor(log2 p), S segments, k = min(2, p-1) children
                     of the root, f = 2 max(0, D-2) segment times of fill)
  naive             p-1,          (p-1) n,             (p-1) n
  mpi               fitted to the ring form (Open MPI picks its own algorithm)
alpha and beta >= 0 are fitted per algorithm by least squares on relative
errors (times span four decades), gamma held at the measured kernel rate.
"""

import argparse
import csv
import json
import math
import os
import subprocess
import sys
import time

import yaml

from collective_cost_model import (human, parse_bytes, read_csv, report_cost,
                                   write_text)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def mpirun(ranks):
    return ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(ranks)]


HIGH_PRIORITY = False


def favored():
    """In the child: a session of its own whose scheduler autogroup runs at
    nice -19, so compilations in other sessions on a shared host perturb the
    timing less (Linux autogroups make plain `nice` useless across sessions)."""
    os.setsid()
    with open("/proc/self/autogroup", "w") as f:
        f.write("-19")


def run(cmd):
    print("+", " ".join(cmd), flush=True)
    done = subprocess.run(cmd, capture_output=True, text=True,
                          preexec_fn=favored if HIGH_PRIORITY else None)
    if done.returncode != 0:
        sys.exit(f"report_collectives.py: command failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return done.stdout


def machine_note(load_before, timed=True):
    load_after = os.getloadavg()[0]
    mpi = subprocess.run(["mpirun", "--version"], capture_output=True, text=True).stdout.splitlines()
    prio = (" Benchmarks ran in their own scheduler group at nice -19 (--high-priority)."
            if HIGH_PRIORITY else "")
    machine = f"Machine: {os.cpu_count()} cores, {mpi[0] if mpi else 'mpirun'}"
    if not timed:
        return machine + "."
    return (f"{machine}; 1-minute load average {load_before:.2f} before, {load_after:.2f} after "
            f"the runs (other work on the host adds noise to every time).{prio}")


# ---- R1: communication volume -------------------------------------------------

def seed_formula(algo, p):
    """The lecture's formula, in units of M."""
    return {"naive": p * p, "ring": 2 * p, "tree": 2 * p, "ps": 2 * p,
            "butterfly": p * math.log2(p), "halving_doubling": 2 * p}.get(algo)


def exact_formula(algo, p):
    """The exact count psar asserts (tests/allreduce/bytes_test.cc), in units of M."""
    p2 = 1 << int(math.floor(math.log2(p)))
    e = p - p2
    return {"naive": p * (p - 1), "ring": 2 * (p - 1), "tree": 2 * (p - 1), "ps": 2 * p,
            "butterfly": p2 * math.log2(p2) + 2 * e, "halving_doubling": 2 * (p - 1)}.get(algo)


def report_volume(exp, psar, out):
    bench = exp["bench"]
    size = parse_bytes(bench["size"])
    rows = []
    for p in bench["ranks"]:
        tmp = os.path.join(out, f"volume_n{p}.csv")
        run(mpirun(p) + [psar, "bench", "allreduce", "--algos", ",".join(bench["algos"]),
                         "-b", str(size), "-e", str(size), "-n", "1", "-w", "0", "-c", "1",
                         "--volume-csv", tmp, "--set",
                         f"sync.segment_bytes={bench.get('segment_bytes', '512K')}"])
        rows += read_csv(tmp)
        os.remove(tmp)
    if bench.get("ps"):
        # The parameter server with one shard: N workers + 1 server rank.
        for p in bench["ranks"]:
            tmp = os.path.join(out, f"volume_ps_n{p}.csv")
            run(mpirun(p + 1) + [psar, "bench", "ps", "--servers", "1", "-b", str(size), "-e",
                                 str(size), "-n", "1", "-w", "0", "--volume-csv", tmp, "--set",
                                 f"ps.chunk_bytes={bench['ps'].get('chunk_bytes', '1M')}"])
            rows += read_csv(tmp)
            os.remove(tmp)
    with open(os.path.join(out, "volume.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return rows


def volume_table(rows, note):
    M = int(rows[0]["size"])
    lines = [
        "# Communication volume per allreduce (R1)", "",
        f"One allreduce of M = {human(M)} bytes ({M // 4} floats), bytes sent as counted by "
        "the Comm counters (payload of point-to-point messages; the control plane is not "
        "counted), summed over all ranks and for the busiest rank, in units of M. `exact` is "
        "the count psar asserts in tests/allreduce/bytes_test.cc; `seed` the lecture's formula "
        "(REPRODUCE.md R1). Regenerate: `experiments/report_collectives.py "
        "experiments/comm_volume.yaml`.", "",
        "| algorithm | N | measured total / M | exact / M | seed / M | busiest rank / M | messages |",
        "|---|---|---|---|---|---|---|"]
    for r in rows:
        p, algo = int(r["ranks"]), r["algo"]
        total, busiest = int(r["bytes_sent_total"]) / M, int(r["bytes_sent_max_rank"]) / M
        exact, seed = exact_formula(algo, p), seed_formula(algo, p)
        mark = "" if exact is None or abs(total - exact) < 1e-9 else " **≠ exact**"
        name = "ps (S = 1; N workers + 1 server)" if algo == "ps" else algo
        lines.append(f"| {name} | {p} | {total:.4f}{mark} | {exact:g} | {seed:.3g} | "
                     f"{busiest:.4f} | {r['messages_sent_total']} |")
    lines += ["",
              "Notes: the seed formulas count N where the exact counts have N−1 (a rank does "
              "not send to itself), so measured/seed → 1 only as N grows. Ring and tree move "
              "the same total, but the ring spreads it evenly (busiest rank 2(N−1)/N·M) while a "
              "tree's inner rank moves up to 3M. Butterfly and halving-doubling at N = 3 fold "
              "one rank in and out (+2M in all; butterfly: N·M·log₂N holds for powers of two "
              "only). The parameter server (`psar bench ps --volume-csv`, one push_pull, payload "
              "bytes of workers and shard together) moves 2·N·M — each worker pushes M and pulls "
              "M — like the seed's count; unlike the ring, all of it passes through the one "
              "shard (busiest rank N·M sent, as much received): the central bottleneck, which "
              "S shards divide by S (results/ps_vs_allreduce/).", "", note, ""]
    return "\n".join(lines)


# ---- R2: alpha-beta-gamma fit -------------------------------------------------

def measure_gamma(bench_reduce):
    """Seconds per byte reduced by ops::add_inplace on a vector far past the caches."""
    if not os.path.exists(bench_reduce):
        sys.exit(f"report_collectives.py: {bench_reduce} not found (build the bench_reduce target)")
    out = run([bench_reduce, "--benchmark_filter=BM_AddInplace/67108864",
               "--benchmark_format=json", "--benchmark_min_time=0.5"])
    rate = json.loads(out)["benchmarks"][0]["bytes_per_second"]
    return 1.0 / rate


def run_sweeps(exp, psar, out):
    bench = exp["bench"]
    segment = f"sync.segment_bytes={bench.get('segment_bytes', '512K')}"
    for p in bench["ranks"]:
        rows = []
        for k, s in enumerate(bench["sweeps"]):
            tmp = os.path.join(out, f"bench_n{p}_part{k}.csv")
            run(mpirun(p) + [psar, "bench", "allreduce", "--algos", ",".join(bench["algos"]),
                             "-b", str(s["min"]), "-e", str(s["max"]), "-f", str(s["factor"]),
                             "-n", str(s["iters"]), "-w", str(s["warmup"]), "-r",
                             str(s["rounds"]), "-c", "1", "--csv", tmp, "--set", segment])
            rows += read_csv(tmp)
            os.remove(tmp)
        with open(os.path.join(out, f"bench_n{p}.csv"), "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)


def run_forced_mpi(exp, psar, out):
    """The ring against Open MPI's own algorithms, forced one at a time with
    its MCA parameters (`forced_mpi:` in the YAML): what each costs in MPI's
    implementation, beside psar's, in the same run."""
    bench = exp["bench"]
    segment = f"sync.segment_bytes={bench.get('segment_bytes', '512K')}"
    for name, alg in exp.get("forced_mpi", {}).get("algorithms", {}).items():
        s = exp["forced_mpi"]["sweep"]
        for p in bench["ranks"]:
            path = os.path.join(out, f"forced_{name}_n{p}.csv")
            run(mpirun(p) + ["--mca", "coll_tuned_use_dynamic_rules", "1", "--mca",
                             "coll_tuned_allreduce_algorithm", str(alg), psar, "bench",
                             "allreduce", "--algos", ",".join(exp["forced_mpi"]["algos"]),
                             "-b", str(s["min"]), "-e", str(s["max"]), "-f", str(s["factor"]),
                             "-n", str(s["iters"]), "-w", str(s["warmup"]), "-r",
                             str(s["rounds"]), "-c", "1", "--csv", path, "--set", segment])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("experiment")
    ap.add_argument("--psar", default=os.environ.get("PSAR_BIN", os.path.join(ROOT, "build", "trainer", "psar")))
    ap.add_argument("--bench-reduce", default=os.path.join(ROOT, "build", "bench", "bench_reduce"))
    ap.add_argument("--out", help="default results/<experiment.name>")
    ap.add_argument("--reuse", action="store_true", help="re-plot from the CSVs in --out")
    ap.add_argument("--high-priority", action="store_true",
                    help="run the benchmarks at autogroup nice -19 (root; for a shared host)")
    args = ap.parse_args()
    global HIGH_PRIORITY
    HIGH_PRIORITY = args.high_priority
    try:
        with open(args.experiment) as f:
            exp = yaml.safe_load(f) or {}
    except (OSError, yaml.YAMLError) as e:
        sys.exit(f"report_collectives.py: cannot read {args.experiment}: {e}")
    kind = exp.get("report")
    if kind not in ("volume", "cost") or "bench" not in exp:
        sys.exit(f"report_collectives.py: {args.experiment} needs `report: volume|cost` and a `bench:` section")
    out = args.out or os.path.join(ROOT, "results", exp["experiment"]["name"])
    os.makedirs(out, exist_ok=True)
    if not args.reuse and not os.path.exists(args.psar):
        sys.exit(f"report_collectives.py: psar binary not found at {args.psar} (build it, or set PSAR_BIN)")
    load = os.getloadavg()[0]
    start = time.time()
    note_file = os.path.join(out, "run_note.txt")  # the conditions of the runs, kept for --reuse
    if kind == "volume":
        rows = read_csv(os.path.join(out, "volume.csv")) if args.reuse else report_volume(exp, args.psar, out)
        write_text(os.path.join(out, "table.md"), volume_table(rows, machine_note(load, timed=False)))
    else:
        gamma_file = os.path.join(out, "gamma.txt")
        if not args.reuse:
            run_sweeps(exp, args.psar, out)
            run_forced_mpi(exp, args.psar, out)
            write_text(gamma_file, f"{measure_gamma(args.bench_reduce):.6e}\n")
            write_text(note_file, machine_note(load) + "\n")
        with open(gamma_file) as f:
            gamma = float(f.read())
        with open(note_file) as f:
            report_cost(exp, out, gamma, f.read().strip())
    print(f"report_collectives.py: {out}/table.md ({time.time() - start:.0f} s)")


if __name__ == "__main__":
    main()
