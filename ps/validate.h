#pragma once
// The stateless half of a server's request validation: everything it can
// check from the header and the payload's length alone, before any state or
// payload is touched. The stateful half (worker ids, clocks) is ShardState's.

#include <cstddef>
#include <cstdint>

#include "ps/sharding.h"
#include "ps/sparse_rows.h"
#include "ps/wire.h"

namespace psar::ps {

// In this order: job token, request type, shard, payload length against the
// header, then the key range — a push or push_pull must cover exactly one
// chunk of the shard and carry its floats; a pull may ask for any keys inside
// one chunk; neither a pull nor a goodbye carries a payload. A sparse
// request (ps/sparse_rows.h) is a push_pull of one whole sparse chunk of
// `rows` whose frame holds its keys and values. Returns the chunk the
// request addresses (0 for a goodbye). Throws RequestError.
int validate_request(const wire::Header& h, size_t payload_bytes, const ShardLayout& layout,
                     uint64_t token, const RowSpace& rows = {});

}  // namespace psar::ps
