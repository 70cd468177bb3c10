// psar schedule --kind KIND --stages P --microbatches M [--chunks V] [--layers L]
//               [--tf T] [--tb T] [--tw T] [--latency T] [--json FILE] [--png FILE]
//
// Generates a pipeline schedule from the registry (modelpar/pp), validates
// and simulates it, and prints the per-stage action grid, the predicted
// bubble fraction beside its closed form, and the peak in-flight activations
// per stage. An invalid combination is a ConfigError (exit 2). Runs without
// MPI. --png writes the spans as JSON next to the image and has
// experiments/schedule_grid.py draw it; the C++ does no plotting.

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "core/csv.h"
#include "core/errors.h"
#include "modelpar/pp/generators.h"
#include "modelpar/pp/grid.h"
#include "modelpar/pp/simulate.h"
#include "tools/cli.h"

extern char** environ;

namespace psar {

namespace {

namespace fs = std::filesystem;

constexpr std::chrono::seconds kDrawDeadline{120};

constexpr const char* kUsage =
    "usage: psar schedule --kind gpipe|1f1b|interleaved|zb_h1 --stages P --microbatches M\n"
    "                     [--chunks V] [--layers L] [--tf T] [--tb T] [--tw T] [--latency T]\n"
    "                     [--json FILE] [--png FILE]";

struct Args {
  std::string kind;
  pp::ScheduleShape shape;
  pp::CostModel costs;
  std::string json_path, png_path;
  bool help = false;
};

// The whole of `text` as a T (int or double), or a ConfigError naming the flag.
template <typename T>
T number(const std::string& flag, const std::string& text) {
  T value{};
  const auto r = std::from_chars(text.data(), text.data() + text.size(), value);
  if (r.ec != std::errc() || r.ptr != text.data() + text.size())
    throw ConfigError("psar schedule: " + flag + " needs " +
                      (std::is_integral_v<T> ? "an integer" : "a number") + ", got '" + text + "'");
  return value;
}

// Every flag takes a value ("--flag value" or "--flag=value"); the
// defaults are those of the usage line: 1f1b, p = 4, m = 8, unit costs.
constexpr const char* kFlags[] = {"--kind",    "--stages", "--microbatches", "--chunks",
                                  "--layers",  "--tf",     "--tb",           "--tw",
                                  "--latency", "--json",   "--png"};

Args parse(const std::vector<std::string>& argv) {
  std::map<std::string, std::string> given;
  Args a;
  for (size_t i = 0; i < argv.size(); ++i) {
    if (argv[i] == "-h" || argv[i] == "--help") {
      a.help = true;
      continue;
    }
    const auto eq = argv[i].find('=');
    const std::string flag = argv[i].substr(0, eq);
    if (std::find(std::begin(kFlags), std::end(kFlags), flag) == std::end(kFlags))
      throw ConfigError("psar schedule: unknown option '" + argv[i] + "'\n" + kUsage);
    if (eq == std::string::npos && i + 1 >= argv.size())
      throw ConfigError("psar schedule: " + flag + " needs a value");
    given[flag] = eq == std::string::npos ? argv[++i] : argv[i].substr(eq + 1);
  }
  const auto get = [&](const char* flag, const std::string& fallback) {
    const auto it = given.find(flag);
    return it == given.end() ? fallback : it->second;
  };
  a.kind = get("--kind", "1f1b");
  a.shape.stages = number<int>("--stages", get("--stages", "4"));
  a.shape.microbatches = number<int>("--microbatches", get("--microbatches", "8"));
  a.shape.chunks = number<int>("--chunks", get("--chunks", "1"));
  a.shape.layers = number<int>("--layers", get("--layers", "0"));
  a.costs.forward = number<double>("--tf", get("--tf", "1"));
  a.costs.backward_input = number<double>("--tb", get("--tb", "1"));
  a.costs.backward_weight = number<double>("--tw", get("--tw", "1"));
  a.costs.p2p_latency = number<double>("--latency", get("--latency", "0"));
  a.json_path = get("--json", "");
  a.png_path = get("--png", "");
  return a;
}

// experiments/schedule_grid.py: $PSAR_SCHEDULE_GRID, else the first
// experiments/ found upward from the working directory or the executable.
std::string grid_script() {
  if (const char* env = std::getenv("PSAR_SCHEDULE_GRID")) return env;
  std::vector<fs::path> starts{fs::current_path()};
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) starts.push_back(exe.parent_path());
  for (fs::path dir : starts)
    for (; !dir.empty(); dir = dir.parent_path()) {
      const fs::path candidate = dir / "experiments" / "schedule_grid.py";
      if (fs::exists(candidate)) return candidate.string();
      if (dir == dir.root_path()) break;
    }
  throw Error(
      "psar schedule --png: experiments/schedule_grid.py not found (run from the "
      "repository, or set PSAR_SCHEDULE_GRID)");
}

// The interpreter: $PSAR_PYTHON, else Debian's /usr/bin/python3 (where
// python3-matplotlib installs), else python3 from PATH.
std::string python() {
  if (const char* env = std::getenv("PSAR_PYTHON")) return env;
  return fs::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
}

// Runs PYTHON SCRIPT JSON PNG without a shell; throws if it fails.
void draw_png(const std::string& json_path, const std::string& png_path) {
  const std::string script = grid_script();
  std::vector<std::string> args{python(), script, json_path, png_path};
  std::vector<char*> argv;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawnp(&pid, args[0].c_str(), nullptr, nullptr, argv.data(), environ) != 0)
    throw Error("psar schedule --png: cannot start " + args[0]);
  // Drawing takes a second or two; a hung interpreter must not hang psar.
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + kDrawDeadline;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      throw TimeoutError("psar schedule --png: " + script + " did not finish within " +
                         std::to_string(kDrawDeadline.count()) + " s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw Error("psar schedule --png: " + args[0] + " " + script +
                " failed (it needs matplotlib; PSAR_PYTHON chooses the interpreter); the spans "
                "are in " +
                json_path);
}

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += " " + s;
  return out;
}

}  // namespace

