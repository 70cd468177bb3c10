"""`python3 -m psar_exp check`: every results folder against its data.

For each folder under results/ the registry below names what regenerates
its tables and generated README blocks from the CSVs committed beside them
(never by running an experiment): a sweep's summary.csv from its runs, or a
report script's regenerate(folder, results) -> {file: text}. The check
compares each regenerated text with the committed file and fails naming the
file, the line and, in a table, the row and column. It also checks what the
harness cannot regenerate but can hold to its rules: the provenance block
is there, one that does not pin the code (uncommitted changes, several
commits) carries the generated note that says so, and every image a
Markdown file links to exists. A folder missing from the registry fails:
a new folder says how it is produced.
"""

import importlib.util
import os
import re
import sys

from psar_exp import ROOT, report, runner
from psar_exp.io import write_text
from psar_exp.generated import BEGIN, END, GeneratedError, blocks, difference, fill_blocks

EXPERIMENTS = os.path.join(ROOT, "experiments")


def sweep(yaml_name):
    """A folder of experiments/run.py (or pp_measure.py): summary.csv is its
    runs' summary rows with the swept values in front."""
    def regenerate(folder, results):
        exp = report.load(os.path.join(EXPERIMENTS, yaml_name + ".yaml"), "train")
        texts = {"summary.csv": runner.summary_text(exp, folder)}
        with open(os.path.join(folder, "README.md")) as f:
            if "summary" in blocks(f.read()):
                texts["README.md#summary"] = summary_block(runner.summary_rows(exp, folder))
        return texts
    regenerate.how = f"summary.csv from the runs of experiments/{yaml_name}.yaml"
    return regenerate


def summary_block(rows):
    """A README's line per run of a sweep: what its summary.csv says."""
    return "".join(f"- `{r['run']}`: {int(r['steps'])} steps, {float(r['epochs']):g} epochs, final "
                   f"loss {float(r['final_loss']):.4f}, test accuracy "
                   f"{100 * float(r['test_accuracy']):.2f} %\n" for r in rows)


