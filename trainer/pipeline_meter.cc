#include "trainer/pipeline_meter.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <tuple>

#include "core/csv.h"
#include "core/errors.h"
#include "modelpar/pp/generators.h"
#include "modelpar/pp/simulate.h"

namespace psar {

namespace {

// One stage's measurements as exchanged over the pipeline group.
struct StageData {
  std::vector<double> start, end, compute;  // per step
  std::vector<char> measured;
  std::vector<double> action_mean;          // per action, schedule order
  std::vector<double> kept;                 // the last measured steps: per action start, end
  double recv_wait = 0, send = 0;           // means per measured step
  double peak = 0, peak_bytes = 0, peak_bytes_sim = 0;
};

std::vector<double> pack(const StageData& d) {
  std::vector<double> v{static_cast<double>(d.start.size()), static_cast<double>(d.action_mean.size()),
                        static_cast<double>(d.kept.size()), d.recv_wait, d.send, d.peak,
                        d.peak_bytes, d.peak_bytes_sim};
  for (size_t k = 0; k < d.start.size(); ++k)
    v.insert(v.end(), {d.start[k], d.end[k], d.compute[k], static_cast<double>(d.measured[k])});
  v.insert(v.end(), d.action_mean.begin(), d.action_mean.end());
  v.insert(v.end(), d.kept.begin(), d.kept.end());
  return v;
}

StageData unpack(const std::vector<std::byte>& bytes) {
  std::vector<double> v(bytes.size() / sizeof(double));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(double));
  StageData d;
  const auto steps = static_cast<size_t>(v.at(0)), actions = static_cast<size_t>(v.at(1)),
             kept = static_cast<size_t>(v.at(2));
  constexpr size_t kHead = 8;
  PSAR_CHECK(v.size() == kHead + 4 * steps + actions + kept, "malformed pipeline measurements");
  d.recv_wait = v[3];
  d.send = v[4];
  d.peak = v[5];
  d.peak_bytes = v[6];
  d.peak_bytes_sim = v[7];
  for (size_t k = 0; k < steps; ++k) {
    const double* r = &v[kHead + 4 * k];
    d.start.push_back(r[0]);
    d.end.push_back(r[1]);
    d.compute.push_back(r[2]);
    d.measured.push_back(r[3] != 0 ? 1 : 0);
  }
  const auto tail = v.begin() + static_cast<std::ptrdiff_t>(kHead + 4 * steps);
  d.action_mean.assign(tail, tail + static_cast<std::ptrdiff_t>(actions));
  d.kept.assign(tail + static_cast<std::ptrdiff_t>(actions), v.end());
  return d;
}

double ratio(double a, double b) { return b > 0 ? a / b : 0; }

using ActionIndex = std::map<std::tuple<int, int, int>, size_t>;  // (op, micro-batch, chunk) -> k

size_t index_of(const ActionIndex& index, pp::Op op, int microbatch, int chunk) {
  const auto it = index.find({static_cast<int>(op), microbatch, chunk});
  return it == index.end() ? SIZE_MAX : it->second;
}

// The median time from a producing action's end to its consumer's start, over
// the transfers the consumer had to wait for (it was idle when the producer
// ended), in the kept steps: the effective cost of one hop — posting the
// send, the transport, the receiver noticing it.
double median_hop_latency(const pp::Schedule& s, const std::vector<StageData>& all,
                          const std::vector<ActionIndex>& index) {
  std::vector<double> samples;
  for (int r = 0; r < s.stages; ++r) {
    const auto& actions = s.actions[static_cast<size_t>(r)];
    const size_t stride = 2 * actions.size();
    const size_t steps = all[static_cast<size_t>(r)].kept.size() / std::max<size_t>(1, stride);
    for (size_t k = 1; k < actions.size(); ++k) {
      const auto in = pp::input_of(s, r, actions[k]);
      if (!in || in->local()) continue;
      const auto& producer = index[static_cast<size_t>(in->from_stage)];
      const int chunk = s.chunk_of(in->from_vstage), i = in->microbatch;
      size_t kp = in->payload == pp::Payload::kActivation
                      ? index_of(producer, pp::Op::kForward, i, chunk)
                      : index_of(producer, pp::Op::kBackward, i, chunk);
      if (kp == SIZE_MAX) kp = index_of(producer, pp::Op::kBackwardInput, i, chunk);
      PSAR_CHECK(kp != SIZE_MAX, "no producer for ", pp::describe(*in));
      const size_t stride_q = 2 * s.actions[static_cast<size_t>(in->from_stage)].size();
      for (size_t j = 0; j < steps; ++j) {
        const double* mine = &all[static_cast<size_t>(r)].kept[j * stride];
        const double* theirs = &all[static_cast<size_t>(in->from_stage)].kept[j * stride_q];
        const double produced = theirs[2 * kp + 1], previous_end = mine[2 * k - 1];
        if (produced > previous_end) samples.push_back(mine[2 * k] - produced);
      }
    }
  }
  if (samples.empty()) return 0;
  std::nth_element(samples.begin(), samples.begin() + static_cast<std::ptrdiff_t>(samples.size() / 2),
                   samples.end());
  return std::max(0.0, samples[samples.size() / 2]);
}

}  // namespace

