#!/usr/bin/python3
"""Runs experiments/net_scaling.yaml: synchronization under the emulated
cluster network (docs/network.md) at several link speeds, every measurement
beside its alpha-beta prediction.

    experiments/net_scaling.py [EXPERIMENT.yaml] [--psar PATH] [--out DIR]
                               [--reuse] [--zero] [--quick] [--high-priority]

For every network and N: one `psar bench allreduce` run (every algorithm,
sizes min..max, taking turns round by round) with --volume-csv, and one
`psar bench ps --servers S` run per S (N workers + S server ranks), and
one `psar bench allreduce --zero 1,2,3` run of the ZeRO stages' collectives
(the experiment's `zero` section). Writes into results/<experiment.name>/:
  allreduce_<net>_n<N>.csv, volume_<net>_n<N>.csv, ps_<net>_n<N>_s<S>.csv,
  zero_<net>_n<N>.csv, zero_volume_<net>_n<N>.csv
  machine.txt, machine_zero.txt  the runs' provenance (the ZeRO rows' own)
  check.md              the check: at the check network every
                        algorithm's time within the tolerance of its
                        prediction, for every size >= min_size and N
  table.md              per network: sync time vs N at the headline size,
                        measured | predicted, the scaling claims as ratios,
                        bytes sent by the busiest rank beside the exact count
  sync_vs_n_<net>.png   the same, measured (solid) and predicted (dashed)
--reuse re-reports from the CSVs in --out; --zero measures the ZeRO rows
alone and re-reports with the other rows' CSVs already in --out; --quick
runs N = 2, 4 and one size.

Predictions (n bytes, B bytes/s per NIC and direction, alpha the latency,
gamma = 0: pure alpha-beta): the allreduce forms of docs/algorithms.md
(from `psar cost`) with beta = 1/B; the parameter server's model is
psar_exp.costs.ps_time (docs/theory.md). A ZeRO row's: its reduce-scatter
and all-gather are each half of the same algorithm's allreduce
(allreduce/sharded.h), so stages 1 and 2 cost the allreduce and stage 3
(two all-gathers and a reduce-scatter) 1.5 times it; its bytes per rank
2(N-1)/N*n and 3(N-1)/N*n (docs/zero.md).
"""

import math
import os

from psar_exp import ROOT, costs, report, runner
from psar_exp.generated import update_readme
from psar_exp.io import md_table, read_csv, write_text
from psar_exp.units import human, parse_bandwidth, parse_bytes, parse_seconds


ZERO_FACTOR = {1: 1.0, 2: 1.0, 3: 1.5}  # the stage's collectives ÷ the allreduce (docstring)


def zero_methods(exp):
    z = exp.get("zero")
    return [f"{a} zero{k}" for a in z["algos"] for k in z["stages"]] if z else []


def measure_zero(exp, psar, out, quick, high_priority):
    z = exp["zero"]
    sweep = dict(min=z["size"], max=z["size"], factor=2, iters=z["iters"], warmup=z["warmup"])
    for net in exp["networks"]:
        sets = [f"net.bandwidth={net['bandwidth']}", f"net.latency={net['latency']}",
                f"sync.bucket_bytes={z['layer_bytes']}"]
        for N in exp["ranks"][:2] if quick else exp["ranks"]:
            runner.run(runner.mpirun_prefix(N) + runner.bench_allreduce_args(
                psar, z["algos"], sweep, exp["allreduce"]["segment_bytes"],
                csv=os.path.join(out, f"zero_{net['name']}_n{N}.csv"),
                volume_csv=os.path.join(out, f"zero_volume_{net['name']}_n{N}.csv"), sets=sets) +
                ["--zero", ",".join(str(k) for k in z["stages"])], high_priority)


