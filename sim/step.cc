#include "sim/step.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <numeric>

#include "allreduce/algorithms.h"
#include "allreduce/allreducer.h"
#include "allreduce/partition.h"
#include "core/errors.h"
#include "modelpar/grid.h"
#include "modelpar/pp/generators.h"
#include "modelpar/pp/p2p.h"
#include "modelpar/pp/partition.h"
#include "modelpar/pp/simulate.h"
#include "sim/collective.h"
#include "sync/buckets.h"

namespace psar::sim {

using psar::detail::concat;

namespace {

// The program an allreduce name stands for: its own, or for a library peer
// (mpi, nccl) the program its registry entry says it is timed as.
Program allreduce_program(const std::string& name, int ranks, int64_t count,
                          const AllreduceOptions& options, const std::vector<int>& node = {}) {
  const AllreducerEntry& e = find_allreducer(name);
  if (e.program) return e.program_for(ranks, count, options, node);
  if (!e.timed_as)
    throw ConfigError("allreduce '" + name +
                      "' has no program to simulate and names none to "
                      "be timed as (its registry entry's timed_as)");
  return find_allreducer(e.timed_as).program_for(ranks, count, options);
}

}  // namespace

Program ps_program(int workers, std::span<const ps::KeyRange> shards, int64_t chunk_floats) {
  const int servers = static_cast<int>(shards.size());
  PSAR_CHECK(workers >= 1 && servers >= 1 && chunk_floats >= 1, "ps_program: ", workers,
             " workers, ", servers, " servers, chunks of ", chunk_floats);
  Program list("ps", workers + servers, shards.back().end);
  for (int k = 0; k < servers; ++k) {
    const ps::ShardLayout layout{k, shards[static_cast<size_t>(k)], chunk_floats};
    for (int c = 0; c < layout.chunks(); ++c) {
      const ps::KeyRange chunk = layout.chunk(c);
      for (int w = 0; w < workers; ++w) {
        list.transfer(c, w, workers + k, chunk.begin, chunk.size(), true);
        list.transfer(c + 1, workers + k, w, chunk.begin, chunk.size(), false);
      }
    }
  }
  list.finish();
  return list;
}

namespace {

// The pipeline's transfers and its replay are iterated to a fixed point
// (replay_with_contention) at most this many times, until no stage's end
// moves by more than this share of the makespan.
constexpr int kContentionRounds = 4;
constexpr double kContentionTolerance = 1e-6;

// One step on the cluster, told in the order it happens: the TP all-reduce
// every block pays, each action's price, the stage-to-stage transfers, the
// pipelines replayed on those prices, then the data-parallel sync — after
// the backward, or bucket by bucket during it — and the optimizer step.
class StepSimulation {
 public:
  StepSimulation(const ClusterSpec& cluster, const StepSpec& spec)
      : cluster_(cluster),
        s_(spec),
        p_(spec.pp),
        t_(spec.tp),
        d_(spec.dp),
        grid_(make_grid_shape(cluster.gpus(), spec.tp, spec.pp, spec.order)),
        dedicated_ps_(spec.sync == "ps" && !spec.ps_colocated),
        net_(cluster, dedicated_ps_ ? spec.ps_servers : 0),
        stream_(spec.microbatch * spec.model.seq * spec.model.hidden),
        schedule_(pp::make_schedule(spec.schedule, {spec.pp, spec.microbatches, spec.chunks,
                                                    static_cast<int>(spec.model.layers)})) {}

  StepResult run() {
    out_.tp_allreduce_s = tp_allreduce_seconds();
    price_actions();
    plan_transfers();
    if (p_ > 1) out_.transfer_s = wire_seconds(0, 1)[0] + gather_s_;
    replay_pipelines();
    price_optimizer_steps();
    std::vector<double> synced = stage_end_;
    if (d_ > 1 && s_.zero != 3)  // ZeRO-3 syncs block by block inside the actions
      synced = s_.overlap ? sync_in_buckets() : sync_after_backward();
    if (p_ > 1) sync_tied_embedding(synced);
    finish_sync(synced);
    return finish_step();
  }

 private:
  struct Cost {
    double compute = 0, tp = 0;
  };
  struct Bucket {
    double ready = 0;   // when its last gradient is final
    int64_t count = 0;  // elements
  };

  int gpu(int tp, int dp, int pp) const { return grid_rank(grid_, {tp, dp, pp}); }
  size_t at(int stage) const { return static_cast<size_t>(stage); }
  std::vector<int> nodes_of(const std::vector<int>& gpus) const {
    std::vector<int> node;
    for (int g : gpus) node.push_back(g / cluster_.gpus_per_node);
    return node;
  }
  ProgramShape ring_shape(int ranks, int64_t count, ElementType dtype,
                          std::vector<int> node) const {
    return {.ranks = ranks,
            .count = count,
            .segment_bytes = s_.allreduce.segment_bytes,
            .dtype = dtype,
            .root = 0,
            .node = std::move(node),
            .split = {}};
  }
  double time_alone(const Program& program, const std::vector<int>& gpus, double bytes) const {
    return run_groups(net_, {{&program, gpus, 0.0, bytes}})[0];
  }

