#include "ps/validate.h"

#include <string>

namespace psar::ps {

namespace {

bool is_request(int type) {
  return type == wire::MSG_PUSH || type == wire::MSG_PULL || type == wire::MSG_PUSH_PULL ||
         type == wire::MSG_BYE;
}

std::string chunking(const ShardLayout& layout) {
  return layout.chunks() == 1
             ? "the shard's keys " + to_string(layout.range)
             : "one chunk of the shard's keys " + to_string(layout.range) + " (chunks of " +
                   std::to_string(layout.chunk_floats) + " floats)";
}

}  // namespace

int validate_request(const wire::Header& h, size_t payload_bytes, const ShardLayout& layout,
                     uint64_t token, const RowSpace& rows) {
  if (h.token() != token) throw RequestError(wire::STATUS_BAD_TOKEN, "wrong job token");
  if (!is_request(h.type()))
    throw RequestError(wire::STATUS_UNKNOWN_TYPE, std::string("not a request: ") +
                                                      type_name(h.type()) + " (" +
                                                      std::to_string(h.type()) + ")");
  if (h.shard() != layout.shard)
    throw RequestError(wire::STATUS_WRONG_SHARD, "addressed to shard " + std::to_string(h.shard()) +
                                                     ", this is " + std::to_string(layout.shard));
  if (h.sparse()) {
    const KeyRange keys{h.key_begin(), h.key_end()};
    const int chunk = layout.chunk_containing(keys);
    if (h.type() != wire::MSG_PUSH_PULL || chunk < 0 || keys != layout.chunk(chunk) ||
        !rows.sparse(keys))
      throw RequestError(wire::STATUS_KEY_RANGE, std::string("a sparse ") + type_name(h.type()) +
                                                     " of keys " + to_string(keys) +
                                                     ": only a push_pull of one whole sparse "
                                                     "chunk is sparse");
    if (h.sparse_keys() < 0 || h.payload_floats() < 0 ||
        static_cast<int64_t>(payload_bytes) != sparse_frame_bytes(h.sparse_keys(), h.payload_floats()))
      throw RequestError(wire::STATUS_BAD_LENGTH,
                         "header says " + std::to_string(h.sparse_keys()) + " keys and " +
                             std::to_string(h.payload_floats()) + " floats, payload frame holds " +
                             std::to_string(payload_bytes) + " bytes");
    return chunk;
  }
  if (payload_bytes % sizeof(float) != 0 ||
      h.payload_floats() != static_cast<int64_t>(payload_bytes / sizeof(float)))
    throw RequestError(wire::STATUS_BAD_LENGTH, "header says " +
                                                    std::to_string(h.payload_floats()) +
                                                    " floats, payload frame holds " +
                                                    std::to_string(payload_bytes) + " bytes");
  if (h.type() == wire::MSG_BYE) {
    if (h.payload_floats() != 0)
      throw RequestError(wire::STATUS_BAD_LENGTH, "a goodbye carries no payload");
    return 0;
  }
  const KeyRange keys{h.key_begin(), h.key_end()};
  const int chunk = layout.chunk_containing(keys);
  if (chunk < 0)
    throw RequestError(wire::STATUS_KEY_RANGE,
                       "keys " + to_string(keys) + " are not inside " + chunking(layout));
  if (h.type() == wire::MSG_PULL) {
    if (h.payload_floats() != 0)
      throw RequestError(wire::STATUS_BAD_LENGTH, "a pull carries no payload, header says " +
                                                      std::to_string(h.payload_floats()) +
                                                      " floats");
    return chunk;
  }
  if (keys != layout.chunk(chunk))
    throw RequestError(wire::STATUS_KEY_RANGE,
                       "a push must cover " + chunking(layout) + ", got " + to_string(keys));
  if (h.payload_floats() != keys.size())
    throw RequestError(wire::STATUS_BAD_LENGTH, "push of keys " + to_string(keys) + " carries " +
                                                    std::to_string(h.payload_floats()) + " floats");
  return chunk;
}

}  // namespace psar::ps
