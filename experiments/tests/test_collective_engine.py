"""collective_engine: the runs of a measurement (old and new alternating,
each under the measurement lock) and table.md from data/ alone (the
committed folder: psar_exp check)."""

import argparse

import pytest

import collective_engine as ce
from psar_exp import runner


def test_measure_alternates_the_binaries_and_refuses_mixing_others(tmp_path, monkeypatch):
    ran = []

    def run(cmd, **kw):
        ran.append(cmd)
        for i, a in enumerate(cmd):
            if a in ("--csv", "--volume-csv"):
                # One row per call: enough for table.md.
                with open(cmd[i + 1], "w") as f:
                    f.write("algo,size,time_us,bytes_sent_max_rank\nring,1024,"
                            f"{2 if 'old' in cmd[i + 1] or 'fp32' in cmd[i + 1] else 1},"
                            f"{8 if 'fp32' in cmd[i + 1] else 4}\n")
        return "printed\n"
    monkeypatch.setattr(runner, "run", run)
    monkeypatch.setattr(runner, "machine_lines", lambda: ["uptime: load"])
    monkeypatch.setattr(runner, "base_commit", lambda psar: "a" * 40)
    args = argparse.Namespace(out=str(tmp_path), psar="NEW", base="OLD", reps=3,
                              parts="engine2,aa2,dtype4", state={"binary": "b" * 40})
    ce.measure(args)
    psars = [c[c.index("bench") - 1] for c in ran]
    assert psars == ["OLD", "NEW", "NEW", "OLD", "OLD", "NEW"] + ["OLD"] * 6 + ["NEW", "NEW"]
    assert all(c[:2] == ["flock", runner.MEASURE_LOCK] and "-c" in c for c in ran)
    assert [c[c.index("-np") + 1] for c in ran] == ["2"] * 12 + ["4"] * 2
    assert "sync.dtype=bf16" in ran[-1] and "net.bandwidth=1Gbit" in ran[-1]
    table = (tmp_path / "table.md").read_text()
    assert "Old: psar at aaaaaaa" in table and "new: psar at bbbbbbb" in table
    assert "| 2 | ring | 1024 | 2.0 | 1.0 | 2.000 | yes | 2.000 |" in table
    assert "A/A ratio from 1.000 to 1.000" in table
    assert "| 4 | ring | 1024 | 2 | 1 | 0.500 | 8 | 4 | 0.500 | yes |" in table
    assert (tmp_path / "data" / "machine.txt").read_text().count("uptime: load") == 14
    monkeypatch.setattr(runner, "base_commit", lambda psar: "c" * 40)
    with pytest.raises(runner.RunError, match="fresh --out"):
        ce.measure(args)
    args.parts = "engine3"
    monkeypatch.setattr(runner, "base_commit", lambda psar: "a" * 40)
    with pytest.raises(runner.RunError, match="unknown part 'engine3'"):
        ce.measure(args)

