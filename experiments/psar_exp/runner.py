"""Running psar: the binary, mpirun with the flags this machine needs, the
expansion of an experiment's sweep into points, and one runner of commands.

A sweep maps keys to lists of values; its points are the cartesian product,
in the order the keys are written. A key is a dotted config key (passed as
`--set key=value`) or `ranks` (the world size, mpirun -np).
"""

import argparse
import itertools
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field

import yaml

from psar_exp import ROOT, generated, report
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
    """mpirun ... psar train EXP --out OUT --overwrite [extra] --set k=v ...;
    on the virtual cluster when `cluster` is given ({"per_host": K, "name":
    N}). A point run again replaces its run (psar refuses an existing run
    without --overwrite)."""
    prefix = (cluster_prefix(point.ranks, cluster.get("per_host"), cluster.get("name"))
              if cluster is not None else mpirun_prefix(point.ranks))
    cmd = prefix + [binary, "train", exp_path, "--out", out, "--overwrite", *extra]
    for s in point.sets:
        cmd += ["--set", s]
    return cmd


@dataclass
class Attempt:
    """One launch of a job run with restarts: its world size, exit code,
    wall seconds, and the step it resumed from (None: from the start)."""
    ranks: int
    returncode: int
    wall_s: float
    resumed_from: object = None


def latest_checkpoint_step(run_dir):
    """The step of the latest complete checkpoint (its MANIFEST written last)
    under run_dir/checkpoints, or None."""
    steps = []
    root = os.path.join(run_dir, "checkpoints")
    for name in os.listdir(root) if os.path.isdir(root) else ():
        m = re.fullmatch(r"step_0*(\d+)", name)
        if m and os.path.exists(os.path.join(root, name, "MANIFEST")):
            steps.append(int(m.group(1)))
    return max(steps) if steps else None


def run_with_restarts(train_cmd, ranks, out, max_restarts, min_ranks=1, relaunch_sets=(),
                      launch=None, timeout_s=3600):
    """A relaunch loop in the spirit of torchrun's --max-restarts: runs
    train_cmd(ranks, resume) — the full command line for `ranks` processes,
    resuming run directory `out` when resume is true — and, each time the job
    fails, relaunches it from its latest complete checkpoint onto the
    surviving size (one rank fewer per failure: the one that died), with
    `relaunch_sets` (--set key=value, e.g. hetero.kill_rank=-1) added. A job
    that fails before its first checkpoint starts again from step 0. Stops
    at the first success, after max_restarts relaunches, or below min_ranks
    ranks (RunError naming the attempts). Returns the attempts in order."""
    launch = launch or (lambda cmd: globals()["launch"](cmd, timeout=timeout_s, echo=False))
    attempts = []
    while True:
        step = latest_checkpoint_step(out) if attempts else None
        cmd = train_cmd(ranks, step is not None)
        if attempts:
            for s in relaunch_sets:
                cmd += ["--set", s]
        print("+", " ".join(cmd), flush=True)
        start = time.monotonic()
        done = launch(cmd)
        attempts.append(Attempt(ranks, done.returncode, time.monotonic() - start, step))
        if done.returncode == 0:
            return attempts
        if len(attempts) > max_restarts or ranks - 1 < min_ranks:
            raise RunError(f"the job failed {len(attempts)} time(s), the last at {ranks} ranks "
                           f"(max_restarts {max_restarts}, min_ranks {min_ranks}):\n"
                           f"{(done.stdout or '')[-2000:]}\n{(done.stderr or '')[-2000:]}")
        ranks -= 1


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


MEASURE_LOCK = "/tmp/psar-measure.lock"


def locked_train_command(psar, ranks, exp_path, run_dir, sets=()):
    """The command of locked_train."""
    cmd = ["flock", MEASURE_LOCK] + mpirun_prefix(ranks) + [
        psar, "train", exp_path, "--out", run_dir, "--overwrite"]
    for s in sets:
        cmd += ["--set", s]
    return cmd


def locked_train(psar, ranks, exp_path, run_dir, sets=()):
    """psar train exp_path on `ranks` MPI ranks into run_dir (replacing an
    earlier run there), with --set for each of `sets`, holding the host's
    measurement lock so that no other benchmark runs beside it; returns its
    stdout."""
    return run(locked_train_command(psar, ranks, exp_path, run_dir, sets))


