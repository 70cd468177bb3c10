"""The cost module against the C++ byte counts: for every algorithm whose
bytes pass through psar's Comm and N in {2, 3, 4, 8}, what psar_exp.costs
reads from `psar cost` equals what the Comm counters count in a real
`psar bench allreduce --volume-csv` run under mpirun."""

import os

import pytest

from psar_exp import costs, runner
from psar_exp.io import read_csv

# 1025 floats: no N of the sweep divides it, so the chunks are uneven.
SIZE = 4100


@pytest.fixture(scope="module")
def table():
    return costs.query([2, 3, 4, 8], [SIZE])


@pytest.fixture(scope="module")
def counted(table):
    """Every algorithm with a byte count (those bypassing Comm have none)."""
    algos = [a for a in table.algos() if table.sent_total(a, 2, SIZE) is not None]
    assert len(algos) >= 2, algos
    return algos


@pytest.mark.parametrize("N", [2, 3, 4, 8])
def test_cost_module_bytes_equal_the_comm_counters(table, counted, N, tmp_path):
    volume = tmp_path / "volume.csv"
    sweep = {"min": SIZE, "max": SIZE, "factor": 2, "iters": 1, "warmup": 0}
    runner.run(runner.mpirun_prefix(N) + runner.bench_allreduce_args(
        runner.psar_binary(), counted, sweep, "4K", volume_csv=str(volume)))
    rows = {r["algo"]: r for r in read_csv(str(volume))}
    assert sorted(rows) == sorted(counted)
    for algo in counted:
        assert int(rows[algo]["ranks"]) == N
        assert table.sent_total(algo, N, SIZE) == int(rows[algo]["bytes_sent_total"]), algo
        assert table.sent_busiest(algo, N, SIZE) == int(rows[algo]["bytes_sent_max_rank"]), algo


def test_times_are_the_forms_evaluated(table):
    a, b, c = table.terms("ring", 4, SIZE)
    assert (a, b, c) == (6, pytest.approx(2 * 3 / 4 * SIZE), pytest.approx(3 / 4 * SIZE))
    assert table.time("ring", 4, SIZE, 1e-6, 1e-9, 1e-10) == pytest.approx(
        6e-6 + 2 * 3 / 4 * SIZE * 1e-9 + 3 / 4 * SIZE * 1e-10)


def test_psar_cost_errors_reach_the_caller():
    with pytest.raises(runner.RunError, match="--n: '6' is not a whole number"):
        costs.query([2], [6])
    with pytest.raises(KeyError, match="no cost row for ring at p = 16"):
        costs.query([2], [SIZE], algos=["ring"]).terms("ring", 16, SIZE)


def test_fit_recovers_alpha_and_beta_from_exact_times(table):
    alpha, beta, gamma = 3e-6, 2e-10, 1e-10
    samples = []
    for n in (4096, 65536, 1 << 20):
        t = costs.query([4], [n], algos=["ring"])
        a, b, c = t.terms("ring", 4, n)
        samples.append((a, b, c, a * alpha + b * beta + c * gamma))
    fit = costs.fit_alpha_beta(samples, gamma)
    assert fit == [pytest.approx(alpha, rel=1e-6), pytest.approx(beta, rel=1e-6)]


def test_binary_comes_from_psar_bin(monkeypatch):
    monkeypatch.setenv("PSAR_BIN", os.path.join(os.sep, "nonexistent", "psar"))
    with pytest.raises(runner.RunError, match="psar binary not found at /nonexistent/psar"):
        runner.psar_binary()


def test_ps_time_puts_a_nodes_workers_on_its_one_nic():
    # 4 workers, 1 shard: the shard's NIC carries 4n whatever the placement;
    # 8 workers over 4 shards: a shard 2n, but 4 workers on one node 4n.
    n, B, chunk = 8 << 20, 125e6, 1 << 20
    assert costs.ps_time(4, 1, n, B, 0.0, chunk) == costs.ps_time(4, 1, n, B, 0.0, chunk, 2)
    assert costs.ps_time(8, 4, n, B, 0.0, chunk) == pytest.approx((2 * n + 8 * chunk) / B)
    assert costs.ps_time(8, 4, n, B, 0.0, chunk, 4) == pytest.approx((4 * n + 8 * chunk) / B)


def test_ps_rows_come_beside_the_allreduce_rows():
    # S = N = 4 at 16 MiB in 256 KiB chunks: n plus the last chunk's 4 replies
    # through one NIC, against the ring's 2(N − 1)/N·n.
    n, c, beta = 16 << 20, 256 << 10, 1 / 125e6
    t = costs.query([4], [n], algos=["ring"], beta=beta, alpha=50e-6, servers=[1, 4], chunk_bytes=c)
    assert t.algos() == ["ring"]
    assert t.ps_time(4, 4, n) == pytest.approx((n + 4 * c) * beta + 100e-6)
    assert t.ps_time(4, 1, n) == pytest.approx((4 * n + 4 * c) * beta + 100e-6)
    assert t.time("ring", 4, n, 0, beta) == pytest.approx(1.5 * n * beta)
    with pytest.raises(KeyError, match="S = 2"):
        t.ps_time(4, 2, n)
