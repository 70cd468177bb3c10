// Config loading: every mistake is a ConfigError that names the key.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/config.h"
#include "core/errors.h"
#include "core/units.h"

namespace psar {
namespace {

using ::testing::HasSubstr;

const Schema& schema() {
  static const Schema s = [] {
    Schema s;
    s.add({"train.steps", ValueType::kInt, "", "steps"});
    s.add({"train.batch_size", ValueType::kInt, "64", "batch"});
    s.add({"optimizer.lr", ValueType::kFloat, "0.1", "lr"});
    s.add({"optimizer.type", ValueType::kString, "sgd", "type", {"sgd", "adam"}});
    s.add({"model.hidden", ValueType::kIntList, "[256, 128]", "widths"});
    s.add({"net.bandwidth", ValueType::kBandwidth, "", "bw"});
    s.add({"net.latency", ValueType::kDuration, "0us", "lat"});
    s.add({"sync.segment_bytes", ValueType::kBytes, "256K", "seg"});
    s.add({"sync.trace", ValueType::kBool, "false", "flag"});
    s.add({"experiment.sweep", ValueType::kAny, "", "opaque"});
    return s;
  }();
  return s;
}

std::string error_of(const std::string& yaml, std::vector<std::string> overrides = {}) {
  try {
    Config::load_string(yaml, schema(), overrides, "test.yaml");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(Config, DefaultsFillWhatTheFileLeavesOut) {
  const Config c = Config::load_string("train: {steps: 5}", schema());
  EXPECT_EQ(c.get_int("train.steps"), 5);
  EXPECT_EQ(c.get_int("train.batch_size"), 64);
  EXPECT_DOUBLE_EQ(c.get_float("optimizer.lr"), 0.1);
  EXPECT_EQ(c.get_int_list("model.hidden"), (std::vector<int64_t>{256, 128}));
  EXPECT_EQ(c.get_bytes("sync.segment_bytes"), 256 * 1024);
  EXPECT_FALSE(c.has("net.bandwidth"));
}

TEST(Config, SetOverridesFileValuesWithDottedKeys) {
  const Config c = Config::load_string("train: {steps: 5}", schema(),
                                       {"train.steps=50", "optimizer.type=adam", "net.bandwidth=10Gbit"});
  EXPECT_EQ(c.get_int("train.steps"), 50);
  EXPECT_EQ(c.get_string("optimizer.type"), "adam");
  EXPECT_DOUBLE_EQ(c.get_bandwidth("net.bandwidth"), 10e9 / 8);
}

TEST(Config, UnknownKeyIsNamedWithASuggestion) {
  const std::string e = error_of("optimiser: {lr: 0.1}");
  EXPECT_THAT(e, HasSubstr("unknown config key 'optimiser'"));
  EXPECT_THAT(e, HasSubstr("did you mean 'optimizer'"));
  EXPECT_THAT(error_of("optimizer: {lrate: 0.1}"), HasSubstr("did you mean 'optimizer.lr'"));
  EXPECT_THAT(error_of("train: {setps: 5}"), HasSubstr("did you mean 'train.steps'"));
  EXPECT_THAT(error_of("steps: 5"), HasSubstr("unknown config key 'steps'"));
}

TEST(Config, WrongTypeNamesKeyAndValue) {
  EXPECT_THAT(error_of("train: {steps: many}"), HasSubstr("train.steps: expected an integer, got 'many'"));
  EXPECT_THAT(error_of("train: {steps: 2.5}"), HasSubstr("train.steps: expected an integer"));
  EXPECT_THAT(error_of("optimizer: {lr: fast}"), HasSubstr("optimizer.lr: expected a number"));
  EXPECT_THAT(error_of("model: {hidden: 256}"), HasSubstr("model.hidden: expected a list of integers"));
  EXPECT_THAT(error_of("sync: {trace: maybe}"), HasSubstr("sync.trace: expected true or false"));
  EXPECT_THAT(error_of("net: {bandwidth: 10Gbits}"), HasSubstr("net.bandwidth"));
  EXPECT_THAT(error_of("net: {latency: 5 parsecs}"), HasSubstr("net.latency"));
  EXPECT_THAT(error_of("optimizer: {type: lamb}"), HasSubstr("'lamb' is not one of sgd, adam"));
  EXPECT_THAT(error_of("train: 5"), HasSubstr("'train' is a section"));
}

TEST(Config, BadOverridesAreConfigErrors) {
  EXPECT_THAT(error_of("", {"train.stesp=5"}), HasSubstr("unknown config key 'train.stesp'"));
  EXPECT_THAT(error_of("", {"train.steps"}), HasSubstr("expects key=value"));
  EXPECT_THAT(error_of("", {"train.steps=x"}), HasSubstr("train.steps: expected an integer"));
}

TEST(Config, MalformedYamlNamesTheFile) {
  EXPECT_THAT(error_of("train: {steps: [1, 2"), HasSubstr("test.yaml: not valid YAML"));
  EXPECT_THAT(error_of("- a\n- b\n"), HasSubstr("top level must be a mapping"));
}

TEST(Config, MissingFileIsNamed) {
  try {
    Config::load_file("/nonexistent/x.yaml", schema());
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("/nonexistent/x.yaml"));
  }
}

TEST(Config, OpaqueSectionsAcceptAnything) {
  const Config c = Config::load_string("experiment: {sweep: {sync.backend: [ring, tree]}}", schema());
  EXPECT_TRUE(c.get_node("experiment.sweep").IsMap());
}

TEST(Config, UnsetRequiredValueIsNamed) {
  const Config c = Config::load_string("", schema());
  try {
    c.get_int("train.steps");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("train.steps must be set"));
  }
}

TEST(Config, DumpRoundTrips) {
  const Config a = Config::load_string("train: {steps: 7}", schema(), {"optimizer.lr=0.5"});
  const Config b = Config::load_string(a.dump(), schema());
  EXPECT_EQ(b.get_int("train.steps"), 7);
  EXPECT_DOUBLE_EQ(b.get_float("optimizer.lr"), 0.5);
}

TEST(Units, SizesDurationsBandwidths) {
  EXPECT_EQ(parse_bytes("4096"), 4096);
  EXPECT_EQ(parse_bytes("4K"), 4096);
  EXPECT_EQ(parse_bytes("64M"), 64 << 20);
  EXPECT_EQ(parse_bytes("1G"), int64_t{1} << 30);
  EXPECT_EQ(parse_bytes("2KiB"), 2048);
  EXPECT_THROW(parse_bytes("4Q"), ConfigError);
  EXPECT_THROW(parse_bytes("abc"), ConfigError);
  EXPECT_THROW(parse_bytes("-4K"), ConfigError);
  EXPECT_DOUBLE_EQ(parse_duration("5us"), 5e-6);
  EXPECT_DOUBLE_EQ(parse_duration("2ms"), 2e-3);
  EXPECT_DOUBLE_EQ(parse_duration("1.5s"), 1.5);
  EXPECT_DOUBLE_EQ(parse_duration("60", /*bare_seconds=*/true), 60);
  EXPECT_DOUBLE_EQ(parse_duration("0"), 0);
  EXPECT_DOUBLE_EQ(parse_bandwidth("10Gbit"), 1.25e9);
  EXPECT_DOUBLE_EQ(parse_bandwidth("100Mbit"), 12.5e6);
  EXPECT_DOUBLE_EQ(parse_bandwidth("1.25GB/s"), 1.25e9);
  EXPECT_THROW(parse_bandwidth("0Gbit"), ConfigError);
  EXPECT_DOUBLE_EQ(parse_bandwidth("100B/s"), 100);
}

// A number without a unit could be any of them: net.latency=5 is not 5 s,
// net.bandwidth=10 not 80 bit/s.
TEST(Units, DurationsAndBandwidthsWithoutAUnitAreRefusedNamingTheText) {
  for (const char* bare : {"5", "1.5", "2e-6"}) {
    try {
      parse_duration(bare);
      ADD_FAILURE() << bare << " was read as a duration";
    } catch (const ConfigError& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr(std::string("'") + bare + "' has no unit"));
    }
  }
  try {
    parse_bandwidth("10");
    ADD_FAILURE() << "10 was read as a bandwidth";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("'10' has no unit: write e.g. 10Gbit"));
  }
  EXPECT_THROW(Config::load_string("net: {latency: 5}\n", schema(), {}), ConfigError);
  EXPECT_THROW(Config::load_string("", schema(), {"net.bandwidth=10"}), ConfigError);
  EXPECT_NO_THROW(Config::load_string("", schema(), {"net.latency=0", "net.bandwidth=10Gbit"}));
}

TEST(Units, Formats) {
  EXPECT_EQ(format_bytes(64 << 20), "64M");
  EXPECT_EQ(format_bytes(1000), "1000");
}

}  // namespace
}  // namespace psar
