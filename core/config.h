#pragma once
// Configuration: a YAML file, plus `--set dotted.key=value` overrides, checked
// against a Schema of every known key, its type and its default. Anything the
// schema does not know, or a value of the wrong type, is a ConfigError naming
// the key (with a suggestion for a near miss) — before any work starts.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

namespace psar {

enum class ValueType {
  kInt,        // integer
  kFloat,      // number
  kBool,       // true/false
  kString,     // free text, or one of `choices` if given
  kBytes,      // 4096, "4K", "64M"
  kDuration,   // "5us", "2ms", seconds as a number
  kBandwidth,  // "10Gbit", "1.25GB/s"
  kIntList,    // [1, 2, 4]
  kStringList, // [a, b]
  kAny,        // any YAML subtree, not interpreted by psar (e.g. `sweep`)
};

struct KeySpec {
  std::string key;            // dotted: "train.batch_size"
  ValueType type;
  std::string default_yaml;   // YAML text of the default; "" = no default (unset)
  std::string doc;
  std::vector<std::string> choices;  // for kString, if non-empty
  // For kString: the choices read from a registry each time they are needed
  // (so an entry registered later, e.g. by a test, is a choice too).
  std::vector<std::string> (*choices_from)() = nullptr;
  std::vector<std::string> allowed() const { return choices_from ? choices_from() : choices; }
};

class Schema {
 public:
  Schema& add(KeySpec spec);
  const KeySpec* find(const std::string& key) const;
  const std::map<std::string, KeySpec>& keys() const { return keys_; }
  // Closest known key by edit distance, or "" if none is close.
  std::string suggest(const std::string& key) const;
  // Closest known section ("optimiser" -> "optimizer"), or "".
  std::string suggest_section(const std::string& name) const;
  // True if `prefix` is a section: some key starts with "prefix.".
  bool is_section(const std::string& prefix) const;

 private:
  std::map<std::string, KeySpec> keys_;
};

class Config {
 public:
  Config() = default;
  // Loads a YAML file; `overrides` are "dotted.key=value" strings applied in order.
  static Config load_file(const std::string& path, const Schema& schema,
                          const std::vector<std::string>& overrides = {});
  static Config load_string(const std::string& yaml, const Schema& schema,
                            const std::vector<std::string>& overrides = {},
                            const std::string& origin = "<string>");

  // True if the key has a value (set by the user or defaulted).
  bool has(const std::string& key) const;
  int64_t get_int(const std::string& key) const;
  double get_float(const std::string& key) const;
  bool get_bool(const std::string& key) const;
  std::string get_string(const std::string& key) const;
  int64_t get_bytes(const std::string& key) const;
  double get_duration(const std::string& key) const;
  double get_bandwidth(const std::string& key) const;
  std::vector<int64_t> get_int_list(const std::string& key) const;
  std::vector<std::string> get_string_list(const std::string& key) const;
  YAML::Node get_node(const std::string& key) const;

  // Applies one more "key=value" override after loading (same checks).
  void set(const std::string& assignment);
  // The resolved configuration (defaults filled in) as YAML text.
  std::string dump() const;
  // Every key of the schema → its resolved value as one line of YAML ("~"
  // when unset): what two configurations are compared by (start-up
  // agreement, checkpoints).
  std::map<std::string, std::string> flat() const;
  const std::string& origin() const { return origin_; }
  // The schema it was loaded with (another configuration of the same kind
  // is read with it: a checkpoint's, core/checkpoint.h).
  const Schema& schema() const;

 private:
  void validate_tree(const YAML::Node& node, const std::string& prefix) const;
  void check_value(const KeySpec& spec, const YAML::Node& value) const;
  const KeySpec& spec(const std::string& key) const;
  YAML::Node lookup(const std::string& key) const;

  const Schema* schema_ = nullptr;
  YAML::Node root_;
  std::string origin_;
};

}  // namespace psar
