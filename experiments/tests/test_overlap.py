"""experiments/overlap.py: the per-run statistics, the targets, the points'
overrides and its experiment file's schema."""

import os

import pytest

import overlap
from psar_exp import ROOT, report, runner
from psar_exp.report import SchemaError


def rows(steps):
    """steps.csv rows: steps = [[(step_s, compute_s, sync_s, exposed_s) per rank], ...]."""
    out = []
    for k, ranks in enumerate(steps, start=1):
        for r, (step, compute, sync, exposed) in enumerate(ranks):
            out.append({"rank": str(r), "step": str(k), "step_s": str(step),
                        "compute_s": str(compute), "sync_s": str(sync),
                        "exposed_sync_s": str(exposed)})
    return out


def test_run_stats_take_the_slowest_rank_per_step_then_the_median_after_the_warm_up():
    steps = [[(9.0, 9.0, 9.0, 9.0), (9.0, 9.0, 9.0, 9.0)],  # warm-up, left out
             [(1.0, 0.5, 0.4, 0.1), (2.0, 0.6, 0.3, 0.2)],
             [(3.0, 0.7, 0.2, 0.3), (1.0, 0.1, 0.9, 0.0)],
             [(2.5, 0.2, 0.1, 0.0), (0.5, 0.8, 0.5, 0.4)]]
    s = overlap.run_stats(rows(steps), skip=1)
    # per step: max over ranks -> step 2.0, 3.0, 2.5; compute 0.6, 0.7, 0.8;
    # sync 0.4, 0.9, 0.5; exposed 0.2, 0.3, 0.4
    assert s == {"step_s": 2.5, "compute_s": 0.7, "sync_s": 0.5, "exposed_sync_s": 0.3}


def test_summary_is_the_median_of_the_repeats():
    runs = [{m: v for m in overlap.METRICS} for v in (3.0, 1.0, 2.0)]
    assert overlap.summarize(runs) == {m: 2.0 for m in overlap.METRICS}


@pytest.mark.parametrize("exposed, step, met", [
    (0.025, 0.115, True),    # exactly at both bounds
    (0.026, 0.100, False),   # exposed above 25 % of the plain sync
    (0.010, 0.116, False),   # step above 1.15 × max(compute, sync)
])
def test_targets_against_the_plain_run(exposed, step, met):
    plain = {"sync_s": 0.1, "compute_s": 0.08}  # max(compute, sync) = 0.1
    share, bound, ok = overlap.check_targets(plain, {"exposed_sync_s": exposed, "step_s": step})
    assert share == pytest.approx(exposed / 0.1)
    assert bound == pytest.approx(step / 0.1)
    assert ok == met


def test_point_overrides_per_backend_and_mode():
    assert overlap.point_sets("ring", 4, "off") == ["sync.backend=ring", "sync.overlap=false"]
    assert overlap.point_sets("ps", 4, "front_first", "64K") == [
        "sync.backend=ps", "ps.servers=4", "sync.overlap=true", "sync.priority=front_first",
        "sync.bucket_bytes=64K"]
    with pytest.raises(runner.RunError, match="overlap mode 'lifo'"):
        overlap.point_sets("ring", 2, "lifo")
    assert overlap.network_sets("1Gbit@50us") == ["net.bandwidth=1Gbit", "net.latency=50us"]


def test_the_experiment_file_validates_and_its_model_size_is_the_mlps():
    exp = report.load(os.path.join(ROOT, "experiments", "overlap.yaml"), "overlap")
    # 256-512-512-10: 256·512 + 512 + 512·512 + 512 + 512·10 + 10
    assert overlap.model_params(exp) == 399370
    assert overlap.bucket_value("whole", 4 * 399370) == str(4 * 399370)
    assert overlap.bucket_value("64K", 1) == "64K"
    assert exp["experiment"]["sweep"]["skip_steps"] == 5


def test_a_missing_sweep_field_is_an_error_naming_it():
    with pytest.raises(SchemaError, match="repeats"):
        report.parse({"experiment": {"name": "x", "sweep": {
            "networks": ["1Gbit"], "ranks": [2], "backends": ["ring"], "modes": ["off"],
            "buckets": {"network": "1Gbit", "ranks": 2, "priority": "fifo", "sizes": ["1M"],
                        "backends": ["ring"]}}}}, "overlap")