  // One tensor-parallel all-reduce of the residual stream [b, s, h], or
  // with sequence parallelism the reduce-scatter and all-gather in its place
  // (each kept in tp_rs_, tp_ag_).
  double tp_allreduce_seconds() {
    if (t_ == 1) return 0;
    std::vector<int> ranks;
    for (int j = 0; j < t_; ++j) ranks.push_back(gpu(j, 0, 0));
    const double bytes = s_.dtype_bytes;
    if (s_.sequence_parallel) {
      const ProgramShape shape = ring_shape(t_, stream_, ElementType::kFp32, nodes_of(ranks));
      tp_rs_ = time_alone(ring_reduce_scatter_program(shape), ranks, bytes);
      tp_ag_ = time_alone(ring_all_gather_program(shape), ranks, bytes);
      return tp_rs_ + tp_ag_;
    }
    return time_alone(
        allreduce_program(s_.tp_allreduce, t_, stream_, activation_allreduce_options(s_.allreduce),
                          nodes_of(ranks)),
        ranks, bytes);
  }

  // Compute of one block's and the head's passes from their GEMMs
  // (sim/gpt_cost.h), their memory-bound kernels and kernel launches: the
  // forward's, and as many again in each half of the backward; what
  // recomputation runs again; ZeRO-3's per-block stream.
  void price_actions() {
    const GpuSpec& device = cluster_.gpu;
    const double ovh = device.kernel_overhead, bw = device.memory_bandwidth;
    const GemmSeconds block =
        block_gemm_seconds(s_.model, s_.microbatch, t_, device, s_.flash_attention);
    const GemmSeconds head = head_gemm_seconds(s_.model, s_.microbatch, t_, device);
    const double memory_s = bw > 0 ? block_memory_bytes(s_.model, s_.microbatch, t_, s_.dtype_bytes,
                                                        s_.flash_attention, s_.sequence_parallel) /
                                         bw
                                   : 0.0;
    // What the recomputation runs before each block's backward: the whole
    // forward (full), or the attention core's two GEMMs, its softmax and
    // dropout (selective: four kernels, no TP communication).
    const double core_s =
        attention_core_seconds(s_.model, s_.microbatch, t_, device, s_.flash_attention) +
        kAttentionCoreKernels * ovh +
        (bw > 0 ? attention_core_memory_bytes(s_.model, s_.microbatch, t_, s_.dtype_bytes,
                                              s_.flash_attention) /
                      bw
                : 0.0);
    const double logits = static_cast<double>(s_.microbatch) * static_cast<double>(s_.model.seq) *
                          static_cast<double>(s_.model.vocab) / t_;
    const double ce_f = bw > 0 ? logits * (s_.dtype_bytes + kCrossEntropyForwardBytes) / bw : 0.0,
                 ce_b = bw > 0 ? logits * (s_.dtype_bytes + kCrossEntropyBackwardBytes) / bw : 0.0;
    const double block_k = kKernelsPerBlockForward * ovh + memory_s,
                 head_k = kKernelsHeadForward * ovh;
    block_f_ = block.forward + block_k;
    block_bi_ = block.input_grad + block_k;
    block_bw_ = block.weight_grad + block_k;
    head_f_ = head.forward + head_k + ce_f;
    head_bi_ = head.input_grad + head_k + ce_b;
    head_bw_ = head.weight_grad + head_k;
    tp2_ = 2 * out_.tp_allreduce_s;  // g forward, or f backward, per block
    tp_back_ = tp2_;
    if (s_.tp_comm_overlap) overlap_tp_with_gemms();
    const bool full = s_.recompute == Recompute::kFull;
    again_s_ = full ? block_f_ : s_.recompute == Recompute::kSelective ? core_s : 0.0;
    again_tp_ = full ? tp2_ : 0.0;
    price_embedding();
    // ZeRO-3: one block's weights all-gathered over the data-parallel group
    // (16-bit) and its gradients reduce-scattered (sync.dtype), on the
    // communication stream; an action of k blocks waits for the first
    // gather and then runs at the slower of its compute and the stream.
    if (s_.zero == 3 && d_ > 1) {
      std::vector<int> ranks;
      for (int i = 0; i < d_; ++i) ranks.push_back(gpu(0, i, 0));
      const ProgramShape shape =
          ring_shape(d_, block_params(s_.model) / t_, ElementType::kFp32, nodes_of(ranks));
      zero3_gather_ = time_alone(ring_all_gather_program(shape), ranks, s_.dtype_bytes);
      zero3_scatter_ = time_alone(ring_reduce_scatter_program(shape), ranks,
                                  static_cast<double>(element_size(s_.allreduce.dtype)));
    }
  }