def script(name, **kw):
    """A folder written by experiments/<name>.py: its regenerate(folder,
    results, **kw)."""
    def regenerate(folder, results):
        path = os.path.join(EXPERIMENTS, name + ".py")
        spec = importlib.util.spec_from_file_location(f"psar_report_{name}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.regenerate(folder, results, **kw)
    regenerate.how = f"experiments/{name}.py regenerate()"
    return regenerate


def folder_script(script, args, output):
    """A folder whose `output` is what its own `script` (in the folder)
    prints, run with `args` (relative to the folder)."""
    def regenerate(folder, results):
        # An argument naming something in the folder is passed as its path.
        cmd = [sys.executable, os.path.join(folder, script),
               *[os.path.join(folder, a) if os.path.exists(os.path.join(folder, a)) else a
                 for a in args]]
        done = runner.launch(cmd, echo=False)
        if done.returncode != 0:
            raise ValueError(f"{' '.join(cmd)} failed: {done.stderr.strip()}")
        return {output: done.stdout}
    regenerate.how = f"{script} {' '.join(args)} > {output}"
    return regenerate


def both(*regens):
    """Every file of each of `regens`."""
    def regenerate(folder, results):
        texts = {}
        for r in regens:
            texts.update(r(folder, results))
        return texts
    regenerate.how = " and ".join(r.how for r in regens)
    return regenerate


def within(sub, regen):
    """`regen` applied to the subfolder `sub` (its files named from the folder)."""
    def regenerate(folder, results):
        return {os.path.join(sub, k): v for k, v in regen(os.path.join(folder, sub), results).items()}
    regenerate.how = f"{sub}/: {regen.how}"
    return regenerate


def partly(regen, reason):
    """`regen`, which leaves part of its folder unchecked for `reason`."""
    regen.unchecked = reason
    return regen


def unchecked(reason):
    """A folder whose figures the check does not yet regenerate; `reason`
    says why. The check lists every such folder on each run (never silently
    passes it), and still holds its provenance and image links."""
    def regenerate(folder, results):
        return {}
    regenerate.how = "nothing regenerated"
    regenerate.unchecked = reason
    return regenerate


FOLDERS = {
    "gpt_3d": script("gpt_3d"),
    "tuning": script("auto_tuning"),
    "comm_volume": script("report_collectives", experiment="comm_volume"),
    "collective_cost": script("report_collectives", experiment="collective_cost"),
    "quickstart": sweep("quickstart"),
    "mlp_fmnist": sweep("mlp_fmnist"),
    "fmnist_sync": both(sweep("fmnist_sync"), script("sync_table")),
    "net_scaling": script("net_scaling"),
    "cluster": script("cluster_net_scaling"),
    "tp": script("tp_report"),
    "simulate": partly(both(script("sim_validation"),
                            within("published", script("simulate_published"))), (
        "only validation.* and published/: megatron_table1.md, qualitative.md, scale.md and "
        "README.md come from experiments/simulate_tables.py, which calibrates by running psar "
        "simulate for minutes and whose simulator-time columns are wall-clock measurements; "
        "llama3.md from its --llama part; plan_*.md from psar plan")),
    "ps_vs_allreduce": script("ps_vs_allreduce"),
    "overlap": both(script("overlap"), within("ps_vs_allreduce_overlap", script("ps_vs_allreduce"))),
    "pp_measured": script("pp_report"),
    "pp_schedules": script("pp_schedule_tables"),
    "bench_linear": unchecked("the README's table is the benchmark's only record: no data file "
                              "was committed"),
    "net_1gbit": script("net_scaling", first=True),
    "ps_bench": unchecked("hand-written README over the committed bench CSVs and logs"),
    "pp_activation": sweep("pp_activation"),
    "pp_bubble_m": sweep("pp_bubble_m"),
    "pp_bubble_p": sweep("pp_bubble_p"),
    "pp_gpt": sweep("pp_gpt"),
    "pp_gpt_p4": sweep("pp_gpt_p4"),
    "pp_interleaved_m": sweep("pp_interleaved_m"),
    "pp_interleaved_p": sweep("pp_interleaved_p"),
    "pp_mlp": sweep("pp_mlp"),
    "pp_mlp_p4": sweep("pp_mlp_p4"),
    "pp_timeline": sweep("pp_timeline"),
    "tp_comm": sweep("tp_comm"),
    "tp_step": sweep("tp_step"),
    "ps_curve": script("ps_curve"),
    "ps_lite": script("ps_lite"),
    "hybrid_cnn": script("hybrid_cnn"),
    "hybrid_cnn_crossover": script("hybrid_cnn"),
    "where_ps_wins": script("where_ps_wins"),
    "spare_servers": script("spare_servers"),
    "collective_engine": script("collective_engine"),
    "zero": script("zero"),
    "recompute": script("recompute"),
    "sparse_ps": script("sparse_ps"),
    "pp_hop": script("pp_hop"),
    "gloo_tcp": both(folder_script("table.py", ["data"], "table.md"),
                     folder_script("table.py", ["cluster", "--cluster"], "table_cluster.md")),
    "cluster_emulator": folder_script("table.py", ["data"], "table.md"),
    "gpu": folder_script("table.py", ["data"], "table.md"),
}

PROVENANCE = re.compile(re.escape(runner.PROVENANCE_BEGIN) + r"\n(.*?)" +
                        re.escape(runner.PROVENANCE_END), re.S)
IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)|\(([\w./-]+\.png)\)")


def provenance_problems(block):
    """What keeps a provenance block from pinning the code: uncommitted
    changes, or more than one commit named."""
    problems = []
    if "uncommitted" in block or "dirty" in block:
        problems.append("the code differed from its commit (uncommitted changes)")
    if "Exploratory run" in block:
        problems.append("it was an exploratory run")
    if "not recorded" in block:
        problems.append("part of it was not recorded")
    if "Command:" not in block and "Commands:" not in block:
        problems.append("the block does not name the command (the prose may)")
    if "psar built at" not in block and "no psar binary" not in block:
        problems.append("the commit psar was built from was not recorded")
    # Commits, not the numbers of the commands in backticks (--rows 10000000).
    commits = set(re.findall(r"\b[0-9a-f]{7,40}\b", re.sub(r"`[^`]*`", "", block)))
    # A binary built at an earlier commit whose sources the later one did not
    # change is pinned too (runner.same_code).
    commits -= set(re.findall(r"psar built at ([0-9a-f]{7,40}) \([^)]*no change to its sources", block))
    heads = {c[:7] for c in commits}
    if len(heads) > 1:
        problems.append(f"it names {len(heads)} commits ({', '.join(sorted(heads))})")
    return problems


def provenance_note(problems):
    return ("**Provenance not pinned:** " + "; ".join(problems) + ". Re-running the folder's "
            "command with `--reference` at a clean commit, with psar built from it, records all "
            "of it.\n")


