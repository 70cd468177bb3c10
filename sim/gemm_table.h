#pragma once
// A GPU model's measured GEMM rate by shape (`cluster.gpu.gemm_table`,
// docs/simulate.md, "A GPU model's measured GEMM table"): cuBLAS GEMMs timed on one card, one CSV
// row per timed shape,
//   gpu,dtype,layout,batch,m,n,k,ms,tflops
// — `batch` products of an [m, k] by a [k, n] matrix in `layout` (NN: the
// forward's A·B, NT: the input gradient's A·Bᵀ, TN: the weight gradient's
// Aᵀ·B), their median time in ms. The rate of a row is its FLOPs over its
// time, 2·batch·m·n·k / (ms·1e-3); `tflops` is read only to check that it
// says the same (within 1 %).
//
// A query (layout, batch, m, n, k) is answered from the rows of its layout
// (a batched query of a layout with no batched rows: from NN's, as the
// attention GEMMs may be timed in NN alone) by interpolating log(rate)
// linearly in log(batch), then log(m), log(n), log(k), axis by axis: among
// the rows of the two measured batch counts either side of the query (one
// when it equals one or lies beyond the last), the two measured m either
// side, and so on down to k, each 1-dimensional step over the points
// present below it; beyond the measured range of an axis the nearest
// measured value holds (no extrapolation). Where a table holds a full grid
// and, beside it, a few shapes of real layers (sizes the grid lacks, each
// with few partners on the later axes), the neighbours on an axis are the
// nearest whose rows span the query on every later axis, so a lone shape
// does not pull a query at other sizes toward its edge value; a query at a
// measured shape returns it. On a full grid this is multilinear
// interpolation of log(rate) in the logs of the sizes: exact for any rate of the form
// C·batch^α·m^β·n^γ·k^δ (the small-GEMM regime, where time is flat) and
// for a rate that is constant (the large-GEMM regime). Wave quantization
// and the tile choice are in the measured rows and nowhere else: between
// two measured sizes the rate is their blend.

#include <cstdint>
#include <string>
#include <vector>

namespace psar::sim {

enum class GemmLayout { kNN, kNT, kTN };
const char* layout_name(GemmLayout layout);

class GemmTable {
 public:
  // From CSV text (a header line naming the columns above, in any order,
  // then one line per row); `origin` names it in errors. DataError naming
  // the line for a missing column, a field that is not a number, a size or
  // time that is not positive, an unknown layout, a gpu or dtype that
  // differs from the first row's, a tflops that disagrees with ms by more
  // than 1 %, the same shape twice, or a layout with no row.
  static GemmTable parse(const std::string& csv, const std::string& origin);

  // FLOP/s of `batch` [m, k]·[k, n] GEMMs in `layout`, interpolated as above.
  double flops_per_s(GemmLayout layout, double batch, int64_t m, int64_t n, int64_t k) const;

  const std::string& gpu() const { return gpu_; }
  const std::string& dtype() const { return dtype_; }
  size_t rows() const;

  struct Point {
    double batch, m, n, k;  // logs of the sizes
    double log_rate;
  };

 private:
  std::string gpu_, dtype_;
  std::vector<Point> points_[3];             // per layout, sorted by (batch, m, n, k)
  bool batched_[3] = {false, false, false};  // per layout: has rows of batch > 1
};

// The tables built into psar (sim/gemm/*.csv, named by their file stem);
// ConfigError naming `key` and the known names for any other name.
const GemmTable& builtin_gemm_table(const std::string& name, const std::string& key);
std::vector<std::string> builtin_gemm_table_names();

}  // namespace psar::sim
