#include "comm/inproc_comm.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/netem.h"
#include "core/errors.h"
#include "core/timer.h"

namespace psar {

namespace {

// Failure state shared by a root world and every world split from it, indexed
// by root-world rank.
struct Failures {
  explicit Failures(int n) : reasons(static_cast<size_t>(n)) {}
  std::mutex mu;
  std::vector<std::string> reasons;  // "" = alive
  std::atomic<bool> any{false};
  std::string reason(int root_rank) {
    if (!any.load()) return {};
    std::lock_guard<std::mutex> lock(mu);
    return reasons[static_cast<size_t>(root_rank)];
  }
};

struct PendingRecv {
  std::span<std::byte> buffer;
  bool done = false;
  double stamp = 0;  // sender's emulated egress end (network emulation)
  std::string error;
};

struct Message {
  std::vector<std::byte> data;
  double stamp = 0;
};

// One mailbox per destination rank.
struct Mailbox {
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::pair<int, int>, std::deque<Message>> unmatched;                       // (src, tag)
  std::map<std::pair<int, int>, std::deque<std::shared_ptr<PendingRecv>>> posted;  // (src, tag)
};

std::string size_mismatch(int src, int tag, size_t expected, size_t got) {
  return "recv from rank " + std::to_string(src) + " (tag " + std::to_string(tag) +
         "): expected " + std::to_string(expected) + " bytes, got " + std::to_string(got) +
         " (sizes disagree across ranks)";
}

}  // namespace

class InProcWorld : public std::enable_shared_from_this<InProcWorld> {
 public:
  InProcWorld(int size, std::shared_ptr<Failures> failures, std::vector<int> root_ranks,
              InProcOptions options)
      : size_(size),
        boxes_(static_cast<size_t>(size)),
        failures_(std::move(failures)),
        root_ranks_(std::move(root_ranks)),
        options_(options) {
    for (auto& b : boxes_) b = std::make_unique<Mailbox>();
  }

  int size() const { return size_; }
  Mailbox& box(int rank) { return *boxes_[static_cast<size_t>(rank)]; }
  const InProcOptions& options() const { return options_; }
  std::string failure_of(int rank) { return failures_->reason(root_ranks_[rank]); }

  void fail(int rank, const std::string& reason) {
    {
      std::lock_guard<std::mutex> lock(failures_->mu);
      auto& r = failures_->reasons[static_cast<size_t>(root_ranks_[rank])];
      if (r.empty()) r = reason.empty() ? "failed" : reason;
      failures_->any = true;
    }
    for (auto& b : boxes_) {
      std::lock_guard<std::mutex> lock(b->mu);
      b->cv.notify_all();
    }
  }

  // The world for `color` of split number `seq`; created by the first arrival.
  std::shared_ptr<InProcWorld> child(int seq, int color, std::vector<int> members) {
    std::lock_guard<std::mutex> lock(children_mu_);
    auto& w = children_[{seq, color}];
    if (!w) {
      std::vector<int> roots;
      for (int m : members) roots.push_back(root_ranks_[m]);
      w = std::make_shared<InProcWorld>(static_cast<int>(members.size()), failures_,
                                        std::move(roots), options_);
    }
    return w;
  }

  // The NIC the ranks of `node` share (two-level network): created by the
  // first rank that asks, or anew when asked for another model.
  std::shared_ptr<Nic> node_nic(int node, const NetModel& model) {
    std::lock_guard<std::mutex> lock(children_mu_);
    auto& nic = node_nics_[node];
    if (!nic || nic->model().bandwidth != model.bandwidth ||
        nic->model().latency != model.latency)
      nic = std::make_shared<Nic>(model);
    return nic;
  }

 private:
  int size_;
  std::vector<std::unique_ptr<Mailbox>> boxes_;
  std::shared_ptr<Failures> failures_;
  std::vector<int> root_ranks_;  // local rank -> root-world rank
  InProcOptions options_;
  std::mutex children_mu_;
  std::map<std::pair<int, int>, std::shared_ptr<InProcWorld>> children_;
  std::map<int, std::shared_ptr<Nic>> node_nics_;
};

namespace {

class DoneRequest final : public RequestImpl {
 public:
  explicit DoneRequest(std::string what) : what_(std::move(what)) {}
  bool test() override { return true; }
  std::string describe() const override { return what_; }

