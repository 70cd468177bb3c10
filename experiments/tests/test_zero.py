"""experiments/zero.py: the memory table holds every rank to psar's exact
form (and says so when one does not), and the step table's ratios."""

import zero

# An embedding of 2, a block of 4, a final norm of 4: Ψ = 10.
LAYERS = [2, 4, 4]


def mem_rows(stage, n, psi, optimizer_of=None):
    out = []
    for r in range(n):
        own = psi if stage == 0 else zero.piece(psi, n, r)
        opt = 8 * own if optimizer_of is None else optimizer_of(r)
        out.append({"stage": str(stage), "N": str(n), "rank": str(r), "psi": str(psi),
                    "params_bytes": str(4 * psi), "grads_bytes": str(4 * psi),
                    "optimizer_bytes": str(opt)})
    return out


def test_pieces_are_the_balanced_partition():
    assert [zero.piece(10, 4, r) for r in range(4)] == [3, 3, 2, 2]
    assert sum(zero.piece(1285, 7, r) for r in range(7)) == 1285


def test_memory_table_marks_exact_rows_and_flags_a_rank_off_by_a_float():
    table = zero.memory_table(mem_rows(1, 4, 10) + mem_rows(0, 2, 10), LAYERS)
    assert "| 1 | 4 | 10 |" in table and "**no**" not in table
    # stage 1 at the largest rank: 8Ψ + 8·⌈Ψ/N⌉ = 104 bytes against the paper's 8Ψ + 8Ψ/N = 100
    assert "| 1.040 | 0.000 | yes |" in table
    bad = mem_rows(1, 4, 10, optimizer_of=lambda r: 8 * zero.piece(10, 4, r) + (4 if r == 3 else 0))
    assert "**no**" in zero.memory_table(bad, LAYERS)


def stage2_rows(n, psi, grads_of=None):
    return [{"stage": "2", "N": str(n), "rank": str(r), "psi": str(psi),
             "params_bytes": str(4 * psi),
             "grads_bytes": str(4 * zero.piece(psi, n, r) if grads_of is None else grads_of(r)),
             "optimizer_bytes": str(8 * zero.piece(psi, n, r)),
             "gathered_bytes": str(zero.grad_buffers_form(LAYERS))} for r in range(n)]


def test_stage2_rows_are_the_papers_form_with_the_gradient_buffers_apart():
    # Ψ = 10, N = 5: 4Ψ + 12Ψ/N = 64 bytes, every rank; the buffers 4·(2 + 4) = 24 apart
    table = zero.memory_table(stage2_rows(5, 10), LAYERS)
    assert "| 2 | 5 | 10 |" in table and "| 1.000 | 0.000 |" in table and "**no**" not in table
    # a rank keeping the whole gradient arena is not stage 2
    whole = stage2_rows(5, 10, grads_of=lambda r: 40 if r == 1 else 4 * zero.piece(10, 5, r))
    assert "**no**" in zero.memory_table(whole, LAYERS)


def test_grad_buffers_form_is_the_largest_layer_beside_the_embedding():
    assert zero.grad_buffers_form([10, 30, 30, 2]) == 4 * 40
    assert zero.grad_buffers_form([100, 30, 2]) == 4 * 130


def test_step_table_compares_each_stage_with_its_zero0_peer():
    rows = []
    for variant, s in [("zero0", 0.100), ("zero1", 0.104), ("zero2", 0.106),
                       ("zero0_overlap", 0.080), ("zero2_overlap", 0.110)]:
        rows.append({"net": "1gbit", "N": "4", "variant": variant, "rep": "0", "step_s": str(s),
                     "dp_bytes_max": "100"})
    table = zero.step_table(rows)
    line = {l.split("|")[3].strip(): l for l in table.splitlines() if l.startswith("| 1gbit")}
    assert "1.040" in line["zero1"] and "met" in line["zero1"]
    assert "1.375" in line["zero2_overlap"] and "1.100" in line["zero2_overlap"]
    assert "**missed**" in line["zero2_overlap"]
    assert "1.060" in line["zero2"] and "**missed**" in line["zero2"]


def stage3_rows(n, psi, gathered_of=None):
    return [{"stage": "3", "N": str(n), "rank": str(r), "psi": str(psi),
             "params_bytes": str(4 * zero.piece(psi, n, r)), "grads_bytes": "0",
             "optimizer_bytes": str(8 * zero.piece(psi, n, r)),
             "gathered_bytes": str(zero.gathered_form(LAYERS) if gathered_of is None
                                   else gathered_of(r))}
            for r in range(n)]


def test_stage3_rows_are_the_pieces_and_the_largest_layer_gathered():
    table = zero.memory_table(stage3_rows(4, 10), LAYERS)
    assert "| 3 | 4 | 10 |" in table and "**no**" not in table
    off = stage3_rows(4, 10, gathered_of=lambda r: zero.gathered_form(LAYERS) + (8 if r == 2 else 0))
    assert "**no**" in zero.memory_table(off, LAYERS)


def test_gathered_form_is_a_block_and_its_gradient_beside_the_embeddings_gradient():
    # E = 10, blocks of 30, lnf 2: 4·(2·30 + 10)
    assert zero.gathered_form([10, 30, 30, 2]) == 280
    # an embedding larger than twice a block: the head's backward, 4·(2·2 + 2E)
    assert zero.gathered_form([100, 30, 2]) == 816


