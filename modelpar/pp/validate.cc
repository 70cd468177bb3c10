#include "modelpar/pp/validate.h"

#include <string>
#include <vector>

#include "core/errors.h"
#include "modelpar/pp/replay.h"

namespace psar::pp {

using psar::detail::concat;

namespace {

constexpr size_t kMaxListed = 12;  // problems spelled out in one error

// Where each (micro-batch, virtual stage)'s actions sit in its stage's list.
struct Positions {
  std::vector<size_t> of[4];  // indexed by Op
};

[[noreturn]] void fail(const Schedule& s, const std::vector<std::string>& problems) {
  std::string text = "invalid pipeline schedule " + describe(s) + ":";
  for (size_t k = 0; k < problems.size() && k < kMaxListed; ++k) text += "\n  - " + problems[k];
  if (problems.size() > kMaxListed)
    text += concat("\n  ... and ", problems.size() - kMaxListed, " more");
  throw ConfigError(text);
}

std::string where(const Schedule& s, int microbatch, int vstage) {
  return concat("stage ", s.stage_of(vstage), ", micro-batch ", microbatch, ", chunk ",
                s.chunk_of(vstage));
}

std::string list(const std::vector<size_t>& indices) {
  std::string out;
  for (size_t i : indices) out += (out.empty() ? "#" : ", #") + std::to_string(i);
  return out;
}

// Exactly one F, and one B or one (B-input, W) pair; F before B, B-input before W.
void check_work(const Schedule& s, int microbatch, int vstage, const Positions& at,
                std::vector<std::string>& problems) {
  const auto& f = at.of[static_cast<int>(Op::kForward)];
  const auto& b = at.of[static_cast<int>(Op::kBackward)];
  const auto& bi = at.of[static_cast<int>(Op::kBackwardInput)];
  const auto& w = at.of[static_cast<int>(Op::kBackwardWeight)];
  const std::string here = where(s, microbatch, vstage);
  if (f.size() != 1)
    problems.push_back(f.empty() ? here + ": no forward"
                                 : here + ": " + std::to_string(f.size()) + " forwards (" +
                                       list(f) + ")");
  const bool fused = b.size() == 1 && bi.empty() && w.empty();
  const bool split = b.empty() && bi.size() == 1 && w.size() == 1;
  if (!fused && !split) {
    if (b.empty() && bi.empty() && w.empty())
      problems.push_back(here + ": no backward");
    else
      problems.push_back(concat(here,
                                ": needs one backward or one backward-input and one "
                                "backward-weight, has ",
                                b.size(), " backward (", list(b), "), ", bi.size(),
                                " backward-input (", list(bi), "), ", w.size(),
                                " backward-weight (", list(w), ")"));
    return;
  }
  if (f.size() != 1) return;
  const size_t backward = fused ? b[0] : bi[0];
  if (backward < f[0])
    problems.push_back(concat(here, ": ", fused ? "backward" : "backward-input", " at #", backward,
                              " comes before its forward at #", f[0]));
  if (split && w[0] < bi[0])
    problems.push_back(concat(here, ": backward-weight at #", w[0],
                              " comes before its backward-input at #", bi[0]));
}

}  // namespace

void validate(const Schedule& s) {
  std::vector<std::string> problems;
  if (s.stages < 1 || s.microbatches < 1 || s.chunks < 1)
    problems.push_back("p, m and v must be at least 1");
  else if (s.actions.size() != static_cast<size_t>(s.stages))
    problems.push_back(
        concat("has action lists for ", s.actions.size(), " stages, not p = ", s.stages));
  if (!problems.empty()) fail(s, problems);

  const int vstages = s.virtual_stages();
  std::vector<Positions> at(static_cast<size_t>(s.microbatches) * vstages);
  for (int stage = 0; stage < s.stages; ++stage) {
    const auto& actions = s.actions[static_cast<size_t>(stage)];
    for (size_t i = 0; i < actions.size(); ++i) {
      const Action& a = actions[i];
      const int op = static_cast<int>(a.op);
      if (op < 0 || op > static_cast<int>(Op::kBackwardWeight))
        problems.push_back(concat("stage ", stage, " action #", i, ": unknown op ", op));
      else if (a.microbatch < 0 || a.microbatch >= s.microbatches)
        problems.push_back(
            concat(describe(stage, i, a), ": micro-batch outside [0, ", s.microbatches, ")"));
      else if (a.chunk < 0 || a.chunk >= s.chunks)
        problems.push_back(concat(describe(stage, i, a), ": chunk outside [0, ", s.chunks, ")"));
      else
        at[static_cast<size_t>(a.microbatch) * vstages + s.virtual_stage(stage, a.chunk)]
            .of[op]
            .push_back(i);
    }
  }
  for (int i = 0; i < s.microbatches; ++i)
    for (int u = 0; u < vstages; ++u)
      check_work(s, i, u, at[static_cast<size_t>(i) * vstages + u], problems);
  if (!problems.empty()) fail(s, problems);

  // Complete and locally ordered: what is left to fail is a cycle of waits.
  const auto r = detail::replay(
      s, [](int, const Action&) { return 1.0; }, 0.0);
  if (!r.finished()) {
    problems.push_back("deadlock: no stage can make progress");
    problems.insert(problems.end(), r.blocked.begin(), r.blocked.end());
    fail(s, problems);
  }
}

}  // namespace psar::pp
