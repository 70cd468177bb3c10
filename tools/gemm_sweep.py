#!/usr/bin/env python3
"""Times cuBLAS bf16 GEMMs (through torch.matmul) over a grid of shapes and
the shapes of published GPT/Llama layers, on the CUDA device this runs on.

Runs on a CUDA machine with PyTorch (not in CI). Writes CSV rows
    gpu,dtype,layout,batch,m,n,k,ms,tflops
layout NN: [m,k]·[k,n] (a layer's forward), NT: [m,k]·[n,k]^T (the input
gradient), TN: [k,m]^T·[k,n] (the weight gradient); batch > 1: batched
(attention) products. ms is the median of timed repetitions (CUDA events,
after warm-up) on random normal operands; operands are rotated among
several sets when they are small enough to sit in L2.

usage: tools/gemm_sweep.py OUT.csv ENV.txt [--deadline SECONDS]

Not run by CI or by any test: it needs a CUDA GPU and PyTorch. Its output
for a GPU model goes to sim/gemm/NAME.csv (provenance in sim/gemm/README.md),
where psar builds it in as cluster.gpu.gemm_table: NAME.
"""
import argparse
import itertools
import math
import subprocess
import sys
import time

import torch


def env_report(path):
    lines = []
    for cmd in (["nvidia-smi"], ["nvidia-smi", "-q", "-d", "CLOCK,POWER,PERFORMANCE"]):
        try:
            lines.append(subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout)
        except Exception as e:  # noqa: BLE001
            lines.append(f"{cmd}: {e}")
    p = torch.cuda.get_device_properties(0)
    lines.append(f"torch {torch.__version__} cuda {torch.version.cuda} "
                 f"cublas {torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction}")
    lines.append(f"device {p.name} sms {p.multi_processor_count} mem {p.total_memory}")
    # The two ceilings: a large bf16 product and a device-to-device copy.
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    ms = time_ms(lambda: a @ b, 30)
    lines.append(f"peak_bf16_8192^3 {2 * 8192**3 / ms / 1e9:.1f} TFLOP/s ({ms:.4f} ms median)")
    x = torch.empty(1 << 30, device="cuda", dtype=torch.uint8).random_()
    y = torch.empty_like(x)
    ms = time_ms(lambda: y.copy_(x), 20)
    lines.append(f"copy_1GiB {2 * x.numel() / ms / 1e6:.1f} GB/s read+write ({ms:.4f} ms median)")
    del x, y
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines[-3:]), flush=True)


def time_ms(fn, reps, sets=None):
    for _ in range(3):
        fn(0) if sets else fn()
    torch.cuda.synchronize()
    times = []
    for r in range(reps):
        s = torch.cuda.Event(enable_timing=True)
        e = torch.cuda.Event(enable_timing=True)
        s.record()
        fn(r % sets) if sets else fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    times.sort()
    return times[len(times) // 2]


def model_shapes():
    """(layout-free) (batch, m, n, k) of the GEMMs of published layers."""
    # name: hidden, ffn, heads, kv heads, swiglu
    models = {
        "gpt3_175b": (12288, 4 * 12288, 96, 96, False),
        "gpt3_5b": (4096, 4 * 4096, 32, 32, False),
        "gpt3_20b": (6144, 4 * 6144, 48, 48, False),
        "llama2_70b": (8192, 28672, 64, 8, True),
        "llama3_8b": (4096, 14336, 32, 8, True),
        "llama3_70b": (8192, 28672, 64, 8, True),
        "llama3_405b": (16384, 53248, 128, 8, True),
        "nemotron4_340b": (18432, 73728, 96, 8, False),
    }
    shapes = set()
    for (h, ffn, a, kv, swiglu), t, m in itertools.product(
            models.values(), (1, 2, 4, 8), (2048, 4096, 8192, 16384)):
        d = h // a
        qkv = (h + 2 * kv * d) // t
        fc1 = (2 if swiglu else 1) * ffn // t
        for n, k in ((qkv, h), (h, h // t), (fc1, h), (h, ffn // t)):
            shapes.add((1, m, n, k))
    return sorted(shapes)


def grid_shapes():
    sizes = (1024, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576)
    return sorted({(1, m, n, k) for m in (2048, 4096, 8192, 16384) for n in sizes for k in sizes})


def attention_shapes():
    out = set()
    for s, d, heads in itertools.product((2048, 4096, 8192), (128,), (8, 16, 32)):
        out.add((heads, s, s, d))   # scores: [s,d]·[d,s] per head
        out.add((heads, s, d, s))   # context: [s,s]·[s,d] per head
    return sorted(out)


def measure(writer, gpu, batch, m, n, k, layout):
    dt = torch.bfloat16
    flops = 2.0 * batch * m * n * k
    operand_bytes = 2 * batch * (m * k + k * n)
    sets = 1 if operand_bytes > 64e6 else 4
    shape_a = {"NN": (m, k), "NT": (m, k), "TN": (k, m)}[layout]
    shape_b = {"NN": (k, n), "NT": (n, k), "TN": (k, n)}[layout]
    if batch > 1:
        shape_a, shape_b = (batch, *shape_a), (batch, *shape_b)
    A = [torch.randn(shape_a, device="cuda", dtype=dt) for _ in range(sets)]
    B = [torch.randn(shape_b, device="cuda", dtype=dt) for _ in range(sets)]
    tr = (lambda x: x.transpose(-1, -2))
    if layout == "NN":
        fn = lambda i: torch.matmul(A[i], B[i])  # noqa: E731
    elif layout == "NT":
        fn = lambda i: torch.matmul(A[i], tr(B[i]))  # noqa: E731
    else:
        fn = lambda i: torch.matmul(tr(A[i]), B[i])  # noqa: E731
    est_ms = flops / 600e12 * 1e3
    reps = int(max(5, min(40, 25.0 / max(est_ms, 1e-3))))
    ms = time_ms(fn, reps, sets)
    writer.write(f"{gpu},bf16,{layout},{batch},{m},{n},{k},{ms:.6f},{flops / ms / 1e9:.2f}\n")
    writer.flush()
    del A, B


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("env")
    ap.add_argument("--deadline", type=float, default=120)
    args = ap.parse_args()
    start = time.time()
    torch.backends.cuda.matmul.allow_tf32 = False
    env_report(args.env)
    gpu = torch.cuda.get_device_name(0).replace(",", " ")
    jobs = [(s, l) for s in model_shapes() for l in ("NN", "NT", "TN")]
    jobs += [(s, "NN") for s in attention_shapes()]
    jobs += [(s, l) for s in grid_shapes() for l in ("NN", "NT", "TN")]
    jobs = list(dict.fromkeys(jobs))  # each GEMM once, in the order above
    done = 0
    with open(args.csv, "w") as w:
        w.write("gpu,dtype,layout,batch,m,n,k,ms,tflops\n")
        for (batch, m, n, k), layout in jobs:
            if time.time() - start > args.deadline:
                print(f"gemm_sweep: deadline reached after {done} of {len(jobs)} GEMMs", flush=True)
                break
            measure(w, gpu, batch, m, n, k, layout)
            done += 1
    print(f"gemm_sweep: {done} GEMMs in {time.time() - start:.1f} s", flush=True)


if __name__ == "__main__":
    sys.exit(main())
