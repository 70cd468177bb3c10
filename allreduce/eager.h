#pragma once
// How small messages are cut so that they travel eagerly. Open MPI's
// shared-memory transport sends a message of up to 4 KiB (its header included)
// at once, through a preallocated buffer, and anything larger only after a
// rendezvous round trip (measured here: 4032 bytes ≈ 0.9 µs, 4048 bytes ≈ 4 µs
// one way). So a collective whose messages would be a little over 4 KiB does
// better sending them as several eager pieces in flight together; above
// kEagerPiecesUpTo the handshake is amortized and whole messages win. The
// ring, whose chunks stream step after step, pieces them only up to
// kRingEagerPiecesUpTo: measured, a stream of more than about four pieces per
// chunk costs it more than the rendezvous it avoids (docs/algorithms.md,
// "Eager pieces"). On the in-process transport and on real NICs the pieces
// are merely more messages.

#include <cstdint>

namespace psar {

inline constexpr int64_t kEagerPieceBytes = 4032;
inline constexpr int64_t kEagerPiecesUpTo = 64 * 1024;
inline constexpr int64_t kRingEagerPiecesUpTo = 16 * 1024;

}  // namespace psar
