#!/usr/bin/python3
"""Sharded training state (docs/zero.md): ZeRO stages 0 to 3 of psar's
ring backend on the GPT of experiments/zero.yaml.

    experiments/zero.py memory [--psar PATH] [--reference|--exploratory]
    experiments/zero.py step   [--psar PATH] [--steps N] [--reps R] [--net NET] [--reference|--exploratory]
    experiments/zero.py step3  [--psar PATH] [--steps N] [--reps R] [--net NET] [--reference|--exploratory]
    experiments/zero.py report

Every run goes through `flock /tmp/psar-measure.lock`. Writes into
results/zero/ (--reference) or runs/zero/:

  memory: one step at N = 1..8 ranks for each stage (batch 840, every N a
    whole slice; stages 2 and 3 without overlap), the training state's bytes
    per rank from axes.csv (params_bytes, grads_bytes, optimizer_bytes, and
    the layers' buffers of stages 2 and 3, gathered_bytes):
      memory.csv   stage,N,rank,psi,params_bytes,grads_bytes,optimizer_bytes,
                   gathered_bytes
  step: N = 4 and 8 at an emulated 1 and 10 Gbit/s (net.bandwidth, 20 us
    latency): ZeRO-0, stages 1 and 2, ZeRO-0 and stage 2 with overlap, the
    variants taking turns within each repetition (--net 1gbit|10gbit: that
    network only, its rows replacing that network's in the CSV, so that a
    sweep can run in parts):
      steps.csv    net,N,variant,rep,step_s,dp_bytes_max[,compute_s] (step_s,
                   compute_s: the median over steps after the first two of
                   the slowest rank's)
  step3: the same for ZeRO-0 and stage 3 without and with prefetch
    (steps3.csv), and stage 3's collectives at the emulated α and β
    (prediction.csv: net,N,collectives,collectives_s,balanced_s,
    allreduce_s; see prediction())
  machine_<part>.md: the load before and after and the steal time
  report: tables.md from the CSVs above (no runs)

The forms beside the measured bytes (Ψ parameters, fp32 Adam, N ranks,
P_r = Partition{Ψ, N}.size(r), the largest ⌈Ψ/N⌉): ZeRO-0 16Ψ; stage 1
4Ψ + 4Ψ + 8·P_r (the ZeRO paper's 8Ψ + 8Ψ/N up to the rounding); stage 2
4Ψ + 4·P_r + 8·P_r (the paper's 4Ψ + 12Ψ/N) beside the layers' gradient
buffers (grad_buffers_form); stage 3 4·P_r + 8·P_r (no gradient shard)
beside the gathered layers (gathered_form), the paper's 16Ψ/N.
"""

import os
import statistics

from psar_exp import ROOT, costs, runner
from psar_exp.io import md_table, read_csv, write_csv, write_text
from psar_exp.units import parse_bytes

YAML = os.path.join(ROOT, "experiments", "zero.yaml")
NETS = [("1gbit", "1Gbit"), ("10gbit", "10Gbit")]
LATENCY = "20us"
STEP_RANKS = [4, 8]
# Stage 2's reduce-scatter buckets (whole layers, sync.bucket_bytes) in the
# step parts: without overlap one bucket of the whole 3.2 MB model (DeepSpeed's
# default reduce_bucket_size of 5e8 elements would make it one too); with
# overlap two (the head and the upper two blocks, then the rest), so that
# the first crosses the wire during the lower blocks' backward — ZeRO-0's
# overlap at the same size beside it. (The memory runs keep zero.yaml's
# 256K: each layer a bucket of its own, its buffer the smallest.)
WHOLE_MODEL_BUCKET = "sync.bucket_bytes=4M"
OVERLAP_BUCKET = "sync.bucket_bytes=2M"
# name -> the --set list of the variant
VARIANTS = {
    "zero0": ["sync.zero=0"],
    "zero1": ["sync.zero=1"],
    "zero2": ["sync.zero=2", WHOLE_MODEL_BUCKET],
    "zero0_overlap": ["sync.zero=0", "sync.overlap=true", OVERLAP_BUCKET],
    "zero2_overlap": ["sync.zero=2", "sync.overlap=true", OVERLAP_BUCKET],
    "zero3": ["sync.zero=3"],
    "zero3_prefetch": ["sync.zero=3", "sync.overlap=true"],
}
# Each step part: its variants and its CSV.
STEP_PARTS = {"step": (["zero0", "zero1", "zero2", "zero0_overlap", "zero2_overlap"],
                       "steps.csv"),
              "step3": (["zero0", "zero3", "zero3_prefetch"], "steps3.csv")}