  // Megatron-Core's --tp-comm-overlap (simulate.tp_comm_overlap, with
  // sequence parallelism): each all-gather runs beside the GEMM that reads
  // its output and each reduce-scatter beside the GEMM that makes its input,
  // chunk by chunk (Transformer Engine's userbuffers), so a pass exposes
  // only what a collective outlasts its GEMM. Forward: the all-gathers with
  // QKV and fc1, the reduce-scatters with the projection and fc2; the
  // input-gradient half: the all-gathers of the output gradient with the
  // projection's and fc2's dX, the reduce-scatters with QKV's and fc1's dX.
  // The SMs the communication kernels take from the GEMM are not modelled.
  void overlap_tp_with_gemms() {
    const GpuSpec& device = cluster_.gpu;
    const GptShape& g = s_.model;
    const int64_t tokens = s_.microbatch * g.seq, h = g.hidden, f = ffn_width(g);
    const int64_t qkv = qkv_width(g) / t_, fc1 = (g.swiglu ? 2 : 1) * f / t_;
    // [rows, cols, inner] of QKV, projection, fc1, fc2 (block_gemm_seconds' shapes).
    const auto forward = [&](int64_t cols, int64_t inner) {
      return gemm_seconds(device, 1, tokens, cols, inner);
    };
    const auto input_grad = [&](int64_t cols, int64_t inner) {
      return gemm_seconds(device, 1, tokens, inner, cols, GemmLayout::kNT);
    };
    const auto exposed = [](double comm, double gemm) { return std::max(0.0, comm - gemm); };
    tp2_ = exposed(tp_ag_, forward(qkv, h)) + exposed(tp_rs_, forward(h, h / t_)) +
           exposed(tp_ag_, forward(fc1, h)) + exposed(tp_rs_, forward(h, f / t_));
    tp_back_ = exposed(tp_ag_, input_grad(h, h / t_)) + exposed(tp_rs_, input_grad(qkv, h)) +
               exposed(tp_ag_, input_grad(h, f / t_)) + exposed(tp_rs_, input_grad(fc1, h));
  }

  // The first virtual stage's embedding (Megatron's vocabulary-parallel
  // embedding): the memory-bound kernels (kEmbeddingForwardBytes,
  // kEmbeddingBackwardBytes) and one TP collective of [b, s, h] per pass —
  // the forward's all-reduce of the shards' lookups (a reduce-scatter with
  // sequence parallelism, whose backward all-gathers the gradient; without
  // it the backward has none).
  void price_embedding() {
    const double bw = cluster_.gpu.memory_bandwidth, ovh = cluster_.gpu.kernel_overhead;
    const double tokens = static_cast<double>(stream_), D = s_.dtype_bytes;
    const double split = s_.sequence_parallel ? t_ : 1;  // dropout on s/t tokens with SP
    const double f_bytes = tokens * 5 * D + tokens / split * (2 * D + 1),
                 b_bytes = tokens / split * (2 * D + 1) + tokens * (2 * D + 8);
    emb_f_ = kKernelsEmbeddingForward * ovh + (bw > 0 ? f_bytes / bw : 0.0);
    emb_b_ = kKernelsEmbeddingBackward * ovh + (bw > 0 ? b_bytes / bw : 0.0);
    emb_tp_f_ = s_.sequence_parallel ? tp_rs_ : out_.tp_allreduce_s;
    emb_tp_b_ = s_.sequence_parallel ? tp_ag_ : 0.0;
  }

  Cost cost(int stage, const pp::Action& a) const {
    const int u = schedule_.virtual_stage(stage, a.chunk);
    const double layers = s_.vstage_layers[static_cast<size_t>(u)];
    const bool head = u == schedule_.virtual_stages() - 1, embedding = u == 0;
    Cost c;
    double comm = 0;  // ZeRO-3's stream per block
    switch (a.op) {
      case pp::Op::kForward:
        c = {layers * block_f_ + (head ? head_f_ : 0) + (embedding ? emb_f_ : 0),
             layers * tp2_ + (embedding ? emb_tp_f_ : 0)};
        comm = zero3_gather_;
        break;
      case pp::Op::kBackward:
        c = {layers * (block_bi_ + block_bw_ + again_s_) + (head ? head_bi_ + head_bw_ : 0) +
                 (embedding ? emb_b_ : 0),
             layers * (tp_back_ + again_tp_) + (embedding ? emb_tp_b_ : 0)};
        comm = zero3_gather_ + zero3_scatter_;
        break;
      case pp::Op::kBackwardInput:
        c = {layers * (block_bi_ + again_s_) + (head ? head_bi_ : 0),
             layers * (tp_back_ + again_tp_) + (embedding ? emb_tp_b_ : 0)};
        comm = zero3_gather_;
        break;
      case pp::Op::kBackwardWeight:
        c = {layers * block_bw_ + (head ? head_bw_ : 0) + (embedding ? emb_b_ : 0), 0.0};
        comm = zero3_scatter_;
        break;
    }
    // Streamed: the first block's gather, then the slower of compute and stream.
    const double busy = c.compute + c.tp;
    if (comm > 0 && layers > 0)
      c.compute = comm + std::max(busy, (layers - 1) * comm) - c.tp;
    else
      c.compute = busy - c.tp;
    return c;
  }

