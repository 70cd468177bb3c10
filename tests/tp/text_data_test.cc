// Token datasets: character-level windows of a text file (vocabulary, shift
// by one, 90/10 split, errors naming the file) and the synthetic Markov
// tokens (deterministic, in range, with structure to learn).

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>

#include "core/errors.h"
#include "workloads/text_data.h"

namespace psar {
namespace {

std::string write_text(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(TextData, WindowsAreShiftedByOneOverTheSortedCharacterVocabulary) {
  // 100 characters "dcba" repeated: vocabulary a=0, b=1, c=2, d=3.
  std::string text;
  for (int i = 0; i < 25; ++i) text += "dcba";
  const DatasetPair d = load_text(write_text("dcba.txt", text), 4);
  EXPECT_EQ(d.train->classes(), 4);
  EXPECT_EQ(d.train->size(), (90 - 5) / 4 + 1);  // the first 90 characters, windows of 5
  EXPECT_EQ(d.test->size(), (10 - 5) / 4 + 1);
  Batch b;
  const std::vector<int64_t> rows = {0, 1};
  d.train->gather(rows, b);
  EXPECT_EQ(b.size, 2);
  EXPECT_EQ(b.tokens, (std::vector<int32_t>{3, 2, 1, 0, 3, 2, 1, 0}));
  EXPECT_EQ(b.targets, (std::vector<int32_t>{2, 1, 0, 3, 2, 1, 0, 3}));
  d.train->truncate(3);
  EXPECT_EQ(d.train->size(), 3);
}

TEST(TextData, TooShortOrMissingFilesAreDataErrorsNamingThem) {
  const std::string short_path = write_text("short.txt", "abcdefgh");
  try {
    load_text(short_path, 4);
    FAIL() << "no error";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find(short_path), std::string::npos) << e.what();
  }
  EXPECT_THROW(resolve_text_path(::testing::TempDir() + "/no_such_corpus.txt"), DataError);
}

TEST(TextData, APathToAFileIsUsedAndAFolderMeansTheDefaultCorpus) {
  const std::string file = write_text("corpus.txt", "hello");
  EXPECT_EQ(resolve_text_path(file), file);
  EXPECT_EQ(resolve_text_path(::testing::TempDir()), kDefaultTextPath);
}

TEST(TextData, TheDefaultFortunesCorpusLoadsWhenInstalled) {
  if (!std::filesystem::exists(kDefaultTextPath))
    GTEST_SKIP() << kDefaultTextPath << " is not installed (Debian package fortunes-min)";
  const DatasetPair d = load_text(kDefaultTextPath, 32);
  EXPECT_GT(d.train->size(), 500);
  EXPECT_GT(d.train->classes(), 40);  // letters, digits, punctuation, newline
  EXPECT_LT(d.train->classes(), 128);
}

TEST(SyntheticTokens, DeterministicInRangeAndMostlyFollowingFavouredSuccessors) {
  const int64_t V = 16, T = 31, S = 200;
  const DatasetPair a = make_synthetic_tokens(S, T, V, 5), b = make_synthetic_tokens(S, T, V, 5);
  const DatasetPair c = make_synthetic_tokens(S, T, V, 6);
  std::vector<int64_t> rows(S);
  std::iota(rows.begin(), rows.end(), 0);
  Batch ba, bb, bc;
  a.train->gather(rows, ba), b.train->gather(rows, bb), c.train->gather(rows, bc);
  EXPECT_EQ(ba.tokens, bb.tokens);
  EXPECT_NE(ba.tokens, bc.tokens);
  EXPECT_EQ(a.test->size(), S / 4);
  // Transition counts: the 4 most frequent successors of each token carry
  // about 0.8 + 0.2·4/16 = 0.85 of its transitions (uniform would be 0.25).
  std::map<int, std::map<int, int>> next;
  int total = 0;
  for (int64_t i = 0; i < S * T; ++i) {
    ASSERT_GE(ba.tokens[i], 0);
    ASSERT_LT(ba.tokens[i], V);
    next[ba.tokens[i]][ba.targets[i]]++;  // every (token, next token) pair
    ++total;
  }
  int top = 0;
  for (auto& [tok, succ] : next) {
    std::vector<int> counts;
    for (auto& [s, n] : succ) counts.push_back(n);
    std::sort(counts.rbegin(), counts.rend());
    for (size_t k = 0; k < std::min<size_t>(4, counts.size()); ++k) top += counts[k];
  }
  EXPECT_GT(static_cast<double>(top) / total, 0.75);
}

}  // namespace
}  // namespace psar