 private:
  std::string what_;
};

class InProcRecvRequest final : public RequestImpl {
 public:
  InProcRecvRequest(std::shared_ptr<InProcWorld> world, int me, int src, int tag,
                    std::shared_ptr<PendingRecv> pending)
      : world_(std::move(world)), me_(me), src_(src), tag_(tag), pending_(std::move(pending)) {}

  ~InProcRecvRequest() override {
    // Abandoned while pending: withdraw it so a later message is not copied
    // into a buffer that no longer exists.
    Mailbox& box = world_->box(me_);
    std::lock_guard<std::mutex> lock(box.mu);
    if (pending_->done) return;
    auto it = box.posted.find({src_, tag_});
    if (it == box.posted.end()) return;
    auto& q = it->second;
    q.erase(std::remove(q.begin(), q.end(), pending_), q.end());
  }

  bool test() override { return wait_for(0.0); }

  bool wait_for(double seconds) override {
    Mailbox& box = world_->box(me_);
    const double deadline = now_seconds() + seconds;
    std::unique_lock<std::mutex> lock(box.mu);
    for (;;) {
      if (pending_->done) {
        if (!pending_->error.empty()) throw CommError(pending_->error);
        return true;
      }
      const std::string failed = world_->failure_of(src_);
      if (!failed.empty())
        throw CommError(describe() + ": peer rank " + std::to_string(src_) + " failed: " + failed);
      const double now = now_seconds();
      if (now >= deadline) return false;
      // Short slices so a peer's failure is seen promptly even without a notify.
      const double slice = std::min(deadline - now, 0.05);
      box.cv.wait_for(lock, std::chrono::duration<double>(slice));
    }
  }

  std::string describe() const override {
    return "recv from rank " + std::to_string(src_) + " (tag " + std::to_string(tag_) + ", " +
           std::to_string(pending_->buffer.size()) + " bytes)";
  }
  double stamp() const override { return pending_->stamp; }

 private:
  std::shared_ptr<InProcWorld> world_;
  int me_, src_, tag_;
  std::shared_ptr<PendingRecv> pending_;
};

class InProcComm final : public Comm {
 public:
  InProcComm(std::shared_ptr<InProcWorld> world, int rank)
      : Comm(rank, world->size()), world_(std::move(world)) {
    set_timeout(world_->options().timeout_s);
  }

  std::string transport() const override { return "inproc"; }
  InProcWorld& world() { return *world_; }

  std::unique_ptr<Comm> split(int color, int key) override {
    OpScope op(*this, "split");
    const int seq = split_seq_++;
    int mine[2] = {color, key};
    const auto all = allgather_bytes(std::as_bytes(std::span<const int>(mine, 2)));
    std::vector<std::pair<int, int>> members;  // (key, rank)
    for (int r = 0; r < size_; ++r) {
      int v[2];
      std::memcpy(v, all[r].data(), sizeof v);
      if (v[0] == color) members.push_back({v[1], r});
    }
    std::sort(members.begin(), members.end());
    std::vector<int> ranks;
    int my_new_rank = -1;
    for (size_t i = 0; i < members.size(); ++i) {
      ranks.push_back(members[i].second);
      if (members[i].second == rank_) my_new_rank = static_cast<int>(i);
    }
    auto child = world_->child(seq, color, ranks);
    auto comm = std::make_unique<InProcComm>(child, my_new_rank);
    comm->inherit(*this);
    return comm;
  }

