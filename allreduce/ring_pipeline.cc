#include "allreduce/ring_pipeline.h"

#include <algorithm>

#include "allreduce/eager.h"
#include "core/errors.h"
#include "core/ops.h"

namespace psar {

StepList ring_schedule_steps(const char* algorithm, int ranks, int64_t count, int first_step,
                             int last_step) {
  StepList list{.algorithm = algorithm, .ranks = ranks, .count = count, .rounds = {}};
  if (ranks == 1 || count == 0) return list;
  const Partition chunks{count, ranks};
  for (int step = first_step; step < last_step; ++step)
    for (int r = 0; r < ranks; ++r) {
      const int c = ring_send_chunk(r, ranks, step);
      list.add(step - first_step, {.src = r, .dst = (r + 1) % ranks, .offset = chunks.offset(c),
                                   .count = chunks.size(c), .reduce = step < ranks - 1});
    }
  return list;
}

void RingPipeline::plan(const Comm& comm, int64_t count, int64_t segment_bytes) {
  PSAR_CHECK(segment_bytes > 0, "segment size must be positive, got ", segment_bytes);
  if (comm.rank() == rank_ && comm.size() == size_ && count == count_ &&
      segment_bytes == segment_bytes_)
    return;
  rank_ = comm.rank();
  size_ = comm.size();
  count_ = count;
  segment_bytes_ = segment_bytes;
  chunks_ = Partition{count, size_};
  const int64_t chunk_bytes = chunks_.largest() * static_cast<int64_t>(sizeof(float));
  // Small chunks go as eager pieces, large ones in segments.
  const bool eager = chunk_bytes <= kEagerChunkUpTo;
  const int64_t segment = eager ? kEagerPieceBytes : segment_bytes;
  segments_ = static_cast<int>(std::max<int64_t>(1, (chunk_bytes + segment - 1) / segment));
  const int64_t largest_segment = Partition{chunks_.largest(), segments_}.largest();
  const size_t units = static_cast<size_t>(2 * (size_ - 1) * segments_);
  window_ = eager ? std::max(kWindow, static_cast<int>(units)) : kWindow;
  scratch_.assign(static_cast<size_t>(window_ * largest_segment), 0.0f);
  sends_.clear();
  recvs_.clear();
  sends_.resize(units);
  recvs_.resize(units);
}

std::span<float> RingPipeline::segment(std::span<float> data, int chunk, int j) const {
  const Partition segs{chunks_.size(chunk), segments_};
  return data.subspan(static_cast<size_t>(chunks_.offset(chunk) + segs.offset(j)),
                      static_cast<size_t>(segs.size(j)));
}

void RingPipeline::run(Comm& comm, std::span<float> data, int first_step, int last_step,
                       int tag) {
  PSAR_CHECK(static_cast<int64_t>(data.size()) == count_, "ring planned for ", count_,
             " floats, called with ", data.size());
  PSAR_CHECK(0 <= first_step && first_step <= last_step && last_step <= 2 * (size_ - 1),
             "ring steps [", first_step, ", ", last_step, ") outside the schedule");
  if (first_step == last_step || count_ == 0) return;  // nothing to move
  try {
    stream(comm, data, first_step, last_step, tag);
  } catch (...) {
    // Withdraw what is still posted: the caller's buffer may not outlive us.
    for (auto& q : sends_) q = Request();
    for (auto& q : recvs_) q = Request();
    throw;
  }
}

void RingPipeline::stream(Comm& comm, std::span<float> data, int first_step, int last_step,
                          int tag) {
  const int n = size_, r = rank_, S = segments_;
  const int left = (r - 1 + n) % n, right = (r + 1) % n;
  const int units = (last_step - first_step) * S;  // unit u = (step first + u / S, segment u % S)
  const int W = window_;
  const int64_t slot_size = static_cast<int64_t>(scratch_.size()) / W;
  auto slot = [&](int u, int64_t size) {
    return std::span<float>(scratch_).subspan(static_cast<size_t>((u % W) * slot_size),
                                              static_cast<size_t>(size));
  };
  auto reduces = [&](int step) { return step < n - 1; };

  // An all-gather unit lands where a reduce-scatter unit left from (N-1 steps
  // earlier); MPI forbids receiving into a buffer still being sent, so its
  // receive is posted only once that send has completed. Sends are posted in
  // index order; `sent` counts them.
  // (Only a full allreduce has such units: u ≥ (N-1)·S.)
  auto blocking_send = [&](int u) { return u - (n - 1) * S; };  // index; < 0: none
  int sent = 0;
  auto post_recv = [&](int u) {
    const int step = first_step + u / S;
    std::span<float> dst = segment(data, ring_recv_chunk(r, n, step), u % S);
    if (reduces(step)) dst = slot(u, static_cast<int64_t>(dst.size()));
    recvs_[static_cast<size_t>(u)] = comm.irecv(left, dst, tag);
  };
  int posted = 0;  // receives of units [0, posted) are posted
  // Posts ahead up to unit `limit`, without blocking on a send still in flight.
  auto post_ahead = [&](int limit) {
    for (limit = std::min(limit, units); posted < limit; ++posted) {
      const int b = blocking_send(posted);
      if (b >= 0 && (b >= sent || !sends_[static_cast<size_t>(b)].test())) return;
      post_recv(posted);
    }
  };
  auto send = [&](std::span<const float> what) {
    sends_[static_cast<size_t>(sent++)] = comm.isend(right, what, tag);
  };

  // Receives that depend on no send go first, so that the neighbour's first
  // segments find them posted; then the first step's sends, straight from the
  // caller's vector; then the rest of the window.
  while (posted < std::min(units, W) && blocking_send(posted) < 0) post_recv(posted++);
  for (int j = 0; j < S; ++j) send(segment(data, ring_send_chunk(r, n, first_step), j));
  post_ahead(W);

  for (int u = 0; u < units; ++u) {
    const int step = first_step + u / S, j = u % S;
    if (posted == u) {  // deferred above: now it must wait for that send
      if (const int b = blocking_send(u); b >= 0) sends_[static_cast<size_t>(b)].wait();
      post_recv(posted++);
    }
    recvs_[static_cast<size_t>(u)].wait();
    const std::span<float> mine = segment(data, ring_recv_chunk(r, n, step), j);
    if (reduces(step))
      ops::add_inplace(mine.data(), slot(u, static_cast<int64_t>(mine.size())).data(),
                       static_cast<int64_t>(mine.size()));
    // Receives before the send: the neighbour's next units find them posted.
    post_ahead(u + 1 + W);
    // The unit just completed is exactly what the next step sends.
    if (step + 1 < last_step) send(mine);
  }
  for (int i = 0; i < sent; ++i) sends_[static_cast<size_t>(i)].wait();
}

}  // namespace psar
