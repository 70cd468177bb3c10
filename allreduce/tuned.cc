#include "allreduce/tuned.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include "core/errors.h"
#include "core/log.h"

namespace psar {

using psar::detail::concat;

TuningTable TuningTable::load(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ConfigError("sync.tuning: cannot open the tuning table '" + path +
                             "' (write one with psar tune)");
  TuningTable t;
  t.source_ = path;
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (number == 1) {
      if (line != "ranks,algo,bytes,time_us")
        throw ConfigError(concat("sync.tuning: ", path, ": the header is not "
                                 "'ranks,algo,bytes,time_us' but '", line, "'"));
      continue;
    }
    if (line.empty()) continue;
    std::stringstream ss(line);
    std::string ranks, algo, bytes, us;
    std::getline(ss, ranks, ',');
    std::getline(ss, algo, ',');
    std::getline(ss, bytes, ',');
    std::getline(ss, us, ',');
    try {
      t.add(std::stoi(ranks), algo, std::stoll(bytes), std::stod(us) * 1e-6);
    } catch (const std::exception&) {
      throw ConfigError(concat("sync.tuning: ", path, " line ", number, ": '", line,
                               "' is not ranks,algo,bytes,time_us"));
    }
  }
  return t;
}

void TuningTable::add(int ranks, const std::string& algo, int64_t bytes, double seconds) {
  if (ranks < 1 || bytes < 1 || !(seconds > 0))
    throw ConfigError(concat("tuning table: a row needs ranks >= 1, bytes >= 1 and a positive "
                             "time, got ", ranks, ", ", bytes, ", ", seconds));
  if (std::find(order_.begin(), order_.end(), algo) == order_.end()) order_.push_back(algo);
  times_[{ranks, algo}][bytes] = seconds;
}

std::vector<std::string> TuningTable::algos(int ranks) const {
  std::vector<std::string> out;
  for (const auto& a : order_) {
    const auto it = times_.find({ranks, a});
    if (it != times_.end() && it->second.size() >= 2) out.push_back(a);
  }
  return out;
}

double TuningTable::predict(const std::string& algo, int ranks, int64_t bytes) const {
  const auto& t = times_.at({ranks, algo});
  const auto x = static_cast<double>(std::max<int64_t>(bytes, 1));
  auto hi = t.lower_bound(bytes);
  if (hi != t.end() && hi->first == bytes) return hi->second;
  if (hi == t.begin() || hi == t.end()) {  // beyond an end: α + β·n through the two nearest
    auto a = hi == t.begin() ? t.begin() : std::prev(t.end(), 2);
    auto b = std::next(a);
    const double slope = (b->second - a->second) / static_cast<double>(b->first - a->first);
    return std::max(1e-9, a->second + slope * (x - static_cast<double>(a->first)));
  }
  const auto lo = std::prev(hi);
  const double f = (std::log(x) - std::log(static_cast<double>(lo->first))) /
                   (std::log(static_cast<double>(hi->first)) -
                    std::log(static_cast<double>(lo->first)));
  return std::exp(std::log(lo->second) + f * (std::log(hi->second) - std::log(lo->second)));
}

std::string TuningTable::best(int ranks, int64_t bytes) const {
  const auto candidates = algos(ranks);
  if (candidates.empty()) {
    std::string tuned;
    for (const auto& [key, _] : times_)
      if (tuned.find(std::to_string(key.first) + " ") == std::string::npos)
        tuned += std::to_string(key.first) + " ";
    throw ConfigError(concat("sync.backend auto: the tuning table ", source_, " has no ", ranks,
                             "-rank rows (tuned for: ", tuned.empty() ? "none" : tuned,
                             "ranks); run psar tune with ", ranks, " ranks"));
  }
  std::string best;
  double fastest = std::numeric_limits<double>::infinity();
  for (const auto& a : candidates)
    if (const double t = predict(a, ranks, bytes); t < fastest) fastest = t, best = a;
  return best;
}

TunedAllreducer::TunedAllreducer(TuningTable table, const AllreduceOptions& options)
    : table_(std::move(table)), options_(options) {}

void TunedAllreducer::allreduce(Comm& comm, std::span<float> data) {
  const auto bytes = static_cast<int64_t>(data.size() * sizeof(float));
  auto key = std::make_pair(comm.size(), bytes);
  auto it = decided_.find(key);
  if (it == decided_.end()) {
    const std::string algo = table_.best(comm.size(), std::max<int64_t>(bytes, 1));
    PSAR_LOG(kInfo, "auto", comm.size() << " ranks, " << bytes << " bytes: " << algo
                                        << " (predicted "
                                        << table_.predict(algo, comm.size(), std::max<int64_t>(bytes, 1)) * 1e6
                                        << " us, " << table_.source() << ")");
    it = decided_.emplace(key, algo).first;
    if (!algorithms_.count(algo)) algorithms_[algo] = make_allreducer(algo, options_);
  }
  ++calls_[it->second];
  algorithms_.at(it->second)->allreduce(comm, data);
}

}  // namespace psar
