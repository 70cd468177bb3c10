"""Running psar: the binary, mpirun with the flags this machine needs, the
expansion of an experiment's sweep into points, and one runner of commands.

A sweep maps keys to lists of values; its points are the cartesian product,
in the order the keys are written. A key is a dotted config key (passed as
`--set key=value`) or `ranks` (the world size, mpirun -np).
"""

import itertools
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field

import yaml

from psar_exp import ROOT
from psar_exp.io import csv_text, read_csv
from psar_exp.report import SchemaError


class RunError(RuntimeError):
    """A command of the harness failed or could not start."""


def psar_binary(path=None):
    """The psar binary: `path`, else $PSAR_BIN, else build/trainer/psar."""
    path = path or os.environ.get("PSAR_BIN", os.path.join(ROOT, "build", "trainer", "psar"))
    if not os.access(path, os.X_OK):
        raise RunError(f"psar binary not found at {path} (run scripts/build.sh, or set PSAR_BIN)")
    return path


def mpirun_prefix(ranks, mca=()):
    """mpirun -np ranks, as root and beyond the core count; `mca` adds
    (name, value) pairs as --mca arguments."""
    mpirun = shutil.which("mpirun")
    if not mpirun:
        raise RunError("mpirun not found (install openmpi-bin, or run scripts/deps.sh)")
    # Root needs --allow-run-as-root; beyond the core count, --oversubscribe
    # (Open MPI then yields when idle; never force busy-polling).
    cmd = [mpirun, "--allow-run-as-root", "--oversubscribe", "-np", str(ranks)]
    for name, value in mca:
        cmd += ["--mca", name, str(value)]
    return cmd


def expand(sweep, where="experiment.sweep"):
    """Cartesian product of {key: [values]} as a list of [(key, value), ...].
    A scalar value is a list of one; no sweep is one point with no keys."""
    if sweep is None:
        return [[]]
    if not isinstance(sweep, dict):
        raise SchemaError(f"{where}: must map keys to lists of values, got {type(sweep).__name__}")
    lists = []
    for key, values in sweep.items():
        values = values if isinstance(values, list) else [values]
        if not values:
            raise SchemaError(f"{where}.{key}: an empty list leaves nothing to run")
        if key == "ranks" and not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1
                                      for v in values):
            raise SchemaError(f"{where}.ranks: world sizes must be integers >= 1, got {values}")
        lists.append([(key, v) for v in values])
    return [list(combo) for combo in itertools.product(*lists)]


def yaml_scalar(v):
    """A value as --set takes it."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, dict)):
        return yaml.safe_dump(v, default_flow_style=True).strip()
    return str(v)


@dataclass
class Point:
    """One run of a sweep."""
    name: str          # its directory under results/<experiment>/
    ranks: int
    sets: list         # "key=value" overrides
    swept: dict = field(default_factory=dict)  # key -> value as text, for summary.csv


def points(exp, base_ranks=None, extra_sets=()):
    """The points of a `psar train` experiment (its `experiment:` section)."""
    meta = exp.get("experiment") or {}
    base = base_ranks or int(meta.get("ranks", 4))
    backend = (exp.get("sync") or {}).get("backend", "mpi")
    out = []
    for combo in expand(meta.get("sweep")):
        ranks, sets, parts = base, list(extra_sets), []
        if not any(k == "sync.backend" for k, _ in combo):
            parts.append(backend)
        for k, v in combo:
            if k == "ranks":
                ranks = int(v)
            else:
                sets.append(f"{k}={yaml_scalar(v)}")
                parts.append(f"{k.split('.')[-1]}-{v}")
        parts.append(f"n{ranks}")
        name = "_".join(str(p).replace("/", "-").replace(" ", "") for p in parts)
        out.append(Point(name, ranks, sets, {k: str(v) for k, v in combo}))
    return out


def summary_rows(exp, out_root, points_=None):
    """The rows of a sweep's summary.csv: each point's summary rows (from
    out_root/<point>/summary.csv) with its run name and swept values in front."""
    rows = []
    for point in points_ if points_ is not None else points(exp):
        rows += [{"run": point.name, **point.swept, **row}
                 for row in read_csv(os.path.join(out_root, point.name, "summary.csv"))]
    return rows


def summary_text(exp, out_root):
    """summary.csv of a sweep as its runs give it."""
    return csv_text(summary_rows(exp, out_root))


def cluster_prefix(ranks, per_host=None, name=None, slots=None):
    """scripts/cluster.sh mpirun on the virtual cluster (docs/network.md): the
    hostfile, the rsh agent into the hosts' namespaces and the MCA settings
    are the script's; `per_host` ranks on each host (default: as the script),
    or `slots` [K1, K2, ...] ranks on host 1, 2, ...."""
    cmd = [os.path.join(ROOT, "scripts", "cluster.sh")]
    if name:
        cmd += ["--name", name]
    cmd += ["mpirun", "-np", str(ranks)]
    if per_host:
        cmd += ["--per-host", str(per_host)]
    if slots:
        cmd += ["--slots", ",".join(str(k) for k in slots)]
    return cmd + ["--"]


def train_command(binary, exp_path, out, point, extra=(), cluster=None):
    """mpirun ... psar train EXP --out OUT [extra] --set k=v ...; on the
    virtual cluster when `cluster` is given ({"per_host": K, "name": N})."""
    prefix = (cluster_prefix(point.ranks, cluster.get("per_host"), cluster.get("name"))
              if cluster is not None else mpirun_prefix(point.ranks))
    cmd = prefix + [binary, "train", exp_path, "--out", out, *extra]
    for s in point.sets:
        cmd += ["--set", s]
    return cmd


def bench_allreduce_args(psar, algos, sweep, segment_bytes, csv=None, volume_csv=None, sets=()):
    """psar bench allreduce over sweep {min, max, factor, iters, warmup[,
    rounds]}, every algorithm checked (-c 1); mpirun's prefix not included."""
    cmd = [psar, "bench", "allreduce", "--algos", ",".join(algos), "-b", str(sweep["min"]),
           "-e", str(sweep["max"]), "-f", str(sweep["factor"]), "-n", str(sweep["iters"]),
           "-w", str(sweep["warmup"]), "-c", "1", "--set", f"sync.segment_bytes={segment_bytes}"]
    if "rounds" in sweep:
        cmd += ["-r", str(sweep["rounds"])]
    if csv:
        cmd += ["--csv", csv]
    if volume_csv:
        cmd += ["--volume-csv", volume_csv]
    for s in sets:
        cmd += ["--set", s]
    return cmd


