"""experiments/ps_lite.py: a measured session's files become the data, and
the table's times and ratios follow `psar bench ps`'s definition on both
sides (slowest worker per round, median over rounds, median of the per-run
ratios)."""

import ps_lite

VMSTAT = """procs -----------memory---------- ---swap-- -----io---- -system-- ------cpu-----
 r  b   swpd   free   buff  cache   si   so    bi    bo   in   cs us sy id wa st
 3  0      0 100000  2000 300000    0    0     0     0  100  200 50 10 40  0  {a}
 2  0      0 100000  2000 300000    0    0     0     0  100  200 50 10 40  0  {b}
 2  0      0 100000  2000 300000    0    0     0     0  100  200 50 10 40  0  {c}
"""


def session(tmp_path):
    src = tmp_path / "session"
    src.mkdir()
    machine = []
    for run, ps_us, lite_rounds in [(1, 100.0, [[150, 90], [210, 200], [120, 180]]),
                                    (2, 200.0, [[100, 90], [150, 160], [170, 130]]),
                                    (3, 100.0, [[80, 90], [85, 70], [95, 99]])]:
        (src / f"psar_nw2_run{run}.csv").write_text(
            "mode,servers,workers,size,time_us,bandwidth,raw_ratio\n"
            f"ps,1,2,4096,{ps_us},0.1,0.5\nzmq_raw,1,2,4096,{ps_us / 2},0.2,1\n")
        # ps-lite: rounds × ranks; a round's time is its slowest rank
        (src / f"pslite_nw2_run{run}.txt").write_text(
            "2026-11-26T00:00:00Z\n" + "".join(f"T {rank} 4096 {rnd} {t}\n"
                                               for rnd, times in enumerate(lite_rounds)
                                               for rank, t in enumerate(times)))
        for prog in ("psar", "pslite"):
            machine.append(f"== run {run} nw 2 {prog} 2026-11-26T00:00:00Z\n"
                           f" 00:00:00 up 1:00,  0 user,  load average: {run}.50, 1.00, 1.00\n"
                           + VMSTAT.format(a=9, b=run, c=run + 1))
    machine.append("== end 2026-11-26T00:01:00Z\n")
    (src / "machine.txt").write_text("".join(machine))
    (src / "unrelated.txt").write_text("ignored")
    return src


def test_the_ratio_is_the_median_of_each_runs_pslite_over_psar(tmp_path):
    out = tmp_path / "out"
    ps_lite.take_in(str(session(tmp_path)), str(out / "data"))
    table, machine = ps_lite.tables(str(out))
    # ps-lite per run: slowest rank per round (150, 210, 180; 100, 160, 170; 90, 85, 99),
    # median over rounds: 180, 160, 90; over psar's 100, 200, 100: 1.80, 0.80, 0.90
    row = next(line for line in table.splitlines() if line.startswith("| 4 KiB"))
    cells = [c.strip() for c in row.split("|")[1:-1]]
    assert cells == ["4 KiB", "100", "160", "**0.90**", "1.80 0.80 0.90", "**no**", "0.50"]
    assert "missed at 4 KiB with 2 workers" in table and "at 0 of 1 points" in table
    # load 1.5, 2.5, 3.5 (twice each); steal: mean of vmstat's samples after the first
    assert "6 program runs" in machine and "1.50–3.50" in machine and "1.5–3.5" in machine


def test_regenerate_reads_only_the_committed_data(tmp_path):
    out = tmp_path / "out"
    ps_lite.take_in(str(session(tmp_path)), str(out / "data"))
    assert sorted(p.name for p in (out / "data").iterdir()) == ["machine.txt", "psar.csv",
                                                                 "pslite.csv"]
    blocks = ps_lite.regenerate(str(out))
    assert set(blocks) == {"README.md#table", "README.md#machine"}
