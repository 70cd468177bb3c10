"""pp_measure.run_point keeps the quietest of its attempts, and only it."""

import os
import subprocess

import pp_measure


def test_the_quietest_attempt_is_kept_and_nothing_else_is_left(tmp_path, monkeypatch):
    out = tmp_path / "point"
    # CPU stall per attempt (µs over one second): 20 %, then 50 %, then 30 %.
    stalls = iter([0, 0.2e6, 0.2e6, 0.7e6, 0.7e6, 1.0e6])
    clock = iter([0.0, 1.0, 10.0, 11.0, 20.0, 21.0])
    monkeypatch.setattr(pp_measure, "wait_for_quiet", lambda limit, wait: None)
    monkeypatch.setattr(pp_measure, "stall_us", lambda: (next(stalls), 0.0))
    monkeypatch.setattr(pp_measure.time, "time", lambda: next(clock))
    attempts = []

    def launch(cmd, **kwargs):
        attempts.append(len(attempts))
        os.makedirs(out)
        (out / "attempt.txt").write_text(str(attempts[-1]))
        return subprocess.CompletedProcess(cmd, 0)
    monkeypatch.setattr(pp_measure.runner, "launch", launch)
    pressure = pp_measure.run_point(["psar"], str(out), quiet=10, tries=3, wait=0)
    assert attempts == [0, 1, 2]
    assert abs(pressure - 20.0) < 1e-9
    assert (out / "attempt.txt").read_text() == "0"  # the quietest, not the last
    assert sorted(os.listdir(out)) == ["attempt.txt", "cpu_pressure.txt"]
    assert sorted(os.listdir(tmp_path)) == ["point"]
