"""experiments/tp_report.py: the per-axis numbers come from axes.csv (TP and
DP separately, t = 1 measured as zero), and the closed form of a rank's
parameter floats matches a count of the GPT's tensors."""

import os

import yaml

import tp_report

AXES = ("rank,pp,tp,dp,step,tp_allreduces,tp_floats,tp_floats_formula,tp_bytes_sent,tp_s,"
        "pp_floats_sent,pp_floats_formula,pp_bytes_sent,pp_gather_bytes_sent,pp_s,dp_floats,"
        "dp_floats_formula,dp_bytes_sent,dp_s")
STEPS = "rank,step,epoch,loss,step_s,compute_s,sync_s,bytes_sent,bytes_recv,messages,exposed_sync_s"


def config(t, split="column_row"):
    return {"model": {"type": "gpt", "layers": 2, "d_model": 8, "seq_len": 4, "vocab": 5},
            "data": {"dataset": "text"}, "train": {"batch_size": 4},
            "parallel": {"tp": t, "tp_split": split}}


def write_run(folder, t, axes_rows, steps_bytes, tp_rows=None):
    """A run directory of 2 ranks and 5 steps (3 of warm-up); axes_rows[rank] = (tp_allreduces, tp_floats,
    tp_bytes_sent, tp_s, dp_floats, dp_bytes_sent), the same every step."""
    os.makedirs(folder)
    with open(os.path.join(folder, "config.yaml"), "w") as f:
        yaml.safe_dump(config(t), f)
    axes, steps = [AXES], [STEPS]
    for step in range(1, 6):
        for rank, (ar, fl, tb, ts, df, db) in enumerate(axes_rows):
            axes.append(f"{rank},0,{rank % t},{rank // t},{step},{ar},{fl},{fl},{tb},{ts},0,0,0,0,0,"
                        f"{df},{df},{db},0.5")
            # steps.csv's bytes_sent counts every communicator (TP + DP): not the DP traffic.
            steps.append(f"{rank},{step},0,1.0,2.0,1.5,0.5,{steps_bytes},{steps_bytes},3,0.5")
    with open(os.path.join(folder, "axes.csv"), "w") as f:
        f.write("\n".join(axes) + "\n")
    with open(os.path.join(folder, "steps.csv"), "w") as f:
        f.write("\n".join(steps) + "\n")
    if tp_rows is not None:
        with open(os.path.join(folder, "tp.csv"), "w") as f:
            f.write("rank,tp,tp_rank,step,compute_s,tp_comm_s,g_forward,f_backward,allreduces,"
                    "allreduce_floats,all_gathers,all_gather_floats,tp_bytes_sent,tp_messages\n")
            for step in range(1, 6):
                for rank, ag in enumerate(tp_rows):
                    f.write(f"{rank},{t},{rank},{step},1.5,0.25,4,4,8,800,{ag},64,9999,16\n")


def row_of(table, t):
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[1] == str(t):
            return cells
    raise AssertionError(f"no row for t = {t} in\n{table}")


def test_axes_csv_gives_tp_and_dp_separately_and_t1_as_measured_zero(tmp_path):
    # t = 1 (d = 2): no tp.csv; the DP ring all-reduce of 1000 floats over 2 ranks sends 4000 bytes.
    write_run(str(tmp_path / "tp_comm" / "t1"), 1, [(0, 0, 0, 0.0, 1000, 4000)] * 2, 4000)
    # t = 2 (d = 1): 8 all-reduces of 100 floats per step over 2 layers; steps.csv's bytes_sent
    # (TP + DP) differs from both axes.csv numbers, so reading it would show.
    write_run(str(tmp_path / "tp_comm" / "t2"), 2,
              [(8, 800, 3200, 0.25, 600, 0), (8, 800, 3200, 0.25, 600, 0)], 3200, tp_rows=[2, 2])
    runs = tp_report.runs(str(tmp_path / "tp_comm"))
    assert [r[4] is None for r in runs] == [True, False]

    comm = tp_report.comm_table(runs)
    t1, t2 = row_of(comm, 1), row_of(comm, 2)
    # all-reduces / layer, floats / all-reduce, all-gathers / layer, bytes / layer
    assert (t1[4], t1[6], t1[8], t1[9]) == ("0", "-", "-", "0")
    assert (t2[4], t2[6], t2[8], t2[9]) == ("4", "100", "1", "1600")

    vol = tp_report.volume_table(runs, vocab=5)
    t1, t2 = row_of(vol, 1), row_of(vol, 2)
    # DP floats (measured), DP bytes (measured), TP floats / layer (measured), TP bytes (measured)
    assert (t1[3], t1[5], t1[7], t1[9]) == ("1000", "4000", "0", "0")
    assert (t2[3], t2[5], t2[7], t2[9]) == ("600", "0", "400", "3200")

    split = {r["t"]: r for r in tp_report.split_rows(runs)}
    assert split[1]["tp"] == 0.0 and split[1]["compute"] == 1.5
    assert split[2]["tp"] == 0.25 and split[2]["compute"] == 1.25


def test_a_run_without_axes_csv_is_an_error_naming_it(tmp_path):
    write_run(str(tmp_path / "old"), 1, [(0, 0, 0, 0.0, 10, 40)] * 2, 40)
    os.remove(tmp_path / "old" / "axes.csv")
    try:
        tp_report.runs(str(tmp_path))
    except SystemExit as e:
        assert "old has no axes.csv" in str(e)
    else:
        raise AssertionError("a run without axes.csv was read")


def gpt_tensors(V, T, L, dm, t, split):
    """Every tensor of one rank's GPT shard as (numel, sharded over t?), listed one by one."""
    out = [(V * dm, False), (T * dm, False), (dm, False), (dm, False)]  # wte, wpe, lnf
    for _ in range(L):
        out += [(dm, False)] * 4  # ln1, ln2 weight and bias
        out += [(dm * 3 * dm, True), (3 * dm, True), (dm * dm, True), (dm, False)]  # QKV, proj
        if split == "column_row":
            out += [(dm * 4 * dm, True), (4 * dm, True), (4 * dm * dm, True), (dm, False)]
        else:
            out += [(dm * 4 * dm, True), (4 * dm, False), (4 * dm * dm, True), (dm, True)]
    return sum(n // t if sharded else n for n, sharded in out)


def test_params_per_rank_counts_the_shard_of_every_tensor():
    for split in ("column_row", "row_column"):
        for t in (1, 2, 4):
            s = dict(t=t, dm=16, L=3, T=8, split=split)
            assert tp_report.params_per_rank(s, 80) == gpt_tensors(80, 8, 3, 16, t, split)
    # Counted by psar for experiments/tp_step.yaml's GPT (axes.csv dp_floats, t = 2).
    assert tp_report.params_per_rank(dict(t=2, dm=256, L=4, T=64, split="column_row"), 80) == 1619968
