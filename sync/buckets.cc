#include "sync/buckets.h"

#include <algorithm>

#include "core/errors.h"

namespace psar {

std::vector<ArenaRange> plan_buckets(const std::vector<BucketTensor>& ready_order,
                                     int64_t capacity, bool whole_tensors) {
  PSAR_CHECK(capacity >= 1, "bucket capacity of ", capacity, " floats");
  std::vector<ArenaRange> buckets;
  ArenaRange open{0, 0};
  auto close = [&] {
    if (open.size() > 0) buckets.push_back(open);
    open = {0, 0};
  };
  for (const BucketTensor& t : ready_order) {
    if (t.skip) {
      close();
      continue;
    }
    const int64_t n = t.range.size();
    if (n == 0) continue;
    if (n > capacity) {  // alone too large: pieces of the capacity, from its end down
      close();
      if (whole_tensors) {
        buckets.push_back(t.range);
        continue;
      }
      for (int64_t end = t.range.end; end > t.range.begin; end -= capacity)
        buckets.push_back({std::max(t.range.begin, end - capacity), end});
      continue;
    }
    // Backward order runs down the arena: t ends where the open bucket begins.
    if (open.size() > 0 && (open.size() + n > capacity || t.range.end != open.begin)) close();
    open = open.size() > 0 ? ArenaRange{t.range.begin, open.end} : t.range;
  }
  close();
  return buckets;
}

std::vector<ArenaRange> cut_chunks(const std::vector<ArenaRange>& buckets, int64_t chunk) {
  PSAR_CHECK(chunk >= 1, "chunk of ", chunk, " floats");
  std::vector<ArenaRange> out;
  for (const ArenaRange& b : buckets)
    for (int64_t at = b.begin; at < b.end; at += chunk) out.push_back({at, std::min(b.end, at + chunk)});
  return out;
}

}  // namespace psar
