#pragma once
// Checkpoints: everything a run needs to continue bitwise identically to a
// run that was never interrupted (docs/checkpoints.md).
//
// Layout: RUN_DIR/checkpoints/step_<k>/ (k zero-padded to 8 digits) holds
//   rank_<r>.ckpt   one per worker rank r (of the workers' communicator): its
//                   slice of the parameters (the whole model with data
//                   parallelism alone; its stage's TP shard in 2D/3D), the
//                   optimizer state it keeps, the step, the epoch and the
//                   position in the epoch's order, the model's RNG counter
//   shard_<s>.ckpt  one per parameter-server shard (--sync ps), written by
//                   the shard itself when it has applied step k: its
//                   parameters and its optimizer's state
//   MANIFEST        written last, by worker rank 0, once every other file is
//                   in place: step, epoch, world size, grid, backend, psar
//                   version and the resolved configuration. A directory
//                   without MANIFEST is incomplete and never read.
// Every file is written atomically and fsynced (core/csv.h). The latest two
// complete checkpoints are kept.
//
// File format: a text header, then the raw floats, then a checksum —
//   psar-checkpoint 1\n
//   field <key> <bytes>\n<value>\n    (any number, in order)
//   blob <name> <floats>\n            (any number, in order)
//   data\n
//   <the blobs' floats, little-endian IEEE binary32, in the order listed>
//   <8 bytes: FNV-1a 64 of everything before, little-endian>

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/config.h"

namespace psar {

class CheckpointFile {
 public:
  void set(const std::string& key, const std::string& value);
  void set_int(const std::string& key, int64_t value) { set(key, std::to_string(value)); }
  void add_blob(const std::string& name, std::span<const float> values);

  bool has(const std::string& key) const;
  // DataError naming the file and the key when it is missing or malformed.
  const std::string& get(const std::string& key) const;
  int64_t get_int(const std::string& key) const;
  std::span<const float> blob(const std::string& name) const;
  bool has_blob(const std::string& name) const;
  const std::string& origin() const { return origin_; }

  std::string encode() const;
  // DataError naming `origin` for a truncated, corrupt or foreign file.
  static CheckpointFile decode(const std::string& bytes, const std::string& origin);
  size_t write(const std::string& path) const;  // atomically, fsynced; returns the bytes
  static CheckpointFile read(const std::string& path);

 private:
  std::string origin_ = "<checkpoint>";
  std::vector<std::pair<std::string, std::string>> fields_;
  std::vector<std::pair<std::string, std::vector<float>>> blobs_;
};

std::string checkpoint_dir(const std::string& run_dir, int64_t step);
std::string rank_checkpoint_path(const std::string& dir, int rank);
std::string shard_checkpoint_path(const std::string& dir, int shard);
std::string manifest_path(const std::string& dir);

// The step of the latest complete checkpoint under run_dir, or -1 if none.
int64_t latest_checkpoint(const std::string& run_dir);
// Removes every checkpoint directory older than the newest `keep` complete ones.
void prune_checkpoints(const std::string& run_dir, int keep);

// Keys that may differ between a checkpoint and the run resuming it: how
// long the run is and where it stops early, how often it logs, evaluates
// and checkpoints, where a
// server binds, the deadlines, harness-only keys. (A different length is
// refused anyway when the learning-rate schedule depends on it.)
bool resume_may_differ(const std::string& key);

// The configuration as a run records it, taken once from the resolved
// Config at the start of the run: its text (config.yaml and every MANIFEST
// hold it), every key's resolved value (what a resume and the start-up
// agreement compare, trainer/agreement.h) and the digest of those values
// (FNV-1a 64: what the ranks exchange first). After the start nothing reads
// the Config: each subsystem holds its typed options (trainer/loop_options.h).
struct ConfigRecord {
  std::string text;
  std::map<std::string, std::string> values;  // key -> resolved value (Config::flat)
  uint64_t digest = 0;
  const Schema* schema = nullptr;  // reads another record's text

  static ConfigRecord of(const Config& config);
  // `text` (a MANIFEST's configuration) read with this record's schema;
  // ConfigError naming `origin` when it does not load.
  ConfigRecord read(const std::string& text, const std::string& origin) const;
  // "key\tvalue\n" per key, in key order: what the digest is of.
  std::string values_text() const;
};

// The identity of a job, as recorded in MANIFEST and checked on resume.
struct JobIdentity {
  int world_size = 0;
  int workers = 0;  // ranks that train
  int pp = 1, tp = 1, dp = 1;
  std::string order;  // parallel.order
  std::string sync;   // sync.backend
  int64_t total_steps = 0;
  std::string psar_version;
  std::string lr_schedule = "constant";  // optimizer.schedule: any other spans total_steps
  int zero = 0;                          // sync.zero: > 0 shards the optimizer state
};
CheckpointFile make_manifest(int64_t step, const ConfigRecord& config, const JobIdentity& job);
// Throws ConfigError naming what differs (each differing config key with
// both values, the world size, the grid) when `manifest` was not written by
// this job; `where` names the checkpoint for the message. A data-parallel
// size that differs alone is no difference where dp_resize allows it.
void check_resumable(const CheckpointFile& manifest, const ConfigRecord& config,
                     const JobIdentity& job, const std::string& where);

// Resharding (a resume onto another data-parallel size): a flat state that
// old ranks held as pieces — piece q = [old_bounds[q], old_bounds[q+1]),
// read by old_piece(q) — cut anew: floats [begin, end) of the state, copied
// from the old pieces that overlap it (each read once, the others not at
// all). Any layout: a sharded optimizer's Partition pieces, a parameter
// server's key ranges. DataError when a piece holds the wrong count or the
// pieces do not cover the range.
std::vector<float> reshard_range(const std::vector<int64_t>& old_bounds, int64_t begin,
                                 int64_t end,
                                 const std::function<std::vector<float>(int)>& old_piece);

// Elastic resume: a checkpoint written by d = N data-parallel replicas,
// resumed by a job with d = M and the same pipeline and tensor degrees
// (docs/checkpoints.md). Every (stage, tensor rank) cell's replicas hold the
// same parameters, so each new rank restores its cell's replica 0 — with the
// optimizer state replicated (allreduce backends) or on the PS shards (the
// same shards: dedicated ranks, so the world differs by N − M too). Where
// the optimizer state is sharded over the replicas (sync.zero > 0),
// `reshard` is set and each new rank cuts its piece anew from its cell's N
// old pieces (reshard_range). The global batch is kept (train.batch_size is
// the same key), so each of the M replicas takes batch/M rows of the data
// position the checkpoint recorded. Throws ConfigError saying why a resize
// is refused (other p or t, another backend or server count).
struct DpResize {
  bool resized = false;  // the checkpoint's d differs from the job's
  bool reshard = false;  // resized, with a sharded optimizer state (sync.zero > 0)
  int old_dp = 0;        // the checkpoint's d (where resized)
};
DpResize dp_resize(const CheckpointFile& manifest, const JobIdentity& job);

// "optimizer.lr = 0.05 in A, 0.1 in B; ..." for the keys whose values differ
// (ignoring those for which `skip(key)` is true); "" when none.
std::string config_differences(const std::map<std::string, std::string>& a,
                               const std::map<std::string, std::string>& b,
                               const std::string& a_name, const std::string& b_name,
                               bool (*skip)(const std::string&) = nullptr);

// The psar version the build was configured with (CMake's project version).
const char* psar_version();

}  // namespace psar
