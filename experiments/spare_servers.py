#!/usr/bin/python3
"""Spare servers (results/spare_servers/): the parameter server with as many
dedicated shards as workers (S = N) against the ring allreduce at 1 Gbit/s,
and against its own α-β form (`psar cost --servers`, ps/cost.h,
docs/theory.md "The parameter server's α-β form").

    python3 -m psar_exp spare_servers measure [--reps 3] [--no-cluster]
                                              [--reference | --exploratory]
    python3 -m psar_exp spare_servers report [--out DIR]

measure, `--reps` times, interleaved (rep by rep, so drifting load hits
every method alike), for N in NS:
  - emulator: on this host under mpirun with net.bandwidth = LINK and
    net.latency = LATENCY (every rank and every shard a NIC of its own,
    docs/network.md): `psar bench allreduce` (ring, SIZE) on N ranks and
    `psar bench ps --servers N` (SIZE) on 2N ranks, once per chunk size
    of CHUNKS (ps.chunk_bytes);
  - cluster (unless --no-cluster; root): `scripts/cluster.sh up` with 2N
    hosts at LINK, the ring on hosts 1..N (one rank each), the PS with its
    N shards on hosts of their own (ranks 0..N−1 on hosts 1..N, the workers
    on hosts N+1..2N), then `down` in any case.
Each benchmark runs under `flock /tmp/psar-measure.lock`; `uptime` and
`vmstat 1 3` before every repetition go to data/machine.txt, every time to
data/runs.csv:

  rep,where,N,method,servers,chunk_bytes,size,time_s,echo_s

(time_s: the benchmark's median over rounds of the slowest rank's time per
sync; echo_s, PS rows: the same messages echoed by plain ZeroMQ servers
without emulation in the same benchmark — what the host's cores take to
move them, a floor the emulated time cannot beat.) A cluster layout that
fails is noted in data/machine.txt and left out. report writes README.md's generated blocks from data/runs.csv and
`psar cost`: per N and chunk size the median over reps of the ring and the
PS, PS ÷ ring (target ≤ 0.75: the α-β forms give (n + N·c)/(2(N−1)/N·n)),
and the PS beside its α-β prediction (target within 15 %).
"""

import os
import statistics
import tempfile

from psar_exp import ROOT, costs, runner
from psar_exp.generated import fill_blocks
from psar_exp.io import md_table, read_csv, write_csv, write_text
from psar_exp.units import human, parse_bandwidth, parse_bytes, parse_seconds

NS = [4, 8]
SIZE = "16M"
LINK = "1Gbit"
LATENCY = "50us"
CHUNKS = ["256K", "1M"]
ITERS, WARMUP = 5, 1
SEGMENT = "512K"  # the ring's segments (sync.segment_bytes)
RING_TARGET = 0.75   # PS (S = N) ÷ ring, at most
MODEL_TOLERANCE = 0.15  # |PS ÷ its α-β prediction − 1|, at most
CLUSTER = {"name": "psar-sp", "subnet": "10.99.230.0/24"}
FIELDS = ["rep", "where", "N", "method", "servers", "chunk_bytes", "size", "time_s", "echo_s"]


def locked(cmd):
    return ["flock", runner.MEASURE_LOCK] + cmd


def ring_cmd(psar, csv, sets=()):
    sweep = {"min": SIZE, "max": SIZE, "factor": 2, "iters": ITERS, "warmup": WARMUP}
    return runner.bench_allreduce_args(psar, ["ring"], sweep, SEGMENT, csv=csv, sets=sets)


def ps_cmd(psar, S, chunk, csv, sets=()):
    cmd = [psar, "bench", "ps", "--servers", str(S), "-b", SIZE, "-e", SIZE, "-n", str(ITERS),
           "-w", str(WARMUP), "--csv", csv, "--set", f"ps.chunk_bytes={chunk}"]
    for s in sets:
        cmd += ["--set", s]
    return cmd


def bench_time(csv, method):
    """The benchmark's time in seconds: the ring's row, or the PS's (not the echo's)."""
    rows = [r for r in read_csv(csv) if r.get("algo", r.get("mode")) == method]
    if len(rows) != 1:
        raise runner.RunError(f"{csv}: expected one {method} row, found {len(rows)}")
    if rows[0].get("wrong") not in (None, "", "0"):
        raise runner.RunError(f"{csv}: {method} summed wrongly")
    return float(rows[0]["time_us"]) * 1e-6


