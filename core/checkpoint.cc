#include "core/checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/csv.h"
#include "core/errors.h"
#include "core/rng.h"

namespace psar {

namespace fs = std::filesystem;

namespace {

constexpr const char* kMagic = "psar-checkpoint 1\n";
constexpr const char* kStepPrefix = "step_";

uint64_t checksum(std::string_view bytes) { return fnv1a(bytes); }

[[noreturn]] void corrupt(const std::string& origin, const std::string& why) {
  throw DataError("checkpoint file '" + origin + "' is unreadable: " + why);
}

// step_<digits> → the step, or -1.
int64_t step_of(const fs::path& dir) {
  const std::string name = dir.filename().string();
  if (name.rfind(kStepPrefix, 0) != 0) return -1;
  const std::string digits = name.substr(std::strlen(kStepPrefix));
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), ::isdigit)) return -1;
  return std::stoll(digits);
}

// Steps of the complete checkpoints under run_dir, ascending.
std::vector<int64_t> complete_steps(const std::string& run_dir) {
  std::vector<int64_t> steps;
  std::error_code ec;
  const fs::path root = fs::path(run_dir) / "checkpoints";
  if (!fs::is_directory(root, ec)) return steps;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const int64_t s = step_of(e.path());
    if (s >= 0 && fs::exists(e.path() / "MANIFEST")) steps.push_back(s);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

}  // namespace

// ---- CheckpointFile -------------------------------------------------------------------

void CheckpointFile::set(const std::string& key, const std::string& value) {
  for (auto& [k, v] : fields_)
    if (k == key) {
      v = value;
      return;
    }
  fields_.emplace_back(key, value);
}

void CheckpointFile::add_blob(const std::string& name, std::span<const float> values) {
  PSAR_CHECK(!has_blob(name), "checkpoint blob '", name, "' added twice");
  blobs_.emplace_back(name, std::vector<float>(values.begin(), values.end()));
}

bool CheckpointFile::has(const std::string& key) const {
  return std::any_of(fields_.begin(), fields_.end(), [&](const auto& f) { return f.first == key; });
}

const std::string& CheckpointFile::get(const std::string& key) const {
  for (const auto& [k, v] : fields_)
    if (k == key) return v;
  throw DataError("checkpoint file '" + origin_ + "' has no field '" + key + "'");
}

int64_t CheckpointFile::get_int(const std::string& key) const {
  const std::string& v = get(key);
  try {
    size_t used = 0;
    const int64_t n = std::stoll(v, &used);
    if (used == v.size()) return n;
  } catch (const std::exception&) {
  }
  throw DataError("checkpoint file '" + origin_ + "': field '" + key + "' is not an integer: '" +
                  v + "'");
}

bool CheckpointFile::has_blob(const std::string& name) const {
  return std::any_of(blobs_.begin(), blobs_.end(), [&](const auto& b) { return b.first == name; });
}

std::span<const float> CheckpointFile::blob(const std::string& name) const {
  for (const auto& [n, values] : blobs_)
    if (n == name) return values;
  throw DataError("checkpoint file '" + origin_ + "' has no array '" + name + "'");
}

std::string CheckpointFile::encode() const {
  std::string out = kMagic;
  for (const auto& [k, v] : fields_) {
    PSAR_CHECK(k.find_first_of(" \n") == std::string::npos, "checkpoint key '", k, "'");
    out += "field " + k + " " + std::to_string(v.size()) + "\n" + v + "\n";
  }
  for (const auto& [n, values] : blobs_)
    out += "blob " + n + " " + std::to_string(values.size()) + "\n";
  out += "data\n";
  for (const auto& [n, values] : blobs_)
    out.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
  const uint64_t sum = checksum(out);
  out.append(reinterpret_cast<const char*>(&sum), sizeof sum);
  return out;
}

CheckpointFile CheckpointFile::decode(const std::string& bytes, const std::string& origin) {
  CheckpointFile f;
  f.origin_ = origin;
  const size_t magic = std::strlen(kMagic);
  if (bytes.compare(0, magic, kMagic) != 0) corrupt(origin, "not a psar checkpoint");
  if (bytes.size() < magic + sizeof(uint64_t)) corrupt(origin, "truncated");
  const size_t body = bytes.size() - sizeof(uint64_t);
  uint64_t sum = 0;
  std::memcpy(&sum, bytes.data() + body, sizeof sum);
  if (sum != checksum(std::string_view(bytes.data(), body)))
    corrupt(origin, "checksum mismatch (truncated or corrupted)");
  size_t pos = magic;
  auto line = [&]() {
    const size_t end = bytes.find('\n', pos);
    if (end == std::string::npos || end > body) corrupt(origin, "header ends early");
    std::string l = bytes.substr(pos, end - pos);
    pos = end + 1;
    return l;
  };
  std::vector<std::pair<std::string, size_t>> counts;
  for (;;) {
    std::istringstream in(line());
    std::string kind, name;
    size_t n = 0;
    in >> kind;
    if (kind == "data") break;
    if (!(in >> name >> n)) corrupt(origin, "malformed header line");
    if (kind == "field") {
      if (pos + n + 1 > body || bytes[pos + n] != '\n') corrupt(origin, "field '" + name + "'");
      f.fields_.emplace_back(name, bytes.substr(pos, n));
      pos += n + 1;
    } else if (kind == "blob") {
      counts.emplace_back(name, n);
    } else {
      corrupt(origin, "unknown header line '" + kind + "'");
    }
  }
  for (const auto& [name, n] : counts) {
    if (pos + n * sizeof(float) > body) corrupt(origin, "array '" + name + "' is truncated");
    std::vector<float> values(n);
    std::memcpy(values.data(), bytes.data() + pos, n * sizeof(float));
    pos += n * sizeof(float);
    f.blobs_.emplace_back(name, std::move(values));
  }
  if (pos != body) corrupt(origin, "trailing bytes");
  return f;
}

