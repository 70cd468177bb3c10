#!/usr/bin/python3
"""Runs experiments/overlap.yaml: the gradient sync overlapped with the
backward (docs/overlap.md) against the plain sync after it, for every backend
on the emulated network, and the bucket-size sweep. Every point is one
`psar train` under mpirun, repeated; the repeats are interleaved (every
point once, then every point again) so that a change of the host's load
falls on all of them alike. Run it under the measurement lock, so that no
other measurement shares the host meanwhile:

    flock /tmp/psar-measure.lock experiments/overlap.py

    experiments/overlap.py [EXPERIMENT.yaml] [--reference | --exploratory] [--results DIR]
                           [--only modes|buckets|timeline|cpu] [--backends A,B]
                           [--name NAME] [--quick] [--dry-run]

Writes into runs/<experiment.name>/ (results/... with --reference):
  runs/<point>_r<k>/  the run directory of every repeat (steps.csv, summary.csv, ...)
  modes.csv/.md       per network, N, backend and mode (off, fifo, front_first): the
                      median over repeats of each run's median over steps (after
                      skip_steps) of the slowest rank's step, compute, sync and exposed
                      sync; and the targets: exposed ≤ 25 % of the plain run's sync,
                      step ≤ 1.15 × max(compute, sync) of the plain run
  buckets.csv/.md/.png  step time vs sync.bucket_bytes per backend (overlap on)
  timeline/           one overlapped run with --trace, and timeline.png (the comm track)
  cpu.csv, cpu/       the CPU time (user + system) of plain and overlapped runs, ring and
                      PS, N = 2, with each run's step figures (cpu())

--quick: one repeat, 8 steps, N = 2 and one network (a smoke test of the script).
"""

import os
import resource
import shutil
import statistics
import sys
import time
from collections import defaultdict

from psar_exp import ROOT, report, runner
from psar_exp.io import md_table, read_csv, write_csv, write_text
from psar_exp.units import parse_bytes

MODES = ("off", "fifo", "front_first")
METRICS = ("step_s", "compute_s", "sync_s", "exposed_sync_s")


def network_sets(spec):
    """'1Gbit@50us' -> the --set arguments of that emulated NIC."""
    bandwidth, _, latency = str(spec).partition("@")
    sets = [f"net.bandwidth={bandwidth}"]
    return sets + [f"net.latency={latency}"] if latency else sets


def point_sets(backend, ranks, mode, bucket=None):
    """--set arguments of one backend (the PS with a shard in each of the N
    workers) and overlap mode (off, fifo, front_first)."""
    sets = [f"sync.backend={backend}"]
    if backend == "ps":
        sets.append(f"ps.servers={ranks}")
    if mode not in MODES:
        raise runner.RunError(f"overlap mode '{mode}': expected one of {', '.join(MODES)}")
    if mode == "off":
        sets.append("sync.overlap=false")
    else:
        sets += ["sync.overlap=true", f"sync.priority={mode}"]
    if bucket is not None:
        sets.append(f"sync.bucket_bytes={bucket}")
    return sets


def bucket_value(size, model_bytes):
    """A size of the sweep as sync.bucket_bytes: 'whole' is one bucket for the model."""
    return str(model_bytes) if size == "whole" else size


def run_stats(rows, skip):
    """Medians over steps (after `skip`) of the slowest rank's step, compute,
    sync and exposed sync, from steps.csv rows."""
    by_step = defaultdict(list)
    for r in rows:
        by_step[int(r["step"])].append(r)
    steps = sorted(by_step)[skip:] or sorted(by_step)
    return {m: statistics.median(max(float(r[m]) for r in by_step[s]) for s in steps)
            for m in METRICS}


def summarize(runs):
    """The median over repeats of each metric ({metric: seconds} per run)."""
    return {m: statistics.median(r[m] for r in runs) for m in METRICS}


def check_targets(plain, on, exposed_share=0.25, step_factor=1.15):
    """The targets of an overlapped run against the plain one (the same point
    with the overlap off): exposed sync ≤ exposed_share × the plain sync, and
    step ≤ step_factor × max(plain compute, plain sync). Returns
    (exposed / sync, step / max(compute, sync), both met)."""
    share = on["exposed_sync_s"] / plain["sync_s"]
    bound = on["step_s"] / max(plain["compute_s"], plain["sync_s"])
    return share, bound, share <= exposed_share and bound <= step_factor


