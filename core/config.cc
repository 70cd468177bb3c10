#include "core/config.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/errors.h"
#include "core/units.h"

namespace psar {

namespace {

std::vector<std::string> split_key(const std::string& key) {
  std::vector<std::string> parts;
  std::stringstream ss(key);
  std::string part;
  while (std::getline(ss, part, '.')) parts.push_back(part);
  return parts;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

const char* type_name(ValueType t) {
  switch (t) {
    case ValueType::kInt: return "an integer";
    case ValueType::kFloat: return "a number";
    case ValueType::kBool: return "true or false";
    case ValueType::kString: return "a string";
    case ValueType::kBytes: return "a size such as 4096 or 64M";
    case ValueType::kDuration: return "a duration such as 5us or 2ms";
    case ValueType::kBandwidth: return "a bandwidth such as 10Gbit";
    case ValueType::kIntList: return "a list of integers";
    case ValueType::kStringList: return "a list of strings";
    case ValueType::kAny: return "anything";
  }
  return "?";
}

std::string show(const YAML::Node& n) {
  if (n.IsScalar()) return "'" + n.Scalar() + "'";
  YAML::Emitter e;
  e << YAML::Flow << n;
  return e.c_str();
}

// Sets root[k1][k2]... = value, creating maps on the way.
void assign(YAML::Node root, const std::vector<std::string>& parts, const YAML::Node& value) {
  // yaml-cpp nodes are handles: walk with explicit node copies.
  std::vector<YAML::Node> chain{root};
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    YAML::Node next = chain.back()[parts[i]];
    if (!next.IsMap()) {
      chain.back()[parts[i]] = YAML::Node(YAML::NodeType::Map);
      next.reset(chain.back()[parts[i]]);
    }
    chain.push_back(next);
  }
  chain.back()[parts.back()] = value;
}

YAML::Node deep_copy(const YAML::Node& n) { return YAML::Clone(n); }

void merge_into(YAML::Node dst, const YAML::Node& src) {
  for (auto it = src.begin(); it != src.end(); ++it) {
    const std::string k = it->first.as<std::string>();
    if (it->second.IsMap() && dst[k] && dst[k].IsMap()) {
      merge_into(dst[k], it->second);
    } else {
      dst[k] = deep_copy(it->second);
    }
  }
}

}  // namespace

// ---- Schema --------------------------------------------------------------------

Schema& Schema::add(KeySpec spec) {
  PSAR_CHECK(!keys_.contains(spec.key), "schema key '", spec.key, "' added twice");
  std::string key = spec.key;
  keys_.emplace(std::move(key), std::move(spec));
  return *this;
}

const KeySpec* Schema::find(const std::string& key) const {
  auto it = keys_.find(key);
  return it == keys_.end() ? nullptr : &it->second;
}

std::string Schema::suggest_section(const std::string& name) const {
  std::string best;
  size_t best_d = std::max<size_t>(2, name.size() / 4) + 1;
  for (const auto& [k, _] : keys_) {
    auto parts = split_key(k);
    for (size_t n = 1; n < parts.size(); ++n) {
      std::string prefix = parts[0];
      for (size_t i = 1; i < n; ++i) prefix += "." + parts[i];
      const size_t d = edit_distance(name, prefix);
      if (d < best_d) best_d = d, best = prefix;
    }
  }
  return best;
}

bool Schema::is_section(const std::string& prefix) const {
  const std::string p = prefix + ".";
  auto it = keys_.lower_bound(p);
  return it != keys_.end() && it->first.compare(0, p.size(), p) == 0;
}

std::string Schema::suggest(const std::string& key) const {
  std::string best;
  size_t best_d = std::max<size_t>(3, key.size() / 4) + 1;
  for (const auto& [k, _] : keys_) {
    const size_t d = edit_distance(key, k);
    if (d < best_d) {
      best_d = d;
      best = k;
    }
  }
  if (best.empty()) {
    // Same leaf name under another section ("steps" -> "train.steps").
    const auto parts = split_key(key);
    for (const auto& [k, _] : keys_)
      if (split_key(k).back() == parts.back()) return k;
  }
  return best;
}

// ---- Config --------------------------------------------------------------------

Config Config::load_file(const std::string& path, const Schema& schema,
                         const std::vector<std::string>& overrides) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw ConfigError("config file '" + path + "' is a directory; give the YAML file in it");
  std::ifstream in(path);
  if (!in) throw ConfigError("cannot open config file '" + path + "': " + std::strerror(errno));
  std::stringstream ss;
  ss << in.rdbuf();
  // An empty file would silently mean "every default" (and then fail on a
  // missing train.steps); say what it is instead.
  if (ss.str().find_first_not_of(" \t\r\n") == std::string::npos)
    throw ConfigError("config file '" + path + "' is empty");
  return load_string(ss.str(), schema, overrides, path);
}

