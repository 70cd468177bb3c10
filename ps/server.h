#pragma once
// Server: one parameter-server shard behind a ZeroMQ ROUTER socket.
//
// The shard owns a contiguous key range of the flat parameter vector, cut
// into chunks (ShardLayout), each with its own ShardState: a push or pull
// addresses one chunk, so a large push_pull streams as several messages and
// the first chunks are aggregated, updated and answered while later ones are
// still arriving. Workers' DEALER sockets send requests (ps.proto): push a
// gradient, pull parameters, both at once, or say goodbye. Every request is
// validated — frames, header, job token, type, shard, payload length, key
// range (validate.h), then worker and clock (ShardState) — before the payload
// is touched; a bad one gets an MSG_ERROR reply, is counted by status, and
// the server goes on serving everyone else. Pulls that must wait are parked
// and answered as soon as their clock is applied. Parameter replies are
// zero-copy from the chunk's buffer (copy-on-write).
//
// Deadlines: run() ends when every worker has said goodbye. If no valid
// request arrives for options.timeout_s while workers are still active (a
// worker died or hangs), the server answers every parked pull with a timeout
// error naming the workers it waits for, then throws TimeoutError. If a
// worker leaves while others still need its pushes, their pulls are answered
// with a peer-failed error, and run() ends with CommError once every worker
// has left or been told.
//
// Under network emulation (options.nic) a valid request is taken in only when
// the shard's NIC has received it — N workers' pushes serialize on its ingress,
// the parameter server's bottleneck — and every reply leaves through its egress.

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <zmq.hpp>

#include "comm/netem.h"
#include "ps/curve.h"
#include "ps/on_the_wire.h"
#include "ps/shard_state.h"
#include "ps/sparse_rows.h"
#include "ps/wire.h"

namespace psar::ps {

// A shard's whole state once `clock` updates were applied: what a checkpoint
// saves and a resumed job starts from (bsp).
struct ShardSnapshot {
  int shard = 0;
  int64_t clock = 0;
  std::vector<float> params;  // the shard's key range
  int64_t optimizer_steps = 0;
  // Each optimizer buffer as its chunks saved it (ShardState::Saved: a
  // dense chunk over its range, a sparse one its tail and touched rows),
  // chunk after chunk.
  std::vector<std::vector<float>> optimizer_state;
  // Sparse rows (ServerOptions::rows): the rows each chunk's updates
  // touched (ascending) and their versions, chunk after chunk, and how many
  // each chunk holds; empty for a dense shard.
  std::vector<int64_t> rows, row_versions, chunk_rows;
};

struct ServerOptions {
  int shard = 0;
  KeyRange range;            // the keys this shard owns
  int64_t chunk_floats = 0;  // chunk size (0: the whole range is one chunk)
  int workers = 1;
  uint64_t token = 0;
  Consistency consistency = Consistency::kBsp;
  int staleness = 2;
  OptimizerOptions optimizer;
  int backup_workers = 0;  // b: a clock aggregates the first workers − b pushes (bsp)
  // ps.on_worker_failure continue: workers silent past timeout_s while a
  // clock waits for them are dropped (ShardState::fail) instead of ending
  // the job; an early goodbye holds nobody up.
  bool continue_on_failure = false;
  double timeout_s = 60.0;
  std::string bind = "127.0.0.1";  // see bind_endpoint()
  std::string advertise;           // host named in endpoint() ("" = the bound one)
  // Emulated NIC of this shard (comm/netem.h), shared with its rank; null = none.
  std::shared_ptr<Nic> nic;
  // Checkpoints (bsp): each time every chunk has applied a multiple of
  // `checkpoint_every` clocks, on_checkpoint gets the shard's snapshot — on
  // the serving thread, before any pull of that clock is answered, so a
  // worker that has the parameters of step k knows the shard's state at k is
  // saved. Its errors end run().
  int64_t checkpoint_every = 0;
  std::function<void(const ShardSnapshot&)> on_checkpoint;
  // The state to start from instead of `initial` at clock 0 (a resumed job).
  std::shared_ptr<const ShardSnapshot> resume;
  // ps.security (ps/curve.h): under curve the shard makes its key pair and
  // accepts only clients whose public key (Z85) is in `clients`.
  Security security = Security::kNone;
  std::set<std::string> clients;
  // Sparse rows (ps/sparse_rows.h): chunks inside rows.floats take sparse
  // push_pulls; each of their rows remembers the update that last changed it.
  RowSpace rows;
};

// Traffic of one side of the protocol. Payload bytes are the floats pushed
// and pulled (what the volume counts of docs/theory.md count); headers are the control
// part, counted apart. `rejected` counts requests answered with an error
// (server) or error replies received (client); `refused` counts connections
// refused at the handshake for want of the job's CURVE keys (server, ps/curve.h).
struct PsCounters {
  int64_t payload_bytes_in = 0;
  int64_t payload_bytes_out = 0;
  int64_t header_bytes_in = 0;
  int64_t header_bytes_out = 0;
  int64_t messages_in = 0;
  int64_t messages_out = 0;
  int64_t rejected = 0;
  int64_t refused = 0;
  int64_t pushes_dropped = 0;  // client: its chunk pushes the servers dropped as late (backup workers)
};

class Server {
 public:
  // Binds the socket; `initial` is the shard's slice of the parameters.
  Server(const ServerOptions& options, std::span<const float> initial);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  const std::string& endpoint() const { return endpoint_; }
  const ServerOptions& options() const { return options_; }
  // Under ps.security curve: the shard's public key (Z85), for its clients; else "".
  const std::string& public_key() const { return keys_.public_key; }

