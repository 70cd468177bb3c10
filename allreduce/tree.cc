// tree — reduce to rank 0 along a binary tree, then broadcast back down it.
// The tree is the heap layout: rank r's parent is (r-1)/2, its children 2r+1
// and 2r+2, so depth D = ⌊log₂N⌋. The vector is cut into S segments that
// stream: a node adds segment k from its children (left, then right) and
// passes it up while segment k+1 is arriving; the broadcast streams the same
// way. Cost: 2(D+S-1) segment steps; every non-root rank sends n up and
// receives n down, 2(N-1)·n bytes in all (the textbook's 2·N·M, docs/theory.md), but an inner
// node with two children sends and receives 3n (a leaf n): the tree has the
// log N latency of a butterfly, not the balance of the ring. Time ≈
// 2(D+S-1)·(α + 2(n/S)β) + (D+S-1)·2(n/S)γ. Only the root's sums are
// broadcast, so all ranks hold identical bits. Any N ≥ 1, any count.

#include <algorithm>
#include <vector>

#include "allreduce/algorithms.h"
#include "allreduce/partition.h"
#include "allreduce/tags.h"
#include "core/errors.h"
#include "core/ops.h"

namespace psar {

namespace {

// Receives posted ahead per child (landing slots per child).
constexpr int kWindow = 4;

class TreeAllreducer final : public Allreducer {
 public:
  explicit TreeAllreducer(const AllreduceOptions& options) : options_(options) {}
  std::string name() const override { return "tree"; }

  void allreduce(Comm& comm, std::span<float> data) override {
    const auto count = static_cast<int64_t>(data.size());
    if (comm.size() == 1 || count == 0) return;
    Comm::OpScope op(comm, "tree allreduce");
    plan(comm, count);
    std::vector<Request> up_sends(static_cast<size_t>(segs_.parts));
    reduce_up(comm, data, up_sends);
    broadcast_down(comm, data, up_sends);
  }

 private:
  void plan(const Comm& comm, int64_t count) {
    if (count == count_ && comm.rank() == rank_ && comm.size() == size_) return;
    count_ = count;
    rank_ = comm.rank();
    size_ = comm.size();
    const int64_t bytes = count * static_cast<int64_t>(sizeof(float));
    segs_ = Partition{count, static_cast<int>(std::max<int64_t>(
                                 1, (bytes + options_.segment_bytes - 1) / options_.segment_bytes))};
    parent_ = rank_ == 0 ? -1 : (rank_ - 1) / 2;
    children_.clear();
    for (int c : {2 * rank_ + 1, 2 * rank_ + 2})
      if (c < size_) children_.push_back(c);
    slot_size_ = segs_.largest();
    scratch_.assign(static_cast<size_t>(children_.size() * kWindow * slot_size_), 0.0f);
  }

  std::span<float> segment(std::span<float> data, int j) const {
    return data.subspan(static_cast<size_t>(segs_.offset(j)), static_cast<size_t>(segs_.size(j)));
  }
  std::span<float> slot(size_t child, int j) {
    const size_t at = (child * kWindow + static_cast<size_t>(j % kWindow)) * slot_size_;
    return std::span<float>(scratch_).subspan(at, static_cast<size_t>(segs_.size(j)));
  }

  // Leaves only send; inner nodes add each child's segment straight from its
  // landing slot, then pass the segment up.
  void reduce_up(Comm& comm, std::span<float> data, std::vector<Request>& up_sends) {
    const int S = segs_.parts;
    std::vector<Request> recvs(children_.size() * static_cast<size_t>(S));
    auto post = [&](int j) {
      for (size_t c = 0; c < children_.size(); ++c)
        recvs[c * S + j] = comm.irecv(children_[c], slot(c, j), allreduce_tags::kTreeUp);
    };
    for (int j = 0; j < std::min(S, kWindow); ++j) post(j);
    for (int j = 0; j < S; ++j) {
      const std::span<float> mine = segment(data, j);
      for (size_t c = 0; c < children_.size(); ++c) {
        recvs[c * S + j].wait();
        ops::add_inplace(mine.data(), slot(c, j).data(), static_cast<int64_t>(mine.size()));
      }
      if (j + kWindow < S) post(j + kWindow);
      if (parent_ >= 0)
        up_sends[j] = comm.isend(parent_, std::span<const float>(mine), allreduce_tags::kTreeUp);
    }
  }

