#include "ps/wire.h"

namespace psar::ps {

std::string encode_header(const wire::Header& header) {
  std::string out;
  PSAR_CHECK(header.SerializeToString(&out), "ps: header does not serialize");
  return out;
}

bool decode_header(const void* data, size_t bytes, wire::Header& out) {
  if (bytes > kMaxHeaderBytes) return false;
  return out.ParseFromArray(data, static_cast<int>(bytes));
}

const char* type_name(int type) {
  switch (type) {
    case wire::MSG_PUSH:
      return "push";
    case wire::MSG_PULL:
      return "pull";
    case wire::MSG_PUSH_PULL:
      return "push_pull";
    case wire::MSG_BYE:
      return "bye";
    case wire::MSG_PARAMS:
      return "params";
    case wire::MSG_ACK:
      return "ack";
    case wire::MSG_ERROR:
      return "error";
    default:
      return "unknown type";
  }
}

const char* status_name(int status) {
  switch (status) {
    case wire::STATUS_OK:
      return "ok";
    case wire::STATUS_BAD_FRAMES:
      return "bad frames";
    case wire::STATUS_MALFORMED_HEADER:
      return "malformed header";
    case wire::STATUS_BAD_TOKEN:
      return "bad token";
    case wire::STATUS_UNKNOWN_TYPE:
      return "unknown type";
    case wire::STATUS_WRONG_SHARD:
      return "wrong shard";
    case wire::STATUS_KEY_RANGE:
      return "key range";
    case wire::STATUS_BAD_LENGTH:
      return "bad length";
    case wire::STATUS_BAD_WORKER:
      return "bad worker";
    case wire::STATUS_BAD_CLOCK:
      return "bad clock";
    case wire::STATUS_PEER_FAILED:
      return "peer failed";
    case wire::STATUS_TIMEOUT:
      return "timeout";
    default:
      return "unknown status";
  }
}

}  // namespace psar::ps
