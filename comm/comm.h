#pragma once
// Comm: the point-to-point interface a communicator offers. Custom collectives
// (allreduce/), tensor- and pipeline-parallel traffic use only this. Two
// transports implement it: MPI (real runs under mpirun) and in-process (ranks
// as threads, for hermetic tests).
//
// Semantics, on every transport:
//  - Messages between one (source, destination, tag) triple arrive in order.
//  - A receive must be posted with exactly the size that was sent: any other
//    size is a CommError naming the peer and both sizes (sizes that disagree
//    across ranks never corrupt memory silently).
//  - Every wait has a deadline (timeout(), default 60 s); when it passes, a
//    TimeoutError names the operation, the peer and the tag.
//  - A send may complete before the receive is posted (buffered/eager).
//  - Counters record bytes and messages per rank, counted when posted.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace psar {

struct CommCounters {
  int64_t bytes_sent = 0;
  int64_t bytes_recv = 0;
  int64_t messages_sent = 0;
  int64_t messages_recv = 0;
  // A parameter server's backup workers (ps/shard_state.h): this worker's
  // chunk pushes the servers dropped as late. 0 for every other transport.
  int64_t pushes_dropped = 0;
};

class RequestImpl {
 public:
  virtual ~RequestImpl() = default;
  // Non-blocking progress: true once complete. Throws CommError on failure.
  virtual bool test() = 0;
  // Blocks up to `seconds`; true once complete. The default polls test().
  virtual bool wait_for(double seconds);
  // "recv from rank 3 (tag 7, 4096 bytes)"
  virtual std::string describe() const = 0;
  // A completed receive: the emulated egress-end time its sender attached
  // (network emulation only; 0 otherwise).
  virtual double stamp() const { return 0; }
};

class Nic;
struct NetModel;

class Comm;

// A pending non-blocking operation. Move-only; wait() before the buffer dies.
class Request {
 public:
  Request() = default;
  Request(Comm* comm, std::unique_ptr<RequestImpl> impl);
  // With network emulation: a send completes no earlier than `ready_at`; a
  // receive (nic set) is delivered when the receiving NIC's model says.
  Request(Comm* comm, std::unique_ptr<RequestImpl> impl, double ready_at, Nic* nic,
          size_t recv_bytes);
  Request(Request&&) noexcept = default;
  Request& operator=(Request&&) noexcept = default;
  ~Request();

  bool valid() const { return impl_ != nullptr; }
  bool test();
  // Waits until complete or the communicator's deadline; throws TimeoutError then.
  void wait();

 private:
  // Called once the transport completed: when the emulated network delivers.
  void transport_done();

  Comm* comm_ = nullptr;
  std::unique_ptr<RequestImpl> impl_;
  double ready_at_ = 0;
  Nic* recv_nic_ = nullptr;
  size_t recv_bytes_ = 0;
};

void wait_all(std::span<Request> requests);

class Comm {
 public:
  virtual ~Comm() = default;

  int rank() const { return rank_; }
  int size() const { return size_; }
  virtual std::string transport() const = 0;  // "mpi", "inproc"

  // ---- point-to-point (bytes) ----
  Request isend(int peer, std::span<const std::byte> data, int tag = 0);
  Request irecv(int peer, std::span<std::byte> data, int tag = 0);
  void send(int peer, std::span<const std::byte> data, int tag = 0);
  void recv(int peer, std::span<std::byte> data, int tag = 0);
  // Sends to `dst` and receives from `src` concurrently.
  void sendrecv(int dst, std::span<const std::byte> send_data, int src,
                std::span<std::byte> recv_data, int tag = 0);

  // ---- typed conveniences ----
  template <typename T>
  Request isend(int peer, std::span<const T> data, int tag = 0) {
    return isend(peer, std::as_bytes(data), tag);
  }
  template <typename T>
  Request irecv(int peer, std::span<T> data, int tag = 0) {
    return irecv(peer, std::as_writable_bytes(data), tag);
  }
  template <typename T>
  void send(int peer, std::span<const T> data, int tag = 0) {
    send(peer, std::as_bytes(data), tag);
  }
  template <typename T>
  void recv(int peer, std::span<T> data, int tag = 0) {
    recv(peer, std::as_writable_bytes(data), tag);
  }
  template <typename T>
  void sendrecv(int dst, std::span<const T> s, int src, std::span<T> r, int tag = 0) {
    sendrecv(dst, std::as_bytes(s), src, std::as_writable_bytes(r), tag);
  }

  // ---- sub-communicators ----
  // Collective over this communicator: ranks with the same color form a new
  // communicator, ordered by (key, rank).
  virtual std::unique_ptr<Comm> split(int color, int key) = 0;

  // ---- control plane (small, not for data; built on point-to-point) ----
  void barrier();
  // Every rank contributes `mine`; returns all contributions in rank order.
  std::vector<std::vector<std::byte>> allgather_bytes(std::span<const std::byte> mine);
  // Root's `data` is copied into every rank's `data` (sizes must agree).
  void broadcast_bytes(std::span<std::byte> data, int root);
  double allreduce_sum(double value);
  double allreduce_max(double value);