def test_stage3_step_target_needs_both_the_ratio_and_the_prediction():
    rows = [{"net": "1gbit", "N": "4", "variant": v, "rep": "0", "step_s": str(s),
             "dp_bytes_max": "1", "compute_s": str(c)}
            for v, s, c in [("zero0", 0.100, 0.050), ("zero3", 0.180, 0.050),
                            ("zero3_prefetch", 0.140, 0.050)]]
    pred = [{"net": "1gbit", "N": "4"}]
    p = zero.stage3_prediction("zero3_prefetch", "1gbit", 4, 0.050)

    def line(step, zero0):
        rows[0]["step_s"], rows[2]["step_s"] = str(zero0), str(step)
        return {l.split("|")[3].strip(): l for l in zero.step_table(rows, pred).splitlines()
                if l.startswith("| 1gbit")}["zero3_prefetch"]
    # within 15 % of the model and ≤ 1.5× ZeRO-0: met; either not: missed
    assert f"{1e3 * p:.1f} (1.10×)" in line(1.1 * p, p) and "met" in line(1.1 * p, p)
    assert "**missed**" in line(1.2 * p, p)
    assert "**missed**" in line(1.1 * p, 0.7 * p)


ALPHA, BETA = 20e-6, 8e-9


def test_a_ring_pass_of_equal_chunks_is_n_minus_1_hops():
    # 4 chunks of 1000 floats: (N − 1)(α + 4000 β) at every rank
    done = zero.ring_pass([1000] * 4, [0.0] * 4, ALPHA, BETA, [[0.0, 0.0] for _ in range(4)],
                          reduce=False)
    assert all(abs(t - 3 * (ALPHA + 4000 * BETA)) < 1e-12 for t in done)


def test_one_owners_chunk_streams_in_segments_around_the_ring():
    # the whole layer on rank 0, 2 segments of S bytes: the last rank has it
    # after 3 hops, the second segment's: 4·S·β + 3α (whole chunks would take
    # 3·2·S·β + 3α); the reduce-scatter's mirror ends at its owner
    seg = zero.SEGMENT_BYTES
    chunk = 2 * seg // 4
    done = zero.ring_pass([chunk, 0, 0, 0], [0.0] * 4, ALPHA, BETA,
                          [[0.0, 0.0] for _ in range(4)], reduce=False)
    assert abs(done[3] - (4 * seg * BETA + 3 * ALPHA)) < 1e-12
    assert abs(max(done) - done[3]) < 1e-12
    done = zero.ring_pass([chunk, 0, 0, 0], [0.0] * 4, ALPHA, BETA,
                          [[0.0, 0.0] for _ in range(4)], reduce=True)
    assert abs(done[0] - (4 * seg * BETA + 3 * ALPHA)) < 1e-12


def test_owners_chunks_cut_a_layer_at_the_pieces():
    # Ψ = 10 over 4: pieces 3, 3, 2, 2
    assert zero.owners_chunks(2, 7, 10, 4) == [1, 3, 1, 0]


def test_stage3_model_counts_twenty_collectives_and_prefetch_hides_compute():
    layers = zero.layer_floats()
    alone, count = zero.stage3_model(layers, 4, ALPHA, BETA, 0.0, prefetch=False)
    assert count == 3 * len(layers) + 2 == 20
    plain, _ = zero.stage3_model(layers, 4, ALPHA, BETA, 0.030, prefetch=False)
    ahead, count = zero.stage3_model(layers, 4, ALPHA, BETA, 0.030, prefetch=True)
    assert count == 20
    # without prefetch the compute adds to the collectives; with it some hides
    assert abs(plain - (alone + 0.030)) < 0.005
    assert alone < ahead < plain


def test_budget_table_gives_stage3_the_most_blocks():
    table = zero.budget_table(8e6, 8, 128, 64, 16)
    blocks = {int(l.split("|")[1]): int(l.split("|")[2]) for l in table.splitlines()
              if l.startswith("| ") and l.split("|")[1].strip().isdigit()}
    assert blocks[0] < blocks[1] <= blocks[2] < blocks[3]


def test_layer_buckets_are_whole_layers_in_backward_order():
    # layers 10, 30, 30, 2 at 40 floats, backward order: 2 + 30 fits, + 30 does
    # not; 30 + 10 fits
    assert zero.layer_buckets([10, 30, 30, 2], 40) == [(40, 72), (0, 40)]
    # a layer above the capacity is a bucket of its own
    assert zero.layer_buckets([10, 50, 2], 40) == [(60, 62), (10, 60), (0, 10)]


def test_two_half_arena_buckets_cost_more_than_the_whole_models_at_n8():
    # Ψ/2 over 8 ranks: 4 whole pieces of Ψ/8 (streamed in segments of
    # Ψ/16): each bucket less than the whole model's ring, both more
    one, two = zero.stage2_reduce_scatters("1gbit", 8)
    assert len(one) == 1 and len(two) == 2
    assert max(two) < one[0] < sum(two)


def test_a_range_segment_is_an_even_chunk_up_to_the_rings():
    assert zero.range_segment(1000, 4) == 1000
    assert zero.range_segment(1001, 4) == 1004
    assert zero.range_segment(10 ** 7, 4) == zero.SEGMENT_BYTES