def run(cmd, high_priority=False, env=None):
    """Runs a command, echoing it; returns its stdout. RunError with its
    output when it fails. high_priority: in a session of its own at autogroup
    nice -19 (root), so other sessions' compilations on a shared host perturb
    the timing less (Linux autogroups make plain `nice` useless across
    sessions)."""
    print("+", " ".join(cmd), flush=True)
    done = subprocess.run(cmd, capture_output=True, text=True, env=env,
                          preexec_fn=_favored if high_priority else None)
    if done.returncode != 0:
        raise RunError(f"command failed ({done.returncode}): {' '.join(cmd)}\n"
                       f"{done.stdout[-4000:]}\n{done.stderr[-4000:]}")
    return done.stdout


def _favored():
    os.setsid()
    with open("/proc/self/autogroup", "w") as f:
        f.write("-19")


def cpu_times(stat_path="/proc/stat"):
    """(steal, total) jiffies of all CPUs from the first line of /proc/stat,
    or None where the kernel does not report steal time (fewer than 8
    fields, or no /proc)."""
    try:
        with open(stat_path) as f:
            fields = f.readline().split()
    except OSError:
        return None
    if len(fields) < 9 or fields[0] != "cpu":
        return None
    values = [int(v) for v in fields[1:]]
    # user nice system idle iowait irq softirq steal [guest guest_nice]: guest
    # time is already counted in user and nice.
    return values[7], sum(values[:8])


def machine_state():
    """A snapshot of the host before timed runs, for machine_note(): the
    1-minute load average and the CPU times (steal)."""
    return {"load": os.getloadavg()[0], "cpu": cpu_times()}


def steal_share(before, after):
    """Share of CPU time the hypervisor stole between two cpu_times(), or None."""
    if not before or not after or after[1] <= before[1]:
        return None
    return (after[0] - before[0]) / (after[1] - before[1])


def commit():
    """The commit the results come from: short hash, with '+ uncommitted
    changes' when the code differs from it (changes under results/, which the
    runs themselves write, do not count); 'unknown' outside git."""
    def git(*args):
        return subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True)
    head = git("rev-parse", "--short=12", "HEAD")
    if head.returncode != 0:
        return "unknown"
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)results").stdout.strip()
    return head.stdout.strip() + (" + uncommitted changes" if dirty else "")


def machine_note(before=None, high_priority=False):
    """What produced a report, for its foot and its folder's README: the
    commit, the machine, and — given the machine_state() (or just the load
    average) taken before the runs — the load before and after and the steal
    time in between, where the kernel reports it."""
    mpi = subprocess.run(["mpirun", "--version"], capture_output=True, text=True).stdout.splitlines()
    machine = (f"Commit {commit()}. Machine: {os.cpu_count()} cores, "
               f"{mpi[0] if mpi else 'mpirun'}")
    if before is None:
        return machine + "."
    if not isinstance(before, dict):
        before = {"load": before, "cpu": None}
    steal = steal_share(before.get("cpu"), cpu_times())
    stolen = ("" if steal is None else
              f"; steal time {100 * steal:.1f}% of CPU time during the runs (/proc/stat)")
    prio = (" Benchmarks ran in their own scheduler group at nice -19 (--high-priority)."
            if high_priority else "")
    return (f"{machine}; 1-minute load average {before['load']:.2f} before, "
            f"{os.getloadavg()[0]:.2f} after the runs{stolen} (other work on the host adds "
            f"noise to every time).{prio}")


PROVENANCE_BEGIN = "<!-- provenance: written by the harness (psar_exp.runner.record_provenance) -->"
PROVENANCE_END = "<!-- end provenance -->"


def record_provenance(folder, before=None, high_priority=False):
    """Puts machine_note(before) in `folder`/README.md under "Produced by",
    replacing the one an earlier run put there (the rest of the README is
    kept; a missing README is started)."""
    path = os.path.join(folder, "README.md")
    text = ""
    if os.path.exists(path):
        with open(path) as f:
            text = f.read()
    section = (f"{PROVENANCE_BEGIN}\n## Produced by\n\n{machine_note(before, high_priority)}\n"
               f"{PROVENANCE_END}\n")
    if PROVENANCE_BEGIN in text and PROVENANCE_END in text:
        head, rest = text.split(PROVENANCE_BEGIN, 1)
        text = head + section + rest.split(PROVENANCE_END, 1)[1].lstrip("\n")
    else:
        text = (text.rstrip("\n") + "\n\n" if text else
                f"# {os.path.basename(os.path.normpath(folder))}\n\n") + section
    with open(path, "w") as f:
        f.write(text)
    return path


def main_guard(prog, fn):
    """Runs fn(); harness errors end the script with one line naming `prog`."""
    try:
        fn()
    except (RunError, SchemaError, OSError) as e:
        sys.exit(f"{prog}: {e}")