  // ---- a control plane that outlives its members ----
  // With tolerate_failures(true), rank 0 gives up on a rank whose part of a
  // barrier or all-gather misses the deadline (it died): that rank is dead()
  // from then on — its parts of later all-gathers are empty, the sums and
  // maxima above leave it out, rank 0's broadcasts skip it. The others still
  // wait for rank 0. For the workers of a parameter server that survives a
  // dead worker (ps.on_worker_failure: continue); point-to-point traffic is
  // unchanged.
  void tolerate_failures(bool on) { tolerate_failures_ = on; }
  // Rank 0: the ranks it gave up on, in the order it did; empty elsewhere.
  const std::vector<int>& dead() const { return dead_; }

  // ---- network emulation (comm/netem.h) ----
  // Every message this rank sends or receives passes through `nic`
  // (null = no emulation). Two levels: with `intra` set, messages to a peer
  // of the same node (nodes()) pass through `intra` (this rank's links
  // inside the node) instead, and `nic` is the node's NIC, which the node's
  // ranks share. Sub-communicators split later share both.
  void set_network(std::shared_ptr<Nic> nic, std::shared_ptr<Nic> intra = nullptr) {
    nic_ = std::move(nic);
    intra_nic_ = std::move(intra);
  }
  const std::shared_ptr<Nic>& network() const { return nic_; }
  const std::shared_ptr<Nic>& intra_network() const { return intra_nic_; }

  // ---- nodes (hierarchy-aware collectives, the two-level network) ----
  // The node (host) of each rank of this communicator, when it is known from
  // outside: net.node_size (comm/netem.h) or a test. Empty = unknown (then
  // collectives that care ask the hostnames). Sub-communicators split later
  // inherit their members' nodes.
  void set_nodes(std::vector<int> nodes);  // one entry per rank
  const std::vector<int>& nodes() const { return nodes_; }

  // ---- counters and deadlines ----
  const CommCounters& counters() const { return counters_; }
  void reset_counters() { counters_ = {}; }
  // Traffic a collective moved on sub-communicators of its own, counted here
  // too (so that callers reading this communicator's counters see it).
  void add_counters(const CommCounters& moved);
  double timeout() const { return timeout_s_; }
  void set_timeout(double seconds) { timeout_s_ = seconds; }
  // How Request::wait waits: 0 (the default) as the transport does (MPI spins,
  // yielding the core when oversubscribed); > 0 tests the request and sleeps
  // that long in between — for a communication thread beside a computing one
  // on the same cores (sync.overlap), where spinning would take the core the
  // computation needs.
  double poll_sleep() const { return poll_sleep_s_; }
  void set_poll_sleep(double seconds) { poll_sleep_s_ = seconds; }

  // Names the collective in progress, for error messages: errors raised while
  // a scope is alive read "ring allreduce: recv from rank 2 ... timed out".
  class OpScope {
   public:
    OpScope(Comm& comm, std::string name);
    ~OpScope();
    OpScope(const OpScope&) = delete;
    OpScope& operator=(const OpScope&) = delete;

   private:
    Comm& comm_;
    std::string saved_;
  };
  const std::string& operation() const { return operation_; }

  // Tags at or above this are reserved for the control plane.
  static constexpr int kReservedTagBase = 1 << 24;

 protected:
  Comm(int rank, int size) : rank_(rank), size_(size) {}
  // `stamp` is the emulated egress-end time to carry to the receiver when
  // network emulation is on (network() set); transports then attach it.
  virtual std::unique_ptr<RequestImpl> post_send(int peer, std::span<const std::byte> data,
                                                 int tag, double stamp) = 0;
  virtual std::unique_ptr<RequestImpl> post_recv(int peer, std::span<std::byte> data,
                                                 int tag) = 0;
  // What a communicator split from `parent` takes over: deadline, network,
  // nodes. Collective over this (the new) communicator; every split calls it.
  void inherit(Comm& parent);
  // The NIC that the ranks of `node` share under a two-level network model,
  // one object per node of this world: only transports whose ranks share an
  // address space can give one (the in-process one); others return null, and
  // the node's ranks share it in shared memory (node_nic_in_shared_memory).
  virtual std::shared_ptr<Nic> shared_nic(int node, const NetModel& model);
  friend void apply_network_model(Comm& comm, const NetModel& model);
  // Prefixes `what` with the current operation and the rank: for error texts.
  std::string context(const std::string& what) const;
  void check_peer(int peer, const char* op) const;

  int rank_ = 0;
  int size_ = 1;

 private:
  friend class Request;
  // The NIC a message to or from `peer` passes through (null: none).
  Nic* link_to(int peer) const;
  std::shared_ptr<Nic> nic_, intra_nic_;
  std::vector<int> nodes_;
  CommCounters counters_;
  double timeout_s_ = 60.0;
  double poll_sleep_s_ = 0;
  std::string operation_;
  bool tolerate_failures_ = false;
  std::vector<int> dead_;
  bool is_dead(int rank) const;
  // Rank 0 with tolerate_failures: receives into[r] (exactly its size, tag
  // `tag`) from every rank r > 0 not dead, all posted at once under one
  // deadline; a rank whose message misses it is dead from then on.
  void receive_from_survivors(std::vector<std::span<std::byte>> into, int tag);
  // Ranks but 0 with tolerate_failures: rank 0's answer may come a whole
  // deadline late (it waited for a dead rank first), so the wait for it
  // gets two.
  void receive_from_root(std::span<std::byte> data, int tag);
};

}  // namespace psar
