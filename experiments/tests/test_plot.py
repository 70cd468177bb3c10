"""plot.py on synthetic run folders: the run comparison (by step and by wall
time, a colour per run however many, a legend clear of the panels, no
"smoothed" unless smoothed) and the timeline (title with run and grid,
(p, t, d) and role per track, a colour per action kind, legend clear of the
axes)."""

import json
import os

import matplotlib
import pytest
import yaml

matplotlib.use("Agg")
from matplotlib.colors import to_hex  # noqa: E402

import plot  # noqa: E402


def write_run(path, losses, step_s, ranks=2, evals=(), mode=None):
    """A run directory: steps.csv with `losses[k]` for every rank at step k+1
    (rank r's row offset by r, so the mean is losses[k] + (ranks-1)/2) and
    step_s[k] on the slowest rank (the others half of it), eval.csv. mode:
    (sequence_parallel, recompute) as the trainer writes them; None writes a
    file from before those columns."""
    os.makedirs(path, exist_ok=True)
    extra_head, extra = ("", "") if mode is None else (",sequence_parallel,recompute",
                                                       f",{mode[0]},{mode[1]}")
    with open(os.path.join(path, "steps.csv"), "w") as f:
        f.write("rank,step,epoch,loss,step_s,compute_s,sync_s,bytes_sent,bytes_recv,messages,"
                f"exposed_sync_s{extra_head}\n")
        for k, (loss, t) in enumerate(zip(losses, step_s)):
            for r in range(ranks):
                slow = t if r == ranks - 1 else t / 2
                f.write(f"{r},{k + 1},0,{loss + r},{slow},0,0,0,0,0,0{extra}\n")
    with open(os.path.join(path, "eval.csv"), "w") as f:
        f.write("step,epoch,test_loss,test_accuracy\n")
        for step, acc in evals:
            f.write(f"{step},0,0,{acc}\n")


def lines_of(fig, title):
    ax = next(a for a in fig.axes if a.get_title() == title)
    return ax, [l for l in ax.get_lines()]


def test_runs_by_step_and_by_wall_time(tmp_path):
    write_run(tmp_path / "fast", [3.0, 2.0, 1.0], [0.1, 0.1, 0.1], evals=[(3, 0.5)])
    write_run(tmp_path / "slow", [3.0, 2.0, 1.0], [1.0, 2.0, 3.0], evals=[(3, 0.5)])
    fig = plot.plot_runs([str(tmp_path)], str(tmp_path / "out.png"))
    assert (tmp_path / "out.png").stat().st_size > 0
    _, by_step = lines_of(fig, "loss by step")
    assert [list(l.get_xdata()) for l in by_step] == [[1, 2, 3], [1, 2, 3]]
    assert list(by_step[0].get_ydata()) == [3.5, 2.5, 1.5]  # mean over the two ranks
    _, by_time = lines_of(fig, "loss by wall time")
    assert list(by_time[0].get_xdata()) == pytest.approx([0.1, 0.2, 0.3])
    assert list(by_time[1].get_xdata()) == pytest.approx([1.0, 3.0, 6.0])  # slowest rank, summed
    _, acc_time = lines_of(fig, "accuracy by wall time")
    assert [list(l.get_xdata()) for l in acc_time] == [pytest.approx([0.3]), pytest.approx([6.0])]
    assert list(acc_time[0].get_ydata()) == [50.0]
    ax, _ = lines_of(fig, "loss by step")
    assert "smoothed" not in ax.get_ylabel() and "average" not in ax.get_ylabel()


def test_a_runs_legend_entry_names_its_mode_unless_default(tmp_path):
    write_run(tmp_path / "old", [3.0], [0.1])
    write_run(tmp_path / "plain", [3.0], [0.1], mode=(0, "none"))
    write_run(tmp_path / "sel", [3.0], [0.1], mode=(0, "selective"))
    write_run(tmp_path / "spfull", [3.0], [0.1], mode=(1, "full"))
    fig = plot.plot_runs([str(tmp_path)], str(tmp_path / "out.png"))
    _, lines = lines_of(fig, "loss by step")
    assert [l.get_label() for l in lines] == [
        "old", "plain", "sel (recompute selective)", "spfull (sequence-parallel, recompute full)"]


def test_smoothing_is_named_only_when_applied(tmp_path):
    write_run(tmp_path / "a", [4.0, 0.0, 4.0, 0.0], [1, 1, 1, 1], ranks=1)
    fig = plot.plot_runs([str(tmp_path)], str(tmp_path / "out.png"), smooth=2)
    ax, lines = lines_of(fig, "loss by step")
    assert "moving average over 2 steps" in ax.get_ylabel()
    assert list(lines[-1].get_ydata()) == [4.0, 2.0, 2.0, 2.0]  # the smoothed curve, last


