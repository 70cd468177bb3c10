#include "workloads/workload_options.h"

#include "core/errors.h"

namespace psar {

WorkloadOptions workload_options(const Config& c) {
  WorkloadOptions o;
  o.type = c.get_string("model.type");
  o.seed = static_cast<uint64_t>(c.get_int("train.seed"));
  o.hidden = c.get_int_list("model.hidden");
  o.gelu = c.get_string("model.activation") == "gelu";

  GptOptions& g = o.gpt;
  g.vocab = c.get_int("model.vocab");
  g.seq_len = c.get_int("model.seq_len");
  g.layers = c.get_int("model.layers");
  g.d_model = c.get_int("model.d_model");
  g.heads = c.get_int("model.heads");
  g.dropout = static_cast<float>(c.get_float("model.dropout"));
  g.init_std = static_cast<float>(c.get_float("model.init_std"));
  g.split = parse_mlp_split(c.get_string("parallel.tp_split"));
  g.seed = o.seed;
  g.sequence_parallel = c.get_bool("parallel.sequence_parallel");
  g.recompute = parse_recompute(c.get_string("train.recompute"));

  CnnOptions& n = o.cnn;
  o.image = c.get_int_list("model.image");
  n.conv = c.get_int_list("model.conv");
  n.kernel = c.get_int("model.kernel");
  n.stride = c.get_int("model.stride");
  n.padding = c.get_int("model.padding");
  n.pool = c.get_int("model.pool");
  n.hidden = o.hidden;
  n.hybrid = c.get_bool("parallel.hybrid");
  n.fc_replicated = c.get_string("parallel.hybrid_fc") == "replicated";
  n.seed = o.seed;

  o.tables = c.get_int_list("model.tables");
  o.embedding_dim = c.get_int("model.embedding_dim");

  SyntheticStagesOptions& s = o.synthetic;
  s.layers = static_cast<int>(c.get_int("model.layers"));
  s.forward_s = c.get_duration("model.forward_time");
  s.backward_s = c.get_duration("model.backward_time");
  s.weight_grad_s = c.get_duration("model.weight_grad_time");
  s.activation_bytes = c.get_bytes("model.activation_bytes");

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
