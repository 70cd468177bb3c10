"""The R2 half of experiments/report_collectives.py: the alpha-beta-gamma
cost forms of docs/algorithms.md, their fit to a `psar bench allreduce` sweep,
the busbw plots and the Markdown table with the issue's targets."""

import csv
import math
import os

UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_bytes(text):
    text = str(text).strip().upper().replace("IB", "").replace("B", "")
    suffix = text[-1] if text and text[-1] in UNITS else ""
    return int(float(text[: len(text) - len(suffix)]) * UNITS[suffix])


def human(nbytes):
    for s in ("G", "M", "K"):
        if nbytes >= UNITS[s] and nbytes % UNITS[s] == 0:
            return f"{nbytes // UNITS[s]}{s}"
    return str(nbytes)


def read_csv(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def write_text(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def cost_terms(algo, p, n, segment):
    """Coefficients (a, b, c) of alpha, beta, gamma for one call."""
    p2 = 1 << int(math.floor(math.log2(p)))
    L, f = int(math.log2(p2)), (1 if p != p2 else 0)
    if algo in ("ring", "mpi"):
        return 2 * (p - 1), 2 * (p - 1) / p * n, (p - 1) / p * n
    if algo == "halving_doubling":
        return 2 * L + 2 * f, 2 * (p2 - 1) / p2 * n + 2 * f * n, (p2 - 1) / p2 * n + f * n
    if algo == "butterfly":
        return L + 2 * f, L * n + 2 * f * n, L * n + f * n
    if algo == "tree":
        # Each phase (reduce, then broadcast) is bound by the root's link: k·S
        # segments through it, after a fill of two segment times per level of
        # two-child inner nodes below the root's children (docs/algorithms.md;
        # exact for N a power of two, an approximation of the fill otherwise).
        D, S, k = int(math.floor(math.log2(p))), max(1, math.ceil(n / segment)), min(2, p - 1)
        fill = 2 * max(0, D - 2)
        return 2 * (D + S - 1), 2 * (k * S + fill) * n / S, (k * S + fill) * n / S
    if algo == "naive":
        return p - 1, (p - 1) * n, (p - 1) * n
    raise ValueError(f"no cost form for {algo}")


def fit_alpha_beta(samples, gamma):
    """Non-negative least squares on relative error over (a, b, c, t) samples."""
    best = None
    for use in ((True, True), (True, False), (False, True)):
        # Rows scaled by 1/t: minimize sum ((a alpha + b beta + c gamma - t) / t)^2.
        cols = [i for i, u in enumerate(use) if u]
        A = [[(s[i] / s[3]) for i in cols] for s in samples]
        y = [1 - s[2] * gamma / s[3] for s in samples]
        x = solve_least_squares(A, y)
        if x is None or any(v < 0 for v in x):
            continue
        full = [0.0, 0.0]
        for i, v in zip(cols, x):
            full[i] = v
        err = sum((r - sum(ai * xi for ai, xi in zip(row, x))) ** 2 for row, r in zip(A, y))
        if best is None or err < best[0]:
            best = (err, full)
    return best[1] if best else [0.0, 0.0]


def solve_least_squares(A, y):
    """Normal equations for 1 or 2 unknowns (enough here; no numpy needed)."""
    k = len(A[0])
    G = [[sum(r[i] * r[j] for r in A) for j in range(k)] for i in range(k)]
    h = [sum(r[i] * v for r, v in zip(A, y)) for i in range(k)]
    if k == 1:
        return [h[0] / G[0][0]] if G[0][0] > 0 else None
    det = G[0][0] * G[1][1] - G[0][1] * G[1][0]
    if abs(det) < 1e-300:
        return None
    return [(h[0] * G[1][1] - h[1] * G[0][1]) / det, (G[0][0] * h[1] - G[1][0] * h[0]) / det]


def forced_section(exp, out):
    forced = exp.get("forced_mpi")
    if not forced:
        return ""
    lines = ["## Against Open MPI's own algorithms (forced, same run)", "",
             "`mpi` below is MPI_Allreduce with `--mca coll_tuned_use_dynamic_rules 1 --mca "
             "coll_tuned_allreduce_algorithm K`; each cell is psar's time / MPI's time (below 1: "
             "psar faster).", ""]
    for name in forced.get("algorithms", {}):
        for p in exp["bench"]["ranks"]:
            path = os.path.join(out, f"forced_{name}_n{p}.csv")
            if not os.path.exists(path):
                continue
            rows = read_csv(path)
            mpi = {r["size"]: float(r["time_us"]) for r in rows if r["algo"] == "mpi"}
            for a in forced["algos"]:
                if a == "mpi":
                    continue
                cells = [f"{human(int(r['size']))} {float(r['time_us']) / mpi[r['size']]:.2f}"
                         for r in rows if r["algo"] == a]
                lines.append(f"- {a} vs Open MPI {name}, N = {p}: " + ", ".join(cells))
    return "\n".join(lines)


def plot_busbw(series, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def draw(path, title, lines):
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for label, pts in lines:
            ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", ms=3, label=label)
        ax.set_xscale("log", base=2)
        sizes = sorted({x for _, pts in lines for x, _ in pts})
        ticks = [x for x in sizes if (x.bit_length() - 1) % 2 == 0]  # every factor 4
        ax.set_xticks(ticks)
        ax.set_xticklabels([human(x) for x in ticks])
        ax.set_xlabel("size (bytes)")
        ax.set_ylabel("busbw (GB/s)")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)

    algos = sorted({a for (a, _) in series})
    ranks = sorted({p for (_, p) in series})
    for a in algos:
        draw(os.path.join(out, f"busbw_{a}.png"), f"{a}: busbw vs size",
             [(f"N={p}", series[(a, p)]) for p in ranks if (a, p) in series])
    for p in ranks:
        draw(os.path.join(out, f"busbw_n{p}.png"), f"N={p}: busbw vs size",
             [(a, series[(a, p)]) for a in algos if (a, p) in series])


def report_cost(exp, out, gamma, note):
    bench = exp["bench"]
    segment = parse_bytes(bench.get("segment_bytes", "512K"))
    data, series = {}, {}
    for p in bench["ranks"]:
        for r in read_csv(os.path.join(out, f"bench_n{p}.csv")):
            key = (r["algo"], p)
            data.setdefault(key, []).append((int(r["size"]), float(r["time_us"]) * 1e-6,
                                             float(r["busbw"]), r["wrong"]))
    for key, pts in data.items():
        series[key] = [(n, bw) for n, _, bw, _ in pts]
    plot_busbw(series, out)

    lines = ["# Alpha-beta-gamma cost of the allreduce algorithms (R2)", "",
             "Sweep of `psar bench allreduce` (in place, float32, time = median over rounds of "
             "the max over ranks; every algorithm in the same run, taking turns), fitted to the "
             "cost forms of docs/algorithms.md. γ is measured on the reduction kernel "
             f"(bench_reduce, add_inplace on 64 MiB): γ = {gamma * 1e12:.1f} ps/byte "
             f"({1e-9 / gamma:.2f} GB/s); α ≥ 0 and β ≥ 0 are fitted per algorithm and N by "
             "least squares on relative error. Regenerate: `experiments/report_collectives.py "
             "experiments/collective_cost.yaml`.", "",
             "| algorithm | N | α (µs) | β (ps/byte) | 1/β (GB/s) | median abs. rel. error | wrong |",
             "|---|---|---|---|---|---|---|"]
    fits = {}
    for (a, p), pts in sorted(data.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        samples = [cost_terms(a, p, n, segment) + (t,) for n, t, _, _ in pts]
        alpha, beta = fit_alpha_beta(samples, gamma)
        fits[(a, p)] = (alpha, beta)
        rel = sorted(abs((s[0] * alpha + s[1] * beta + s[2] * gamma) / s[3] - 1) for s in samples)
        wrong = sum(int(w) for *_, w in pts if w not in ("", None))
        inv = f"{1e-9 / beta:.2f}" if beta > 0 else "∞"
        lines.append(f"| {a} | {p} | {alpha * 1e6:.2f} | {beta * 1e12:.1f} | {inv} | "
                     f"{rel[len(rel) // 2]:.2f} | {wrong} |")
    for p in bench["ranks"]:
        algos = [a for a in bench["algos"] if (a, p) in data]
        lines += ["", f"## Predicted vs measured time at N = {p} (µs, measured / predicted)", "",
                  "| size | " + " | ".join(algos) + " |", "|---" * (len(algos) + 1) + "|"]
        for i, (n, *_rest) in enumerate(data[(algos[0], p)]):
            cells = []
            for a in algos:
                _, t, _, _ = data[(a, p)][i]
                ca, cb, cc = cost_terms(a, p, n, segment)
                alpha, beta = fits[(a, p)]
                cells.append(f"{t * 1e6:.1f} / {(ca * alpha + cb * beta + cc * gamma) * 1e6:.1f}")
            lines.append(f"| {human(n)} | " + " | ".join(cells) + " |")
    lines += ["", READING, "", targets_section(exp, data), "", forced_section(exp, out), "",
              note, ""]
    write_text(os.path.join(out, "table.md"), "\n".join(lines))


def ratio_line(p, ratios, worst_of, ok):
    if not ratios:
        return f"- N = {p}: no sizes in range"
    worst = worst_of(r for _, r in ratios)
    cells = ", ".join(f"{human(n)} {r:.3f}" for n, r in ratios)
    return f"- N = {p}: {cells} — worst {worst:.3f}, {'met' if ok(worst) else '**not met**'}"


READING = """## Where the model fits and where it does not

- α is not one number. Open MPI's shared-memory transport sends up to 4 KiB
  (header included) eagerly, larger messages after a rendezvous handshake of a
  few µs; halving-doubling and MPI's messages cross that line at 8 KiB, hence
  their jump there (butterfly and ring send small messages as eager pieces,
  docs/algorithms.md). The fit spreads the step over α and β.
- β is not one number either: vectors that fit the last-level cache (32 MiB,
  shared) move about twice as fast as larger ones. The fitted β is an average,
  so small sizes are over-predicted and large ones under-predicted.
- At N = 4 two ranks share each of the 2 cores: every dependent step also waits
  for a context switch, which α absorbs (tens of µs instead of about one), and
  algorithms with fewer dependent steps (halving-doubling, MPI's Rabenseifner:
  2·log₂N = 4) gain on the ring (2(N−1) = 6) at mid sizes.
- MPI_Allreduce allocates its temporary buffer on every call; from 32 MiB up
  glibc maps it fresh each time and every page faults (about 8 K page faults
  per call at 64 MiB, measured with perf stat), which is why MPI falls to half
  the ring's busbw there. psar plans its scratch once.
- Timing noise: identical configurations in one run differ by up to about 8 %
  on this shared host; a ratio within that of a target is a tie."""


def targets_section(exp, data):
    t = exp.get("targets", {})
    lines = ["## Targets (same run, ratios per size)", ""]
    ring = t.get("ring_vs_mpi_busbw")
    if ring:
        lines += [f"ring busbw / mpi busbw at sizes ≥ {ring['min_size']} (target ≥ {ring['at_least']}):", ""]
        for p in ring["ranks"]:
            pairs = zip(data.get(("ring", p), []), data.get(("mpi", p), []))
            ratios = [(r[0], r[2] / m[2]) for r, m in pairs if r[0] >= parse_bytes(ring["min_size"])]
            lines.append(ratio_line(p, ratios, min, lambda w: w >= ring["at_least"]))
    bfly = t.get("butterfly_vs_mpi_time")
    if bfly:
        lines += ["", f"butterfly time / mpi time at sizes ≤ {bfly['max_size']} (target ≤ {bfly['at_most']}):", ""]
        for p in bfly["ranks"]:
            pairs = zip(data.get(("butterfly", p), []), data.get(("mpi", p), []))
            ratios = [(b[0], b[1] / m[1]) for b, m in pairs if b[0] <= parse_bytes(bfly["max_size"])]
            lines.append(ratio_line(p, ratios, max, lambda w: w <= bfly["at_most"]))
    return "\n".join(lines)