def run_point(binary, exp_path, out, ranks, sets, dry_run, extra=()):
    cmd = runner.train_command(binary or "psar", exp_path, out,
                                                 runner.Point(out, ranks, sets), extra)
    print(f"  {' '.join(cmd)}", flush=True)
    if dry_run:
        return None
    if os.path.isdir(out):
        shutil.rmtree(out)
    p = runner.launch(cmd, echo=False)
    if p.returncode != 0:
        raise runner.RunError(f"point {out} failed (exit code {p.returncode}):\n"
                              f"{p.stdout[-4000:]}{p.stderr[-4000:]}")
    return read_csv(os.path.join(out, "steps.csv"))


def measure(points, exp, exp_path, out_root, binary, repeats, dry_run):
    """points: [(key, ranks, sets)]. Every point once per round, `repeats`
    rounds; returns {key: [run stats]} and the load average at each run."""
    skip = int(exp["experiment"]["sweep"].get("skip_steps", 5))
    results, loads = defaultdict(list), defaultdict(list)
    for k in range(repeats):
        for key, ranks, sets in points:
            name = "_".join(str(p) for p in key)
            print(f"[{k + 1}/{repeats}] {name}", flush=True)
            loads[key].append(os.getloadavg()[0])
            rows = run_point(binary, exp_path, os.path.join(out_root, "runs", f"{name}_r{k}"),
                             ranks, sets, dry_run)
            if rows is not None:
                results[key].append(run_stats(rows, skip))
    return results, loads


def ms(x):
    return round(1e3 * x, 2)


def modes(exp, exp_path, out_root, binary, quick, dry_run, backends=None):
    sweep = exp["experiment"]["sweep"]
    nets = sweep["networks"][:1] if quick else sweep["networks"]
    ranks_list = [2] if quick else sweep["ranks"]
    points = [((net.replace("@", "-"), f"n{n}", b, mode), n,
               network_sets(net) + point_sets(b, n, mode) + (["train.steps=8"] if quick else []))
              for net in nets for n in ranks_list for b in backends or sweep["backends"]
              for mode in sweep["modes"]]
    results, loads = measure(points, exp, exp_path, out_root, binary,
                             1 if quick else int(sweep["repeats"]), dry_run)
    if dry_run:
        return
    cores = os.cpu_count()
    rows = []
    for key, n, _ in points:
        s = summarize(results[key])
        rows.append({"network": key[0], "ranks": n, "ranks_per_core": round(n / cores, 2),
                     "backend": key[2], "mode": key[3], "repeats": len(results[key]),
                     "step_ms": ms(s["step_s"]), "compute_ms": ms(s["compute_s"]),
                     "sync_ms": ms(s["sync_s"]), "exposed_ms": ms(s["exposed_sync_s"]),
                     "exposed_share": round(s["exposed_sync_s"] / s["sync_s"], 3),
                     "load1_median": round(statistics.median(loads[key]), 2),
                     "step_ms_repeats": " ".join(str(ms(r["step_s"])) for r in results[key])})
    # The targets, against the plain run of the same network, N and backend.
    plain = {(r["network"], r["ranks"], r["backend"]): r for r in rows if r["mode"] == "off"}
    for r in rows:
        p = plain.get((r["network"], r["ranks"], r["backend"]))
        if r["mode"] == "off" or p is None:
            continue
        share, bound, ok = check_targets(
            {"sync_s": p["sync_ms"], "compute_s": p["compute_ms"]},
            {"exposed_sync_s": r["exposed_ms"], "step_s": r["step_ms"]})
        r.update(exposed_vs_plain_sync=round(share, 3), step_vs_max_plain=round(bound, 3),
                 targets_met="yes" if ok else "no")
    write_csv(os.path.join(out_root, "modes.csv"), rows,
              list(rows[0].keys()) + ["exposed_vs_plain_sync", "step_vs_max_plain",
                                      "targets_met"])
    write_text(os.path.join(out_root, "modes.md"),
               modes_md(read_csv(os.path.join(out_root, "modes.csv"))))


