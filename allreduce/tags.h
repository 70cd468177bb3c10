#pragma once
// Message tags of the collectives in allreduce/, one range per algorithm, so
// that a message left over from a failed collective can never be matched by a
// different one. All sit below Comm::kReservedTagBase (the control plane's).

namespace psar::allreduce_tags {

inline constexpr int kNaive = 0x1000;
inline constexpr int kRing = 0x1100;
inline constexpr int kReduceScatter = 0x1200;
inline constexpr int kAllGather = 0x1300;
inline constexpr int kTreeUp = 0x1400;
inline constexpr int kTreeDown = 0x1401;
inline constexpr int kButterfly = 0x1500;
inline constexpr int kHalvingDoubling = 0x1600;
inline constexpr int kFoldIn = 0x1700;  // non-power-of-two folding (butterfly, halving-doubling)
inline constexpr int kFoldOut = 0x1701;
inline constexpr int kHierarchical = 0x1800;  // its slice ring between nodes (or its flat ring)
inline constexpr int kSteps = 0x1900;  // run_steps: any algorithm's step list (allreduce/steps.h)

}  // namespace psar::allreduce_tags
