#include "allreduce/program.h"

#include <algorithm>
#include <map>

#include "allreduce/partition.h"
#include "core/errors.h"

namespace psar {

Program::Program(std::string name_, int ranks_, int64_t count_)
    : name(std::move(name_)), ranks(ranks_), count(count_),
      steps(static_cast<size_t>(std::max(ranks_, 0))) {}

void Program::transfer(int round, int src, int dst, int64_t offset, int64_t n, bool reduce) {
  transfer(round, src, offset, dst, offset, n, reduce);
}

void Program::transfer(int round, int src, int64_t src_offset, int dst, int64_t dst_offset,
                       int64_t n, bool reduce) {
  PSAR_CHECK(0 <= src && src < ranks && 0 <= dst && dst < ranks && src != dst, name,
             ": transfer ", src, " -> ", dst, " outside ", ranks, " ranks");
  if (n == 0) return;
  steps[static_cast<size_t>(src)].push_back(
      {.kind = StepKind::kSend, .round = round, .peer = dst, .offset = src_offset, .count = n});
  steps[static_cast<size_t>(dst)].push_back(
      {.kind = reduce ? StepKind::kRecvReduce : StepKind::kRecv, .round = round, .peer = src,
       .offset = dst_offset, .count = n});
}

void Program::local(int rank, int round, StepKind kind, int64_t offset, int64_t source,
                    int64_t n) {
  PSAR_CHECK(kind == StepKind::kCopy || kind == StepKind::kAdd, name, ": local step of kind ",
             static_cast<int>(kind));
  if (n == 0) return;
  steps[static_cast<size_t>(rank)].push_back(
      {.kind = kind, .round = round, .offset = offset, .count = n, .source = source});
}

int Program::append(const Program& part, const std::function<int(int)>& rank_of, int64_t shift,
                    int first_round) {
  for (int r = 0; r < part.ranks; ++r) {
    auto& mine = steps[static_cast<size_t>(rank_of(r))];
    for (Step s : part.steps[static_cast<size_t>(r)]) {
      s.round += first_round;
      s.offset += shift;
      s.source += shift;
      if (s.peer >= 0) s.peer = rank_of(s.peer);
      mine.push_back(s);
    }
  }
  eager_up_to = std::max(eager_up_to, part.eager_up_to);
  segmented = segmented && part.segmented;
  return part.rounds();
}

void Program::finish() {
  for (auto& list : steps)
    std::stable_sort(list.begin(), list.end(),
                     [](const Step& a, const Step& b) { return a.round < b.round; });
}

int Program::rounds() const {
  int n = 0;
  for (const auto& list : steps)
    for (const Step& s : list) n = std::max(n, s.round + 1);
  return n;
}

namespace {
template <typename Pick>
int64_t sum_where(const std::vector<Step>& list, Pick pick) {
  int64_t total = 0;
  for (const Step& s : list)
    if (pick(s)) total += s.count;
  return total;
}
}  // namespace

int64_t Program::sent_elements(int rank) const {
  return sum_where(steps[static_cast<size_t>(rank)], [](const Step& s) { return s.sends(); });
}
int64_t Program::received_elements(int rank) const {
  return sum_where(steps[static_cast<size_t>(rank)], [](const Step& s) { return s.receives(); });
}
int64_t Program::reduced_elements(int rank) const {
  return sum_where(steps[static_cast<size_t>(rank)], [](const Step& s) { return s.reduces(); });
}
int64_t Program::messages(int rank) const {
  const auto& list = steps[static_cast<size_t>(rank)];
  return std::count_if(list.begin(), list.end(), [](const Step& s) { return s.sends(); });
}
int64_t Program::sent_elements_total() const {
  int64_t total = 0;
  for (int r = 0; r < ranks; ++r) total += sent_elements(r);
  return total;
}

std::vector<std::vector<Transfer>> Program::transfers() const {
  // The receives at dst from src, in order: (src, dst) -> steps.
  std::map<std::pair<int, int>, std::vector<const Step*>> recvs;
  for (int r = 0; r < ranks; ++r)
    for (const Step& s : steps[static_cast<size_t>(r)])
      if (s.receives()) recvs[{s.peer, r}].push_back(&s);
  std::map<std::pair<int, int>, size_t> matched;
  std::vector<std::vector<Transfer>> out(static_cast<size_t>(rounds()));
  for (int r = 0; r < ranks; ++r)
    for (const Step& s : steps[static_cast<size_t>(r)]) {
      if (!s.sends()) continue;
      const auto key = std::make_pair(r, s.peer);
      const auto& list = recvs[key];
      const size_t i = matched[key]++;
      PSAR_CHECK(i < list.size(), name, ": send ", i, " from rank ", r, " to ", s.peer,
                 " has no matching receive");
      const Step& in = *list[i];
      PSAR_CHECK(in.count == s.count && in.round == s.round, name, ": send ", i, " from rank ", r,
                 " to ", s.peer, " (", s.count, " elements, round ", s.round,
                 ") is received as ", in.count, " elements in round ", in.round);
      out[static_cast<size_t>(s.round)].push_back(
          {.src = r, .dst = s.peer, .count = s.count, .reduce = in.kind == StepKind::kRecvReduce});
    }
  for (const auto& [key, list] : recvs)
    PSAR_CHECK(matched[key] == list.size(), name, ": rank ", key.second, " receives ", list.size(),
               " messages from ", key.first, ", which sends ", matched[key]);
  return out;
}

std::vector<std::vector<int64_t>> Program::reduced_per_round() const {
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(rounds()),
                                        std::vector<int64_t>(static_cast<size_t>(ranks), 0));
  for (int r = 0; r < ranks; ++r)
    for (const Step& s : steps[static_cast<size_t>(r)])
      if (s.reduces()) out[static_cast<size_t>(s.round)][static_cast<size_t>(r)] += s.count;
  return out;
}

