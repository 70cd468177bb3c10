#pragma once
// DLRM-style recommendation model (`model.type: dlrm`, docs/sparse.md):
// one embedding table per categorical feature, emb{t}.weight [rows_t, dim]
// (model.tables, model.embedding_dim), looked up by the sample's id of that
// table; the F dense features and the T looked-up rows, concatenated
// [b, F + T·dim], feed the MLP classifier of mlp.h (model.hidden,
// model.activation) unchanged. The tables come first in the arena, so they
// are one contiguous range [0, Σ rows_t·dim) that the sparse parameter
// server (docs/sparse.md) treats row by row.
//
// A batch touches only the rows its ids name: every other row's gradient is
// exactly zero. touched_rows() lists them (sorted, unique) per table.
// Serial only: parallel.pp = parallel.tp = 1, one micro-batch, the CPU.

#include <memory>
#include <vector>

#include "workloads/mlp.h"
#include "workloads/model.h"

namespace psar {

struct DlrmOptions {
  std::vector<int64_t> tables = {1000, 1000};  // rows per table
  int64_t dim = 16;
  MlpOptions mlp;  // inputs: the dense features (the table rows are added)
};

class Dlrm final : public Model {
 public:
  Dlrm(DlrmOptions options, const ModelContext& context);
  ~Dlrm() override;

  std::string name() const override { return "dlrm"; }
  void declare(ParamStore& store, int chunk) override;
  void bind(ParamStore& store) override;
  void set_batch(const Batch& batch) override;
  double batch_loss() const override { return mlp_->batch_loss(); }

  int64_t boundary_numel(int) const override { return 0; }
  std::unique_ptr<pp::Activations> make_activations(int chunk) const override;
  void forward(int chunk, int microbatch, pp::Activations& a, std::span<const float> x,
               std::span<float> y) override;
  void backward_input(int chunk, int microbatch, pp::Activations& a, std::span<const float> dy,
                      std::span<float> dx) override;
  void backward_weight(int chunk, int microbatch, pp::Activations& a) override;
  int64_t activation_bytes(int chunk) const override;

  bool evaluates() const override { return true; }
  int64_t eval_numel(int, int64_t) const override { return 0; }
  EvalStats eval_forward(int chunk, const Batch& batch, std::span<const float> x,
                         std::span<float> y) override;

  std::vector<SparseTable> sparse_tables() const override;
  std::span<const int64_t> touched_rows(int table) const override;

 private:
  struct Stash;
  // [rows, F + T·dim]: dense features then each table's row.
  void join(const Batch& batch, Batch& out) const;

  DlrmOptions o_;
  std::unique_ptr<Mlp> mlp_;
  std::vector<int> params_;  // emb{t}.weight indices
  ParamStore* store_ = nullptr;
  const Batch* batch_ = nullptr;
  Batch joined_, eval_joined_;
  std::vector<std::vector<int64_t>> touched_;
};

std::unique_ptr<Model> make_dlrm(const WorkloadOptions& options, const Dataset& data,
                                 const ModelContext& context);
int dlrm_layers(const WorkloadOptions& options, const Dataset& data);

}  // namespace psar