  // Transfers between stages: every replica's TP group sends at once; with
  // scatter/gather each TP rank sends 1/t and the receivers all-gather.
  // With sequence parallelism the activation is split over the TP group
  // already: each rank sends its 1/t and nothing is gathered.
  void plan_transfers() {
    const bool sg = (s_.scatter_gather || s_.sequence_parallel) && t_ > 1;
    const int64_t wire = sg ? Partition{stream_, t_}.largest() : stream_;
    if (sg && !s_.sequence_parallel) {
      std::vector<int> ranks;
      for (int j = 0; j < t_; ++j) ranks.push_back(gpu(j, 0, 0));
      gather_s_ =
          time_alone(ring_all_gather_program(ring_shape(t_, stream_, ElementType::kFp32, {})),
                     ranks, s_.dtype_bytes);
    }
    hop_ = Program("p2p", 2 * t_, wire);
    for (int j = 0; j < t_; ++j) hop_.transfer(0, j, t_ + j, 0, wire, false);
  }

  // [replica] seconds of one activation on the wire from stage `from` to
  // `to` (scatter/gather's all-gather on the receiver not included).
  const std::vector<double>& wire_seconds(int from, int to) {
    auto [it, fresh] = transfers_.try_emplace({from, to});
    if (fresh) {
      std::vector<GroupRun> runs;
      for (int i = 0; i < d_; ++i) {
        GroupRun r{&hop_, {}, 0.0, static_cast<double>(s_.dtype_bytes)};
        for (int j = 0; j < t_; ++j) r.endpoint.push_back(gpu(j, i, from));
        for (int j = 0; j < t_; ++j) r.endpoint.push_back(gpu(j, i, to));
        runs.push_back(std::move(r));
      }
      it->second = run_groups(net_, runs);
    }
    return it->second;
  }

  // The pipeline of each replica (replica 0 alone when symmetric): when
  // each stage ends, and replica 0's spans, times and order.
  void replay_pipelines() {
    const int replicas = s_.symmetric ? 1 : d_;
    stage_end_.assign(at(p_), 0.0);
    out_.stages.assign(at(p_), {});
    for (int i = 0; i < replicas; ++i) {
      const pp::Prediction pr = replay_with_contention(i);
      for (int st = 0; st < p_; ++st) {
        const auto& spans = pr.spans[at(st)];
        stage_end_[at(st)] = std::max(stage_end_[at(st)], spans.empty() ? 0.0 : spans.back().end);
      }
      out_.pipeline_s = std::max(out_.pipeline_s, pr.makespan);
      if (i == 0) record_replica0(pr);
    }
    for (int st = 0; st < p_; ++st) {
      out_.stages[at(st)].params = stage_params(s_, st);
      out_.stages[at(st)].end_s = stage_end_[at(st)];
    }
  }

  // Replica i's pipeline with its transfers sharing links in time: a
  // stage's NIC carries every transfer that is on the wire while it is —
  // an activation from the stage before and a gradient from the stage
  // after arriving at once share its ingress, two sends its egress — as
  // processor sharing (share_links) from each transfer's alone time
  // (wire_seconds). With blocking sends on the interleaved schedule a
  // forward followed by a backward sends its activation with that
  // backward's gradient, as Megatron's steady state batches them
  // (send_forward_backward_recv_forward_backward): the activation leaves
  // when the backward ends, and the two share the stage's egress. The
  // transfers' times and the replay depend on each other: replayed until no
  // transfer's time moves (kContentionRounds at most), starting from the
  // alone times.
  pp::Prediction replay_with_contention(int i) {
    const auto alone = [&](const pp::Transfer& tr) {
      return wire_seconds(tr.from_stage, tr.to_stage)[static_cast<size_t>(i)];
    };
    const bool batched = s_.blocking_p2p && s_.schedule == "interleaved";
    const size_t tags = 2 * static_cast<size_t>(schedule_.virtual_stages()) *
                        static_cast<size_t>(s_.microbatches);
    std::vector<double> took, defer(tags, 0.0);  // [tag] seconds on the wire, before it; empty: alone
    std::vector<double> ends_before;             // [stage] its last action's end, the round before
    pp::Prediction pr;
    for (int round = 0; round < kContentionRounds; ++round) {
      pr = pp::simulate_costs(
          schedule_,
          [&](int stage, const pp::Action& a) {
            const Cost c = cost(stage, a);
            return c.compute + c.tp;
          },
          [&](const pp::Transfer& tr) {
            const auto tag = static_cast<size_t>(tr.tag);
            const double wire = took.empty() ? alone(tr) : took[tag];
            return pp::TransferTime{defer[tag] + wire + gather_s_,
                                    s_.blocking_p2p && defer[tag] == 0 ? wire : 0.0};
          });
      // Settled when no stage's end moved since the last round (the step
      // reads nothing else of the pipeline), though a transfer hidden
      // behind compute may still swing between two times; the rounds after
      // the first two (the deferrals need a replay to be known) move each
      // time halfway, which damps such swings.
      std::vector<double> end(at(p_), 0.0);
      for (int st = 0; st < p_; ++st)
        if (!pr.spans[at(st)].empty()) end[at(st)] = pr.spans[at(st)].back().end;
      bool settled = !ends_before.empty();
      for (int st = 0; st < p_ && settled; ++st)
        settled = std::abs(end[at(st)] - ends_before[at(st)]) <= kContentionTolerance * pr.makespan;
      if (settled) break;
      ends_before = std::move(end);
      std::vector<Flow> flows;
      std::vector<size_t> flow_tag;
      std::vector<std::array<int, 3>> flow_hop;  // [flow] (replica, from, to)
      std::vector<double> next_defer(tags, 0.0);
      for (int st = 0; st < p_; ++st) {
        const auto& spans = pr.spans[at(st)];
        // A steady state (a backward followed by a forward): without one the
        // stage only warms up and cools down, each send on its own.
        bool steady = false;
        for (size_t k = 0; k + 1 < spans.size(); ++k)
          steady = steady || (spans[k].action.op != pp::Op::kForward &&
                              spans[k + 1].action.op == pp::Op::kForward);
        for (size_t k = 0; k < spans.size(); ++k) {
          const auto tr = pp::output_of(schedule_, st, spans[k].action);
          if (!tr || tr->local()) continue;
          const auto tag = static_cast<size_t>(tr->tag);
          if (batched && steady && spans[k].action.op == pp::Op::kForward &&
              k + 1 < spans.size() && spans[k + 1].action.op != pp::Op::kForward)
            next_defer[tag] = spans[k + 1].end - spans[k].end;
          hop_links(i, tr->from_stage, tr->to_stage);  // interns its ports
          flows.push_back({spans[k].end + next_defer[tag], alone(*tr), {}});
          flow_hop.push_back({i, tr->from_stage, tr->to_stage});
          flow_tag.push_back(tag);
        }
      }
      // Every hop's links are interned by now: count per port if they may.
      for (size_t k = 0; k < flows.size(); ++k)
        for (int x : ports_disjoint_ ? hop_ports_.at(flow_hop[k]) : hop_links_.at(flow_hop[k]))
          if (x >= 0) flows[k].links.push_back(x);
      const std::vector<double> ends = share_links(
          flows, ports_disjoint_ ? static_cast<int>(port_ids_.size()) : net_.links());
      std::vector<double> next(tags, 0.0);
      const double keep = round < 2 ? 0.0 : 0.5;
      bool moved = false;
      for (size_t k = 0; k < flows.size(); ++k) {
        const size_t tag = flow_tag[k];
        const double before = took.empty() ? flows[k].alone : took[tag];
        const double now = ends[k] - flows[k].start;
        next[tag] = keep * before + (1 - keep) * now;
        moved = moved || std::abs(now - before) > 1e-9 * before ||
                std::abs(next_defer[tag] - defer[tag]) > 1e-9 * (1 + defer[tag]);
      }
      took = std::move(next);
      defer = std::move(next_defer);
      if (!moved) break;
    }
    return pr;
  }

