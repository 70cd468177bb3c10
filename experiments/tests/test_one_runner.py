"""The harness is one package over one runner: no script edits sys.path, and
every process a script or psar_exp starts is started by psar_exp.runner
(launch, run), so echoing, failures and priorities are handled once."""

import os
import re

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
