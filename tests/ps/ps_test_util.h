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
#include <thread>
#include <vector>

#include "core/optim.h"
#include "core/rng.h"
#include "ps/client.h"
#include "ps/server.h"
#include "ps/shard_state.h"
#include "ps/sharding.h"

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
      addresses.push_back({s, server->endpoint(), plan[s], "this host"});
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
    }
    return t;
  }

  std::vector<ShardAddress> addresses;
  std::vector<std::unique_ptr<ServerThread>> servers;
  double timeout_s = 60;
  int64_t chunk_floats = 0;
  NetModel net_;
};

}  // namespace psar::ps::testing