def modes_md(rows):
    """modes.md of the rows of modes.csv."""
    header = ["network", "N", "backend", "mode", "step ms", "compute ms", "sync ms",
              "exposed ms", "exposed / plain sync", "step / max(plain compute, sync)", "targets"]
    table = [[r["network"], r["ranks"], r["backend"], r["mode"], r["step_ms"], r["compute_ms"],
              r["sync_ms"], r["exposed_ms"], r.get("exposed_vs_plain_sync", ""),
              r.get("step_vs_max_plain", ""), r.get("targets_met", "")] for r in rows]
    return md_table(header, table)


def buckets_md(rows, sizes, backends):
    """buckets.md of the rows of buckets.csv."""
    by_backend = defaultdict(dict)
    for r in rows:
        by_backend[r["backend"]][r["bucket"]] = r
    header = ["backend"] + [f"{s} step / exposed ms" for s in sizes]
    table = [[b] + [f"{by_backend[b][s]['step_ms']} / {by_backend[b][s]['exposed_ms']}"
                    for s in sizes] for b in backends]
    return md_table(header, table)


EXPOSED_SHARE, STEP_FACTOR = check_targets.__defaults__


def readme_blocks(rows, shown=("ring", "ps")):
    """The README's table of the `shown` backends and the targets' tallies,
    from the rows of modes.csv."""
    num = lambda r, k: float(r[k]) if r[k] != "" else None  # noqa: E731
    f1 = lambda x: "—" if x is None else f"{x:.1f}"  # noqa: E731
    f2 = lambda x: "—" if x is None else f"{x:.2f}"  # noqa: E731
    where = lambda r: f"{r['backend']} {r['mode']} {r['network']} N = {r['ranks']}"  # noqa: E731
    header = ["network", "N", "backend", "mode", "step", "compute", "sync", "exposed",
              "exposed / plain sync", "step / max(plain compute, plain sync)"]
    table = md_table(header, [[r["network"], r["ranks"], r["backend"], r["mode"]] +
                              [f1(num(r, k)) for k in ("step_ms", "compute_ms", "sync_ms", "exposed_ms")] +
                              [f2(num(r, "exposed_vs_plain_sync")), f2(num(r, "step_vs_max_plain"))]
                              for r in rows if r["backend"] in shown])
    on = [r for r in rows if r["mode"] != "off" and r["exposed_vs_plain_sync"] != ""]
    mine = [r for r in on if r["backend"] in shown]
    share_ok = [r for r in on if num(r, "exposed_vs_plain_sync") <= EXPOSED_SHARE]
    step_ok = lambda rs: [r for r in rs if num(r, "step_vs_max_plain") <= STEP_FACTOR]  # noqa: E731
    best = {b: min((r for r in mine if r["backend"] == b), key=lambda r: num(r, "exposed_vs_plain_sync"))
            for b in shown}
    plain = {(r["network"], r["ranks"], r["backend"]): r for r in rows if r["mode"] == "off"}
    shorter = [f"{where(r)}: {num(plain[(r['network'], r['ranks'], r['backend'])], 'step_ms'):.1f} → "
               f"{num(r, 'step_ms'):.1f} ms" for r in mine
               if num(r, "step_ms") < num(plain[(r["network"], r["ranks"], r["backend"])], "step_ms")]
    lines = [
        f"- Exposed ≤ {100 * EXPOSED_SHARE:.0f} % of the plain sync: met at {len(share_ok)} of "
        f"{len(on)} overlapped points (all backends). Lowest of " +
        ", ".join(f"{b}: {where(r)}, {num(r, 'exposed_vs_plain_sync'):.2f}" for b, r in best.items()) + ".",
        f"- Step ≤ {STEP_FACTOR} × max(plain compute, plain sync): met at {len(step_ok(mine))} of "
        f"{len(mine)} overlapped {' and '.join(shown)} points (" +
        ("; ".join(f"{where(r)}: {num(r, 'step_vs_max_plain'):.2f}" for r in step_ok(mine)) or "none") +
        f"); over all backends at {len(step_ok(on))} of {len(on)}" +
        ("".join(f"; {where(r)}" for r in step_ok(on) if r["backend"] not in shown) or "") + ". "
        "Closest: " + ", ".join(
            f"{b}: {where(r)}, {num(r, 'step_vs_max_plain'):.2f}"
            for b, r in ((b, min((r for r in mine if r["backend"] == b),
                                 key=lambda r: num(r, "step_vs_max_plain"))) for b in shown)) + ".",
        f"- Both targets at once: {sum(r['targets_met'] == 'yes' for r in on)} of {len(on)} points.",
        f"- Overlapped {' and '.join(shown)} points whose step is shorter than with the overlap off "
        f"({len(shorter)} of {len(mine)}): " + "; ".join(shorter) + "."]
    return {"README.md#table": table, "README.md#targets": "\n".join(lines) + "\n"}