PipelineMeter::PipelineMeter(const pp::Schedule& schedule, int stage)
    : schedule_(schedule), stage_(stage),
      action_sum_(schedule.actions.at(static_cast<size_t>(stage)).size(), 0.0) {}

void PipelineMeter::add(const pp::StageRun& run, bool measured) {
  start_.push_back(run.start);
  end_.push_back(run.end);
  compute_.push_back(run.compute_s);
  measured_.push_back(measured ? 1 : 0);
  peak_ = std::max(peak_, run.peak_activations);
  peak_bytes_ = std::max(peak_bytes_, run.peak_activation_bytes);
  if (!measured) return;
  PSAR_CHECK(run.spans.size() == action_sum_.size(), "a stage ran ", run.spans.size(),
             " actions of ", action_sum_.size());
  for (size_t k = 0; k < run.spans.size(); ++k) action_sum_[k] += run.spans[k].end - run.spans[k].start;
  if (kept_.size() >= kKeptSteps * 2 * run.spans.size())
    kept_.erase(kept_.begin(), kept_.begin() + static_cast<std::ptrdiff_t>(2 * run.spans.size()));
  for (const auto& span : run.spans) kept_.insert(kept_.end(), {span.start, span.end});
  recv_wait_ += run.recv_wait_s;
  send_ += run.send_s;
  ++measured_steps_;
}

