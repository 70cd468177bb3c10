"""Experiment and report YAMLs, validated on load: a wrong or missing field
is a SchemaError that names the file and the field (`bench.sweeps[1].iters:
expected an integer, got 'ten'`), before anything runs.

Two dialects share the `experiment:` section (name, description, and for
`psar train` experiments ranks and sweep):
  - `psar train` configs (experiments/quickstart.yaml, ...): only the
    harness's own keys are checked here; psar checks every other section.
  - report definitions (comm_volume.yaml, collective_cost.yaml,
    net_scaling.yaml, cluster_net_scaling.yaml, ps_vs_allreduce.yaml): every
    key, by SCHEMAS[kind].
"""

import yaml

from psar_exp.units import parse_bandwidth, parse_bytes, parse_seconds


class SchemaError(ValueError):
    """A field of an experiment or report YAML is missing or wrong."""


# ---- field types -----------------------------------------------------------
# A schema is a type (below), a dict {key: schema} for a mapping whose every
# key is required unless wrapped in Optional, or [schema] for a list.

class Optional:
    def __init__(self, schema, default=None):
        self.schema, self.default = schema, default


class Any:
    """Anything (checked elsewhere: psar validates train configs itself)."""


def _scalar(name, ok):
    return type(name, (), {"name": name, "ok": staticmethod(ok)})


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _reads(parse):
    def ok(v):
        try:
            parse(v)
            return not isinstance(v, bool)
        except (ValueError, TypeError):
            return False
    return ok


Int = _scalar("an integer", _is_int)
Number = _scalar("a number", lambda v: (_is_int(v) or isinstance(v, float)))
Str = _scalar("a string", lambda v: isinstance(v, str))
Size = _scalar("a size (4096, 4K, 16M)", _reads(parse_bytes))
Duration = _scalar("a duration (50us)", _reads(parse_seconds))
Bandwidth = _scalar("a bandwidth (1Gbit)", _reads(parse_bandwidth))


