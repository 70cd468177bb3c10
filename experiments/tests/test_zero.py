"""experiments/zero.py: the memory table holds every rank to psar's exact
form (and says so when one does not), and the step table's ratios."""

import zero


def mem_rows(stage, n, psi, optimizer_of=None):
    out = []
    for r in range(n):
        own = psi if stage == 0 else zero.piece(psi, n, r)
        opt = 8 * own if optimizer_of is None else optimizer_of(r)
        out.append({"stage": str(stage), "N": str(n), "rank": str(r), "psi": str(psi),
                    "params_bytes": str(4 * psi), "grads_bytes": str(4 * psi),
                    "optimizer_bytes": str(opt)})
    return out


def test_pieces_are_the_balanced_partition():
    assert [zero.piece(10, 4, r) for r in range(4)] == [3, 3, 2, 2]
    assert sum(zero.piece(1285, 7, r) for r in range(7)) == 1285


def test_memory_table_marks_exact_rows_and_flags_a_rank_off_by_a_float():
    table = zero.memory_table(mem_rows(1, 4, 10) + mem_rows(0, 2, 10))
    assert "| 1 | 4 | 10 |" in table and "**no**" not in table
    # stage 1 at the largest rank: 8Ψ + 8·⌈Ψ/N⌉ = 104 bytes against the paper's 8Ψ + 8Ψ/N = 100
    assert "| 1.040 | yes |" in table
    bad = mem_rows(1, 4, 10, optimizer_of=lambda r: 8 * zero.piece(10, 4, r) + (4 if r == 3 else 0))
    assert "**no**" in zero.memory_table(bad)


def test_step_table_compares_each_stage_with_its_zero0_peer():
    rows = []
    for variant, s in [("zero0", 0.100), ("zero1", 0.104), ("zero0_overlap", 0.080),
                       ("zero2_overlap", 0.110)]:
        rows.append({"net": "1gbit", "N": "4", "variant": variant, "rep": "0", "step_s": str(s),
                     "dp_bytes_max": "100"})
    table = zero.step_table(rows)
    line = {l.split("|")[3].strip(): l for l in table.splitlines() if l.startswith("| 1gbit")}
    assert "1.040" in line["zero1"] and "met" in line["zero1"]
    assert "1.375" in line["zero2_overlap"] and "1.100" in line["zero2_overlap"]
    assert "**missed**" in line["zero2_overlap"]