size_t CheckpointFile::write(const std::string& path) const {
  const std::string bytes = encode();
  write_file_atomic(path, bytes);
  return bytes.size();
}

CheckpointFile CheckpointFile::read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DataError("cannot open checkpoint file '" + path + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  return decode(ss.str(), path);
}

// ---- layout ---------------------------------------------------------------------------

std::string checkpoint_dir(const std::string& run_dir, int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "%s%08lld", kStepPrefix, static_cast<long long>(step));
  return run_dir + "/checkpoints/" + name;
}
std::string rank_checkpoint_path(const std::string& dir, int rank) {
  return dir + "/rank_" + std::to_string(rank) + ".ckpt";
}
std::string shard_checkpoint_path(const std::string& dir, int shard) {
  return dir + "/shard_" + std::to_string(shard) + ".ckpt";
}
std::string manifest_path(const std::string& dir) { return dir + "/MANIFEST"; }

int64_t latest_checkpoint(const std::string& run_dir) {
  const auto steps = complete_steps(run_dir);
  return steps.empty() ? -1 : steps.back();
}

void prune_checkpoints(const std::string& run_dir, int keep) {
  const auto steps = complete_steps(run_dir);
  if (static_cast<int>(steps.size()) <= keep) return;
  const int64_t oldest_kept = steps[steps.size() - static_cast<size_t>(keep)];
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fs::path(run_dir) / "checkpoints", ec)) {
    const int64_t s = step_of(e.path());
    if (s >= 0 && s < oldest_kept) fs::remove_all(e.path(), ec);
  }
}

// ---- identity ---------------------------------------------------------------------------

bool resume_may_differ(const std::string& key) {
  static const char* const kKeys[] = {"train.steps",
                                      "train.epochs",
                                      "train.log_every",
                                      "train.eval_every",
                                      "train.checkpoint_every",
                                      "train.exit_at_step",
                                      "train.exit_after",
                                      "train.trace",
                                      "sync.timeout",
                                      "ps.timeout",
                                      "ps.interface",
                                      "experiment.description",
                                      "experiment.sweep",
                                      "experiment.plot",
                                      "experiment.ranks",
                                      "hetero.kill_rank",
                                      "hetero.kill_step"};
  return std::any_of(std::begin(kKeys), std::end(kKeys), [&](const char* k) { return key == k; });
}

std::string config_differences(const std::map<std::string, std::string>& a,
                               const std::map<std::string, std::string>& b,
                               const std::string& a_name, const std::string& b_name,
                               bool (*skip)(const std::string&)) {
  std::string out;
  auto value = [](const std::map<std::string, std::string>& m, const std::string& k) {
    const auto it = m.find(k);
    return it == m.end() ? std::string("(unknown key)") : it->second;
  };
  std::vector<std::string> keys;
  for (const auto& [k, v] : a) keys.push_back(k);
  for (const auto& [k, v] : b)
    if (!a.count(k)) keys.push_back(k);
  for (const auto& k : keys) {
    if (skip && skip(k)) continue;
    const std::string va = value(a, k), vb = value(b, k);
    if (va == vb) continue;
    out +=
        (out.empty() ? "" : "; ") + k + " = " + va + " in " + a_name + ", " + vb + " in " + b_name;
  }
  return out;
}

const char* psar_version() { return PSAR_VERSION; }

ConfigRecord ConfigRecord::of(const Config& config) {
  ConfigRecord r;
  r.text = config.dump();
  r.values = config.flat();
  r.schema = &config.schema();
  r.digest = fnv1a(r.values_text());
  return r;
}

ConfigRecord ConfigRecord::read(const std::string& other, const std::string& origin) const {
  PSAR_CHECK(schema, "ConfigRecord::read before ConfigRecord::of");
  return of(Config::load_string(other, *schema, {}, origin));
}