def bucket_steps(rows, sizes, backends):
    """The README's bucket table: step ms per backend and bucket size, the
    fastest in bold."""
    by = defaultdict(dict)
    for r in rows:
        by[r["backend"]][r["bucket"]] = float(r["step_ms"])
    body = []
    for b in backends:
        best = min(by[b].values())
        body.append([b] + [f"**{by[b][x]:.1f}**" if by[b][x] == best else f"{by[b][x]:.1f}"
                           for x in sizes])
    return md_table(["backend"] + ["whole model" if x == "whole" else x for x in sizes], body)


def against_plain(plain_rows, overlap_rows):
    """Step ms of each method and N without | with the overlap, per network."""
    key = lambda r: (r["network"], r["method"], r["servers"], r["workers"])  # noqa: E731
    on = {key(r): float(r["step_ms"]) for r in overlap_rows}
    label = lambda r: f"ps, S = {r['servers']}" if r["method"] == "ps" else r["method"]  # noqa: E731
    Ns = sorted({int(r["workers"]) for r in overlap_rows})
    out = []
    for net in dict.fromkeys(r["network"] for r in overlap_rows):
        cells = defaultdict(dict)
        for r in plain_rows:
            if r["network"] == net and key(r) in on:
                cells[label(r)][int(r["workers"])] = f"{float(r['step_ms']):.1f} \\| {on[key(r)]:.1f}"
        out += [f"{net}:", "", md_table(["method"] + [f"N = {n}" for n in Ns],
                                        [[m] + [c.get(n, "") for n in Ns] for m, c in cells.items()])]
    return "\n".join(out)


def cpu_table(rows):
    """Medians over the repeats of cpu.csv, per backend and mode."""
    by = defaultdict(list)
    for r in rows:
        by[(r["backend"], r["mode"])].append(r)
    med = lambda rs, f: statistics.median(f(r) for r in rs)  # noqa: E731
    body = [[b, m, f"{med(rs, lambda r: float(r['user_s']) + float(r['sys_s'])):.2f}"] +
            [f"{med(rs, lambda r, k=k: float(r[k])):.1f}" for k in ("step_ms", "compute_ms", "exposed_ms")]
            for (b, m), rs in by.items()]
    return md_table(["backend", "mode", "CPU s per run", "step ms", "compute ms", "exposed ms"], body)