PipelineMeter::Summary PipelineMeter::write(Comm& pipeline, Comm& world, int dp_rank,
                                            int tp_rank, const pp::StageModel& model,
                                            const std::vector<int>& layers_per_stage,
                                            const std::string& out_dir) const {
  const pp::Schedule& s = schedule_;
  const int p = s.stages;
  const double n = std::max(1, measured_steps_);
  StageData mine{start_, end_, compute_, measured_, {}, kept_, recv_wait_ / n, send_ / n,
                 static_cast<double>(peak_), static_cast<double>(peak_bytes_),
                 static_cast<double>(pp::predicted_peak_bytes(s, stage_, model))};
  for (double t : action_sum_) mine.action_mean.push_back(t / n);
  const std::vector<double> packed = pack(mine);
  std::vector<StageData> all;
  for (const auto& part : pipeline.allgather_bytes(std::as_bytes(std::span<const double>(packed))))
    all.push_back(unpack(part));

  // Measured: per step, the pipeline phase spans the earliest start to the latest end.
  std::vector<double> idle(static_cast<size_t>(p), 0), busy(static_cast<size_t>(p), 0);
  double makespan = 0;
  for (size_t k = 0; k < all[0].start.size(); ++k) {
    if (!all[0].measured[k]) continue;
    double t0 = all[0].start[k], t1 = all[0].end[k];
    for (const auto& d : all) t0 = std::min(t0, d.start[k]), t1 = std::max(t1, d.end[k]);
    makespan += (t1 - t0) / n;
    for (size_t r = 0; r < all.size(); ++r) {
      idle[r] += (t1 - t0 - all[r].compute[k]) / n;
      busy[r] += all[r].compute[k] / n;
    }
  }

  // Predicted: the simulator at each action's measured mean duration.
  std::vector<std::map<std::tuple<int, int, int>, double>> cost(static_cast<size_t>(p));
  std::vector<ActionIndex> index(static_cast<size_t>(p));
  pp::CostModel stage_costs;  // per micro-batch, averaged over stages: for the closed form
  stage_costs.forward = stage_costs.backward_input = stage_costs.backward_weight = 0;
  for (int r = 0; r < p; ++r) {
    const auto& actions = s.actions[static_cast<size_t>(r)];
    for (size_t k = 0; k < actions.size(); ++k) {
      const pp::Action& a = actions[k];
      const double t = all[static_cast<size_t>(r)].action_mean[k];
      cost[static_cast<size_t>(r)][{static_cast<int>(a.op), a.microbatch, a.chunk}] = t;
      index[static_cast<size_t>(r)][{static_cast<int>(a.op), a.microbatch, a.chunk}] = k;
      const double share = t / (s.microbatches * p);
      if (a.op == pp::Op::kForward) stage_costs.forward += share;
      else if (a.op == pp::Op::kBackwardWeight) stage_costs.backward_weight += share;
      else stage_costs.backward_input += share;
    }
  }
  const auto measured_cost = [&](int r, const pp::Action& a) {
    return cost[static_cast<size_t>(r)].at({static_cast<int>(a.op), a.microbatch, a.chunk});
  };
  const pp::Prediction sim = pp::simulate_costs(s, measured_cost);
  const double hop = median_hop_latency(s, all, index);
  const pp::Prediction sim_hop = pp::simulate_costs(s, measured_cost, hop);
  const double formula =
      pp::find_schedule(s.kind).bubble({p, s.microbatches, s.chunks, 0}, stage_costs);

  Summary sum;
  double total_idle = 0, total_busy = 0;
  for (size_t r = 0; r < idle.size(); ++r) total_idle += idle[r], total_busy += busy[r];
  sum.bubble = ratio(total_idle, total_busy);
  sum.idle_share = ratio(total_idle, p * makespan);
  sum.bubble_sim = sim.bubble_fraction;
  sum.idle_share_sim = sim.idle_share;
  sum.bubble_formula = formula;
  sum.hop_latency = hop;
  sum.bubble_sim_hop = sim_hop.bubble_fraction;

  // Rows: this stage's, and on stage 0 the pipeline's ("all").
  struct Row {
    std::string stage;
    int layers = 0;
    double compute = 0, idle = 0, bubble = 0, share = 0, bubble_sim = 0, share_sim = 0;
    double peak = 0, peak_sim = 0, bytes = 0, bytes_sim = 0, recv = 0, send = 0;
    double bubble_sim_hop = 0;
  };
  const auto line = [&](const Row& r) {
    std::vector<std::string> f{s.kind, CsvWriter::num(p), CsvWriter::num(s.microbatches),
                               CsvWriter::num(s.chunks), CsvWriter::num(dp_rank), r.stage,
                               CsvWriter::num(r.layers)};
    for (double x : {r.compute, r.idle, makespan, r.bubble, r.share, r.bubble_sim, r.share_sim,
                     formula, r.peak, r.peak_sim, r.bytes, r.bytes_sim, r.recv, r.send, hop,
                     r.bubble_sim_hop, n})
      f.push_back(CsvWriter::num(x));
    std::string text;
    for (const auto& x : f) {
      if (!text.empty()) text += ',';
      text += x;
    }
    text += '\n';
    return text;
  };
  const auto me = static_cast<size_t>(stage_);
  std::string rows = line({std::to_string(stage_), layers_per_stage[me], busy[me], idle[me],
                           ratio(idle[me], busy[me]), ratio(idle[me], makespan),
                           ratio(sim.idle[me], sim.busy[me]), ratio(sim.idle[me], sim.makespan),
                           mine.peak, static_cast<double>(sim.peak_activations[me]),
                           mine.peak_bytes, mine.peak_bytes_sim, mine.recv_wait, mine.send,
                           ratio(sim_hop.idle[me], sim_hop.busy[me])});
  if (stage_ == 0) {
    Row all_row{"all", 0, total_busy / p, total_idle / p, sum.bubble, sum.idle_share,
                sum.bubble_sim, sum.idle_share_sim};
    for (const auto& d : all) {
      all_row.peak = std::max(all_row.peak, d.peak);
      all_row.bytes = std::max(all_row.bytes, d.peak_bytes);
      all_row.bytes_sim = std::max(all_row.bytes_sim, d.peak_bytes_sim);
      all_row.recv += d.recv_wait / p;
      all_row.send += d.send / p;
    }
    for (int l : layers_per_stage) all_row.layers += l;
    all_row.peak_sim = *std::max_element(sim.peak_activations.begin(), sim.peak_activations.end());
    all_row.bubble_sim_hop = sim_hop.bubble_fraction;
    rows += line(all_row);
  }
  if (tp_rank != 0) rows.clear();  // a TP group's ranks ran the same actions: one reports
  const auto gathered = world.allgather_bytes(std::as_bytes(std::span<const char>(rows)));
  if (world.rank() == 0 && !out_dir.empty()) {
    std::vector<std::string> lines;
    for (const auto& part : gathered) {
      std::string text(reinterpret_cast<const char*>(part.data()), part.size());
      for (size_t at = 0; at < text.size();) {
        const size_t nl = text.find('\n', at);
        lines.push_back(text.substr(at, nl - at + 1));
        at = nl + 1;
      }
    }
    // By replica, then stage, the pipeline's row last.
    const auto key = [](const std::string& line) {
      std::vector<std::string> f;
      for (size_t at = 0, i = 0; i < 6; ++i) {
        const size_t comma = line.find(',', at);
        f.push_back(line.substr(at, comma - at));
        at = comma + 1;
      }
      return std::make_pair(std::stoi(f[4]), f[5] == "all" ? 1 << 30 : std::stoi(f[5]));
    };
    std::stable_sort(lines.begin(), lines.end(),
                     [&](const auto& a, const auto& b) { return key(a) < key(b); });
    std::string csv =
        "schedule,p,m,v,dp,stage,layers,compute_s,idle_s,makespan_s,bubble,idle_share,bubble_sim,"
        "idle_share_sim,bubble_formula,peak_activations,peak_activations_sim,peak_bytes,"
        "peak_bytes_sim,recv_wait_s,send_s,hop_latency_s,bubble_sim_hop,steps\n";
    for (const auto& l : lines) csv += l;
    write_file_atomic(out_dir + "/pipeline.csv", csv);
  }
  return sum;
}

}  // namespace psar
