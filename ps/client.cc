#include "ps/client.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

#include "core/log.h"
#include "core/timer.h"
#include "core/units.h"
#include "ps/zmq_util.h"

namespace psar::ps {

namespace {

constexpr double kPollSlice = 0.1;
// Requests queued on a worker's emulated NIC before the next enters the
// transport (Client::send_due): two, so that the wire does not idle while
// the worker wakes up to send the next.
constexpr double kQueuedChunks = 2;
constexpr double kGoodbyeTimeout = 5.0;  // a destructor's goodbye waits at most this long
// Servers diagnose a stalled job at ps.timeout and tell the waiting workers
// why; a worker waits this much longer before blaming the server itself.
constexpr double kServerDiagnosisGrace = 1.0;

wire::MessageType expected_reply(wire::MessageType request) {
  return request == wire::MSG_PULL || request == wire::MSG_PUSH_PULL ? wire::MSG_PARAMS
                                                                     : wire::MSG_ACK;
}

}  // namespace

Client::Client(const ClientOptions& options)
    : options_(options), clock_(options.first_clock), in_flight_(options.nic.get()) {
  PSAR_CHECK(!options.shards.empty(), "ps client: no shards");
  int64_t next = 0;
  for (const auto& a : options.shards) {
    PSAR_CHECK(a.range.begin == next && a.range.end >= a.range.begin,
               "ps client: shard ranges do not tile the parameters at shard ", a.shard);
    next = a.range.end;
    PSAR_CHECK(a.server_key.empty() || !options.curve.empty(), "ps client: shard ", a.shard,
               " speaks CURVE but the worker has no key pair");
  }
  size_ = next;
  const double wait_s = std::min(options.connect_timeout_s, options.timeout_s);
  std::string failed;
  try {
    std::vector<zmq::socket_t> sockets;
    std::vector<std::string> endpoints;
    for (const auto& a : options.shards) {
      sockets.emplace_back(context_, zmq::socket_type::dealer);
      tune_socket(sockets.back());
      if (!a.server_key.empty()) set_curve_client(sockets.back(), options.curve, a.server_key);
      endpoints.push_back(a.endpoint);
    }
    const std::vector<int> verdict = connect_all(context_, sockets, endpoints, wait_s);
    for (size_t i = 0; i < options.shards.size(); ++i) {
      const ShardAddress& a = options.shards[i];
      shards_.push_back(Shard{a, ShardLayout{a.shard, a.range, options.chunk_floats},
                              std::move(sockets[i]), {}, {}, 0, {}});
      shards_.back().seen.assign(static_cast<size_t>(shards_.back().layout.chunks()), 0);
      if (verdict[i] >= 0)
        failed += (failed.empty() ? "" : "; ") + std::string("shard ") + std::to_string(a.shard) +
                  " at " + unreachable(a.endpoint, a.host, verdict[i]);
    }
  } catch (const zmq::error_t& e) {
    teardown("connect failed");
    throw CommError(who() + ": cannot connect to the shards: " + e.what());
  }
  if (!failed.empty()) {
    teardown("connect failed");
    throw TimeoutError(who() + (options.host.empty() ? "" : " on host " + options.host) +
                       ": cannot connect within " + format_duration(wait_s) + " to " + failed +
                       " (is that address reachable from this host? see ps.interface)");
  }
}

Client::~Client() {
  // A push_pull left open (its caller failed) cannot be followed by a goodbye.
  if (!closed_ && broken_.empty() && !round_.open) {
    try {
      round(wire::MSG_BYE, clock_, {}, {}, std::min(options_.timeout_s, kGoodbyeTimeout));
    } catch (const std::exception& e) {
      PSAR_LOG(kWarn, "ps", who() << ": goodbye failed: " << e.what());
    }
  }
  if (broken_.empty()) teardown("closed");
}

double Client::reply_deadline_s() const { return options_.timeout_s + kServerDiagnosisGrace; }

std::string Client::who() const { return "ps worker " + std::to_string(options_.worker); }

void Client::push_pull(std::span<const float> grads, std::span<float> params) {
  PSAR_CHECK(
      static_cast<int64_t>(grads.size()) == size_ && static_cast<int64_t>(params.size()) == size_,
      "ps client: push_pull of ", grads.size(), " gradients into ", params.size(),
      " parameters, the shards hold ", size_);
  round(wire::MSG_PUSH_PULL, clock_, grads, params, options_.timeout_s);
  ++clock_;
}

void Client::push(std::span<const float> grads) {
  PSAR_CHECK(static_cast<int64_t>(grads.size()) == size_, "ps client: push of ", grads.size(),
             " floats, the shards hold ", size_);
  round(wire::MSG_PUSH, clock_, grads, {}, options_.timeout_s);
  ++clock_;
}

void Client::pull(std::span<float> params) {
  PSAR_CHECK(static_cast<int64_t>(params.size()) == size_, "ps client: pull into ", params.size(),
             " floats, the shards hold ", size_);
  round(wire::MSG_PULL, clock_, {}, params, options_.timeout_s);
}

void Client::set_touched_rows(std::span<const int64_t> rows) {
  if (options_.rows.row_floats == 0) return;  // dense: every push carries every float
  for (size_t i = 1; i < rows.size(); ++i)
    PSAR_CHECK(rows[i - 1] < rows[i], "ps client: touched rows not strictly ascending at ", i);
  PSAR_CHECK(rows.empty() ||
                 (rows.front() >= 0 && rows.back() * options_.rows.row_floats < options_.rows.floats),
             "ps client: touched rows outside the sparse rows");
  touched_.assign(rows.begin(), rows.end());
}

void Client::close() {
  if (closed_) return;
  round(wire::MSG_BYE, clock_, {}, {}, options_.timeout_s);
  closed_ = true;
  teardown("closed");
}

void Client::round(wire::MessageType type, int64_t clock, std::span<const float> grads,
                   std::span<float> params, double timeout_s) {
  open_round(type, clock, grads, params);
  // One request per chunk (a goodbye: one per shard) in send_order: chunk 0
  // of every shard first, so that every server has work as early as
  // possible, each worker starting at a shard of its own.
  std::vector<int64_t> chunks;
  for (const auto& s : shards_) chunks.push_back(s.waiting);
  round_.unsent = send_order(options_.worker, chunks);
  send_due();
  collect(timeout_s, /*block=*/true);
}

double Client::send_due() {
  auto& unsent = round_.unsent;
  // Under emulation a request enters the transport once the NIC's queue
  // holds less than kQueuedChunks chunks, so that its bytes travel while the
  // modelled wire carries them: a burst of the whole step at once would
  // load the host's cores ahead of the wire and delay the replies that
  // cross it meanwhile (docs/network.md). Without emulation: all at once.
  const double bandwidth = options_.nic ? options_.nic->model().bandwidth : 0;
  const double lead = bandwidth > 0 ? kQueuedChunks * static_cast<double>(options_.chunk_floats) *
                                          sizeof(float) / bandwidth
                                    : 0;
  while (round_.next_unsent < unsent.size()) {
    if (lead > 0) {
      const double due = options_.nic->egress_free() - lead;
      if (due > now_seconds()) return due;
    }
    const ChunkRef& r = unsent[round_.next_unsent++];
    send_chunk(shards_[static_cast<size_t>(r.shard)], static_cast<int>(r.chunk));
  }
  return 0;
}

void Client::open_round(wire::MessageType type, int64_t clock, std::span<const float> grads,
                        std::span<float> params) {
  if (closed_) throw CommError(who() + ": already closed");
  if (!broken_.empty()) throw CommError(who() + ": unusable after an earlier failure: " + broken_);
  PSAR_CHECK(!round_.open, "ps client: a ", type_name(type), " of step ", clock,
             " begins while a push_pull of step ", round_.clock, " is still open");
  round_ = Round{type, clock, grads, params, {}, shards_.size(), true, {}, {}, 0};
  for (auto& s : shards_) {
    const int n = type == wire::MSG_BYE ? 1 : s.layout.chunks();
    s.answered.assign(static_cast<size_t>(n), 0);
    s.given.assign(static_cast<size_t>(n), 0);
    s.waiting = n;
    round_.items.push_back({s.socket.handle(), 0, ZMQ_POLLIN, 0});
  }
  min_version_ = std::numeric_limits<int64_t>::max();
  min_averaged_ = std::numeric_limits<int>::max();
  in_flight_.clear();
}

void Client::send_chunk(Shard& s, int chunk) {
  const wire::MessageType type = round_.type;
  try {
    send_request(s, type, round_.clock,
                 type == wire::MSG_BYE ? s.address.range : s.layout.chunk(chunk), round_.grads);
    s.given[static_cast<size_t>(chunk)] = -1;  // sent
  } catch (const zmq::error_t& e) {
    teardown(e.what());
    throw CommError(who() + ": " + type_name(type) + " of step " + std::to_string(round_.clock) +
                    ": send failed: " + e.what());
  }
}

void Client::begin_push_pull(std::span<const float> grads, std::span<float> params) {
  PSAR_CHECK(
      static_cast<int64_t>(grads.size()) == size_ && static_cast<int64_t>(params.size()) == size_,
      "ps client: push_pull of ", grads.size(), " gradients into ", params.size(),
      " parameters, the shards hold ", size_);
  open_round(wire::MSG_PUSH_PULL, clock_, grads, params);
  for (auto& s : shards_)  // an empty shard's one empty chunk is final at once
    if (s.layout.range.size() == 0) send_chunk(s, 0);
}

void Client::push_pull_range(KeyRange keys) {
  PSAR_CHECK(round_.open && round_.type == wire::MSG_PUSH_PULL,
             "ps client: push_pull_range outside begin_push_pull/end_push_pull");
  PSAR_CHECK(0 <= keys.begin && keys.begin <= keys.end && keys.end <= size_,
             "ps client: push_pull_range ", to_string(keys), " outside the ", size_,
             " parameters");
  if (keys.size() == 0) return;
  // Ranges given so far this step, by begin: the new one must overlap none.
  auto& given = round_.given;
  const auto next = given.lower_bound(keys.begin);
  PSAR_CHECK((next == given.end() || keys.end <= next->first) &&
                 (next == given.begin() || std::prev(next)->second <= keys.begin),
             "ps client: keys ", to_string(keys), " of step ", round_.clock, " given twice");
  given.emplace(keys.begin, keys.end);
  for (auto& s : shards_) {
    const KeyRange& r = s.layout.range;
    if (keys.end <= r.begin || keys.begin >= r.end) continue;
    for (int c = 0; c < s.layout.chunks(); ++c) {
      const KeyRange chunk = s.layout.chunk(c);
      const int64_t overlap =
          std::min(keys.end, chunk.end) - std::max(keys.begin, chunk.begin);
      if (overlap <= 0) continue;
      int64_t& floats = s.given[static_cast<size_t>(c)];
      floats += overlap;
      if (floats == chunk.size()) send_chunk(s, c);
    }
  }
  collect(options_.timeout_s, /*block=*/false);
}

void Client::wait_sent() {
  PSAR_CHECK(round_.open && round_.type == wire::MSG_PUSH_PULL,
             "ps client: wait_sent outside begin_push_pull/end_push_pull");
  if (!options_.nic) return;
  // One chunk may stay queued, so that the NIC does not idle while the
  // caller wakes up to give the next range.
  const double bandwidth = options_.nic->model().bandwidth;
  const double chunk_s =
      bandwidth > 0 ? static_cast<double>(options_.chunk_floats) * sizeof(float) / bandwidth : 0;
  wait_until(options_.nic->egress_free() - chunk_s);
  collect(options_.timeout_s, /*block=*/false);
}

void Client::end_push_pull() {
  PSAR_CHECK(round_.open && round_.type == wire::MSG_PUSH_PULL,
             "ps client: end_push_pull without begin_push_pull");
  for (const auto& s : shards_)
    for (int c = 0; c < static_cast<int>(s.given.size()); ++c)
      PSAR_CHECK(s.given[static_cast<size_t>(c)] < 0, "ps client: end_push_pull of step ",
                 round_.clock, " before keys ", to_string(s.layout.chunk(c)), " were given");
  collect(options_.timeout_s, /*block=*/true);
  ++clock_;
}

void Client::collect(double timeout_s, bool block) {
  const wire::MessageType type = round_.type;
  const int64_t clock = round_.clock;
  const std::span<float> params = round_.params;
  auto& items = round_.items;
  const double deadline = now_seconds() + timeout_s + kServerDiagnosisGrace;
  auto answered = [&](size_t i) {
    if (--shards_[i].waiting == 0) {
      items[i].events = 0;  // every chunk answered
      --round_.busy;
    }
  };
  for (size_t i = 0; i < items.size(); ++i)
    items[i].events = shards_[i].waiting > 0 ? ZMQ_POLLIN : 0;
  // Emulated ingress: replies from every shard in the order they left their
  // servers, each once the wire could have delivered it (egress end + latency).
  auto deliver = [&]() -> double {
    double next = 0;
    while (std::optional<Reply> r = in_flight_.release(next)) {
      handle_reply(shards_[r->shard], r->frames, r->count, r->header, type, clock, params);
      answered(r->shard);
    }
    // The next event: a held reply's arrival or a request's turn on the NIC.
    const double send = send_due();
    return next > 0 && send > 0 ? std::min(next, send) : std::max(next, send);
  };
  while (round_.busy > 0) {
    const long ms =
        block ? poll_millis_before(deliver(), poll_millis(deadline, kPollSlice)) : (deliver(), 0L);
    if (round_.busy == 0) break;
    zmq::poll(items.data(), items.size(), std::chrono::milliseconds(ms));
    for (size_t i = 0; i < items.size(); ++i) {
      if (items[i].events == 0 || !(items[i].revents & ZMQ_POLLIN)) continue;
      for (Took t; shards_[i].waiting > 0 &&
                   (t = take_reply(i, type, clock, params)) != Took::kNothing;)
        if (t == Took::kDone) answered(i);
    }
    if (options_.nic) deliver();
    if (!block) return;  // a staged push_pull takes what has arrived, waits in end_push_pull
    if (round_.busy > 0 && now_seconds() >= deadline) {
      std::string missing;
      for (size_t i = 0; i < items.size(); ++i)
        if (items[i].events != 0)
          missing += (missing.empty() ? "" : ", ") + std::string("shard ") +
                     std::to_string(shards_[i].address.shard) + " (" + shards_[i].address.endpoint +
                     ")";
      const std::string text = who() + ": " + type_name(type) + " of step " +
                               std::to_string(clock) + ": no reply from " + missing + " within " +
                               std::to_string(timeout_s + kServerDiagnosisGrace) +
                               " s (ps.timeout + 1 s)";
      teardown(text);
      throw TimeoutError(text);
    }
  }
  // A staged push_pull's round stays open until end_push_pull, even when
  // every reply has already arrived (the layer-wise start waits for its
  // sends in between: wait_sent).
  if (!block) return;
  round_.open = false;
  // Every shard answered, so ZeroMQ has written our payload frames; it lets go
  // of them right after. The caller may reuse `grads` only once it has.
  if (!borrowed_.wait_released(deadline)) {
    const std::string text = who() + ": payload frames still held by ZeroMQ at the deadline";
    teardown(text);
    throw TimeoutError(text);
  }
}

void Client::send_request(Shard& s, wire::MessageType type, int64_t clock, KeyRange keys,
                          std::span<const float> grads) {
  const bool pushes = type == wire::MSG_PUSH || type == wire::MSG_PUSH_PULL;
  const bool sparse = type == wire::MSG_PUSH_PULL && options_.rows.sparse(keys);
  wire::Header h;
  h.set_type(type);
  h.set_token(options_.token);
  h.set_worker(options_.worker);
  h.set_clock(clock);
  h.set_shard(s.address.shard);
  h.set_key_begin(keys.begin);
  h.set_key_end(keys.end);
  h.set_payload_floats(pushes ? keys.size() : 0);
  std::vector<char> frame;  // a sparse push's keys and values
  if (sparse) {
    int64_t floats = 0;
    frame = pack_rows(options_.rows, keys, touched_, grads.data(), 0, floats);
    h.set_sparse(true);
    h.set_sparse_keys(static_cast<int64_t>((frame.size() - static_cast<size_t>(floats) * sizeof(float)) /
                                           sizeof(int64_t)));
    h.set_payload_floats(floats);
    h.set_have_version(s.seen[static_cast<size_t>(s.layout.chunk_containing(keys))]);
  }
  if (options_.nic) {
    const size_t bytes = h.ByteSizeLong() + sizeof(double) +
                         (sparse   ? frame.size()
                          : pushes ? static_cast<size_t>(keys.size()) * sizeof(float)
                                   : 0);
    h.set_sent_at(options_.nic->depart(bytes, now_seconds()));
  }
  const std::string head = encode_header(h);
  s.socket.send(zmq::buffer(head), pushes ? zmq::send_flags::sndmore : zmq::send_flags::none);
  counters_.header_bytes_out += static_cast<int64_t>(head.size());
  ++counters_.messages_out;
  if (!pushes) return;
  if (sparse) {
    zmq::message_t payload(frame.data(), frame.size());
    counters_.payload_bytes_out += static_cast<int64_t>(payload.size());
    s.socket.send(payload, zmq::send_flags::none);
    return;
  }
  zmq::message_t payload =
      borrowed_.borrow(grads.data() + keys.begin, static_cast<size_t>(keys.size()));
  counters_.payload_bytes_out += static_cast<int64_t>(payload.size());
  s.socket.send(payload, zmq::send_flags::none);
}

std::string Client::reply_context(const Shard& s, wire::MessageType type, int64_t clock) const {
  return who() + ": " + type_name(type) + " of step " + std::to_string(clock) + ": shard " +
         std::to_string(s.address.shard) + " (" + s.address.endpoint + ")";
}

Client::Took Client::take_reply(size_t index, wire::MessageType type, int64_t clock,
                                std::span<float> params) {
  Shard& s = shards_[index];
  std::vector<zmq::message_t> frames;
  const size_t count = recv_frames(s.socket, frames, 3);
  if (count == 0) return Took::kNothing;
  wire::Header h;
  if (count > 2 || !decode_header(frames[0].data(), frames[0].size(), h) ||
      h.token() != options_.token)
    fail_protocol(reply_context(s, type, clock) + " sent a reply that is not this job's protocol");
  ++counters_.messages_in;
  counters_.header_bytes_in += static_cast<int64_t>(frames[0].size());
  if (options_.nic && h.sent_at() > 0) {  // on the emulated wire until it arrives
    const double sent_at = h.sent_at();
    if (!std::isfinite(sent_at))
      fail_protocol(reply_context(s, type, clock) + " sent a reply with departure time " +
                    std::to_string(sent_at));
    const size_t bytes = frames[0].size() + (count == 2 ? frames[1].size() : 0);
    in_flight_.hold(sent_at, bytes, Reply{index, std::move(frames), count, std::move(h)});
    return Took::kHeld;
  }
  handle_reply(s, frames, count, h, type, clock, params);
  return Took::kDone;
}

void Client::handle_reply(Shard& s, std::vector<zmq::message_t>& frames, size_t count,
                          const wire::Header& h, wire::MessageType type, int64_t clock,
                          std::span<float> params) {
  const std::string what = reply_context(s, type, clock);
  if (h.type() == wire::MSG_ERROR) {
    ++counters_.rejected;
    const std::string text =
        what + " answered with an error (" + status_name(h.status()) + "): " + h.error();
    teardown(text);
    if (h.status() == wire::STATUS_TIMEOUT) throw TimeoutError(text);
    if (h.status() == wire::STATUS_PEER_FAILED) throw CommError(text);
    throw ProtocolError(text);
  }
  const KeyRange keys{h.key_begin(), h.key_end()};
  const int chunk = type == wire::MSG_BYE ? 0 : s.layout.chunk_containing(keys);
  const KeyRange want =
      type == wire::MSG_BYE ? s.address.range : s.layout.chunk(std::max(chunk, 0));
  const int64_t want_clock = type == wire::MSG_PUSH_PULL ? clock + 1 : clock;
  if (h.type() != expected_reply(type) || h.shard() != s.address.shard ||
      h.worker() != options_.worker || h.clock() != want_clock || chunk < 0 || keys != want ||
      s.answered[static_cast<size_t>(chunk)])
    fail_protocol(what + " answered with " + type_name(h.type()) + " of worker " +
                  std::to_string(h.worker()) + ", step " + std::to_string(h.clock()) + ", keys " +
                  to_string(keys));
  s.answered[static_cast<size_t>(chunk)] = 1;
  min_version_ = std::min(min_version_, h.version());
  if (h.push_dropped()) ++counters_.pushes_dropped;
  if (h.type() != wire::MSG_PARAMS) return;
  min_averaged_ = std::min(min_averaged_, static_cast<int>(h.averaged()));
  const size_t bytes = count == 2 ? frames[1].size() : 0;
  s.seen[static_cast<size_t>(chunk)] = h.version();
  if (h.sparse()) {
    const void* frame = count == 2 ? frames[1].data() : nullptr;
    const std::string bad =
        type != wire::MSG_PUSH_PULL
            ? std::string("sparse reply to a ") + type_name(type)
            : check_rows(options_.rows, keys, frame, bytes, h.sparse_keys(), h.payload_floats());
    if (!bad.empty()) fail_protocol(what + " sent sparse parameters: " + bad);
    unpack_rows(options_.rows, keys, frame, h.sparse_keys(), params.data(), 0);
    counters_.payload_bytes_in += static_cast<int64_t>(bytes);
    if (on_params_) on_params_(keys);
    return;
  }
  if (h.payload_floats() != keys.size() ||
      bytes != static_cast<size_t>(keys.size()) * sizeof(float))
    fail_protocol(what + " sent parameters " + to_string(keys) + " in " + std::to_string(bytes) +
                  " bytes");
  if (bytes > 0) std::memcpy(params.data() + keys.begin, frames[1].data(), bytes);
  counters_.payload_bytes_in += static_cast<int64_t>(bytes);
  if (on_params_) on_params_(keys);
}

void Client::fail_protocol(const std::string& what) {
  teardown(what);
  throw ProtocolError(what);
}

void Client::teardown(const std::string& why) {
  if (broken_.empty()) broken_ = why;
  round_.open = false;
  // Closing with linger 0 and terminating the context drops every queued
  // frame and waits until ZeroMQ has released all of them.
  for (auto& s : shards_) s.socket.close();
  context_.close();
}

}  // namespace psar::ps
