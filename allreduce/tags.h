#pragma once
// Message tags of the collectives in allreduce/, one per kind, so that a
// message left over from a failed collective can never be matched by a
// different one. All sit below Comm::kReservedTagBase (the control plane's).

namespace psar::allreduce_tags {

inline constexpr int kAllreduce = 0x1000;  // every allreduce program
inline constexpr int kReduceScatter = 0x1200;
inline constexpr int kAllGather = 0x1300;
inline constexpr int kBroadcast = 0x1400;
inline constexpr int kReduce = 0x1500;

}  // namespace psar::allreduce_tags
