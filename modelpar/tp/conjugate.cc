#include "modelpar/tp/conjugate.h"

#include <algorithm>

namespace psar {

void f_backward(TpGroup& tp, std::span<float> dx) {
  tp.counters.f_backward += 1;
  tp.allreduce(dx);
}

void g_forward(TpGroup& tp, std::span<float> y) {
  tp.counters.g_forward += 1;
  tp.allreduce(y);
}

void take_columns(float* local, const float* full, int64_t N, int64_t C, int rank, int t) {
  const int64_t c = C / t;
  for (int64_t i = 0; i < N; ++i) std::copy_n(full + i * C + rank * c, c, local + i * c);
}

void gather_columns(TpGroup& tp, float* full, const float* local, int64_t N, int64_t C,
                    std::vector<float>& scratch) {
  const int t = tp.size();
  const int64_t c = C / t;
  if (t == 1) {
    std::copy_n(local, N * C, full);
    return;
  }
  // scratch: [t, N, C/t], piece r from rank r; then transposed into [N, C].
  scratch.resize(static_cast<size_t>(N * C));
  std::copy_n(local, N * c, scratch.data() + tp.rank() * N * c);
  tp.all_gather(scratch);
  for (int r = 0; r < t; ++r)
    for (int64_t i = 0; i < N; ++i)
      std::copy_n(scratch.data() + (r * N + i) * c, c, full + i * C + r * c);
}

void gather_rows(TpGroup& tp, float* full, const float* piece, int64_t N, int64_t C) {
  const int64_t n = N / tp.size() * C;
  std::copy_n(piece, n, full + tp.rank() * n);
  tp.all_gather({full, static_cast<size_t>(N * C)});
}

void reduce_scatter_rows(TpGroup& tp, float* piece, float* full, int64_t N, int64_t C) {
  const int64_t n = N / tp.size() * C;
  tp.reduce_scatter({full, static_cast<size_t>(N * C)});
  std::copy_n(full + tp.rank() * n, n, piece);
}

}  // namespace psar