  // Serves until every worker said goodbye (or stop()); throws as described above.
  void run();
  // From any thread: makes run() return within ~100 ms.
  void stop() { stop_.store(true); }

  // From any thread, also while run() is going.
  PsCounters counters() const;
  int64_t rejected(wire::Status status) const;
  // Only while run() is not running.
  std::vector<float> params() const;
  int64_t applied() const;       // updates applied to every chunk
  int64_t param_copies() const;  // copy-on-write events (replies still in flight at an update)
  // The chunks' optimizer state and touched-row index (ShardState::state_bytes).
  ShardState::StateBytes state_bytes() const;
  const ShardLayout& layout() const { return layout_; }

 private:
  struct Parked {
    zmq::message_t identity;
    wire::Header request;
    int chunk;
    int64_t clock;  // the step whose parameters are wanted
    KeyRange keys;
  };
  // A validated request: its frames (identity, header, payload) and chunk.
  struct Request {
    std::vector<zmq::message_t> frames;
    size_t count;
    wire::Header header;
    int chunk;
  };
  bool receive_one();  // false if no message was waiting
  void handle(std::vector<zmq::message_t>& frames, size_t count);
  // Serves a validated request (frames: identity, header, payload) and counts it in.
  void take_in(std::vector<zmq::message_t>& frames, size_t count, const wire::Header& header,
               int chunk);
  // Emulated ingress: serves the held requests whose time has come, in the
  // order they left their senders (on_the_wire.h); returns when the next may
  // arrive (0: none held).
  double deliver_in_flight();
  void dispatch(zmq::message_t& identity, const wire::Header& h, int chunk,
                zmq::message_t* payload);
  // push_dropped: the push of a push_pull was dropped (its pull is always ready).
  void pull(zmq::message_t& identity, const wire::Header& h, int chunk, int64_t clock,
            KeyRange keys, bool push_dropped = false);
  void answer_parked();
  void send_params(zmq::message_t& identity, const wire::Header& request, int chunk, int64_t clock,
                   KeyRange keys, bool push_dropped = false);
  void send_ack(zmq::message_t& identity, const wire::Header& request, bool push_dropped = false);
  void send_reply(zmq::message_t& identity, wire::Header& reply, zmq::message_t* payload);
  void send_error(zmq::message_t& identity, const wire::Header* request, wire::Status status,
                  const std::string& text);
  // Throws TimeoutError naming the silent workers, unless under continue it
  // dropped them (then the survivors go on).
  void fail_timeout(double idle_s);
  void tell_failed(zmq::message_t& identity, const wire::Header& request, const std::string& why);
  bool done() const;  // every worker left, or left or told the job failed
  std::string name() const;

  bool all_left() const { return chunks_.front()->all_left(); }
  // After chunk `chunk` applied a clock: adds it to the snapshot due, if any.
  void snapshot_if_due(int chunk);
  void restore(const ShardSnapshot& snapshot);

  void push_sparse(const wire::Header& h, int chunk, zmq::message_t& payload);

  ServerOptions options_;
  ShardLayout layout_;
  std::vector<std::unique_ptr<ShardState>> chunks_;
  zmq::context_t context_;  // server_io_threads(workers)
  zmq::socket_t socket_;
  CurveKeys keys_;                     // curve: this shard's pair (the secret stays in memory)
  std::unique_ptr<CurveGuard> guard_;  // curve: destroyed before socket_
  std::string endpoint_;
  std::vector<Parked> parked_;
  OnTheWire<Request> in_flight_;  // under emulation: requests not yet arrived
  std::string failure_;     // set when a departed worker made a pull impossible
  std::vector<char> told_;  // by worker: sent that failure
  std::atomic<bool> stop_{false};
  ShardSnapshot pending_;  // the checkpoint being collected from the chunks
  std::vector<ShardState::Saved> pending_saved_;  // by chunk
  int pending_chunks_ = 0;

  struct Counters {
    std::atomic<int64_t> payload_in{0}, payload_out{0}, header_in{0}, header_out{0};
    std::atomic<int64_t> messages_in{0}, messages_out{0};
    std::array<std::atomic<int64_t>, 16> rejected{};
  };
  Counters counters_;
};

// Runs a Server's run() on its own thread (a co-located shard beside a worker).
// Errors are kept and rethrown on the owner's thread by check() and join().
class ServerThread {
 public:
  explicit ServerThread(std::unique_ptr<Server> server);
  ~ServerThread();  // stop() and join; never throws
  Server& server() { return *server_; }
  void check();                                       // rethrows the server's error, if it failed
  bool finished() const { return finished_.load(); }  // run() has returned or thrown
  void join();  // waits for run() to end (bounded by its timeout); rethrows its error

 private:
  std::unique_ptr<Server> server_;
  std::thread thread_;
  std::exception_ptr error_;
  std::atomic<bool> failed_{false};
  std::atomic<bool> finished_{false};
};

}  // namespace psar::ps