  // The links one transfer of replica i from stage `from` to `to` crosses:
  // each TP rank's egress and ingress (its NIC, or its switch link on one
  // node). share_links runs on ports instead where it can: the set of
  // egress links of a hop and the set of its ingress links, each interned
  // once; when no link belongs to two different ports (every GPU of a
  // stage on its own NIC, or a node's stages on one NIC) counting flows per
  // port is counting them per link, with two ports a flow instead of 2t
  // links.
  const std::vector<int>& hop_links(int i, int from, int to) {
    auto [it, fresh] = hop_links_.try_emplace({i, from, to});
    if (!fresh) return it->second;
    std::vector<int> egress, ingress;
    for (int j = 0; j < t_; ++j) {
      const Network::Path path = net_.path(gpu(j, i, from), gpu(j, i, to));
      if (path.egress >= 0) egress.push_back(path.egress);
      if (path.ingress >= 0) ingress.push_back(path.ingress);
    }
    std::vector<int>& links = it->second;
    for (std::vector<int>* side : {&egress, &ingress}) {
      std::sort(side->begin(), side->end());
      side->erase(std::unique(side->begin(), side->end()), side->end());
      links.insert(links.end(), side->begin(), side->end());
      hop_ports_[{i, from, to}].push_back(port_of(*side));
    }
    return links;
  }

  // The port id of a set of links (sorted); marks ports_disjoint_ false
  // when one of its links already belongs to another port.
  int port_of(const std::vector<int>& links) {
    if (links.empty()) return -1;
    auto [it, fresh] = port_ids_.try_emplace(links, static_cast<int>(port_ids_.size()));
    if (fresh) {
      link_port_.resize(static_cast<size_t>(net_.links()), -1);
      for (int l : links) {
        int& owner = link_port_[static_cast<size_t>(l)];
        if (owner != -1) ports_disjoint_ = false;
        owner = it->second;
      }
    }
    return it->second;
  }

  void record_replica0(const pp::Prediction& pr) {
    spans0_ = pr.spans;
    out_.bubble_fraction = pr.bubble_fraction;
    out_.idle_share = pr.idle_share;
    for (int st = 0; st < p_; ++st) {
      StageTimes& times = out_.stages[at(st)];
      std::vector<pp::Action> actions;
      for (const auto& span : pr.spans[at(st)]) {
        const Cost c = cost(st, span.action);
        times.compute_s += c.compute;
        times.tp_s += c.tp;
        actions.push_back(span.action);
      }
      times.idle_s = pr.makespan - times.compute_s - times.tp_s;
      out_.order.push_back(std::move(actions));
    }
  }