def measure_emulator(psar, rep, tmp):
    sets = [f"net.bandwidth={LINK}", f"net.latency={LATENCY}"]
    rows = []
    for N in NS:
        csv = os.path.join(tmp, f"ring_{rep}_{N}.csv")
        runner.run(locked(runner.mpirun_prefix(N) + ring_cmd(psar, csv, sets)))
        rows.append({"method": "ring", "N": N, "servers": "", "chunk_bytes": "",
                     "time_s": bench_time(csv, "ring"), "echo_s": ""})
        for chunk in CHUNKS:
            csv = os.path.join(tmp, f"ps_{rep}_{N}_{chunk}.csv")
            runner.run(locked(runner.mpirun_prefix(2 * N) + ps_cmd(psar, N, chunk, csv, sets)))
            rows.append({"method": "ps", "N": N, "servers": N, "chunk_bytes": parse_bytes(chunk),
                         "time_s": bench_time(csv, "ps"), "echo_s": bench_time(csv, "zmq_raw")})
    return [{"rep": rep, "where": "emulator", "size": parse_bytes(SIZE), **r} for r in rows]


def measure_cluster(psar, rep, tmp, notes):
    cluster = [os.path.join(ROOT, "scripts", "cluster.sh"), "--name", CLUSTER["name"]]
    rows = []
    for N in NS:
        try:
            runner.run(cluster + ["up", "--hosts", str(2 * N), "--link", LINK,
                                  "--subnet", CLUSTER["subnet"]])
            csv = os.path.join(tmp, f"cring_{rep}_{N}.csv")
            runner.run(locked(runner.cluster_prefix(N, per_host=1, name=CLUSTER["name"]) +
                              ring_cmd(psar, csv)))
            got = [{"method": "ring", "N": N, "servers": "", "chunk_bytes": "",
                    "time_s": bench_time(csv, "ring"), "echo_s": ""}]
            for chunk in CHUNKS:
                csv = os.path.join(tmp, f"cps_{rep}_{N}_{chunk}.csv")
                runner.run(locked(runner.cluster_prefix(2 * N, name=CLUSTER["name"],
                                                        slots=[1] * (2 * N)) +
                                  ps_cmd(psar, N, chunk, csv)))
                got.append({"method": "ps", "N": N, "servers": N,
                            "chunk_bytes": parse_bytes(chunk), "time_s": bench_time(csv, "ps"),
                            "echo_s": bench_time(csv, "zmq_raw")})
            rows += got
        except runner.RunError as e:
            notes.append(f"cluster N = {N}, repetition {rep}: failed, left out: "
                         f"{str(e).splitlines()[0]}")
        finally:
            runner.run(cluster + ["down"])
    return [{"rep": rep, "where": "cluster", "size": parse_bytes(SIZE), **r} for r in rows]


def measure(args):
    psar, state = args.psar, args.state
    data = os.path.join(args.out, "data")
    os.makedirs(data, exist_ok=True)
    rows, notes = [], [f"commit {state['commit']}"]
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.reps):
            notes += [f"repetition {rep}:"] + runner.machine_lines()
            rows += measure_emulator(psar, rep, tmp)
            if not args.no_cluster:
                rows += measure_cluster(psar, rep, tmp, notes)
            write_csv(os.path.join(data, "runs.csv"), rows, FIELDS)
    notes += ["after the runs:"] + runner.machine_lines()
    write_text(os.path.join(data, "machine.txt"), "\n".join(notes) + "\n")
    write_readme(args.out, psar)


def medians(rows, column="time_s"):
    """{(where, N, method, chunk_bytes): (median seconds of `column`, reps)}."""
    got = {}
    for r in rows:
        if r[column] == "":
            continue
        key = (r["where"], int(r["N"]), r["method"], int(r["chunk_bytes"] or 0))
        got.setdefault(key, []).append(float(r[column]))
    return {k: (statistics.median(v), len(v)) for k, v in got.items()}


def tables(folder, psar=None):
    """The README's generated blocks from data/runs.csv and psar cost."""
    rows = read_csv(os.path.join(folder, "data", "runs.csv"))
    med, echo = medians(rows), medians(rows, "echo_s")
    size = int(rows[0]["size"])
    B, alpha = parse_bandwidth(LINK), parse_seconds(LATENCY)
    chunks = sorted({k[3] for k in med if k[2] == "ps"})
    predicted = {c: costs.query(NS, [size], algos=["ring"], alpha=alpha, beta=1 / B, psar=psar,
                                servers=sorted(set(NS)), chunk_bytes=c) for c in chunks}
    blocks, verdicts = {}, []
    for where in ("emulator", "cluster"):
        body = []
        for N in NS:
            ring = med.get((where, N, "ring", 0))
            for c in chunks:
                ps = med.get((where, N, "ps", c))
                if ring is None or ps is None:
                    continue
                t = predicted[c]
                model_ps = t.ps_time(N, N, size)
                model_ring = t.time("ring", N, size, alpha, 1 / B)
                ratio, fit = ps[0] / ring[0], ps[0] / model_ps
                body.append([str(N), human(c), f"{ring[0] * 1e3:.1f}", f"{ps[0] * 1e3:.1f}",
                             f"**{ratio:.2f}**", f"{model_ps / model_ring:.2f}",
                             f"{model_ps * 1e3:.1f}", f"{fit:.2f}",
                             f"{echo[(where, N, 'ps', c)][0] * 1e3:.1f}", str(min(ps[1], ring[1]))])
                verdicts.append((where, N, c, ratio, fit))
        if body:
            blocks[where] = md_table(
                ["N = S", "chunk", "ring (ms)", "PS (ms)", "PS ÷ ring", "α-β PS ÷ ring",
                 "α-β PS (ms)", "PS ÷ α-β", "echo (ms)", "reps"], body)
    lines = []
    for where, N, c, ratio, fit in verdicts:
        met_ring = ratio <= RING_TARGET
        met_fit = abs(fit - 1) <= MODEL_TOLERANCE
        if where == "cluster":
            lines.append(f"- cluster, N = S = {N}, {human(c)} chunks: PS ÷ ring {ratio:.2f} — "
                         f"{'PS ahead' if ratio < 1 else 'ring ahead'} (the emulator's ordering "
                         f"{'held' if ratio < 1 else 'did not hold'})\n")
        else:
            lines.append(f"- emulator, N = S = {N}, {human(c)} chunks: PS ÷ ring {ratio:.2f} "
                         f"({'met' if met_ring else 'missed'}: ≤ {RING_TARGET}), PS ÷ α-β "
                         f"{fit:.2f} ({'met' if met_fit else 'missed'}: within "
                         f"{MODEL_TOLERANCE:.0%})\n")
    blocks["verdict"] = "".join(lines)
    return blocks


