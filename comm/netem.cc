#include "comm/netem.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <new>
#include <thread>
#include <vector>

#include "comm/comm.h"
#include "core/config.h"
#include "core/errors.h"
#include "core/timer.h"
#include "core/units.h"

namespace psar {

std::string NetModel::describe() const {
  if (!enabled()) return "off";
  std::string s = format_bandwidth(bandwidth) + ", " + format_duration(latency);
  if (node_size > 0)
    s += "; nodes of " + std::to_string(node_size) + ", inside " +
         (intra_bandwidth > 0 ? format_bandwidth(intra_bandwidth) : std::string("unlimited")) +
         ", " + format_duration(intra_latency);
  return s;
}

NetModel net_model_from_config(const Config& config) {
  NetModel m;
  if (config.has("net.bandwidth")) m.bandwidth = config.get_bandwidth("net.bandwidth");
  m.latency = config.get_duration("net.latency");
  const int64_t k = config.get_int("net.node_size");
  if (k < 0) throw ConfigError("net.node_size: must be >= 0 (0: one level), got " + std::to_string(k));
  m.node_size = static_cast<int>(k);
  if (config.has("net.intra_bandwidth"))
    m.intra_bandwidth = config.get_bandwidth("net.intra_bandwidth");
  m.intra_latency = config.get_duration("net.intra_latency");
  if (m.node_size == 0 && (m.intra_bandwidth > 0 || m.intra_latency > 0))
    throw ConfigError("net.intra_bandwidth / net.intra_latency: need net.node_size (ranks per node)");
  return m;
}

NetModel net_model_of_rank(const Config& config, int rank, int world_size) {
  NetModel m = net_model_from_config(config);
  const std::vector<int64_t> ranks = config.get_int_list("hetero.nic_ranks");
  if (ranks.empty()) {
    if (config.has("hetero.nic_bandwidth"))
      throw ConfigError("hetero.nic_bandwidth is set but hetero.nic_ranks is empty");
    return m;
  }
  if (!config.has("hetero.nic_bandwidth"))
    throw ConfigError("hetero.nic_ranks: needs hetero.nic_bandwidth");
  if (!m.enabled())
    throw ConfigError("hetero.nic_ranks: needs network emulation (set net.bandwidth)");
  if (m.node_size > 0)
    throw ConfigError("hetero.nic_ranks: a rank's own NIC needs a one-level network "
                      "(net.node_size 0); with nodes the NIC is the node's");
  for (const int64_t r : ranks) {
    if (r < 0 || r >= world_size)
      throw ConfigError("hetero.nic_ranks: rank " + std::to_string(r) +
                        " is outside the world [0, " + std::to_string(world_size) + ")");
    if (r == rank) m.bandwidth = config.get_bandwidth("hetero.nic_bandwidth");
  }
  return m;
}

NetModel apply_network_model(Comm& comm, const Config& config) {
  const NetModel m = net_model_of_rank(config, comm.rank(), comm.size());
  apply_network_model(comm, m);
  return m;
}

void apply_network_model(Comm& comm, const NetModel& m) {
  if (m.node_size > 0) {
    std::vector<int> nodes;
    for (int r = 0; r < comm.size(); ++r) nodes.push_back(r / m.node_size);
    comm.set_nodes(std::move(nodes));
  }
  if (!m.enabled()) {
    comm.set_network(nullptr);
    return;
  }
  if (m.node_size == 0) {
    comm.set_network(std::make_shared<Nic>(m));
    return;
  }
  // The node's NIC: one object per node where the transport's ranks share
  // an address space, else one shared-memory segment per node (collective).
  const int node = comm.rank() / m.node_size;
  const NetModel nic_model{m.bandwidth, m.latency};
  std::shared_ptr<Nic> nic = comm.shared_nic(node, nic_model);
  if (!nic) nic = node_nic_in_shared_memory(comm, m.node_size, nic_model);
  comm.set_network(std::move(nic), std::make_shared<Nic>(m.inside()));
}

// Plain data only (doubles, ints, one lock-free atomic): valid in memory that
// several processes map at different addresses.
struct Nic::State {
  // Keep the ingress history bounded: forgetting the oldest interval, all
  // time before its end counts as taken, so a receive completed thousands of
  // gaps late lands after it instead of in time that was busy.
  static constexpr int kMaxIntervals = 4096;
  struct Interval {
    double start, end;
  };
  std::atomic<int> lock{0};
  double egress_free = 0;
  double ingress_floor = 0;  // before it, all counts as busy (forgotten)
  int count = 0;
  Interval busy[kMaxIntervals + 1];  // [0, count): sorted, disjoint, merged when touching
};
static_assert(std::atomic<int>::is_always_lock_free, "the NIC's lock must work across processes");

namespace {

// The critical sections are a few dozen instructions: spin, yielding the
// core (a holder may be a process preempted on an oversubscribed host).
class StateLock {
 public:
  explicit StateLock(std::atomic<int>& a) : a_(a) {
    while (a_.exchange(1, std::memory_order_acquire) != 0) sched_yield();
  }
  ~StateLock() { a_.store(0, std::memory_order_release); }
  StateLock(const StateLock&) = delete;
  StateLock& operator=(const StateLock&) = delete;

