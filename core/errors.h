#pragma once
// The few typed errors psar throws at run time, and the invariant check.
// Only main() turns these into exit codes; destructors never throw.

#include <sstream>
#include <stdexcept>
#include <string>

namespace psar {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
  // Raised by every rank of the job at the same point after the same
  // exchange (a start-up agreement, a decision broadcast by rank 0): main()
  // then prints it once, on rank 0, and every rank ends with the code — no
  // MPI_Abort is needed, nobody is left waiting. Any other error is this
  // rank's alone: it prints it with its rank and ends the whole job.
  bool agreed() const { return agreed_; }
  void set_agreed() { agreed_ = true; }

 private:
  bool agreed_ = false;
};
// `e`, marked as raised by every rank alike: throw agreed(ConfigError("...")).
template <typename E>
E agreed(E e) {
  e.set_agreed();
  return e;
}
// A configuration the program cannot run: unknown key, wrong type, bad value.
class ConfigError : public Error { using Error::Error; };
// A dataset or input file that is missing or malformed.
class DataError : public Error { using Error::Error; };
// A communication failure: peer gone, sizes disagree, transport error.
class CommError : public Error { using Error::Error; };
// A wait that passed its deadline; names the operation and the peer.
class TimeoutError : public CommError { using CommError::CommError; };
// A malformed or foreign message (parameter server wire protocol).
class ProtocolError : public Error { using Error::Error; };

namespace detail {
[[noreturn]] void check_failed(const char* expr, const char* file, int line, const std::string& msg);

template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

}  // namespace psar

// Invariant check: a bug in psar if it fires, not a user error.
#define PSAR_CHECK(cond, ...)                                                         \
  do {                                                                                \
    if (!(cond)) [[unlikely]]                                                         \
      ::psar::detail::check_failed(#cond, __FILE__, __LINE__,                         \
                                   ::psar::detail::concat("" __VA_OPT__(, ) __VA_ARGS__)); \
  } while (0)
