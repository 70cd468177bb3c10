#pragma once
// The transport's own ceiling, for `psar bench ps`: the same ZeroMQ
// DEALER/ROUTER sockets, the same sharding of the vector over S servers, the
// same messages (one per chunk of a shard) and the same concurrency as a
// Client::push_pull, but nothing else — the server echoes each payload frame
// back as it came (no header, no validation, no aggregation, no optimizer)
// and the client sends zero-copy and drops the echo without copying it
// anywhere. What a push_pull costs beyond a round trip of these messages is
// the parameter server's own overhead.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "ps/sharding.h"
#include "ps/zmq_util.h"

namespace psar::ps {

class EchoServer {
 public:
  // Binds like a Server (see bind_endpoint); expects `peers` clients.
  EchoServer(const std::string& bind, int peers, double timeout_s,
             const std::string& advertise = "");
  const std::string& endpoint() const { return endpoint_; }
  // Echoes until every client said goodbye; TimeoutError after timeout_s without a message.
  void run();

 private:
  zmq::context_t context_;  // server_io_threads(peers), as a Server's
  zmq::socket_t socket_;
  std::string endpoint_;
  int peers_;
  double timeout_s_;
};

class EchoClient {
 public:
  // shards[s] of every round trip goes to endpoints[s], one message per chunk.
  EchoClient(const std::vector<std::string>& endpoints, std::vector<ShardLayout> shards,
             double timeout_s);
  ~EchoClient();  // says goodbye (bounded); never throws
  // Sends every slice of `data` to its server at once, waits for all echoes.
  // With `echoed` (data's size) each echo is copied to its slice there, so a
  // test can check what came back; empty: echoes are dropped uncopied.
  void round_trip(std::span<const float> data, std::span<float> echoed = {});

 private:
  zmq::context_t context_{1};
  std::vector<zmq::socket_t> sockets_;
  std::vector<std::string> endpoints_;
  std::vector<ShardLayout> shards_;
  double timeout_s_;
  BorrowedFrames borrowed_;
};

}  // namespace psar::ps
