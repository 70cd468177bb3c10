#pragma once
// The parameter server's wire protocol around ps.proto: header encoding, the
// names of types and statuses for error texts, and RequestError, the one
// exception a server turns into an error reply instead of dying.
//
// A request is [header][payload?] (a ROUTER sees the peer's identity frame in
// front); a reply is [header][payload?] too. Payload frames are raw float32.

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/errors.h"
#include "ps/ps.pb.h"

namespace psar::ps {

// Headers are a few dozen bytes; anything much larger is hostile.
inline constexpr size_t kMaxHeaderBytes = 1024;

std::string encode_header(const wire::Header& header);
// False if `bytes` is too long or does not parse.
bool decode_header(const void* data, size_t bytes, wire::Header& out);

const char* type_name(int type);      // "push", "pull", ..., "type 42"
const char* status_name(int status);  // "bad token", ...

// A request the server rejects: becomes an MSG_ERROR reply with `status`.
class RequestError : public ProtocolError {
 public:
  RequestError(wire::Status status, const std::string& what)
      : ProtocolError(what), status_(status) {}
  wire::Status status() const { return status_; }

 private:
  wire::Status status_;
};

}  // namespace psar::ps