def launch(cmd, env=None, timeout=None, high_priority=False, stream=False, echo=True):
    """Every process the harness starts starts here: echoes `cmd` (unless
    echo is off: the caller printed it), runs it and returns its
    CompletedProcess, whatever its exit code. Output is captured, or with
    `stream` passed through to this process's. high_priority: in a session
    of its own at autogroup nice -19 (root), so other sessions' compilations
    on a shared host perturb the timing less (Linux autogroups make plain
    `nice` useless across sessions)."""
    if echo:
        print("+", " ".join(cmd), flush=True)
    return subprocess.run(cmd, capture_output=not stream, text=True, env=env, timeout=timeout,
                          preexec_fn=_favored if high_priority else None)


def run(cmd, high_priority=False, env=None, stream=False, timeout=None, echo=True):
    """launch() that must succeed: returns its stdout (None with `stream`);
    RunError with its output when it fails."""
    done = launch(cmd, env, timeout, high_priority, stream, echo)
    if done.returncode != 0:
        output = "" if stream else f"\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
        raise RunError(f"command failed ({done.returncode}): {' '.join(cmd)}{output}")
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


# A launch that ran past its timeout (launch(..., timeout=...)) raises this.
TimeoutExpired = subprocess.TimeoutExpired


def machine_lines():
    """`uptime` and `vmstat 1 3` (its `st` column: steal) now, as lines for a
    results folder's machine notes."""
    up = run(["uptime"], echo=False).strip()
    vm = run(["vmstat", "1", "3"], echo=False).rstrip()
    return [f"uptime: {up}", "vmstat 1 3:", vm]


def machine_state():
    """A snapshot of the host before timed runs, for machine_note(): the
    1-minute load average and the CPU times (steal)."""
    return {"load": os.getloadavg()[0], "cpu": cpu_times()}


def steal_share(before, after):
    """Share of CPU time the hypervisor stole between two cpu_times(), or None."""
    if not before or not after or after[1] <= before[1]:
        return None
    return (after[0] - before[0]) / (after[1] - before[1])


def _git(*args):
    return subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True)


# What the runs themselves write: never part of the code a run is pinned to.
OUTPUT_DIRS = ("results", "runs")
BUILD_STAMP = "psar_build.txt"  # written by scripts/build.sh beside CMakeCache.txt


def tree_state():
    """(commit, changed): HEAD's hash (None outside git) and the tracked
    paths whose content differs from it, results/ and runs/ aside."""
    head = _git("rev-parse", "HEAD")
    if head.returncode != 0:
        return None, []
    status = _git("status", "--porcelain", "--untracked-files=no", "--", ".",
                  *(f":(exclude){d}" for d in OUTPUT_DIRS))
    return head.stdout.strip(), [line[3:] for line in status.stdout.splitlines() if line.strip()]


def binary_build(psar):
    """(commit, changed) of the tree the binary's build directory was last
    built from (scripts/build.sh's stamp), or None without a stamp."""
    folder = os.path.dirname(os.path.realpath(psar))
    while folder != os.path.dirname(folder):
        stamp = os.path.join(folder, BUILD_STAMP)
        if os.path.exists(stamp):
            with open(stamp) as f:
                lines = [line.rstrip("\n") for line in f if line.strip()]
            return (lines[0] if lines else None), lines[1:]
        if os.path.exists(os.path.join(folder, "CMakeCache.txt")):
            return None
        folder = os.path.dirname(folder)
    return None


def base_commit(psar):
    """The commit a binary to compare against (--base) was built at: its
    build stamp must name a commit and no uncommitted change."""
    base = binary_build(psar) if psar else None
    if not base or not base[0] or base[1]:
        raise RunError(f"--base {psar}: no clean build stamp beside it ({BUILD_STAMP}; build it "
                       "with scripts/build.sh)")
    return base[0]


# What the psar binary is not built from: a binary built at one commit is the
# binary of another whose tree differs only there.
NOT_BINARY = OUTPUT_DIRS + ("experiments", "docs")


def same_code(a, b):
    """True when commits a and b differ only where the binary is not built
    from (results/, runs/, the harness, the docs)."""
    if not a or not b:
        return False
    return _git("diff", "--quiet", a, b, "--", ".",
                *(f":(exclude){d}" for d in NOT_BINARY)).returncode == 0


def add_output_flags(ap):
    """--reference and --exploratory, the same in every launcher."""
    ap.add_argument("--reference", action="store_true",
                    help="write the reference folder under results/ (default: under runs/, "
                         "which git ignores); needs a clean tree and a binary built from it")
    ap.add_argument("--exploratory", action="store_true",
                    help="run from a tree with uncommitted changes or a binary built elsewhere; "
                         "the provenance says so, and nothing is written under results/")


