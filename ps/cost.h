#pragma once
// The α-β form of one parameter-server push_pull (docs/theory.md, "The
// parameter server's α-β form"): N workers push n bytes each and pull them
// back through S shards, every NIC at β seconds per byte each way (full
// duplex), α per message. The chunks stream pipelined (ps/sharding.h,
// send_order), so the step is bound by the busiest NIC in one direction —
// a shard's N·n/S or a worker NIC's K·n (K workers sharing it) — plus the
// pipeline fill, the last chunk's replies: max(N, S)·c for chunks of c
// bytes, and two latencies (the last push in, the last reply out):
//
//   T = 2α + (max(N·n_s, K·n) + max(N, S)·c)·β
//
// with n_s the largest shard's bytes and c = min(chunk, n_s) the job's chunk
// (plan_shards and plan_chunk_floats: the sizes a job would use).

#include <cstdint>

namespace psar::ps {

struct PsCost {
  double alpha = 0;          // coefficient of α
  double beta = 0;           // coefficient of β (bytes through the critical NIC)
  int64_t chunk_bytes = 0;   // the job's chunk
  int64_t shard_bytes = 0;   // the largest shard
  int64_t sent_total = 0;    // payload bytes sent by workers and shards: 2·N·n
  int64_t sent_busiest = 0;  // by the busiest endpoint: max(n, N·n_s)
  double time(double a, double b) const { return alpha * a + beta * b; }
};

// One push_pull of `bytes` (float32, a multiple of 4) by `workers` workers
// over `servers` shards with ps.chunk_bytes and ps.shard_chunks as given;
// `workers_per_nic` workers share one NIC (a host of the virtual cluster).
// Throws ConfigError for bad counts.
PsCost ps_cost(int workers, int servers, int64_t bytes, int64_t chunk_bytes, int64_t shard_chunks,
               int workers_per_nic = 1);

}  // namespace psar::ps
