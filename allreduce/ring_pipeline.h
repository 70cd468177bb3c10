#pragma once
// The ring schedule and its pipelined executor, shared by ring allreduce,
// ring reduce-scatter and ring all-gather (the three run different step
// ranges of one schedule).
//
// Schedule. Ranks form a ring r -> r+1; the vector is cut into N chunks by
// Partition{count, N}. There are 2(N-1) steps; at step s rank r sends chunk
// (r-s-1) mod N to r+1 and receives chunk (r-s-2) mod N from r-1. Steps
// 0..N-2 are the reduce-scatter (the received partial sum is added into the
// local chunk), steps N-1..2N-3 the all-gather (the received final chunk is
// copied in). After step N-2 rank r holds the complete sum of chunk r. The
// chunk received at step s is the one sent at step s+1, which is what makes
// streaming possible.
//
// Data movement. Each chunk is cut into S segments (S from the segment size,
// the same for every chunk), and the 2(N-1)·S (step, segment) units flow as a
// stream: a unit is forwarded to the right neighbour as soon as it has been
// received and reduced, receives are posted kWindow units ahead, so segment
// k+1 is in flight while segment k is being reduced. Reduce-scatter units land
// in a small scratch ring and are added straight from it into the vector;
// all-gather units land in place. Nothing else is copied.

#include <cstdint>
#include <span>
#include <vector>

#include "allreduce/partition.h"
#include "allreduce/steps.h"
#include "comm/comm.h"

namespace psar {

// The pure schedule: which chunk rank `rank` of `size` sends / receives at `step`.
inline int ring_send_chunk(int rank, int size, int step) {
  return ((rank - step - 1) % size + size) % size;
}
inline int ring_recv_chunk(int rank, int size, int step) {
  return ((rank - step - 2) % size + size) % size;
}

// Steps [first_step, last_step) of the schedule as a step list, whole
// chunks per step (segments stream within a step and change no round).
StepList ring_schedule_steps(const char* algorithm, int ranks, int64_t count, int first_step,
                             int last_step);

class RingPipeline {
 public:
  // Receives posted ahead of the unit being reduced (scratch = kWindow segments);
  // small chunks sent as eager pieces post every receive at once instead, so
  // that no piece arrives unexpected (which costs MPI an extra copy).
  static constexpr int kWindow = 4;
  // Chunks up to this size go as eager pieces (allreduce/eager.h). Larger ones
  // go whole or in segments: measured here, a stream of more than about four
  // pieces per chunk costs the ring more than the rendezvous it avoids.
  static constexpr int64_t kEagerChunkUpTo = 16 * 1024;

  // Plans for `count` floats on a communicator of this shape; a no-op when the
  // shape, count and segment size are those of the previous call.
  void plan(const Comm& comm, int64_t count, int64_t segment_bytes);

  const Partition& chunks() const { return chunks_; }
  int segments() const { return segments_; }

  // Runs steps [first_step, last_step) of the schedule over the whole vector
  // `data` (size = planned count), messages tagged `tag`.
  void run(Comm& comm, std::span<float> data, int first_step, int last_step, int tag);

 private:
  // Elements [offset, offset+size) of segment j of chunk c.
  std::span<float> segment(std::span<float> data, int chunk, int j) const;
  void stream(Comm& comm, std::span<float> data, int first_step, int last_step, int tag);

  int rank_ = -1, size_ = 0;
  int64_t count_ = -1, segment_bytes_ = 0;
  Partition chunks_;
  int segments_ = 1;
  int window_ = kWindow;
  std::vector<float> scratch_;  // window_ slots of the largest segment
  std::vector<Request> sends_, recvs_;
};

}  // namespace psar
