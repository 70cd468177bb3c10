#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/csv.h"

namespace psar {
namespace {

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(Csv, QuotesFieldsThatNeedIt) {
  CsvWriter w({"a", "b"});
  w.row({"x,y", "say \"hi\""});
  EXPECT_EQ(w.text(), "a,b\n\"x,y\",\"say \"\"hi\"\"\"\n");
}

TEST(Csv, AtomicFileAppearsOnlyOnCommit) {
  const auto dir = std::filesystem::temp_directory_path() / "psar_csv_test";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "out.csv").string();
  std::filesystem::remove(path);
  {
    AtomicFile f(path);
    f.stream() << "half";
    // destroyed without commit: as if the process crashed mid-write
  }
  EXPECT_FALSE(std::filesystem::exists(path));
  for (const auto& e : std::filesystem::directory_iterator(dir))
    ADD_FAILURE() << "left behind: " << e.path();
  write_file_atomic(path, "whole\n");
  EXPECT_EQ(read(path), "whole\n");
  std::filesystem::remove_all(dir);
}

TEST(Csv, ReplacingAndAppendingLeaveOnlyTheFile) {
  const auto dir = std::filesystem::temp_directory_path() / "psar_csv_append_test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "steps.csv").string();
  write_file_atomic(path, "old\n");
  write_file_atomic(path, "header\n");  // replaces
  append_file_durable(path, "row 1\n");
  append_file_durable(path, "row 2\n");
  EXPECT_EQ(read(path), "header\nrow 1\nrow 2\n");
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    ++files;
    EXPECT_EQ(e.path().filename(), "steps.csv") << "left behind: " << e.path();
  }
  EXPECT_EQ(files, 1);
  CsvWriter w({"a"});
  w.row({"1"});
  EXPECT_EQ(w.header(), "a\n");
  EXPECT_EQ(w.take_new_rows(), "1\n");
  EXPECT_EQ(w.take_new_rows(), "");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace psar
