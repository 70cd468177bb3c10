#pragma once
// The engine: runs any program (allreduce/program.h) over a Comm. The one
// place where steps are cut into segments, messages overlap and reductions
// happen; the algorithms only say what moves where.
//
// Plan (once per program and rank): every send and receive step is cut into
// pieces — eager pieces of kEagerPieceBytes for a step of up to the
// program's eager_up_to bytes (allreduce/eager.h), otherwise segments of at
// most segment_bytes of the float32 slice (sizes by Partition, so both ends
// cut a message alike; counted in float32 bytes, so every element type cuts
// the same pieces and sends each in its own bytes), or whole where the
// program says it is not segmented. A copy followed by an add into the same
// slice runs as one pass (slice = a + b).
// Each piece gets its dependencies from the slices it touches: a send waits
// for the rank's earlier-round steps that write what it reads; a step that
// writes a slice waits until this rank's sends of the same or earlier rounds
// that read it have completed (MPI forbids touching a buffer in flight); a
// receive that lands in place also waits for the earlier steps touching its
// slice.
//
// Run: receives are posted up to kWindow pieces per peer of a round ahead of
// the one being applied (every piece at once for an all-eager program, so no eager piece
// arrives unexpected); sends are posted in program order as soon as their
// dependencies are met (in a paced program, and no more than kLead rounds
// ahead of the rank's next receive or local step); receives and local steps
// apply in program order. So
// a ring segment is forwarded as soon as it is reduced while the next is in
// flight, and a tree passes segment j up while j+1 arrives — the pipelining
// falls out of the slices, not out of per-algorithm loops.
//
// Element types: an fp32 program sends straight from the caller's vector and
// receives copies in place; reductions land in window slots and are added
// from there. A bf16/fp16 program converts each piece it sends into a
// staging buffer (rounding the sender's own copy to the same values in the
// same pass, allreduce/element_type.h), lands every receive in a slot to
// widen it, and rounds to the element type what neither a receive nor a
// later send left in it — right after the last step that touches it, else
// at the end — so every rank ends with the same bits whether or not it sent
// its final values.

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "allreduce/element_type.h"
#include "allreduce/program.h"
#include "comm/comm.h"

namespace psar {

struct EngineOptions {
  int64_t segment_bytes = 512 * 1024;
  ElementType dtype = ElementType::kFp32;
  bool accumulate_in_dtype = false;  // round every partial sum to dtype
  int tag = 0;
};

class Engine {
 public:
  // Receive pieces posted ahead of the one being applied.
  static constexpr int kWindow = 4;
  // Rounds a paced program's sends run ahead of the rank's next step.
  static constexpr int kLead = 1;

  // Plans `program` for rank `rank`; the program must outlive the plan.
  void plan(const Program& program, int rank, const EngineOptions& options);
  // Runs the planned program over comm (comm.rank() = the planned rank,
  // comm.size() = program.ranks, data.size() = program.count).
  void run(Comm& comm, std::span<float> data);

 private:
  struct Piece {
    StepKind kind;
    int round = 0, peer = -1;
    int64_t offset = 0, count = 0, source = 0;
    int depends = 0;              // send: applies done first; in-place receive: the same
    std::vector<int> conflicts;   // apply: sends that must complete first
    int64_t staging = 0;          // send (non-fp32): element offset in staging_
    bool in_place = false;        // receive: lands in the vector itself
    int64_t first = -1;           // kAdd: slice = [first] + [source] (a copy and an add fused)
    int slot = -1;                // receive not in place: its landing slot
    // Non-fp32: slices of the vector rounded to the element type after this
    // step (plan_rounding).
    std::vector<std::pair<int64_t, int64_t>> rounding;
  };
  float* at(int64_t offset) {
    return offset < program_->count ? data_ + offset
                                    : workspace_.data() + (offset - program_->count);
  }
  void plan_rounding();
  void execute(Comm& comm);
  void post_send(Comm& comm, int i);
  void post_recv(Comm& comm, int j);
  bool can_post(int j);
  void apply(int j);

  const Program* program_ = nullptr;
  EngineOptions options_;
  int rank_ = -1, window_ = kWindow;
  std::vector<Piece> sends_, applies_;
  std::vector<std::pair<int64_t, int64_t>> final_rounding_;  // rounded after the last step
  std::vector<float> workspace_;
  std::vector<std::byte> slots_, staging_;
  int64_t slot_bytes_ = 0;
  std::vector<Request> send_requests_, recv_requests_;
  float* data_ = nullptr;
  int applied_ = 0, posted_ = 0, sent_ = 0;
};

}  // namespace psar