def readme_expected(folder, committed, regenerated, write=False):
    """The README as the harness would write it: the generated blocks that
    regenerated["README.md#<block>"] names filled in, and the provenance
    note where the provenance block does not pin the code."""
    bodies = {k.split("#", 1)[1]: v for k, v in regenerated.items() if k.startswith("README.md#")}
    m = PROVENANCE.search(committed)
    if m:
        problems = provenance_problems(m.group(1))
        if problems:
            bodies["provenance"] = provenance_note(problems)
            if write and "provenance" not in blocks(committed):
                end = m.end()
                committed = (committed[:end] + "\n\n" + BEGIN.format("provenance") + "\n" + END +
                             committed[end:])
        elif "provenance" in blocks(committed):
            bodies["provenance"] = "(stale: the provenance above pins the code; delete this block)"
    return fill_blocks(committed, bodies, os.path.join(folder, "README.md")) if bodies else committed


def readmes(folder):
    """README.md of the folder and of its subfolders that say how they were
    produced (a provenance block), relative to `folder`; run directories
    (no README) are not entered past the second level."""
    found = ["README.md"]
    for entry in sorted(os.listdir(folder)):
        path = os.path.join(folder, entry, "README.md")
        if os.path.exists(path):
            with open(path) as f:
                if runner.PROVENANCE_BEGIN in f.read():
                    found.append(os.path.join(entry, "README.md"))
    return found


def check_folder(folder, results, write=False):
    """Differences (one line each) between `folder` and what its data gives;
    with `write`, the regenerated texts replace the committed ones instead
    (what each report script writes, from the same data)."""
    name = os.path.basename(os.path.normpath(folder))
    regen = FOLDERS.get(name)
    if regen is None:
        return [f"{folder}: no generator registered in psar_exp/check.py FOLDERS"]
    problems = []
    readme = os.path.join(folder, "README.md")
    if not os.path.exists(readme):
        return [f"{readme}: missing (every results folder says how it was produced)"]
    try:
        texts = regen(folder, results)
    except (OSError, KeyError, ValueError, GeneratedError, runner.RunError) as e:
        return [f"{folder}: cannot regenerate ({regen.how}): {type(e).__name__}: {e}"]
    whole = {k: v for k, v in texts.items() if "#" not in k}
    for rel in sorted(set(readmes(folder)) | {k.split("#")[0] for k in texts if "#" in k}):
        path = os.path.join(folder, rel)
        with open(path) as f:
            committed = f.read()
        if not PROVENANCE.search(committed):
            problems.append(f"{path}: no provenance block (psar_exp.runner.record_provenance)")
        if rel in whole:
            continue
        blocks_of = {k.replace(rel, "README.md", 1): v for k, v in texts.items()
                     if k.startswith(rel + "#")}
        try:
            whole[rel] = readme_expected(os.path.dirname(path), committed, blocks_of, write)
        except GeneratedError as e:
            problems.append(str(e))
    for rel, text in sorted(whole.items()):
        path = os.path.join(folder, rel)
        if write:
            write_text(path, text)
            continue
        if not os.path.exists(path):
            problems.append(f"{path}: missing; the data gives {len(text.splitlines())} lines")
            continue
        with open(path, newline="") as f:
            found = difference(path, f.read(), text)
        if found:
            problems.append(found)
    for md in sorted(f for f in os.listdir(folder) if f.endswith(".md")):
        with open(os.path.join(folder, md)) as f:
            for m in IMAGE.finditer(f.read()):
                target = m.group(1) or m.group(2)
                if "://" in target or target.startswith("/"):
                    continue
                if not os.path.exists(os.path.join(folder, target)):
                    problems.append(f"{os.path.join(folder, md)}: links to {target}, which is missing")
    return problems


def unchecked_folders(names):
    """(name, reason) of the folders among `names` the check does not regenerate."""
    return [(n, FOLDERS[n].unchecked) for n in names
            if n in FOLDERS and hasattr(FOLDERS[n], "unchecked")]


def check(results=None, names=None, write=False):
    """Problems over `names` (default: every folder under `results`)."""
    results = results or os.path.join(ROOT, "results")
    names = names or sorted(d for d in os.listdir(results)
                            if os.path.isdir(os.path.join(results, d)) and d != "runs")
    problems = []
    for name in names:
        problems += check_folder(os.path.join(results, name), results, write)
    return names, problems