def narrative_blocks(folder, results, modes_rows):
    """The figures the README's reading cites, each from the committed CSVs."""
    f = lambda r, k: float(r[k])  # noqa: E731
    get = {(r["network"], int(r["ranks"]), r["backend"], r["mode"]): r for r in modes_rows}
    nets = list(dict.fromkeys(r["network"] for r in modes_rows))
    allreduce = [b for b in dict.fromkeys(r["backend"] for r in modes_rows) if b != "ps"]
    mean = lambda net, n, m, fn: statistics.fmean(fn(get[(net, n, b, m)]) for b in allreduce)  # noqa: E731
    loads = [f(r, "load1_median") for r in modes_rows]
    spread = max(max(map(float, r["step_ms_repeats"].split())) / min(map(float, r["step_ms_repeats"].split()))
                 for r in modes_rows)
    net0 = nets[0]
    ring_off, ps_off = get[(net0, 2, "ring", "off")], get[(net0, 2, "ps", "off")]
    predicted = next(float(r["predicted_sync_ms"]) for r in read_csv(
        os.path.join(results, "ps_vs_allreduce", "scaling.csv"))
        if r["method"] == "ring" and r["workers"] == "2" and r["network"] == net0.replace("-", "@"))
    setup = (f"Measured: the 1-minute load average {min(loads):.1f}–{max(loads):.1f} over the points "
             f"(`load1_median`); the slowest of a point's repeats up to {spread:.1f}× its fastest "
             f"(`step_ms_repeats`). At {net0}, N = 2, ring off: compute {f(ring_off, 'compute_ms'):.1f} ms "
             f"against a sync of {f(ring_off, 'sync_ms'):.1f} ms ({predicted:.1f} ms predicted, "
             f"results/ps_vs_allreduce); the PS's sync there {f(ps_off, 'sync_ms'):.1f} ms.\n")
    thread = lambda r: f(r, "sync_ms") - f(r, "exposed_ms")  # noqa: E731
    last = nets[-1]
    ff = [get[(last, 2, b, "front_first")] for b in allreduce]
    fi = [get[(last, 2, b, "fifo")] for b in allreduce]
    span = lambda rs, k: f"{min(f(r, k) for r in rs):.0f}–{max(f(r, k) for r in rs):.0f}"  # noqa: E731
    effects = "\n".join([
        "- Effect 1, at N = 2, the mean compute of the allreduces off → fifo: " +
        "; ".join(f"{net} {mean(net, 2, 'off', lambda r: f(r, 'compute_ms')):.1f} → "
                  f"{mean(net, 2, 'fifo', lambda r: f(r, 'compute_ms')):.1f} ms" for net in nets) + ".",
        "- Effect 2, at N = 2, the thread's time in the allreduces with fifo (sync − exposed) "
        "against the plain sync (means over the allreduces): " +
        "; ".join(f"{net} {mean(net, 2, 'fifo', thread):.1f} against "
                  f"{mean(net, 2, 'off', lambda r: f(r, 'sync_ms')):.1f} ms" for net in nets) +
        f". At {last}, N = 2, front_first against fifo: compute {span(ff, 'compute_ms')} against "
        f"{span(fi, 'compute_ms')} ms, step {span(ff, 'step_ms')} against {span(fi, 'step_ms')} ms"
        f" (front_first lower for {sum(f(a, 'step_ms') < f(b, 'step_ms') for a, b in zip(ff, fi))} "
        f"of {len(ff)} allreduces).",
        f"- Effect 3, the ring's compute at N = 4, {net0}, off → fifo: "
        f"{f(get[(net0, 4, 'ring', 'off')], 'compute_ms'):.1f} → "
        f"{f(get[(net0, 4, 'ring', 'fifo')], 'compute_ms'):.1f} ms."]) + "\n"
    buckets = read_csv(os.path.join(folder, "buckets.csv"))
    smallest = buckets[0]["bucket"]
    small = [f(r, "step_ms") for r in buckets if r["bucket"] == smallest and r["backend"] != "ps"]
    ps = {r["bucket"]: f(r, "step_ms") for r in buckets if r["backend"] == "ps"}
    ps_best = min(ps, key=ps.get)
    bucket_notes = (f"Allreduces at {smallest} buckets: {min(small):.1f}–{max(small):.1f} ms a step; "
                    f"the PS {ps[ps_best]:.1f} ms at {ps_best} against {ps['whole']:.1f} ms with the "
                    "whole model in one bucket.\n")
    plain = read_csv(os.path.join(results, "ps_vs_allreduce", "scaling.csv"))
    over = read_csv(os.path.join(folder, "ps_vs_allreduce_overlap", "scaling.csv"))
    key = lambda r: (r["network"], r["method"], r["servers"], r["workers"])  # noqa: E731
    on = {key(r): f(r, "step_ms") for r in over}
    pairs = [(r, f(r, "step_ms"), on[key(r)]) for r in plain if key(r) in on]
    n1, nl = over[0]["network"], over[-1]["network"]
    s1 = [(r["workers"], a, b) for r, a, b in pairs if r["network"] == n1 and r["method"] == "ps"
          and r["servers"] == "1" and int(r["workers"]) >= 4]
    worst = max((b / a, r) for r, a, b in pairs if r["network"] == nl)
    against = (f"At {n1} the PS with one shard: " +
               ", ".join(f"N = {w}: {a:.0f} → {b:.0f} ms" for w, a, b in s1) +
               f". At {nl} the overlapped run is up to {worst[0]:.1f}× slower ({worst[1]['method']} "
               f"N = {worst[1]['workers']}).\n")
    cpu = read_csv(os.path.join(folder, "cpu.csv"))
    by = defaultdict(list)
    for r in cpu:
        by[(r["backend"], r["mode"])].append(r)
    med = lambda b, m, fn: statistics.median(fn(r) for r in by[(b, m)])  # noqa: E731
    cpu_s = lambda r: f(r, "user_s") + f(r, "sys_s")  # noqa: E731
    extra = [med("ring", m, cpu_s) - med("ring", "off", cpu_s) for m in ("fifo", "front_first")]
    steps = int(cpu[0]["steps"])
    ranks = 2
    disturbed = [max(f(r, "step_ms") for r in by[("ring", m)]) for m in ("fifo", "front_first")]
    cpu_notes = (f"With the ring the overlap costs {min(extra):.2f}–{max(extra):.2f} s more CPU per "
                 f"{steps}-step run, {1e3 * min(extra) / steps / ranks:.0f}–"
                 f"{1e3 * max(extra) / steps / ranks:.0f} ms per rank and step; the PS's fifo "
                 f"{med('ps', 'fifo', cpu_s) - med('ps', 'off', cpu_s):+.2f} s, with its step "
                 f"{med('ps', 'off', lambda r: f(r, 'step_ms')):.1f} → "
                 f"{med('ps', 'fifo', lambda r: f(r, 'step_ms')):.1f} ms. The slowest ring repeat of "
                 f"each overlapped mode: {disturbed[0]:.0f} and {disturbed[1]:.0f} ms a step (the "
                 "median leaves it out).\n")
    psff, psfi, psoff = (get[(net0, 2, "ps", m)] for m in ("front_first", "fifo", "off"))
    front = (f"At {net0}, N = 2, the PS's step: front_first {f(psff, 'step_ms'):.1f}, fifo "
             f"{f(psfi, 'step_ms'):.1f}, off {f(psoff, 'step_ms'):.1f} ms (the negotiated version); in "
             f"the CPU runs (the version without negotiation): front_first "
             f"{med('ps', 'front_first', lambda r: f(r, 'step_ms')):.1f}, fifo "
             f"{med('ps', 'fifo', lambda r: f(r, 'step_ms')):.1f}, off "
             f"{med('ps', 'off', lambda r: f(r, 'step_ms')):.1f} ms.\n")
    return {"README.md#setup": setup, "README.md#effects": effects,
            "README.md#bucket_notes": bucket_notes, "README.md#against_notes": against,
            "README.md#cpu_notes": cpu_notes, "README.md#front_first": front}


