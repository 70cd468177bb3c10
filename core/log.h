#pragma once
// Logging by level and subsystem, NCCL style: PSAR_LOG=info|debug|warn and
// PSAR_LOG_SUBSYS=comm,ps,... select what is printed (to stderr, one line each).

#include <sstream>
#include <string>

namespace psar::log {

enum class Level { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

bool enabled(Level level, const char* subsystem);
void emit(Level level, const char* subsystem, const std::string& message);
// Rank prefix for every line of this process (set once the rank is known).
void set_rank(int rank);

}  // namespace psar::log

#define PSAR_LOG(level, subsys, ...)                                                   \
  do {                                                                                 \
    if (::psar::log::enabled(::psar::log::Level::level, subsys)) {                     \
      std::ostringstream psar_log_os_;                                                 \
      psar_log_os_ << __VA_ARGS__;                                                     \
      ::psar::log::emit(::psar::log::Level::level, subsys, psar_log_os_.str());        \
    }                                                                                  \
  } while (0)