 protected:
  std::unique_ptr<RequestImpl> post_send(int peer, std::span<const std::byte> data, int tag,
                                         double stamp) override {
    std::string what = "send to rank " + std::to_string(peer) + " (tag " + std::to_string(tag) +
                       ", " + std::to_string(data.size()) + " bytes)";
    const std::string failed = world_->failure_of(peer);
    if (!failed.empty())
      throw CommError(what + ": peer rank " + std::to_string(peer) + " failed: " + failed);
    Mailbox& box = world_->box(peer);
    std::lock_guard<std::mutex> lock(box.mu);
    const auto key = std::make_pair(rank_, tag);
    auto it = box.posted.find(key);
    if (it != box.posted.end() && !it->second.empty()) {
      auto pending = it->second.front();
      it->second.pop_front();
      if (pending->buffer.size() != data.size()) {
        pending->error = size_mismatch(rank_, tag, pending->buffer.size(), data.size());
      } else if (!data.empty()) {
        std::memcpy(pending->buffer.data(), data.data(), data.size());
      }
      pending->stamp = stamp;
      pending->done = true;
      box.cv.notify_all();
    } else {
      box.unmatched[key].push_back(Message{{data.begin(), data.end()}, stamp});
      box.cv.notify_all();
    }
    return std::make_unique<DoneRequest>(std::move(what));
  }

  std::unique_ptr<RequestImpl> post_recv(int peer, std::span<std::byte> data, int tag) override {
    auto pending = std::make_shared<PendingRecv>();
    pending->buffer = data;
    Mailbox& box = world_->box(rank_);
    {
      std::lock_guard<std::mutex> lock(box.mu);
      const auto key = std::make_pair(peer, tag);
      auto it = box.unmatched.find(key);
      if (it != box.unmatched.end() && !it->second.empty()) {
        Message msg = std::move(it->second.front());
        it->second.pop_front();
        if (msg.data.size() != data.size()) {
          pending->error = size_mismatch(peer, tag, data.size(), msg.data.size());
        } else if (!data.empty()) {
          std::memcpy(data.data(), msg.data.data(), data.size());
        }
        pending->stamp = msg.stamp;
        pending->done = true;
      } else {
        box.posted[key].push_back(pending);
      }
    }
    return std::make_unique<InProcRecvRequest>(world_, rank_, peer, tag, std::move(pending));
  }

  std::shared_ptr<Nic> shared_nic(int node, const NetModel& model) override {
    return world_->node_nic(node, model);
  }

 private:
  std::shared_ptr<InProcWorld> world_;
  int split_seq_ = 0;
};

}  // namespace

std::vector<std::unique_ptr<Comm>> make_inproc_world(int size, InProcOptions options) {
  PSAR_CHECK(size >= 1, "world size must be positive, got ", size);
  std::vector<int> roots(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) roots[r] = r;
  auto world = std::make_shared<InProcWorld>(size, std::make_shared<Failures>(size),
                                             std::move(roots), options);
  std::vector<std::unique_ptr<Comm>> comms;
  for (int r = 0; r < size; ++r) comms.push_back(std::make_unique<InProcComm>(world, r));
  return comms;
}

void inproc_fail(Comm& comm, int rank, const std::string& reason) {
  auto* c = dynamic_cast<InProcComm*>(&comm);
  PSAR_CHECK(c, "inproc_fail() needs an in-process communicator");
  c->world().fail(rank, reason);
}

void run_inproc(int size, const std::function<void(Comm&)>& fn, InProcOptions options) {
  auto comms = make_inproc_world(size, options);
  std::vector<std::exception_ptr> errors(static_cast<size_t>(size));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(*comms[r]);
      } catch (const std::exception& e) {
        errors[r] = std::current_exception();
        inproc_fail(*comms[r], r, e.what());
      } catch (...) {
        errors[r] = std::current_exception();
        inproc_fail(*comms[r], r, "unknown exception");
      }
    });
  }
  for (auto& t : threads) t.join();
  // The root cause is the error that does not merely report another rank's failure.
  std::exception_ptr first;
  for (auto& e : errors) {
    if (!e) continue;
    if (!first) first = e;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      if (std::string(ex.what()).find(" failed: ") == std::string::npos) {
        first = e;
        break;
      }
    } catch (...) {
    }
  }
  if (first) std::rethrow_exception(first);
}

}  // namespace psar