def validate(value, schema, where):
    """Returns value with optional defaults filled in; raises SchemaError."""
    if schema is Any:
        return value
    if isinstance(schema, Optional):
        return schema.default if value is None else validate(value, schema.schema, where)
    if isinstance(schema, list):
        if not isinstance(value, list) or not value:
            raise SchemaError(f"{where}: expected a non-empty list, got {value!r}")
        return [validate(v, schema[0], f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(schema, dict):
        if not isinstance(value, dict):
            raise SchemaError(f"{where}: expected a mapping, got {value!r}")
        if "*" in schema:  # free keys, one schema for every value
            return {k: validate(v, schema["*"], _join(where, k)) for k, v in value.items()}
        unknown = sorted(set(value) - set(schema))
        if unknown and "..." not in schema:  # "...": other keys allowed, unchecked
            raise SchemaError(f"{_join(where, unknown[0])}: unknown key (known: "
                              f"{', '.join(schema)})")
        out = {k: value[k] for k in unknown}
        for key, sub in schema.items():
            if key == "...":
                continue
            if key not in value and not isinstance(sub, Optional):
                raise SchemaError(f"{_join(where, key)}: missing")
            out[key] = validate(value.get(key), sub, _join(where, key))
        return out
    if not schema.ok(value):
        raise SchemaError(f"{where}: expected {schema.name}, got {value!r}")
    return value


def _join(where, key):
    return f"{where}.{key}" if where else str(key)


# ---- the schemas ------------------------------------------------------------

EXPERIMENT = {"name": Str, "description": Optional(Str)}
TRAIN_EXPERIMENT = {"name": Optional(Str), "description": Optional(Str),
                    "ranks": Optional(Int), "sweep": Optional({"*": Any})}
SWEEP = {"min": Size, "max": Size, "factor": Int, "iters": Int, "warmup": Int, "rounds": Int}

SCHEMAS = {
    "volume": {
        "experiment": EXPERIMENT, "report": Str,
        "bench": {"ranks": [Int], "algos": [Str], "size": Size,
                  "segment_bytes": Optional(Size, "512K"),
                  "ps": Optional({"chunk_bytes": Optional(Size, "1M")})},
    },
    "cost": {
        "experiment": EXPERIMENT, "report": Str,
        "bench": {"ranks": [Int], "algos": [Str], "segment_bytes": Optional(Size, "512K"),
                  "sweeps": [SWEEP]},
        "targets": Optional({
            "ring_vs_mpi_busbw": Optional({"ranks": [Int], "min_size": Size, "at_least": Number}),
            "butterfly_vs_mpi_time": Optional({"ranks": [Int], "max_size": Size,
                                               "at_most": Number})}, {}),
        "forced_mpi": Optional({"algorithms": {"*": Int}, "algos": [Str], "sweep": SWEEP}),
    },
    "net_scaling": {
        "experiment": EXPERIMENT,
        "networks": [{"name": Str, "bandwidth": Bandwidth, "latency": Duration}],
        "ranks": [Int],
        "allreduce": {"algos": [Str], "min": Size, "max": Size, "factor": Int, "iters": Int,
                      "warmup": Int, "segment_bytes": Size},
        "ps": {"servers": [Int], "size": Size, "iters": Int, "warmup": Int, "chunk_bytes": Size},
        "zero": Optional({"algos": [Str], "stages": [Int], "size": Size, "layer_bytes": Size,
                          "iters": Int, "warmup": Int}),
        "headline_size": Size,
        "check": {"network": Str, "min_size": Size, "tolerance": Number},
    },
    # net_scaling on the virtual cluster (scripts/cluster.sh): hosts × ranks
    # per host, each layout beside the emulator and the α-β forms.
    "cluster_net_scaling": {
        "experiment": EXPERIMENT,
        "cluster": {"name": Str, "subnet": Str, "link": Bandwidth},
        "layouts": [{"hosts": Int, "per_host": Int}],
        "allreduce": {"algos": [Str], "min": Size, "max": Size, "factor": Int, "iters": Int,
                      "warmup": Int, "segment_bytes": Size},
        "ps": {"servers": [Int], "size": Size, "iters": Int, "warmup": Int, "chunk_bytes": Size},
        "headline_size": Size,
        "tolerance": Number,
    },
    # A `psar train` config (psar checks the other sections) with a sweep of
    # its own: every method at every N and network, then the consistency runs.
    "ps_vs_allreduce": {
        "experiment": {"name": Str, "description": Optional(Str), "sweep": {
            "workers": [Int], "ps_servers": [Int], "allreduce": [Str], "networks": [Str],
            "consistency": {"workers": Int, "servers": Int, "models": [Str], "steps": Int}}},
        "...": Any,
    },
    # experiments/overlap.py: a `psar train` config with the modes sweep and
    # the bucket-size sweep.
    "overlap": {
        "experiment": {"name": Str, "description": Optional(Str), "sweep": {
            "networks": [Str], "ranks": [Int], "backends": [Str], "modes": [Str],
            "repeats": Int, "skip_steps": Optional(Int, 5),
            "buckets": {"network": Str, "ranks": Int, "priority": Str, "sizes": [Str],
                        "backends": [Str]}}},
        "...": Any,
    },
}


def parse(data, kind, source="<yaml>"):
    """Validates an already-read YAML document against SCHEMAS[kind], or, for
    kind 'train', the `experiment:` section of a `psar train` config."""
    if not isinstance(data, dict):
        raise SchemaError(f"{source}: expected a mapping at the top, got {data!r}")
    try:
        if kind == "train":
            data = dict(data)
            data["experiment"] = validate(data.get("experiment") or {}, TRAIN_EXPERIMENT,
                                          "experiment")
            return data
        if kind not in SCHEMAS:
            raise SchemaError(f"report: unknown kind '{kind}' (known: {', '.join(SCHEMAS)})")
        return validate(data, SCHEMAS[kind], "")
    except SchemaError as e:
        raise SchemaError(f"{source}: {e}") from None


def load(path, kind=None):
    """Reads and validates a YAML file. kind None: the file's own `report:`
    field (volume, cost), or 'train' if it has none."""
    try:
        with open(path) as f:
            data = yaml.safe_load(f)
    except OSError as e:
        raise SchemaError(f"{path}: cannot read: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise SchemaError(f"{path}: not valid YAML: {e}") from None
    if kind is None:
        kind = data.get("report", "train") if isinstance(data, dict) else "train"
    return parse(data, kind, path)
