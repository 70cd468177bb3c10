"""recompute.py: the forms from the shapes (full reruns a third of the
blocks' forward and backward, psar's selective half the paper's attention
rerun) and the table's ratios from a synthetic steps.csv."""

import json

import pytest

import recompute
from psar_exp.io import write_csv


def test_full_reruns_a_third_of_the_blocks_and_selective_the_attention_products():
    # Without a head (V = 0) full is exactly one more forward: 1/3 of fwd + bwd.
    extra, total = recompute.forms(N=64, s=16, h=32, L=3, V=0)
    assert extra["full"][0] / total == pytest.approx(1 / 3)
    # Attention products per block: Q·Kᵀ and P·V, 2·N·s·h each, s/(6h) of the linears.
    block = 24 * 64 * 32 * 32 + 4 * 64 * 16 * 32
    assert total == 3 * 3 * block
    assert extra["selective"] == (3 * 2 * 64 * 16 * 32, 3 * 4 * 64 * 16 * 32)
    assert extra["none"] == (0, 0)
    # The head is not recomputed.
    with_head, total_head = recompute.forms(N=64, s=16, h=32, L=3, V=50)
    assert with_head["full"] == extra["full"] and total_head == total + 3 * 2 * 64 * 32 * 50


def test_ratios_are_per_repetition_against_none(tmp_path):
    one = [(0, "none", 1.0), (0, "selective", 1.1), (0, "full", 1.5),
           (1, "full", 3.0), (1, "selective", 2.0), (1, "none", 2.0)]
    rows = [{"rep": k, "dropout": p, "mode": m, "compute_s": t * (2 if p == "0" else 1),
             "median_s": t, "forward_s": 0.4 * t, "backward_s": 0.6 * t, "steps": 6}
            for p in ("0.1", "0") for k, m, t in one]
    got = recompute.ratios([{k: str(v) for k, v in r.items()} for r in rows[:6]])
    assert got["full"] == pytest.approx([1.5, 1.5])
    assert got["selective"] == pytest.approx([1.1, 1.0])
    write_csv(str(tmp_path / "steps.csv"), rows)
    text = recompute.tables(str(tmp_path))
    assert "| 0.1 | full | 2250.0 | 1.500 | 1.500 – 1.500 | +50.0 % |" in text
    assert text.count("| +40.0 % |") == 2  # none's forward share, on each full row
    assert "| 0 | full | 4500.0 | 1.500 | 1.500 – 1.500 | +50.0 % |" in text
    assert "over 2 repetitions" in text


def test_spans_pair_each_steps_forward_and_backward(tmp_path):
    events = [{"ph": "X", "cat": c, "name": n, "dur": d} for c, n, d in
              [("forward", "F0", 2e5), ("backward", "B0", 3e5), ("sync", "sync", 1e3),
               ("forward", "F0", 1e5), ("backward", "B0", 4e5)]]
    (tmp_path / "trace.json").write_text(json.dumps({"traceEvents": events}))
    assert recompute.spans(str(tmp_path / "trace.json")) == [(0.2, 0.3), (0.1, 0.4)]
