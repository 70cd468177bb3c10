#pragma once
// The binary tree of tree reduce, tree broadcast and the tree allreduce: the
// heap layout over ranks relative to the root (v = (r - root) mod N): v's
// parent is (v-1)/2, its children 2v+1 and 2v+2, its depth ⌊log₂(v+1)⌋.

namespace psar {

struct HeapTree {
  int ranks = 1, root = 0;

  int relative(int r) const { return ((r - root) % ranks + ranks) % ranks; }
  int absolute(int v) const { return (v + root) % ranks; }
  int parent(int r) const { return absolute((relative(r) - 1) / 2); }  // r ≠ root
  // Child k (0, 1) of r, or -1.
  int child(int r, int k) const {
    const int c = 2 * relative(r) + 1 + k;
    return c < ranks ? absolute(c) : -1;
  }
  int depth(int r) const {
    int d = 0;
    for (int v = relative(r); v > 0; v = (v - 1) / 2) ++d;
    return d;
  }
  int deepest() const { return depth(absolute(ranks - 1)); }
};

}  // namespace psar
