"""sim_validation's reading of a run: the slowest rank per step, pooled over
the repeats after the warm-up steps, and per pipeline stage the compute
without the tensor-parallel all-reduces."""

import os
import statistics

import sim_validation


def write_run(folder, rows):
    """rows: (rank, pp, step, step_s, compute_s, tp_s, sync_s)."""
    os.makedirs(folder)
    with open(os.path.join(folder, "steps.csv"), "w") as f:
        f.write("rank,step,step_s,compute_s,sync_s\n")
        for rank, _, step, step_s, compute, _, sync in rows:
            f.write(f"{rank},{step},{step_s},{compute},{sync}\n")
    with open(os.path.join(folder, "axes.csv"), "w") as f:
        f.write("rank,pp,step,tp_s\n")
        for rank, pp, step, _, _, tp, _ in rows:
            f.write(f"{rank},{pp},{step},{tp}\n")


def test_the_slowest_rank_per_step_pooled_over_repeats_and_the_compute_per_stage(tmp_path):
    row = tmp_path / "row"
    warm = sim_validation.WARMUP
    expected_steps, stage0, stage1 = [], [], []
    for rep in range(2):
        rows = []
        for step in range(1, warm + 4):
            # Stage 0 (rank 0) and stage 1 (rank 1); warm-up steps are slow.
            slow = 10.0 if step <= warm else 0.0
            a = 1.0 + 0.1 * step + rep + slow
            b = 1.5 + 0.05 * step + slow
            rows.append((0, 0, step, a, 0.5 + 0.01 * step, 0.1, 0.2))
            rows.append((1, 1, step, b, 0.7, 0.3, 0.4 + 0.01 * step))
            if step > warm:
                expected_steps.append(max(a, b))
                stage0.append(0.5 + 0.01 * step - 0.1)
                stage1.append(0.7 - 0.3)
        write_run(str(row / f"r{rep}"), rows)
    m = sim_validation.measured(str(row))
    assert m["step_s"] == statistics.median(expected_steps)
    assert m["min"] == min(expected_steps) and m["max"] == max(expected_steps)
    assert abs(m["pure_s"][0] - statistics.median(stage0)) < 1e-12
    assert abs(m["pure_s"][1] - statistics.median(stage1)) < 1e-12


def test_every_row_names_a_distinct_run_and_simulates_the_same_grid_it_trains():
    names = [r[0] for r in sim_validation.rows()]
    assert len(names) == len(set(names))
    for name, _, ranks, train, sim in sim_validation.rows():
        for key in ("parallel.pp", "parallel.tp", "parallel.schedule", "ps.servers"):
            assert [s for s in train if s.startswith(key)] == [s for s in sim if s.startswith(key)], name
