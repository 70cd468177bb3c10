#include "workloads/workload_options.h"

#include "core/errors.h"

namespace psar {

WorkloadOptions workload_options(const Config& c) {
  WorkloadOptions o;
  o.type = c.get_string("model.type");
  o.seed = static_cast<uint64_t>(c.get_int("train.seed"));
  o.hidden = c.get_int_list("model.hidden");
  o.gelu = c.get_string("model.activation") == "gelu";
  o.layers = c.get_int("model.layers");
  o.d_model = c.get_int("model.d_model");
  o.heads = c.get_int("model.heads");
  o.seq_len = c.get_int("model.seq_len");
  o.vocab = c.get_int("model.vocab");
  o.dropout = static_cast<float>(c.get_float("model.dropout"));
  o.init_std = static_cast<float>(c.get_float("model.init_std"));
  o.split = parse_mlp_split(c.get_string("parallel.tp_split"));
  o.sequence_parallel = c.get_bool("parallel.sequence_parallel");
  o.recompute = parse_recompute(c.get_string("train.recompute"));
  o.image = c.get_int_list("model.image");
  o.conv = c.get_int_list("model.conv");
  o.kernel = c.get_int("model.kernel");
  o.stride = c.get_int("model.stride");
  o.padding = c.get_int("model.padding");
  o.pool = c.get_int("model.pool");
  o.hybrid = c.get_bool("parallel.hybrid");
  o.fc_replicated = c.get_string("parallel.hybrid_fc") == "replicated";
  o.tables = c.get_int_list("model.tables");
  o.embedding_dim = c.get_int("model.embedding_dim");
  o.forward_s = c.get_duration("model.forward_time");
  o.backward_s = c.get_duration("model.backward_time");
  o.weight_grad_s = c.get_duration("model.weight_grad_time");
  o.activation_bytes = c.get_bytes("model.activation_bytes");

  DataOptions& d = o.data;
  d.dataset = c.get_string("data.dataset");
  d.path = c.get_string("data.path");
  d.synthetic_samples = c.get_int("data.synthetic_samples");
  d.synthetic_features = c.get_int("data.synthetic_features");
  d.synthetic_classes = c.get_int("data.synthetic_classes");
  d.train_limit = c.get_int("data.train_limit");
  d.test_limit = c.get_int("data.test_limit");
  d.zipf_ids = c.get_int_list("data.zipf_ids");
  d.zipf_skew = c.get_float("data.zipf_skew");
  return o;
}

}  // namespace psar
