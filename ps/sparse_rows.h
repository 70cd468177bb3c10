#pragma once
// Sparse pushes and pulls (docs/sparse.md): the arena's head [0, floats) is
// rows of `row_floats` floats (a sparse model's embedding tables, all of one
// width); a chunk that begins inside it is a sparse chunk. A sparse
// push_pull of such a chunk carries only the rows the worker's batch
// touched, and its reply only the rows that changed since the version the
// worker last saw there, plus — for the one chunk that reaches past the
// rows — its dense tail whole:
//
//   payload frame = [keys: n int64, ascending row numbers]
//                   [values: each key's floats inside the chunk, in order]
//                   [the chunk's floats at and past `floats`, if any]
//
// (header: sparse = true, sparse_keys = n, payload_floats = the values' count;
// a row cut by a chunk boundary travels in both chunks, each with its part).
// Client and server build and check frames with the functions below.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "ps/sharding.h"

namespace psar::ps {

struct RowSpace {
  int64_t floats = 0;      // the sparse head of the arena; 0 = no sparse rows
  int64_t row_floats = 0;  // floats per row
  bool sparse(KeyRange chunk) const {
    return row_floats > 0 && chunk.size() > 0 && chunk.begin < floats;
  }
  // The chunk's dense tail: its floats at and past `floats` (often empty).
  KeyRange tail(KeyRange chunk) const;
  // The floats of row r inside `chunk` (empty when it lies outside).
  KeyRange extent(int64_t row, KeyRange chunk) const;
  // Rows with at least one float in `chunk`: [first, last).
  std::pair<int64_t, int64_t> rows_in(KeyRange chunk) const;
};

// Bytes of a frame of `keys` keys and `floats` values.
inline int64_t sparse_frame_bytes(int64_t keys, int64_t floats) {
  return keys * static_cast<int64_t>(sizeof(int64_t)) + floats * static_cast<int64_t>(sizeof(float));
}

// The frame of `rows` (ascending; those outside `chunk` are skipped), key k's
// value read from data[k − origin]. Returns the values' count in `floats`.
std::vector<char> pack_rows(const RowSpace& space, KeyRange chunk, std::span<const int64_t> rows,
                            const float* data, int64_t origin, int64_t& floats);

// Checks a frame against its header counts and `chunk`: keys strictly
// ascending, each row inside the chunk, the values' count equal to the
// sum of their extents. Returns "" or what is wrong.
std::string check_rows(const RowSpace& space, KeyRange chunk, const void* frame, size_t bytes,
                       int64_t keys, int64_t floats);

// Writes a checked frame's values, key k's into data[k − origin]. Returns the keys.
std::vector<int64_t> unpack_rows(const RowSpace& space, KeyRange chunk, const void* frame,
                                 int64_t keys, float* data, int64_t origin);

}  // namespace psar::ps
