#pragma once
// `auto`: the allreduce a tuning table predicts fastest, chosen per call by
// world size and message size (NCCL's tuning model: a cost table with an
// override — here the override is naming the algorithm, --sync ring).
//
// The table (`psar tune` writes it on the machine, the emulated network or
// the virtual cluster; docs/algorithms.md, "Tuning") holds measured times:
// CSV `ranks,algo,bytes,time_us`. A prediction for (algorithm, p, n):
// at a measured size, the measured time; between two, the time interpolated
// linearly in log(n)–log(t); beyond the ends, the nearest two measured points
// extended linearly in n (t = a + b·n: α-β). An algorithm is a candidate for
// p ranks when the table has at least two sizes of it at p.

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "allreduce/allreducer.h"

namespace psar {

class TuningTable {
 public:
  // ConfigError naming the file and line for a missing or malformed table.
  static TuningTable load(const std::string& path);
  void add(int ranks, const std::string& algo, int64_t bytes, double seconds);

  // Candidates for p ranks, in the table's order.
  std::vector<std::string> algos(int ranks) const;
  double predict(const std::string& algo, int ranks, int64_t bytes) const;
  // The candidate with the lowest prediction; ConfigError if p was not tuned.
  std::string best(int ranks, int64_t bytes) const;
  std::string source() const { return source_; }

 private:
  std::string source_ = "(in memory)";
  std::vector<std::string> order_;  // algorithms as first seen
  std::map<std::pair<int, std::string>, std::map<int64_t, double>> times_;  // (p, algo) -> n -> t
};

class TunedAllreducer final : public Allreducer {
 public:
  TunedAllreducer(TuningTable table, const AllreduceOptions& options);
  std::string name() const override { return "auto"; }
  void allreduce(Comm& comm, std::span<float> data) override;
  // Calls per algorithm chosen so far.
  const std::map<std::string, int64_t>& choices() const { return calls_; }

 private:
  TuningTable table_;
  AllreduceOptions options_;
  std::map<std::string, std::unique_ptr<Allreducer>> algorithms_;
  std::map<std::pair<int, int64_t>, std::string> decided_;  // (p, bytes) -> algorithm
  std::map<std::string, int64_t> calls_;
};

}  // namespace psar
