#include "trainer/run_common.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <numeric>

#include "core/errors.h"
#include "core/rng.h"
#include "trainer/agreement.h"

namespace psar {

std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  const uint64_t stream = fnv1a("shuffle") + static_cast<uint64_t>(epoch);
  for (int64_t i = n - 1; i > 0; --i) {
    const auto b = Philox::block(seed, stream, static_cast<uint64_t>(i));
    const uint64_t r = (uint64_t{b[0]} << 32 | b[1]) % static_cast<uint64_t>(i + 1);
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(r)]);
  }
  return order;
}

bool StepPlan::eval_after(int64_t step) const {
  const bool epoch_end = step % steps_per_epoch == 0;
  return (eval_every > 0 && step % eval_every == 0) || (eval_every <= 0 && epoch_end) ||
         step == total_steps;
}

StepPlan plan_steps(const StepOptions& o, int64_t train_samples) {
  StepPlan p;
  p.batch_size = o.batch_size;
  if (p.batch_size > train_samples)
    throw ConfigError("train.batch_size " + std::to_string(p.batch_size) + " exceeds the " +
                      std::to_string(train_samples) + " training samples");
  p.steps_per_epoch = train_samples / p.batch_size;
  p.total_steps = o.has_steps ? o.steps
                              : static_cast<int64_t>(std::ceil(o.epochs * p.steps_per_epoch));
  if (p.total_steps <= 0) throw ConfigError("train.steps/epochs must give at least one step");
  p.log_every = o.log_every;
  p.eval_every = o.eval_every;
  return p;
}

void for_each_eval_batch(const Dataset& test, int rank, int ranks,
                         const std::function<void(const Batch&)>& fn) {
  const int64_t n = test.size();
  const int64_t lo = n * rank / ranks, hi = n * (rank + 1) / ranks;
  constexpr int64_t kRows = 1000;
  Batch batch;
  std::vector<int64_t> rows;
  for (int64_t start = lo; start < hi; start += kRows) {
    rows.resize(static_cast<size_t>(std::min(kRows, hi - start)));
    std::iota(rows.begin(), rows.end(), start);
    test.gather(rows, batch);
    fn(batch);
  }
}

EvalStats sum_eval(Comm& comm, EvalStats mine) {
  mine.loss_sum = comm.allreduce_sum(mine.loss_sum);
  mine.correct = static_cast<int64_t>(comm.allreduce_sum(static_cast<double>(mine.correct)));
  mine.count = static_cast<int64_t>(comm.allreduce_sum(static_cast<double>(mine.count)));
  return mine;
}

namespace {

std::string hms(double s) {
  char buf[32];
  const long t = std::lround(std::max(0.0, s));
  if (t >= 3600) std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  else std::snprintf(buf, sizeof buf, "%ld:%02ld", t / 60, t % 60);
  return buf;
}

}  // namespace

void print_progress(const StepPlan& plan, int64_t step, double mean_loss, double test_accuracy,
                    double train_time, int64_t first_step) {
  const auto taken = static_cast<double>(step + 1 - first_step);
  const double sps = static_cast<double>(plan.batch_size) * taken / train_time;
  const double eta = train_time / taken * static_cast<double>(plan.total_steps - step - 1);
  char acc[16] = "-";
  if (test_accuracy >= 0) std::snprintf(acc, sizeof acc, "%.2f%%", 100.0 * test_accuracy);
  std::printf("epoch %ld  step %ld/%ld  loss %.4f  acc %s  %.0f samples/s  ETA %s\n",
              static_cast<long>(step / plan.steps_per_epoch + 1), static_cast<long>(step + 1),
              static_cast<long>(plan.total_steps), mean_loss, acc, sps, hms(eta).c_str());
  std::fflush(stdout);
}

void print_eval(int64_t step, double test_loss, double test_accuracy) {
  std::printf("eval  step %ld  test_loss %.4f  test_accuracy %.2f%%\n", static_cast<long>(step),
              test_loss, 100.0 * test_accuracy);
}

