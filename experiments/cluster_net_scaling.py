#!/usr/bin/python3
"""Runs experiments/cluster_net_scaling.yaml: the net_scaling set on the
virtual cluster (scripts/cluster.sh), every layout beside psar's emulator at
the same setting and the α-β forms.

    experiments/cluster_net_scaling.py [EXPERIMENT.yaml] [--layout HxK ...]
                                       [--out DIR] [--raw DIR] [--reuse]

For every layout H×K (H hosts, K ranks each, N = H·K), one lock hold each
(`flock /tmp/psar-measure.lock` around a call with one --layout):
  - cluster: `scripts/cluster.sh up` with the layout's hosts plus max(S)
    more, `psar bench allreduce` with every algorithm at K ranks per host,
    and `psar bench ps --servers S` per S with the S shards on hosts of
    their own (cluster.sh mpirun --slots 1,..,1,K,..,K); `down` in any case;
  - emulator: the same benches under plain mpirun on this host with
    net.bandwidth = the link, net.latency = 0 (the kernel's links add tens
    of µs, no more) and net.node_size = K (a node's K ranks share its NIC,
    unlimited inside, as shared memory on a host), `mpi` left out (it
    bypasses the model); the PS only for K = 1 (its shards are ranks
    0..S-1, which nodes of K consecutive ranks would mix with workers).
Raw CSVs and each layout's machine state go into --raw
(results/cluster/net_scaling/); --reuse re-reports from them. Writes
net_scaling.md (tables, disagreements beyond the tolerance flagged),
net_scaling.csv (every point) and net_scaling.png into --out
(results/cluster/).

Predictions (β = 1/B, α = 0, γ = 0): the allreduce forms of docs/algorithms.md
from `psar cost`, which give every rank a NIC of its own (exact for K = 1; for
K > 1 the K ranks of a host share its link, see the report); the parameter
server's model psar_exp.costs.ps_time with a host's K workers on one NIC.
"""

import json
import os
import signal
import statistics

from psar_exp import ROOT, costs, report, runner
from psar_exp.io import csv_text, md_table, read_csv, write_text
from psar_exp.units import human, parse_bandwidth, parse_bytes


def layout_name(lay):
    return f"{lay['hosts']}x{lay['per_host']}"


def cluster_sh(exp):
    return [os.path.join(ROOT, "scripts", "cluster.sh"), "--name", exp["cluster"]["name"]]


def ps_cmd(psar, ps, S, csv, sets=()):
    cmd = [psar, "bench", "ps", "--servers", str(S), "-b", str(ps["size"]), "-e", str(ps["size"]),
           "-n", str(ps["iters"]), "-w", str(ps["warmup"]), "--csv", csv,
           "--set", f"ps.chunk_bytes={ps['chunk_bytes']}"]
    for s in sets:
        cmd += ["--set", s]
    return cmd


def measure_layout(exp, psar, raw, lay, prov):
    """One layout on the cluster, then (K = 1) under the emulator; `prov`
    is the run's runner.begin()."""
    H, K = lay["hosts"], lay["per_host"]
    N, name = H * K, layout_name(lay)
    ar, ps, cl = exp["allreduce"], exp["ps"], exp["cluster"]
    before = runner.machine_state()
    cluster = cluster_sh(exp)
    runner.run(cluster + ["up", "--hosts", str(H + max(ps["servers"])), "--link", cl["link"],
                          "--subnet", cl["subnet"]])
    try:
        runner.run(runner.cluster_prefix(N, per_host=K, name=cl["name"]) + runner.bench_allreduce_args(
            psar, ar["algos"], ar, ar["segment_bytes"],
            csv=os.path.join(raw, f"cluster_allreduce_{name}.csv")))
        for S in ps["servers"]:
            slots = [1] * S + [K] * H  # ranks 0..S-1 serve (psar bench ps), one host each
            runner.run(runner.cluster_prefix(N + S, name=cl["name"], slots=slots) + ps_cmd(
                psar, ps, S, os.path.join(raw, f"cluster_ps_{name}_s{S}.csv")))
    finally:
        runner.run(cluster + ["down"])
    sets = [f"net.bandwidth={cl['link']}", "net.latency=0", f"net.node_size={K}"]
    runner.run(runner.mpirun_prefix(N) + runner.bench_allreduce_args(
        psar, [a for a in ar["algos"] if a != "mpi"], ar, ar["segment_bytes"],
        csv=os.path.join(raw, f"emulator_allreduce_{name}.csv"), sets=sets))
    if K == 1:
        for S in ps["servers"]:
            runner.run(runner.mpirun_prefix(N + S) + ps_cmd(
                psar, ps, S, os.path.join(raw, f"emulator_ps_{name}_s{S}.csv"), sets))
    state = {"layout": name, "load_before": before["load"], "load_after": os.getloadavg()[0],
             "steal": runner.steal_share(before["cpu"], runner.cpu_times()),
             "commit": (prov["commit"] or "unknown")[:12] +
             (" (exploratory: " + "; ".join(prov["problems"]) + ")" if prov["problems"] else "")}
    write_text(os.path.join(raw, f"machine_{name}.json"), json.dumps(state) + "\n")


