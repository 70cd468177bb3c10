"""The sweep expansion and the points of a `psar train` experiment."""

import os
import re
import subprocess
import sys

import pytest

from psar_exp import runner
from psar_exp.report import SchemaError


def test_expansion_is_the_cartesian_product_in_key_order():
    pts = runner.expand({"sync.backend": ["ring", "tree"], "ranks": [2, 4, 8]})
    assert len(pts) == 6
    assert pts[0] == [("sync.backend", "ring"), ("ranks", 2)]
    assert pts[1] == [("sync.backend", "ring"), ("ranks", 4)]
    assert pts[-1] == [("sync.backend", "tree"), ("ranks", 8)]
    assert sorted({v for p in pts for k, v in p if k == "ranks"}) == [2, 4, 8]


def test_a_scalar_is_a_list_of_one_and_no_sweep_is_one_empty_point():
    assert runner.expand({"train.steps": 5}) == [[("train.steps", 5)]]
    assert runner.expand(None) == [[]]


@pytest.mark.parametrize("sweep, field", [
    (["ring", "tree"], "experiment.sweep: must map keys"),
    ({"sync.backend": []}, "experiment.sweep.sync.backend: an empty list"),
    ({"ranks": [2, "four"]}, "experiment.sweep.ranks: world sizes must be integers"),
    ({"ranks": [0]}, "experiment.sweep.ranks: world sizes must be integers"),
])
def test_a_bad_sweep_is_an_error_naming_the_field(sweep, field):
    with pytest.raises(SchemaError, match=field):
        runner.expand(sweep)


def test_points_name_runs_and_pass_the_swept_keys_as_overrides():
    exp = {"experiment": {"ranks": 4, "sweep": {"parallel.microbatches": [4, 8],
                                                "ranks": [2]}},
           "sync": {"backend": "ring"}}
    pts = runner.points(exp, extra_sets=["train.steps=3"])
    assert [p.name for p in pts] == ["ring_microbatches-4_n2", "ring_microbatches-8_n2"]
    assert pts[0].ranks == 2
    assert pts[0].sets == ["train.steps=3", "parallel.microbatches=4"]
    assert pts[1].swept == {"parallel.microbatches": "8", "ranks": "2"}


def test_a_swept_backend_names_the_run_instead_of_the_configured_one():
    exp = {"experiment": {"sweep": {"sync.backend": ["tree"], "net.latency": ["5us"]}},
           "sync": {"backend": "ring"}}
    (p,) = runner.points(exp)
    assert p.name == "backend-tree_latency-5us_n4"
    assert p.sets == ["sync.backend=tree", "net.latency=5us"]


def test_lists_and_booleans_reach_psar_as_yaml():
    exp = {"experiment": {"sweep": {"model.hidden": [[64, 32]], "train.shuffle": [False]}}}
    (p,) = runner.points(exp)
    assert p.sets == ["model.hidden=[64, 32]", "train.shuffle=false"]


def test_train_commands_run_under_mpirun_with_this_machines_flags(monkeypatch):
    monkeypatch.setattr(runner.shutil, "which", lambda _: "/usr/bin/mpirun")
    p = runner.Point("x_n3", 3, ["a.b=1"])
    cmd = runner.train_command("psar", "e.yaml", "out/x", p, ["--quiet"])
    assert cmd == ["/usr/bin/mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "3",
                   "psar", "train", "e.yaml", "--out", "out/x", "--overwrite", "--quiet", "--set", "a.b=1"]


def test_on_the_cluster_train_commands_go_through_cluster_sh():
    exp = {"experiment": {"ranks": 4, "sweep": {"sync.backend": ["ring"]}}}
    [point] = runner.points(exp)
    cmd = runner.train_command("psar", "e.yaml", "out", point, cluster={"per_host": 2, "name": "psar-t"})
    assert cmd[0].endswith("scripts/cluster.sh")
    assert cmd[1:cmd.index("--")] == ["--name", "psar-t", "mpirun", "-np", "4", "--per-host", "2"]
    assert cmd[cmd.index("--") + 1:cmd.index("--") + 3] == ["psar", "train"]
    assert "sync.backend=ring" in cmd
    plain = runner.train_command("psar", "e.yaml", "out", point)
    assert "--allow-run-as-root" in plain and "cluster.sh" not in " ".join(plain)


