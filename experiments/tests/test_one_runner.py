"""The harness is one package over one runner: no script edits sys.path;
every process a script or psar_exp starts is started by psar_exp.runner
(launch, run), so echoing, failures and priorities are handled once; and
every script that runs psar does it through runner.Launcher, which alone
checks the tree (begin) and records the provenance."""

import importlib.util
import os
import re

from psar_exp import runner
from psar_exp.__main__ import LAUNCHERS, REPORTS

HERE = os.path.dirname(os.path.abspath(__file__))
EXPERIMENTS = os.path.dirname(HERE)


def sources():
    for folder in (EXPERIMENTS, os.path.join(EXPERIMENTS, "psar_exp")):
        for name in sorted(os.listdir(folder)):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path) as f:
                    yield os.path.relpath(path, EXPERIMENTS), f.read()


def code_lines(text):
    """Lines outside docstrings and comments (enough for these files: a
    docstring opens and closes with triple quotes on lines of their own or
    on one line)."""
    inside = False
    for line in text.splitlines():
        quotes = line.count('"""')
        if inside or quotes:
            if quotes % 2 == 1:
                inside = not inside
            continue
        yield line.split("#", 1)[0]


def test_no_script_edits_sys_path():
    offenders = [name for name, text in sources()
                 if any(re.search(r"\bsys\.path\b", line) for line in code_lines(text))]
    assert offenders == []


def test_every_process_starts_in_the_runner():
    pattern = re.compile(r"\b(subprocess|os\.system|os\.popen|os\.exec\w*|os\.spawn\w*)\b")
    offenders = [name for name, text in sources() if name != os.path.join("psar_exp", "runner.py")
                 and any(pattern.search(line) for line in code_lines(text))]
    assert offenders == []


def script(name):
    """experiments/<name>.py as a module (not as __main__: nothing runs)."""
    spec = importlib.util.spec_from_file_location(f"psar_launcher_{name}",
                                                  os.path.join(EXPERIMENTS, name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_launcher_is_the_runners_launcher():
    offenders = [name for name in LAUNCHERS
                 if not isinstance(getattr(script(name), "launcher", lambda: None)(), runner.Launcher)]
    assert offenders == []


def test_only_the_launcher_checks_the_tree_and_records_provenance():
    # A script that parses its own flags or calls begin/record_provenance
    # has a front or a tail of its own; report tools parse their own flags,
    # and so does psar_exp's check.
    tail = re.compile(r"\b(begin|record_provenance|add_output_flags|output_root)\(")
    front = re.compile(r"\bArgumentParser\(")
    own_flags = {f"{name}.py" for name in REPORTS} | {os.path.join("psar_exp", "__main__.py")}
    offenders = [name for name, text in sources()
                 if name != os.path.join("psar_exp", "runner.py")
                 and any(tail.search(line) or (front.search(line) and name not in own_flags)
                         for line in code_lines(text))]
    assert offenders == []


def test_report_tools_start_no_psar():
    starts = re.compile(r"\b(psar_binary|mpirun_prefix|cluster_prefix|train_command|"
                        r"locked_train|bench_allreduce_args)\b")
    offenders = [name for name, text in sources() if name in {f"{n}.py" for n in REPORTS}
                 and any(starts.search(line) for line in code_lines(text))]
    assert offenders == []