std::string ConfigRecord::values_text() const {
  std::string out;
  for (const auto& [k, v] : values) out += k + "\t" + v + "\n";
  return out;
}

CheckpointFile make_manifest(int64_t step, const ConfigRecord& config, const JobIdentity& job) {
  CheckpointFile m;
  m.set_int("step", step);
  m.set_int("world_size", job.world_size);
  m.set_int("workers", job.workers);
  m.set("grid", std::to_string(job.pp) + " " + std::to_string(job.tp) + " " +
                    std::to_string(job.dp) + " " + job.order);
  m.set("sync", job.sync);
  m.set_int("total_steps", job.total_steps);
  m.set("psar_version", job.psar_version);
  m.set("config", config.text);
  return m;
}

std::vector<float> reshard_range(const std::vector<int64_t>& old_bounds, int64_t begin,
                                 int64_t end,
                                 const std::function<std::vector<float>(int)>& old_piece) {
  std::vector<float> out;
  out.reserve(static_cast<size_t>(std::max<int64_t>(0, end - begin)));
  for (size_t q = 0; q + 1 < old_bounds.size(); ++q) {
    const int64_t qb = old_bounds[q], qe = old_bounds[q + 1];
    if (qe <= begin || qb >= end || qb == qe) continue;
    const std::vector<float> piece = old_piece(static_cast<int>(q));
    if (static_cast<int64_t>(piece.size()) != qe - qb)
      throw DataError("resharding: old piece " + std::to_string(q) + " holds " +
                      std::to_string(piece.size()) + " floats, expected " +
                      std::to_string(qe - qb));
    const int64_t from = std::max(begin, qb), to = std::min(end, qe);
    out.insert(out.end(), piece.begin() + (from - qb), piece.begin() + (to - qb));
  }
  if (static_cast<int64_t>(out.size()) != end - begin)
    throw DataError("resharding: the old pieces cover " + std::to_string(out.size()) + " of the " +
                    std::to_string(end - begin) + " floats [" + std::to_string(begin) + ", " +
                    std::to_string(end) + ")");
  return out;
}

void check_resumable(const CheckpointFile& manifest, const ConfigRecord& config,
                     const JobIdentity& job, const std::string& where) {
  std::vector<std::string> why;
  const ConfigRecord saved = config.read(manifest.get("config"), manifest.origin());
  const std::string keys = config_differences(saved.values, config.values, "the checkpoint",
                                              "this run", &resume_may_differ);
  if (!keys.empty()) why.push_back("configuration: " + keys);
  const bool resized = dp_resize(manifest, job).resized;
  if (!resized && manifest.get_int("world_size") != job.world_size)
    why.push_back("world size: " + manifest.get("world_size") + " ranks wrote it, this job has " +
                  std::to_string(job.world_size));
  const std::string grid = std::to_string(job.pp) + " " + std::to_string(job.tp) + " " +
                           std::to_string(job.dp) + " " + job.order;
  if (!resized && manifest.get("grid") != grid)
    why.push_back("grid (p t d order): '" + manifest.get("grid") + "' in the checkpoint, '" + grid +
                  "' in this run");
  if (job.lr_schedule != "constant" && manifest.get_int("total_steps") != job.total_steps)
    why.push_back("train.steps: the " + job.lr_schedule +
                  " learning-rate schedule spans " + manifest.get("total_steps") +
                  " steps in the checkpoint, " + std::to_string(job.total_steps) + " in this run");
  if (why.empty()) return;
  std::string text = "--resume: the checkpoint " + where + " was written by a different job:";
  for (const auto& w : why) text += "\n  " + w;
  throw ConfigError(text);
}

DpResize dp_resize(const CheckpointFile& manifest, const JobIdentity& job) {
  std::istringstream grid(manifest.get("grid"));
  int pp = 0, tp = 0, dp = 0;
  std::string order;
  grid >> pp >> tp >> dp >> order;
  if (dp == job.dp) return {};
  const int servers = manifest.get_int("world_size") - manifest.get_int("workers");
  std::string why;
  if (pp != job.pp || tp != job.tp)
    why = "the pipeline and tensor degrees differ (p t = " + std::to_string(pp) + " " +
          std::to_string(tp) + " in the checkpoint, " + std::to_string(job.pp) + " " +
          std::to_string(job.tp) + " in this run): a replica's files hold another cut of the model";
  else if (manifest.get("sync") != job.sync)
    why = "sync.backend " + manifest.get("sync") + " wrote it, this run has " + job.sync;
  else if (servers != job.world_size - job.workers)
    why = std::to_string(servers) + " dedicated server ranks wrote it, this run has " +
          std::to_string(job.world_size - job.workers);
  if (!why.empty())
    throw ConfigError("--resume onto " + std::to_string(job.dp) + " data-parallel replicas of a " +
                      "checkpoint written by " + std::to_string(dp) + ": " + why);
  return {.resized = true, .reshard = job.zero > 0, .old_dp = dp};
}

}  // namespace psar
