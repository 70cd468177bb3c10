// `psar cost` through the real binary: the cost forms evaluated for the
// numbers given, one row per registered algorithm, p and n; bad numbers are
// exit code 2 with a message naming the flag.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "allreduce/allreducer.h"

namespace psar {
namespace {

using ::testing::HasSubstr;

struct Outcome {
  int code = -1;
  std::string out, err;
};

Outcome psar_cost(const std::string& args) {
  // One file per process: CTest runs the cases of this binary in parallel.
  const std::string err_path =
      ::testing::TempDir() + "psar_cost_stderr_" + std::to_string(::getpid()) + ".txt";
  Outcome o;
  FILE* p = popen((std::string(PSAR_BIN) + " cost " + args + " 2>" + err_path).c_str(), "r");
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) o.out.append(buf.data(), n);
  const int status = pclose(p);
  o.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  FILE* e = fopen(err_path.c_str(), "r");
  while (e && (n = fread(buf.data(), 1, buf.size(), e)) > 0) o.err.append(buf.data(), n);
  if (e) fclose(e);
  std::remove(err_path.c_str());
  return o;
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

TEST(PsarCost, TheRingRowIsTheDocumentedFormWorkedByHand) {
  // p = 4, n = 16 MiB = 16777216 bytes, α = 5 µs, β = 1e-10 s/B, γ = 2e-11 s/B:
  // 2(p-1) = 6 messages; (p-1)/p·n = 12582912 bytes, sent twice, reduced once;
  // time = 6·5e-6 + 25165824·1e-10 + 12582912·2e-11 = 0.00279824064 s.
  // Bytes: every rank sends 2n - 2n/4 = 25165824, 4 ranks 100663296 in all.
  const Outcome o = psar_cost("--p 4 --n 16M --alpha 5us --beta 1e-10 --gamma 2e-11 --algos ring");
  ASSERT_EQ(o.code, 0) << o.err;
  const auto rows = lines(o.out);
  ASSERT_EQ(rows.size(), 2u) << o.out;
  EXPECT_EQ(rows[0], "algo,ranks,size,count,alpha_coef,beta_coef,gamma_coef,time_s,"
                     "bytes_sent_total,bytes_sent_max_rank,servers");
  // servers: empty on an allreduce row (the parameter server's rows fill it).
  EXPECT_EQ(rows[1], "ring,4,16777216,4194304,6,25165824,12582912,0.00279824064,100663296,25165824,");
}

TEST(PsarCost, DefaultsToEveryRegisteredAlgorithmForEveryPAndN) {
  const Outcome o = psar_cost("--p 2,3,8 --n 4K,1M");
  ASSERT_EQ(o.code, 0) << o.err;
  const auto rows = lines(o.out);
  ASSERT_EQ(rows.size(), 1 + allreducer_registry().size() * 3 * 2) << o.out;
  size_t i = 1;
  for (const auto& e : allreducer_registry())
    for (const char* p : {"2", "3", "8"})
      for (const char* n : {"4096", "1048576"}) {
        EXPECT_EQ(rows[i].rfind(std::string(e.name) + "," + p + "," + n + ",", 0), 0u) << rows[i];
        // Bytes outside psar's Comm counters are left empty, not guessed.
        EXPECT_EQ(rows[i].ends_with(",,"), e.program == nullptr) << rows[i];
        ++i;
      }
}

TEST(PsarCost, JsonCarriesTheSameRowsWithNullForUncountedBytes) {
  const Outcome csv = psar_cost("--p 4 --n 64K --alpha 1e-6 --beta 2e-10 --algos naive,mpi");
  const Outcome json =
      psar_cost("--p 4 --n 64K --alpha 1e-6 --beta 2e-10 --algos naive,mpi --format json");
  ASSERT_EQ(csv.code, 0) << csv.err;
  ASSERT_EQ(json.code, 0) << json.err;
  EXPECT_THAT(json.out, HasSubstr("\"alpha\": 1e-06, \"beta\": 2e-10, \"gamma\": 0"));
  // naive at p = 4: 3 messages of 65536 bytes from each of 4 ranks;
  // 3·1e-6 + 196608·2e-10 = 4.23216e-05 s.
  EXPECT_THAT(json.out, HasSubstr("{\"algo\": \"naive\", \"ranks\": 4, \"size\": 65536, "
                                  "\"count\": 16384, \"alpha_coef\": 3, \"beta_coef\": 196608, "
                                  "\"gamma_coef\": 196608, \"time_s\": 4.23216e-05,"));
  EXPECT_THAT(json.out, HasSubstr("\"bytes_sent_total\": 786432, \"bytes_sent_max_rank\": 196608, "
                                  "\"servers\": null}"));
  EXPECT_THAT(json.out, HasSubstr("\"bytes_sent_total\": null, \"bytes_sent_max_rank\": null, "
                                  "\"servers\": null}"));
  EXPECT_THAT(csv.out, HasSubstr("naive,4,65536,16384,3,196608,196608,4.23216e-05,"));
}

TEST(PsarCost, TheSegmentSizeComesFromTheSyncConfigLikeTheBenchmarks) {
  // tree, p = 2: D = 1; S = 1 MiB / segment: α coefficient 2D+S-1 = S+1.
  const Outcome small = psar_cost("--p 2 --n 1M --algos tree --set sync.segment_bytes=256K");
  const Outcome large = psar_cost("--p 2 --n 1M --algos tree --set sync.segment_bytes=1M");
  ASSERT_EQ(small.code, 0) << small.err;
  EXPECT_THAT(small.out, HasSubstr("tree,2,1048576,262144,5,"));
  EXPECT_THAT(large.out, HasSubstr("tree,2,1048576,262144,2,"));
}

struct BadInput {
  const char* args;
  const char* message;
};

class PsarCostRejects : public ::testing::TestWithParam<BadInput> {};

TEST_P(PsarCostRejects, WithExitCode2AndAMessageNamingTheFlag) {
  const Outcome o = psar_cost(GetParam().args);
  EXPECT_EQ(o.code, 2) << o.out << o.err;
  EXPECT_THAT(o.err, HasSubstr(GetParam().message));
  EXPECT_EQ(o.out, "");
}

INSTANTIATE_TEST_SUITE_P(
    BadNumbers, PsarCostRejects,
    ::testing::Values(
        BadInput{"--p 2 --n 4K --alpha abc", "psar cost: --alpha: cannot read a duration from 'abc'"},
        BadInput{"--p 2 --n 4K --beta 1e-10x", "psar cost: --beta: needs a number"},
        BadInput{"--p 2 --n 4K --beta -1", "psar cost: --beta: must be at least 0"},
        BadInput{"--p 2 --n 4K --gamma nan", "psar cost: --gamma: needs a number"},
        BadInput{"--p two --n 4K", "psar cost: --p needs an integer, got 'two'"},
        BadInput{"--p 2,0 --n 4K", "psar cost: --p must be at least 1"},
        BadInput{"--p 2 --n 4Q", "psar cost: --n: unknown size unit 'q'"},
        BadInput{"--p 2 --n 6", "psar cost: --n: '6' is not a whole number of float32 elements"},
        BadInput{"--n 4K", "psar cost: missing --p"},
        BadInput{"--p 2", "psar cost: missing --n"},
        BadInput{"--p 2 --n 4K --format xml", "psar cost: --format: csv or json, got 'xml'"},
        BadInput{"--p 2 --n 4K --algos ring,fast", "psar cost: --algos: unknown allreduce algorithm 'fast'"},
        BadInput{"--p 2 --n 4K --beta", "psar cost: --beta needs a value"},
        BadInput{"--p 2 --n 4K --bogus 1", "psar cost: unknown option '--bogus'"}),
    [](const auto& info) { return "case" + std::to_string(info.index); });

}  // namespace
}  // namespace psar
