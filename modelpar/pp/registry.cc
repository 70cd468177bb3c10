// The registry of pipeline schedule generators, and the checks they share.

#include <algorithm>
#include <iterator>

#include "core/errors.h"
#include "modelpar/pp/generators.h"

namespace psar::pp {

using psar::detail::concat;

namespace {
// Adding a schedule: its own file, one line here, one section in docs/pipeline.md.
constexpr ScheduleEntry kBuiltin[] = {
    {"gpipe", &gpipe, &gpipe_bubble, &gpipe_peak, "(p-1)/m",
     "all forwards, then all backwards (Huang et al. 2019)", kGpipeCaps},
    {"1f1b", &one_f_one_b, &one_f_one_b_bubble, &one_f_one_b_peak, "(p-1)/m",
     "warm-up of p-r-1 forwards, then one forward, one backward", kOneFOneBCaps},
    {"interleaved", &interleaved, &interleaved_bubble, &interleaved_peak, "(p-1)/(v*m)",
     "Megatron's interleaved 1F1B over v chunks per stage", kInterleavedCaps},
    {"zb_h1", &zb_h1, &zb_h1_bubble, &zb_h1_peak, "(p-1)(tf+tb-min(tf,tb,tw))/(m(tf+tb+tw))",
     "zero-bubble H1: split backward, weight gradients fill the bubbles", kZbH1Caps},
};
std::vector<ScheduleEntry>& entries() {
  static std::vector<ScheduleEntry> all(std::begin(kBuiltin), std::end(kBuiltin));
  return all;
}
}  // namespace

std::span<const ScheduleEntry> schedule_registry() { return entries(); }

std::vector<std::string> schedule_names() {
  std::vector<std::string> names;
  for (const auto& e : entries()) names.push_back(e.name);
  return names;
}

ScheduleRegistration::ScheduleRegistration(const ScheduleEntry& entry) : name_(entry.name) {
  for (const auto& e : entries())
    if (name_ == e.name) throw ConfigError("pipeline schedule '" + name_ + "' is registered already");
  entries().push_back(entry);
}

ScheduleRegistration::~ScheduleRegistration() {
  auto& all = entries();
  all.erase(std::remove_if(all.begin(), all.end(),
                           [&](const ScheduleEntry& e) { return name_ == e.name; }),
            all.end());
}

const ScheduleEntry& find_schedule(std::string_view name) {
  for (const auto& e : entries())
    if (name == e.name) return e;
  std::string known;
  for (const auto& e : entries()) known += (known.empty() ? "" : ", ") + std::string(e.name);
  throw ConfigError("unknown pipeline schedule '" + std::string(name) + "' (known: " + known + ")");
}

Schedule make_schedule(std::string_view name, const ScheduleShape& shape) {
  return find_schedule(name).make(shape);
}

bool admits(const ScheduleCaps& caps, const ScheduleShape& shape) {
  try {
    detail::check_shape("", shape, caps);
    return true;
  } catch (const ConfigError&) {
    return false;
  }
}

namespace detail {

constexpr long long kMaxWork = 1 << 22;  // p·v·m; tags are 2·p·v·m < 2^24

void check_shape(const char* kind, const ScheduleShape& s, const ScheduleCaps& caps) {
  const auto shape = [&] {
    return concat(kind, " (p=", s.stages, ", m=", s.microbatches, ", v=", s.chunks, ")");
  };
  if (s.stages < 1) throw ConfigError(concat(shape(), ": needs at least 1 stage"));
  if (s.microbatches < 1) throw ConfigError(concat(shape(), ": needs at least 1 micro-batch"));
  if (s.chunks < 1) throw ConfigError(concat(shape(), ": needs at least 1 chunk per stage"));
  if (s.chunks > caps.max_chunks)
    throw ConfigError(concat(shape(), ": runs one chunk per stage; use 'interleaved' for v > 1"));
  // Every transfer needs a tag of its own below the control plane's (p2p.h).
  if (static_cast<long long>(s.stages) * s.chunks * s.microbatches > kMaxWork)
    throw ConfigError(concat(shape(), ": p·v·m is too large (more than ", kMaxWork,
                             " micro-batch passes have no unique message tags)"));
  if (caps.m_at_least_p && s.microbatches < s.stages)
    throw ConfigError(concat(shape(), ": needs at least as many micro-batches as stages (m=",
                             s.microbatches, " < p=", s.stages,
                             "): its warm-up would use up the forwards before any steady "
                             "state. Use gpipe, or more micro-batches"));
  if (caps.m_multiple_of_p && s.microbatches % s.stages != 0)
    throw ConfigError(concat(
        shape(), ": the number of micro-batches must be a multiple of the number of stages (",
        s.microbatches, " % ", s.stages, " = ", s.microbatches % s.stages,
        "); it runs micro-batches in groups of p, as Megatron's interleaved 1F1B does"));
  if (s.layers > 0 && s.stages * s.chunks > s.layers)
    throw ConfigError(concat(shape(), ": more virtual stages (p·v = ", s.stages * s.chunks,
                             ") than model layers (", s.layers,
                             "); every virtual stage needs at least one layer"));
}

Schedule empty_schedule(const char* kind, const ScheduleShape& shape) {
  Schedule s;
  s.kind = kind;
  s.stages = shape.stages;
  s.microbatches = shape.microbatches;
  s.chunks = shape.chunks;
  s.actions.resize(static_cast<size_t>(shape.stages));
  return s;
}

}  // namespace detail

}  // namespace psar::pp
