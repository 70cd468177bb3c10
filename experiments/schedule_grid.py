#!/usr/bin/python3
"""Draws a simulated pipeline schedule as a PNG: one row per stage, time to the
right, a box per action like the figures in the lecture notes. Forwards are
blue, (input-)backwards green, weight gradients orange; chunks of an
interleaved schedule are shaded darker to lighter (chunk 0 darkest).

    psar schedule --kind zb_h1 --stages 4 --microbatches 8 --json s.json
    experiments/schedule_grid.py s.json s.png

(`psar schedule ... --png s.png` writes s.json and runs this script.)
"""

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.colors as mcolors  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402

COLORS = {
    "forward": "#4C72B0",
    "backward": "#55A868",
    "backward-input": "#55A868",
    "backward-weight": "#DD8452",
}


def shade(color, chunk, chunks):
    """Chunk 0 keeps the colour; later chunks mix towards white."""
    if chunks <= 1:
        return color
    rgb = mcolors.to_rgb(color)
    mix = 0.55 * chunk / (chunks - 1)
    return tuple(c + (1 - c) * mix for c in rgb)


def draw(schedule, out_path):
    stages = schedule["stages"]
    makespan = schedule["makespan"]
    width = min(max(6.0, makespan * 0.35), 40.0)
    fig, ax = plt.subplots(figsize=(width, 0.55 * stages + 1.4))
    for stage, spans in enumerate(schedule["spans"]):
        for s in spans:
            length = s["end"] - s["start"]
            if length <= 0:
                continue
            color = shade(COLORS[s["op"]], s["chunk"], schedule["chunks"])
            ax.broken_barh([(s["start"], length)], (stage - 0.4, 0.8),
                           facecolors=color, edgecolors="black", linewidth=0.5)
            ax.text(s["start"] + length / 2, stage, s["label"], ha="center", va="center",
                    fontsize=7 if len(s["label"]) <= 2 else 6,
                    color="white" if s["chunk"] == 0 else "black")
    ax.set_ylim(stages - 0.5, -0.5)
    ax.set_xlim(0, makespan)
    ax.set_yticks(range(stages))
    ax.set_yticklabels([f"stage {s}" for s in range(stages)])
    ax.set_xlabel("time")
    c = schedule["costs"]
    peaks = " ".join(str(p) for p in schedule["peak_activations"])
    ax.set_title(
        f"{schedule['kind']}: p={stages}, m={schedule['microbatches']}, v={schedule['chunks']}"
        f"  (t_f={c['t_f']}, t_b={c['t_b']}, t_w={c['t_w']})   "
        f"bubble {schedule['bubble_fraction']:.4g}, peak activations {peaks}",
        fontsize=9)
    fig.tight_layout()
    fig.savefig(out_path, dpi=120)


def main(argv):
    if len(argv) != 3:
        sys.stderr.write(__doc__)
        return 2
    with open(argv[1]) as f:
        schedule = json.load(f)
    draw(schedule, argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
