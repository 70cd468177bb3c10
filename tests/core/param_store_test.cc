#include <gtest/gtest.h>

#include "core/param_store.h"

namespace psar {
namespace {

TEST(ParamStore, ParametersAreContiguousViewsInRegistrationOrder) {
  ParamStore s;
  s.add("a", {2, 3}, Init::normal(1.0f));
  s.add("b", {4}, Init::ones());
  s.finalize(5);
  EXPECT_EQ(s.size(), 10);
  EXPECT_EQ(s.param("a").data(), s.params().data());
  EXPECT_EQ(s.param("b").data(), s.params().data() + 6);
  EXPECT_EQ(s.grad("b").data(), s.grads().data() + 6);
  EXPECT_EQ(s.param("b")[3], 1.0f);
  s.grad("a")[0] = 3;
  s.zero_grads();
  EXPECT_EQ(s.grads()[0], 0.0f);
}

TEST(ParamStore, InitialValuesDependOnlyOnSeedNameAndIndex) {
  // Two stores with different layouts agree on a shared parameter; a slice
  // initialized alone equals the slice of the full tensor.
  ParamStore s1, s2;
  s1.add("w", {8, 8}, Init::normal(0.5f));
  s2.add("other", {3}, Init::normal(1.0f));
  s2.add("w", {8, 8}, Init::normal(0.5f));
  s1.finalize(9);
  s2.finalize(9);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(s1.param("w")[i], s2.param("w")[i]);
  std::vector<float> slice(16);
  ParamStore::initialize(s1.info("w"), 9, slice, 24);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(slice[i], s1.param("w")[24 + i]);
  ParamStore s3;
  s3.add("w", {8, 8}, Init::normal(0.5f));
  s3.finalize(10);
  EXPECT_NE(s3.param("w")[0], s1.param("w")[0]);
}

TEST(ParamStore, NormalInitHasTheRequestedSpread) {
  ParamStore s;
  s.add("w", {100000}, Init::normal(2.0f));
  s.finalize(1);
  double sum = 0, sq = 0;
  for (float v : s.params()) sum += v, sq += double{v} * v;
  const double mean = sum / 1e5, var = sq / 1e5 - mean * mean;
  EXPECT_NEAR(mean, 0.0, 0.03);
  EXPECT_NEAR(var, 4.0, 0.1);
}

}  // namespace
}  // namespace psar
