"""experiments/where_ps_wins.py: the order statistics of the α-β prediction
against a seeded Monte Carlo, and table.md from sibling CSVs (the folder's
contract: nine columns are enough, a new backend is a new column)."""

import csv
import os
import random

import pytest

import where_ps_wins as w


@pytest.mark.parametrize("row", ["delay_exponential", "delay_pareto"])
@pytest.mark.parametrize("k,n", [(4, 4), (4, 5), (1, 1)])
def test_order_statistics_match_a_monte_carlo(row, k, n):
    rng = random.Random(7)
    m, a = w.DELAY_MEAN_S, w.PARETO_SHAPE

    def draw():
        if row == "delay_exponential":
            return rng.expovariate(1 / m)
        return m * (a - 1) / a * (1 - rng.random()) ** (-1 / a)  # inverse CDF

    trials = 50000
    mc = sum(sorted(draw() for _ in range(n))[k - 1] for _ in range(trials)) / trials
    # The Pareto of shape 1.5 has no variance: a looser bound for its mean.
    rel = 0.01 if row == "delay_exponential" else 0.05
    assert w.order_statistic(k, n, row) == pytest.approx(mc, rel=rel)


def test_the_waited_compute_of_each_regime():
    assert w.waited_compute("slow_2x", "ring", 0.1) == pytest.approx(0.2)
    assert w.waited_compute("slow_4x", "ps_bsp", 0.1) == pytest.approx(0.4)
    assert w.waited_compute("slow_4x", "ps_backup", 0.1) == pytest.approx(0.1)
    exp = w.order_statistic(4, 4, "delay_exponential")
    assert w.waited_compute("delay_exponential", "zero", 0.1) == pytest.approx(0.1 + exp)
    assert w.waited_compute("delay_exponential", "ps_backup", 0.1) < 0.1 + exp


def write(path, rows, fields):
    with open(path, "w", newline="") as f:
        wr = csv.DictWriter(f, fields)
        wr.writeheader()
        wr.writerows(rows)


def test_a_sibling_csv_of_nine_columns_adds_its_column_and_the_winner_is_marked(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    base = {"status": "ok", "target_step": "20", "final_accuracy": "0.9", "lost_s": "0",
            "restarts": "0"}
    write(data / "runs.csv",
          [{"row": "homogeneous", "backend": "ring", "rep": r, "time_to_target_s": t, **base,
            "compute_s": "0.1", "bytes_sent": "1000"} for r, t in ((1, "3"), (2, "5"), (3, "4"))],
          w.FIELDS)
    write(data / "sparse.csv",
          [{"row": "homogeneous", "backend": "ps_sparse", "rep": 1, "time_to_target_s": "2", **base},
           {"row": "sparse_1e6", "backend": "ps_sparse", "rep": 1, "time_to_target_s": "",
            **{**base, "status": "no_target"}}],
          w.FIELDS[:9])
    lines = w.table(str(tmp_path)).splitlines()
    header = next(x for x in lines if x.startswith("| regime |"))
    homog = next(x for x in lines if x.startswith("| homogeneous |"))
    cols = [c.strip() for c in header.strip("|").split("|")]
    cells = dict(zip(cols, [c.strip() for c in homog.strip("|").split("|")]))
    assert cells["ring"] == "4.00 s (3/3)"  # the median of three
    assert cells["ps_sparse"] == "**2.00 s (1/1)**"  # the row's fastest
    assert cells["ps_bsp"] == "—"
    assert any(x.startswith("| sparse_1e6 |") and "not reached (0/1)" in x for x in lines)