Config Config::load_string(const std::string& yaml, const Schema& schema,
                           const std::vector<std::string>& overrides,
                           const std::string& origin) {
  Config cfg;
  cfg.schema_ = &schema;
  cfg.origin_ = origin;
  YAML::Node user;
  try {
    user = YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    throw ConfigError(origin + ": not valid YAML: " + e.what());
  }
  if (user.IsNull()) user = YAML::Node(YAML::NodeType::Map);
  if (!user.IsMap()) throw ConfigError(origin + ": the top level must be a mapping of sections");
  cfg.validate_tree(user, "");

  // Defaults first, then the user's file on top.
  cfg.root_ = YAML::Node(YAML::NodeType::Map);
  for (const auto& [key, spec] : schema.keys()) {
    if (spec.default_yaml.empty()) continue;
    assign(cfg.root_, split_key(key), YAML::Load(spec.default_yaml));
  }
  merge_into(cfg.root_, user);
  for (const auto& o : overrides) cfg.set(o);
  return cfg;
}

void Config::validate_tree(const YAML::Node& node, const std::string& prefix) const {
  for (auto it = node.begin(); it != node.end(); ++it) {
    const std::string key = (prefix.empty() ? "" : prefix + ".") + it->first.as<std::string>();
    const KeySpec* s = schema_->find(key);
    if (s) {
      check_value(*s, it->second);
    } else if (schema_->is_section(key)) {
      if (it->second.IsNull()) continue;  // an empty section
      if (!it->second.IsMap())
        throw ConfigError(origin_ + ": '" + key + "' is a section; expected a mapping, got " +
                          show(it->second));
      validate_tree(it->second, key);
    } else {
      std::string msg = origin_ + ": unknown config key '" + key + "'";
      const std::string hint =
          it->second.IsMap() ? schema_->suggest_section(key) : schema_->suggest(key);
      if (!hint.empty()) msg += " (did you mean '" + hint + "'?)";
      throw ConfigError(msg);
    }
  }
}

void Config::check_value(const KeySpec& s, const YAML::Node& v) const {
  auto bad = [&](const std::string& why = "") {
    throw ConfigError(origin_ + ": " + s.key + ": expected " + type_name(s.type) + ", got " +
                      show(v) + (why.empty() ? "" : " (" + why + ")"));
  };
  if (v.IsNull()) return;  // explicit null = unset
  try {
    switch (s.type) {
      case ValueType::kAny: return;
      case ValueType::kInt: {
        if (!v.IsScalar()) bad();
        const double d = v.as<double>();
        if (d != static_cast<double>(static_cast<int64_t>(d))) bad();
        (void)v.as<int64_t>();
        return;
      }
      case ValueType::kFloat:
        if (!v.IsScalar()) bad();
        (void)v.as<double>();
        return;
      case ValueType::kBool:
        if (!v.IsScalar()) bad();
        (void)v.as<bool>();
        return;
      case ValueType::kString: {
        if (!v.IsScalar()) bad();
        const std::string str = v.as<std::string>();
        const std::vector<std::string> choices = s.allowed();
        if (!choices.empty() && std::find(choices.begin(), choices.end(), str) == choices.end()) {
          std::string list;
          for (const auto& c : choices) list += (list.empty() ? "" : ", ") + c;
          throw ConfigError(origin_ + ": " + s.key + ": '" + str + "' is not one of " + list);
        }
        return;
      }
      case ValueType::kBytes:
        if (!v.IsScalar()) bad();
        (void)parse_bytes(v.as<std::string>());
        return;
      case ValueType::kDuration:
        if (!v.IsScalar()) bad();
        (void)parse_duration(v.as<std::string>());
        return;
      case ValueType::kBandwidth:
        if (!v.IsScalar()) bad();
        (void)parse_bandwidth(v.as<std::string>());
        return;
      case ValueType::kIntList:
        if (!v.IsSequence()) bad();
        for (const auto& e : v) (void)e.as<int64_t>();
        return;
      case ValueType::kStringList:
        if (!v.IsSequence()) bad();
        for (const auto& e : v) (void)e.as<std::string>();
        return;
    }
  } catch (const YAML::Exception&) {
    bad();
  } catch (const ConfigError& e) {
    if (std::string(e.what()).find(s.key) != std::string::npos) throw;
    bad(e.what());
  }
}

