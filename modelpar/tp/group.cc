#include "modelpar/tp/group.h"

#include <algorithm>

#include "allreduce/allreducer.h"
#include "allreduce/collectives.h"
#include "core/errors.h"
#include "core/timer.h"

namespace psar {

TpCounters operator-(const TpCounters& a, const TpCounters& before) {
  TpCounters d = a;
  d.f_backward -= before.f_backward;
  d.g_forward -= before.g_forward;
  d.allreduces -= before.allreduces;
  d.allreduce_floats -= before.allreduce_floats;
  d.all_gathers -= before.all_gathers;
  d.all_gather_floats -= before.all_gather_floats;
  d.reduce_scatters -= before.reduce_scatters;
  d.reduce_scatter_floats -= before.reduce_scatter_floats;
  d.seconds -= before.seconds;
  return d;
}

TpGroup::TpGroup() = default;

TpGroup::TpGroup(Comm* comm, Allreducer* allreducer)
    : comm_(comm && comm->size() > 1 ? comm : nullptr), allreducer_(allreducer) {
  if (comm_ && !allreducer_)
    throw ConfigError("tensor parallelism over " + std::to_string(comm_->size()) +
                      " ranks needs an all-reduce algorithm (parallel.tp_allreduce)");
  if (comm_) {
    gather_ = std::make_unique<RingAllGather>();
    scatter_ = std::make_unique<RingReduceScatter>();
  }
}

TpGroup::~TpGroup() = default;

void TpGroup::allreduce(std::span<float> data) {
  if (!comm_) return;
  ScopedTimer timer(counters.seconds);
  allreducer_->allreduce(*comm_, data);
  const auto n = static_cast<int64_t>(data.size());
  counters.allreduces += 1;
  counters.allreduce_floats += n;
  counters.allreduce_min_floats = std::min(counters.allreduce_min_floats, n);
  counters.allreduce_max_floats = std::max(counters.allreduce_max_floats, n);
}

void TpGroup::all_gather(std::span<float> data) {
  if (!comm_) return;
  PSAR_CHECK(data.size() % static_cast<size_t>(comm_->size()) == 0, "all-gather of ", data.size(),
             " floats is not ", comm_->size(), " equal pieces");
  ScopedTimer timer(counters.seconds);
  gather_->all_gather(*comm_, data);
  counters.all_gathers += 1;
  counters.all_gather_floats += static_cast<int64_t>(data.size());
}

void TpGroup::reduce_scatter(std::span<float> data) {
  if (!comm_) return;
  PSAR_CHECK(data.size() % static_cast<size_t>(comm_->size()) == 0, "reduce-scatter of ",
             data.size(), " floats is not ", comm_->size(), " equal pieces");
  ScopedTimer timer(counters.seconds);
  scatter_->reduce_scatter(*comm_, data);
  counters.reduce_scatters += 1;
  counters.reduce_scatter_floats += static_cast<int64_t>(data.size());
}

}  // namespace psar
