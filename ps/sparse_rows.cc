#include "ps/sparse_rows.h"

#include <algorithm>
#include <cstring>

namespace psar::ps {

KeyRange RowSpace::extent(int64_t row, KeyRange chunk) const {
  const int64_t b = std::max(chunk.begin, row * row_floats);
  const int64_t e = std::min(chunk.end, (row + 1) * row_floats);
  return b < e ? KeyRange{b, e} : KeyRange{b, b};
}

KeyRange RowSpace::tail(KeyRange chunk) const {
  const int64_t b = std::max(chunk.begin, floats);
  return b < chunk.end ? KeyRange{b, chunk.end} : KeyRange{chunk.end, chunk.end};
}

std::pair<int64_t, int64_t> RowSpace::rows_in(KeyRange chunk) const {
  if (row_floats <= 0 || chunk.size() <= 0 || chunk.begin >= floats) return {0, 0};
  return {chunk.begin / row_floats,
          std::min((chunk.end + row_floats - 1) / row_floats, floats / row_floats)};
}

std::vector<char> pack_rows(const RowSpace& space, KeyRange chunk, std::span<const int64_t> rows,
                            const float* data, int64_t origin, int64_t& floats) {
  const auto [first, last] = space.rows_in(chunk);
  const auto lo = std::lower_bound(rows.begin(), rows.end(), first);
  const auto hi = std::lower_bound(lo, rows.end(), last);
  const auto n = static_cast<int64_t>(hi - lo);
  const KeyRange tail = space.tail(chunk);
  floats = tail.size();
  for (auto it = lo; it != hi; ++it) floats += space.extent(*it, chunk).size();
  std::vector<char> frame(static_cast<size_t>(sparse_frame_bytes(n, floats)));
  if (n > 0) std::memcpy(frame.data(), &*lo, static_cast<size_t>(n) * sizeof(int64_t));
  float* v = reinterpret_cast<float*>(frame.data() + n * static_cast<int64_t>(sizeof(int64_t)));
  for (auto it = lo; it != hi; ++it) {
    const KeyRange e = space.extent(*it, chunk);
    std::memcpy(v, data + (e.begin - origin), static_cast<size_t>(e.size()) * sizeof(float));
    v += e.size();
  }
  if (tail.size() > 0)
    std::memcpy(v, data + (tail.begin - origin), static_cast<size_t>(tail.size()) * sizeof(float));
  return frame;
}

std::string check_rows(const RowSpace& space, KeyRange chunk, const void* frame, size_t bytes,
                       int64_t keys, int64_t floats) {
  if (!space.sparse(chunk)) return "keys " + to_string(chunk) + " are not a sparse chunk";
  if (keys < 0 || floats < 0 || static_cast<int64_t>(bytes) != sparse_frame_bytes(keys, floats))
    return "sparse frame of " + std::to_string(bytes) + " bytes, header says " +
           std::to_string(keys) + " keys and " + std::to_string(floats) + " floats";
  const auto [first, last] = space.rows_in(chunk);
  int64_t total = space.tail(chunk).size(), previous = -1;
  for (int64_t i = 0; i < keys; ++i) {
    int64_t row;
    std::memcpy(&row, static_cast<const char*>(frame) + i * static_cast<int64_t>(sizeof row),
                sizeof row);
    if (row < first || row >= last)
      return "row " + std::to_string(row) + " is outside the chunk " + to_string(chunk);
    if (row <= previous) return "rows not strictly ascending at key " + std::to_string(i);
    previous = row;
    total += space.extent(row, chunk).size();
  }
  if (total != floats)
    return "the rows hold " + std::to_string(total) + " floats, header says " +
           std::to_string(floats);
  return "";
}

std::vector<int64_t> unpack_rows(const RowSpace& space, KeyRange chunk, const void* frame,
                                 int64_t keys, float* data, int64_t origin) {
  std::vector<int64_t> k(static_cast<size_t>(keys));
  if (keys > 0) std::memcpy(k.data(), frame, k.size() * sizeof(int64_t));
  const float* v = reinterpret_cast<const float*>(static_cast<const char*>(frame) +
                                                  keys * static_cast<int64_t>(sizeof(int64_t)));
  for (int64_t i = 0; i < keys; ++i) {
    const KeyRange e = space.extent(k[i], chunk);
    std::memcpy(data + (e.begin - origin), v, static_cast<size_t>(e.size()) * sizeof(float));
    v += e.size();
  }
  const KeyRange tail = space.tail(chunk);
  if (tail.size() > 0)
    std::memcpy(data + (tail.begin - origin), v, static_cast<size_t>(tail.size()) * sizeof(float));
  return k;
}

}  // namespace psar::ps
