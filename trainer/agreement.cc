#include "trainer/agreement.h"

#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/errors.h"
#include "core/checkpoint.h"

namespace psar {

namespace {

// Every rank's `mine`, as text, in rank order.
std::vector<std::string> gather_text(Comm& world, const std::string& mine) {
  std::vector<std::string> out;
  for (const auto& part : world.allgather_bytes(std::as_bytes(std::span<const char>(mine))))
    out.emplace_back(reinterpret_cast<const char*>(part.data()), part.size());
  return out;
}

// A rank's identity: "version\nbackend\nrun directory\ndigest\n".
struct Identity {
  std::string version, backend, out_dir, digest;
};

std::string identity(const ConfigRecord& config, const std::string& out_dir) {
  const auto backend = config.values.find("sync.backend");
  return std::string(psar_version()) + "\n" +
         (backend == config.values.end() ? "" : backend->second) + "\n" + out_dir + "\n" +
         std::to_string(config.digest) + "\n";
}

Identity parse(const std::string& text) {
  Identity p;
  std::istringstream in(text);
  std::getline(in, p.version);
  std::getline(in, p.backend);
  std::getline(in, p.out_dir);
  std::getline(in, p.digest);
  return p;
}

// ConfigRecord::values_text() back into its map.
std::map<std::string, std::string> parse_values(const std::string& text) {
  std::map<std::string, std::string> values;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const auto tab = line.find('\t');
    if (tab != std::string::npos) values[line.substr(0, tab)] = line.substr(tab + 1);
  }
  return values;
}

[[noreturn]] void disagree(int rank, const std::string& what) {
  throw agreed(ConfigError("start-up agreement: rank " + std::to_string(rank) + " differs from rank 0 " +
                    what +
                    "; every rank of a job must run the same psar with the same "
                    "configuration (check each rank's command line and --set)"));
}

}  // namespace

std::string absolute_run_dir(const std::string& out_dir) {
  if (out_dir.empty()) return out_dir;
  std::error_code ec;
  const auto p = std::filesystem::weakly_canonical(std::filesystem::absolute(out_dir, ec), ec);
  return ec ? out_dir : p.string();
}

void check_agreement(Comm& world, const ConfigRecord& config, const std::string& out_dir) {
  const auto records = gather_text(world, identity(config, absolute_run_dir(out_dir)));
  const Identity first = parse(records[0]);
  for (size_t r = 1; r < records.size(); ++r) {
    if (records[r] == records[0]) continue;
    const Identity other = parse(records[r]);
    const int rank = static_cast<int>(r);
    const std::string me = "rank " + std::to_string(rank);
    if (other.version != first.version)
      disagree(rank, "in the psar version: " + first.version + " on rank 0, " + other.version +
                         " on " + me);
    if (other.backend != first.backend)
      disagree(rank, "in the sync backend (sync.backend): " + first.backend + " on rank 0, " +
                         other.backend + " on " + me);
    if (other.out_dir != first.out_dir)
      disagree(rank, "in the run directory (--out): '" + first.out_dir + "' on rank 0, '" +
                         other.out_dir + "' on " + me);
    // The digests differ: every rank saw the same identities and gets here
    // at the same r, so all of them take the values that name the keys.
    const auto values = gather_text(world, config.values_text());
    const std::string keys =
        config_differences(parse_values(values[0]), parse_values(values[r]), "rank 0", me);
    disagree(rank, "in the configuration: " + (keys.empty() ? "(its digest)" : keys));
  }
}

void check_parameter_counts(Comm& world, int slice, int64_t params) {
  const auto records = gather_text(world, std::to_string(slice) + " " + std::to_string(params));
  std::map<int, std::pair<int, int64_t>> first;  // slice -> (rank, params)
  for (size_t r = 0; r < records.size(); ++r) {
    std::istringstream in(records[r]);
    int s = 0;
    int64_t n = 0;
    in >> s >> n;
    const auto it = first.find(s);
    if (it == first.end()) {
      first[s] = {static_cast<int>(r), n};
      continue;
    }
    if (it->second.second != n)
      throw agreed(ConfigError("start-up agreement: rank " + std::to_string(r) + " holds " +
                        std::to_string(n) + " parameters in its model slice, rank " +
                        std::to_string(it->second.first) + " holds " +
                        std::to_string(it->second.second) + " in the same slice (parameter count)"));
  }
}

}  // namespace psar