def regenerate(folder, results=None):
    exp = report.load(os.path.join(ROOT, "experiments", "overlap.yaml"), "overlap")
    spec = exp["experiment"]["sweep"]["buckets"]
    modes_rows = read_csv(os.path.join(folder, "modes.csv"))
    return {"modes.md": modes_md(modes_rows),
            "buckets.md": buckets_md(read_csv(os.path.join(folder, "buckets.csv")),
                                     spec["sizes"], spec["backends"]),
            **readme_blocks(modes_rows),
            "README.md#buckets": bucket_steps(read_csv(os.path.join(folder, "buckets.csv")),
                                              spec["sizes"], spec["backends"]),
            "README.md#against_plain": against_plain(
                read_csv(os.path.join(results, "ps_vs_allreduce", "scaling.csv")),
                read_csv(os.path.join(folder, "ps_vs_allreduce_overlap", "scaling.csv"))),
            "README.md#cpu": cpu_table(read_csv(os.path.join(folder, "cpu.csv"))),
            **narrative_blocks(folder, results, modes_rows),
            **quiet_blocks(os.path.join(folder, "quiet_ring_ps"), modes_rows)}


def quiet_blocks(quiet, loaded_rows):
    """quiet_ring_ps/: its modes.md and its README's figures, beside the
    loaded host's rows."""
    rows = read_csv(os.path.join(quiet, "modes.csv"))
    f = lambda r, k: float(r[k])  # noqa: E731
    blocks = readme_blocks(rows)
    off = [r for r in rows if r["mode"] == "off"]
    loaded = [r for r in loaded_rows if r["mode"] == "off" and r["backend"] in ("ring", "ps")]
    ring2 = next(r for r in off if r["backend"] == "ring" and r["ranks"] == "2")
    get = {(r["network"], r["ranks"], r["backend"], r["mode"]): r for r in rows}
    psff = get[(ring2["network"], "2", "ps", "front_first")]
    psfi = get[(ring2["network"], "2", "ps", "fifo")]
    ringfi = get[(ring2["network"], "2", "ring", "fifo")]
    text = (f"Compute (forward + backward) with the overlap off: "
            f"{min(f(r, 'compute_ms') for r in off):.1f}–{max(f(r, 'compute_ms') for r in off):.1f} ms "
            f"here, {min(f(r, 'compute_ms') for r in loaded):.1f}–{max(f(r, 'compute_ms') for r in loaded):.1f}"
            f" ms on the loaded host (`../modes.csv`, load {min(f(r, 'load1_median') for r in loaded):.1f}–"
            f"{max(f(r, 'load1_median') for r in loaded):.1f}; here "
            f"{min(f(r, 'load1_median') for r in rows):.1f}–{max(f(r, 'load1_median') for r in rows):.1f}). "
            f"The ring's plain sync at {ring2['network']}, N = 2: {f(ring2, 'sync_ms'):.1f} ms; its "
            f"step there off → fifo {f(ring2, 'step_ms'):.1f} → {f(ringfi, 'step_ms'):.1f} ms. The PS's "
            f"front_first against fifo there: {f(psff, 'step_ms'):.1f} against {f(psfi, 'step_ms'):.1f} ms.\n")
    return {"quiet_ring_ps/modes.md": modes_md(rows),
            "quiet_ring_ps/README.md#targets": blocks["README.md#targets"],
            "quiet_ring_ps/README.md#figures": text}


