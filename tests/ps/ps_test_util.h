#pragma once
// Shared by the parameter-server tests: deterministic gradient sequences, the
// slow reference of each consistency model (average in double, then the
// trainer's optimizer over the whole vector), and a job of server shards on
// threads in this process, talking over TCP loopback.

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/optim.h"
#include "core/rng.h"
#include "core/timer.h"
#include "ps/client.h"
#include "ps/server.h"
#include "ps/shard_state.h"
#include "ps/sharding.h"
#include "ps/zmq_util.h"

namespace psar::ps::testing {

// Runs fn(worker) on N threads; rethrows the first failure.
inline void run_workers(int n, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  for (int w = 0; w < n; ++w)
    threads.emplace_back([&, w] {
      try {
        fn(w);
      } catch (...) {
        errors[static_cast<size_t>(w)] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

// Worker w's gradient of step t at key i: uniform in [-1, 1), distinct per (w, t, i).
inline float grad_value(int worker, int64_t step, int64_t i) {
  const uint64_t stream = (static_cast<uint64_t>(worker) << 32) | static_cast<uint64_t>(step);
  return 2.0f * Philox::uniform(7, stream, static_cast<uint64_t>(i)) - 1.0f;
}

inline std::vector<float> make_grad(int worker, int64_t step, int64_t size) {
  std::vector<float> g(static_cast<size_t>(size));
  for (int64_t i = 0; i < size; ++i) g[static_cast<size_t>(i)] = grad_value(worker, step, i);
  return g;
}

// A pushed gradient that owns its values.
inline Gradient owned(std::vector<float> values) {
  auto holder = std::make_shared<std::vector<float>>(std::move(values));
  return {std::span<float>(*holder), holder};
}

inline std::vector<float> initial_params(int64_t size) {
  std::vector<float> p(static_cast<size_t>(size));
  for (int64_t i = 0; i < size; ++i) p[static_cast<size_t>(i)] = Philox::normal(3, 0, i);
  return p;
}

// `workers.size()` optimizer steps, step t on the double-precision average
// of the gradients of the workers in workers[t] (backup workers keep the
// first N arrivals, a failure leaves the survivors).
inline std::vector<float> reference_of(std::vector<float> params,
                                       const std::vector<std::set<int>>& workers,
                                       const OptimizerOptions& options) {
  auto opt = make_optimizer(options, static_cast<int64_t>(params.size()));
  std::vector<float> avg(params.size());
  for (size_t t = 0; t < workers.size(); ++t) {
    for (size_t i = 0; i < params.size(); ++i) {
      double sum = 0;
      for (int w : workers[t])
        sum += grad_value(w, static_cast<int64_t>(t), static_cast<int64_t>(i));
      avg[i] = static_cast<float>(sum / static_cast<double>(workers[t].size()));
    }
    opt->step(params, avg);
  }
  return params;
}

// BSP: `steps` optimizer steps, each on the double-precision average of the
// workers' gradients of that step.
inline std::vector<float> reference_bsp(std::vector<float> params, int workers, int64_t steps,
                                        const OptimizerOptions& options) {
  std::set<int> all;
  for (int w = 0; w < workers; ++w) all.insert(w);
  return reference_of(std::move(params), std::vector<std::set<int>>(static_cast<size_t>(steps), all),
                      options);
}

// max |a - b| over max |b| (1 if b is all zeros): one number for a whole vector.
inline double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  return diff / (scale > 0 ? scale : 1.0);
}

inline OptimizerOptions sgd(float lr = 0.05f, float momentum = 0.9f) {
  OptimizerOptions o;
  o.type = "sgd";
  o.lr = lr;
  o.momentum = momentum;
  return o;
}

inline OptimizerOptions adam() {
  OptimizerOptions o;
  o.type = "adam";
  o.lr = 1e-3f;
  return o;
}

// Polls `done` until it holds or `seconds` pass; returns whether it held.
template <typename Pred>
bool wait_until(Pred done, double seconds = 20.0) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

inline constexpr uint64_t kToken = 0x5eed'f00d'cafe'beefULL;

// Server options of the tests: the reference's optimizer, a generous timeout.
inline ServerOptions server_options() {
  ServerOptions o;
  o.optimizer = sgd();
  o.timeout_s = 60;
  return o;
}

// S shards serving on threads of this process, bound to 127.0.0.1.
struct LocalJob {
  // With `net` enabled, every shard and every worker gets an emulated NIC of its own.
  LocalJob(std::vector<float> initial, int shards, int workers,
           ServerOptions base = server_options(), NetModel net = {})
      : net_(net) {
    const auto plan = plan_shards(static_cast<int64_t>(initial.size()), shards);
    if (base.security == Security::kCurve)  // ps/curve.h: every worker's pair, on the allow-list
      for (int w = 0; w < workers; ++w) {
        worker_keys.push_back(make_curve_keys());
        base.clients.insert(worker_keys.back().public_key);
      }
    for (int s = 0; s < shards; ++s) {
      ServerOptions o = base;
      if (net.enabled()) o.nic = std::make_shared<Nic>(net);
      o.shard = s;
      o.range = plan[s];
      o.workers = workers;
      o.token = kToken;
      auto server = std::make_unique<Server>(
          o, std::span<const float>(initial).subspan(static_cast<size_t>(plan[s].begin),
                                                     static_cast<size_t>(plan[s].size())));
      addresses.push_back({s, server->endpoint(), plan[s], "this host", server->public_key()});
      servers.push_back(std::make_unique<ServerThread>(std::move(server)));
    }
    timeout_s = base.timeout_s;
    chunk_floats = base.chunk_floats;
  }

  ClientOptions client(int worker) const {
    ClientOptions o;
    o.worker = worker;
    o.token = kToken;
    o.timeout_s = timeout_s;
    o.chunk_floats = chunk_floats;
    o.shards = addresses;
    if (!worker_keys.empty()) o.curve = worker_keys[static_cast<size_t>(worker)];
    if (net_.enabled()) o.nic = std::make_shared<Nic>(net_);
    return o;
  }

  // Waits for every shard to finish; rethrows the first failure.
  void join() {
    for (auto& s : servers) s->join();
  }

  std::vector<float> params() {
    std::vector<float> all;
    for (auto& s : servers) {
      const auto p = s->server().params();
      all.insert(all.end(), p.begin(), p.end());
    }
    return all;
  }

  PsCounters total() {
    PsCounters t;
    for (auto& s : servers) {
      const PsCounters c = s->server().counters();
      t.payload_bytes_in += c.payload_bytes_in;
      t.payload_bytes_out += c.payload_bytes_out;
      t.messages_in += c.messages_in;
      t.messages_out += c.messages_out;
      t.rejected += c.rejected;
      t.refused += c.refused;
    }
    return t;
  }

  std::vector<ShardAddress> addresses;
  std::vector<CurveKeys> worker_keys;  // ps.security curve: by worker
  std::vector<std::unique_ptr<ServerThread>> servers;
  double timeout_s = 60;
  int64_t chunk_floats = 0;
  NetModel net_;
};


// A stranger to a job under ps.security curve (tests/ps/curve_test.cc).
enum class Intruder { kPlain, kOwnKeys, kWrongServerKey };

// Connects to `shard` as `kind` and sends it a push of zeros and a pull of
// step 0 for worker 0 that carry `token`; calls `sent`, then returns how many
// frames came back within `wait_s`.
inline size_t intrude(const ShardAddress& shard, Intruder kind, uint64_t token, double wait_s,
                      const std::function<void()>& sent) {
  auto header = [&](wire::MessageType type) {
    wire::Header h;
    h.set_type(type);
    h.set_token(token);
    h.set_worker(0);
    h.set_clock(0);
    h.set_shard(shard.shard);
    h.set_key_begin(shard.range.begin);
    h.set_key_end(shard.range.end);
    h.set_payload_floats(type == wire::MSG_PUSH ? shard.range.size() : 0);
    return encode_header(h);
  };
  zmq::context_t context(1);
  zmq::socket_t socket(context, zmq::socket_type::dealer);
  tune_socket(socket);
  if (kind == Intruder::kOwnKeys) set_curve_client(socket, make_curve_keys(), shard.server_key);
  if (kind == Intruder::kWrongServerKey)
    set_curve_client(socket, make_curve_keys(), make_curve_keys().public_key);
  socket.connect(shard.endpoint);
  const std::string zeros(static_cast<size_t>(shard.range.size()) * sizeof(float), '\0');
  socket.send(zmq::buffer(header(wire::MSG_PUSH)), zmq::send_flags::sndmore);
  socket.send(zmq::buffer(zeros), zmq::send_flags::none);
  socket.send(zmq::buffer(header(wire::MSG_PULL)), zmq::send_flags::none);
  sent();
  size_t received = 0;
  const double deadline = now_seconds() + wait_s;
  while (now_seconds() < deadline) {
    zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, std::chrono::milliseconds(poll_millis(deadline, 0.1)));
    std::vector<zmq::message_t> frames;
    received += recv_frames(socket, frames, 4);
  }
  return received;
}

}  // namespace psar::ps::testing
