#pragma once
// A collective as a program: for every rank, the ordered steps it takes on
// slices of its vector — send a slice to a peer, receive one from a peer
// (overwriting the slice, or adding into it), copy or add a slice locally —
// each tagged with the round (the algorithm's step k) it belongs to. Each
// algorithm's file emits its program for (ranks, count, segment, element
// type); three consumers read the same program and nothing else:
//   - the engine (allreduce/engine.h) runs it over any Comm, cutting steps
//     into segments and pipelining them (the one place that does);
//   - the byte counters and cost checks count its steps (sent_bytes(), the
//     tests of tests/allreduce/programs_test.cc);
//   - the cluster simulator (sim/collective.h) times its rounds.
//
// Semantics (what the engine guarantees and the simulator assumes): a send of
// round k reads the slice as it is after every step of rounds < k on that
// rank that writes it, and before any step of round ≥ k writes it; the
// receives and local steps of one rank apply in the rank's order. So two
// ranks may swap a slice in one round (butterfly). Messages between two ranks
// match in order: the i-th send from a to b is the i-th receive at b from a,
// with the same count and round (validate() checks).
//
// Addresses are in elements: [0, count) is the caller's vector, [count,
// count + workspace) scratch the engine provides (a program that gathers
// before it adds, as naive does). Steps of zero elements are dropped.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "allreduce/element_type.h"

namespace psar {

enum class StepKind : uint8_t {
  kSend,        // send [offset, offset+count) to peer
  kRecv,        // receive into [offset, offset+count) from peer (overwrite)
  kRecvReduce,  // receive from peer and add into [offset, offset+count)
  kCopy,        // [offset, offset+count) = [source, source+count)
  kAdd,         // [offset, offset+count) += [source, source+count)
};

struct Step {
  StepKind kind = StepKind::kSend;
  int round = 0;
  int peer = -1;        // kSend, kRecv, kRecvReduce
  int64_t offset = 0;   // the slice sent, or written
  int64_t count = 0;
  int64_t source = 0;   // kCopy, kAdd: the slice read
  bool sends() const { return kind == StepKind::kSend; }
  bool receives() const { return kind == StepKind::kRecv || kind == StepKind::kRecvReduce; }
  bool reduces() const { return kind == StepKind::kRecvReduce || kind == StepKind::kAdd; }
};

// One message of a program, as the simulator sees it: the i-th send from src
// to dst matched with the i-th receive at dst from src.
struct Transfer {
  int src = 0, dst = 0;
  int64_t count = 0;  // elements
  bool reduce = false;
};

struct Program {
  std::string name;
  int ranks = 1;
  int64_t count = 0;      // elements of the caller's vector
  int64_t workspace = 0;  // elements of engine scratch after it
  // Steps of up to this many bytes travel as eager pieces
  // (allreduce/eager.h); 0: whole or in segments only.
  int64_t eager_up_to = 0;
  // Larger steps travel in segments of the segment size (true), or whole
  // (false: the pairwise exchanges on one host, where one rendezvous of the
  // whole vector measured cheaper than many of its segments; across hosts
  // they segment too, docs/algorithms.md, "Segments").
  bool segmented = true;
  // Sends posted no more than Engine::kLead rounds ahead of the rank's next
  // receive or local step, not as soon as their data is ready: across hosts
  // the tree's leaves, whose sends need nothing they receive, would otherwise
  // flood their parents' links, and TCP gives a flooding flow the share that
  // the sums coming back down need (docs/algorithms.md, "Pacing").
  bool paced = false;
  std::vector<std::vector<Step>> steps;  // [rank], in order (rounds ascending after finish())

  Program() = default;
  Program(std::string name, int ranks, int64_t count);

  // A message: a send at src and the matching receive at dst (same offset
  // unless dst_offset is given).
  void transfer(int round, int src, int dst, int64_t offset, int64_t count, bool reduce);
  void transfer(int round, int src, int64_t src_offset, int dst, int64_t dst_offset,
                int64_t count, bool reduce);
  // A local copy or add on `rank`.
  void local(int rank, int round, StepKind kind, int64_t offset, int64_t source, int64_t count);
  // Appends `part` (a program on part.ranks ranks) as ranks rank_of(0..), its
  // slices shifted by `shift`, its rounds by `first_round`. Returns the
  // rounds it took.
  int append(const Program& part, const std::function<int(int)>& rank_of, int64_t shift,
             int first_round);
  // Orders every rank's steps by round (stable). Generators call it last.
  void finish();

  int rounds() const;
  // Per rank, over the whole program.
  int64_t sent_elements(int rank) const;
  int64_t received_elements(int rank) const;
  int64_t reduced_elements(int rank) const;  // added, by receives and local adds
  int64_t messages(int rank) const;
  int64_t sent_bytes(int rank, ElementType t = ElementType::kFp32) const {
    return sent_elements(rank) * element_size(t);
  }
  // Over all ranks.
  int64_t sent_elements_total() const;
  // The messages of every round, matched: [round] -> transfers. Throws Error
  // (PSAR_CHECK) if a send has no matching receive.
  std::vector<std::vector<Transfer>> transfers() const;
  // Elements each rank adds in each round: [round][rank].
  std::vector<std::vector<int64_t>> reduced_per_round() const;
  // Every send matched by a receive of the same count and round, every slice
  // inside [0, count + workspace), rounds ascending per rank. Throws Error
  // (PSAR_CHECK) naming the first violation.
  void validate() const;
};

// What an algorithm's program depends on.
struct ProgramShape {
  int ranks = 1;
  int64_t count = 0;                  // elements
  int64_t segment_bytes = 512 * 1024;  // pipelining granularity (docs/algorithms.md, "Segments")
  ElementType dtype = ElementType::kFp32;
  int root = 0;             // broadcast, reduce
  std::vector<int> node;    // [rank] -> node; empty: one node (hierarchical)
  // Reduce-scatter, all-gather: the pieces rank r owns, as ranks+1 ascending
  // boundaries from 0 to count (piece r = [split[r], split[r+1]), any may be
  // empty); empty: Partition{count, ranks}. A sharded optimizer passes the
  // part of its flat shard layout that falls in one bucket.
  std::vector<int64_t> split;

  int64_t piece_offset(int r) const;
  int64_t piece_size(int r) const;

  // The segments `elements` elements are cut into: ⌈elements·4 / segment_bytes⌉
  // (float32 bytes: the same pieces for every element type), at least 1.
  int64_t segments(int64_t elements) const;
  // Whether the ranks are on more than one node (node known and not all one).
  bool spans_nodes() const;
  bool operator==(const ProgramShape&) const = default;
};

using ProgramFn = Program (*)(const ProgramShape&);

}  // namespace psar