def buckets(exp, exp_path, out_root, binary, quick, dry_run):
    spec = exp["experiment"]["sweep"]["buckets"]
    n = int(spec["ranks"])
    model_bytes = 4 * model_params(exp)
    sizes = spec["sizes"][:2] if quick else spec["sizes"]
    points = [(("buckets", spec["network"].replace("@", "-"), f"n{n}", b, size), n,
               network_sets(spec["network"]) +
               point_sets(b, n, spec["priority"], bucket_value(size, model_bytes)) +
               (["train.steps=8"] if quick else []))
              for b in spec["backends"] for size in sizes]
    results, loads = measure(points, exp, exp_path, out_root, binary,
                             1 if quick else int(exp["experiment"]["sweep"]["repeats"]), dry_run)
    if dry_run:
        return
    rows = []
    for key, _, _ in points:
        s = summarize(results[key])
        size = key[4]
        rows.append({"network": key[1], "ranks": n, "backend": key[3], "bucket": size,
                     "bucket_bytes": model_bytes if size == "whole" else parse_bytes(size),
                     "step_ms": ms(s["step_s"]), "compute_ms": ms(s["compute_s"]),
                     "sync_ms": ms(s["sync_s"]), "exposed_ms": ms(s["exposed_sync_s"]),
                     "load1_median": round(statistics.median(loads[key]), 2)})
    write_csv(os.path.join(out_root, "buckets.csv"), rows)
    write_text(os.path.join(out_root, "buckets.md"),
               buckets_md(read_csv(os.path.join(out_root, "buckets.csv")), sizes, spec["backends"]))
    plot_buckets(rows, os.path.join(out_root, "buckets.png"), spec)