def read_times(path, key):
    """{(method, size): seconds} of a bench CSV; key picks the method column."""
    if not os.path.exists(path):
        return {}
    out = {}
    for r in read_csv(path):
        if r.get("wrong") not in (None, "", "0"):
            raise runner.RunError(f"{path}: {r['algo']} at {r['size']} B summed wrongly")
        if "mode" in r and r["mode"] != "ps":
            continue
        out[(key(r), int(r["size"]))] = float(r["time_us"]) * 1e-6
    return out


def load(exp, raw, psar):
    """Every measured point: layout, N, method, size, cluster, emulator and α-β seconds."""
    ar, ps = exp["allreduce"], exp["ps"]
    B = parse_bandwidth(exp["cluster"]["link"])
    chunk = parse_bytes(ps["chunk_bytes"])
    rows = []
    for lay in exp["layouts"]:
        H, K = lay["hosts"], lay["per_host"]
        N, name = H * K, layout_name(lay)
        got = {}
        for side in ("cluster", "emulator"):
            got[side] = read_times(os.path.join(raw, f"{side}_allreduce_{name}.csv"),
                                   lambda r: r["algo"])
            for S in ps["servers"]:
                got[side].update(read_times(os.path.join(raw, f"{side}_ps_{name}_s{S}.csv"),
                                            lambda r, S=S: f"ps S={S}"))
        order = ar["algos"] + [f"ps S={S}" for S in ps["servers"]]
        for (method, n), t in sorted(got["cluster"].items(),
                                     key=lambda kv: (order.index(kv[0][0]), kv[0][1])):
            rows.append({"layout": name, "hosts": H, "per_host": K, "N": N, "method": method,
                         "size": n, "cluster_s": t, "emulator_s": got["emulator"].get((method, n))})
    if not rows:
        return rows
    Ns = sorted({r["N"] for r in rows})
    sizes = sorted({r["size"] for r in rows if not r["method"].startswith("ps")})
    table = costs.query(Ns, sizes, algos=ar["algos"], segment_bytes=ar["segment_bytes"],
                        psar=psar)
    for r in rows:
        if r["method"].startswith("ps"):
            S = int(r["method"].split("=")[1])
            r["alpha_beta_s"] = costs.ps_time(r["N"], S, r["size"], B, 0.0, chunk,
                                              workers_per_node=r["per_host"])
        else:
            r["alpha_beta_s"] = table.time(r["method"], r["N"], r["size"], 0.0, 1 / B)
    return rows


def machine_rows(exp, raw):
    out = []
    for lay in exp["layouts"]:
        path = os.path.join(raw, f"machine_{layout_name(lay)}.json")
        if os.path.exists(path):
            with open(path) as f:
                m = json.load(f)
            steal = "" if m["steal"] is None else f"{100 * m['steal']:.1f} %"
            out.append([m["layout"], m["commit"], f"{m['load_before']:.2f}",
                        f"{m['load_after']:.2f}", steal])
    return out