  // Each stage's optimizer step on the shard its GPUs step.
  void price_optimizer_steps() {
    const double bw = cluster_.gpu.memory_bandwidth;
    for (int st = 0; st < p_; ++st)
      if (bw > 0)
        out_.stages[at(st)].optimizer_s = static_cast<double>(out_.stages[at(st)].params) /
                                          (s_.zero > 0 ? d_ : 1) * kAdamStepBytesPerParam / bw;
  }

  // The program that syncs `count` gradients over the data-parallel group
  // `gpus`, by count and the group's node map (what the hierarchical
  // program reads; the others ignore it): the parameter server's, with its
  // shards and chunks as psar's launch plans them; ZeRO's reduce-scatter;
  // or the allreduce, the gradients on the wire in sync.dtype.
  const Program* sync_program(int64_t count, const std::vector<int>& gpus) {
    const std::vector<int> node = nodes_of(gpus);
    auto [it, fresh] = sync_programs_.try_emplace({count, node});
    if (!fresh) return &it->second;
    if (s_.sync == "ps") {
      const std::vector<ps::KeyRange> shards = ps::plan_shards(count, s_.ps_servers);
      it->second = ps_program(
          d_, shards, ps::plan_chunk_floats(s_.ps_chunk_bytes, s_.ps_shard_chunks, shards, d_));
    } else if (s_.zero > 0) {
      it->second = ring_reduce_scatter_program(ring_shape(d_, count, s_.allreduce.dtype, node));
    } else {
      it->second = allreduce_program(s_.sync, d_, count, s_.allreduce, node);
    }
    return &it->second;
  }

  // Stage st's TP rank j's data-parallel group syncing `count` gradients
  // from `start`; the PS's servers on their own endpoints, or on workers'.
  GroupRun sync_group(int st, int j, int64_t count, double start) {
    std::vector<int> gpus;
    for (int i = 0; i < d_; ++i) gpus.push_back(gpu(j, i, st));
    const double wire = s_.sync == "ps" ? s_.grad_bytes : element_size(s_.allreduce.dtype);
    GroupRun r{sync_program(count, gpus), gpus, start, wire};
    for (int k = 0; k < (s_.sync == "ps" ? s_.ps_servers : 0); ++k)
      r.endpoint.push_back(dedicated_ps_ ? cluster_.gpus() + k
                                         : r.endpoint[static_cast<size_t>(k % d_)]);
    return r;
  }

  // Without overlap: every (stage, TP rank) group at once, each when its
  // stage's last action is done, the stage's whole gradient. Per stage,
  // when its sync is done.
  std::vector<double> sync_after_backward() {
    std::vector<GroupRun> runs;
    std::vector<int> run_stage;
    for (int st = 0; st < p_; ++st)
      for (int j = 0; j < t_; ++j) {
        runs.push_back(sync_group(st, j, out_.stages[at(st)].params, stage_end_[at(st)]));
        run_stage.push_back(st);
      }
    const std::vector<double> ends = run_groups(net_, runs);
    std::vector<double> synced(at(p_), 0.0);
    for (size_t k = 0; k < ends.size(); ++k)
      synced[at(run_stage[k])] = std::max(synced[at(run_stage[k])], ends[k]);
    if (s_.zero > 0) synced = gather_weights(stepped(synced));
    return synced;
  }

  // Overlap as psar's (docs/overlap.md): one communication thread per rank
  // syncs a stage's buckets (overlap_buckets) in order, each once it is
  // ready and the one before it is done; the buckets of every group with a
  // k-th bucket run at once (their flows share links as if they started
  // together). Per stage, when its sync is done.
  std::vector<double> sync_in_buckets() {
    std::vector<std::vector<Bucket>> buckets;
    for (int st = 0; st < p_; ++st) buckets.push_back(overlap_buckets(st));
    std::vector<double> free_at(at(p_), 0.0);  // a stage's thread, all j alike
    for (size_t k = 0;; ++k) {
      std::vector<GroupRun> runs;
      std::vector<int> run_stage;
      for (int st = 0; st < p_; ++st) {
        if (k >= buckets[at(st)].size()) continue;
        const Bucket& b = buckets[at(st)][k];
        const double start = std::max(b.ready, free_at[at(st)]);
        for (int j = 0; j < t_; ++j) {
          runs.push_back(sync_group(st, j, b.count, start));
          run_stage.push_back(st);
        }
      }
      if (runs.empty()) break;
      const std::vector<double> ends = run_groups(net_, runs);
      for (size_t r = 0; r < ends.size(); ++r)
        free_at[at(run_stage[r])] = std::max(free_at[at(run_stage[r])], ends[r]);
    }
    if (s_.zero > 0) {
      for (int st = 0; st < p_; ++st)
        free_at[at(st)] = std::max(free_at[at(st)], out_.stages[at(st)].end_s);
      free_at = gather_weights(stepped(free_at));
    }
    return free_at;
  }

