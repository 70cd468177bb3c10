#include "core/recompute.h"

#include "core/errors.h"

namespace psar {

namespace {
constexpr Recompute kModes[] = {Recompute::kNone, Recompute::kSelective, Recompute::kFull};
}  // namespace

std::vector<std::string> recompute_names() {
  std::vector<std::string> names;
  for (const Recompute r : kModes) names.emplace_back(recompute_name(r));
  return names;
}

Recompute parse_recompute(const std::string& name) {
  std::string known;
  for (const Recompute r : kModes) {
    if (name == recompute_name(r)) return r;
    known += (known.empty() ? "" : ", ") + std::string(recompute_name(r));
  }
  throw ConfigError("train.recompute: '" + name + "' is not a mode (" + known + ")");
}

const char* recompute_name(Recompute r) {
  switch (r) {
    case Recompute::kNone:
      return "none";
    case Recompute::kSelective:
      return "selective";
    case Recompute::kFull:
      return "full";
  }
  return "?";
}

}  // namespace psar
