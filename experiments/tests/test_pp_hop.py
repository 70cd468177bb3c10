"""pp_hop: the parts of a hop read from a trace, and the README table from runs.csv."""

import json

import pp_hop
from psar_exp.io import write_csv


def span(pid, name, cat, ts, dur, **args):
    e = {"ph": "X", "pid": pid, "tid": 0, "name": name, "cat": cat, "ts": ts, "dur": dur}
    if args:
        e["args"] = args
    return e


def test_a_hop_splits_into_send_post_transport_and_start(tmp_path):
    hop = dict(microbatch=0, from_vstage=0, to_vstage=1, bytes=8)
    events = [span(0, "F0a", "forward", 0, 100), span(0, "send F0a", "send", 101, 2, peer=1, **hop),
              # rank 1 waits from 50 and sees it at 110, starts at 111
              span(1, "recv F0a", "recv", 50, 60, peer=0, **hop), span(1, "F0a", "forward", 111, 100),
              # a receive that found its message already there is no waiting hop
              span(0, "send B0a", "send", 300, 1, peer=1, microbatch=0, from_vstage=1, to_vstage=0),
              span(1, "recv B0a", "recv", 400, 0, peer=0, microbatch=0, from_vstage=1, to_vstage=0)]
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    parts = pp_hop.hop_parts(str(path))
    assert parts["compute_end_to_send"] == 1
    assert parts["send"] == 1.5  # median of 2 and 1
    assert parts["send_to_seen"] == 7  # 110 - (101 + 2)
    assert parts["seen_to_start"] == 1
    assert parts["hops_waited"] == 1


def test_the_table_holds_the_median_run_of_each_binary_against_the_closed_form(tmp_path):
    rows = []
    for side, bubbles in (("base", [0.029, 0.031, 0.027]), ("new", [0.025, 0.024, 0.040])):
        for rep, b in enumerate(bubbles, 1):
            rows.append({"point": "zb_h1 m=32", "side": side, "commit": "abcdef0123", "rep": rep,
                         "bubble": b, "bubble_formula": 0.025, "bubble_sim": 0.025,
                         "bubble_sim_hop": 0.026, "hop_latency_s": 40e-6, "send_s": 1e-3,
                         "recv_wait_s": 0.01, "compute_s": 0.77, "cpu_pressure": 5,
                         "load1": 1.0, "steal": 0})
    (tmp_path / "data").mkdir()
    write_csv(str(tmp_path / "data" / "runs.csv"), rows, pp_hop.FIELDS)
    lines = pp_hop.table(str(tmp_path)).splitlines()
    base = next(line for line in lines if "| base |" in line)
    new = next(line for line in lines if "| new |" in line)
    assert "| 0.0290 | 0.0250 | +16.0% | no |" in base
    assert "| 0.0250 | 0.0250 | +0.0% | yes |" in new
    assert lines.index(base) < lines.index(new)