void Program::validate() const {
  PSAR_CHECK(static_cast<int>(steps.size()) == ranks, name, ": steps for ", steps.size(),
             " ranks, program for ", ranks);
  const int64_t space = count + workspace;
  for (int r = 0; r < ranks; ++r) {
    int last = 0;
    for (const Step& s : steps[static_cast<size_t>(r)]) {
      PSAR_CHECK(s.round >= last, name, ": rank ", r, " takes round ", s.round, " after ", last);
      last = s.round;
      PSAR_CHECK(s.count > 0 && s.offset >= 0 && s.offset + s.count <= space, name, ": rank ", r,
                 " round ", s.round, ": slice [", s.offset, ", ", s.offset + s.count,
                 ") outside [0, ", space, ")");
      PSAR_CHECK(s.offset + s.count <= count || s.offset >= count, name,
                 ": a slice straddles the vector and the workspace");
      if (s.kind == StepKind::kCopy || s.kind == StepKind::kAdd)
        PSAR_CHECK(s.source >= 0 && s.source + s.count <= space &&
                       (s.source + s.count <= s.offset || s.offset + s.count <= s.source),
                   name, ": local step on rank ", r, " reads outside or over what it writes");
      else
        PSAR_CHECK(0 <= s.peer && s.peer < ranks && s.peer != r, name, ": rank ", r,
                   " talks to peer ", s.peer);
    }
  }
  (void)transfers();
}

bool ProgramShape::spans_nodes() const {
  return std::any_of(node.begin(), node.end(), [&](int n) { return n != node.front(); });
}

int64_t ProgramShape::segments(int64_t elements) const {
  const int64_t bytes = elements * static_cast<int64_t>(sizeof(float));
  return std::max<int64_t>(1, (bytes + segment_bytes - 1) / segment_bytes);
}

int64_t ProgramShape::piece_offset(int r) const {
  if (split.empty()) return Partition{count, ranks}.offset(r);
  PSAR_CHECK(static_cast<int>(split.size()) == ranks + 1 && split.front() == 0 &&
                 split.back() == count,
             "a split of ", count, " elements over ", ranks, " ranks needs ", ranks + 1,
             " boundaries from 0 to ", count);
  return split[static_cast<size_t>(r)];
}

int64_t ProgramShape::piece_size(int r) const {
  if (split.empty()) return Partition{count, ranks}.size(r);
  return piece_offset(r + 1) - piece_offset(r);
}

}  // namespace psar