def measure(exp, psar, out, quick, high_priority):
    ar, ps = exp["allreduce"], exp["ps"]
    ranks = exp["ranks"][:2] if quick else exp["ranks"]
    head = exp["headline_size"]
    for net in exp["networks"]:
        sets = [f"net.bandwidth={net['bandwidth']}", f"net.latency={net['latency']}"]
        sweep = dict(ar, min=head, max=head) if quick else ar
        for N in ranks:
            runner.run(runner.mpirun_prefix(N) + runner.bench_allreduce_args(
                psar, ar["algos"], sweep, ar["segment_bytes"],
                csv=os.path.join(out, f"allreduce_{net['name']}_n{N}.csv"),
                volume_csv=os.path.join(out, f"volume_{net['name']}_n{N}.csv"), sets=sets),
                high_priority)
            for S in ps["servers"]:
                cmd = [psar, "bench", "ps", "--servers", str(S), "-b", str(ps["size"]), "-e",
                       str(ps["size"]), "-n", str(ps["iters"]), "-w", str(ps["warmup"]), "--csv",
                       os.path.join(out, f"ps_{net['name']}_n{N}_s{S}.csv"), "--set",
                       f"ps.chunk_bytes={ps['chunk_bytes']}"]
                for s in sets:
                    cmd += ["--set", s]
                runner.run(runner.mpirun_prefix(N + S) + cmd, high_priority)
    measure_zero(exp, psar, out, quick, high_priority)