void Config::set(const std::string& assignment) {
  const auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    throw ConfigError("--set expects key=value, got '" + assignment + "'");
  const std::string key = assignment.substr(0, eq);
  const std::string text = assignment.substr(eq + 1);
  const KeySpec* s = schema_->find(key);
  if (!s) {
    std::string msg = "--set: unknown config key '" + key + "'";
    const std::string hint = schema_->suggest(key);
    if (!hint.empty()) msg += " (did you mean '" + hint + "'?)";
    throw ConfigError(msg);
  }
  YAML::Node value;
  try {
    value = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw ConfigError("--set " + key + ": cannot parse value '" + text + "': " + e.what());
  }
  if (text.empty()) value = YAML::Node(std::string());
  check_value(*s, value);
  assign(root_, split_key(key), value);
}

const KeySpec& Config::spec(const std::string& key) const {
  PSAR_CHECK(schema_, "Config used before loading");
  const KeySpec* s = schema_->find(key);
  PSAR_CHECK(s, "config key '", key, "' is not in the schema");
  return *s;
}

YAML::Node Config::lookup(const std::string& key) const {
  // Const access never inserts; reset() rebinds the handle (operator= would
  // overwrite the node it refers to).
  YAML::Node cur;
  cur.reset(root_);
  for (const auto& part : split_key(key)) {
    if (!cur.IsMap()) return YAML::Node();
    const YAML::Node& c = cur;
    const YAML::Node next = c[part];
    if (!next) return YAML::Node();
    cur.reset(next);
  }
  return YAML::Clone(cur);
}

bool Config::has(const std::string& key) const {
  (void)spec(key);
  const YAML::Node n = lookup(key);
  return n && !n.IsNull();
}

namespace {
[[noreturn]] void unset(const std::string& origin, const std::string& key) {
  throw ConfigError(origin + ": " + key + " must be set");
}
}  // namespace

int64_t Config::get_int(const std::string& key) const {
  (void)spec(key);
  const YAML::Node n = lookup(key);
  if (!n || n.IsNull()) unset(origin_, key);
  return n.as<int64_t>();
}
double Config::get_float(const std::string& key) const {
  (void)spec(key);
  const YAML::Node n = lookup(key);
  if (!n || n.IsNull()) unset(origin_, key);
  return n.as<double>();
}
bool Config::get_bool(const std::string& key) const {
  (void)spec(key);
  const YAML::Node n = lookup(key);
  if (!n || n.IsNull()) unset(origin_, key);
  return n.as<bool>();
}
std::string Config::get_string(const std::string& key) const {
  (void)spec(key);
  const YAML::Node n = lookup(key);
  if (!n || n.IsNull()) unset(origin_, key);
  return n.as<std::string>();
}
int64_t Config::get_bytes(const std::string& key) const { return parse_bytes(get_string(key)); }
double Config::get_duration(const std::string& key) const {
  return parse_duration(get_string(key));
}
double Config::get_bandwidth(const std::string& key) const {
  return parse_bandwidth(get_string(key));
}
std::vector<int64_t> Config::get_int_list(const std::string& key) const {
  (void)spec(key);
  const YAML::Node n = lookup(key);
  if (!n || n.IsNull()) unset(origin_, key);
  return n.as<std::vector<int64_t>>();
}
std::vector<std::string> Config::get_string_list(const std::string& key) const {
  (void)spec(key);
  const YAML::Node n = lookup(key);
  if (!n || n.IsNull()) unset(origin_, key);
  return n.as<std::vector<std::string>>();
}
YAML::Node Config::get_node(const std::string& key) const {
  (void)spec(key);
  return lookup(key);
}

std::string Config::dump() const {
  YAML::Emitter e;
  e << root_;
  return std::string(e.c_str()) + "\n";
}

const Schema& Config::schema() const {
  PSAR_CHECK(schema_, "Config used before loading");
  return *schema_;
}

std::map<std::string, std::string> Config::flat() const {
  std::map<std::string, std::string> out;
  if (!schema_) return out;
  for (const auto& [key, spec] : schema_->keys()) {
    const YAML::Node n = lookup(key);
    if (!n || n.IsNull()) {
      out[key] = "~";
      continue;
    }
    YAML::Emitter e;
    e << YAML::Flow << n;
    out[key] = e.c_str();
  }
  return out;
}

}  // namespace psar
