#include "trainer/step_log.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/errors.h"

namespace psar {

const char* const kStepsCsvHeader =
    "rank,step,epoch,loss,step_s,compute_s,sync_s,bytes_sent,bytes_recv,messages,exposed_sync_s,injected_s,pushes_dropped,workers,"
    "sequence_parallel,recompute\n";

namespace {

// Every rank's `mine`, concatenated in rank order (on every rank).
std::string gathered(Comm& workers, const std::string& mine) {
  std::string out;
  for (const auto& part : workers.allgather_bytes(std::as_bytes(std::span<const char>(mine))))
    out.append(reinterpret_cast<const char*>(part.data()), part.size());
  return out;
}

// `path` started with `header` and, for a resumed run, the complete rows of
// `from` (the same file, or the resumed run's) whose column `step_column`
// (0-based) is at most `last_step`.
void start_file(const std::string& path, const std::string& from, const std::string& header,
                int step_column, int64_t last_step) {
  std::string kept = header;
  std::ifstream in(from);
  if (in && last_step >= 0) {
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string text = ss.str();
    size_t pos = text.find('\n');  // past the header
    while (pos != std::string::npos && pos + 1 < text.size()) {
      const size_t end = text.find('\n', pos + 1);
      if (end == std::string::npos) break;  // a line cut short by a kill
      const std::string line = text.substr(pos + 1, end - pos - 1);
      size_t field = 0;
      for (int c = 0; c < step_column && field != std::string::npos; ++c) {
        field = line.find(',', field);
        if (field != std::string::npos) ++field;
      }
      if (field != std::string::npos && std::atoll(line.c_str() + field) <= last_step)
        kept += line + "\n";
      pos = end;
    }
  }
  write_file_atomic(path, kept);
}

}  // namespace

StepLog::StepLog(Comm& workers, Comm& pipeline, const GridShape& shape, const GridCoord& coord,
                 StepLogOptions options)
    : workers_(workers),
      pipeline_(pipeline),
      shape_(shape),
      coord_(coord),
      options_(std::move(options)) {
  if (workers_.rank() != 0 || options_.out_dir.empty()) return;
  const std::string& d = options_.out_dir;
  const std::string& from = options_.resume_from.empty() ? d : options_.resume_from;
  const int64_t last = options_.resume_step;
  start_file(d + "/steps.csv", from + "/steps.csv", kStepsCsvHeader, 1, last);
  start_file(d + "/axes.csv", from + "/axes.csv", kAxesCsvHeader, 4, last);
  if (options_.tp_csv) start_file(d + "/tp.csv", from + "/tp.csv", kTpCsvHeader, 3, last);
  start_file(d + "/eval.csv", from + "/eval.csv", evals_.header(), 0, last);
}

void StepLog::add(const StepRow& row, const AxisRow& axis) {
  rows_.push_back(row);
  axes_.push_back(axis);
}

void StepLog::add_eval(int64_t step, double epoch, double test_loss, double test_accuracy) {
  evals_.row({CsvWriter::num(step), CsvWriter::num(epoch), CsvWriter::num(test_loss),
              CsvWriter::num(test_accuracy)});
}

void StepLog::flush() {
  // The replica's loss lives on its last stage: every stage's rows carry it.
  std::vector<double> mine(rows_.size());
  for (size_t k = 0; k < rows_.size(); ++k) mine[k] = rows_[k].loss;
  const auto losses = pipeline_.allgather_bytes(std::as_bytes(std::span<const double>(mine)));
  PSAR_CHECK(losses.back().size() == mine.size() * sizeof(double),
             "pipeline stages flushed different step counts");
  std::memcpy(mine.data(), losses.back().data(), mine.size() * sizeof(double));
  losses_.insert(losses_.end(), mine.begin(), mine.end());

  std::string steps, axes, tp;
  for (size_t k = 0; k < rows_.size(); ++k) {
    const StepRow& r = rows_[k];
    char buf[352];
    std::snprintf(buf, sizeof buf,
                  "%d,%ld,%.6f,%.9g,%.9g,%.9g,%.9g,%ld,%ld,%ld,%.9g,%.17g,%ld,%d,%d,%s\n",
                  workers_.rank(), static_cast<long>(r.step), r.epoch, mine[k], r.step_s,
                  r.compute_s, r.sync_s, static_cast<long>(r.bytes_sent),
                  static_cast<long>(r.bytes_recv), static_cast<long>(r.messages),
                  r.exposed_sync_s, r.injected_s, static_cast<long>(r.pushes_dropped), r.workers,
                  options_.sequence_parallel ? 1 : 0, recompute_name(options_.recompute));
    steps += buf;
    axes += axes_csv_row(workers_.rank(), coord_, axes_[k]);
    if (options_.tp_csv) tp += tp_csv_row(workers_.rank(), shape_, coord_, axes_[k]);
  }
  rows_.clear();
  axes_.clear();
  const std::string all_steps = gathered(workers_, steps);
  const std::string all_axes = gathered(workers_, axes);
  const std::string all_tp = options_.tp_csv ? gathered(workers_, tp) : std::string();
  const std::string evals = evals_.take_new_rows();
  if (workers_.rank() != 0 || options_.out_dir.empty()) return;
  const std::string& d = options_.out_dir;
  if (!all_steps.empty()) append_file_durable(d + "/steps.csv", all_steps);
  if (!all_axes.empty()) append_file_durable(d + "/axes.csv", all_axes);
  if (!all_tp.empty()) append_file_durable(d + "/tp.csv", all_tp);
  if (!evals.empty()) append_file_durable(d + "/eval.csv", evals);
}

}  // namespace psar