def fmt(s):
    return "" if s is None else (f"{s * 1e3:.1f}" if s >= 0.01 else f"{s * 1e3:.2f}")


def q(a, b):
    return None if a is None or b is None or b == 0 else a / b


def report_md(exp, rows, raw):
    tol = float(exp["tolerance"])
    link = exp["cluster"]["link"]
    lines = [f"# The net_scaling set on the virtual cluster at {link} per host", "",
             "`experiments/cluster_net_scaling.py` (experiments/cluster_net_scaling.yaml): hosts are",
             "network namespaces whose veth links `tbf` shapes to the link rate in both directions",
             "(scripts/cluster.sh, docs/network.md); H×K is H hosts with K ranks each (N = H·K).",
             "The parameter server's S shards run on S hosts of their own beside the N workers.",
             "Cells: the median round's time in ms (each round the slowest rank's) on the",
             f"cluster | under psar's emulator on one host (net.bandwidth={link}, net.latency=0,",
             "net.node_size=K; the PS only for K = 1) | the α-β form (β = 1/B, α = 0, one NIC",
             "per rank); then cluster ÷ emulator and",
             "cluster ÷ α-β. **✗**: cluster and emulator differ by more than "
             f"{tol:.0%}. The reasons are in results/cluster/README.md.", ""]
    for lay in exp["layouts"]:
        name = layout_name(lay)
        at = [r for r in rows if r["layout"] == name]
        if not at:
            continue
        lines += [f"## {lay['hosts']} hosts × {lay['per_host']} (N = {at[0]['N']})", ""]
        body = []
        for r in at:
            ce = q(r["cluster_s"], r["emulator_s"])
            flag = " **✗**" if ce is not None and abs(ce - 1) > tol else ""
            body.append([r["method"], human(r["size"]), fmt(r["cluster_s"]), fmt(r["emulator_s"]),
                         fmt(r["alpha_beta_s"]), "" if ce is None else f"{ce:.2f}{flag}",
                         f"{q(r['cluster_s'], r['alpha_beta_s']):.2f}"])
        lines.append(md_table(["method", "size", "cluster", "emulator", "α-β",
                               "cluster ÷ emulator", "cluster ÷ α-β"], body))
    both = [r for r in rows if r["emulator_s"] is not None]
    if both:
        out = [r for r in both if abs(r["cluster_s"] / r["emulator_s"] - 1) > tol]
        med = statistics.median(r["cluster_s"] / r["emulator_s"] for r in both)
        lines += [f"Cluster ÷ emulator over the {len(both)} points that have both: median "
                  f"{med:.2f}; {len(out)} differ by more than {tol:.0%}.", ""]
    lines += ["## Machine state per layout", "",
              md_table(["layout", "commit", "load before", "load after", "steal"],
                       machine_rows(exp, raw))]
    return "\n".join(lines)


