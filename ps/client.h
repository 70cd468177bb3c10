#pragma once
// Client: the worker side of the parameter server, one DEALER socket per
// shard. push_pull() is one training step's synchronization: the gradient's
// slice for each shard goes out on every socket, one message per chunk of
// the shard (zero-copy: ZeroMQ reads the caller's buffer; under network
// emulation each once the worker's NIC has at most two queued), then the
// replies are collected from whichever shard answers first (polling all
// sockets) and each chunk is copied into the parameters as it arrives.
//
// Every wait has a deadline: options.timeout_s plus one second, so that a
// server, which diagnoses a stalled job at timeout_s, can tell the worker
// which peer it waits for. A timeout names the shards that did not answer
// and their endpoints. Under network emulation the requests leave through the
// worker's NIC one after another and each reply counts as received once the
// NIC has taken it in. An error reply names the shard
// and carries the server's reason. After any failure the client tears its
// sockets down at once — so ZeroMQ holds no reference to the caller's
// buffers once the exception propagates — and refuses further calls.

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <span>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "comm/netem.h"
#include "ps/curve.h"
#include "ps/on_the_wire.h"
#include "ps/server.h"
#include "ps/sharding.h"
#include "ps/sparse_rows.h"
#include "ps/wire.h"
#include "ps/zmq_util.h"

namespace psar::ps {

struct ShardAddress {
  int shard = 0;
  std::string endpoint;
  KeyRange range;
  std::string host;  // the server's hostname, for error messages ("" = unknown)
  std::string server_key;  // ps.security curve: the shard's public key (Z85); "" = plain
};

struct ClientOptions {
  int worker = 0;
  uint64_t token = 0;
  double timeout_s = 60.0;
  int64_t chunk_floats = 0;          // the servers' chunk size (0: one chunk per shard)
  std::vector<ShardAddress> shards;  // in key order; together they tile [0, M)
  std::shared_ptr<Nic> nic;          // emulated NIC of this worker's rank; null = none
  // The constructor waits this long (at most timeout_s) for a TCP connection
  // to every shard, so that an unreachable endpoint fails at once, not at
  // the first reply's deadline.
  double connect_timeout_s = kConnectTimeout;
  std::string host;  // this worker's hostname, for error messages
  int64_t first_clock = 0;           // a resumed job: the steps already taken
  // ps.security curve (ps/curve.h): this worker's key pair, for the shards
  // that have a server_key.
  CurveKeys curve;
  // Sparse rows (ps/sparse_rows.h): push_pulls of chunks inside rows.floats
  // carry only the rows given to set_touched_rows, and bring back only the
  // rows changed since this worker last saw the chunk.
  RowSpace rows;
};

class Client {
 public:
  explicit Client(const ClientOptions& options);  // connects (asynchronously)
  ~Client();  // says goodbye unless closed or broken; never throws
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Pushes the gradient of step clock() and pulls the parameters of the next
  // step into `params` (both M floats); clock() advances.
  void push_pull(std::span<const float> grads, std::span<float> params);
  void push(std::span<const float> grads);  // gradient of step clock(); clock() advances
  void pull(std::span<float> params);       // parameters for step clock()

  // push_pull in parts, for the overlap of the sync with the backward
  // (docs/overlap.md): begin_push_pull opens step clock() on the two
  // M-float buffers, which must outlive it; push_pull_range says the
  // gradients of `keys` are final — every chunk whose floats are now all
  // given is sent (zero-copy), and the replies that have arrived are copied
  // into `params` without waiting; end_push_pull, once every key was given
  // exactly once, waits (deadline ps.timeout + 1 s) for the rest of the
  // replies and advances clock(). The servers see the same chunk messages as
  // from push_pull, so BSP, SSP and ASP and their deadlines hold unchanged.
  void begin_push_pull(std::span<const float> grads, std::span<float> params);
  void push_pull_range(KeyRange keys);
  void end_push_pull();
  // Staged push_pull: blocks until at most one chunk of the requests sent
  // so far is still queued on this worker's emulated NIC (at once without
  // one), then takes the replies that arrived — so that the next range
  // given waits behind one chunk at most (the layer-wise start's
  // priorities, docs/overlap.md).
  void wait_sent();
  // Called with each chunk's keys once its new parameters are copied into
  // `params` (any push_pull or pull), on the thread that took the reply: the
  // layer-wise start of the next forward (docs/overlap.md).
  void set_on_params(std::function<void(KeyRange)> on_params) { on_params_ = std::move(on_params); }
  // Sparse rows: the rows (ascending, unique, as row numbers of
  // options.rows) whose gradients the next push_pulls carry; the others'
  // must be zero. Kept until set again; ignored without options.rows.
  void set_touched_rows(std::span<const int64_t> rows);
  // Goodbye to every shard, after clock() steps; waits for their acks.
  void close();