BANDWIDTH = {"1gbit": 1e9 / 8, "10gbit": 10e9 / 8}  # bytes/s
LATENCY_S = 20e-6
STAGES = (0, 1, 2, 3)


def train(psar, n, run_dir, sets):
    return runner.locked_train(psar, n, YAML, run_dir, sets)


def memory(args):
    rows = []
    before = runner.machine_state()
    for stage in STAGES:
        for n in range(1, 9):
            run_dir = os.path.join(args.out, "runs", f"memory_s{stage}_n{n}")
            sets = [f"sync.zero={stage}", "train.steps=1", "train.batch_size=840"]
            train(args.psar, n, run_dir, sets)
            for r in read_csv(os.path.join(run_dir, "axes.csv")):
                rows.append({"stage": stage, "N": n, "rank": r["rank"], "psi": r["dp_floats"],
                             "params_bytes": r["params_bytes"], "grads_bytes": r["grads_bytes"],
                             "optimizer_bytes": r["optimizer_bytes"],
                             "gathered_bytes": r["gathered_bytes"]})
    write_csv(os.path.join(args.out, "memory.csv"), rows)
    write_text(os.path.join(args.out, "machine_memory.md"), runner.machine_note(before) + "\n")


def step(args):
    variants, csv_name = STEP_PARTS[args.part]
    path = os.path.join(args.out, csv_name)
    # Another network's rows from an earlier part of the sweep stay.
    rows = [r for r in read_csv(path) if args.net and r["net"] != args.net] \
        if os.path.exists(path) else []
    before = runner.machine_state()
    for net, bw in NETS:
        if args.net and net != args.net:
            continue
        for n in STEP_RANKS:
            for rep in range(args.reps):
                names = list(variants)
                if rep % 2:
                    names.reverse()
                for name in names:
                    run_dir = os.path.join(args.out, "runs", f"step_{net}_n{n}_{name}_r{rep}")
                    train(args.psar, n, run_dir,
                          VARIANTS[name] + [f"train.steps={args.steps}", f"net.bandwidth={bw}",
                                            f"net.latency={LATENCY}"])
                    slowest, compute = {}, {}
                    for r in read_csv(os.path.join(run_dir, "steps.csv")):
                        k = int(r["step"])
                        if k > 2:
                            slowest[k] = max(slowest.get(k, 0.0), float(r["step_s"]))
                            compute[k] = max(compute.get(k, 0.0), float(r["compute_s"]))
                    sent = max(int(r["dp_bytes_sent"])
                               for r in read_csv(os.path.join(run_dir, "axes.csv")))
                    rows.append({"net": net, "N": n, "variant": name, "rep": rep,
                                 "step_s": f"{statistics.median(slowest.values()):.6f}",
                                 "dp_bytes_max": sent,
                                 "compute_s": f"{statistics.median(compute.values()):.6f}"})
                    write_csv(os.path.join(args.out, csv_name), rows)
    note = os.path.join(args.out, f"machine_{args.part}.md")
    kept = ""
    if args.net and os.path.exists(note):
        with open(note) as f:
            # The other networks' notes (a whole sweep's note has no prefix: gone).
            kept = "".join(l for l in f if any(l.startswith(f"{n}: ") for n, _ in NETS
                                               if n != args.net))
    write_text(note, kept + (f"{args.net}: " if args.net else "") + runner.machine_note(before) + "\n")
    if args.part == "step3":
        write_csv(os.path.join(args.out, "prediction.csv"), prediction(args.psar))