  // Stage st's buckets in launch order, from replica 0's spans: a chunk's
  // gradients are final during its last backward (fused, or the weight
  // half of a split one), the head's first and then block by block from the
  // chunk's last layer down, each at its share of the action's time; chunks
  // in the order those actions end. The blocks fill buckets of
  // sync.bucket_bytes by sync/buckets.h's plan (laid out down an arena, as
  // the backward makes them final); the embedding, the head's copy and the
  // final layer norm — the tied ranges, synced after the buckets — form the
  // last, ready when the stage is done.
  std::vector<Bucket> overlap_buckets(int st) const {
    const auto& spans = spans0_[at(st)];
    const double shift = stage_end_[at(st)] - (spans.empty() ? 0.0 : spans.back().end);
    std::vector<const pp::ActionSpan*> last(static_cast<size_t>(s_.chunks), nullptr);
    for (const auto& span : spans)
      if (span.action.op == pp::Op::kBackward || span.action.op == pp::Op::kBackwardWeight)
        last[static_cast<size_t>(span.action.chunk)] = &span;
    std::erase(last, nullptr);
    std::sort(last.begin(), last.end(),
              [](const pp::ActionSpan* a, const pp::ActionSpan* b) { return a->end < b->end; });
    std::vector<double> ready;  // [block, in the order its gradients are final]
    for (const pp::ActionSpan* span : last) {
      const int u = schedule_.virtual_stage(st, span->action.chunk);
      const int layers = s_.vstage_layers[static_cast<size_t>(u)];
      const bool fused = span->action.op == pp::Op::kBackward;
      const double w_head =
          u == schedule_.virtual_stages() - 1 ? (fused ? head_bi_ + head_bw_ : head_bw_) : 0.0;
      const double w_layer =
          fused ? block_bi_ + block_bw_ + again_s_ + tp_back_ + again_tp_ : block_bw_;
      const double total = w_head + layers * w_layer;
      const double scale = total > 0 ? (span->end - span->start) / total : 0.0;
      for (int l = 0; l < layers; ++l)
        ready.push_back(shift + span->start + (w_head + (l + 1) * w_layer) * scale);
    }
    const int64_t per_block = block_params(s_.model) / t_;
    const auto blocks = static_cast<int64_t>(ready.size());
    std::vector<Bucket> out;
    if (per_block > 0) {
      // Block k (in ready order) is [top − (k+1)·per_block, top − k·per_block).
      const int64_t top = blocks * per_block;
      std::vector<BucketTensor> tensors;
      for (int64_t k = 0; k < blocks; ++k)
        tensors.push_back({{top - (k + 1) * per_block, top - k * per_block}});
      const int64_t capacity = std::max<int64_t>(1, s_.bucket_bytes / s_.grad_bytes);
      // A bucket is ready with the last block it took: the one at its lowest element.
      for (const ArenaRange& b : plan_buckets(tensors, capacity))
        out.push_back({ready[static_cast<size_t>((top - b.begin - 1) / per_block)], b.size()});
    }
    const int64_t tail = out_.stages[at(st)].params - blocks * per_block;
    if (tail > 0) out.push_back({stage_end_[at(st)], tail});
    return out;
  }

  // The reduce-scatters' ends per stage, plus the stage's optimizer step.
  std::vector<double> stepped(std::vector<double> ends) const {
    for (int st = 0; st < p_; ++st) ends[at(st)] += out_.stages[at(st)].optimizer_s;
    return ends;
  }

  // ZeRO 1 and 2: once a stage's gradients are reduce-scattered and its
  // shard stepped (`from`), its 16-bit weights are all-gathered, every group
  // at once. Per stage, when they are.
  // With overlap_param_gather only the first bucket's gather (the weights
  // of one gradient bucket, bucket_bytes / grad_bytes) stays in the step;
  // the rest hides behind the next step's forward.
  std::vector<double> gather_weights(const std::vector<double>& from) {
    std::vector<GroupRun> runs;
    for (int st = 0; st < p_; ++st)
      for (int j = 0; j < t_; ++j) {
        const int64_t params = out_.stages[at(st)].params;
        const int64_t count =
            s_.overlap_param_gather
                ? std::min(params, std::max<int64_t>(1, s_.bucket_bytes / s_.grad_bytes))
                : params;
        auto [it, fresh] = weight_gathers_.try_emplace(count);
        if (fresh)
          it->second = ring_all_gather_program(ring_shape(d_, count, ElementType::kFp32, {}));
        std::vector<int> gpus;
        for (int i = 0; i < d_; ++i) gpus.push_back(gpu(j, i, st));
        runs.push_back({&it->second, gpus, from[at(st)], static_cast<double>(s_.dtype_bytes)});
      }
    const std::vector<double> ends = run_groups(net_, runs);
    std::vector<double> stage_done(at(p_), 0.0);
    for (size_t k = 0; k < ends.size(); ++k) {
      double& done = stage_done[k / static_cast<size_t>(t_)];
      done = std::max(done, ends[k]);
    }
    return stage_done;
  }

