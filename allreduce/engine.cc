#include "allreduce/engine.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "allreduce/eager.h"
#include "allreduce/partition.h"
#include "core/errors.h"
#include "core/ops.h"

namespace psar {

namespace {
bool overlap(int64_t a, int64_t a_count, int64_t b, int64_t b_count) {
  return a < b + b_count && b < a + a_count;
}
}  // namespace

void Engine::plan(const Program& program, int rank, const EngineOptions& options) {
  PSAR_CHECK(options.segment_bytes > 0, "segment size must be positive, got ",
             options.segment_bytes);
  PSAR_CHECK(0 <= rank && rank < program.ranks, program.name, ": rank ", rank, " of ",
             program.ranks);
  program_ = &program;
  options_ = options;
  rank_ = rank;
  sends_.clear();
  applies_.clear();
  const int64_t esize = element_size(options.dtype);
  bool all_eager = program.eager_up_to > 0;
  int64_t largest_recv = 0;
  const std::vector<Step>& steps = program.steps[static_cast<size_t>(rank)];
  for (size_t i = 0; i < steps.size(); ++i) {
    const Step& s = steps[i];
    // A copy into a slice followed by an add into the same slice is one
    // pass: slice = first + source (the same additions in the same order).
    int64_t first = -1, source = s.source;
    if (s.kind == StepKind::kCopy && i + 1 < steps.size()) {
      const Step& t = steps[i + 1];
      if (t.kind == StepKind::kAdd && t.offset == s.offset && t.count == s.count &&
          !overlap(s.offset, s.count, s.source, s.count) &&
          !overlap(s.offset, s.count, t.source, t.count)) {
        first = s.source;
        source = t.source;
        ++i;
      }
    }
    const StepKind kind = first >= 0 ? StepKind::kAdd : s.kind;
    const bool moves = s.sends() || s.receives();
    const int64_t bytes = s.count * esize;
    if (moves && bytes > program.eager_up_to) all_eager = false;
    // Eager pieces by the bytes on the wire (a transport's limit); segments
    // by the slice's float32 bytes, so every element type cuts the same
    // pieces and only their bytes on the wire differ. A segmented program's
    // local steps are cut alike, so what follows a piece (its rounding)
    // finds it in cache.
    const int64_t parts =
        moves && program.eager_up_to > 0 && bytes <= program.eager_up_to
            ? (bytes + kEagerPieceBytes - 1) / kEagerPieceBytes
        : program.segmented ? (s.count * static_cast<int64_t>(sizeof(float)) + options.segment_bytes - 1) /
                                  options.segment_bytes
                            : 1;
    const Partition pieces{s.count, static_cast<int>(std::max<int64_t>(1, parts))};
    for (int k = 0; k < pieces.parts; ++k) {
      Piece p{.kind = kind, .round = s.round, .peer = s.peer,
              .offset = s.offset + pieces.offset(k), .count = pieces.size(k),
              .source = source + pieces.offset(k), .depends = 0, .conflicts = {}, .rounding = {}};
      if (first >= 0) p.first = first + pieces.offset(k);
      if (s.sends()) {
        sends_.push_back(p);
      } else {
        p.in_place = s.kind == StepKind::kRecv && options.dtype == ElementType::kFp32;
        if (s.receives() && !p.in_place) largest_recv = std::max(largest_recv, p.count);
        applies_.push_back(p);
      }
    }
  }
  // Dependencies from the slices (see the header).
  for (Piece& s : sends_)
    for (int j = static_cast<int>(applies_.size()) - 1; j >= 0; --j) {
      const Piece& a = applies_[static_cast<size_t>(j)];
      if (a.round < s.round && overlap(a.offset, a.count, s.offset, s.count)) {
        s.depends = j + 1;
        break;
      }
    }
  for (size_t j = 0; j < applies_.size(); ++j) {
    Piece& a = applies_[j];
    for (size_t i = 0; i < sends_.size(); ++i)
      if (sends_[i].round <= a.round && overlap(sends_[i].offset, sends_[i].count, a.offset, a.count))
        a.conflicts.push_back(static_cast<int>(i));
    if (!a.in_place) continue;
    for (size_t k = j; k-- > 0;) {
      const Piece& b = applies_[k];
      const bool reads = b.kind == StepKind::kCopy || b.kind == StepKind::kAdd;
      if (overlap(b.offset, b.count, a.offset, a.count) ||
          (reads && overlap(b.source, b.count, a.offset, a.count)) ||
          (b.first >= 0 && overlap(b.first, b.count, a.offset, a.count))) {
        a.depends = static_cast<int>(k) + 1;
        break;
      }
    }
  }
  int64_t staged = 0;
  if (options.dtype != ElementType::kFp32)
    for (Piece& s : sends_) s.staging = std::exchange(staged, staged + s.count);
  // kWindow pieces per peer this rank receives from in one round (a tree's
  // two children each get their own).
  int peers = 1;
  {
    std::vector<std::pair<int, int>> seen;  // (round, peer)
    for (const Piece& a : applies_)
      if (a.peer >= 0) seen.emplace_back(a.round, a.peer);
    std::sort(seen.begin(), seen.end());
    seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
    for (size_t i = 0, j = 0; i < seen.size(); i = j) {
      for (j = i; j < seen.size() && seen[j].first == seen[i].first; ++j) {}
      peers = std::max(peers, static_cast<int>(j - i));
    }
  }
  plan_rounding();
  window_ = all_eager ? std::max(kWindow, static_cast<int>(applies_.size())) : kWindow * peers;
  // Receives that land in a slot take slots in turn: at most window_ of
  // them are posted at once (those of the applies in the window), so
  // min(window_, their number) slots keep them apart.
  int landing = 0;
  for (Piece& a : applies_)
    if ((a.kind == StepKind::kRecv || a.kind == StepKind::kRecvReduce) && !a.in_place)
      a.slot = landing++;
  const int slots = std::min(window_, landing);
  for (Piece& a : applies_)
    if (a.slot >= 0) a.slot %= slots;
  slot_bytes_ = largest_recv * esize;
  slots_.assign(static_cast<size_t>(slots * slot_bytes_), std::byte{0});
  staging_.assign(static_cast<size_t>(staged * esize), std::byte{0});
  workspace_.assign(static_cast<size_t>(program.workspace), 0.0f);
  send_requests_.clear();
  recv_requests_.clear();
  send_requests_.resize(sends_.size());
  recv_requests_.resize(applies_.size());
}

// Non-fp32: every rank must end with its vector in the element type. An
// element is already there if its last write was a receive (widened from
// the wire) or a send of a later round rounded it (encode_kept); otherwise
// it is rounded right after the last step that writes or reads it (while
// in cache, as later pieces are still in flight), or at the end if no step
// touches it. Rounding is idempotent, so the bits are those of rounding the
// whole vector at the end.
void Engine::plan_rounding() {
  final_rounding_.clear();
  if (options_.dtype == ElementType::kFp32) return;
  const int64_t n = program_->count;
  std::vector<int64_t> cuts{0, n};
  auto cut = [&](int64_t offset, int64_t count) {
    if (offset >= n || count <= 0) return;
    cuts.push_back(offset);
    cuts.push_back(std::min(n, offset + count));
  };
  auto reads = [](const Piece& a) { return a.kind == StepKind::kCopy || a.kind == StepKind::kAdd; };
  for (const Piece& a : applies_) {
    cut(a.offset, a.count);
    if (reads(a)) cut(a.source, a.count);
    if (a.first >= 0) cut(a.first, a.count);
  }
  for (const Piece& s : sends_) cut(s.offset, s.count);
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  const size_t intervals = cuts.size() - 1;
  // Elementary intervals [cuts[i], cuts[i+1]) covered by a slice: [lo, hi).
  auto covered = [&](int64_t offset, int64_t count) -> std::pair<size_t, size_t> {
    if (offset >= n || count <= 0) return {0, 0};
    const auto lo = std::lower_bound(cuts.begin(), cuts.end(), offset);
    const auto hi = std::lower_bound(lo, cuts.end(), std::min(n, offset + count));
    return {static_cast<size_t>(lo - cuts.begin()), static_cast<size_t>(hi - cuts.begin())};
  };
  std::vector<int> last_write(intervals, -1), last_touch(intervals, -1), last_send_round(intervals, -1);
  for (int j = 0; j < static_cast<int>(applies_.size()); ++j) {
    const Piece& a = applies_[static_cast<size_t>(j)];
    auto touch = [&](int64_t offset, bool writes) {
      const auto [lo, hi] = covered(offset, a.count);
      for (size_t i = lo; i < hi; ++i) {
        last_touch[i] = j;
        if (writes) last_write[i] = j;
      }
    };
    touch(a.offset, true);
    if (reads(a)) touch(a.source, false);
    if (a.first >= 0) touch(a.first, false);
  }
  for (const Piece& s : sends_) {
    const auto [lo, hi] = covered(s.offset, s.count);
    for (size_t i = lo; i < hi; ++i) last_send_round[i] = std::max(last_send_round[i], s.round);
  }
  for (Piece& a : applies_) a.rounding.clear();
  for (size_t i = 0; i < intervals; ++i) {
    const int w = last_write[i];
    const bool exact = w >= 0 ? applies_[static_cast<size_t>(w)].kind == StepKind::kRecv ||
                                    last_send_round[i] > applies_[static_cast<size_t>(w)].round
                              : last_send_round[i] >= 0;
    if (exact) continue;
    auto& list = last_touch[i] >= 0 ? applies_[static_cast<size_t>(last_touch[i])].rounding
                                    : final_rounding_;
    if (!list.empty() && list.back().first + list.back().second == cuts[i])
      list.back().second += cuts[i + 1] - cuts[i];
    else
      list.emplace_back(cuts[i], cuts[i + 1] - cuts[i]);
  }
}

void Engine::run(Comm& comm, std::span<float> data) {
  PSAR_CHECK(program_ != nullptr, "engine run before plan");
  PSAR_CHECK(comm.rank() == rank_ && comm.size() == program_->ranks, program_->name,
             " planned for rank ", rank_, " of ", program_->ranks, ", run on rank ", comm.rank(),
             " of ", comm.size());
  PSAR_CHECK(static_cast<int64_t>(data.size()) == program_->count, program_->name,
             " planned for ", program_->count, " elements, called with ", data.size());
  data_ = data.data();
  applied_ = posted_ = sent_ = 0;
  try {
    execute(comm);
  } catch (...) {
    // Withdraw what is still posted: the caller's buffer may not outlive us.
    for (auto& q : send_requests_) q = Request();
    for (auto& q : recv_requests_) q = Request();
    throw;
  }
}

void Engine::post_send(Comm& comm, int i) {
  const Piece& s = sends_[static_cast<size_t>(i)];
  float* from = at(s.offset);
  if (options_.dtype == ElementType::kFp32) {
    send_requests_[static_cast<size_t>(i)] =
        comm.isend(s.peer, std::span<const float>(from, static_cast<size_t>(s.count)), options_.tag);
    return;
  }
  const int64_t esize = element_size(options_.dtype);
  std::byte* wire = staging_.data() + s.staging * esize;
  encode_kept(options_.dtype, from, wire, s.count);  // a rank keeps what it sends
  send_requests_[static_cast<size_t>(i)] = comm.isend(
      s.peer, std::span<const std::byte>(wire, static_cast<size_t>(s.count * esize)), options_.tag);
}

void Engine::post_recv(Comm& comm, int j) {
  const Piece& a = applies_[static_cast<size_t>(j)];
  const size_t bytes = static_cast<size_t>(a.count * element_size(options_.dtype));
  std::byte* to = a.in_place ? reinterpret_cast<std::byte*>(at(a.offset))
                             : slots_.data() + a.slot * slot_bytes_;
  recv_requests_[static_cast<size_t>(j)] =
      comm.irecv(a.peer, std::span<std::byte>(to, bytes), options_.tag);
}

// A receive may be posted once its slot is free (the window) and, landing in
// place, once nothing earlier still reads or writes its slice.
bool Engine::can_post(int j) {
  const Piece& a = applies_[static_cast<size_t>(j)];
  if (!a.in_place) return true;
  if (a.depends > applied_) return false;
  for (int c : a.conflicts)
    if (c >= sent_ || !send_requests_[static_cast<size_t>(c)].test()) return false;
  return true;
}

void Engine::apply(int j) {
  const Piece& a = applies_[static_cast<size_t>(j)];
  if (a.in_place) return;  // landed
  for (int c : a.conflicts) {
    PSAR_CHECK(c < sent_, program_->name, ": rank ", rank_, " writes a slice that send ", c,
               " (not yet posted) must read first");
    send_requests_[static_cast<size_t>(c)].wait();
  }
  float* to = at(a.offset);
  const std::byte* slot = slots_.data() + a.slot * slot_bytes_;
  switch (a.kind) {
    case StepKind::kRecvReduce: decode_add(options_.dtype, slot, to, a.count); break;
    case StepKind::kRecv: decode(options_.dtype, slot, to, a.count); break;
    case StepKind::kCopy:
      std::memcpy(to, at(a.source), static_cast<size_t>(a.count) * sizeof(float));
      break;
    case StepKind::kAdd:
      if (a.first >= 0) ops::add(to, at(a.first), at(a.source), a.count);
      else ops::add_inplace(to, at(a.source), a.count);
      break;
    case StepKind::kSend: break;
  }
  if (options_.accumulate_in_dtype && (a.kind == StepKind::kRecvReduce || a.kind == StepKind::kAdd))
    round_to(options_.dtype, to, a.count);
  for (const auto& [offset, count] : a.rounding) round_to(options_.dtype, data_ + offset, count);
}

void Engine::execute(Comm& comm) {
  const int S = static_cast<int>(sends_.size()), A = static_cast<int>(applies_.size());
  // A paced program's send also waits until it is at most kLead rounds ahead
  // of this rank's next step (none left: no bound).
  auto post_sends = [&] {
    const int horizon = program_->paced && applied_ < A
                            ? applies_[static_cast<size_t>(applied_)].round + kLead
                            : std::numeric_limits<int>::max();
    while (sent_ < S && sends_[static_cast<size_t>(sent_)].depends <= applied_ &&
           sends_[static_cast<size_t>(sent_)].round <= horizon)
      post_send(comm, sent_++);
  };
  auto post_recvs = [&] {
    for (; posted_ < A && posted_ < applied_ + window_; ++posted_) {
      const Piece& a = applies_[static_cast<size_t>(posted_)];
      if (a.kind != StepKind::kRecv && a.kind != StepKind::kRecvReduce) continue;
      if (!can_post(posted_)) return;
      post_recv(comm, posted_);
    }
  };
  // Receives first, so that the peers' first pieces find them posted; then
  // the sends that depend on nothing; then what those sends unblocked.
  post_recvs();
  post_sends();
  post_recvs();
  for (int j = 0; j < A; ++j) {
    const Piece& a = applies_[static_cast<size_t>(j)];
    if (a.kind == StepKind::kRecv || a.kind == StepKind::kRecvReduce) {
      if (posted_ <= j) {  // deferred: what blocked it must complete now
        post_sends();
        for (int c : a.conflicts) {
          PSAR_CHECK(c < sent_, program_->name, ": rank ", rank_, " receives into a slice that send ",
                     c, " (not yet posted) must read first");
          send_requests_[static_cast<size_t>(c)].wait();
        }
        PSAR_CHECK(a.depends <= applied_, program_->name, ": receive ", j, " waits for step ",
                   a.depends - 1);
        post_recv(comm, j);
        posted_ = j + 1;
      }
      recv_requests_[static_cast<size_t>(j)].wait();
    } else {
      post_sends();
    }
    apply(j);
    ++applied_;
    post_recvs();
    post_sends();
  }
  post_sends();
  PSAR_CHECK(sent_ == S, program_->name, ": rank ", rank_, " posted ", sent_, " of ", S,
             " sends (a send depends on a step that never ran)");
  for (auto& q : send_requests_) q.wait();
  // Every rank ends in the wire type: ranks that hold a sum they never sent
  // (a butterfly's core next to a folding partner) round it as the partner
  // did before sending, so all hold the same bits (plan_rounding: what no
  // step rounded on the way).
  for (const auto& [offset, count] : final_rounding_) round_to(options_.dtype, data_ + offset, count);
}

}  // namespace psar
