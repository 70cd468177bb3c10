// A GPU model's GEMM table (sim/gemm_table.h) against closed forms: a rate
// of the form C·batch^α·m^β·n^γ·k^δ and one multilinear in the logs, both
// sampled on a grid, come back exactly off the grid; beyond the grid the
// edge holds; a ragged grid interpolates over the points it has; bad files
// name the line. Then the seam: gemm_seconds and a block's GEMMs take the
// table's rate per layout with no wave quantization on top and keep the
// memory bound, and cluster.gpu.gemm_table picks a built-in table.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <sstream>

#include "core/errors.h"
#include "sim/cluster.h"
#include "sim/gemm_table.h"
#include "sim/gpt_cost.h"
#include "trainer/schema.h"

namespace psar::sim {
namespace {

using Rate = std::function<double(const char* layout, double batch, double m, double n, double k)>;

// A table CSV of `rate` (FLOP/s) sampled at every (layout, batch, m, n, k) of the grid.
std::string sample(const Rate& rate, const std::vector<double>& batches,
                   const std::vector<double>& ms, const std::vector<double>& ns,
                   const std::vector<double>& ks) {
  std::ostringstream out;
  out.precision(17);
  out << "gpu,dtype,layout,batch,m,n,k,ms,tflops\n";
  for (const char* layout : {"NN", "NT", "TN"})
    for (double b : batches)
      for (double m : ms)
        for (double n : ns)
          for (double k : ks) {
            const double r = rate(layout, b, m, n, k), flops = 2 * b * m * n * k;
            out << "\"Test GPU, 80GB\",bf16," << layout << "," << b << "," << m << "," << n << ","
                << k << "," << flops / r * 1e3 << "," << r / 1e12 << "\n";
          }
  return out.str();
}

const std::vector<double> kSizes = {256, 1024, 4096, 16384};

TEST(GemmTable, APowerLawSampledOnAGridComesBackExactlyBetweenAndOnItsPoints) {
  // Small-GEMM regime: time flat, so the rate grows as the work does;
  // different exponents per axis and per layout.
  const Rate rate = [](const char* layout, double b, double m, double n, double k) {
    const double c = layout[0] == 'N' ? (layout[1] == 'N' ? 1e9 : 2e9) : 3e9;
    return c * std::pow(b, 0.9) * std::pow(m, 0.5) * std::pow(n, 0.7) * std::pow(k, 0.3);
  };
  const GemmTable table = GemmTable::parse(sample(rate, {1, 8, 64}, kSizes, kSizes, kSizes), "t");
  EXPECT_EQ(table.rows(), 3u * 3 * 4 * 4 * 4);
  EXPECT_EQ(table.gpu(), "Test GPU, 80GB");
  EXPECT_EQ(table.dtype(), "bf16");
  for (GemmLayout l : {GemmLayout::kNN, GemmLayout::kNT, GemmLayout::kTN})
    for (double b : {1.0, 3.0, 8.0, 40.0})
      for (int64_t m : {256, 700, 4096, 5000})
        for (int64_t n : {1024, 3000})
          for (int64_t k : {256, 333, 16384}) {
            const double want = rate(layout_name(l), b, static_cast<double>(m),
                                     static_cast<double>(n), static_cast<double>(k));
            EXPECT_NEAR(table.flops_per_s(l, b, m, n, k), want, 1e-9 * want)
                << layout_name(l) << " " << b << " " << m << " " << n << " " << k;
          }
}

TEST(GemmTable, ARateMultilinearInTheLogsIsReproducedOffTheGrid) {
  // log rate = a + x·y + y·z·w − x·w/4 with x..w the logs of batch, m, n, k:
  // multilinear, so multilinear interpolation is exact for it.
  const Rate rate = [](const char*, double b, double m, double n, double k) {
    const double x = std::log(b), y = std::log(m) / 10, z = std::log(n) / 10, w = std::log(k) / 10;
    return std::exp(std::log(1e12) + x * y + y * z * w - x * w / 4);
  };
  const GemmTable table = GemmTable::parse(sample(rate, {1, 4, 32}, kSizes, kSizes, kSizes), "t");
  for (double b : {2.0, 10.0})
    for (int64_t m : {512, 2000})
      for (int64_t n : {300, 9000})
        for (int64_t k : {2048, 12000}) {
          const double want =
              rate("NN", b, static_cast<double>(m), static_cast<double>(n), static_cast<double>(k));
          EXPECT_NEAR(table.flops_per_s(GemmLayout::kNT, b, m, n, k), want, 1e-9 * want);
        }
  // A plain linear blend of the rates (not of their logs) would miss: the
  // midpoint in log m of two measured m is their geometric mean's rate.
  const double lo = rate("NN", 32, 1024, 1024, 1024), hi = rate("NN", 32, 4096, 1024, 1024);
  EXPECT_NEAR(table.flops_per_s(GemmLayout::kNN, 32, 2048, 1024, 1024), std::sqrt(lo * hi),
              1e-9 * lo);
  EXPECT_GT(std::abs((lo + hi) / 2 - std::sqrt(lo * hi)), 1e-2 * lo);
}

TEST(GemmTable, BeyondTheGridTheNearestMeasuredSizeHolds) {
  const Rate rate = [](const char*, double b, double m, double n, double k) {
    return 1e10 * b * m * std::sqrt(n) * std::cbrt(k) / 1e3;
  };
  const GemmTable table = GemmTable::parse(sample(rate, {1, 16}, kSizes, kSizes, kSizes), "t");
  // m below the grid, n above it, batch above it: each held at its edge.
  EXPECT_NEAR(table.flops_per_s(GemmLayout::kTN, 100, 64, 65536, 1000),
              rate("TN", 16, 256, 16384, 1000), 1e-9 * rate("TN", 16, 256, 16384, 1000));
  EXPECT_NEAR(table.flops_per_s(GemmLayout::kTN, 0.5, 1 << 20, 128, 1 << 20),
              rate("TN", 1, 16384, 256, 16384), 1e-9 * rate("TN", 1, 16384, 256, 16384));
}

TEST(GemmTable, ALoneShapeBesideAGridIsExactOnItselfAndDoesNotBendTheGridElsewhere) {
  // A full grid of a power law, plus one NN shape of a real layer (m = 1024,
  // n = 1500 between the grid's 1024 and 4096, measured at k = 4096 alone)
  // at ten times the law's rate.
  const Rate law = [](const char*, double b, double m, double n, double k) {
    return 1e9 * b * std::pow(m, 0.5) * std::pow(n, 0.7) * std::pow(k, 0.3);
  };
  std::string csv = sample(law, {1}, kSizes, kSizes, kSizes);
  const double lone = 10 * law("NN", 1, 1024, 1500, 4096), flops = 2.0 * 1024 * 1500 * 4096;
  std::ostringstream row;
  row.precision(17);
  row << "\"Test GPU, 80GB\",bf16,NN,1,1024,1500,4096," << flops / lone * 1e3 << "," << lone / 1e12
      << "\n";
  csv += row.str();
  const GemmTable table = GemmTable::parse(csv, "t");
  EXPECT_NEAR(table.flops_per_s(GemmLayout::kNN, 1, 1024, 1500, 4096), lone, 1e-9 * lone);
  // k = 16384: the lone shape does not span it, the grid's n = 1024 and 4096 do.
  const double far = law("NN", 1, 1024, 1400, 16384);
  EXPECT_NEAR(table.flops_per_s(GemmLayout::kNN, 1, 1024, 1400, 16384), far, 1e-9 * far);
  // m = 3000: between the grid's m = 1024 (with the lone shape) and 4096.
  const double other_m = law("NN", 1, 3000, 2500, 16384);
  EXPECT_NEAR(table.flops_per_s(GemmLayout::kNN, 1, 3000, 2500, 16384), other_m, 1e-9 * other_m);
  // Beside it at its own k: a blend of the grid's n = 1024 and the lone n = 1500.
  const double grid = law("NN", 1, 1024, 1024, 4096);
  const double near = table.flops_per_s(GemmLayout::kNN, 1, 1024, 1400, 4096);
  const double w = std::log(1400.0 / 1024) / std::log(1500.0 / 1024);
  EXPECT_NEAR(near, std::exp((1 - w) * std::log(grid) + w * std::log(lone)), 1e-9 * near);
}

TEST(GemmTable, ABatchedQueryOfALayoutWithNoBatchedRowsTakesNnsBatchedRows) {
  // NN at batch 1 (400 TFLOP/s) and batch 8 (100); NT and TN at batch 1 alone
  // (300, 200): a batched NT or TN query is NN's batched rate.
  std::ostringstream csv;
  csv.precision(17);
  csv << "gpu,dtype,layout,batch,m,n,k,ms,tflops\n";
  auto row = [&](const char* layout, double b, double rate) {
    const double flops = 2 * b * 2048.0 * 2048 * 128;
    csv << "g,bf16," << layout << "," << b << ",2048,2048,128," << flops / rate * 1e3 << ","
        << rate / 1e12 << "\n";
  };
  row("NN", 1, 400e12);
  row("NN", 8, 100e12);
  row("NT", 1, 300e12);
  row("TN", 1, 200e12);
  const GemmTable table = GemmTable::parse(csv.str(), "t");
  EXPECT_NEAR(table.flops_per_s(GemmLayout::kNT, 8, 2048, 2048, 128), 100e12, 1e3);
  EXPECT_NEAR(table.flops_per_s(GemmLayout::kTN, 16, 2048, 2048, 128), 100e12, 1e3);
  EXPECT_NEAR(table.flops_per_s(GemmLayout::kNT, 1, 2048, 2048, 128), 300e12, 1e3);
  // NN between batch 1 and 8: geometric in log batch (batch 2 is a third of the way).
  EXPECT_NEAR(table.flops_per_s(GemmLayout::kNN, 2, 2048, 2048, 128),
              std::exp(std::log(400e12) * 2 / 3 + std::log(100e12) / 3), 1e3);
}

TEST(GemmTable, ABadFileNamesItsLineAndWhatIsWrong) {
  const std::string head = "gpu,dtype,layout,batch,m,n,k,ms,tflops\n";
  const std::string ok =
      "g,bf16,NN,1,1024,1024,1024,1,2.147483648\n"
      "g,bf16,NT,1,1024,1024,1024,1,2.147483648\n"
      "g,bf16,TN,1,1024,1024,1024,1,2.147483648\n";
  auto fails = [](const std::string& csv, const std::string& what) {
    EXPECT_THAT([&] { GemmTable::parse(csv, "bad.csv"); },
                ::testing::ThrowsMessage<DataError>(::testing::HasSubstr(what)))
        << csv;
  };
  fails("gpu,dtype,layout,batch,m,n,k,ms\n" + ok, "no column 'tflops'");
  fails(head + ok + "g,bf16,TT,1,1024,1024,1024,1,2.147483648\n", "bad.csv:5: layout 'TT'");
  fails(head + ok + "g,bf16,NN,1,2048,1024,x,1,2.147483648\n", "k 'x' is not a number");
  fails(head + ok + "g,bf16,NN,1,2048,1024,1024,0,1\n", "ms must be positive");
  fails(head + ok + "h,bf16,NN,1,2048,1024,1024,1,4.294967296\n", "gpu 'h'");
  fails(head + ok + "g,fp16,NN,1,2048,1024,1024,1,4.294967296\n", "dtype 'fp16'");
  fails(head + ok + "g,bf16,NN,1,2048,1024,1024,1,0.005\n", "disagrees");
  fails(head + ok + "g,bf16,NN,1,1024,1024,1024,2,1.073741824\n", "again (line 2)");
  fails(head + "g,bf16,NN,1,1024,1024,1024,1,2.147483648\n", "no row of layout NT");
  fails(head + "g,bf16,NN,1,1024\n", "5 fields, no 'n'");
  fails("", "no header line");
}

// One rate per layout, flat: NN 400, NT 300, TN 200 TFLOP/s.
GemmTable flat_table() {
  const Rate rate = [](const char* layout, double, double, double, double) {
    return layout[0] == 'T' ? 200e12 : layout[1] == 'T' ? 300e12 : 400e12;
  };
  return GemmTable::parse(sample(rate, {1, 64}, {128, 65536}, {128, 65536}, {64, 65536}), "flat");
}

TEST(GemmTableSeam, AGemmRunsAtTheTablesRateForItsLayoutWithNoWavesOnTop) {
  const GemmTable table = flat_table();
  GpuSpec gpu{989e12, 0.5, 0.0, 0};
  gpu.sms = 132;  // would cost a 129-row GEMM half its rate without the table
  gpu.gemm_table = &table;
  const double flops = 2.0 * 129 * 4096 * 4096;  // exp(log(rate)): to rounding
  EXPECT_NEAR(gemm_seconds(gpu, 1, 129, 4096, 4096), flops / 400e12, 1e-12 * flops / 400e12);
  EXPECT_NEAR(gemm_seconds(gpu, 1, 129, 4096, 4096, GemmLayout::kNT), flops / 300e12,
              1e-12 * flops / 300e12);
  EXPECT_NEAR(gemm_seconds(gpu, 1, 129, 4096, 4096, GemmLayout::kTN), flops / 200e12,
              1e-12 * flops / 200e12);
  // The memory bound stays: a thin inner dimension at 1 GB/s.
  gpu.memory_bandwidth = 1e9;
  EXPECT_DOUBLE_EQ(gemm_seconds(gpu, 2, 64, 64, 8), 2.0 * 2 * (64 * 8 + 8 * 64 + 64 * 64) / 1e9);
}

TEST(GemmTableSeam, ABlocksForwardAndBackwardHalvesTakeTheNnNtAndTnRates) {
  const GemmTable table = flat_table();
  GpuSpec gpu{989e12, 0.5, 0.0, 0};
  gpu.sms = 132;
  gpu.gemm_table = &table;
  const GptShape g{4, 4096, 32, 2048, 32000};
  for (int t : {1, 2, 8}) {
    const GemmSeconds block = block_gemm_seconds(g, 2, t, gpu, true);
    const double f = block_forward_flops(g, 2) / t;
    EXPECT_NEAR(block.forward, f / 400e12, 1e-12 * f / 400e12);
    EXPECT_NEAR(block.input_grad, f / 300e12, 1e-12 * f / 300e12);
    EXPECT_NEAR(block.weight_grad, f / 200e12, 1e-12 * f / 200e12);
    const GemmSeconds head = head_gemm_seconds(g, 2, t, gpu);
    const double hf = head_forward_flops(g, 2) / t;
    EXPECT_NEAR(head.forward, hf / 400e12, 1e-12 * hf / 400e12);
    EXPECT_NEAR(head.input_grad, hf / 300e12, 1e-12 * hf / 300e12);
    EXPECT_NEAR(head.weight_grad, hf / 200e12, 1e-12 * hf / 200e12);
  }
}

TEST(GemmTableSeam, TheConfigKeyPicksABuiltInTableAndNamesAnUnknownOne) {
  auto load = [](const std::vector<std::string>& sets) {
    return cluster_from_config(Config::load_string("model: {type: gpt}\n", config_schema(), sets));
  };
  EXPECT_EQ(load({}).gpu.gemm_table, nullptr);  // unset: peak · efficiency · waves
  EXPECT_THAT([&] { load({"cluster.gpu.gemm_table=a100_guess"}); },
              ::testing::ThrowsMessage<ConfigError>(
                  ::testing::HasSubstr("cluster.gpu.gemm_table: no GEMM table 'a100_guess'")));
  for (const std::string& name : builtin_gemm_table_names()) {
    const GemmTable* table = load({"cluster.gpu.gemm_table=" + name}).gpu.gemm_table;
    ASSERT_NE(table, nullptr);
    EXPECT_EQ(table, &builtin_gemm_table(name, "key"));
    EXPECT_GT(table->rows(), 0u);
  }
}

TEST(GemmTableSeam, EachBuiltInTableReturnsEveryMeasuredRowOfItsFileAtItsShape) {
  // Read sim/gemm/NAME.csv here by hand (not by GemmTable::parse): every
  // row's 2·batch·m·n·k / ms comes back from the built-in table at its own
  // shape, so neither the build's embedding nor the interpolation's choice
  // of neighbours loses a measurement.
  ASSERT_FALSE(builtin_gemm_table_names().empty());
  for (const std::string& name : builtin_gemm_table_names()) {
    const GemmTable& table = builtin_gemm_table(name, "key");
    std::ifstream in(std::string(PSAR_SOURCE_DIR) + "/sim/gemm/" + name + ".csv");
    ASSERT_TRUE(in) << name;
    std::string line;
    std::getline(in, line);
    ASSERT_EQ(line.rfind("gpu,dtype,layout,batch,m,n,k,ms,tflops", 0), 0u) << name;
    size_t rows = 0;
    while (std::getline(in, line)) {
      std::vector<std::string> f;
      std::istringstream fields(line);
      for (std::string x; std::getline(fields, x, ',');) f.push_back(x);
      ASSERT_EQ(f.size(), 9u) << line;
      const GemmLayout layout = f[2] == "NN"   ? GemmLayout::kNN
                                : f[2] == "NT" ? GemmLayout::kNT
                                               : GemmLayout::kTN;
      const double b = std::stod(f[3]);
      const int64_t m = std::stoll(f[4]), n = std::stoll(f[5]), k = std::stoll(f[6]);
      const double want = 2 * b * static_cast<double>(m) * static_cast<double>(n) *
                          static_cast<double>(k) / (std::stod(f[7]) * 1e-3);
      EXPECT_NEAR(table.flops_per_s(layout, b, m, n, k), want, 1e-12 * want)
          << name << ": " << line;
      ++rows;
    }
    EXPECT_EQ(rows, table.rows()) << name;
  }
}

}  // namespace
}  // namespace psar::sim