def test_cluster_slots_place_ranks_host_by_host():
    cmd = runner.cluster_prefix(5, name="psar-n", slots=[1, 2, 2])
    assert cmd[1:] == ["--name", "psar-n", "mpirun", "-np", "5", "--slots", "1,2,2", "--"]


def test_cpu_times_read_steal_where_the_kernel_reports_it(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 5 50 800 10 0 5 30 7 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n")
    assert runner.cpu_times(str(stat)) == (30, 1000)
    stat.write_text("cpu  100 5 50 800\n")  # an old kernel: no steal column
    assert runner.cpu_times(str(stat)) is None
    assert runner.cpu_times(str(tmp_path / "absent")) is None
    assert runner.steal_share((30, 1000), (80, 2000)) == 0.05
    assert runner.steal_share(None, (80, 2000)) is None


def pinned(monkeypatch, tree=("a" * 40, []), binary=("a" * 40, []), same=False):
    """begin() against a stubbed checkout and build stamp; `same`: whether
    the two commits differ only where the binary is not built from."""
    monkeypatch.setattr(runner, "tree_state", lambda: tree)
    monkeypatch.setattr(runner, "binary_build", lambda psar: binary)
    monkeypatch.setattr(runner, "same_code", lambda a, b: same)


def test_provenance_names_command_commits_load_and_steal_and_replaces_its_own_section(
        tmp_path, monkeypatch):
    pinned(monkeypatch)
    folder = tmp_path / "exp"
    folder.mkdir()
    (folder / "README.md").write_text(
        "# exp\n\nHand-written text.\n\n" + runner.PROVENANCE_BEGIN + "\nold\n" +
        runner.PROVENANCE_END + "\n\n<!-- generated:begin provenance -->\n**Not pinned**\n"
        "<!-- generated:end -->\n\nMore text.\n")
    # The script as the shell names it, from any directory.
    script = os.path.join(runner.ROOT, "experiments", "run.py")
    state = runner.begin(str(folder), psar="/x/psar", argv=[script, "e.yaml"])
    state.update(load=1.5, cpu=(0, 1))
    runner.record_provenance(str(folder), state)
    runner.record_provenance(str(folder), state)  # a second run replaces, never appends
    text = (folder / "README.md").read_text()
    assert text.startswith("# exp\n\nHand-written text.\n")
    assert text.count("## Produced by") == 1
    assert "Command: `experiments/run.py e.yaml`." in text
    assert f"Harness commit {'a' * 12}; psar built at {'a' * 12}" in text
    assert "1-minute load average 1.50 before" in text
    assert "Not pinned" not in text and "old" not in text  # the replaced block's note goes too
    assert text.endswith("More text.\n")
    if runner.cpu_times():
        assert "steal time" in text
    fresh = tmp_path / "new"
    fresh.mkdir()
    runner.record_provenance(str(fresh), state)
    assert (fresh / "README.md").read_text().startswith("# new\n\n")


@pytest.mark.parametrize("tree, binary, reason", [
    (("a" * 40, ["allreduce/ring.cc"]), ("a" * 40, []), "uncommitted changes in allreduce/ring.cc"),
    (("a" * 40, []), ("b" * 40, []), f"was built at {'b' * 12}, the tree is at {'a' * 12}"),
    (("a" * 40, []), ("a" * 40, ["sim/sim.cc"]), "built from a tree with uncommitted changes"),
    (("a" * 40, []), None, "has no build stamp"),
    ((None, []), ("a" * 40, []), "not in a git checkout"),
])
def test_a_run_not_pinned_to_a_clean_commit_is_refused_unless_exploratory(
        monkeypatch, tmp_path, tree, binary, reason):
    pinned(monkeypatch, tree, binary)
    with pytest.raises(runner.RunError, match="refusing to run: .*" + re.escape(reason) +
                       ".*--exploratory"):
        runner.begin(str(tmp_path / "out"), psar="/x/psar")
    state = runner.begin(str(tmp_path / "out"), exploratory=True, psar="/x/psar")
    assert any(reason in p for p in state["problems"])
    assert "**Exploratory run** (--exploratory): " in runner.provenance_text(state)


def test_a_binary_built_before_commits_that_leave_its_sources_alone_is_the_trees_binary(monkeypatch, tmp_path):
    pinned(monkeypatch, binary=("b" * 40, []), same=True)
    state = runner.begin(str(tmp_path / "out"), psar="/x/psar")
    assert state["problems"] == []
    assert f"psar built at {'b' * 12} (scripts/build.sh's stamp; no change to its sources since)" in \
        runner.provenance_text(state)


def test_same_code_reads_git():
    head = runner.tree_state()[0]
    first = subprocess.run(["git", "-C", runner.ROOT, "rev-list", "--max-parents=0", "HEAD"],
                           capture_output=True, text=True).stdout.split()[0]
    assert runner.same_code(head, head)
    assert not runner.same_code(first, head)  # the first commit had other code
    assert not runner.same_code(None, head)


def test_exploratory_runs_never_go_under_results_and_reference_runs_only_there(monkeypatch):
    pinned(monkeypatch)
    results = os.path.join(runner.ROOT, "results", "quickstart")
    with pytest.raises(runner.RunError, match="--exploratory: .* is under results/"):
        runner.begin(results, exploratory=True)
    with pytest.raises(runner.RunError, match="--reference: .* is not under results/"):
        runner.begin(os.path.join(runner.ROOT, "runs", "quickstart"), reference=True)
    assert runner.begin(results, reference=True)["problems"] == []


def test_the_build_stamp_beside_the_cmake_cache_names_the_binarys_commit(tmp_path):
    build = tmp_path / "build"
    (build / "trainer").mkdir(parents=True)
    (build / "trainer" / "psar").write_text("")
    (build / "CMakeCache.txt").write_text("")
    assert runner.binary_build(str(build / "trainer" / "psar")) is None
    (build / runner.BUILD_STAMP).write_text("c" * 40 + "\nsim/sim.cc\n")
    assert runner.binary_build(str(build / "trainer" / "psar")) == ("c" * 40, ["sim/sim.cc"])


def test_output_goes_under_runs_unless_reference():
    import argparse
    ap = argparse.ArgumentParser()
    runner.add_output_flags(ap)
    assert runner.output_root(ap.parse_args([])) == os.path.join(runner.ROOT, "runs")
    assert runner.output_root(ap.parse_args(["--reference"])) == os.path.join(runner.ROOT, "results")
    with open(os.path.join(runner.ROOT, ".gitignore")) as f:
        assert "/runs/" in f.read().split()


def test_run_py_writes_under_runs_by_default():
    done = subprocess.run([sys.executable, os.path.join(runner.ROOT, "experiments", "run.py"),
                           os.path.join(runner.ROOT, "experiments", "quickstart.yaml"), "--dry-run"],
                          capture_output=True, text=True, cwd=os.path.join(runner.ROOT, "experiments"))
    assert done.returncode == 0, done.stderr
    assert f"--out {os.path.join(runner.ROOT, 'runs', 'quickstart')}/" in done.stdout
    assert "/results/" not in done.stdout


def test_read_csv_drops_a_last_line_cut_by_a_kill_and_nothing_else(tmp_path):
    from psar_exp.io import read_csv
    cut = tmp_path / "steps.csv"
    cut.write_text("rank,step,loss\n0,1,0.5\n0,2,0.4\n0,3")
    assert [r["step"] for r in read_csv(str(cut))] == ["1", "2"]
    whole = tmp_path / "whole.csv"
    whole.write_text("rank,step,loss\n0,1,0.5\n0,2,0.4")  # no final newline, but complete
    assert [r["step"] for r in read_csv(str(whole))] == ["1", "2"]


def test_psar_exp_launches_every_experiment_script_and_names_them(capsys):
    from psar_exp.__main__ import LAUNCHERS, REPORTS, main
    scripts = {f[:-3] for f in os.listdir(os.path.join(runner.ROOT, "experiments"))
               if f.endswith(".py") and f not in ("conftest.py", "schedule_grid.py")}
    assert set(LAUNCHERS) | set(REPORTS) == scripts and not set(LAUNCHERS) & set(REPORTS)
    assert main(["run", os.path.join(runner.ROOT, "experiments", "quickstart.yaml"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"--out {os.path.join(runner.ROOT, 'runs', 'quickstart')}/" in out
    assert main(["gpt_3d", "--no-such-flag"]) == 2  # the script's own argparse answers


def test_a_failed_job_is_relaunched_from_its_latest_checkpoint_one_rank_smaller(tmp_path):
    out = tmp_path / "run"
    calls = []

    class Done:
        def __init__(self, rc):
            self.returncode, self.stdout, self.stderr = rc, "", ""

    def launch(cmd):
        calls.append(cmd)
        if len(calls) == 1:  # dies after checkpoints 10 (complete) and 20 (no MANIFEST yet)
            for step, complete in ((10, True), (20, False)):
                d = out / "checkpoints" / f"step_{step:08d}"
                d.mkdir(parents=True)
                if complete:
                    (d / "MANIFEST").write_text("")
            return Done(137)
        return Done(0)

    def train_cmd(ranks, resume):
        return ["mpirun", "-np", str(ranks), "psar", "train", "e.yaml", "--out", str(out)] + (
            ["--resume", str(out)] if resume else [])

    attempts = runner.run_with_restarts(train_cmd, 4, str(out), max_restarts=2,
                                        relaunch_sets=["hetero.kill_rank=-1"], launch=launch)
    assert [(a.ranks, a.returncode, a.resumed_from) for a in attempts] == [(4, 137, None), (3, 0, 10)]
    assert calls[0] == train_cmd(4, False)
    assert calls[1] == train_cmd(3, True) + ["--set", "hetero.kill_rank=-1"]

    calls.clear()
    always = lambda cmd: (calls.append(cmd), Done(1))[1]
    with pytest.raises(runner.RunError, match="failed 2 time"):
        runner.run_with_restarts(train_cmd, 4, str(tmp_path / "other"), max_restarts=1, launch=always)
    assert [c[2] for c in calls] == ["4", "3"]


def test_a_launcher_runs_a_report_alone_and_a_run_between_begin_and_its_provenance(tmp_path):
    calls = []
    launch = runner.Launcher("Test launcher.\n\nMore.", "launcher_test",
                             runs={"go": lambda args: calls.append(("go", args.state["problems"]))},
                             reports={"rep": lambda args: calls.append(("rep", args.out))})
    launch.parser.add_argument("--steps", type=int, default=3)
    out = str(tmp_path / "out")
    args = launch.main(["rep", "--out", out])
    assert calls == [("rep", out)] and args.steps == 3 and args.psar is None
    assert not os.path.exists(os.path.join(out, "README.md"))  # a report records no provenance
    calls.clear()
    # A binary without a build stamp: an exploratory run is marked so, never refused.
    fake = tmp_path / "psar"
    fake.write_text("")
    fake.chmod(0o755)
    launch.main(["go", "--out", out, "--exploratory", "--psar", str(fake)])
    assert len(calls) == 1 and calls[0][0] == "go" and calls[0][1]
    with open(os.path.join(out, "README.md")) as f:
        assert runner.PROVENANCE_BEGIN in f.read()
    with pytest.raises(runner.RunError, match="refusing to run"):
        launch.main(["go", "--out", out, "--psar", str(fake)])
    assert len(calls) == 1


def test_a_launchers_flags_pick_its_parts_and_a_run_names_the_folders_of_its_provenance(tmp_path):
    calls = []
    sub = str(tmp_path / "out" / "sub")
    launch = runner.Launcher("Flags.", "flags_test",
                             runs={"measure": lambda args: calls.append("measure") or [sub]},
                             reports={"reuse": lambda args: calls.append("reuse"),
                                      "dry": lambda args: calls.append("dry")},
                             flags={"--reuse": ("reuse", "report again"),
                                    "--dry-run": ("dry", "print only")})
    out = str(tmp_path / "out")
    launch.main(["--reuse", "--out", out])
    launch.main(["--dry-run", "--out", out])
    assert calls == ["reuse", "dry"] and not os.path.exists(out)  # a report makes no folder
    with pytest.raises(SystemExit):
        launch.main(["--reuse", "--dry-run", "--out", out])
    fake = tmp_path / "psar"
    fake.write_text("")
    fake.chmod(0o755)
    os.makedirs(sub)
    args = launch.main(["--out", out, "--exploratory", "--psar", str(fake)])
    assert calls[-1] == "measure" and args.part == "measure"
    assert os.path.exists(os.path.join(sub, "README.md"))  # the folder the run named
    assert not os.path.exists(os.path.join(out, "README.md"))  # and only it
    with pytest.raises(ValueError, match="--nothing"):
        runner.Launcher("Bad.", "bad", runs={"go": print}, flags={"--nothing": ("none", "")})
