#include "ps/server.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <optional>

#include "core/log.h"
#include "core/timer.h"
#include "ps/validate.h"
#include "ps/zmq_util.h"

namespace psar::ps {

namespace {

constexpr size_t kMaxFrames = 4;  // identity, header, payload, and one to spot extras
constexpr double kPollSlice = 0.1;

std::string list(const std::vector<int>& workers) {
  std::string s;
  for (int w : workers) s += (s.empty() ? "" : ", ") + std::to_string(w);
  return s.empty() ? "none" : s;
}

}  // namespace

Server::Server(const ServerOptions& options, std::span<const float> initial)
    : options_(options),
      layout_{options.shard, options.range, options.chunk_floats},
      context_(server_io_threads(options.workers)),
      socket_(context_, zmq::socket_type::router),
      in_flight_(options.nic.get()) {
  PSAR_CHECK(static_cast<int64_t>(initial.size()) == options.range.size(),
             "ps shard: initial parameters hold ", initial.size(), " floats, range ",
             to_string(options.range), " needs ", options.range.size());
  for (int c = 0; c < layout_.chunks(); ++c) {
    const KeyRange keys = layout_.chunk(c);
    chunks_.push_back(std::make_unique<ShardState>(
        ShardStateOptions{keys, options.workers, options.consistency, options.staleness,
                          options.optimizer, options.backup_workers,
                          options.continue_on_failure},
        initial.subspan(static_cast<size_t>(keys.begin - options.range.begin),
                        static_cast<size_t>(keys.size())),
        options.rows));
  }
  tune_socket(socket_);
  // A frame larger than a chunk is hostile: ZeroMQ drops such a peer before
  // buffering the frame. Under CURVE the limit applies to the sealed frame.
  // A sparse frame adds a key per row (and a row cut at each end).
  const int64_t keys_cap =
      options.rows.row_floats > 0
          ? (layout_.chunk(0).size() / options.rows.row_floats + 2) * int64_t{sizeof(int64_t)}
          : 0;
  const int64_t cap = std::max<int64_t>(layout_.chunk(0).size() * 4, 64 * 1024) + keys_cap +
                      (options.security == Security::kCurve ? kCurveFrameOverhead : 0);
  socket_.set(zmq::sockopt::maxmsgsize, cap);
  if (options.security == Security::kCurve) {
    keys_ = make_curve_keys();
    set_curve_server(socket_, keys_);
    guard_ = std::make_unique<CurveGuard>(context_, socket_, options.clients);
  }
  endpoint_ = bind_endpoint(socket_, options.bind, options.advertise);
  told_.assign(static_cast<size_t>(options.workers), 0);
  if (options.resume) restore(*options.resume);
}

void Server::restore(const ShardSnapshot& snap) {
  PSAR_CHECK(snap.params.size() == static_cast<size_t>(options_.range.size()), "ps shard ",
             options_.shard, ": snapshot holds ", snap.params.size(), " floats, range ",
             to_string(options_.range));
  PSAR_CHECK(snap.chunk_rows.empty() || snap.chunk_rows.size() == chunks_.size(), "ps shard ",
             options_.shard, ": the snapshot counts the rows of ", snap.chunk_rows.size(),
             " chunks, the shard has ", chunks_.size());
  size_t rows = 0;    // into snap.rows and snap.row_versions
  size_t floats = 0;  // into each of snap.optimizer_state
  for (size_t c = 0; c < chunks_.size(); ++c) {
    ShardState& chunk = *chunks_[c];
    const KeyRange keys = chunk.options().range;
    const auto off = static_cast<size_t>(keys.begin - options_.range.begin);
    const auto n = static_cast<size_t>(keys.size());
    const auto count = static_cast<size_t>(snap.chunk_rows.empty() ? 0 : snap.chunk_rows[c]);
    PSAR_CHECK(rows + count <= snap.rows.size() && snap.rows.size() == snap.row_versions.size(),
               "ps shard ", options_.shard, ": the snapshot holds ", snap.rows.size(), " rows and ",
               snap.row_versions.size(), " versions, chunk ", c, " needs ", rows + count);
    const auto mine = std::span<const int64_t>(snap.rows).subspan(rows, count);
    const auto size = static_cast<size_t>(chunk.saved_floats(mine));
    std::vector<std::span<const float>> state;
    for (const auto& b : snap.optimizer_state) {
      PSAR_CHECK(floats + size <= b.size(), "ps shard ", options_.shard,
                 ": an optimizer buffer of the snapshot holds ", b.size(), " floats, chunk ", c,
                 " needs ", floats + size);
      state.push_back(std::span<const float>(b).subspan(floats, size));
    }
    chunk.restore(snap.clock, std::span<const float>(snap.params).subspan(off, n),
                  snap.optimizer_steps, state, mine,
                  std::span<const int64_t>(snap.row_versions).subspan(rows, count));
    rows += count;
    floats += size;
  }
  PSAR_CHECK(rows == snap.rows.size(), "ps shard ", options_.shard, ": the snapshot holds ",
             snap.rows.size(), " rows, its chunks ", rows);
  for (const auto& b : snap.optimizer_state)
    PSAR_CHECK(b.size() == floats, "ps shard ", options_.shard, ": an optimizer buffer of ",
               b.size(), " floats, its chunks ", floats);
}

void Server::snapshot_if_due(int chunk) {
  if (options_.checkpoint_every <= 0 || !options_.on_checkpoint) return;
  ShardState& state = *chunks_[static_cast<size_t>(chunk)];
  const int64_t clock = state.applied();
  if (clock == 0 || clock % options_.checkpoint_every != 0) return;
  if (pending_chunks_ == 0) {
    pending_.shard = options_.shard;
    pending_.clock = clock;
    pending_.params.assign(static_cast<size_t>(options_.range.size()), 0.0f);
    pending_saved_.assign(chunks_.size(), {});
  }
  PSAR_CHECK(pending_.clock == clock, "ps shard ", options_.shard, ": chunk ", chunk,
             " applied clock ", clock, " while the checkpoint of clock ", pending_.clock,
             " is incomplete");
  const auto off = static_cast<size_t>(state.options().range.begin - options_.range.begin);
  const auto values = state.params().view();
  std::copy(values.begin(), values.end(), pending_.params.begin() + static_cast<ptrdiff_t>(off));
  pending_saved_[static_cast<size_t>(chunk)] = state.saved();
  if (++pending_chunks_ < layout_.chunks()) return;
  pending_chunks_ = 0;
  pending_.optimizer_steps = pending_saved_.front().optimizer_steps;
  pending_.optimizer_state.assign(pending_saved_.front().optimizer_state.size(), {});
  pending_.rows.clear();
  pending_.row_versions.clear();
  pending_.chunk_rows.clear();
  const bool sparse = std::any_of(chunks_.begin(), chunks_.end(),
                                  [](const auto& c) { return c->sparse(); });
  for (ShardState::Saved& saved : pending_saved_) {
    for (size_t b = 0; b < saved.optimizer_state.size(); ++b)
      pending_.optimizer_state[b].insert(pending_.optimizer_state[b].end(),
                                         saved.optimizer_state[b].begin(),
                                         saved.optimizer_state[b].end());
    pending_.rows.insert(pending_.rows.end(), saved.rows.begin(), saved.rows.end());
    pending_.row_versions.insert(pending_.row_versions.end(), saved.versions.begin(),
                                 saved.versions.end());
    if (sparse) pending_.chunk_rows.push_back(static_cast<int64_t>(saved.rows.size()));
  }
  pending_saved_.clear();
  options_.on_checkpoint(pending_);
}

ShardState::StateBytes Server::state_bytes() const {
  ShardState::StateBytes sum;
  for (const auto& c : chunks_) {
    const ShardState::StateBytes b = c->state_bytes();
    sum.held += b.held;
    sum.allocated += b.allocated;
  }
  return sum;
}

Server::~Server() = default;

std::string Server::name() const {
  return "ps shard " + std::to_string(options_.shard) + " (" + endpoint_ + ")";
}

void Server::run() {
  double last_valid = now_seconds();
  while (!done() && !stop_.load()) {
    zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
    const int64_t before = counters_.messages_in.load(std::memory_order_relaxed);
    // Look for earlier senders' requests while the next held one is on the wire.
    const long ms = poll_millis_before(deliver_in_flight(),
                                       poll_millis(last_valid + options_.timeout_s, kPollSlice));
    zmq::poll(&item, 1, std::chrono::milliseconds(ms));
    while (!done() && receive_one()) {
    }
    deliver_in_flight();
    const double now = now_seconds();
    if (counters_.messages_in.load(std::memory_order_relaxed) != before) last_valid = now;
    if (!done() && now - last_valid > options_.timeout_s) {
      fail_timeout(now - last_valid);  // throws unless it dropped the silent workers
      last_valid = now;
    }
  }
  // Let the last acknowledgements leave before the socket closes.
  socket_.set(zmq::sockopt::linger, kCloseLingerMs);
  if (!failure_.empty()) throw CommError(name() + ": " + failure_);
}

bool Server::done() const {
  if (all_left()) return true;
  if (failure_.empty()) return false;
  for (int w = 0; w < options_.workers; ++w)
    if (!chunks_.front()->has_left(w) && !told_[w]) return false;
  return true;
}

void Server::tell_failed(zmq::message_t& identity, const wire::Header& request,
                         const std::string& why) {
  failure_ = why;
  if (request.worker() >= 0 && request.worker() < options_.workers) told_[request.worker()] = 1;
  send_error(identity, &request, wire::STATUS_PEER_FAILED, why);
}

bool Server::receive_one() {
  std::vector<zmq::message_t> frames;
  const size_t count = recv_frames(socket_, frames, kMaxFrames);
  if (count == 0) return false;
  handle(frames, count);
  return true;
}

void Server::handle(std::vector<zmq::message_t>& frames, size_t count) {
  zmq::message_t& identity = frames[0];
  wire::Header header;
  bool parsed = false;
  try {
    if (count < 2 || count > 3)
      throw RequestError(wire::STATUS_BAD_FRAMES,
                         "expected a header frame and at most one payload frame, got " +
                             std::to_string(count - 1) + " frames");
    if (!decode_header(frames[1].data(), frames[1].size(), header))
      throw RequestError(
          wire::STATUS_MALFORMED_HEADER,
          "header frame of " + std::to_string(frames[1].size()) + " bytes does not parse");
    parsed = true;
    zmq::message_t* payload = count == 3 ? &frames[2] : nullptr;
    const int chunk =
        validate_request(header, payload ? payload->size() : 0, layout_, options_.token,
                         options_.rows);
    if (options_.nic && header.sent_at() > 0) {
      // Emulated ingress: held until its modelled arrival (deliver_in_flight).
      const size_t bytes = frames[1].size() + (payload ? payload->size() : 0);
      const double sent_at = header.sent_at();
      // A departure beyond the timeout would hold the request past the point
      // where the job fails anyway (and an infinite one forever).
      if (!std::isfinite(sent_at) || sent_at > now_seconds() + options_.timeout_s)
        throw RequestError(wire::STATUS_MALFORMED_HEADER,
                           "sent_at " + std::to_string(sent_at) +
                               " is not a departure time within ps.timeout of now");
      in_flight_.hold(sent_at, bytes, Request{std::move(frames), count, std::move(header), chunk});
      return;
    }
    take_in(frames, count, header, chunk);
  } catch (const RequestError& e) {
    send_error(identity, parsed ? &header : nullptr, e.status(), e.what());
  }
}

void Server::take_in(std::vector<zmq::message_t>& frames, size_t count,
                     const wire::Header& header, int chunk) {
  dispatch(frames[0], header, chunk, count == 3 ? &frames[2] : nullptr);
  counters_.messages_in.fetch_add(1, std::memory_order_relaxed);
  counters_.header_in.fetch_add(static_cast<int64_t>(frames[1].size()),
                                std::memory_order_relaxed);
}

double Server::deliver_in_flight() {
  // A request from an earlier sender that ZeroMQ hands over later still goes
  // first, as long as it shows up before the earliest held one has arrived.
  double next = 0;
  while (!done() && !stop_.load()) {
    std::optional<Request> r = in_flight_.release(next);
    if (!r) return next;
    try {
      take_in(r->frames, r->count, r->header, r->chunk);
    } catch (const RequestError& e) {
      send_error(r->frames[0], &r->header, e.status(), e.what());
    }
    // Anything that arrived meanwhile competes for the next slot.
    while (!done() && receive_one()) {
    }
  }
  return 0;
}

void Server::dispatch(zmq::message_t& identity, const wire::Header& h, int chunk,
                      zmq::message_t* payload) {
  const int worker = h.worker();
  ShardState& state = *chunks_[chunk];
  switch (static_cast<int>(h.type())) {  // validate_request() let only requests through
    case wire::MSG_PUSH:
    case wire::MSG_PUSH_PULL: {
      if (h.sparse()) {
        push_sparse(h, chunk, *payload);
        pull(identity, h, chunk, h.clock() + 1, layout_.chunk(chunk), state.last_push_dropped());
        break;
      }
      auto frame = std::make_shared<zmq::message_t>(std::move(*payload));
      const std::span<float> data(frame->data<float>(), frame->size() / sizeof(float));
      const int64_t bytes = static_cast<int64_t>(frame->size());
      const bool changed = state.push(worker, h.clock(), Gradient{data, std::move(frame)});
      const bool dropped = state.last_push_dropped();
      counters_.payload_in.fetch_add(bytes, std::memory_order_relaxed);
      if (changed) snapshot_if_due(chunk);
      if (changed) answer_parked();
      if (h.type() == wire::MSG_PUSH_PULL)
        pull(identity, h, chunk, h.clock() + 1, layout_.chunk(chunk), dropped);
      else
        send_ack(identity, h, dropped);
      break;
    }
    case wire::MSG_PULL:
      state.check_pull(worker, h.clock());
      pull(identity, h, chunk, h.clock(), {h.key_begin(), h.key_end()});
      break;
    case wire::MSG_BYE:
      // A goodbye is for the whole shard; every chunk checks it first.
      for (const auto& c : chunks_) c->check_leave(worker, h.clock());
      for (size_t c = 0; c < chunks_.size(); ++c)
        if (chunks_[c]->leave(worker, h.clock())) snapshot_if_due(static_cast<int>(c));
      send_ack(identity, h);
      answer_parked();  // pulls that needed this worker's pushes now fail
      break;
  }
}

void Server::push_sparse(const wire::Header& h, int chunk, zmq::message_t& payload) {
  const KeyRange keys = layout_.chunk(chunk);
  const std::string bad = check_rows(options_.rows, keys, payload.data(), payload.size(),
                                     h.sparse_keys(), h.payload_floats());
  if (!bad.empty()) throw RequestError(wire::STATUS_BAD_LENGTH, "sparse push: " + bad);
  // The rows and their floats, as they came (the shard aggregates and steps them alone).
  struct Frame {
    zmq::message_t message;
    std::vector<int64_t> rows;
  };
  auto frame = std::make_shared<Frame>();
  frame->rows.resize(static_cast<size_t>(h.sparse_keys()));
  const size_t key_bytes = frame->rows.size() * sizeof(int64_t);
  if (key_bytes > 0) std::memcpy(frame->rows.data(), payload.data(), key_bytes);
  const int64_t bytes = static_cast<int64_t>(payload.size());
  frame->message = std::move(payload);
  const std::span<float> data(reinterpret_cast<float*>(frame->message.data<char>() + key_bytes),
                              static_cast<size_t>(h.payload_floats()));
  const std::span<const int64_t> rows = frame->rows;
  ShardState& state = *chunks_[static_cast<size_t>(chunk)];
  const bool changed = state.push_rows(h.worker(), h.clock(), rows, Gradient{data, std::move(frame)});
  counters_.payload_in.fetch_add(bytes, std::memory_order_relaxed);
  if (changed) snapshot_if_due(chunk);
  if (changed) answer_parked();
}

void Server::pull(zmq::message_t& identity, const wire::Header& h, int chunk, int64_t clock,
                  KeyRange keys, bool push_dropped) {
  const ShardState& state = *chunks_[chunk];
  if (state.pull_ready(clock)) {
    send_params(identity, h, chunk, clock, keys, push_dropped);
    return;
  }
  PSAR_CHECK(!push_dropped, "ps shard: a dropped push's pull of step ", clock, " is not ready");
  const std::string blocked = state.pull_blocked(clock);
  if (!blocked.empty()) {
    tell_failed(identity, h, blocked);
    return;
  }
  Parked p{zmq::message_t(), h, chunk, clock, keys};
  p.identity.copy(identity);
  parked_.push_back(std::move(p));
}

void Server::answer_parked() {
  std::vector<Parked> still;
  for (auto& p : parked_) {
    const ShardState& state = *chunks_[p.chunk];
    if (state.pull_ready(p.clock)) {
      send_params(p.identity, p.request, p.chunk, p.clock, p.keys);
    } else if (const std::string blocked = state.pull_blocked(p.clock); !blocked.empty()) {
      tell_failed(p.identity, p.request, blocked);
    } else {
      still.push_back(std::move(p));
    }
  }
  parked_ = std::move(still);
}

void Server::send_params(zmq::message_t& identity, const wire::Header& request, int chunk,
                         int64_t clock, KeyRange keys, bool push_dropped) {
  ShardState& state = *chunks_[chunk];
  wire::Header reply;
  reply.set_type(wire::MSG_PARAMS);
  reply.set_worker(request.worker());
  reply.set_clock(clock);
  reply.set_key_begin(keys.begin);
  reply.set_key_end(keys.end);
  reply.set_payload_floats(keys.size());
  reply.set_version(state.applied());
  reply.set_averaged(state.last_averaged());
  reply.set_push_dropped(push_dropped);
  zmq::message_t payload;
  if (request.sparse() && state.sparse()) {
    // The rows updated since the version the worker last saw.
    const std::vector<int64_t> changed = state.rows_since(request.have_version());
    int64_t floats = 0;
    const std::vector<char> frame = pack_rows(options_.rows, keys, changed,
                                              state.params().view().data(), keys.begin, floats);
    reply.set_sparse(true);
    reply.set_sparse_keys(static_cast<int64_t>(changed.size()));
    reply.set_payload_floats(floats);
    payload = zmq::message_t(frame.data(), frame.size());
    counters_.payload_out.fetch_add(static_cast<int64_t>(frame.size()), std::memory_order_relaxed);
    send_reply(identity, reply, &payload);
    return;
  }
  if (keys.size() > 0) {
    // Zero-copy: the frame references the chunk's buffer until ZeroMQ is done with it.
    SharedParams& params = state.params();
    const float* first = params.view().data() + (keys.begin - state.options().range.begin);
    payload = zmq::message_t(const_cast<float*>(first), keys.size() * sizeof(float),
                             &SharedParams::release, params.acquire());
  }
  counters_.payload_out.fetch_add(keys.size() * static_cast<int64_t>(sizeof(float)),
                                  std::memory_order_relaxed);
  send_reply(identity, reply, &payload);
}

void Server::send_ack(zmq::message_t& identity, const wire::Header& request, bool push_dropped) {
  wire::Header ack;
  ack.set_type(wire::MSG_ACK);
  ack.set_worker(request.worker());
  ack.set_clock(request.clock());
  ack.set_key_begin(request.key_begin());
  ack.set_key_end(request.key_end());
  ack.set_version(applied());
  ack.set_push_dropped(push_dropped);
  send_reply(identity, ack, nullptr);
}

void Server::send_reply(zmq::message_t& identity, wire::Header& reply, zmq::message_t* payload) {
  reply.set_token(options_.token);
  reply.set_shard(options_.shard);
  if (options_.nic) {
    const size_t bytes = reply.ByteSizeLong() + sizeof(double) + (payload ? payload->size() : 0);
    reply.set_sent_at(options_.nic->depart(bytes, now_seconds()));
  }
  const std::string head = encode_header(reply);
  zmq::message_t id;
  id.copy(identity);
  socket_.send(id, zmq::send_flags::sndmore);
  socket_.send(zmq::buffer(head), payload ? zmq::send_flags::sndmore : zmq::send_flags::none);
  if (payload) socket_.send(*payload, zmq::send_flags::none);
  counters_.messages_out.fetch_add(1, std::memory_order_relaxed);
  counters_.header_out.fetch_add(static_cast<int64_t>(head.size()), std::memory_order_relaxed);
}

void Server::send_error(zmq::message_t& identity, const wire::Header* request, wire::Status status,
                        const std::string& text) {
  counters_.rejected[static_cast<size_t>(status) % counters_.rejected.size()].fetch_add(
      1, std::memory_order_relaxed);
  PSAR_LOG(kDebug, "ps", name() << ": rejected a request: " << status_name(status) << ": " << text);
  wire::Header reply;
  reply.set_type(wire::MSG_ERROR);
  reply.set_status(status);
  reply.set_error(text);
  if (request) {
    reply.set_worker(request->worker());
    reply.set_clock(request->clock());
  }
  // Echo the sender's token, never ours: a foreign sender learns nothing.
  reply.set_token(request ? request->token() : 0);
  reply.set_shard(options_.shard);
  reply.set_version(applied());
  const std::string head = encode_header(reply);
  zmq::message_t id;
  id.copy(identity);
  socket_.send(id, zmq::send_flags::sndmore);
  socket_.send(zmq::buffer(head), zmq::send_flags::none);
  counters_.messages_out.fetch_add(1, std::memory_order_relaxed);
}

void Server::fail_timeout(double idle_s) {
  if (!failure_.empty()) {  // the cause, not the silence that followed it
    socket_.set(zmq::sockopt::linger, kCloseLingerMs);
    throw CommError(name() + ": " + failure_);
  }
  std::string text = name() + ": no request for " + std::to_string(idle_s) + " s (ps.timeout " +
                     std::to_string(options_.timeout_s) + " s); ";
  // The chunk furthest behind names the workers everyone waits for.
  const ShardState* oldest = chunks_.front().get();
  for (const auto& c : chunks_)
    if (c->applied() < oldest->applied()) oldest = c.get();
  const std::vector<int> waiting = oldest->waiting_for();
  if (options_.continue_on_failure && !waiting.empty()) {
    // Drop the silent workers everywhere; the survivors' clocks go on.
    PSAR_LOG(kWarn, "ps", name() << ": no request for " << idle_s << " s; dropping worker(s) "
                                 << list(waiting) << " at clock " << oldest->applied()
                                 << " (ps.on_worker_failure: continue)");
    for (size_t c = 0; c < chunks_.size(); ++c) {
      bool changed = false;
      for (const int w : waiting)
        if (!chunks_[c]->has_left(w)) changed = chunks_[c]->fail(w) || changed;
      if (changed) snapshot_if_due(static_cast<int>(c));
    }
    answer_parked();
    return;
  }
  if (!parked_.empty())
    text += "clock " + std::to_string(oldest->applied()) + " waits for the pushes of worker(s) " +
            list(waiting);
  else
    text += "worker(s) " + list(waiting) + " still active but silent";
  for (auto& p : parked_) send_error(p.identity, &p.request, wire::STATUS_TIMEOUT, text);
  parked_.clear();
  socket_.set(zmq::sockopt::linger, kCloseLingerMs);  // let those errors leave
  throw TimeoutError(text);
}

PsCounters Server::counters() const {
  PsCounters c;
  c.payload_bytes_in = counters_.payload_in.load();
  c.payload_bytes_out = counters_.payload_out.load();
  c.header_bytes_in = counters_.header_in.load();
  c.header_bytes_out = counters_.header_out.load();
  c.messages_in = counters_.messages_in.load();
  c.messages_out = counters_.messages_out.load();
  for (const auto& r : counters_.rejected) c.rejected += r.load();
  c.refused = guard_ ? guard_->refused() : 0;
  return c;
}

int64_t Server::rejected(wire::Status status) const {
  return counters_.rejected[static_cast<size_t>(status) % counters_.rejected.size()].load();
}

std::vector<float> Server::params() const {
  std::vector<float> all;
  for (const auto& c : chunks_) {
    const auto view = c->params().view();
    all.insert(all.end(), view.begin(), view.end());
  }
  return all;
}

int64_t Server::applied() const {
  int64_t least = chunks_.front()->applied();
  for (const auto& c : chunks_) least = std::min(least, c->applied());
  return least;
}

int64_t Server::param_copies() const {
  int64_t n = 0;
  for (const auto& c : chunks_) n += c->params().copies();
  return n;
}

// ---- ServerThread ---------------------------------------------------------------------

ServerThread::ServerThread(std::unique_ptr<Server> server) : server_(std::move(server)) {
  thread_ = std::thread([this] {
    try {
      server_->run();
    } catch (...) {
      error_ = std::current_exception();
      failed_.store(true);
    }
    finished_.store(true);
  });
}

ServerThread::~ServerThread() {
  if (thread_.joinable()) {
    server_->stop();
    thread_.join();
  }
}

void ServerThread::check() {
  if (failed_.load()) {
    if (thread_.joinable()) thread_.join();
    std::rethrow_exception(error_);
  }
}

void ServerThread::join() {
  if (thread_.joinable()) thread_.join();
  if (error_) std::rethrow_exception(error_);
}

}  // namespace psar::ps