 private:
  std::atomic<int>& a_;
};

}  // namespace

Nic::Nic(NetModel model) : model_(model), own_(std::make_unique<State>()), state_(own_.get()) {}

Nic::Nic(NetModel model, State* shared, std::shared_ptr<void> mapping)
    : model_(model), mapping_(std::move(mapping)), state_(shared) {}

Nic::~Nic() = default;

double Nic::depart(size_t bytes, double now) {
  State& s = *state_;
  StateLock lock(s.lock);
  const double start = std::max(now, s.egress_free);
  if (model_.bandwidth > 0) s.egress_free = start + static_cast<double>(bytes) / model_.bandwidth;
  else s.egress_free = start;
  return s.egress_free;
}

double Nic::egress_free() {
  State& s = *state_;
  StateLock lock(s.lock);
  return s.egress_free;
}

double Nic::arrive(size_t bytes, double egress_end) {
  const double transfer =
      model_.bandwidth > 0 ? static_cast<double>(bytes) / model_.bandwidth : 0.0;
  const double earliest = egress_end + model_.latency;
  if (transfer <= 0) return earliest;  // nothing occupies the ingress
  State& s = *state_;
  StateLock lock(s.lock);
  State::Interval* const b = s.busy;
  const int n = s.count;
  auto first_starting_after = [&](double t) {  // upper_bound on start
    return static_cast<int>(std::upper_bound(b, b + n, t, [](double v, const State::Interval& i) {
                              return v < i.start;
                            }) - b);
  };
  // First fit: the earliest window [start, start + transfer] with start ≥
  // earliest − transfer that overlaps no busy interval.
  double start = std::max(earliest - transfer, s.ingress_floor);
  int i = first_starting_after(start);
  if (i > 0 && b[i - 1].end > start) --i;
  for (; i < n && b[i].start < start + transfer; ++i) start = std::max(start, b[i].end);
  const double end = start + transfer;
  // Insert [start, end], merging with neighbours that touch it: intervals
  // [first, last) become one.
  double lo = start, hi = end;
  int first = static_cast<int>(std::lower_bound(b, b + n, start, [](const State::Interval& iv,
                                                                    double v) {
                                 return iv.start < v;
                               }) - b);
  if (first > 0 && b[first - 1].end >= lo) {
    --first;
    lo = b[first].start;
    hi = std::max(hi, b[first].end);
  }
  int last = first;
  while (last < n && b[last].start <= hi) hi = std::max(hi, b[last++].end);
  std::memmove(b + first + 1, b + last, static_cast<size_t>(n - last) * sizeof(State::Interval));
  b[first] = {lo, hi};
  s.count = n - (last - first) + 1;
  if (s.count > State::kMaxIntervals) {
    s.ingress_floor = std::max(s.ingress_floor, b[0].end);
    std::memmove(b, b + 1, static_cast<size_t>(--s.count) * sizeof(State::Interval));
  }
  return end;
}

std::shared_ptr<Nic> node_nic_in_shared_memory(Comm& comm, int node_size, const NetModel& model) {
  PSAR_CHECK(node_size > 0, "node size must be positive, got ", node_size);
  const int rank = comm.rank(), size = comm.size();
  const int node = rank / node_size, leader = node * node_size;
  const bool alone = std::min(size, leader + node_size) - leader == 1;
  // Every rank checks every node, so that all refuse alike (no rank is left
  // waiting in the collectives below).
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  const auto hosts = comm.allgather_bytes(std::as_bytes(std::span<const char>(host, std::strlen(host))));
  for (int r = 0; r < size; ++r)
    if (hosts[static_cast<size_t>(r)] != hosts[static_cast<size_t>(r / node_size * node_size)]) {
      auto text = [&](int q) {
        const auto& h = hosts[static_cast<size_t>(q)];
        return std::string(reinterpret_cast<const char*>(h.data()), h.size());
      };
      throw ConfigError("net.node_size = " + std::to_string(node_size) + ": rank " +
                        std::to_string(r) + " runs on host " + text(r) + ", rank " +
                        std::to_string(r / node_size * node_size) + " of its node on " +
                        text(r / node_size * node_size) +
                        "; the ranks of an emulated node share its NIC in the memory of one "
                        "host (for nodes that are hosts use scripts/cluster.sh and no "
                        "net.node_size)");
    }
  // One name per call in this job: rank 0's pid and a count.
  static std::atomic<int> calls{0};
  std::array<char, 64> base{};
  if (rank == 0) std::snprintf(base.data(), base.size(), "/psar-nic-%d-%d", getpid(), ++calls);
  comm.broadcast_bytes(std::as_writable_bytes(std::span<char>(base)), 0);
  const std::string name = std::string(base.data()) + "-" + std::to_string(node);

  // Each step's failures are gathered, so that every rank throws or none does.
  auto all_ok = [&](const std::string& mine) {
    for (const auto& e : comm.allgather_bytes(std::as_bytes(std::span<const char>(mine))))
      if (!e.empty()) return std::string(reinterpret_cast<const char*>(e.data()), e.size());
    return std::string();
  };
  void* mem = MAP_FAILED;
  auto map = [&](int flags) -> std::string {
    const int fd = shm_open(name.c_str(), flags, 0600);
    if (fd < 0) return "shm_open(" + name + "): " + std::strerror(errno);
    std::string err;
    if ((flags & O_CREAT) && ftruncate(fd, sizeof(Nic::State)) != 0)
      err = "ftruncate(" + name + "): " + std::strerror(errno);
    if (err.empty()) {
      mem = mmap(nullptr, sizeof(Nic::State), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (mem == MAP_FAILED) err = "mmap(" + name + "): " + std::strerror(errno);
    }
    close(fd);
    return err;
  };
  std::string err;
  const bool creates = !alone && rank == leader;
  if (creates) {
    err = map(O_CREAT | O_EXCL | O_RDWR);
    if (err.empty()) new (mem) Nic::State();
  }
  std::string failed = all_ok(err);  // also: every segment exists before it is opened
  if (failed.empty() && !alone && !creates) err = map(O_RDWR);
  failed = all_ok(err);  // every rank has mapped its node's segment (or failed)
  if (creates) shm_unlink(name.c_str());  // the mappings keep it; nothing outlives the job
  if (!failed.empty()) {
    if (mem != MAP_FAILED) munmap(mem, sizeof(Nic::State));
    throw CommError("net.node_size = " + std::to_string(node_size) +
                    ": cannot share the node's emulated NIC: " + failed);
  }
  if (alone) return std::make_shared<Nic>(model);
  std::shared_ptr<void> mapping(mem, [](void* p) { munmap(p, sizeof(Nic::State)); });
  return std::make_shared<Nic>(model, static_cast<Nic::State*>(mem), std::move(mapping));
}

void wait_until(double when) {
  constexpr double kSpin = 200e-6;  // below this, sleeping overshoots too much
  for (;;) {
    const double left = when - now_seconds();
    if (left <= 0) return;
    if (left > kSpin) std::this_thread::sleep_for(std::chrono::duration<double>(left - kSpin / 2));
    else sched_yield();
  }
}

}  // namespace psar