@pytest.mark.parametrize("n", [1, 10, 11, 20, 25, 40])
def test_every_run_has_a_colour_of_its_own(n):
    colors = [to_hex(c) for c in plot.run_colors(n)]
    assert len(set(colors)) == n


def test_many_runs_get_distinct_lines_and_a_legend_clear_of_the_panels(tmp_path):
    for i in range(25):
        write_run(tmp_path / f"backend-{i:02d}_n4", [3.0, 2.0], [0.1 * (i + 1)] * 2)
    fig = plot.plot_runs([str(tmp_path)], str(tmp_path / "out.png"))
    _, lines = lines_of(fig, "loss by step")
    styles = {(to_hex(l.get_color()), l.get_linestyle()) for l in lines}
    assert len({to_hex(l.get_color()) for l in lines}) == 25
    assert len(styles) == 25
    renderer = fig.canvas.get_renderer()
    legend = fig.legends[0].get_window_extent(renderer)
    assert len(fig.legends[0].get_texts()) == 25
    for ax in fig.axes:
        assert not legend.overlaps(ax.get_tightbbox(renderer)), ax.get_title()


def write_trace(run_dir, spans, axes_rows, config):
    os.makedirs(run_dir, exist_ok=True)
    events = [{"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "rank 0"}}]
    events += [{"ph": "X", "name": n, "cat": c, "pid": p, "tid": t, "ts": ts, "dur": d}
               for n, c, p, t, ts, d in spans]
    with open(os.path.join(run_dir, "trace.json"), "w") as f:
        json.dump({"traceEvents": events}, f)
    with open(os.path.join(run_dir, "axes.csv"), "w") as f:
        f.write("rank,pp,tp,dp,step\n")
        for rank, p, t, d in axes_rows:
            f.write(f"{rank},{p},{t},{d},1\n")
    with open(os.path.join(run_dir, "config.yaml"), "w") as f:
        yaml.safe_dump(config, f)


def test_timeline_titles_labels_and_colours(tmp_path):
    run = tmp_path / "pp_run"
    spans = [("F0", "forward", 0, 0, 0, 10), ("B0", "backward", 0, 0, 10, 20),
             ("Bi0", "backward_input", 1, 0, 0, 5), ("Bw0", "backward_weight", 1, 0, 5, 5),
             ("push", "comm", 1, 1, 0, 8), ("odd", "mystery", 1, 0, 30, 2)]
    # ranks 0, 1: two pipeline stages of one replica, tensor-parallel width 1
    write_trace(run, spans, [(0, 0, 0, 0), (1, 1, 0, 0)],
                {"experiment": {"name": "pp_demo"},
                 "parallel": {"pp": 2, "schedule": "zb_h1", "microbatches": 4},
                 "sync": {"backend": "ring", "overlap": True}})
    fig = plot.plot_timeline(str(run / "trace.json"), str(tmp_path / "tl.png"))
    assert (tmp_path / "tl.png").stat().st_size > 0
    ax = fig.axes[0]
    title = ax.get_title()
    assert "pp_demo" in title and "pp_run" in title
    assert "2×1×1" in title and "zb_h1" in title and "ring" in title
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["rank 0 (p0, t0, d0) compute", "rank 1 (p1, t0, d0) compute",
                      "rank 1 (p1, t0, d0) comm thread"]
    assert not any("rank 1.1" in l or "0.1" in l for l in labels)
    legend = ax.get_legend()
    names = [t.get_text() for t in legend.get_texts()]
    assert names == ["forward", "backward", "backward_input", "backward_weight", "comm", "mystery"]
    colors = [to_hex(h.get_facecolor()) for h in legend.legendHandles]
    assert len(set(colors)) == len(colors)  # backward and backward_input differ, too
    # Each bar has its kind's colour.
    bars = {to_hex(c.get_facecolor()[0]) for c in ax.collections}
    assert bars == set(colors)
    renderer = fig.canvas.get_renderer()
    assert not legend.get_window_extent(renderer).overlaps(ax.get_window_extent(renderer))


def test_timeline_without_run_files_still_labels_threads(tmp_path):
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "name": "sync", "cat": "sync", "pid": 0, "tid": 0, "ts": 0, "dur": 1},
        {"ph": "X", "name": "c", "cat": "comm", "pid": 0, "tid": 1, "ts": 0, "dur": 1}]}))
    fig = plot.plot_timeline(str(trace), str(tmp_path / "tl.png"))
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels == ["rank 0 compute", "rank 0 comm thread"]