def output_root(args):
    """results/ with --reference, else runs/ (ignored by git)."""
    return os.path.join(ROOT, "results" if getattr(args, "reference", False) else "runs")


def _inside(path, folder):
    path, folder = os.path.realpath(path), os.path.realpath(folder)
    return path == folder or path.startswith(folder + os.sep)


def begin(out, exploratory=False, psar=None, argv=None, reference=False):
    """Checks that a run may start and returns its provenance (for
    record_provenance and machine_note): the command, the harness's commit,
    the binary's and the machine state before the runs. Refuses (RunError)
    a tree with uncommitted changes, or a psar binary not built from the
    tree's commit, unless `exploratory`; an exploratory run is refused an
    output under results/, and a reference run one outside it."""
    commit, changed = tree_state()
    binary = binary_build(psar) if psar else None
    problems = []
    if commit is None:
        problems.append("the harness is not in a git checkout")
    if changed:
        problems.append("uncommitted changes in " + ", ".join(changed[:4]) +
                        (f" and {len(changed) - 4} more" if len(changed) > 4 else ""))
    if psar:
        if binary is None or binary[0] is None:
            problems.append(f"{psar} has no build stamp ({BUILD_STAMP}; build with scripts/build.sh)")
        elif binary[1]:
            problems.append(f"{psar} was built from a tree with uncommitted changes")
        elif binary[0] != commit and not same_code(binary[0], commit):
            problems.append(f"{psar} was built at {binary[0][:12]}, the tree is at "
                            f"{(commit or 'unknown')[:12]} (rebuild with scripts/build.sh)")
    results = os.path.join(ROOT, "results")
    if exploratory and _inside(out, results):
        raise RunError(f"--exploratory: {out} is under results/, where only reference runs go "
                       "(leave out --reference, or write elsewhere)")
    if reference and not _inside(out, results):
        raise RunError(f"--reference: {out} is not under results/")
    if problems and not exploratory:
        raise RunError("refusing to run: " + "; ".join(problems) + ". Commit and rebuild "
                       "(scripts/build.sh), or pass --exploratory (marked so; never written "
                       "under results/)")
    argv = sys.argv if argv is None else argv
    # Paths as the repository names them, whatever the directory it ran from.
    command = " ".join(os.path.relpath(os.path.abspath(a), ROOT) if i == 0 or os.path.exists(a)
                       else a for i, a in enumerate(argv))
    return {**machine_state(), "command": command, "commit": commit,
            "binary": None if binary is None else binary[0], "psar": psar,
            "problems": problems if exploratory else []}


def provenance_text(state, high_priority=False):
    """The command, the commits of the harness and the binary, and the
    machine state of a run begun with begin()."""
    short = lambda c: (c or "unknown")[:12]  # noqa: E731
    parts = [f"Command: `{state['command']}`.",
             f"Harness commit {short(state['commit'])}" +
             (f"; psar built at {short(state['binary'])} (scripts/build.sh's stamp"
              + ("" if state["binary"] == state["commit"] else "; no change to its sources since") + ")."
              if state.get("psar") else "; no psar binary.")]
    if state["problems"]:
        parts.append("**Exploratory run** (--exploratory): " + "; ".join(state["problems"]) + ".")
    return " ".join(parts) + " " + machine_note(state, high_priority)


def machine_note(before=None, high_priority=False):
    """The machine, and — given the machine_state() (or just the load
    average) taken before the runs — the load before and after and the steal
    time in between, where the kernel reports it."""
    mpi = subprocess.run(["mpirun", "--version"], capture_output=True, text=True).stdout.splitlines()
    machine = f"Machine: {os.cpu_count()} cores, {mpi[0] if mpi else 'mpirun'}"
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


def record_provenance(folder, state, high_priority=False):
    """Puts provenance_text(state) — `state` from begin() — in
    `folder`/README.md under "Produced by", replacing the one an earlier run
    put there (the rest of the README is kept; a missing README is started)."""
    path = os.path.join(folder, "README.md")
    text = ""
    if os.path.exists(path):
        with open(path) as f:
            text = f.read()
    section = (f"{PROVENANCE_BEGIN}\n## Produced by\n\n{provenance_text(state, high_priority)}\n"
               f"{PROVENANCE_END}\n")
    if PROVENANCE_BEGIN in text and PROVENANCE_END in text:
        head, rest = text.split(PROVENANCE_BEGIN, 1)
        rest = rest.split(PROVENANCE_END, 1)[1]
        # The note psar_exp check added about the provenance it replaces.
        rest = re.sub(r"^\s*" + re.escape(generated.BEGIN.format("provenance")) + r".*?" +
                      re.escape(generated.END) + r"\n?", "", rest, flags=re.S)
        text = head + section + rest.lstrip("\n")
    else:
        text = (text.rstrip("\n") + "\n\n" if text else
                f"# {os.path.basename(os.path.normpath(folder))}\n\n") + section
    with open(path, "w") as f:
        f.write(text)
    return path