int cmd_schedule(CliContext& ctx) {
  if (!ctx.overrides.empty())
    throw ConfigError("psar schedule takes no --set; use its flags\n" + std::string(kUsage));
  const Args a = parse(ctx.args);
  if (a.help) {
    std::printf("%s\n\nschedules:\n", kUsage);
    for (const auto& e : pp::schedule_registry()) std::printf("  %-12s %s\n", e.name, e.summary);
    return 0;
  }
  const pp::ScheduleEntry& entry = pp::find_schedule(a.kind);
  const pp::Schedule schedule = entry.make(a.shape);
  const pp::Prediction pr = pp::simulate(schedule, {a.costs, {}});

  std::printf("%s", pp::render_grid(schedule, pr).c_str());
  bool split = false;  // does any backward come in B and W halves?
  for (const auto& actions : schedule.actions)
    for (const auto& action : actions) split |= action.op == pp::Op::kBackwardWeight;
  std::printf(
      "legend: F forward, B backward%s, - continues the action, . idle%s\n",
      split ? " (input gradient), W weight gradient" : "",
      schedule.chunks > 1 ? "; letter after the micro-batch = chunk (a = 0, b = 1, ...)" : "");
  std::printf("costs t_f %g t_b %g t_w %g latency %g (backward = t_b + t_w unless split)\n",
              a.costs.forward, a.costs.backward_input, a.costs.backward_weight,
              a.costs.p2p_latency);
  std::printf("makespan %g\n", pr.makespan);
  std::printf("bubble_fraction %g\n", pr.bubble_fraction);
  std::printf("bubble_formula %g  %s%s\n", entry.bubble(a.shape, a.costs), entry.bubble_formula,
              a.costs.p2p_latency > 0 ? "  (the formula assumes free communication)" : "");
  std::printf("idle_share %g  (idle / (p * makespan))\n", pr.idle_share);
  std::vector<std::string> idle, peaks, peak_formula;
  for (int s = 0; s < schedule.stages; ++s) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", pr.idle[static_cast<size_t>(s)]);
    idle.push_back(buf);
    peaks.push_back(std::to_string(pr.peak_activations[static_cast<size_t>(s)]));
    peak_formula.push_back(std::to_string(entry.peak(a.shape, s)));
  }
  std::printf("idle_per_stage%s\n", joined(idle).c_str());
  std::printf("peak_activations%s%s\n", joined(peaks).c_str(),
              schedule.chunks > 1 ? "  (chunk activations, 1/v of a stage's each)" : "");
  std::printf("peak_formula%s\n", joined(peak_formula).c_str());

  if (!a.json_path.empty() || !a.png_path.empty()) {
    const std::string json = pp::grid_json(schedule, pr, a.costs);
    const std::string json_path = !a.json_path.empty()
                                      ? a.json_path
                                      : fs::path(a.png_path).replace_extension(".json").string();
    write_file_atomic(json_path, json);
    if (!a.png_path.empty()) {
      draw_png(json_path, a.png_path);
      std::printf("wrote %s\n", a.png_path.c_str());
    }
  }
  return 0;
}

}  // namespace psar
