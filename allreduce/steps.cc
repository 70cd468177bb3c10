#include "allreduce/steps.h"

#include <cstring>

#include "allreduce/tags.h"
#include "core/errors.h"
#include "core/ops.h"

namespace psar {

void StepList::add(int round, StepMessage message) {
  PSAR_CHECK(round >= 0, "step list round ", round, " is negative");
  if (static_cast<size_t>(round) >= rounds.size()) rounds.resize(static_cast<size_t>(round) + 1);
  rounds[static_cast<size_t>(round)].messages.push_back(message);
}

namespace {
// Payload bytes of the messages `pick` selects.
template <typename Pick>
int64_t bytes_where(const StepList& list, Pick pick) {
  int64_t total = 0;
  for (const auto& round : list.rounds)
    for (const auto& m : round.messages)
      if (pick(m)) total += m.bytes();
  return total;
}
}  // namespace

int64_t StepList::sent_bytes(int rank) const {
  return bytes_where(*this, [&](const StepMessage& m) { return m.src == rank; });
}
int64_t StepList::recv_bytes(int rank) const {
  return bytes_where(*this, [&](const StepMessage& m) { return m.dst == rank; });
}
int64_t StepList::reduced_bytes(int rank) const {
  return bytes_where(*this, [&](const StepMessage& m) { return m.dst == rank && m.reduce; });
}

int64_t StepList::messages() const {
  int64_t total = 0;
  for (const auto& round : rounds) total += static_cast<int64_t>(round.messages.size());
  return total;
}

void run_steps(Comm& comm, const StepList& list, std::span<float> data) {
  PSAR_CHECK(comm.size() == list.ranks, list.algorithm, " step list for ", list.ranks,
             " ranks run on ", comm.size());
  PSAR_CHECK(static_cast<int64_t>(data.size()) == list.count, list.algorithm,
             " step list for ", list.count, " floats run on ", data.size());
  Comm::OpScope op(comm, list.algorithm + " (step list)");
  const int me = comm.rank();
  std::vector<std::vector<float>> landing;
  std::vector<const StepMessage*> incoming;
  std::vector<Request> requests;
  for (const auto& round : list.rounds) {
    landing.clear();
    incoming.clear();
    requests.clear();
    for (const auto& m : round.messages)
      if (m.dst == me) {
        PSAR_CHECK(m.offset >= 0 && m.offset + m.count <= list.count, list.algorithm,
                   ": message slice outside the vector");
        incoming.push_back(&m);
        landing.emplace_back(static_cast<size_t>(m.count));
      }
    for (size_t i = 0; i < incoming.size(); ++i)
      requests.push_back(comm.irecv(incoming[i]->src, std::span<float>(landing[i]),
                                    allreduce_tags::kSteps));
    for (const auto& m : round.messages)
      if (m.src == me)
        requests.push_back(comm.isend(
            m.dst,
            std::span<const float>(data.subspan(static_cast<size_t>(m.offset),
                                                static_cast<size_t>(m.count))),
            allreduce_tags::kSteps));
    wait_all(requests);
    for (size_t i = 0; i < incoming.size(); ++i) {
      float* dst = data.data() + incoming[i]->offset;
      if (incoming[i]->reduce)
        ops::add_inplace(dst, landing[i].data(), incoming[i]->count);
      else if (incoming[i]->count > 0)
        std::memcpy(dst, landing[i].data(), landing[i].size() * sizeof(float));
    }
  }
}

}  // namespace psar