  // The word embedding's two copies (first stage, and the head's on the
  // last) sum their gradients once the data-parallel sync is done: an
  // all-reduce of V·h/t fp32 gradients (simulate.grad_bytes) between the
  // first and the last stage's GPU of each TP rank and replica, every pair
  // at once (Megatron's embedding group). With ZeRO 1 and 2 Megatron runs it
  // before the optimizer step; after it here, the same sum of times.
  void sync_tied_embedding(std::vector<double>& synced) {
    const int64_t count = s_.model.vocab * s_.model.hidden / t_;
    if (count < 1) return;
    const double start = std::max(synced[0], synced[at(p_ - 1)]);
    tied_ =
        find_allreducer("ring").program_for(2, count, activation_allreduce_options(s_.allreduce));
    std::vector<GroupRun> runs;
    for (int i = 0; i < d_; ++i)
      for (int j = 0; j < t_; ++j)
        runs.push_back(
            {&tied_, {gpu(j, i, 0), gpu(j, i, p_ - 1)}, start, static_cast<double>(s_.grad_bytes)});
    double done = start;
    for (double end : run_groups(net_, runs)) done = std::max(done, end);
    out_.embedding_sync_s = done - start;
    synced[0] = synced[at(p_ - 1)] = done;
  }

  // Each stage's sync time from its last action to `synced`.
  void finish_sync(const std::vector<double>& synced) {
    for (int st = 0; st < p_; ++st) {
      StageTimes& times = out_.stages[at(st)];
      times.sync_s = std::max(synced[at(st)], times.end_s) - times.end_s;
      synced_ = std::max(synced_, synced[at(st)]);
    }
  }

  // The step ends when every stage has synced and stepped (ZeRO 1 and 2
  // step inside the sync); its FLOPs and their rate.
  StepResult finish_step() {
    const bool step_inside_sync = d_ > 1 && (s_.zero == 1 || s_.zero == 2);
    double done = std::max(out_.pipeline_s, synced_);
    for (const StageTimes& times : out_.stages)
      done =
          std::max(done, times.end_s + times.sync_s + (step_inside_sync ? 0.0 : times.optimizer_s));
    out_.step_s = done;
    out_.sync_exposed_s = done - out_.pipeline_s;
    out_.gpus = cluster_.gpus();
    out_.flops = step_flops(s_.model, s_.batch, s_.recompute);
    out_.tflops_per_gpu = out_.flops / (out_.step_s * out_.gpus) / 1e12;
    out_.model_flops = step_flops(s_.model, s_.batch, Recompute::kNone);
    out_.mfu = out_.model_flops / (out_.step_s * out_.gpus * cluster_.gpu.peak_flops);
    return out_;
  }

  const ClusterSpec& cluster_;
  const StepSpec& s_;
  const int p_, t_, d_;
  const GridShape grid_;
  const bool dedicated_ps_;
  const Network net_;
  const int64_t stream_;  // one micro-batch's residual stream [b, s, h]
  const pp::Schedule schedule_;
  // Seconds of one block's passes and the head's (price_actions).
  double block_f_ = 0, block_bi_ = 0, block_bw_ = 0, head_f_ = 0, head_bi_ = 0, head_bw_ = 0;
  double tp2_ = 0, again_s_ = 0, again_tp_ = 0, zero3_gather_ = 0, zero3_scatter_ = 0;
  double tp_back_ = 0;            // a block's TP communication in its input-gradient half
  double tp_ag_ = 0, tp_rs_ = 0;  // with sequence parallelism: one all-gather, one reduce-scatter
  // The embedding's passes: memory-bound kernels, and their TP collective.
  double emb_f_ = 0, emb_b_ = 0, emb_tp_f_ = 0, emb_tp_b_ = 0;
  double synced_ = 0;    // the last stage's sync is done
  double gather_s_ = 0;  // scatter/gather's all-gather after each transfer
  Program hop_;          // one activation from a stage's TP group to the next's
  Program tied_;         // the tied embedding's all-reduce between two stages
  std::map<std::pair<int, int>, std::vector<double>> transfers_;  // (from, to) -> [replica] s
  std::map<std::array<int, 3>, std::vector<int>> hop_links_;      // (replica, from, to) -> links
  std::map<std::array<int, 3>, std::vector<int>> hop_ports_;      // -> its egress, ingress port
  std::map<std::vector<int>, int> port_ids_;                      // a set of links -> its port
  std::vector<int> link_port_;                                    // [link] its port, -1: none
  bool ports_disjoint_ = true;                                    // no link in two ports
  std::vector<double> stage_end_;                                 // [stage] its last action ends
  std::vector<std::vector<pp::ActionSpan>> spans0_;               // replica 0's, per stage
  std::map<std::pair<int64_t, std::vector<int>>, Program> sync_programs_;
  std::map<int64_t, Program> weight_gathers_;
  StepResult out_;
};

}  // namespace

int64_t stage_params(const StepSpec& s, int stage) {
  const GptShape& g = s.model;
  const int p = s.pp;
  int64_t params = 0;
  for (int c = 0; c < s.chunks; ++c)  // virtual stage c·p + stage (pp::Schedule::virtual_stage)
    params += s.vstage_layers[static_cast<size_t>(c * p + stage)] * block_params(g);
  if (stage == 0) params += g.vocab * g.hidden + g.seq * g.hidden;
  if (stage == p - 1) params += 2 * g.hidden + (p > 1 ? g.vocab * g.hidden : 0);
  return params / s.tp;
}

StepResult simulate_step(const ClusterSpec& cluster, const StepSpec& spec) {
  check_step(spec, cluster);
  return StepSimulation(cluster, spec).run();
}

}  // namespace psar::sim