def load(exp, out, psar):
    """rows: dicts network, N, method, servers, size, measured_s, predicted_s,
    sent_max (measured) and exact_max (psar cost's count)."""
    ar, ps = exp["allreduce"], exp["ps"]
    chunk = parse_bytes(ps["chunk_bytes"])
    measured = []  # (net, N, csv row, busiest bytes sent)
    for net in exp["networks"]:
        for N in exp["ranks"]:
            path = os.path.join(out, f"allreduce_{net['name']}_n{N}.csv")
            if not os.path.exists(path):
                continue
            volume = {(r["algo"], int(r["size"])): int(r["bytes_sent_max_rank"])
                      for r in read_csv(os.path.join(out, f"volume_{net['name']}_n{N}.csv"))}
            for r in read_csv(path):
                if int(r["wrong"] or 0) != 0:
                    raise runner.RunError(f"{path}: {r['algo']} at {r['size']} B summed wrongly")
                measured.append((net, N, r, volume.get((r["algo"], int(r["size"])))))
    zero = []  # the same, of the ZeRO rows: (net, N, csv row, busiest bytes sent)
    for net in exp["networks"]:
        for N in exp["ranks"] if exp.get("zero") else []:
            path = os.path.join(out, f"zero_{net['name']}_n{N}.csv")
            if not os.path.exists(path):
                continue
            volume = {r["algo"]: int(r["bytes_sent_max_rank"])
                      for r in read_csv(os.path.join(out, f"zero_volume_{net['name']}_n{N}.csv"))}
            for r in read_csv(path):
                if int(r["wrong"] or 0) != 0:
                    raise runner.RunError(f"{path}: {r['algo']} at {r['size']} B summed wrongly")
                if int(r["size"]) > parse_bytes(exp["zero"]["layer_bytes"]):
                    raise runner.RunError(f"{path}: {r['size']} B is more than one layer "
                                          "(zero.layer_bytes), which the prediction assumes")
                zero.append((net, N, r, volume.get(r["algo"])))
    algos = list(dict.fromkeys(ar["algos"] + (exp["zero"]["algos"] if zero else [])))
    sizes = {int(r["size"]) for _, _, r, _ in measured + zero}
    table = costs.query(exp["ranks"], sorted(sizes) or [4],
                        algos=algos, segment_bytes=ar["segment_bytes"], psar=psar)
    rows = []
    for net, N, r, sent in measured:
        B, alpha = parse_bandwidth(net["bandwidth"]), parse_seconds(net["latency"])
        n = int(r["size"])
        rows.append({"network": net["name"], "N": N, "method": r["algo"], "servers": 0,
                     "size": n, "measured_s": float(r["time_us"]) * 1e-6,
                     "predicted_s": table.time(r["algo"], N, n, alpha, 1 / B),
                     "sent_max": sent, "exact_max": table.sent_busiest(r["algo"], N, n)})
    for net, N, r, sent in zero:
        B, alpha = parse_bandwidth(net["bandwidth"]), parse_seconds(net["latency"])
        n = int(r["size"])
        algo, stage = r["algo"].split(" zero")
        k = ZERO_FACTOR[int(stage)]
        rows.append({"network": net["name"], "N": N, "method": r["algo"], "servers": 0,
                     "size": n, "measured_s": float(r["time_us"]) * 1e-6,
                     "predicted_s": k * table.time(algo, N, n, alpha, 1 / B), "sent_max": sent,
                     "exact_max": int(2 * k * (N - 1) * n // N) if (n // 4) % N == 0 else None})
    for net in exp["networks"]:
        B, alpha = parse_bandwidth(net["bandwidth"]), parse_seconds(net["latency"])
        for N in exp["ranks"]:
            for S in ps["servers"]:
                path = os.path.join(out, f"ps_{net['name']}_n{N}_s{S}.csv")
                for r in read_csv(path) if os.path.exists(path) else []:
                    if r["mode"] != "ps":
                        continue
                    n = int(r["size"])
                    rows.append({"network": net["name"], "N": N, "method": f"ps S={S}",
                                 "servers": S, "size": n, "measured_s": float(r["time_us"]) * 1e-6,
                                 "predicted_s": costs.ps_time(N, S, n, B, alpha, chunk),
                                 "sent_max": None, "exact_max": None})
    return rows


def fmt_ms(s):
    return f"{s * 1e3:.1f}" if s >= 0.01 else f"{s * 1e3:.2f}"


def check_report(exp, rows, note):
    chk = exp["check"]
    tol, min_size = float(chk["tolerance"]), parse_bytes(chk["min_size"])
    algos = exp["allreduce"]["algos"]
    sel = [r for r in rows if r["network"] == chk["network"] and r["method"] in algos
           and r["size"] >= min_size]
    net = next(n for n in exp["networks"] if n["name"] == chk["network"])
    lines = [f"# Check: `psar bench allreduce` under {net['bandwidth']}, {net['latency']} vs α-β",
             "",
             f"Target: every algorithm's measured time within {tol:.0%} of its α-β",
             f"prediction for sizes ≥ {human(min_size)} and N ∈ {{{', '.join(str(n) for n in exp['ranks'])}}}.",
             "Prediction: the cost forms of docs/algorithms.md with α = the latency,",
             "β = 1/B, γ = 0. Cells: measured ms / predicted ms (measured ÷ predicted).",
             ""]
    worst = max((abs(r["measured_s"] / r["predicted_s"] - 1), r) for r in sel) if sel else None
    for N in exp["ranks"]:
        at = [r for r in sel if r["N"] == N]
        if not at:
            continue
        sizes = sorted({r["size"] for r in at})
        lines += [f"## N = {N}", "", "| algorithm | " + " | ".join(human(s) for s in sizes) + " |",
                  "|---|" + "---|" * len(sizes)]
        for a in algos:
            cells = []
            for s in sizes:
                r = next((x for x in at if x["method"] == a and x["size"] == s), None)
                if r is None:
                    cells.append("")
                    continue
                q = r["measured_s"] / r["predicted_s"]
                flag = "" if abs(q - 1) <= tol else " **✗**"
                cells.append(f"{fmt_ms(r['measured_s'])} / {fmt_ms(r['predicted_s'])} ({q:.2f}){flag}")
            lines.append(f"| {a} | " + " | ".join(cells) + " |")
        lines.append("")
    if worst:
        ok = all(abs(r["measured_s"] / r["predicted_s"] - 1) <= tol for r in sel)
        w = worst[1]
        lines += [f"**{'Met' if ok else 'Not met'}**: {len(sel)} measurements, the worst "
                  f"{w['method']} at N = {w['N']}, {human(w['size'])}: measured ÷ predicted = "
                  f"{w['measured_s'] / w['predicted_s']:.3f}.", ""]
    lines += [note, ""]
    return "\n".join(lines)


def ratio(rows, method, net, size, a, b):
    get = {r["N"]: r for r in rows if r["method"] == method and r["network"] == net and r["size"] == size}
    if a not in get or b not in get:
        return None
    return (get[b]["measured_s"] / get[a]["measured_s"], get[b]["predicted_s"] / get[a]["predicted_s"])


def table_report(exp, rows, note):
    size = parse_bytes(exp["headline_size"])
    methods = [f"ps S={s}" for s in exp["ps"]["servers"]] + exp["allreduce"]["algos"] + zero_methods(exp)
    lines = ["# Sync time vs N under the emulated network", "",
             f"One synchronization of {human(size)} (M = {size // 4:,} floats): `psar bench ps`",
             "(push + pull, N workers, S dedicated shards) and `psar bench allreduce`; median",
             "of the rounds, each the slowest rank's time. Cells: measured ms | α-β prediction",
             "ms. Predictions: docs/algorithms.md for the allreduce algorithms; for the PS",
             "(max(N·M/S, M) + max(N, S)·chunk) / B + 2α — the busiest NIC (a shard's N·M/S or",
             "a worker's M, push and pull overlapped by chunking) and the last chunk's replies.",
             "The `<algo> zeroK` rows: `psar bench allreduce --zero`, the collectives of one",
             "step of ZeRO stage K with that algorithm's reduce-scatter and all-gather",
             "(docs/zero.md), the vector one layer: stages 1 and 2 a reduce-scatter and an",
             "all-gather (the allreduce's bytes and α-β time), stage 3 two all-gathers and a",
             "reduce-scatter (1.5 times them).",
             "Regenerate: `experiments/net_scaling.py` (commands in its docstring).", ""]
    Ns = exp["ranks"]
    lo, hi = Ns[0], Ns[-1]
    for net in exp["networks"]:
        name = net["name"]
        at = [r for r in rows if r["network"] == name and r["size"] == size]
        if not at:
            continue
        lines += [f"## {net['bandwidth']}, {net['latency']}", "",
                  "| method | " + " | ".join(f"N = {n}" for n in Ns) + f" | N{hi}/N{lo} measured | N{hi}/N{lo} predicted |",
                  "|---|" + "---|" * (len(Ns) + 2)]
        for m in methods:
            cells = []
            for n in Ns:
                r = next((x for x in at if x["method"] == m and x["N"] == n), None)
                cells.append(f"{fmt_ms(r['measured_s'])} \\| {fmt_ms(r['predicted_s'])}" if r else "")
            q = ratio(rows, m, name, size, lo, hi)
            lines.append(f"| {m} | " + " | ".join(cells) + " | " +
                         (f"{q[0]:.2f}× | {q[1]:.2f}× |" if q else " | |"))
        lines.append("")
        claims = []
        q = ratio(rows, "ps S=1", name, size, lo, hi)
        if q:
            claims.append(f"PS (S = 1) from N = {lo} to {hi}: **{q[0]:.2f}×** (model {q[1]:.2f}×; target at 1 Gbit/s ≥ 3×)")
        q = ratio(rows, "ring", name, size, lo, hi)
        if q:
            claims.append(f"ring from N = {lo} to {hi}: **{q[0]:.2f}×** (model {q[1]:.2f}×; target at 1 Gbit/s ≤ 2×)")
        q = ratio(rows, "tree", name, size, lo, hi)
        if q:
            claims.append(f"tree from N = {lo} to {hi}: {q[0]:.2f}× (model {q[1]:.2f}×: log N depth, pipelined)")
        s1 = next((r for r in at if r["method"] == "ps S=1" and r["N"] == 4), None)
        s4 = next((r for r in at if r["method"] == "ps S=4" and r["N"] == 4), None)
        if s1 and s4:
            claims.append(f"PS at N = 4, S = 1 ÷ S = 4: **{s1['measured_s'] / s4['measured_s']:.2f}×** "
                          f"(model {s1['predicted_s'] / s4['predicted_s']:.2f}×; target at 1 Gbit/s ≥ 2.5×)")
        lines += [f"- {c}" for c in claims] + [""]
    lines += ["## Bytes sent by the busiest rank (Comm counters) beside the exact count", "",
              "The emulation delays messages; it never changes what is sent. Per network and N:",
              "measured bytes (busiest rank) at the headline size.", "",
              "| network | N | " + " | ".join(exp["allreduce"]["algos"] + zero_methods(exp)) + " |",
              "|---|---|" + "---|" * len(exp["allreduce"]["algos"] + zero_methods(exp))]
    for net in exp["networks"]:
        for n in Ns:
            at = {r["method"]: r for r in rows if r["network"] == net["name"] and r["N"] == n
                  and r["size"] == size and r["sent_max"] is not None}
            if not at:
                continue
            cells = []
            for a in exp["allreduce"]["algos"] + zero_methods(exp):
                r = at.get(a)
                exact = r["exact_max"] if r else None
                mark = "" if r is None or exact is None or r["sent_max"] == exact else " (≠ exact!)"
                cells.append(f"{r['sent_max']:,}{mark}" if r else "")
            lines.append(f"| {net['name']} | {n} | " + " | ".join(cells) + " |")
    lines += ["", note, ""]
    return "\n".join(lines)


def plot(exp, rows, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    size = parse_bytes(exp["headline_size"])
    methods = [f"ps S={s}" for s in exp["ps"]["servers"]] + exp["allreduce"]["algos"]
    for net in exp["networks"]:
        at = [r for r in rows if r["network"] == net["name"] and r["size"] == size]
        if not at:
            continue
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for i, m in enumerate(methods):
            pts = sorted((r["N"], r["measured_s"], r["predicted_s"]) for r in at if r["method"] == m)
            if not pts:
                continue
            color = f"C{i}"
            ax.plot([p[0] for p in pts], [p[1] * 1e3 for p in pts], "o-", color=color, label=m)
            ax.plot([p[0] for p in pts], [p[2] * 1e3 for p in pts], "--", color=color, alpha=0.6)
        ax.set_xscale("log", base=2)
        ax.set_xticks(exp["ranks"], [str(n) for n in exp["ranks"]])
        ax.set_yscale("log")
        ax.set_xlabel("N (workers / ranks)")
        ax.set_ylabel("sync time (ms)")
        ax.set_title(f"{human(size)} sync, emulated {net['bandwidth']}, {net['latency']} "
                     "(solid measured, dashed α-β)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8, ncol=2)
        fig.tight_layout()
        fig.savefig(os.path.join(out, f"sync_vs_n_{net['name']}.png"), dpi=110)
        plt.close(fig)


def readme_blocks(exp, rows, zero_note=""):
    """The README's figures: the check's verdict, the notes' claims at the
    first network and what the faster networks show, all from `rows`;
    `zero_note`: the ZeRO rows' provenance (machine_zero.txt)."""
    chk, size = exp["check"], parse_bytes(exp["headline_size"])
    tol, min_size = float(chk["tolerance"]), parse_bytes(chk["min_size"])
    algos = exp["allreduce"]["algos"]
    Ns = exp["ranks"]
    lo, hi = Ns[0], Ns[-1]

    def q(r):
        return r["measured_s"] / r["predicted_s"]

    def pct_span(rs):
        devs = [100 * (q(r) - 1) for r in rs]
        return f"{min(devs):+.0f} to {max(devs):+.0f} %"

    def at(net, method, N, n=size):
        return next((r for r in rows if r["network"] == net and r["method"] == method
                     and r["N"] == N and r["size"] == n), None)

    net0 = chk["network"]
    sel = [r for r in rows if r["network"] == net0 and r["method"] in algos and r["size"] >= min_size]
    inside = [r for r in sel if abs(q(r) - 1) <= tol]
    worst = max(sel, key=lambda r: abs(q(r) - 1))
    check = (f"**{'Met' if len(inside) == len(sel) else 'Not met'}: {len(inside)} of {len(sel)} "
             f"measurements within {100 * tol:.0f} %**, all within "
             f"{100 * max(abs(q(r) - 1) for r in sel):.1f} % (worst: {worst['method']} at N = "
             f"{worst['N']}, {human(worst['size'])}, {q(worst):.3f}× the prediction); per "
             "algorithm, measured ÷ predicted − 1 over every size and N: " +
             ", ".join(f"{a} {pct_span([r for r in sel if r['method'] == a])}" for a in algos) + ".\n")

    def ms(r):
        return f"{r['measured_s'] * 1e3:.1f}"

    def pm(r):
        return f"{r['predicted_s'] * 1e3:.1f}"
    ps1 = [at(net0, "ps S=1", n) for n in Ns]
    ring = [at(net0, "ring", n) for n in Ns]
    tree = [at(net0, "tree", n) for n in Ns]
    s4 = {S: at(net0, f"ps S={S}", 4) for S in exp["ps"]["servers"]}
    s8 = {S: at(net0, f"ps S={S}", hi) for S in exp["ps"]["servers"]}
    S = exp["ps"]["servers"]
    claims = [
        "| claim | measured | model |", "|---|---|---|",
        f"| PS time grows ~linearly in N (S = 1, N = {lo} → {hi}) | {ms(ps1[0])} → {ms(ps1[-1])} ms: "
        f"**{ps1[-1]['measured_s'] / ps1[0]['measured_s']:.2f}×** (target ≥ 3×) | {pm(ps1[0])} → "
        f"{pm(ps1[-1])} ms: {ps1[-1]['predicted_s'] / ps1[0]['predicted_s']:.2f}× |",
        f"| ring nearly flat in N (N = {lo} → {hi}) | {ms(ring[0])} → {ms(ring[-1])} ms: "
        f"**{ring[-1]['measured_s'] / ring[0]['measured_s']:.2f}×** (target ≤ 2×) | 2(N−1)/N·M/B: "
        f"{ring[-1]['predicted_s'] / ring[0]['predicted_s']:.2f}× |",
        f"| tree ~log N | {' → '.join(ms(r) for r in tree)} ms (N = {', '.join(map(str, Ns))}) | "
        f"{' → '.join(pm(r) for r in tree)} ms |",
        f"| sharding over S servers divides the PS bottleneck (N = 4) | S = {S[0]}: {ms(s4[S[0]])}, "
        f"S = {S[-1]}: {ms(s4[S[-1]])} ms: **{s4[S[0]]['measured_s'] / s4[S[-1]]['measured_s']:.2f}×** "
        f"(target ≥ 2.5×) | {pm(s4[S[0]])} vs {pm(s4[S[-1]])} ms: "
        f"{s4[S[0]]['predicted_s'] / s4[S[-1]]['predicted_s']:.2f}× |",
        f"| … and at N = {hi} | S = {', '.join(map(str, S))}: "
        f"{', '.join(ms(s8[x]) for x in S)} ms (" +
        ", ".join(f"÷ {s8[S[0]]['measured_s'] / s8[x]['measured_s']:.2f}" for x in S[1:]) + ") | " +
        f"{', '.join(pm(s8[x]) for x in S)} ms (" +
        ", ".join(f"÷ {s8[S[0]]['predicted_s'] / s8[x]['predicted_s']:.2f}" for x in S[1:]) + ") |"]
    B0 = parse_bandwidth(next(n for n in exp["networks"] if n["name"] == net0)["bandwidth"])
    textbook = 2 * size * math.log2(hi) / B0
    claims.append("")
    claims.append(f"Wire time of {human(size)} at {net0}: {size / B0 * 1e3:.0f} ms; the "
                  f"textbook's unpipelined tree, 2·M·log₂N / B at N = {hi}: "
                  f"{textbook * 1e3:.0f} ms.")
    host = []
    for net in exp["networks"][1:]:
        name, B = net["name"], parse_bandwidth(net["bandwidth"])
        big = [r for r in rows if r["network"] == name and r["size"] >= min_size]
        at_hi = {a: at(name, a, hi) for a in algos}
        psN = {x: at(name, f"ps S={x}", hi) for x in S}
        host.append(
            f"- {net['bandwidth']} ({size / B * 1e3:.1f} ms per {human(size)} on the wire): "
            "measured ÷ predicted − 1 over every size and N: " +
            ", ".join(f"{a} {pct_span([r for r in big if r['method'] == a])}" for a in algos) +
            f". At N = {hi}, {human(size)}, measured ÷ predicted: " +
            ", ".join(f"{a} {q(r):.2f}×" for a, r in at_hi.items() if r) + "; " +
            ", ".join(f"PS S = {x} {q(r):.2f}×" for x, r in psN.items() if r) +
            f"; PS S = {S[0]} ÷ S = {S[-1]} at N = 4: "
            f"{at(name, f'ps S={S[0]}', 4)['measured_s'] / at(name, f'ps S={S[-1]}', 4)['measured_s']:.2f}× "
            f"(model {at(name, f'ps S={S[0]}', 4)['predicted_s'] / at(name, f'ps S={S[-1]}', 4)['predicted_s']:.2f}×)"
            f"; ring at N = {hi}: {ms(at_hi['ring'])} ms; the PS at N = {hi}: "
            f"{min(float(ms(r)) for r in psN.values()):.1f}–{max(float(ms(r)) for r in psN.values()):.1f} ms.")
    zero = []
    for net in exp["networks"]:
        name = net["name"]
        cells = []
        for m in zero_methods(exp):
            base = m.split(" zero")[0]
            for n in Ns:
                r, r0 = at(name, m, n), at(name, base, n)
                if r and r0:
                    cells.append((m, n, q(r), r["measured_s"] / r0["measured_s"],
                                  r["predicted_s"] / r0["predicted_s"]))
        top = [c for c in cells if c[1] == hi]
        if cells:
            zero.append(f"- {net['bandwidth']}: measured ÷ predicted − 1: " + ", ".join(
                f"{m} {pct_span([at(name, m, n) for n in Ns if at(name, m, n)])}"
                for m in zero_methods(exp) if any(c[0] == m for c in cells)) + "." +
                (f" At N = {hi}, ÷ the same algorithm's allreduce (ZeRO-0) row, measured "
                 "(model): " + ", ".join(f"{m} {a:.2f}× ({b:.2f}×)" for m, _, _, a, b in top) + "."
                 if top else ""))
    wrong = [r for r in rows if r["method"] in zero_methods(exp) and r["sent_max"] is not None
             and r["sent_max"] != r["exact_max"]]
    counted = [r for r in rows if r["method"] in zero_methods(exp) and r["sent_max"] is not None]
    if counted:
        zero.append(f"- Bytes sent by the busiest rank: {len(counted) - len(wrong)} of "
                    f"{len(counted)} ZeRO measurements equal 2(N−1)/N·n (stages 1, 2) or "
                    "3(N−1)/N·n (stage 3) exactly" + (" — **not all**" if wrong else "") + ".")
    if zero and zero_note:
        zero.append("\nThe ZeRO rows' own run (machine_zero.txt): " + zero_note)
    blocks = {"README.md#check": check, "README.md#claims": "\n".join(claims) + "\n",
              "README.md#host": "\n".join(host) + "\n"}
    if zero:
        blocks["README.md#zero"] = "\n".join(zero) + "\n"
    return blocks


def reports(exp, out, psar, blocks=False):
    """check.md and table.md from the CSVs and machine.txt in `out` (and,
    with `blocks`, the README's generated blocks)."""
    def read(name):
        path = os.path.join(out, name)
        return open(path).read().strip() if os.path.exists(path) else ""
    note, zero_note = read("machine.txt"), read("machine_zero.txt")
    if zero_note and zero_note != note:  # a run of the ZeRO rows alone (--zero)
        note += "\n\nThe ZeRO rows (machine_zero.txt): " + zero_note
    rows = load(exp, out, psar)
    if not rows:
        raise runner.RunError(f"no measurements in {out}")
    texts = {"check.md": check_report(exp, rows, note), "table.md": table_report(exp, rows, note)}
    if blocks:
        texts.update(readme_blocks(exp, rows, zero_note))
    return texts


def first_measurements(folder):
    """results/net_1gbit, the first measurements at 1 Gbit/s, 50 µs and 16 MiB
    (superseded by this script's folder): its table from the bench CSVs, each
    beside the α-β bounds."""
    ms = lambda name: float(read_csv(os.path.join(folder, name))[0]["time_us"]) / 1e3  # noqa: E731
    B, alpha, M = parse_bandwidth("1Gbit"), parse_seconds("50us"), parse_bytes("16M")
    wire = M / B * 1e3  # ms
    s1n4, s4n4, s1n2, s1n8 = (ms(f) for f in ("ps_S1_N4.csv", "ps_S4_N4.csv", "ps_S1_np3.csv",
                                              "ps_S1_np9.csv"))
    r2, r8 = ms("ring_n2.csv"), ms("ring_n8.csv")
    m2, m8 = wire + 2e3 * alpha, 2 * 7 / 8 * wire + 14e3 * alpha
    span = lambda k: f"{k * wire:.0f}–{2 * k * wire:.0f} ms"  # noqa: E731
    rows = [
        ["PS push+pull, S = 1, N = 4", f"{s1n4:.1f} ms",
         f"{span(4)} (server ingress 4·M/B, egress 4·M/B; overlapped by chunking)", "", ""],
        ["PS push+pull, S = 4, N = 4", f"{s4n4:.1f} ms",
         f"{span(1)} (each shard 4·M/(4B) each way; workers' own NICs M/B each way)",
         f"S1/S4 = **{s1n4 / s4n4:.2f}×** (target ≥ 2.5×)", "≈ 4×"],
        ["PS, S = 1, N = 2", f"{s1n2:.1f} ms", span(2), "", ""],
        ["PS, S = 1, N = 8", f"{s1n8:.1f} ms", span(8), f"N8/N2 = **{s1n8 / s1n2:.2f}×** (target ≥ 3×)",
         "4×"],
        ["ring allreduce, N = 2", f"{r2:.1f} ms", f"2·(1/2)·M/B + 2α = {m2:.1f} ms", "", ""],
        ["ring allreduce, N = 8", f"{r8:.1f} ms", f"2·(7/8)·M/B + 14α = {m8:.1f} ms",
         f"N8/N2 = **{r8 / r2:.2f}×** (target ≤ 2×)", f"{m8 / m2:.2f}×"]]
    table = md_table(["what", "measured", "model (α-β, B = 125 MB/s, α = 50 µs)", "ratio measured",
                      "ratio model"], rows)
    note = (f"The ring within {100 * max(abs(r2 / m2 - 1), abs(r8 / m8 - 1)):.1f} % of its α-β "
            f"prediction; the PS with one shard {s1n8 / s1n2:.1f}× from N = 2 to 8; S = 4 against "
            f"S = 1 at N = 4: {s1n4 / s4n4:.1f}× against the model's 4×.\n")
    return {"README.md#table": table, "README.md#reading": note}


def regenerate(folder, results=None, first=False):
    if first:
        return first_measurements(folder)
    return reports(report.load(os.path.join(ROOT, "experiments", "net_scaling.yaml"),
                               "net_scaling"), folder, runner.psar_binary(), blocks=True)


def write_reports(args):
    """check.md, table.md, the README's blocks and the plots from the data
    in args.out (psar computes the cost forms)."""
    exp, out, psar = runner.experiment(args, "net_scaling"), args.out, runner.psar_binary(args.psar)
    texts = reports(exp, out, psar, blocks=True)
    update_readme(out, {k.split("#")[1]: texts.pop(k) for k in list(texts) if "#" in k})
    for name, text in texts.items():
        write_text(os.path.join(out, name), text)
    plot(exp, load(exp, out, psar), out)
    print(f"net_scaling.py: wrote {out}/check.md, table.md, sync_vs_n_*.png")


def measure_and_report(args):
    measure(runner.experiment(args, "net_scaling"), args.psar, args.out, args.quick, args.high_priority)
    note = runner.provenance_text(args.state, args.high_priority)
    write_text(os.path.join(args.out, "machine.txt"), note + "\n")
    write_text(os.path.join(args.out, "machine_zero.txt"), note + "\n")
    write_reports(args)


def measure_zero_and_report(args):
    """The ZeRO rows alone: their provenance goes to machine_zero.txt (the
    README's "Produced by" stays the other rows')."""
    measure_zero(runner.experiment(args, "net_scaling"), args.psar, args.out, args.quick,
                 args.high_priority)
    note = runner.provenance_text(args.state, args.high_priority)
    write_text(os.path.join(args.out, "machine_zero.txt"), note + "\n")
    write_reports(args)
    return []


def launcher():
    name = lambda args: runner.experiment(args, "net_scaling")["experiment"]["name"]  # noqa: E731
    launch = runner.Launcher(__doc__, name, runs={"measure": measure_and_report, "zero": measure_zero_and_report},
                             reports={"reuse": write_reports},
                             flags={"--reuse": ("reuse", "report from the data in --out"),
                                    "--zero": ("zero", "measure the ZeRO rows alone, report with the rest")},
                             out_help="default: runs/<name>, or results/<name> with --reference")
    ap = launch.parser
    ap.add_argument("experiment", nargs="?", default=os.path.join(ROOT, "experiments", "net_scaling.yaml"))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--high-priority", action="store_true")
    return launch


if __name__ == "__main__":
    runner.main_guard("net_scaling.py", launcher().main)