  int64_t clock() const { return clock_; }
  int64_t size() const { return size_; }  // M
  // Fewest updates any shard had applied at its last reply (staleness under ssp/asp).
  int64_t min_version() const { return min_version_; }
  // Fewest workers any chunk's newest applied clock averaged, over the
  // parameters of the last push_pull or pull (0: none applied yet, or asp).
  int min_averaged() const {
    return min_averaged_ == std::numeric_limits<int>::max() ? 0 : min_averaged_;
  }
  const PsCounters& counters() const { return counters_; }
  // How long a reply may take: ps.timeout + 1 s (the server's diagnosis first).
  double reply_deadline_s() const;

 private:
  struct Shard {
    ShardAddress address;
    ShardLayout layout;
    zmq::socket_t socket;
    std::vector<char> answered;  // by chunk, in the current round
    std::vector<int64_t> given;  // by chunk: floats given (staged push_pull); -1 once sent
    int waiting = 0;             // replies still due in the current round
    std::vector<int64_t> seen;   // by chunk: the version of its last parameters reply
  };
  // One round: open_round, send_chunk for every chunk, collect(block).
  void round(wire::MessageType type, int64_t clock, std::span<const float> grads,
             std::span<float> params, double timeout_s);
  void open_round(wire::MessageType type, int64_t clock, std::span<const float> grads,
                  std::span<float> params);
  void send_chunk(Shard& shard, int chunk);
  // Sends the round's unsent requests that are due (all at once without
  // emulation); returns when the next is due (0: none left).
  double send_due();
  // Takes the replies that arrived; with `block`, until every chunk is
  // answered (deadline timeout_s + 1 s from now), then closes the round.
  void collect(double timeout_s, bool block);
  void send_request(Shard& shard, wire::MessageType type, int64_t clock, KeyRange keys,
                    std::span<const float> grads);
  // A reply from shards_[shard]: its frames (header, payload).
  struct Reply {
    size_t shard;
    std::vector<zmq::message_t> frames;
    size_t count;
    wire::Header header;
  };
  enum class Took { kNothing, kHeld, kDone };
  // Takes one waiting reply: handles it, or holds it for the emulated NIC.
  Took take_reply(size_t shard, wire::MessageType type, int64_t clock, std::span<float> params);
  void handle_reply(Shard& shard, std::vector<zmq::message_t>& frames, size_t count,
                    const wire::Header& h, wire::MessageType type, int64_t clock,
                    std::span<float> params);
  std::string reply_context(const Shard& shard, wire::MessageType type, int64_t clock) const;
  [[noreturn]] void fail_protocol(const std::string& what);
  void teardown(const std::string& why);
  std::string who() const;

  // The round in progress: its request type, clock, the caller's buffers,
  // a poll item per shard and the shards still to answer every chunk.
  struct Round {
    wire::MessageType type = wire::MSG_BYE;
    int64_t clock = 0;
    std::span<const float> grads;
    std::span<float> params;
    std::vector<zmq::pollitem_t> items;
    size_t busy = 0;
    bool open = false;
    std::map<int64_t, int64_t> given;  // staged push_pull: key ranges given, begin -> end
    std::vector<ChunkRef> unsent;      // a whole push_pull's requests, in send_order
    size_t next_unsent = 0;            // the first of them not yet sent
  };

  ClientOptions options_;
  int64_t size_ = 0;
  Round round_;
  zmq::context_t context_{1};
  std::vector<Shard> shards_;
  int64_t clock_ = 0;
  int64_t min_version_ = 0;
  int min_averaged_ = 0;
  PsCounters counters_;
  BorrowedFrames borrowed_;  // zero-copy payload frames of the current round
  OnTheWire<Reply> in_flight_;  // under emulation: replies not yet arrived
  std::string broken_;       // why the client is unusable; "" while healthy
  bool closed_ = false;
  std::function<void(KeyRange)> on_params_;
  std::vector<int64_t> touched_;  // set_touched_rows
};

}  // namespace psar::ps
