#include "modelpar/pp/p2p.h"

#include "comm/comm.h"
#include "core/errors.h"

namespace psar::pp {

namespace {

Transfer make_transfer(const Schedule& s, Payload payload, int microbatch, int from_vstage,
                       int to_vstage) {
  Transfer t;
  t.payload = payload;
  t.microbatch = microbatch;
  t.from_vstage = from_vstage;
  t.to_vstage = to_vstage;
  t.from_stage = s.stage_of(from_vstage);
  t.to_stage = s.stage_of(to_vstage);
  t.tag = transfer_tag(s, payload, microbatch, from_vstage);
  return t;
}

}  // namespace

int transfer_tag(const Schedule& s, Payload payload, int microbatch, int from_vstage) {
  // Generators bound p·v·m (registry.cc); the control plane owns the top tags.
  const long long tag = (static_cast<long long>(from_vstage) * s.microbatches + microbatch) * 2 +
                        (payload == Payload::kGradient ? 1 : 0);
  if (tag >= Comm::kReservedTagBase)
    throw ConfigError(psar::detail::concat(
        describe(s), ": too many virtual stages × micro-batches (", s.virtual_stages(), " × ",
        s.microbatches, ") for unique message tags"));
  return static_cast<int>(tag);
}

std::optional<Transfer> input_of(const Schedule& s, int stage, const Action& a) {
  const int u = s.virtual_stage(stage, a.chunk);
  switch (a.op) {
    case Op::kForward:
      if (u == 0) return std::nullopt;  // reads the micro-batch
      return make_transfer(s, Payload::kActivation, a.microbatch, u - 1, u);
    case Op::kBackward:
    case Op::kBackwardInput:
      if (u == s.virtual_stages() - 1) return std::nullopt;  // starts from its own loss
      return make_transfer(s, Payload::kGradient, a.microbatch, u + 1, u);
    case Op::kBackwardWeight:
      return std::nullopt;
  }
  return std::nullopt;
}

std::optional<Transfer> output_of(const Schedule& s, int stage, const Action& a) {
  const int u = s.virtual_stage(stage, a.chunk);
  switch (a.op) {
    case Op::kForward:
      if (u == s.virtual_stages() - 1) return std::nullopt;  // feeds its own loss
      return make_transfer(s, Payload::kActivation, a.microbatch, u, u + 1);
    case Op::kBackward:
    case Op::kBackwardInput:
      if (u == 0) return std::nullopt;  // nothing upstream of the first layer
      return make_transfer(s, Payload::kGradient, a.microbatch, u, u - 1);
    case Op::kBackwardWeight:
      return std::nullopt;
  }
  return std::nullopt;
}

std::vector<std::vector<Step>> lower(const Schedule& s) {
  std::vector<std::vector<Step>> program(s.actions.size());
  for (size_t stage = 0; stage < s.actions.size(); ++stage)
    for (const Action& a : s.actions[stage])
      program[stage].push_back(
          {a, input_of(s, static_cast<int>(stage), a), output_of(s, static_cast<int>(stage), a)});
  return program;
}

const char* payload_name(Payload payload) {
  return payload == Payload::kActivation ? "activation" : "gradient";
}

std::string describe(const Transfer& t) {
  return psar::detail::concat(payload_name(t.payload), " of micro-batch ", t.microbatch,
                              " from virtual stage ", t.from_vstage, " (stage ", t.from_stage, ")");
}

}  // namespace psar::pp
