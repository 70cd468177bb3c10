"""python3 -m psar_exp check: every committed results folder regenerates from
its data, and a changed cell is named by file, row and column."""

import os
import shutil

import pytest

from psar_exp import ROOT, check
from psar_exp.__main__ import main
from psar_exp.generated import difference, fill_blocks, GeneratedError

RESULTS = os.path.join(ROOT, "results")


def test_every_committed_folder_regenerates_from_its_data():
    names, problems = check.check(RESULTS)
    assert len(names) == len([d for d in os.listdir(RESULTS)
                              if os.path.isdir(os.path.join(RESULTS, d))])
    assert problems == []


def copy_of(tmp_path, name):
    shutil.copytree(os.path.join(RESULTS, name), tmp_path / name)
    return tmp_path / name


def test_a_changed_table_cell_fails_naming_the_file_row_and_column(tmp_path, capsys):
    folder = copy_of(tmp_path, "tuning")
    table = folder / "table.md"
    text = table.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| 16777216 | 4695.9"))
    table.write_text(text.replace(row, row.replace("| 4384.3 |", "| 4384.4 |"), 1))
    assert main(["check", "--results", str(tmp_path), "tuning"]) == 1
    out = capsys.readouterr().out
    assert f"{table}:" in out
    assert "table row '16777216', column 'best µs': committed '4384.4', the data gives '4384.3'" in out


def test_a_changed_csv_cell_fails_naming_the_row_and_column(tmp_path):
    folder = copy_of(tmp_path, "gpt_3d")
    grid = folder / "grid.csv"
    lines = grid.read_bytes().decode().split("\r\n")
    cells = lines[3].split(",")
    cells[6] = "999.0"  # samples_per_s
    lines[3] = ",".join(cells)
    grid.write_bytes("\r\n".join(lines).encode())
    _, problems = check.check(str(tmp_path), ["gpt_3d"])
    assert len(problems) == 1
    assert problems[0].startswith(f"{grid}:4: row 3")
    assert "column 'samples_per_s': committed '999.0'" in problems[0]


def test_a_retyped_figure_in_a_generated_readme_block_fails(tmp_path):
    folder = copy_of(tmp_path, "gpt_3d")
    readme = folder / "README.md"
    readme.write_text(readme.read_text().replace("34 of 34 runs", "33 of 34 runs", 1))
    _, problems = check.check(str(tmp_path), ["gpt_3d"])
    assert len(problems) == 1 and "README.md" in problems[0] and "33 of 34" in problems[0]


def test_an_unchanged_copy_passes(tmp_path):
    copy_of(tmp_path, "tuning")
    assert check.check(str(tmp_path), ["tuning"])[1] == []


def test_a_folder_without_a_generator_fails(tmp_path):
    (tmp_path / "new_experiment").mkdir()
    (tmp_path / "new_experiment" / "README.md").write_text("# new\n")
    _, problems = check.check(str(tmp_path))
    assert problems == [f"{tmp_path / 'new_experiment'}: no generator registered in "
                        "psar_exp/check.py FOLDERS"]


def test_a_provenance_that_does_not_pin_the_code_needs_its_note():
    pinned = ("Command: `experiments/run.py e.yaml --reference`. Harness commit abc1234def56; "
              "psar built at abc1234def56 (scripts/build.sh's stamp). Machine: 2 cores.")
    assert check.provenance_problems(pinned) == []
    assert check.provenance_problems(pinned.replace("Machine", "**Exploratory run** (--exploratory)"
                                                    ": x. Machine")) == ["it was an exploratory run"]
    old = "Commit f0c7f953cf51 + uncommitted changes. Machine: 2 cores."
    assert check.provenance_problems(old) == [
        "the code differed from its commit (uncommitted changes)",
        "the block does not name the command (the prose may)",
        "the commit psar was built from was not recorded"]
    assert "it names 2 commits (abc1234, def5678)" in check.provenance_problems(
        pinned.replace("psar built at abc1234def56", "psar built at def5678"))
    assert check.provenance_problems(pinned.replace(
        "psar built at abc1234def56 (scripts/build.sh's stamp)",
        "psar built at def5678 (scripts/build.sh's stamp; no change to its sources since)")) == []
    # A command's numbers are not commits.
    assert check.provenance_problems(pinned.replace("e.yaml", "e.yaml --rows 10000000")) == []


def test_blocks_are_filled_by_name_and_a_missing_block_is_an_error():
    text = "a\n<!-- generated:begin x -->\nold\n<!-- generated:end -->\nb\n"
    assert fill_blocks(text, {"x": "new"}) == text.replace("old", "new")
    with pytest.raises(GeneratedError, match="no generated block named y"):
        fill_blocks(text, {"y": "new"})


def test_difference_names_the_first_differing_line():
    assert difference("f.md", "a\nb\n", "a\nb\n") is None
    assert difference("f.md", "a\nb\n", "a\nc\n") == "f.md:2: committed 'b', the data gives 'c'"
    assert "lacks" in difference("f.md", "a", "a\nb")


def test_folders_the_check_does_not_regenerate_are_listed_on_every_run(capsys):
    assert main(["check", "bench_linear", "tuning"]) == 0
    out = capsys.readouterr().out
    assert "not regenerated: bench_linear: " in out
    assert "not regenerated: tuning" not in out