class Launcher:
    """The front and the tail every experiment script shares: one parser with
    the flags every launcher takes (`part` when the script has several;
    --psar, --out, --reference, --exploratory), the output folder
    (runs/<folder>, or results/<folder> with --reference), and around a part
    that runs psar begin() before it and record_provenance() after it. A
    report part runs no psar of its own making and records nothing: it reads
    the data already in the folder (or, like a dry run, only prints). The
    script adds its own flags to `parser` and ends with
    main_guard(prog, launcher.main).

    runs, reports: {part: fn(args)}; fn finds the folder in args.out, and a
    run part the resolved binary in args.psar and begin()'s provenance in
    args.state. A run part returns the folders whose README gets the
    provenance when it ends (None: args.out alone; [] where it records its
    own as it goes, with args.record(folder), or where each measurement
    keeps its own). folder: a name, or fn(args) giving one (an absolute
    path is used as it is: a script's own --results root). flags:
    {"--flag": (part, help)} for a script whose parts are chosen by flags
    (--reuse, --dry-run) instead of a positional `part`; without one of
    them it runs its first run part."""

    def __init__(self, doc, folder, runs, reports=None, out_help=None, flags=None):
        self.folder, self.runs, self.reports = folder, runs, reports or {}
        self.flags = flags or {}
        self.parser = argparse.ArgumentParser(description=doc.strip(),
                                              formatter_class=argparse.RawDescriptionHelpFormatter)
        parts = [*runs, *self.reports]
        for flag, (part, help_) in self.flags.items():
            if part not in parts:
                raise ValueError(f"{flag}: no part {part}")
            self.parser.add_argument(flag, action="store_true", help=help_)
        if len(parts) > 1 and not self.flags:
            self.parser.add_argument("part", choices=parts)
        self.parser.add_argument("--psar", default=None,
                                 help="default: $PSAR_BIN, else build/trainer/psar")
        self.parser.add_argument("--out", help=out_help or f"default: runs/{folder}, or "
                                 f"results/{folder} with --reference")
        add_output_flags(self.parser)

    def _part(self, args):
        chosen = [(flag, part) for flag, (part, _) in self.flags.items()
                  if getattr(args, flag.lstrip("-").replace("-", "_"))]
        if len(chosen) > 1:
            self.parser.error(" and ".join(f for f, _ in chosen) + " choose different parts")
        if chosen:
            return chosen[0][1]
        return getattr(args, "part", None) or next(iter(self.runs))

    def main(self, argv=None):
        args = self.parser.parse_args(argv)
        args.part = self._part(args)
        folder = self.folder(args) if callable(self.folder) else self.folder
        args.out = args.out or os.path.join(output_root(args), folder)
        if args.part in self.reports:
            self.reports[args.part](args)
            return args
        os.makedirs(args.out, exist_ok=True)
        args.psar = psar_binary(args.psar)
        args.state = begin(args.out, args.exploratory, args.psar, reference=args.reference)
        args.record = lambda f: record_provenance(f, args.state, getattr(args, "high_priority", False))
        folders = self.runs[args.part](args)
        for f in [args.out] if folders is None else folders:
            args.record(f)
        return args


def experiment(args, kind=None):
    """The experiment YAML named by args.experiment, loaded (and checked as
    `kind`, psar_exp.report.load) once per run of a script: args.exp."""
    if getattr(args, "exp", None) is None:
        args.exp = report.load(args.experiment, kind)
    return args.exp


def under_results(args, name):
    """A Launcher's folder `name`, or — as an absolute path, which the
    Launcher takes as it is — `name` under the script's --results root."""
    return os.path.abspath(os.path.join(args.results, name)) if args.results else name


def main_guard(prog, fn):
    """Runs fn(); harness errors end the script with one line naming `prog`,
    and a non-zero int fn() returns is the exit status."""
    try:
        code = fn()
    except (RunError, SchemaError, OSError) as e:
        sys.exit(f"{prog}: {e}")
    if isinstance(code, int) and not isinstance(code, bool) and code:
        sys.exit(code)
