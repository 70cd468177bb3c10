#include "core/log.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace psar::log {

namespace {
struct Settings {
  Level level = Level::kWarn;
  std::string subsystems;  // empty = all
  Settings() {
    if (const char* v = std::getenv("PSAR_LOG")) {
      if (!std::strcmp(v, "debug")) level = Level::kDebug;
      else if (!std::strcmp(v, "info")) level = Level::kInfo;
      else if (!std::strcmp(v, "warn")) level = Level::kWarn;
      else if (!std::strcmp(v, "error")) level = Level::kError;
    }
    if (const char* s = std::getenv("PSAR_LOG_SUBSYS")) subsystems = s;
  }
};
const Settings& settings() {
  static const Settings s;
  return s;
}
std::atomic<int> g_rank{-1};
const char* names[] = {"ERROR", "WARN", "INFO", "DEBUG"};
}  // namespace

bool enabled(Level level, const char* subsystem) {
  const Settings& s = settings();
  if (level > s.level) return false;
  return s.subsystems.empty() || s.subsystems.find(subsystem) != std::string::npos;
}

void emit(Level level, const char* subsystem, const std::string& message) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  std::fprintf(stderr, "[psar %s %s rank %d] %s\n", names[static_cast<int>(level)], subsystem,
               g_rank.load(), message.c_str());
}

void set_rank(int rank) { g_rank = rank; }

}  // namespace psar::log