namespace {

namespace fs = std::filesystem;

// What makes a directory a psar run (docs/outputs.md): "" when none is there.
std::string run_files_in(const fs::path& dir) {
  std::string found;
  for (const char* f : {"config.yaml", "steps.csv", "summary.csv", "checkpoints"})
    if (fs::exists(dir / f)) found += (found.empty() ? "" : ", ") + std::string(f);
  return found;
}

// World rank 0's part of prepare_run_dir: "" when the run may start there
// (after clearing it with --overwrite), else why not.
std::string claim_run_dir(const TrainOptions& o) {
  const fs::path out(o.out_dir);
  if (!fs::exists(out)) return "";
  if (!fs::is_directory(out)) return "--out " + o.out_dir + " is a file, not a directory";
  if (!o.resume_from.empty() && absolute_run_dir(o.resume_from) == absolute_run_dir(o.out_dir))
    return "";  // the run continues in place
  if (fs::is_empty(out)) return "";
  const std::string files = run_files_in(out);
  if (files.empty())
    return "--out " + o.out_dir +
           " holds files that are not a psar run (no config.yaml, steps.csv, summary.csv or "
           "checkpoints/); choose a new or empty directory (--overwrite clears runs only)";
  if (!o.overwrite)
    return "--out " + o.out_dir + " already holds a run (" + files + "); pass --overwrite to " +
           "replace it, --resume " + o.out_dir + " to continue it, or choose another --out";
  for (const auto& e : fs::directory_iterator(out)) fs::remove_all(e.path());
  return "";
}

}  // namespace

void prepare_run_dir(Comm& world, const TrainOptions& options) {
  if (options.out_dir.empty()) return;
  std::string refusal;
  if (world.rank() == 0) {
    try {
      refusal = claim_run_dir(options);
    } catch (const std::exception& e) {
      refusal = "--out " + options.out_dir + ": " + e.what();
    }
  }
  // Rank 0's verdict on every rank (an all-gather: its size is not known).
  const auto all = world.allgather_bytes(std::as_bytes(std::span<const char>(refusal)));
  refusal.assign(reinterpret_cast<const char*>(all[0].data()), all[0].size());
  if (!refusal.empty()) throw agreed(ConfigError(refusal));
}

void begin_run_files(Comm& workers, const std::string& config_text, const std::string& out_dir) {
  if (workers.rank() != 0 || out_dir.empty()) return;
  make_dirs(out_dir);
  write_file_atomic(out_dir + "/config.yaml", config_text);
}

namespace {

const std::vector<std::string> kSummaryHeader = {
    "experiment", "sync",          "world_size", "steps",     "epochs",     "final_loss",
    "test_accuracy", "wall_s",     "samples_per_s", "device", "nccl_algo", "nccl_proto",
    "network",    "status"};

}  // namespace

void write_run_end(Comm& workers, Comm& world, const RunEnd& end, const TrainResult& result,
                   const Tracer& tracer) {
  const bool write = workers.rank() == 0 && !end.out_dir.empty();
  if (write) {
    const RecordOptions& r = end.records;
    CsvWriter summary(kSummaryHeader);
    summary.row({r.experiment, end.sync, CsvWriter::num(world.size()),
                 CsvWriter::num(result.steps), CsvWriter::num(result.epochs),
                 CsvWriter::num(result.final_loss), CsvWriter::num(result.test_accuracy),
                 CsvWriter::num(result.wall_s), CsvWriter::num(result.samples_per_s),
                 r.device, r.nccl_algo, r.nccl_proto, end.network, result.status});
    summary.write(end.out_dir + "/summary.csv");
  }
  if (tracer.enabled()) {
    const std::string mine_trace = tracer.events_json(workers.rank());
    const auto traces = workers.allgather_bytes(std::as_bytes(std::span<const char>(mine_trace)));
    if (write) {
      std::vector<std::string> parts;
      for (const auto& t : traces)
        parts.emplace_back(reinterpret_cast<const char*>(t.data()), t.size());
      write_file_atomic(end.out_dir + "/trace.json", Tracer::document(parts));
    }
  }
}

void write_error_summary(const RunEnd& end, int world_size, int64_t steps_done,
                         const std::string& what) {
  if (end.out_dir.empty()) return;
  try {
    const RecordOptions& r = end.records;
    CsvWriter summary(kSummaryHeader);
    summary.row({r.experiment, end.sync, CsvWriter::num(world_size), CsvWriter::num(steps_done),
                 "", "", "", "", "", r.device, r.nccl_algo, r.nccl_proto,
                 end.network, "error: " + what});
    summary.write(end.out_dir + "/summary.csv");
  } catch (const std::exception&) {
    // The error being reported matters more than its summary line.
  }
}

}  // namespace psar
