#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/csv.h"
#include "core/errors.h"

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

// A full disk mid-append (here: the file size limit, RLIMIT_FSIZE, which
// lets the write put part of the block in the file and then fails it with
// EFBIG): the append throws and the file is cut back to the rows it held, so
// no reader sees half a block. In a child process: the limit is per process.
TEST(Csv, AFailedAppendIsCutBackToTheLastWholeRow) {
  const auto path = (std::filesystem::temp_directory_path() /
                     ("psar_csv_full_" + std::to_string(::getpid()) + ".csv"))
                        .string();
  const std::string before = "step,loss\n1,0.5\n2,0.4\n";
  std::ofstream(path) << before;
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{static_cast<rlim_t>(before.size() + 7), static_cast<rlim_t>(before.size() + 7)};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    try {
      psar::append_file_durable(path, "3,0.3\n4,0.2\n5,0.1\n");
    } catch (const psar::Error& e) {
      const bool named = std::string(e.what()).find("cut back to its last whole row") !=
                         std::string::npos;
      std::_Exit(named ? 0 : 2);
    }
    std::_Exit(1);  // the append did not fail: the limit did not bite
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: no error; 2: an error without the cut";
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(ss.str(), before);
  // The control: without the limit the same append lands whole.
  psar::append_file_durable(path, "3,0.3\n");
  std::ifstream again(path);
  std::stringstream all;
  all << again.rdbuf();
  EXPECT_EQ(all.str(), before + "3,0.3\n");
  std::filesystem::remove(path);
}
