"""psar's experiment harness as one package.

    runner   mpirun with this machine's flags, the psar binary, sweep expansion,
             and Launcher: the flags, output folder and provenance every
             experiment script shares
    io       CSV reading, atomic writes, Markdown tables
    units    sizes, durations and bandwidths as psar spells them
    costs    the allreduce cost forms and exact byte counts, from `psar cost`
    report   experiment and report YAMLs, validated on load
    generated  README blocks the reports fill, and the difference of two texts
    check    every results folder against what its committed data regenerates

`python3 -m psar_exp` (from experiments/) is the one entry point: `check`,
and every experiment script by name (psar_exp/__main__.py).

The scripts in experiments/ are thin definitions on top of it; they import it
as `psar_exp` (Python puts a script's own folder first on sys.path), and the
tests in experiments/tests/ through experiments/conftest.py.
"""

import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