def plot_buckets(rows, path, spec):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for b in spec["backends"]:
        pts = sorted((r["bucket_bytes"], r["step_ms"]) for r in rows if r["backend"] == b)
        ax.plot([x / 1024 for x, _ in pts], [y for _, y in pts], marker="o", label=b)
    ax.set_xscale("log", base=2)
    ax.set(xlabel="sync.bucket_bytes (KiB; the last point: the whole model)",
           ylabel="step time (ms, median)",
           title=f"overlap ({spec['priority']}), N = {spec['ranks']}, {spec['network']}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def model_params(exp):
    """Parameters of the experiment's MLP: features -> hidden... -> classes."""
    dims = [int(exp["data"]["synthetic_features"]), *exp["model"]["hidden"],
            int(exp["data"]["synthetic_classes"])]
    return sum(a * b + b for a, b in zip(dims, dims[1:]))


def timeline(exp, exp_path, out_root, binary, dry_run):
    """One overlapped run (the PS, front_first: the layer-wise start) with the
    trace on, drawn with plot.py --timeline."""
    out = os.path.join(out_root, "timeline")
    sets = network_sets(exp["experiment"]["sweep"]["networks"][0]) + \
        point_sets("ps", 2, "front_first") + ["train.trace=true", "train.steps=6"]
    run_point(binary, exp_path, out, 2, sets, dry_run)
    if not dry_run:
        runner.run([sys.executable, os.path.join(ROOT, "experiments", "plot.py"), "--timeline",
                    os.path.join(out, "trace.json"), "--out",
                    os.path.join(out_root, "timeline.png")])


CPU_STEPS, CPU_REPEATS, CPU_SKIP = 40, 3, 5


def cpu(exp, exp_path, out_root, binary, dry_run):
    """The CPU time (user + system of mpirun and every rank) of plain and
    overlapped runs, ring and PS, N = 2 at the first network, CPU_STEPS steps,
    CPU_REPEATS repeats: what the communication thread takes from the
    backward. cpu.csv, one row per run, with the run's step figures (median
    over the steps after CPU_SKIP of the slowest rank's)."""
    net = exp["experiment"]["sweep"]["networks"][0]
    rows = []
    for rep in range(1, CPU_REPEATS + 1):
        for backend in ("ring", "ps"):
            for mode in ("off", "fifo", "front_first"):
                out = os.path.join(out_root, "cpu", f"{backend}_{mode}_r{rep}")
                sets = (network_sets(net) + point_sets(backend, 2, mode) +
                        [f"train.steps={CPU_STEPS}"])
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                start = time.monotonic()
                run_point(binary, exp_path, out, 2, sets, dry_run)
                if dry_run:
                    continue
                wall = time.monotonic() - start
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                by_step = defaultdict(list)
                for r in read_csv(os.path.join(out, "steps.csv")):
                    by_step[int(r["step"])].append(r)
                steady = sorted(by_step)[CPU_SKIP:]
                med = {k: round(1e3 * statistics.median(max(float(r[k]) for r in by_step[st])
                                                        for st in steady), 2)
                       for k in ("step_s", "compute_s", "sync_s", "exposed_sync_s")}
                rows.append({"rep": rep, "backend": backend, "mode": mode,
                             "user_s": round(after.ru_utime - before.ru_utime, 2),
                             "sys_s": round(after.ru_stime - before.ru_stime, 2),
                             "wall_s": round(wall, 2), "steps": CPU_STEPS,
                             "step_ms": med["step_s"], "compute_ms": med["compute_s"],
                             "sync_ms": med["sync_s"], "exposed_ms": med["exposed_sync_s"]})
    if not dry_run:
        write_csv(os.path.join(out_root, "cpu.csv"), rows)


def folder(args):
    """--name or experiment.name, under --results when given."""
    name = args.name or runner.experiment(args, "overlap")["experiment"]["name"]
    return runner.under_results(args, name)


def run_parts(args, binary=None, dry_run=False):
    """The parts --only names (default: all), or with dry_run their commands."""
    exp, out_root = runner.experiment(args, "overlap"), args.out
    if dry_run:
        os.makedirs(out_root, exist_ok=True)
    if args.only in (None, "modes"):
        modes(exp, args.experiment, out_root, binary, args.quick, dry_run,
              args.backends.split(",") if args.backends else None)
    if args.only in (None, "buckets"):
        buckets(exp, args.experiment, out_root, binary, args.quick, dry_run)
    if args.only in (None, "timeline"):
        timeline(exp, args.experiment, out_root, binary, dry_run)
    if args.only in (None, "cpu"):
        cpu(exp, args.experiment, out_root, binary, dry_run)


def launcher():
    launch = runner.Launcher(__doc__, folder, runs={"run": lambda args: run_parts(args, args.psar)},
                             reports={"dry": lambda args: run_parts(args, dry_run=True)},
                             flags={"--dry-run": ("dry", "print the commands only")},
                             out_help="the experiment's folder (default: RESULTS/<experiment.name>)")
    ap = launch.parser
    ap.add_argument("experiment", nargs="?",
                    default=os.path.join(ROOT, "experiments", "overlap.yaml"))
    ap.add_argument("--results", help="default: runs/, or results/ with --reference")
    ap.add_argument("--only", choices=["modes", "buckets", "timeline", "cpu"], help="run one part")
    ap.add_argument("--quick", action="store_true", help="one repeat, 8 steps: a smoke test")
    ap.add_argument("--backends", help="modes: these backends (comma-separated) instead of the "
                                       "experiment's")
    ap.add_argument("--name", help="results folder name instead of experiment.name")
    return launch


if __name__ == "__main__":
    runner.main_guard("overlap.py", launcher().main)