README = """# Spare servers: the parameter server with S = N shards against the ring

The parameter server with as many dedicated shards as workers (`psar bench
ps --servers N` on 2N ranks: ranks 0..N−1 serve, the others work) against the
ring allreduce (`psar bench allreduce`, ring, on N ranks), {size} of float32
at {link} per NIC with {latency} per message, beside their α-β forms from
`psar cost --servers N` (docs/theory.md, "The parameter server's α-β form":
the PS's busiest NIC carries n each way, full duplex, plus the pipeline
fill of one chunk's N replies, against the ring's 2(N−1)/N·n). Each cell is the
median over repetitions (interleaved) of the benchmark's time, the median over
{iters} rounds (after {warmup} warm-up) of the slowest rank's time per sync.
Targets: PS ÷ ring ≤ {ring_target} and PS within {tol:.0%} of its α-β form.
`echo` is the same benchmark's plain ZeroMQ echo of the very same messages
without emulation (median over repetitions): the time this host's two
shared cores take to move them through TCP loopback. Where it comes near
the α-β time, the host, not the modelled network, sets the PS's time.

Launch S ≥ N servers: `mpirun -np 2N psar train CONFIG --sync ps --set
ps.servers=N` (or `psar bench ps --servers N` on 2N ranks); on the virtual
cluster, `scripts/cluster.sh up --hosts 2N` and `scripts/cluster.sh mpirun
-np 2N --slots 1,...,1 -- psar ...` puts every shard and every worker on a
host of its own.

Reproduce: `cd experiments && /usr/bin/python3 -m psar_exp spare_servers measure
--reference` (root, for the cluster; `--no-cluster` for the emulator only);
`report` rewrites the tables from data/runs.csv (data/machine.txt: `uptime` and
`vmstat 1 3` before every repetition).

## Emulated NICs (this host, `net.bandwidth={link}`, `net.latency={latency}`)

<!-- generated:begin emulator -->
<!-- generated:end -->

## Virtual cluster (scripts/cluster.sh, {link} tbf links, real TCP, one host per rank)

<!-- generated:begin cluster -->
<!-- generated:end -->

## Verdict

<!-- generated:begin verdict -->
<!-- generated:end -->
"""


def write_readme(folder, psar=None):
    path = os.path.join(folder, "README.md")
    blocks = tables(folder, psar)
    blocks.setdefault("cluster", "not measured (--no-cluster)\n")
    if os.path.exists(path):
        with open(path) as f:
            text = f.read()
    else:
        text = README.format(size=SIZE, link=LINK, latency=LATENCY, iters=ITERS, warmup=WARMUP,
                             ring_target=RING_TARGET, tol=MODEL_TOLERANCE)
    write_text(path, fill_blocks(text, blocks))


def regenerate(folder, results=None):
    """README.md's generated blocks from data/runs.csv (psar_exp check)."""
    blocks = tables(folder)
    blocks.setdefault("cluster", "not measured (--no-cluster)\n")
    return {f"README.md#{k}": v for k, v in blocks.items()}


def launcher():
    launch = runner.Launcher(__doc__, "spare_servers", runs={"measure": measure},
                             reports={"report": lambda args: write_readme(args.out, args.psar)})
    launch.parser.add_argument("--reps", type=int, default=3)
    launch.parser.add_argument("--no-cluster", action="store_true", help="the emulator only")
    return launch


def main():
    args = launcher().main()
    print(f"spare_servers.py: {args.out}/README.md")


if __name__ == "__main__":
    runner.main_guard("spare_servers.py", main)