  // Each segment lands in place and is forwarded to the children at once.
  void broadcast_down(Comm& comm, std::span<float> data, std::vector<Request>& up_sends) {
    const int S = segs_.parts;
    std::vector<Request> recvs(static_cast<size_t>(S));
    std::vector<Request> sends;
    sends.reserve(children_.size() * static_cast<size_t>(S));
    auto post = [&](int j) {
      up_sends[j].wait();  // the region still travelling up cannot be received into
      recvs[j] = comm.irecv(parent_, segment(data, j), allreduce_tags::kTreeDown);
    };
    if (parent_ >= 0)
      for (int j = 0; j < std::min(S, kWindow); ++j) post(j);
    for (int j = 0; j < S; ++j) {
      if (parent_ >= 0) {
        recvs[j].wait();
        if (j + kWindow < S) post(j + kWindow);
      }
      for (int child : children_)
        sends.push_back(comm.isend(child, std::span<const float>(segment(data, j)),
                                   allreduce_tags::kTreeDown));
    }
    wait_all(sends);
    wait_all(up_sends);
  }

  AllreduceOptions options_;
  int64_t count_ = -1;
  int rank_ = -1, size_ = 0, parent_ = -1;
  std::vector<int> children_;
  Partition segs_;
  int64_t slot_size_ = 0;
  std::vector<float> scratch_;  // [children][kWindow][largest segment]
};

}  // namespace

// Each phase (reduce, then broadcast) is bound by the root's link: k·S
// segments through it (k = min(2, N-1) children of the root, S segments)
// after a fill of f = 2·max(0, D-2) segment times, D = ⌊log₂N⌋:
// 2(D+S-1)α + 2(k·S+f)(n/S)β + (k·S+f)(n/S)γ. Exact for N a power of two;
// otherwise the fill differs by a segment or two.
CostTerms tree_cost(int ranks, int64_t bytes, const AllreduceOptions& options) {
  if (ranks == 1) return {};
  int depth = 0;
  while ((2 << depth) <= ranks) ++depth;
  const int64_t segments =
      std::max<int64_t>(1, (bytes + options.segment_bytes - 1) / options.segment_bytes);
  const double k = std::min(2, ranks - 1), fill = 2.0 * std::max(0, depth - 2);
  const double s = static_cast<double>(segments), piece = static_cast<double>(bytes) / s;
  return {2.0 * (depth + s - 1), 2 * (k * s + fill) * piece, (k * s + fill) * piece};
}

// Up to the parent once (every rank but the root), down to each child once.
int64_t tree_sent_bytes(int rank, int ranks, int64_t count) {
  const int children = (2 * rank + 1 < ranks) + (2 * rank + 2 < ranks);
  return 4 * count * ((rank > 0) + children);
}

// Segment j leaves a node at depth k for its parent at round (D-k)+j (D the
// deepest level), so a parent has it from every child one round before it
// passes it on; the broadcast sends segment j from depth k at round
// U+k+j, U = D+S-1 the rounds of the reduction: 2(D+S-1) rounds in all.
StepList tree_steps(int ranks, int64_t count, const AllreduceOptions& options) {
  StepList list{.algorithm = "tree", .ranks = ranks, .count = count, .rounds = {}};
  if (ranks == 1 || count == 0) return list;
  const int64_t bytes = count * static_cast<int64_t>(sizeof(float));
  const Partition segs{count, static_cast<int>(std::max<int64_t>(
                                  1, (bytes + options.segment_bytes - 1) / options.segment_bytes))};
  auto depth = [](int r) {
    int d = 0;
    while (r > 0) r = (r - 1) / 2, ++d;
    return d;
  };
  const int deepest = depth(ranks - 1), up_rounds = deepest + segs.parts - 1;
  for (int j = 0; j < segs.parts; ++j)
    for (int r = 1; r < ranks; ++r)
      list.add(deepest - depth(r) + j, {.src = r, .dst = (r - 1) / 2, .offset = segs.offset(j),
                                        .count = segs.size(j), .reduce = true});
  for (int j = 0; j < segs.parts; ++j)
    for (int r = 0; r < ranks; ++r)
      for (int c : {2 * r + 1, 2 * r + 2})
        if (c < ranks)
          list.add(up_rounds + depth(r) + j, {.src = r, .dst = c, .offset = segs.offset(j),
                                              .count = segs.size(j), .reduce = false});
  return list;
}

std::unique_ptr<Allreducer> make_tree_allreducer(const AllreduceOptions& options) {
  if (options.segment_bytes <= 0)
    throw ConfigError("tree allreduce: segment size must be positive, got " +
                      std::to_string(options.segment_bytes));
  return std::make_unique<TreeAllreducer>(options);
}

}  // namespace psar
