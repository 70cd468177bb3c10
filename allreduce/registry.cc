#include "allreduce/allreducer.h"

#include "allreduce/algorithms.h"
#include "core/errors.h"

namespace psar {

namespace {
// Adding an algorithm: its own file, one line here, one row in docs/algorithms.md.
constexpr AllreducerEntry kRegistry[] = {
    {"mpi", &make_mpi_allreducer, "MPI_Allreduce of the MPI library (the measured peer)"},
};
}  // namespace

std::span<const AllreducerEntry> allreducer_registry() { return kRegistry; }

std::vector<std::string> allreducer_names() {
  std::vector<std::string> names;
  for (const auto& e : kRegistry) names.push_back(e.name);
  return names;
}

std::unique_ptr<Allreducer> make_allreducer(const std::string& name,
                                            const AllreduceOptions& options) {
  for (const auto& e : kRegistry)
    if (name == e.name) return e.make(options);
  std::string known;
  for (const auto& e : kRegistry) known += (known.empty() ? "" : ", ") + std::string(e.name);
  throw ConfigError("unknown allreduce algorithm '" + name + "' (known: " + known + ")");
}

}  // namespace psar