BUDGET = 8e6  # bytes per rank
BUDGET_RANKS = 8


def zero_model():
    import yaml
    with open(YAML) as f:
        return yaml.safe_load(f)["model"]


def layer_floats():
    """The GPT's layers as stage 3 gathers them (Model::layer_ranges): the
    embeddings (V + T)·d, each block 12d² + 13d, the final layer norm 2d."""
    m = zero_model()
    d = m["d_model"]
    return [(m["vocab"] + m["seq_len"]) * d] + [12 * d * d + 13 * d] * m["layers"] + [2 * d]


SEGMENT_BYTES = 512 * 1024  # the ring's segments (AllreduceOptions::segment_bytes, zero.yaml's)


def range_segment(floats, n):
    """The segment size of a layer's or a bucket's ring (LayerGather::
    collectives_for): at most an even chunk of the range, 4·⌈floats/N⌉ bytes."""
    return min(SEGMENT_BYTES, max(4, 4 * -(-floats // n)))


def owners_chunks(begin, end, psi, n):
    """The ring's chunks of arena floats [begin, end) as stage 3 and stage 2
    cut them: at the owners' boundaries of Partition{Ψ, N} (LayerGather's
    owners_split), so a layer inside one rank's piece is one chunk."""
    out, at = [], 0
    for r in range(n):
        p = piece(psi, n, r)
        out.append(max(0, min(end, at + p) - max(begin, at)))
        at += p
    return out


def ring_pass(chunks, start, alpha, beta, nic, reduce, segment=SEGMENT_BYTES, o=0.0):
    """One ring reduce-scatter (reduce) or all-gather of `chunks` (floats per
    rank's chunk) by the emulated network's rules (comm/netem.h) and the
    ring's program (allreduce/ring_pass.cc): rank r enters at start[r]; at
    step s it sends chunk (r − s − lag) to r + 1 (lag 1 for the
    reduce-scatter), in segments of `segment` bytes (a chunk of b bytes in
    ⌈b/segment⌉ equal ones, allreduce/engine.cc), each as soon as it has
    arrived (the pipelining); a message of b bytes leaves its egress at
    max(ready, egress free) and takes b·β there, and is delivered at
    max(egress end + α, the receiver's ingress free + b·β). nic: per rank
    [egress free, ingress free], updated. o: host time added to each
    arrival (0 in the model). Returns when each rank is done."""
    n = len(chunks)
    lag = 1 if reduce else 0
    segs = [max(1, -(-4 * c // segment)) for c in chunks]
    have = [dict() for _ in range(n)]  # have[r][c]: the arrivals of chunk c's segments at r
    done = list(start)
    for s in range(n - 1):
        arrived = []
        for r in range(n):
            c = (r - s - lag) % n
            size = 4 * chunks[c] / segs[c]
            ready = [start[r]] * segs[c] if s == 0 else have[r][c]
            dst = (r + 1) % n
            times = []
            for t in ready:
                nic[r][0] = max(t, nic[r][0]) + size * beta
                nic[dst][1] = max(nic[r][0] + alpha, nic[dst][1] + size * beta)
                times.append(max(nic[dst][1], start[dst]) + o)
            done[r] = max(done[r], nic[r][0])
            arrived.append((dst, c, times))
        for dst, c, times in arrived:
            have[dst][c] = times
            done[dst] = max(done[dst], times[-1])
    return done


def gpt_calls(nl):
    """The calls the zero.yaml GPT makes on LayerGather in a step (one
    micro-batch; layers 0 the embeddings, 1..nl−2 the blocks, nl−1 the final
    layer norm; the head reads the tied embedding): (call, layer) with call
    need, needb (need_backward), done, ready or a compute phase
    ("f"|"b", layer, what: "layer"|"head")."""
    ln = nl - 1
    out = []
    for l in range(nl):
        out += [("need", l), ("f", l, "layer"), ("done", l)]
    out += [("need", 0), ("f", 0, "head"), ("done", 0)]
    out += [("needb", ln), ("needb", 0), ("b", 0, "head"), ("ready", ln), ("done", ln),
            ("done", 0)]
    for l in range(ln - 1, 0, -1):
        out += [("needb", l), ("b", l, "layer"), ("ready", l), ("done", l)]
    out += [("needb", 0), ("b", 0, "layer"), ("ready", 0), ("done", 0)]
    return out


def stage3_model(layers, n, alpha, beta, compute, prefetch):
    """Stage 3's step by the α-β model of the emulated network, from first
    principles: the GPT's calls (gpt_calls) on LayerGather's rules
    (sync/layer_gather.h) — a layer gathered when asked for and, with
    prefetch, the next one (l ± 1) queued on the communication thread, which
    runs the collectives one after another; without it each on the caller's
    thread at once — each collective a ring_pass over the owners' chunks,
    and compute (ZeRO-0's measured compute of the step, one third forward,
    two thirds backward, each layer's share its parameters', the embeddings'
    lookup and the final layer norm free, the head's its embedding's)
    between them on every rank.
    Returns (the step: the last rank's end, the collectives per step)."""
    psi, nl = sum(layers), len(layers)
    at = [sum(layers[:i]) for i in range(nl)]
    chunks = [owners_chunks(at[i], at[i] + layers[i], psi, n) for i in range(nl)]
    # Matmul work ∝ parameters: the blocks' and the head's (the embedding's
    # size); the embeddings' lookup and the final layer norm next to none.
    weights = [(1 if c[0] == "f" else 2) * (layers[0] if c[2] == "head" else
                                           layers[c[1]] if 0 < c[1] < nl - 1 else 0)
               for c in gpt_calls(nl) if c[0] in ("f", "b")]
    unit = compute / sum(weights)
    main, comm = [0.0] * n, [0.0] * n
    nic = [[0.0, 0.0] for _ in range(n)]
    ops, ends = [], []
    state, users, by = ["free"] * nl, [0] * nl, {}

    def run(i):
        kind, l, queued = ops[i]
        start = [max(c, q) for c, q in zip(comm, queued)] if prefetch else list(queued)
        comm[:] = ring_pass(chunks[l], start, alpha, beta, nic, reduce=kind == "R",
                            segment=range_segment(layers[l], n))
        ends.append(list(comm))

    def queue(kind, l):
        ops.append((kind, l, list(main)))
        if not prefetch:
            run(len(ops) - 1)
            main[:] = ends[-1]
        return len(ops) - 1

    def acquire(l, direction):
        if state[l] == "free":
            by[l], state[l] = queue("G", l), "queued"
        nxt = l + direction
        if prefetch and 0 <= nxt < nl and state[nxt] == "free":
            by[nxt], state[nxt] = queue("G", nxt), "queued"
        while len(ends) <= by[l]:
            run(len(ends))
        main[:] = [max(m, e) for m, e in zip(main, ends[by[l]])]
        users[l] += 1

    k = 0
    for c in gpt_calls(nl):
        if c[0] == "need":
            acquire(c[1], +1)
        elif c[0] == "needb":
            acquire(c[1], -1)
        elif c[0] == "done":
            users[c[1]] -= 1
            if users[c[1]] == 0:
                state[c[1]] = "free"
        elif c[0] == "ready":
            queue("R", c[1])
        else:
            main[:] = [m + weights[k] * unit for m in main]
            k += 1
    while len(ends) < len(ops):
        run(len(ends))
    return max(main + comm), len(ops)


def layer_buckets(layers, capacity_floats):
    """Stage 2's buckets of whole layers (sync/buckets.h, plan_buckets with
    whole_tensors): the layers in backward order, a layer that does not fit
    starting the next bucket. Arena ranges in launch order."""
    at = [sum(layers[:i]) for i in range(len(layers))]
    out = []
    for i in reversed(range(len(layers))):
        lo, hi = at[i], at[i] + layers[i]
        if out and out[-1][1] - lo <= capacity_floats:
            out[-1] = (lo, out[-1][1])
        else:
            out.append((lo, hi))
    return out


def stage2_reduce_scatters(net, n):
    """Stage 2's reduce-scatters of the step parts (WHOLE_MODEL_BUCKET and
    OVERLAP_BUCKET) by the emulated network's model, each alone from a
    standing start: ([the one bucket's], [each of the overlap's buckets']),
    seconds. A bucket of part of the arena is cut at the owners' boundaries,
    so its non-empty chunks are whole pieces and it takes as long as the
    whole model's."""
    layers = layer_floats()
    psi = sum(layers)

    def times(bucket_bytes):
        return [max(ring_pass(owners_chunks(lo, hi, psi, n), [0.0] * n, LATENCY_S,
                              1 / BANDWIDTH[net], [[0.0, 0.0] for _ in range(n)], reduce=True,
                              segment=range_segment(hi - lo, n)))
                for lo, hi in layer_buckets(layers, bucket_bytes // 4)]
    return times(parse_bytes(WHOLE_MODEL_BUCKET.split("=")[1])), \
        times(parse_bytes(OVERLAP_BUCKET.split("=")[1]))


def stage2_table():
    out = []
    for net, _ in NETS:
        for n in STEP_RANKS:
            one, two = stage2_reduce_scatters(net, n)
            out.append([net, str(n), " + ".join(f"{1e3 * t:.1f}" for t in one),
                        " + ".join(f"{1e3 * t:.1f}" for t in two)])
    return md_table(["net", "N", f"one bucket ({WHOLE_MODEL_BUCKET}) ms",
                     f"the overlap's buckets ({OVERLAP_BUCKET}) ms, in launch order"], out)


def prediction(psar):
    """Stage 3's collectives per step at the emulated α and β, without
    compute: collectives_s by stage3_model (the owners' chunks, one after
    another), balanced_s the same collectives were every layer cut in N
    equal chunks (half the ring allreduce of `psar cost` each,
    allreduce/sharded.h) — the difference is the layout's; allreduce_s
    ZeRO-0's one ring allreduce of Ψ."""
    layers = layer_floats()
    rows = []
    for net, _ in NETS:
        alpha, beta = LATENCY_S, 1 / BANDWIDTH[net]
        for n in STEP_RANKS:
            table = costs.query([n], sorted({4 * x for x in layers} | {4 * sum(layers)}),
                                algos=["ring"], alpha=alpha, beta=beta, psar=psar)
            half = {x: table.time("ring", n, 4 * x, alpha, beta) / 2 for x in layers}
            collectives, count = stage3_model(layers, n, alpha, beta, 0.0, prefetch=False)
            rows.append({"net": net, "N": n, "collectives": count,
                         "collectives_s": f"{collectives:.6f}",
                         "balanced_s": f"{sum(3 * half[x] for x in layers) + 2 * half[layers[0]]:.6f}",
                         "allreduce_s": f"{table.time('ring', n, 4 * sum(layers), alpha, beta):.6f}"})
    return rows


def stage3_prediction(variant, net, n, zero0_compute):
    """Stage 3's step (zero3 or zero3_prefetch) by stage3_model at the
    emulated network of `net` and ZeRO-0's measured compute."""
    return stage3_model(layer_floats(), n, LATENCY_S, 1 / BANDWIDTH[net], zero0_compute,
                        prefetch=variant == "zero3_prefetch")[0]


def piece(psi, n, r):
    return psi // n + (1 if r < psi % n else 0)


def state_bytes(stage, psi, n, r, layers):
    """psar's exact bytes for rank r (docs/zero.md): params, grads, optimizer,
    gathered (the layers' buffers of one step without overlap: stage 2
    grad_buffers_form, stage 3 gathered_form, of layers = layer_floats())."""
    own = piece(psi, n, r)
    if stage == 0:
        return 4 * psi, 4 * psi, 8 * psi, 0
    if stage == 1:
        return 4 * psi, 4 * psi, 8 * own, 0
    if stage == 2:
        return 4 * psi, 4 * own, 8 * own, grad_buffers_form(layers)
    return 4 * own, 0, 8 * own, gathered_form(layers)


def paper_bytes(stage, psi, n):
    return {0: 16 * psi, 1: 8 * psi + 8 * psi / n, 2: 4 * psi + 12 * psi / n, 3: 16 * psi / n}[stage]


FIELDS = ("params_bytes", "grads_bytes", "optimizer_bytes", "gathered_bytes")
STATE = FIELDS[:3]  # what the ZeRO paper's forms count


def grad_buffers_form(layers):
    """Stage 2's gradient buffers at their largest in one step without
    overlap (each layer's reduce-scattered and freed as its backward ends):
    a layer's backward holds its gradient and, from the head's backward to
    the embeddings', the tied embedding's (the head adds into it)."""
    emb, rest = layers[0], layers[1:]
    return 4 * (emb + max(rest))


def gathered_form(layers):
    """Stage 3's gathered bytes at their largest in one step without prefetch
    (one micro-batch, the fused backward) of the zero.yaml GPT, layers =
    layer_floats(): [E, blocks..., lnf]. The forward holds one layer (the
    head two: the final layer norm and the tied embedding); a layer's
    backward its parameters and its gradient — and, from the head's backward
    to the embeddings', the embedding's gradient too (the tied head adds
    into it)."""
    emb, blocks, lnf = layers[0], layers[1:-1], layers[-1]
    phases = [max(layers), lnf + emb,           # forward
              2 * lnf + 2 * emb,                # the head's backward
              *(2 * b + emb for b in blocks),   # each block's
              2 * emb]                          # the embeddings'
    return 4 * max(phases)


def memory_table(rows, layers):
    """Per stage and N: the largest rank's bytes measured beside the forms
    (the paper's count parameters, gradients and optimizer state; the
    layers' buffers beside them). layers: layer_floats()."""
    out = []
    for stage in STAGES:
        for n in range(1, 9):
            at = [r for r in rows if int(r["stage"]) == stage and int(r["N"]) == n]
            if not at:
                continue
            psi = int(at[0]["psi"])
            total = lambda r: sum(int(r.get(k) or 0) for k in STATE)
            worst = max(at, key=total)
            measured = total(worst)
            # Exact, per rank: what the buffers must hold.
            exact = all(tuple(int(r.get(k) or 0) for k in FIELDS) ==
                        state_bytes(stage, psi, n, int(r["rank"]), layers) for r in at)
            paper = paper_bytes(stage, psi, n)
            out.append([str(stage), str(n), f"{psi}",
                        *(f"{int(worst.get(k) or 0) / 1e6:.3f}" for k in STATE),
                        f"{measured / 1e6:.3f}", f"{paper / 1e6:.3f}", f"{measured / paper:.3f}",
                        f"{int(worst.get('gathered_bytes') or 0) / 1e6:.3f}",
                        "yes" if exact else "**no**"])
    return md_table(["stage", "N", "Ψ", "params MB", "grads MB", "optimizer MB",
                     "state MB", "ZeRO form MB", "state ÷ form", "layer buffers MB",
                     "every rank = exact form"], out)


def gpt_floats(layers, d, vocab, seq_len):
    return (vocab + seq_len) * d + layers * (12 * d * d + 13 * d) + 2 * d


def budget_table(budget, n, d, vocab, seq_len):
    """The most blocks of the zero.yaml GPT (d_model d) whose training state
    fits `budget` bytes per rank at N = n: psar's exact forms (the memory
    table holds every measured rank to them) beside the paper's."""
    out = []
    for stage in STAGES:
        row = [str(stage)]
        for form in ("psar", "paper"):
            best = 0
            for blocks in range(1, 100000):
                psi = gpt_floats(blocks, d, vocab, seq_len)
                layers = [(vocab + seq_len) * d] + [12 * d * d + 13 * d] * blocks + [2 * d]
                need = (max(sum(state_bytes(stage, psi, n, r, layers)) for r in range(n))
                        if form == "psar" else paper_bytes(stage, psi, n))
                if need > budget:
                    break
                best = blocks
            psi = gpt_floats(best, d, vocab, seq_len)
            row += [str(best), f"{psi / 1e6:.2f}"]
        out.append(row)
    return md_table(["stage", "blocks (psar)", "Ψ M (psar)", "blocks (paper form)",
                     "Ψ M (paper form)"], out)


def step_table(rows, predicted=()):
    out = []
    med = {}
    comp = {}
    for r in rows:
        med.setdefault((r["net"], int(r["N"]), r["variant"]), []).append(float(r["step_s"]))
        if r.get("compute_s"):
            comp.setdefault((r["net"], int(r["N"]), r["variant"]), []).append(float(r["compute_s"]))
    pred = {(p["net"], int(p["N"])): p for p in predicted}
    for (net, n, variant), xs in sorted(med.items()):
        base_name = "zero0_overlap" if variant == "zero2_overlap" else "zero0"
        base = statistics.median(med.get((net, n, base_name), [float("nan")]))
        plain = statistics.median(med.get((net, n, "zero0"), [float("nan")]))
        m = statistics.median(xs)
        sent = max(int(r["dp_bytes_max"]) for r in rows
                   if r["net"] == net and int(r["N"]) == n and r["variant"] == variant)
        model = ""
        target = ""
        if variant.startswith("zero3") and (net, n) in pred and (net, n, "zero0") in comp:
            p = stage3_prediction(variant, net, n, statistics.median(comp[(net, n, "zero0")]))
            model = f"{1e3 * p:.1f} ({m / p:.2f}×)"
            if variant == "zero3_prefetch":
                ok = m / plain <= 1.5 and abs(m / p - 1) <= 0.15
                target = "met" if ok else "**missed**"
        elif variant in ("zero1", "zero2", "zero2_overlap"):
            target = "met" if m / plain <= 1.05 else "**missed**"
        out.append([net, str(n), variant, f"{1e3 * m:.1f}", str(len(xs)),
                    f"{m / base:.3f}" if variant != base_name else "",
                    f"{m / plain:.3f}", model, target, f"{sent / 1e6:.3f}"])
    return md_table(["net", "N", "variant", "step ms (median of reps)", "reps",
                     "÷ same-overlap ZeRO-0", "÷ ZeRO-0", "α-β prediction ms (measured ÷ it)", "target",
                     "dp MB sent (max rank)"], out)


def tables(folder):
    model = zero_model()
    parts = ["# ZeRO: tables\n",
             "Written by `experiments/zero.py report` from the CSVs of this folder.\n"]
    mem = os.path.join(folder, "memory.csv")
    if os.path.exists(mem):
        parts += ["\n## Training state per rank vs N (memory.csv)\n\n"
                  "Bytes of the largest rank (parameters, gradients, Adam's m and v: the "
                  "state), measured from the buffers each rank allocated; the ZeRO paper's "
                  "form for fp32 Adam beside them (stage 0: 16Ψ, stage 1: 8Ψ + 8Ψ/N, stage 2: "
                  "4Ψ + 12Ψ/N, stage 3: 16Ψ/N), and apart the layers' buffers a step holds "
                  "while they are in use (stage 2: the gradient buffers, a block's with the "
                  "tied embedding's, 4·(E + n_block); stage 3: the gathered layers, a "
                  "block's parameters and gradient with the embedding's gradient, "
                  "4·(2·n_block + E); one step without overlap). The last column checks "
                  "every rank's four fields against psar's exact form (P_r = "
                  "Partition{Ψ, N}.size(r); stage 0: 4Ψ, 4Ψ, 8Ψ; stage 1: 4Ψ, 4Ψ, 8·P_r; "
                  "stage 2: 4Ψ, 4·P_r, 8·P_r; stage 3: 4·P_r, 0, 8·P_r — each owned part "
                  "stepped as its layer's sum arrives, so no gradient shard).\n\n",
                  memory_table(read_csv(mem), layer_floats()),
                  "\n### The largest GPT per stage in a budget\n\n"
                  f"Blocks of the zero.yaml GPT (d_model {model['d_model']}) whose training "
                  f"state fits {BUDGET / 1e6:.0f} MB per rank at N = {BUDGET_RANKS}, from "
                  "psar's exact forms (held to every measured rank above) and from the "
                  "paper's.\n\n",
                  budget_table(BUDGET, BUDGET_RANKS, model["d_model"], model["vocab"],
                               model["seq_len"])]
    st = os.path.join(folder, "steps.csv")
    st3 = os.path.join(folder, "steps3.csv")
    pred = os.path.join(folder, "prediction.csv")
    if os.path.exists(st):
        parts += ["\n## Step time at an emulated network (steps.csv)\n\n"
                  f"The slowest rank's step (median over the steps after the first two, then "
                  f"over the repetitions), ring, net.latency {LATENCY}. The variants' "
                  "settings: " + "; ".join(f"{v} `{' '.join(VARIANTS[v])}`"
                                           for v in STEP_PARTS["step"][0]) +
                  ". Target: stage 1 and 2 ≤ 1.05× ZeRO-0.\n\n", step_table(read_csv(st)),
                  "\nStage 2's reduce-scatters by the emulated network's model "
                  "(stage2_reduce_scatters: the ring over the owners' chunks, in segments, "
                  "each alone): a bucket of part of the arena is cut into fewer, whole "
                  "pieces, so each of the overlap's buckets takes most of the time of the "
                  "one bucket of the whole model, and only the first can hide under the "
                  "backward.\n\n", stage2_table()]
    if os.path.exists(st3):
        parts += ["\n## Stage 3 step time (steps3.csv)\n\n"
                  "As above, ZeRO-0 and stage 3 without and with prefetch taking turns. "
                  "Target: stage 3 with prefetch ≤ 1.5× ZeRO-0 and within 15 % of its α-β "
                  "prediction (stage3_model: the emulated network's rules, the ring's "
                  "program over the layers' chunks as stage 3 cuts them — at the owners' "
                  "boundaries of the flat arena, so a block inside one rank's piece is one "
                  "chunk that streams around the ring in segments — and ZeRO-0's measured "
                  "compute between the GPT's calls; prediction.csv gives the step's 20 "
                  "collectives alone by that model, `collectives_s`, beside the same "
                  "collectives were each layer cut evenly, `balanced_s`).\n\n",
                  step_table(read_csv(st3), read_csv(pred) if os.path.exists(pred) else [])]
    return "".join(p if p.endswith("\n") else p + "\n" for p in parts)


def regenerate(folder, results=None):
    """tables.md from the committed CSVs (psar_exp check)."""
    return {"tables.md": tables(folder)}


def report(args):
    write_text(os.path.join(args.out, "tables.md"), tables(args.out))


def launcher():
    launch = runner.Launcher(__doc__, "zero", runs={"memory": memory, "step": step, "step3": step},
                             reports={"report": report})
    launch.parser.add_argument("--steps", type=int, default=20)
    launch.parser.add_argument("--reps", type=int, default=3)
    launch.parser.add_argument("--net", choices=[n for n, _ in NETS],
                               help="step parts: this network only")
    return launch


if __name__ == "__main__":
    runner.main_guard("zero.py", launcher().main)
