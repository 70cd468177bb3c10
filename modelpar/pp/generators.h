#pragma once
// Schedule generators, one file each, and their registry. Adding a schedule:
// its own file, one line in registry.cc, one section in docs/pipeline.md;
// tests and `psar schedule` pick it up from the registry.

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "modelpar/pp/schedule.h"
#include "modelpar/pp/simulate.h"

namespace psar::pp {

struct ScheduleShape {
  int stages = 1;        // p: pipeline ranks
  int microbatches = 1;  // m: micro-batches per batch
  int chunks = 1;        // v: virtual chunks per stage (interleaved only)
  int layers = 0;        // model layers if known: p·v may not exceed it (0: not checked)
};

// Every generator throws ConfigError, naming the schedule and the numbers,
// for a shape it cannot run (m < p where the warm-up needs m ≥ p, m not a
// multiple of p for interleaved, more virtual stages than layers, ...).
Schedule gpipe(const ScheduleShape& shape);
Schedule one_f_one_b(const ScheduleShape& shape);
Schedule interleaved(const ScheduleShape& shape);
Schedule zb_h1(const ScheduleShape& shape);

// Each schedule's closed forms, beside its generator: the bubble fraction
// (simulate.h's definition) with equal stages and free communication, and
// the peak in-flight activations of stage r. The tests hold the simulator
// to them exactly; results/pp_schedules prints them beside the simulation.
double gpipe_bubble(const ScheduleShape& shape, const CostModel& costs);
double one_f_one_b_bubble(const ScheduleShape& shape, const CostModel& costs);
double interleaved_bubble(const ScheduleShape& shape, const CostModel& costs);
double zb_h1_bubble(const ScheduleShape& shape, const CostModel& costs);
int gpipe_peak(const ScheduleShape& shape, int stage);
int one_f_one_b_peak(const ScheduleShape& shape, int stage);
int interleaved_peak(const ScheduleShape& shape, int stage);
int zb_h1_peak(const ScheduleShape& shape, int stage);

// What shapes a schedule runs: its generator checks them (detail::
// check_shape) and the planner (sim/plan.h) tries a schedule on every grid
// they admit. max_chunks > 1 is an interleaved schedule (at v = 1 it is
// 1F1B); m_at_least_p: its warm-up needs m ≥ p; m_multiple_of_p: it runs
// micro-batches in groups of p.
struct ScheduleCaps {
  int max_chunks = 1;
  bool m_at_least_p = true;
  bool m_multiple_of_p = false;
};
inline constexpr ScheduleCaps kGpipeCaps{1, false, false};
inline constexpr ScheduleCaps kOneFOneBCaps{1, true, false};
inline constexpr ScheduleCaps kInterleavedCaps{1 << 20, true, true};
inline constexpr ScheduleCaps kZbH1Caps{1, true, false};

struct ScheduleEntry {
  const char* name;  // as in `parallel.schedule` and `psar schedule --kind`
  Schedule (*make)(const ScheduleShape&);
  double (*bubble)(const ScheduleShape&, const CostModel&);
  int (*peak)(const ScheduleShape&, int stage);
  const char* bubble_formula;  // the closed form as text, for tables
  const char* summary;
  ScheduleCaps caps{};
};
// Whether `caps` admit `shape` (the checks of detail::check_shape, without
// the error).
bool admits(const ScheduleCaps& caps, const ScheduleShape& shape);

// The built-in schedules, then those added by a ScheduleRegistration. The
// span is valid until the next registration or deregistration.
std::span<const ScheduleEntry> schedule_registry();
std::vector<std::string> schedule_names();
// ConfigError listing the known names if `name` is none of them.
const ScheduleEntry& find_schedule(std::string_view name);
Schedule make_schedule(std::string_view name, const ScheduleShape& shape);

// Adds a schedule to the registry for the lifetime of this object (a test's
// throwaway generator): the config's choices, `psar schedule`, the executor
// and the trainer see it like a built-in one. Create and destroy it while no
// other thread reads the registry. ConfigError if the name is taken.
class ScheduleRegistration {
 public:
  explicit ScheduleRegistration(const ScheduleEntry& entry);
  ~ScheduleRegistration();
  ScheduleRegistration(const ScheduleRegistration&) = delete;
  ScheduleRegistration& operator=(const ScheduleRegistration&) = delete;

 private:
  std::string name_;
};

namespace detail {
// Checks shared by all generators: p, m, v ≥ 1, p·v ≤ layers (when known),
// and the schedule's capabilities (v ≤ max_chunks, m ≥ p, m a multiple of p).
void check_shape(const char* kind, const ScheduleShape& shape, const ScheduleCaps& caps);
// An empty schedule of the shape's size, ready for a generator to fill.
Schedule empty_schedule(const char* kind, const ScheduleShape& shape);
}  // namespace detail

}  // namespace psar::pp