def plot(exp, rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    head = parse_bytes(exp["headline_size"])
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    methods = ["ring", "hierarchical", "mpi", "tree", "ps S=1", "ps S=4"]
    for ax, K1 in zip(axes, (True, False)):
        for i, m in enumerate(methods):
            pts = sorted((r["N"], r) for r in rows if r["method"] == m and r["size"] == head
                         and (r["per_host"] == 1) == K1)
            if not pts:
                continue
            xs = [p[0] for p in pts]
            ax.plot(xs, [p[1]["cluster_s"] * 1e3 for p in pts], "o-", color=f"C{i}", label=m)
            emu = [(p[0], p[1]["emulator_s"]) for p in pts if p[1]["emulator_s"] is not None]
            if emu:
                ax.plot([e[0] for e in emu], [e[1] * 1e3 for e in emu], "s--", color=f"C{i}",
                        alpha=0.6)
            ax.plot(xs, [p[1]["alpha_beta_s"] * 1e3 for p in pts], ":", color=f"C{i}", alpha=0.6)
        ax.set_xscale("log", base=2)
        Ns = sorted({r["N"] for r in rows})
        ax.set_xticks(Ns, [str(n) for n in Ns])
        ax.set_yscale("log")
        ax.set_xlabel("N (ranks; PS: workers)")
        ax.set_title(("one rank per host" if K1 else "2 hosts × K ranks") +
                     f", {human(head)}, {exp['cluster']['link']}")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("sync time (ms)")
    axes[0].legend(fontsize=8, ncol=2, title="solid cluster, dashed emulator, dotted α-β",
                   title_fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _terminate(signum, frame):
    raise SystemExit(128 + signum)


def reports(exp, raw, psar):
    """net_scaling.csv and net_scaling.md from the measurements under `raw`."""
    rows = load(exp, raw, psar)
    if not rows:
        raise runner.RunError(f"no measurements in {raw}")
    return {"net_scaling.csv": csv_text([{k: ("" if v is None else v) for k, v in r.items()}
                                         for r in rows]),
            "net_scaling.md": report_md(exp, rows, raw)}


# results/cluster/measure.sh's link-efficiency runs: layout -> emulator run of the
# same N (one rank per host), and the link rate the busbw is set against.
EFFICIENCY_LAYOUTS = {"2hosts_x1": "emulator_1Gbit_n2", "4hosts_x1": "emulator_1Gbit_n4",
                      "2hosts_x2": None}
LINK_BYTES_PER_S = 125e6


def efficiency(folder):
    """efficiency.md and the README's tables of measure.sh's runs: busbw over
    the link per layout, and the cluster beside the emulator."""
    runs = {lay: read_csv(os.path.join(folder, f"allreduce_{lay}.csv")) for lay in EFFICIENCY_LAYOUTS}
    pretty = lambda lay: lay.replace("hosts_x", " hosts × ")  # noqa: E731
    mib = lambda r: f"{int(r['size']) // 2**20} MiB"  # noqa: E731
    ratio = lambda r: float(r["busbw"]) * 1e9 / LINK_BYTES_PER_S  # noqa: E731
    eff = md_table(["layout", "algorithm", "size", "time (µs)", "busbw (GB/s)", "busbw / link"],
                   [[lay, r["algo"], mib(r), f"{float(r['time_us']):.0f}", f"{float(r['busbw']):.4f}",
                     f"{ratio(r):.3f}"] for lay, rows in runs.items() for r in rows])
    sizes = sorted({int(r["size"]) for rows in runs.values() for r in rows})
    cell = {(lay, r["algo"], int(r["size"])): r for lay, rows in runs.items() for r in rows}
    busbw = md_table(["layout", "algorithm"] + [f"{n // 2**20} MiB" for n in sizes],
                     [[pretty(lay), a] + [f"{ratio(cell[(lay, a, n)]):.3f}" for n in sizes]
                      for lay in runs for a in ("ring", "mpi")])
    ring = [ratio(r) for rows in runs.values() for r in rows if r["algo"] == "ring"]
    target = (f"psar's ring: busbw / link {min(ring):.2f}–{max(ring):.2f} over every layout and size "
              f"(target ≥ 0.85: {'met' if min(ring) >= 0.85 else '**missed**'}); Open MPI's "
              f"`MPI_Allreduce` {min(ratio(r) for rows in runs.values() for r in rows if r['algo'] == 'mpi'):.2f}–"
              f"{max(ratio(r) for rows in runs.values() for r in rows if r['algo'] == 'mpi'):.2f}.")
    emu_rows, qs = [], []
    for lay, emu in EFFICIENCY_LAYOUTS.items():
        if emu is None:
            continue
        e = {(r["algo"], int(r["size"])): float(r["time_us"]) for r in read_csv(os.path.join(folder, emu + ".csv"))}
        for r in runs[lay]:
            key = (r["algo"], int(r["size"]))
            if key in e:
                c = float(r["time_us"])
                qs.append((c / e[key], pretty(lay), r["algo"], mib(r), e[key] / 1e3))
                emu_rows.append([pretty(lay), r["algo"], mib(r), f"{e[key] / 1e3:.0f}", f"{c / 1e3:.0f}",
                                 f"{c / e[key]:.2f}"])
    emu_rows.sort(key=lambda x: (x[0], x[1] != "ring", int(x[2].split()[0])))
    low = min(qs)
    rest = [x[0] for x in qs if x is not low]
    emulator = (md_table(["layout", "algorithm", "size", "emulator", "cluster", "cluster / emulator"],
                         emu_rows) +
                f"\nCluster ÷ emulator {min(rest):.2f}–{max(rest):.2f}, except {low[2]} on {low[1]} at "
                f"{low[3]}: {low[0]:.2f} (the emulator's {low[4]:.0f} ms).\n")
    h = {n: cell[("2hosts_x2", "hierarchical", n)] for n in sizes}
    r64 = cell[("2hosts_x2", "ring", sizes[-1])]
    hier = (f"`hierarchical` on 2 hosts × 2: busbw / link {min(ratio(x) for x in h.values()):.2f}–"
            f"{max(ratio(x) for x in h.values()):.2f}; at {sizes[-1] // 2**20} MiB "
            f"{float(h[sizes[-1]]['time_us']) / 1e3:.0f} ms against the ring's "
            f"{float(r64['time_us']) / 1e3:.0f} ms "
            f"({100 * (1 - float(h[sizes[-1]]['time_us']) / float(r64['time_us'])):.0f} % faster); "
            f"its link carries n/t = {sizes[-1] / (float(h[sizes[-1]]['time_us']) * 1e-6) / LINK_BYTES_PER_S:.2f} "
            "of the rate.\n")
    return {"efficiency.md": eff, "README.md#busbw": busbw + "\n" + target + "\n",
            "README.md#emulator": emulator, "README.md#hierarchical": hier}


def regenerate(folder, results=None):
    exp = report.load(os.path.join(ROOT, "experiments", "cluster_net_scaling.yaml"),
                      "cluster_net_scaling")
    rows = load(exp, os.path.join(folder, "net_scaling"), runner.psar_binary())
    both = [r for r in rows if r["emulator_s"] is not None]
    tol = float(exp["tolerance"])
    points = (f"Of the {len(both)} points with both, the median cluster ÷ emulator is "
              f"{statistics.median(r['cluster_s'] / r['emulator_s'] for r in both):.2f}; "
              f"{sum(abs(r['cluster_s'] / r['emulator_s'] - 1) > tol for r in both)} differ by more "
              f"than {tol:.0%}.\n")
    return {**reports(exp, os.path.join(folder, "net_scaling"), runner.psar_binary()),
            **efficiency(folder), "README.md#points": points, "README.md#groups": groups(rows, tol)}


def groups(rows, tol):
    """The figures of the README's groups of cluster ÷ emulator, from the rows."""
    ce = lambda r: r["cluster_s"] / r["emulator_s"]  # noqa: E731
    ca = lambda r: r["cluster_s"] / r["alpha_beta_s"]  # noqa: E731
    span = lambda xs: f"{min(xs):.2f}–{max(xs):.2f}" if xs else "—"  # noqa: E731
    lay = lambda r: f"{r['hosts']} hosts × {r['per_host']}"  # noqa: E731
    whole, seg = ("naive", "butterfly", "halving_doubling"), ("ring", "tree", "hierarchical")
    emu = [r for r in rows if r["emulator_s"] is not None]
    big = lambda r: r["size"] >= 8 * 2**20  # noqa: E731
    segbig = [r for r in emu if r["method"] in seg and big(r)]
    near = [r for r in segbig if ce(r) - 1 <= tol + 0.05]
    far = sorted((r for r in segbig if r not in near), key=ce)
    small8 = [ce(r) for r in emu if r["method"] in seg and r["hosts"] == 8 and r["size"] == 2 * 2**20]
    ps = [r for r in rows if r["method"].startswith("ps")]
    lines = [
        f"- Whole-vector exchanges ({', '.join(whole)}): cluster ÷ emulator "
        f"{span([ce(r) for r in emu if r['method'] in whole and r['per_host'] == 1])} with one rank "
        f"per host, {span([ce(r) for r in emu if r['method'] in whole and r['per_host'] > 1])} on "
        f"2 hosts × K; at N = 2, 8–32 MiB: "
        f"{span([ce(r) for r in emu if r['method'] in whole and r['N'] == 2 and big(r)])}. Open MPI's "
        f"`mpi` ÷ α-β: {span([ca(r) for r in rows if r['method'] == 'mpi'])}. The segmented "
        f"algorithms on 2 hosts × 1 at 8–32 MiB: "
        f"{span([ce(r) for r in emu if r['method'] in seg and r['hosts'] == 2 and r['per_host'] == 1 and big(r)])}.",
        f"- {', '.join(seg)} at 8–32 MiB: {span([ce(r) for r in near])} in {len(near)} of {len(segbig)} "
        f"points; further above: " + "; ".join(f"{r['method']} on {lay(r)} at {human(r['size'])} "
                                               f"{ce(r):.2f}" for r in far) +
        f"; every segmented algorithm at 2M on 8 hosts: {span(small8)}.",
        "- On 2 hosts × K, cluster ÷ emulator: " +
        ", ".join(f"{m} {span([ce(r) for r in emu if r['method'] == m and r['per_host'] > 1])}" for m in seg) +
        "; cluster ÷ α-β: " +
        ", ".join(f"{m} {span([ca(r) for r in rows if r['method'] == m and r['per_host'] > 1])}" for m in seg) + ".",
        f"- The parameter server, one rank per host: cluster ÷ emulator "
        f"{span([ce(r) for r in ps if r['emulator_s'] is not None and r['per_host'] == 1])}; on 2 hosts × K "
        f"cluster ÷ α-β {span([ca(r) for r in ps if r['per_host'] > 1])}."]
    return "\n".join(lines) + "\n"


def layouts(args):
    """{name: layout} of the layouts to measure (--layout, default: all)."""
    exp = runner.experiment(args, "cluster_net_scaling")
    known = {layout_name(lay): lay for lay in exp["layouts"]}
    for name in args.layout:
        if name not in known:
            raise runner.RunError(f"--layout {name}: not in {args.experiment} "
                                  f"(layouts: {', '.join(known)})")
    return {name: known[name] for name in args.layout or known}


def raw_folder(args):
    raw = args.raw or os.path.join(args.out, "net_scaling")
    os.makedirs(raw, exist_ok=True)
    return raw


def write_reports(args):
    """net_scaling.md, .csv and .png from the measurements in the raw folder."""
    exp, raw = runner.experiment(args, "cluster_net_scaling"), raw_folder(args)
    psar = runner.psar_binary(args.psar)
    layouts(args)
    for name, text in reports(exp, raw, psar).items():
        write_text(os.path.join(args.out, name), text)
    plot(exp, load(exp, raw, psar), os.path.join(args.out, "net_scaling.png"))
    print(f"cluster_net_scaling.py: wrote {args.out}/net_scaling.md, .csv, .png")


def measure(args):
    """Every layout asked for, then the reports. Each layout records its
    own commit and machine state (machine_<layout>.json): a run of one
    layout leaves the others' as they were, so the folder's README gets no
    provenance of one run."""
    todo = layouts(args)
    if os.geteuid() != 0:
        raise runner.RunError("the virtual cluster needs root (scripts/cluster.sh)")
    # A TERM must still take the cluster down (measure_layout's finally).
    signal.signal(signal.SIGTERM, _terminate)
    exp, raw = runner.experiment(args, "cluster_net_scaling"), raw_folder(args)
    for lay in todo.values():
        measure_layout(exp, args.psar, raw, lay, args.state)
    write_reports(args)
    return []


def launcher():
    launch = runner.Launcher(__doc__, "cluster", runs={"measure": measure},
                             reports={"reuse": write_reports},
                             flags={"--reuse": ("reuse", "re-report from the raw measurements")})
    ap = launch.parser
    ap.add_argument("experiment", nargs="?",
                    default=os.path.join(ROOT, "experiments", "cluster_net_scaling.yaml"))
    ap.add_argument("--layout", action="append", default=[],
                    help="measure only this layout (HxK, repeatable); default: all")
    ap.add_argument("--raw", default=None, help="the raw measurements (default: OUT/net_scaling)")
    return launch


if __name__ == "__main__":
    runner.main_guard("cluster_net_scaling.py", launcher().main)
