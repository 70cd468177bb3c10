#include "core/errors.h"

namespace psar::detail {

void check_failed(const char* expr, const char* file, int line, const std::string& msg) {
  std::ostringstream os;
  os << "internal check failed: " << expr << " at " << file << ":" << line;
  if (!msg.empty()) os << ": " << msg;
  throw Error(os.str());
}

}  // namespace psar::detail
