"""Experiment and report YAMLs: every file in experiments/ loads, and a
wrong or missing field is an error that names the file and the field."""

import glob
import os

import pytest
import yaml

from psar_exp import ROOT, report

EXPERIMENTS = os.path.join(ROOT, "experiments")
KINDS = {"net_scaling.yaml": "net_scaling", "ps_vs_allreduce.yaml": "ps_vs_allreduce"}


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(EXPERIMENTS, "*.yaml"))),
                         ids=os.path.basename)
def test_every_experiment_in_the_repository_loads(path):
    exp = report.load(path, KINDS.get(os.path.basename(path)))
    assert "experiment" in exp


def cost_report():
    with open(os.path.join(EXPERIMENTS, "collective_cost.yaml")) as f:
        return yaml.safe_load(f)


def test_defaults_are_filled_in():
    data = cost_report()
    del data["bench"]["segment_bytes"]
    assert report.parse(data, "cost")["bench"]["segment_bytes"] == "512K"


@pytest.mark.parametrize("change, message", [
    (lambda d: d["bench"].pop("ranks"), "bench.ranks: missing"),
    (lambda d: d["bench"].update(ranks=[2, "four"]), r"bench.ranks\[1\]: expected an integer, got 'four'"),
    (lambda d: d["bench"]["sweeps"][1].update(iters="ten"),
     r"bench.sweeps\[1\].iters: expected an integer, got 'ten'"),
    (lambda d: d["bench"]["sweeps"][0].update(max="64Q"), r"bench.sweeps\[0\].max: expected a size"),
    (lambda d: d["bench"].update(algos=[]), "bench.algos: expected a non-empty list"),
    (lambda d: d["bench"].update(speed=3), "bench.speed: unknown key"),
    (lambda d: d["targets"]["ring_vs_mpi_busbw"].update(at_least="high"),
     "targets.ring_vs_mpi_busbw.at_least: expected a number"),
    (lambda d: d.update(bench=[1, 2]), "bench: expected a mapping"),
    (lambda d: d["experiment"].pop("name"), "experiment.name: missing"),
])
def test_a_wrong_field_is_named(change, message):
    data = cost_report()
    change(data)
    with pytest.raises(report.SchemaError, match=f"^collective_cost.yaml: {message}"):
        report.parse(data, "cost", "collective_cost.yaml")


def test_net_scaling_checks_its_quantities():
    with open(os.path.join(EXPERIMENTS, "net_scaling.yaml")) as f:
        data = yaml.safe_load(f)
    data["networks"][2]["latency"] = "fast"
    with pytest.raises(report.SchemaError, match=r"networks\[2\].latency: expected a duration"):
        report.parse(data, "net_scaling")


def test_a_train_experiment_checks_only_the_harness_keys(tmp_path):
    path = tmp_path / "e.yaml"
    path.write_text("experiment: {name: x, ranks: two}\nmodel: {anything: goes}\n")
    with pytest.raises(report.SchemaError, match=f"^{path}: experiment.ranks: expected an integer"):
        report.load(str(path))
    path.write_text("experiment: {name: x, ranks: 2}\nmodel: {anything: goes}\n")
    assert report.load(str(path))["model"] == {"anything": "goes"}


def test_an_unknown_report_kind_and_a_broken_file_are_errors(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("report: speed\nexperiment: {name: x}\n")
    with pytest.raises(report.SchemaError, match="report: unknown kind 'speed'"):
        report.load(str(path))
    path.write_text("experiment: [\n")
    with pytest.raises(report.SchemaError, match="not valid YAML"):
        report.load(str(path))
    with pytest.raises(report.SchemaError, match="cannot read"):
        report.load(str(tmp_path / "missing.yaml"))
