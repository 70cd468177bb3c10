#pragma once
// TpGroup: the t ranks of one tensor-parallel group (adjacent world ranks, see
// modelpar/grid.h), the Allreducer their all-reduces use, and counters of
// every collective they run. Layers never talk to Comm directly: the conjugate
// operators (conjugate.h) call allreduce()/all_gather() here, so what a layer
// communicates is counted and timed in one place.
//
// A default-constructed group is the serial model (t = 1): every collective is
// a no-op, while the calls of f and g are still counted, so a test can check
// the structure (4 per transformer layer) at any t.

#include <cstdint>
#include <limits>
#include <memory>
#include <span>

#include "comm/comm.h"

namespace psar {

class Allreducer;
class RingAllGather;
class RingReduceScatter;

struct TpCounters {
  int64_t f_backward = 0;        // f in backward: one all-reduce each when t > 1
  int64_t g_forward = 0;         // g in forward: one all-reduce each when t > 1
  int64_t allreduces = 0;        // all-reduces actually run (0 when t = 1)
  int64_t allreduce_floats = 0;  // their sizes, summed
  int64_t allreduce_min_floats = std::numeric_limits<int64_t>::max();
  int64_t allreduce_max_floats = 0;
  int64_t all_gathers = 0;        // all-gathers actually run (row_column split)
  int64_t all_gather_floats = 0;  // their gathered (full) sizes, summed
  int64_t reduce_scatters = 0;       // reduce-scatters actually run (sequence parallelism)
  int64_t reduce_scatter_floats = 0;  // their input (full) sizes, summed
  double seconds = 0;             // wall time inside all-reduces and all-gathers
};

// What happened between two snapshots: the additive fields of a minus those
// of before (the min/max sizes stay a's, over its whole history).
TpCounters operator-(const TpCounters& a, const TpCounters& before);

class TpGroup {
 public:
  TpGroup();  // serial: t = 1
  // comm: the tensor-parallel group (size t); allreducer: the algorithm of its
  // all-reduces (parallel.tp_allreduce). Both must outlive the group. A null
  // comm is the serial model.
  TpGroup(Comm* comm, Allreducer* allreducer);
  ~TpGroup();
  TpGroup(const TpGroup&) = delete;
  TpGroup& operator=(const TpGroup&) = delete;

  int size() const { return comm_ ? comm_->size() : 1; }  // t
  int rank() const { return comm_ ? comm_->rank() : 0; }
  Comm* comm() { return comm_; }

  // In-place sum over the group; counted and timed. No-op when t = 1.
  void allreduce(std::span<float> data);
  // In place: data is t equal contiguous pieces, piece `rank()` holds this
  // rank's contribution; on return every piece r holds rank r's. No-op at t = 1.
  void all_gather(std::span<float> data);
  // In place: data is t equal contiguous pieces of partial sums; on return
  // piece `rank()` holds the sum over the group (the others are clobbered).
  // No-op at t = 1.
  void reduce_scatter(std::span<float> data);

  TpCounters counters;

 private:
  Comm* comm_ = nullptr;
  Allreducer* allreducer_ = nullptr;
  std::unique_ptr<RingAllGather> gather_;
  std::unique_ptr<RingReduceScatter> scatter_;
};

}  // namespace psar
